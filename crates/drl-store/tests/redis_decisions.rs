//! RedisStore against a real `redis-server`: every algorithm decides exactly
//! as drl-core (differential property tests on random traces, including
//! timestamps near 2^64 and quotas whose products exceed 2^53), all-or-nothing
//! multi-quota limits, key expiry, the Redis clock, NOSCRIPT recovery and
//! pipelined batches. Every engine: the Lua scripts (fast and general) and
//! the native module (`engine: module`), alone and taking turns on one key.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{RedisServer, StoreEnv, unique};
use drl_core::time::SECOND;
use drl_core::{Algorithm, Decision, MultiLimiter, Quota, State};
use drl_store::{Check, Engine, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};
use proptest::prelude::*;

/// One server and one runtime for the whole differential suite.
fn env() -> &'static StoreEnv {
    static ENV: OnceLock<StoreEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        StoreEnv::start(|url| {
            let mut cfg = RedisConfig::single(url);
            cfg.time = TimeSource::Caller;
            // Synthetic time runs far ahead of real time: keep keys for the test.
            cfg.expiry_grace_ms = 3_600_000;
            cfg
        })
    })
}

/// Runs `trace` through Redis with every engine (fast scripts, general
/// script, module) and through drl-core; asserts equal decisions. Then once
/// more on one key with the engines taking turns, so each engine reads the
/// states the others wrote (they share the stored format).
fn differential(spec: &LimitSpec, trace: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let env = env();
    let [lua, general, module] = env.engines();
    for (_, store) in env.engines() {
        differential_on(&[store], spec, trace)?;
    }
    differential_on(&[lua.1, module.1, general.1], spec, trace)
}

/// `trace` on one key, step `i` decided by `stores[i % stores.len()]`.
fn differential_on(
    stores: &[&RedisStore],
    spec: &LimitSpec,
    trace: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let env = env();
    let key = unique("k");
    let reference = spec.limiter();
    let mut states: Vec<State> = reference.new_states();
    for (i, &(now, cost)) in trace.iter().enumerate() {
        let want = reference.decide(&mut states, now, cost);
        let store = stores[i % stores.len()];
        let got = env
            .rt
            .block_on(store.decide(Check {
                spec,
                key: &key,
                cost,
                now,
            }))
            .map_err(|e| TestCaseError::fail(format!("step {i}: store error {e}")))?;
        prop_assert_eq!(
            got,
            want,
            "step {} (now {}, cost {}, engine {:?}, fast {}) of {:?}",
            i,
            now,
            cost,
            store.config().engine,
            store.config().fast_path,
            spec
        );
    }
    Ok(())
}

fn quota() -> impl Strategy<Value = Quota> {
    let window = prop_oneof![
        (1u64..100_000).prop_map(|s| s * 1_000_000_000),
        1u64..2_000,
        1_000_000u64..10_000_000_000,
        1_000_000_000_000u64..100_000_000_000_000_000,
        (1u64 << 60)..u64::MAX,
    ];
    let limit = prop_oneof![1u64..12, 1u64..1_000_000, 1u64..u64::MAX];
    (
        window,
        limit,
        prop_oneof![Just(None), (1u64..40).prop_map(Some)],
    )
        .prop_filter_map("valid quota", |(w, l, b)| {
            Quota::with_burst(l, w, b.unwrap_or(l)).ok()
        })
}

/// A trace: absolute times near anywhere in u64 (including ~1.8e18 and near
/// 2^64), steps of every scale, sometimes backwards; costs around capacity.
fn trace(q: Quota) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let t = q.emission_interval();
    let w = q.window();
    let start = prop_oneof![
        0u64..1_000,
        1_700_000_000_000_000_000u64..1_900_000_000_000_000_000,
        (u64::MAX - (1u64 << 40))..u64::MAX,
        any::<u64>(),
    ];
    let cap = q.burst().max(q.limit()).min(1 << 40);
    let step = (
        prop_oneof![
            3 => Just(0i128),
            4 => 0i128..=(t as i128).saturating_mul(3).max(1),
            2 => 0i128..=(w as i128).saturating_mul(2).max(1),
            1 => -(t as i128).saturating_mul(2).max(1)..0i128,
            1 => any::<u64>().prop_map(|x| x as i128 >> 2),
            // Exact boundaries: one interval, one window, one window less 1 ns.
            2 => prop_oneof![
                Just(t as i128),
                Just(w as i128),
                Just(w as i128 - 1),
                Just(w as i128 / 2)
            ],
        ],
        prop_oneof![6 => Just(1u64), 2 => 0u64..=cap.saturating_add(2), 1 => any::<u64>()],
    );
    (start, prop::collection::vec(step, 1..40)).prop_map(|(start, steps)| {
        let mut now = start as i128;
        steps
            .into_iter()
            .map(|(dt, cost)| {
                now = (now + dt).clamp(0, u64::MAX as i128);
                (now as u64, cost)
            })
            .collect()
    })
}

