//! Batched script calls against a real `redis-server` (and a real 3-master
//! cluster): one call deciding many requests in order decides exactly as
//! drl-core deciding them one by one (random traces over a few keys,
//! repeated keys within a call, multi-quota all-or-nothing), concurrent
//! `decide` calls really share calls, `NOSCRIPT` after `SCRIPT FLUSH` is
//! recovered for a whole batch, and a batch that times out fails over per
//! decision (and callers that gave up are not sent later). The module
//! engine (`DRL.DECIDE`) runs the same differential cases and batching.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{RedisCluster, RedisServer, StoreEnv, unique};
use drl_core::{Algorithm, Decision, DenyReason, Quota, State};
use drl_store::{
    BreakerConfig, Check, Engine, FailurePolicy, LimitSpec, OnStoreError, RedisConfig, RedisStore,
    ResilienceConfig, Resilient, Store, TimeSource,
};
use futures::future::join_all;
use proptest::prelude::*;

/// Caller time; coalescing with one call in flight, so concurrent
/// decisions queue and share calls.
fn caller_config(url: String) -> RedisConfig {
    let mut cfg = RedisConfig::single(url);
    cfg.time = TimeSource::Caller;
    // Synthetic time runs far ahead of real time: keep keys for the test.
    cfg.expiry_grace_ms = 3_600_000;
    cfg.batch_in_flight = Some(1);
    cfg
}

fn env() -> &'static StoreEnv {
    static ENV: OnceLock<StoreEnv> = OnceLock::new();
    ENV.get_or_init(|| StoreEnv::start(caller_config))
}

/// Quotas that take the fast scripts (whole-second windows, small
/// capacities) and ones that need the general script.
fn quota() -> impl Strategy<Value = Quota> {
    let window = prop_oneof![
        (1u64..120).prop_map(|s| s * 1_000_000_000),
        1u64..5_000,
        1_000_000u64..5_000_000_000,
        (1u64 << 60)..u64::MAX,
    ];
    let limit = prop_oneof![4 => 1u64..8, 1 => 1u64..u64::MAX];
    (
        window,
        limit,
        prop_oneof![Just(None), (1u64..10).prop_map(Some)],
    )
        .prop_filter_map("valid quota", |(w, l, b)| {
            Quota::with_burst(l, w, b.unwrap_or(l)).ok()
        })
}

/// One step: which of 3 keys, time step (sometimes backwards), cost.
fn steps(window: u64) -> impl Strategy<Value = Vec<(usize, u64, u64)>> {
    let step = (
        0usize..3,
        prop_oneof![
            3 => Just(0i128),
            3 => 0i128..=(window as i128 / 3).max(1),
            1 => 0i128..=(window as i128).saturating_mul(2).max(1),
            1 => -(window as i128 / 4).max(1)..0i128,
        ],
        prop_oneof![6 => Just(1u64), 2 => 0u64..10, 1 => any::<u64>()],
    );
    prop::collection::vec(step, 1..60).prop_map(|v| {
        v.into_iter()
            .map(|(k, dt, c)| (k, dt.clamp(-(1 << 62), 1 << 62) as u64, c))
            .collect()
    })
}

type Trace = Vec<(usize, u64, u64)>;

fn case() -> impl Strategy<Value = (LimitSpec, u64, Trace, Vec<usize>)> {
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (algorithm, prop::collection::vec(quota(), 1..=3)).prop_flat_map(|(alg, quotas)| {
        let w = quotas[0].window();
        let spec = LimitSpec::new(unique("b"), alg, quotas);
        let start = prop_oneof![
            0u64..1_000,
            1_700_000_000_000_000_000u64..1_900_000_000_000_000_000,
            (u64::MAX - (1u64 << 40))..u64::MAX,
        ];
        (
            Just(spec),
            start,
            steps(w),
            prop::collection::vec(1usize..16, 1..20),
        )
    })
}

/// Absolute (key, now, cost) rows from a start and signed steps.
fn rows(start: u64, trace: &Trace) -> Vec<(usize, u64, u64)> {
    let mut now = start as i128;
    trace
        .iter()
        .map(|&(k, dt, cost)| {
            now = (now + dt as i64 as i128).clamp(0, u64::MAX as i128);
            (k, now as u64, cost)
        })
        .collect()
}

