//! RedisStore against a real 3-master Redis Cluster: multi-quota requests on
//! keys spread over every node (hash tags keep one request in one slot),
//! and decisions that carry on exactly through a slot migration (ASK while
//! it runs, MOVED after) and through the failover of a killed master to its
//! replica. The multi-quota and migration case runs with both engines.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::RedisCluster;
use drl_core::{Algorithm, Quota, State};
use drl_store::{Check, Engine, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};

/// drl-core's decisions for one spec, one state per key.
struct Reference {
    spec: LimitSpec,
    states: BTreeMap<String, Vec<State>>,
}

impl Reference {
    fn new(spec: &LimitSpec) -> Self {
        Self {
            spec: spec.clone(),
            states: BTreeMap::new(),
        }
    }

    async fn check(&mut self, store: &RedisStore, key: &str, now: u64, cost: u64) -> bool {
        let limiter = self.spec.limiter();
        let states = self
            .states
            .entry(key.to_string())
            .or_insert_with(|| limiter.new_states());
        let want = limiter.decide(states, now, cost);
        let got = store
            .decide(Check {
                spec: &self.spec,
                key,
                cost,
                now,
            })
            .await
            .unwrap_or_else(|e| panic!("{key} at {now}: {e}"));
        assert_eq!(got, want, "{key} at {now}");
        got.allowed
    }
}

async fn connect(cluster: &RedisCluster, engine: Engine) -> RedisStore {
    let mut cfg = RedisConfig::cluster(cluster.urls());
    cfg.time = TimeSource::Caller;
    cfg.engine = engine;
    cfg.expiry_grace_ms = 600_000;
    let store = RedisStore::connect(&cfg).await.unwrap();
    store.load_script().await.unwrap();
    store
}

fn dbsize(cluster: &RedisCluster, i: usize) -> i64 {
    redis::cmd("DBSIZE")
        .query(&mut cluster.nodes[i].admin())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_multi_quota_and_slot_migration() {
    multi_quota_and_slot_migration(Engine::Lua).await;
}

/// The same with `engine: module` on 3 masters that each load the module:
/// `DRL.DECIDE`'s key spec routes it, ASK and MOVED are followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_multi_quota_and_slot_migration_module() {
    multi_quota_and_slot_migration(Engine::Module).await;
}