fn spec_and_trace(algorithm: Algorithm) -> impl Strategy<Value = (LimitSpec, Vec<(u64, u64)>)> {
    prop::collection::vec(quota(), 1..=3).prop_flat_map(move |quotas| {
        let q0 = quotas[0];
        let spec = LimitSpec::new(unique("lim"), algorithm, quotas);
        (Just(spec), trace(q0))
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

macro_rules! differential_test {
    ($name:ident, $alg:expr) => {
        proptest! {
            #![proptest_config(config())]
            #[test]
            fn $name((spec, trace) in spec_and_trace($alg)) {
                differential(&spec, &trace)?;
            }
        }
    };
}

differential_test!(differential_token_bucket, Algorithm::TokenBucket);
differential_test!(differential_leaky_bucket, Algorithm::LeakyBucket);
differential_test!(differential_gcra, Algorithm::Gcra);
differential_test!(differential_leaky_queue, Algorithm::LeakyQueue);
differential_test!(differential_fixed_window, Algorithm::FixedWindow);
differential_test!(differential_sliding_log, Algorithm::SlidingLog);
differential_test!(differential_sliding_window, Algorithm::SlidingWindow);

/// Small, dense traces at today's timestamps: many admissions and denials
/// per case (the random quotas above are often too large to ever deny).
fn dense(algorithm: Algorithm) -> impl Strategy<Value = (LimitSpec, Vec<(u64, u64)>)> {
    // Windows of whole seconds (the fast window script) and not (general).
    let q = (1u64..6, 1u64..5, 1u64..8, any::<bool>()).prop_map(|(l, b, w, whole)| {
        let unit = if whole { 1_000_000_000 } else { 1_000_000_007 };
        Quota::with_burst(l, w * unit, b).unwrap()
    });
    (
        prop::collection::vec(q, 1..=2),
        1_760_000_000_000_000_000u64..1_770_000_000_000_000_000,
    )
        .prop_flat_map(move |(quotas, start)| {
            let (w, t) = (quotas[0].window(), quotas[0].emission_interval());
            let spec = LimitSpec::new(unique("dense"), algorithm, quotas);
            // Random steps, and exact boundaries (a window, an interval).
            let dt = prop_oneof![
                6 => 0u64..400_000_000,
                1 => prop_oneof![Just(w), Just(w - 1), Just(t), Just(0)],
            ];
            let steps = prop::collection::vec((dt, 0u64..4), 5..60);
            (
                Just(spec),
                steps.prop_map(move |s| {
                    let mut now = start;
                    s.into_iter()
                        .map(|(dt, c)| {
                            now += dt;
                            (now, c)
                        })
                        .collect::<Vec<_>>()
                }),
            )
        })
}

proptest! {
    #![proptest_config(config())]
    #[test]
    fn differential_dense_all_algorithms(
        (spec, trace) in (0usize..7).prop_flat_map(|i| dense(Algorithm::ALL[i]))
    ) {
        differential(&spec, &trace)?;
    }
}

fn spec(alg: Algorithm, quotas: &[&str]) -> LimitSpec {
    LimitSpec::new(
        unique("fixed"),
        alg,
        quotas.iter().map(|q| Quota::parse(q).unwrap()).collect(),
    )
}

async fn decide(store: &RedisStore, spec: &LimitSpec, key: &str, now: u64, cost: u64) -> Decision {
    store
        .decide(Check {
            spec,
            key,
            cost,
            now,
        })
        .await
        .unwrap()
}

#[test]
fn every_algorithm_admits_its_quota_then_denies() {
    let env = env();
    env.rt.block_on(async {
        for (engine, store) in [("lua", &env.store), ("module", &env.module)] {
            for alg in Algorithm::ALL {
                let s = spec(alg, &["3/s"]);
                let now = 1_763_000_000_000_000_000u64; // a 2025 timestamp, > 2^53
                for i in 0..3 {
                    let d = decide(store, &s, "k", now + i, 1).await;
                    assert!(d.allowed, "{engine} {alg}: request {i} should pass: {d:?}");
                }
                let d = decide(store, &s, "k", now + 3, 1).await;
                if alg == Algorithm::LeakyQueue {
                    // The shaper queues up to burst: the 4th waits for room.
                    assert!(
                        !d.allowed && d.retry_after.unwrap() > 0,
                        "{engine} {alg}: {d:?}"
                    );
                } else {
                    assert!(!d.allowed, "{engine} {alg}: the 4th must be denied: {d:?}");
                }
                let d = decide(store, &s, "k", now + 4, 4).await;
                assert_eq!(
                    d.retry_after, None,
                    "{engine} {alg}: cost 4 > 3 can never pass"
                );
            }
        }
    });
}

#[test]
fn multi_quota_is_all_or_nothing_in_one_call() {
    let env = env();
    env.rt.block_on(async {
        for store in [&env.store, &env.module] {
            let s = spec(Algorithm::FixedWindow, &["2/s", "3/min"]);
            let t0 = 1_763_000_000_000_000_000u64 / 60_000_000_000 * 60_000_000_000;
            assert!(decide(store, &s, "k", t0, 1).await.allowed);
            assert!(decide(store, &s, "k", t0 + 1, 1).await.allowed);
            // 2/s denies: 3/min must not consume.
            assert!(!decide(store, &s, "k", t0 + 2, 1).await.allowed);
            let d = decide(store, &s, "k", t0 + SECOND, 1).await;
            assert!(d.allowed, "3/min had one left: {d:?}");
            assert_eq!(d.remaining, 0);
            let d = decide(store, &s, "k", t0 + 2 * SECOND, 1).await;
            assert!(!d.allowed);
            assert!(
                d.retry_after.unwrap() > 50 * SECOND,
                "the minute quota decides: {d:?}"
            );
        }
    });
}

#[test]
fn keys_expire_when_fresh_and_denials_write_nothing() {
    let server = RedisServer::start_module();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            let mut cfg = RedisConfig::single(server.url());
            cfg.expiry_grace_ms = 0;
            cfg.time = TimeSource::Caller;
            cfg.engine = engine;
            let store = RedisStore::connect(&cfg).await.unwrap();
            let s = spec(Algorithm::Gcra, &["2/200ms"]);
            let keys = store.keys(&s, "k");
            let mut admin = server.admin();
            let now = 5_000_000_000_000u64;
            assert!(decide(&store, &s, "k", now, 1).await.allowed);
            let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut admin).unwrap();
            // fresh again after one emission interval (100 ms).
            assert!((1..=100).contains(&ttl), "pttl {ttl}");
            // A query (cost 0) writes nothing.
            let before: String = redis::cmd("GET").arg(&keys[0]).query(&mut admin).unwrap();
            decide(&store, &s, "k", now + 1, 0).await;
            let after: String = redis::cmd("GET").arg(&keys[0]).query(&mut admin).unwrap();
            assert_eq!(before, after);
            common::wait_until(Duration::from_secs(3), "the key to expire", || {
                redis::cmd("EXISTS")
                    .arg(&keys[0])
                    .query::<i64>(&mut server.admin())
                    .unwrap()
                    == 0
            });
            // A denial writes nothing either.
            assert!(decide(&store, &s, "k", now, 2).await.allowed);
            let before: String = redis::cmd("GET").arg(&keys[0]).query(&mut admin).unwrap();
            assert!(!decide(&store, &s, "k", now + 1, 1).await.allowed);
            let after: String = redis::cmd("GET").arg(&keys[0]).query(&mut admin).unwrap();
            assert_eq!(before, after);
        }
    });
}