/// drl-core deciding the rows one by one, per key.
fn reference(spec: &LimitSpec, rows: &[(usize, u64, u64)]) -> Vec<Decision> {
    let limiter = spec.limiter();
    let mut states: HashMap<usize, Vec<State>> = HashMap::new();
    rows.iter()
        .map(|&(k, now, cost)| {
            let s = states.entry(k).or_insert_with(|| limiter.new_states());
            limiter.decide(s, now, cost)
        })
        .collect()
}

/// The rows cut into batches of the given sizes (cycled), decided by
/// `decide_many` (`many`) or by concurrent `decide` calls (coalesced).
async fn through(
    store: &RedisStore,
    spec: &LimitSpec,
    keys: &[String],
    rows: &[(usize, u64, u64)],
    sizes: &[usize],
    many: bool,
) -> Vec<Decision> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut sizes = sizes.iter().cycle();
    while at < rows.len() {
        let n = (*sizes.next().unwrap()).min(rows.len() - at);
        let checks: Vec<Check<'_>> = rows[at..at + n]
            .iter()
            .map(|&(k, now, cost)| Check {
                spec,
                key: &keys[k],
                cost,
                now,
            })
            .collect();
        let got = if many {
            store.decide_many(&checks).await
        } else {
            join_all(checks.iter().map(|c| store.decide(*c))).await
        };
        out.extend(got.into_iter().map(|r| r.expect("store decided")));
        at += n;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Batches (with repeated keys) decide exactly as drl-core one by one,
    /// through `decide_many` and through coalesced concurrent `decide`s,
    /// with the fast and the general scripts and with the module.
    #[test]
    fn batches_decide_like_drl_core((spec, start, trace, sizes) in case()) {
        let env = env();
        let rows = rows(start, &trace);
        let want = reference(&spec, &rows);
        for ((_, store), many) in env.engines().into_iter().flat_map(|e| [(e, true), (e, false)]) {
            let keys = [unique("x"), unique("y"), unique("z")];
            let got = env.rt.block_on(through(store, &spec, &keys, &rows, &sizes, many));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert_eq!(g, w, "row {} {:?} (many: {}, fast: {}, engine: {:?}) of {:?}", i, rows[i], many, store.config().fast_path, store.config().engine, spec);
            }
        }
    }
}

/// Decision calls Redis has run for `engine`: `EVALSHA` or `DRL.DECIDE`.
fn decision_calls(admin: &mut redis::Connection, engine: Engine) -> u64 {
    let stat = match engine {
        Engine::Lua => "cmdstat_evalsha:calls=",
        Engine::Module => "cmdstat_drl.decide:calls=",
    };
    let info: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(stat))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A runtime of two worker threads: the batcher runs beside the callers.
fn two_threads() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A store on `cfg` with its script loaded.
async fn connected(cfg: &RedisConfig) -> RedisStore {
    let store = RedisStore::connect(cfg).await.unwrap();
    store.load_script().await.unwrap();
    store
}

fn fixed(alg: Algorithm, quotas: &[&str]) -> LimitSpec {
    LimitSpec::new(
        unique("fixed"),
        alg,
        quotas.iter().map(|q| Quota::parse(q).unwrap()).collect(),
    )
}