async fn multi_quota_and_slot_migration(engine: Engine) {
    let cluster = tokio::task::block_in_place(|| match engine {
        Engine::Lua => RedisCluster::start(3),
        Engine::Module => RedisCluster::start_module(3),
    });
    let store = connect(&cluster, engine).await;

    // Multi-quota limits for many keys, over every algorithm.
    let mut refs = Vec::new();
    for (i, alg) in Algorithm::ALL.into_iter().enumerate() {
        let spec = LimitSpec::new(
            format!("multi-{i}"),
            alg,
            vec![
                Quota::with_burst(3, 1_000_000_000, 3).unwrap(),
                Quota::new(5, 60_000_000_000).unwrap(),
            ],
        );
        refs.push(Reference::new(&spec));
    }
    let t0 = 1_763_000_000_000_000_000u64;
    let mut admitted = 0;
    for step in 0..12u64 {
        for r in refs.iter_mut() {
            for k in 0..12 {
                let key = format!("tenant-{k}");
                admitted += r.check(&store, &key, t0 + step * 400_000_000, 1).await as u64;
            }
        }
    }
    assert!(admitted > 0);
    for i in 0..3 {
        assert!(
            dbsize(&cluster, i) > 0,
            "node {i} holds no key: keys are not spread"
        );
    }
    // One request's keys share a slot.
    let keys = store.keys(&refs[0].spec, "tenant-0");
    assert_eq!(cluster.slot(&keys[0]), cluster.slot(&keys[1]));

    // Slot migration: state moves with the keys, decisions stay exact.
    let spec = LimitSpec::new(
        "moving",
        Algorithm::Gcra,
        vec![Quota::new(10, 1_000_000_000_000).unwrap()],
    );
    let mut r = Reference::new(&spec);
    let key = "mover";
    for i in 0..4 {
        assert!(r.check(&store, key, t0 + i, 1).await);
    }
    let slot = cluster.slot(&store.keys(&spec, key)[0]);
    let from = cluster.owner(slot);
    let to = (from + 1) % 3;
    let handle = tokio::runtime::Handle::current();
    let mut mid_checks = 0;
    tokio::task::block_in_place(|| {
        cluster.migrate_slot_with(slot, from, to, || {
            // Keys already on `to`, slot still owned by `from`: ASK.
            handle.block_on(async {
                for i in 0..2 {
                    assert!(r.check(&store, key, t0 + 10 + i, 1).await);
                    mid_checks += 1;
                }
            });
        })
    });
    assert_eq!(mid_checks, 2);
    assert_eq!(cluster.owner(slot), to);
    // MOVED: the client learns the new owner; 10 - 6 = 4 permits left.
    let mut ok = 0;
    for i in 0..6 {
        ok += r.check(&store, key, t0 + 20 + i, 1).await as u64;
    }
    assert_eq!(ok, 4);
    // Batches on a cluster work too (concurrent, per-node pipelines).
    let c = Check {
        spec: &spec,
        key,
        cost: 0,
        now: t0 + 30,
    };
    let many = store.decide_many(&[c, c, c]).await;
    assert!(many.iter().all(|d| d.as_ref().unwrap().remaining == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_to_a_replica() {
    failover_to_a_replica(Engine::Lua).await;
}

/// With the module engine, every node (replicas too) loads the module: a
/// promoted replica must decide with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_to_a_replica_module() {
    failover_to_a_replica(Engine::Module).await;
}

async fn failover_to_a_replica(engine: Engine) {
    let with_module = engine == Engine::Module;
    let mut cluster = tokio::task::block_in_place(|| {
        RedisCluster::start_with_replicas_and_module(3, 1, with_module)
    });
    let store = connect(&cluster, engine).await;
    let spec = LimitSpec::new(
        "failover",
        Algorithm::Gcra,
        vec![Quota::new(10, 1_000_000_000_000).unwrap()],
    );
    let mut r = Reference::new(&spec);
    let t0 = 1_763_000_000_000_000_000u64;
    for i in 0..4 {
        assert!(r.check(&store, "k", t0 + i, 1).await);
    }
    let slot = cluster.slot(&store.keys(&spec, "k")[0]);
    let master = cluster.owner(slot);
    // Replication is asynchronous: wait until the master's replica has the
    // state, so that the failover must keep it.
    let key0 = store.keys(&spec, "k")[0].clone();
    let want: String = redis::cmd("GET")
        .arg(&key0)
        .query(&mut cluster.nodes[master].admin())
        .unwrap();
    let master_id = cluster.node_id(master);
    tokio::task::block_in_place(|| {
        common::wait_until(
            Duration::from_secs(10),
            "the replica to have the state",
            || {
                cluster.nodes.iter().any(|s| {
                    let mut c = s.admin();
                    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
                    let me = nodes
                        .lines()
                        .find(|l| l.contains("myself"))
                        .unwrap()
                        .to_string();
                    if !me.contains(&format!("slave {master_id}")) {
                        return false;
                    }
                    let _: () = redis::cmd("READONLY").query(&mut c).unwrap();
                    redis::cmd("GET")
                        .arg(&key0)
                        .query::<Option<String>>(&mut c)
                        .unwrap()
                        == Some(want.clone())
                })
            },
        )
    });
    tokio::task::block_in_place(|| cluster.nodes[master].kill());
    tokio::task::block_in_place(|| {
        common::wait_until(Duration::from_secs(30), "the replica to take over", || {
            cluster.owner_opt(slot).is_some()
        })
    });
    assert_ne!(cluster.owner(slot), master);
    // The client finds the new master (its first attempts may still fail).
    let probe = Check {
        spec: &spec,
        key: "k",
        cost: 0,
        now: t0 + 5,
    };
    common::wait_until_async(
        Duration::from_secs(10),
        "decisions on the new master",
        || async { store.decide(probe).await.is_ok() },
    )
    .await;
    // The state survived the failover: 10 - 4 = 6 permits left, exactly.
    let mut ok = 0;
    for i in 0..8 {
        ok += r.check(&store, "k", t0 + 10 + i, 1).await as u64;
    }
    assert_eq!(ok, 6);
}