#[test]
fn redis_clock_is_the_default_time_source() {
    let env = env();
    env.rt.block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            let cfg = RedisConfig::single(env.store.config().url.clone().unwrap());
            let cfg = RedisConfig { engine, ..cfg };
            assert_eq!(cfg.time, TimeSource::Redis);
            let store = RedisStore::connect(&cfg).await.unwrap();
            let s = spec(Algorithm::Gcra, &["2/h"]);
            // The caller's `now` (0 here) is ignored: Redis TIME is used.
            let d1 = decide(&store, &s, "k", 0, 1).await;
            let d2 = decide(&store, &s, "k", 0, 1).await;
            let d3 = decide(&store, &s, "k", 0, 1).await;
            assert!(d1.allowed && d2.allowed && !d3.allowed);
            let hour = 3600 * SECOND;
            // Two permits taken within a few ms: the next frees in ~30 min.
            let retry = d3.retry_after.unwrap();
            assert!(
                retry <= hour / 2 && retry > hour / 2 - 10 * SECOND,
                "{retry}"
            );
            // reset_after is computed at Redis' now: ~1 h.
            assert!(d3.reset_after <= hour && d3.reset_after > hour - 10 * SECOND);
            // The window scripts read TIME too: whole seconds (fast) and not (general).
            for q in ["2/h", "2/3600001ms"] {
                let w = spec(Algorithm::FixedWindow, &[q]);
                let d1 = decide(&store, &w, "k", 0, 1).await;
                let d2 = decide(&store, &w, "k", 0, 1).await;
                let d3 = decide(&store, &w, "k", 0, 1).await;
                assert!(d1.allowed && d2.allowed && !d3.allowed, "{q}");
                // Windows are aligned to the Unix epoch on Redis' clock.
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64;
                let window = w.quotas[0].window();
                let to_end = window - now % window;
                let retry = d3.retry_after.unwrap();
                assert!(
                    retry.abs_diff(to_end) < 10 * SECOND,
                    "{q}: {retry} vs {to_end}"
                );
            }
            // decide_with overrides the time source per call (what replay uses).
            let s2 = spec(Algorithm::FixedWindow, &["1/s"]);
            let c = |now| Check {
                spec: &s2,
                key: "r",
                cost: 1,
                now,
            };
            assert!(
                store
                    .decide_with(c(10), TimeSource::Caller)
                    .await
                    .unwrap()
                    .allowed
            );
            assert!(
                !store
                    .decide_with(c(20), TimeSource::Caller)
                    .await
                    .unwrap()
                    .allowed
            );
            assert!(
                store
                    .decide_with(c(SECOND), TimeSource::Caller)
                    .await
                    .unwrap()
                    .allowed
            );
        }
    });
}