#[test]
fn concurrent_decisions_share_calls_and_admit_exactly_the_quota() {
    let server = RedisServer::start_module();
    let mut admin = server.admin();
    two_threads().block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            // The default: Redis TIME, up to 2 calls in flight.
            let cfg = RedisConfig {
                engine,
                ..RedisConfig::single(server.url())
            };
            let store = connected(&cfg).await;
            let spec = Arc::new(fixed(Algorithm::Gcra, &["100/h"]));
            // Idle: a lone decision is one call of its own, sent at once.
            let before = decision_calls(&mut admin, engine);
            let c = Check {
                spec: &spec,
                key: "solo",
                cost: 1,
                now: 0,
            };
            assert!(store.decide(c).await.unwrap().allowed);
            assert_eq!(decision_calls(&mut admin, engine) - before, 1);

            let before = decision_calls(&mut admin, engine);
            let tasks: Vec<_> = (0..400)
                .map(|_| {
                    let (store, spec) = (store.clone(), spec.clone());
                    tokio::spawn(async move {
                        let c = Check {
                            spec: &spec,
                            key: "hot",
                            cost: 1,
                            now: 0,
                        };
                        store.decide(c).await.unwrap().allowed
                    })
                })
                .collect();
            let mut admitted = 0;
            for t in tasks {
                admitted += t.await.unwrap() as u64;
            }
            let calls = decision_calls(&mut admin, engine) - before;
            assert_eq!(admitted, 100, "exactly the quota ({engine:?})");
            assert!(
                calls < 400 / 4,
                "{engine:?}: 400 concurrent decisions took {calls} calls: not coalesced"
            );
        }
    });
}

/// A caller's batch submitted in one poll under [`drl_store::coalesce`]
/// reaches the batcher as one message: 150 decisions take exactly
/// `ceil(150 / batch_max)` calls, however the runtime's threads
/// interleave (without it, the batcher on another thread may start on the
/// first decisions while the rest are still being submitted).
#[test]
fn a_coalesced_batch_takes_the_fewest_calls_whatever_the_threads_do() {
    let server = RedisServer::start_module();
    let mut admin = server.admin();
    two_threads().block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            let cfg = RedisConfig {
                engine,
                ..RedisConfig::single(server.url())
            };
            let store = connected(&cfg).await;
            let spec = fixed(Algorithm::Gcra, &["100/h"]);
            let key = format!("coalesced-{engine:?}");
            for round in 0..20 {
                let before = decision_calls(&mut admin, engine);
                let checks = (0..150).map(|_| {
                    store.decide(Check {
                        spec: &spec,
                        key: &key,
                        cost: 1,
                        now: 0,
                    })
                });
                let got = drl_store::coalesce(join_all(checks)).await;
                let calls = decision_calls(&mut admin, engine) - before;
                assert_eq!(
                    calls,
                    150u64.div_ceil(cfg.batch_max as u64),
                    "{engine:?}, round {round}"
                );
                let admitted = got.iter().filter(|d| d.as_ref().unwrap().allowed).count();
                // In order: the first 100 of the first round, then none.
                assert_eq!(admitted, if round == 0 { 100 } else { 0 }, "{engine:?}");
                if round == 0 {
                    assert!(got[..100].iter().all(|d| d.as_ref().unwrap().allowed));
                }
            }
        }
    });
}

#[test]
fn multi_quota_is_all_or_nothing_within_one_call() {
    let env = env();
    env.rt.block_on(async {
        // 2 per second and 3 per hour: the hourly quota runs out first and a
        // denied decision must not consume the per-second one.
        let spec = fixed(Algorithm::FixedWindow, &["2/s", "3/h"]);
        let general = fixed(Algorithm::SlidingWindow, &["2/1500ms", "3/h"]);
        for (store, spec) in [
            (&env.store, &spec),
            (&env.general, &general),
            (&env.module, &spec),
            (&env.module, &general),
        ] {
            let now = 1_763_000_000_000_000_000u64;
            let rows: Vec<(usize, u64, u64)> = vec![
                (0, now, 1),
                (0, now, 1),
                (0, now, 1), // over 2/s
                (1, now, 2),
                (0, now + 1_000_000_000, 1),
                (0, now + 1_000_000_000, 1), // over 3/h
                (1, now + 1_000_000_000, 1),
                (0, now + 2_000_000_000, 0), // query
            ];
            let keys = [unique("m"), unique("n"), unique("o")];
            let want = reference(spec, &rows);
            let got = through(store, spec, &keys, &rows, &[rows.len()], true).await;
            assert_eq!(got, want);
            let verdicts: Vec<bool> = got.iter().map(|d| d.allowed).collect();
            if spec.algorithm == Algorithm::FixedWindow {
                assert_eq!(verdicts, [true, true, false, true, true, false, true, true]);
            } else {
                // The sliding window still counts the previous window.
                assert_eq!(
                    verdicts,
                    [true, true, false, true, false, false, false, true]
                );
            }
            // What is stored is drl-core's state after the batch.
            let limiter = spec.limiter();
            let mut states = limiter.new_states();
            for &(k, now, cost) in &rows {
                if k == 0 {
                    limiter.decide(&mut states, now, cost);
                }
            }
            let mut admin = redis::Client::open(store.config().url.clone().unwrap())
                .unwrap()
                .get_connection()
                .unwrap();
            for (i, key) in store.keys(spec, &keys[0]).iter().enumerate() {
                let raw: String = redis::cmd("GET").arg(key).query(&mut admin).unwrap();
                let want = match &states[i] {
                    State::FixedWindow(s) => format!("{} {} {}", s.last, s.index, s.count),
                    State::SlidingWindow(s) => {
                        format!("{} {} {} {}", s.last, s.index, s.prev, s.curr)
                    }
                    other => panic!("{other:?}"),
                };
                assert_eq!(raw, want, "quota {i}");
            }
        }
    });
}

