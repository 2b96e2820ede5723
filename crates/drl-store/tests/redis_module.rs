//! `engine: module` against servers WITHOUT drl's module: a clear error that
//! names the server and says how to fix it (never a silent fallback to the
//! scripts), the failure policy still applies; a cluster refuses to connect.

mod common;

use common::{RedisCluster, RedisServer};
use drl_core::{Algorithm, Quota};
use drl_store::{
    BreakerConfig, BreakerState, Check, Engine, FailurePolicy, LimitSpec, OnStoreError,
    RedisConfig, RedisStore, ResilienceConfig, Resilient, Store, StoreError,
};

fn spec() -> LimitSpec {
    LimitSpec::new("m", Algorithm::Gcra, vec![Quota::parse("10/h").unwrap()])
}

fn assert_clear(e: &StoreError, server: &str) {
    let text = e.to_string();
    assert!(matches!(e, StoreError::Backend(_)), "{e:?}");
    for part in [
        server,
        "--loadmodule",
        "libdrl_redis_module.so",
        "engine: lua",
    ] {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_module_is_a_clear_error_and_the_policy_applies() {
    // A password, to check that errors do not show it.
    let server = RedisServer::start();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("secret")
        .query(&mut server.admin())
        .unwrap();
    let url = format!("redis://:secret@127.0.0.1:{}", server.port);
    let cfg = RedisConfig {
        engine: Engine::Module,
        ..RedisConfig::single(url.clone())
    };
    // Connecting a single server is lazy: the module is checked on first use.
    let store = RedisStore::connect(&cfg).await.unwrap();
    let s = spec();
    let c = Check {
        spec: &s,
        key: "k",
        cost: 1,
        now: 0,
    };
    let e = store.decide(c).await.unwrap_err();
    assert_clear(&e, &format!("redis://:***@127.0.0.1:{}", server.port));
    assert!(!e.to_string().contains("secret"), "password leaked: {e}");
    // Every call says so again (nothing was written, no Lua fallback).
    let e = store.decide_many(&[c, c]).await;
    assert!(e.iter().all(|r| r.is_err()), "{e:?}");
    assert_eq!(store.load_script().await.unwrap_err().to_string(), {
        store.decide(c).await.unwrap_err().to_string()
    });
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    assert_eq!(keys, 0, "nothing decided by Lua behind our back");

    // It is a store error like any other: on_store_error decides, and the
    // breaker opens.
    for (on, admitted) in [(OnStoreError::Allow, 12), (OnStoreError::Deny, 0)] {
        let r = Resilient::new(
            RedisStore::connect(&cfg).await.unwrap(),
            ResilienceConfig {
                default_policy: FailurePolicy::on_error(on),
                breaker: BreakerConfig {
                    failure_threshold: 3,
                    open_ms: 60_000,
                    max_in_flight: 100,
                },
                ..ResilienceConfig::default()
            },
        );
        let mut ok = 0;
        for i in 0..12 {
            let c = Check { now: i, ..c };
            ok += r.decide(c).await.unwrap().allowed as u64;
        }
        assert_eq!(ok, admitted, "{on:?}");
        assert_eq!(r.breaker_state(), BreakerState::Open, "{on:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_module_refuses_to_connect() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3));
    let cfg = RedisConfig {
        engine: Engine::Module,
        ..RedisConfig::cluster(cluster.urls())
    };
    let e = RedisStore::connect(&cfg).await.unwrap_err();
    // Names a node (the first that answered "unknown command").
    let text = e.to_string();
    assert!(
        cluster
            .nodes
            .iter()
            .any(|n| text.contains(&format!("127.0.0.1:{}", n.port))),
        "{text}"
    );
    assert_clear(&e, "127.0.0.1:");
    // The same cluster with the Lua engine is fine.
    let lua = RedisStore::connect(&RedisConfig::cluster(cluster.urls()))
        .await
        .unwrap();
    let s = spec();
    let d = lua
        .decide(Check {
            spec: &s,
            key: "k",
            cost: 1,
            now: 0,
        })
        .await
        .unwrap();
    assert!(d.allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_share_keys_and_the_module_replicates_effects() {
    // A module server and a replica WITHOUT the module: the module
    // propagates its writes as SET PX, so the replica follows.
    let primary = RedisServer::start_module();
    let replica =
        RedisServer::start_with_free_port(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let cfg = |engine| RedisConfig {
        engine,
        ..RedisConfig::single(primary.url())
    };
    let lua = RedisStore::connect(&cfg(Engine::Lua)).await.unwrap();
    let module = RedisStore::connect(&cfg(Engine::Module)).await.unwrap();
    let s = spec();
    let mut ok = 0;
    // Alternate engines on one key (Redis clock): one shared quota of 10.
    for i in 0..16 {
        let store = if i % 2 == 0 { &lua } else { &module };
        let c = Check {
            spec: &s,
            key: "shared",
            cost: 1,
            now: 0,
        };
        ok += store.decide(c).await.unwrap().allowed as u64;
    }
    assert_eq!(ok, 10, "both engines count against one quota");
    // The last admitted request (the 10th, i = 9) was the module's.
    let key = lua.keys(&s, "shared")[0].clone();
    let want: String = redis::cmd("GET")
        .arg(&key)
        .query(&mut primary.admin())
        .unwrap();
    tokio::task::block_in_place(|| {
        common::wait_until(
            std::time::Duration::from_secs(10),
            "the replica to have the module's state",
            || {
                redis::cmd("GET")
                    .arg(&key)
                    .query::<Option<String>>(&mut replica.admin())
                    .ok()
                    .flatten()
                    == Some(want.clone())
            },
        )
    });
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query(&mut replica.admin())
        .unwrap();
    assert!(ttl > 0, "the replica's copy expires too: {ttl}");
}