#[test]
fn noscript_after_script_flush_is_recovered() {
    let env = env();
    env.rt.block_on(async {
        let mut admin = redis::Client::open(env.store.config().url.clone().unwrap())
            .unwrap()
            .get_connection()
            .unwrap();
        // 1500 ms is not whole seconds: the general script.
        let s = spec(Algorithm::FixedWindow, &["2/1500ms"]);
        let fast = spec(Algorithm::TokenBucket, &["2/s"]);
        assert!(decide(&env.store, &s, "k", 10, 1).await.allowed);
        assert!(decide(&env.store, &fast, "k", 10, 1).await.allowed);
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
        let d = decide(&env.store, &s, "k", 11, 1).await;
        assert!(d.allowed && d.remaining == 0, "{d:?}");
        let d = decide(&env.store, &fast, "k", 11, 1).await;
        assert!(d.allowed && d.remaining == 0, "{d:?}");
        let loaded: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(env.store.script_sha())
            .query(&mut admin)
            .unwrap();
        assert_eq!(loaded, vec![true], "EVAL re-cached the script");
        // Also inside a pipelined batch.
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
        let c = Check {
            spec: &s,
            key: "k",
            cost: 1,
            now: 12,
        };
        let f = Check {
            spec: &fast,
            key: "k",
            cost: 1,
            now: 12,
        };
        let r = env.store.decide_many(&[c, f, c, f]).await;
        assert!(r.iter().all(|d| !d.as_ref().unwrap().allowed), "{r:?}");
    });
}

#[test]
fn decide_many_is_one_pipeline_with_sequential_semantics() {
    let env = env();
    env.rt.block_on(async {
        for store in [&env.store, &env.module] {
            let s = spec(Algorithm::SlidingLog, &["5/s"]);
            let other = spec(Algorithm::Gcra, &["1/s"]);
            let now = 1_763_000_000_123_456_789u64;
            let mut checks = Vec::new();
            for i in 0..8 {
                checks.push(Check {
                    spec: &s,
                    key: "k",
                    cost: 1,
                    now: now + i,
                });
            }
            checks.push(Check {
                spec: &other,
                key: "k",
                cost: 1,
                now,
            });
            let got = store.decide_many(&checks).await;
            let reference = s.limiter();
            let mut st = reference.new_states();
            for (i, c) in checks[..8].iter().enumerate() {
                let want = reference.decide(&mut st, c.now, c.cost);
                assert_eq!(got[i].as_ref().unwrap(), &want, "item {i}");
            }
            assert!(got[8].as_ref().unwrap().allowed);
        }
    });
}