#[test]
fn noscript_after_script_flush_is_recovered_for_a_whole_batch() {
    let env = env();
    env.rt.block_on(async {
        let mut admin = redis::Client::open(env.store.config().url.clone().unwrap())
            .unwrap()
            .get_connection()
            .unwrap();
        let spec = fixed(Algorithm::TokenBucket, &["5/h"]);
        let general = fixed(Algorithm::FixedWindow, &["5/1500ms"]);
        for spec in [&spec, &general] {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
            // Coalesced: 8 concurrent decisions on one key.
            let checks: Vec<Check<'_>> = (0..8)
                .map(|_| Check {
                    spec,
                    key: "k",
                    cost: 1,
                    now: 10,
                })
                .collect();
            let got = join_all(checks.iter().map(|c| env.store.decide(*c))).await;
            let admitted = got.iter().filter(|d| d.as_ref().unwrap().allowed).count();
            assert_eq!(admitted, 5, "{got:?}");
            // decide_many, after another flush.
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
            let got = env.store.decide_many(&checks).await;
            assert!(got.iter().all(|d| !d.as_ref().unwrap().allowed), "{got:?}");
        }
    });
}

#[test]
fn a_batch_that_times_out_fails_over_per_decision() {
    let server = RedisServer::start();
    two_threads().block_on(async {
        let mut cfg = RedisConfig::single(server.url());
        cfg.time = TimeSource::Caller;
        // The policy's deadline, not the connection's, ends the wait.
        cfg.response_timeout_ms = 120_000;
        let store = connected(&cfg).await;
        // Met by a live Redis on a loaded machine (25 ms sometimes was not).
        let timeout_ms = 1_000;
        let resilient = Resilient::new(
            store.clone(),
            ResilienceConfig {
                default_policy: FailurePolicy {
                    timeout_ms,
                    on_store_error: OnStoreError::Deny,
                    local_divisor: 1,
                },
                breaker: BreakerConfig {
                    failure_threshold: 1000,
                    open_ms: 100,
                    max_in_flight: 1000,
                },
                ..ResilienceConfig::default()
            },
        );
        let spec = fixed(Algorithm::Gcra, &["100/h"]);
        let checks: Vec<Check<'_>> = (0..50)
            .map(|i| Check {
                spec: &spec,
                key: "k",
                cost: 1,
                now: i,
            })
            .collect();
        server.pause();
        let t = Instant::now();
        let got = resilient.decide_many(&checks).await;
        let took = t.elapsed();
        server.resume();
        // The deadline ended it (counted, not timed; never early), and
        // every decision failed over.
        let st = resilient.stats();
        assert!(st.timeouts >= 1, "{st:?}");
        assert_eq!(st.errors, st.timeouts, "timeouts only: {st:?}");
        assert_eq!(st.fail_overs, 50, "{st:?}");
        assert!(
            took >= Duration::from_millis(timeout_ms),
            "the batch took {took:?}"
        );
        for d in got {
            let d = d.unwrap();
            assert!(
                !d.allowed && d.reason == Some(DenyReason::OverLimit),
                "{d:?}"
            );
        }
        // Back to Redis: fresh keys get the quota.
        let fresh = fixed(Algorithm::Gcra, &["3/h"]);
        common::wait_until_async(Duration::from_secs(60), "decisions on Redis", || {
            let key = unique("fresh");
            let (fresh, resilient) = (&fresh, &resilient);
            async move {
                let mut ok = 0;
                for i in 0..5 {
                    let c = Check {
                        spec: fresh,
                        key: &key,
                        cost: 1,
                        now: i,
                    };
                    ok += resilient.decide(c).await.unwrap().allowed as u32;
                }
                ok == 3
            }
        })
        .await;
    });
}

#[test]
fn callers_that_gave_up_before_their_call_was_sent_are_not_sent() {
    let server = RedisServer::start();
    two_threads().block_on(async {
        let mut cfg = RedisConfig::single(server.url());
        cfg.time = TimeSource::Caller;
        cfg.batch_in_flight = Some(1);
        let store = connected(&cfg).await;
        let spec = fixed(Algorithm::FixedWindow, &["100/h"]);
        let c = Check {
            spec: &spec,
            key: "k",
            cost: 1,
            now: 5,
        };
        let short = Duration::from_millis(50);
        tokio::task::block_in_place(|| server.pause());
        // The one call in flight: stuck in the paused Redis. Its caller
        // gives up once the call is in Redis's receive queue (a condition:
        // a fixed wait of 500 ms was not always enough for the batcher to
        // send it on a loaded machine).
        tokio::select! {
            d = store.decide(c) => panic!("a paused Redis answered: {d:?}"),
            () = common::wait_until_async(Duration::from_secs(30), "the call to reach Redis", || {
                let n = unread_at(server.port);
                async move { n > 0 }
            }) => {}
        }
        // These queue behind it, and their callers give up.
        let queued = join_all((0..20).map(|_| tokio::time::timeout(short, store.decide(c)))).await;
        assert!(queued.iter().all(Result::is_err));
        server.resume();
        // Only the stuck call ran: this decision is the second.
        let d = tokio::time::timeout(Duration::from_secs(30), store.decide(c))
            .await
            .expect("Redis answers after SIGCONT")
            .unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 98, "{d:?}");
    });
}

#[test]
fn cluster_batches_group_by_slot_and_decide_in_order() {
    let cluster = RedisCluster::start_module(3);
    two_threads().block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            let mut cfg = RedisConfig::cluster(cluster.urls());
            cfg.time = TimeSource::Caller;
            cfg.expiry_grace_ms = 3_600_000;
            cfg.batch_in_flight = Some(1);
            cfg.engine = engine;
            let store = connected(&cfg).await;
            for (alg, quotas) in [
                (Algorithm::Gcra, &["3/s", "5/h"][..]),
                (Algorithm::SlidingWindow, &["3/1500ms"][..]),
                (Algorithm::SlidingLog, &["4/s", "6/h"][..]),
            ] {
                let spec = fixed(alg, quotas);
                let names: Vec<String> = (0..12).map(|i| format!("tenant-{i}")).collect();
                let slots: std::collections::HashSet<u16> = names
                    .iter()
                    .map(|n| cluster.slot(&store.keys(&spec, n)[0]))
                    .collect();
                assert!(slots.len() > 3, "keys spread over slots");
                let now = 1_763_000_000_000_000_000u64;
                let rows: Vec<(usize, u64, u64)> = (0..120u64)
                    .map(|i| ((i * 7 % 12) as usize, now + i * 20_000_000, 1 + i % 2))
                    .collect();
                let want = reference(&spec, &rows);
                for many in [true, false] {
                    let prefix = unique("c");
                    let keys: Vec<String> = names.iter().map(|n| format!("{prefix}{n}")).collect();
                    let got = through(&store, &spec, &keys, &rows, &[30], many).await;
                    assert_eq!(got, want, "{alg} many={many} {engine:?}");
                }
            }
        }
    });
}

/// Bytes that connections to the local `port` (a server's side) have
/// received and the server has not read yet (/proc/net/tcp receive queues).
fn unread_at(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let rx = u64::from_str_radix(f.get(4)?.split(':').nth(1)?, 16).ok()?;
            (local == port).then_some(rx)
        })
        .sum()
}