#[test]
fn concurrent_decisions_never_exceed_the_quota() {
    let env = env();
    for store in [&env.store, &env.module] {
        let s = Arc::new(spec(Algorithm::Gcra, &["100/h"]));
        let admitted = env.rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..16 {
                let store = store.clone();
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    let mut n = 0;
                    for i in 0..20u64 {
                        let c = Check {
                            spec: &s,
                            key: "hot",
                            cost: 1,
                            now: 1_000 + t * 20 + i,
                        };
                        if store.decide(c).await.unwrap().allowed {
                            n += 1;
                        }
                    }
                    n
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap();
            }
            total
        });
        assert_eq!(
            admitted,
            100,
            "exactly the quota out of 320 concurrent requests ({:?})",
            store.config().engine
        );
    }
}

#[test]
fn config_is_validated_and_deserializes_from_yaml() {
    let yaml = "url: redis://127.0.0.1:6379\ntime: caller\nkey_prefix: \"rl:\"\n";
    let cfg: RedisConfig = serde_norway::from_str(yaml).unwrap();
    assert_eq!(cfg.time, TimeSource::Caller);
    assert_eq!(cfg.key_prefix, "rl:");
    assert_eq!(cfg.expiry_grace_ms, 1000);
    cfg.validate().unwrap();
    let both: RedisConfig =
        serde_norway::from_str("url: redis://a\ncluster: [redis://b]\n").unwrap();
    assert!(both.validate().is_err());
    assert!(RedisConfig::default().validate().is_err());
    let mut bad = RedisConfig::single("redis://a");
    bad.key_prefix = "x{".into();
    assert!(bad.validate().is_err());
    assert!(serde_norway::from_str::<RedisConfig>("urls: x\n").is_err());
    assert_eq!(cfg.engine, Engine::Lua, "lua is the default engine");
    let m: RedisConfig = serde_norway::from_str("url: redis://a\nengine: module\n").unwrap();
    assert_eq!(m.engine, Engine::Module);
    let e = serde_norway::from_str::<RedisConfig>("url: redis://a\nengine: native\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lua") && e.contains("module"), "{e}");
    // Calls in flight: the engine's default unless configured.
    assert_eq!(cfg.in_flight(), RedisConfig::DEFAULT_IN_FLIGHT_LUA);
    assert_eq!(m.in_flight(), RedisConfig::DEFAULT_IN_FLIGHT_MODULE);
    let set: RedisConfig =
        serde_norway::from_str("url: redis://a\nengine: module\nbatch_in_flight: 3\n").unwrap();
    assert_eq!(set.in_flight(), 3);
    let zero: RedisConfig = serde_norway::from_str("url: redis://a\nbatch_in_flight: 0\n").unwrap();
    assert!(zero.validate().is_err());
    let _ = MultiLimiter::uniform(Algorithm::Gcra, &[Quota::new(1, 1).unwrap()]);
}

#[test]
fn window_boundaries_are_exact() {
    // Entries expire exactly `window` after they were logged; windows roll
    // over exactly at multiples of `window`. Both scripts, every algorithm.
    for alg in Algorithm::ALL {
        for window in [1_000_000_000u64, 3_000_000_000, 1_000_000_007] {
            let spec = LimitSpec::new(
                unique("edge"),
                alg,
                vec![Quota::with_burst(2, window, 2).unwrap()],
            );
            let t = 1_763_000_000_000_000_000u64 / window * window;
            let mut trace = Vec::new();
            for base in [t, t + 1, t + window / 2] {
                let b = base + 10 * window;
                trace.extend([
                    (b, 1),
                    (b, 1),
                    (b + window - 1, 1),
                    (b + window, 1),
                    (b + window, 1),
                    (b + 2 * window - 1, 1),
                    (b + 2 * window, 2),
                    (b + 3 * window, 0),
                ]);
            }
            trace.sort();
            differential(&spec, &trace).unwrap();
        }
    }
}
