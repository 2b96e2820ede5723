//! Checks, reserves and refunds (costs known afterwards, docs/semantics.md)
//! in Redis, against a real `redis-server`: random sequences of takes,
//! checks, charges, reserves, settlements and releases on random
//! algorithms and quotas give, with every engine (fast scripts, general
//! script, module, and all three taking turns on one key), the answers of
//! drl-core's `KeyedLimiter` and `MultiLimiter` on a manual clock, the
//! same marks, and leave the same states in Redis; and the same on a
//! 3-master Redis Cluster, with both engines.

mod common;

use std::sync::OnceLock;

use common::{RedisCluster, StoreEnv, unique};
use drl_core::{
    Algorithm, Decision, KeyedConfig, KeyedLimiter, Mark, MultiLimiter, Quota, Reservation, State,
};
use drl_store::{Check, Engine, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};
use proptest::prelude::*;

/// One server and one runtime for the whole suite.
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

/// One call on a limit.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// A take (cost 0: a query).
    Take(u64),
    /// A check (decides, writes nothing).
    Check(u64),
    /// A charge.
    Charge(u64),
    /// A reserve of an estimate, expiring `ttl` ns later.
    Reserve(u64, u64),
    /// Settles the open reservation picked by the index (modulo how many
    /// are open; none open: a query) with the actual cost.
    Settle(usize, u64),
    /// Releases the open reservation picked by the index.
    Release(usize),
}

/// A reservation open on both sides: the reference's and the store's.
struct Open {
    keyed: Reservation<String>,
    cost: u64,
    expires_at: u64,
    marks: Box<[Mark]>,
}

fn check<'a>(spec: &'a LimitSpec, key: &'a str, cost: u64, now: u64) -> Check<'a> {
    Check {
        spec,
        key,
        cost,
        now,
    }
}

/// The states Redis holds for `key` under `spec`, parsed (missing: fresh).
fn stored(
    server: &mut redis::Connection,
    spec: &LimitSpec,
    store: &RedisStore,
    key: &str,
) -> Vec<State> {
    let limiter = spec.limiter();
    store
        .keys(spec, key)
        .iter()
        .zip(limiter.parts())
        .map(|(k, l)| {
            let raw: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(server).unwrap();
            drl_redis_wire::state_text::parse(l, &raw.unwrap_or_default()).unwrap()
        })
        .collect()
}

/// Settles `o` at `now` with `actual` on the store, as the service does:
/// the excess charged, a shortfall before the expiry refunded, else a
/// query.
async fn settle_on(
    store: &RedisStore,
    spec: &LimitSpec,
    key: &str,
    o: &Open,
    now: u64,
    actual: u64,
) -> Result<Decision, drl_store::StoreError> {
    if actual > o.cost {
        store.charge(check(spec, key, actual - o.cost, now)).await
    } else if actual < o.cost && now < o.expires_at {
        let back = o.cost - actual;
        let (d, given) = store.refund(check(spec, key, back, now), &o.marks).await?;
        assert_eq!(
            given, back,
            "Redis reports the units drl-core's refund gives back"
        );
        Ok(d)
    } else {
        store.check(check(spec, key, 0, now)).await
    }
}

/// The same settlement on the reference states.
fn settle_ref(
    reference: &MultiLimiter,
    states: &mut [State],
    o: &Open,
    now: u64,
    actual: u64,
) -> Decision {
    if actual > o.cost {
        reference.charge(states, now, actual - o.cost)
    } else if actual < o.cost && now < o.expires_at {
        reference.refund(states, now, &o.marks, o.cost - actual)
    } else {
        reference.check(states, now, 0)
    }
}

/// `trace` on one fresh key, step `i` by `stores[i % stores.len()]`: every
/// answer equals the keyed limiter's and the multi limiter's, every mark
/// the multi limiter's, and after every step every stored state the multi
/// limiter's.
fn identity_on(
    stores: &[&RedisStore],
    server: &mut redis::Connection,
    rt: &tokio::runtime::Runtime,
    spec: &LimitSpec,
    trace: &[(u64, Op)],
) -> Result<(), TestCaseError> {
    let key = unique("k");
    let reference = spec.limiter();
    let keyed = KeyedLimiter::<String>::new(spec.limiter(), KeyedConfig::default());
    let mut states = reference.new_states();
    let mut open: Vec<Open> = Vec::new();
    for (i, &(now, op)) in trace.iter().enumerate() {
        let store = stores[i % stores.len()];
        let engine = (store.config().engine, store.config().fast_path);
        let at = format!("step {i} (now {now}, {op:?}, engine {engine:?}) of {spec:?}");
        let fail = |e: drl_store::StoreError| TestCaseError::fail(format!("{at}: {e}"));
        let c = |cost| check(spec, &key, cost, now);
        let (want, by_keyed, got) = match op {
            Op::Take(cost) => (
                reference.decide(&mut states, now, cost),
                keyed.decide(&key, now, cost),
                rt.block_on(store.decide(c(cost))).map_err(fail)?,
            ),
            Op::Check(cost) => (
                reference.check(&states, now, cost),
                keyed.check(&key, now, cost),
                rt.block_on(store.check(c(cost))).map_err(fail)?,
            ),
            Op::Charge(cost) => (
                reference.charge(&mut states, now, cost),
                keyed.charge(&key, now, cost),
                rt.block_on(store.charge(c(cost))).map_err(fail)?,
            ),
            Op::Reserve(cost, ttl) => {
                let (want, marks) = reference.reserve(&mut states, now, cost);
                let (by_keyed, r) = keyed.reserve(&key, now, cost, ttl);
                let (got, got_marks) = rt.block_on(store.reserve(c(cost))).map_err(fail)?;
                prop_assert_eq!(&got_marks, &marks, "marks at {}", at);
                if let (Some(r), Some(marks)) = (r, marks) {
                    prop_assert_eq!(r.marks(), &marks[..], "keyed marks at {}", at);
                    open.push(Open {
                        expires_at: r.expires_at(),
                        keyed: r,
                        cost,
                        marks,
                    });
                }
                (want, by_keyed, got)
            }
            Op::Settle(pick, _) | Op::Release(pick) if open.is_empty() => {
                let _ = pick;
                (
                    reference.check(&states, now, 0),
                    keyed.check(&key, now, 0),
                    rt.block_on(store.check(c(0))).map_err(fail)?,
                )
            }
            Op::Settle(pick, _) | Op::Release(pick) => {
                let actual = match op {
                    Op::Settle(_, actual) => actual,
                    _ => 0,
                };
                let o = open.remove(pick % open.len());
                let want = settle_ref(&reference, &mut states, &o, now, actual);
                let got = rt
                    .block_on(settle_on(store, spec, &key, &o, now, actual))
                    .map_err(fail)?;
                let s = keyed.settle(o.keyed, now, actual);
                (want, s.decision, got)
            }
        };
        prop_assert_eq!(got, want, "answer at {}", at);
        prop_assert_eq!(by_keyed, want, "keyed answer at {}", at);
        prop_assert_eq!(
            stored(server, spec, store, &key),
            states.clone(),
            "state after {}",
            at
        );
    }
    Ok(())
}

/// Every engine alone, then all three taking turns on one key.
fn identity(spec: &LimitSpec, trace: &[(u64, Op)]) -> Result<(), TestCaseError> {
    let env = env();
    let mut server = env.server.admin();
    let [lua, general, module] = env.engines();
    for (_, store) in env.engines() {
        identity_on(&[store], &mut server, &env.rt, spec, trace)?;
    }
    identity_on(
        &[lua.1, module.1, general.1],
        &mut server,
        &env.rt,
        spec,
        trace,
    )
}

/// Small quotas (windows of whole seconds, for the fast window script, or
/// not) and, now and then, wide ones (general script).
fn quota() -> impl Strategy<Value = Quota> {
    let small = (1u64..6, 1u64..5, 1u64..8, any::<bool>()).prop_map(|(l, b, w, whole)| {
        let unit = if whole { 1_000_000_000 } else { 1_000_000_007 };
        Quota::with_burst(l, w * unit, b).unwrap()
    });
    let wide = (
        prop_oneof![1u64..2_000, (1u64 << 60)..u64::MAX],
        prop_oneof![1u64..12, 1u64..u64::MAX],
    )
        .prop_filter_map("valid quota", |(w, l)| Quota::new(l, w).ok());
    prop_oneof![5 => small, 1 => wide]
}

/// A trace at today's stamps or near 2^64: steps forward (by an exact
/// interval or window now and then, sometimes back) and every kind of call,
/// reservations settled below, at and above their estimate, before and
/// after their expiry.
fn trace(q: Quota) -> impl Strategy<Value = Vec<(u64, Op)>> {
    let (t, w) = (q.emission_interval(), q.window());
    let cap = q.capacity_ns().min(1 << 50) as i128;
    let over = q.burst().min(4) + 1;
    let start = prop_oneof![
        3 => 1_760_000_000_000_000_000u64..1_770_000_000_000_000_000,
        1 => (u64::MAX - (1u64 << 40))..u64::MAX,
    ];
    let dt = prop_oneof![
        4 => 0i128..400_000_000,
        2 => prop_oneof![Just(w as i128), Just(w as i128 - 1), Just(t as i128), Just(0)],
        1 => 0i128..=(w as i128).saturating_mul(2),
        1 => 0i128..=cap,
        1 => -(t.min(1 << 40) as i128)..0,
    ];
    let ttl = prop_oneof![Just(0u64), 0u64..=2 * w.min(1 << 50), Just(u64::MAX)];
    let op = prop_oneof![
        2 => (0u64..4).prop_map(Op::Take),
        2 => (0u64..=over).prop_map(Op::Check),
        2 => (0u64..6).prop_map(Op::Charge),
        4 => ((0u64..=over), ttl).prop_map(|(c, ttl)| Op::Reserve(c, ttl)),
        4 => (any::<usize>(), 0u64..6).prop_map(|(p, a)| Op::Settle(p, a)),
        2 => any::<usize>().prop_map(Op::Release),
    ];
    (start, prop::collection::vec((dt, op), 1..32)).prop_map(|(start, steps)| {
        let mut now = start as i128;
        steps
            .into_iter()
            .map(|(dt, op)| {
                now = (now + dt).clamp(0, u64::MAX as i128);
                (now as u64, op)
            })
            .collect()
    })
}

fn spec_and_trace(algorithm: Algorithm) -> impl Strategy<Value = (LimitSpec, Vec<(u64, Op)>)> {
    prop::collection::vec(quota(), 1..=2).prop_flat_map(move |quotas| {
        let q0 = quotas[0];
        let spec = LimitSpec::new(unique("lim"), algorithm, quotas);
        (Just(spec), trace(q0))
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

macro_rules! identity_test {
    ($name:ident, $alg:expr) => {
        proptest! {
            #![proptest_config(config())]
            #[test]
            fn $name((spec, trace) in spec_and_trace($alg)) {
                identity(&spec, &trace)?;
            }
        }
    };
}

identity_test!(reservations_token_bucket, Algorithm::TokenBucket);
identity_test!(reservations_leaky_bucket, Algorithm::LeakyBucket);
identity_test!(reservations_gcra, Algorithm::Gcra);
identity_test!(reservations_leaky_queue, Algorithm::LeakyQueue);
identity_test!(reservations_fixed_window, Algorithm::FixedWindow);
identity_test!(reservations_sliding_log, Algorithm::SlidingLog);
identity_test!(reservations_sliding_window, Algorithm::SlidingWindow);

const MINUTE: u64 = 60_000_000_000;

/// A check writes nothing, in debt or not, with every engine: the key
/// stays missing after checks of a fresh key, and a key's value is
/// unchanged by checks after a take.
#[test]
fn checks_write_nothing() {
    let env = env();
    let mut server = env.server.admin();
    for (name, store) in env.engines() {
        for alg in Algorithm::ALL {
            let spec = LimitSpec::new(unique("chk"), alg, vec![Quota::new(3, MINUTE).unwrap()]);
            let key = unique("k");
            let t0 = 1_764_000_000_000_000_000 / MINUTE * MINUTE;
            for cost in [0, 1, 3, 4] {
                let d = env
                    .rt
                    .block_on(store.check(check(&spec, &key, cost, t0)))
                    .unwrap();
                assert_eq!(d.allowed, cost <= 3, "{name} {alg} cost {cost}");
            }
            let exists: i64 = redis::cmd("EXISTS")
                .arg(store.keys(&spec, &key))
                .query(&mut server)
                .unwrap();
            assert_eq!(exists, 0, "{name} {alg}: a check created a key");
            env.rt
                .block_on(store.decide(check(&spec, &key, 2, t0)))
                .unwrap();
            let before = stored(&mut server, &spec, store, &key);
            for cost in [0, 1, 2] {
                env.rt
                    .block_on(store.check(check(&spec, &key, cost, t0 + 1_000)))
                    .unwrap();
            }
            assert_eq!(
                stored(&mut server, &spec, store, &key),
                before,
                "{name} {alg}"
            );
            // In debt: checks are denied and still write nothing.
            env.rt
                .block_on(store.charge(check(&spec, &key, 5, t0 + 2_000)))
                .unwrap();
            let before = stored(&mut server, &spec, store, &key);
            for cost in [0, 1] {
                let d = env
                    .rt
                    .block_on(store.check(check(&spec, &key, cost, t0 + 3_000)))
                    .unwrap();
                assert!(!d.allowed, "{name} {alg}: in debt");
            }
            assert_eq!(
                stored(&mut server, &spec, store, &key),
                before,
                "{name} {alg}: in debt"
            );
        }
    }
}

/// Reserve, settle below (refund), settle above (charge) on a 3-master
/// cluster, both engines: multi-quota limits over many keys (spread over
/// every node), each call one call in its key's slot; every answer and
/// mark equals drl-core's.
#[test]
fn cluster_reservations_are_exact() {
    for engine in [Engine::Lua, Engine::Module] {
        let cluster = match engine {
            Engine::Lua => RedisCluster::start(3),
            Engine::Module => RedisCluster::start_module(3),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut cfg = RedisConfig::cluster(cluster.urls());
        cfg.time = TimeSource::Caller;
        cfg.engine = engine;
        cfg.expiry_grace_ms = 600_000;
        let store = rt.block_on(RedisStore::connect(&cfg)).unwrap();
        let t0 = 1_764_000_000_000_000_000 / MINUTE * MINUTE;
        let mut refunded = 0;
        for alg in Algorithm::ALL {
            let spec = LimitSpec::new(
                unique("cluster"),
                alg,
                vec![
                    Quota::with_burst(3, 1_000_000_000, 3).unwrap(),
                    Quota::new(5, MINUTE).unwrap(),
                ],
            );
            let reference = spec.limiter();
            for k in 0..8u64 {
                let key = format!("tenant-{k}");
                let mut states = reference.new_states();
                for step in 0..4u64 {
                    let now = t0 + step * 300_000_000;
                    let at = format!("{engine:?} {alg} {key} step {step}");
                    let cost = 1 + (k + step) % 3;
                    let (want, marks) = reference.reserve(&mut states, now, cost);
                    let (got, got_marks) = rt
                        .block_on(store.reserve(check(&spec, &key, cost, now)))
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!((got, &got_marks), (want, &marks), "reserve at {at}");
                    let Some(marks) = marks else { continue };
                    let later = now + 100_000_000;
                    // Settle at (k + step) % 5: below, at or above the estimate.
                    let actual = (k + step) % 5;
                    let want = if actual > cost {
                        reference.charge(&mut states, later, actual - cost)
                    } else {
                        refunded += (actual < cost) as u32;
                        reference.refund(&mut states, later, &marks, cost - actual)
                    };
                    let got = if actual > cost {
                        rt.block_on(store.charge(check(&spec, &key, actual - cost, later)))
                    } else {
                        rt.block_on(store.refund(check(&spec, &key, cost - actual, later), &marks))
                            .map(|(d, _)| d)
                    }
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(got, want, "settle at {at}");
                    let want = reference.check(&states, later, 1);
                    let got = rt
                        .block_on(store.check(check(&spec, &key, 1, later)))
                        .unwrap();
                    assert_eq!(got, want, "check at {at}");
                }
            }
        }
        assert!(refunded > 0, "some settlements refunded");
        for i in 0..3 {
            let n: i64 = redis::cmd("DBSIZE")
                .query(&mut cluster.nodes[i].admin())
                .unwrap();
            assert!(n > 0, "node {i} holds no key: keys are not spread");
        }
    }
}

/// Many reservations settled concurrently on one key (each engine, through
/// the store's coalescing batcher): below the estimate (refunds) and above
/// it (charges) racing, the fixed window ends at the sum of the actual
/// costs, as the same calls made one after another would leave it.
#[test]
fn racing_settlements_add_up() {
    let env = env();
    let t0 = 1_764_000_000_000_000_000 / (60 * MINUTE) * (60 * MINUTE);
    for (name, store) in env.engines() {
        let spec = LimitSpec::new(
            unique("race"),
            Algorithm::FixedWindow,
            vec![Quota::new(10_000, 60 * MINUTE).unwrap()],
        );
        let key = unique("hot");
        let actuals: Vec<u64> = (0..64).map(|i| (i * 7) % 21).collect();
        let spec = &spec;
        let key = &key;
        let settled = env
            .rt
            .block_on(futures::future::join_all(actuals.iter().enumerate().map(
                |(i, &actual)| async move {
                    let now = t0 + i as u64;
                    let (d, marks) = store.reserve(check(spec, key, 10, now)).await.unwrap();
                    assert!(d.allowed);
                    let marks = marks.unwrap();
                    if actual > 10 {
                        store.charge(check(spec, key, actual - 10, now + 1)).await
                    } else {
                        store
                            .refund(check(spec, key, 10 - actual, now + 1), &marks)
                            .await
                            .map(|(d, _)| d)
                    }
                    .unwrap()
                },
            )));
        assert_eq!(settled.len(), actuals.len());
        let left = env
            .rt
            .block_on(store.check(check(spec, key, 0, t0 + 1_000)))
            .unwrap()
            .remaining;
        assert_eq!(left, 10_000 - actuals.iter().sum::<u64>(), "{name}");
    }
}

/// Applies one step of a trace to `store` on `key` (the open reservations
/// are the reference's, whose marks every engine returned alike).
fn step_on(
    store: &RedisStore,
    rt: &tokio::runtime::Runtime,
    spec: &LimitSpec,
    key: &str,
    now: u64,
    op: Op,
    open: &[(u64, u64, Box<[Mark]>)],
) -> (Decision, Option<Box<[Mark]>>) {
    let c = |cost| check(spec, key, cost, now);
    let d = match op {
        Op::Take(cost) => rt.block_on(store.decide(c(cost))),
        Op::Check(cost) => rt.block_on(store.check(c(cost))),
        Op::Charge(cost) => rt.block_on(store.charge(c(cost))),
        Op::Reserve(cost, _) => return rt.block_on(store.reserve(c(cost))).unwrap(),
        Op::Settle(..) | Op::Release(_) if open.is_empty() => rt.block_on(store.check(c(0))),
        Op::Settle(pick, _) | Op::Release(pick) => {
            let actual = match op {
                Op::Settle(_, actual) => actual,
                _ => 0,
            };
            let (cost, expires_at, marks) = &open[pick % open.len()];
            let o = Open {
                keyed: Reservation::new(key.to_string(), *cost, now, *expires_at, marks.clone()),
                cost: *cost,
                expires_at: *expires_at,
                marks: marks.clone(),
            };
            rt.block_on(settle_on(store, spec, key, &o, now, actual))
        }
    };
    (d.unwrap(), None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..config() })]
    /// The same trace on three keys, one per engine, step by step: every
    /// answer, every stored text and every expiry agree (the remaining
    /// times within the measured time between the engines' writes), refunds
    /// included, so a key written by one engine is served by another as it
    /// would serve its own.
    #[test]
    fn engines_store_and_expire_alike(
        (spec, trace) in prop::sample::select(Algorithm::ALL.to_vec()).prop_flat_map(spec_and_trace),
    ) {
        let env = env();
        let mut server = env.server.admin();
        let keys: Vec<String> = (0..3).map(|_| unique("alike")).collect();
        let mut open: Vec<(u64, u64, Box<[Mark]>)> = Vec::new();
        let mut longest = 0i64;
        for (i, &(now, op)) in trace.iter().enumerate() {
            let started = std::time::Instant::now();
            let answers: Vec<_> = env
                .engines()
                .iter()
                .zip(&keys)
                .map(|((_, store), key)| step_on(store, &env.rt, &spec, key, now, op, &open))
                .collect();
            prop_assert!(answers.windows(2).all(|w| w[0] == w[1]), "step {} {:?}: {:?}", i, op, answers);
            longest = longest.max(started.elapsed().as_millis() as i64);
            match op {
                Op::Reserve(cost, ttl) => {
                    if let Some(m) = &answers[0].1 {
                        open.push((cost, now.saturating_add(ttl), m.clone()));
                    }
                }
                Op::Settle(pick, _) | Op::Release(pick) if !open.is_empty() => {
                    let at = pick % open.len();
                    open.remove(at);
                }
                _ => {}
            }
            let stores = env.engines();
            let per_quota = stores[0].1.keys(&spec, &keys[0]).len();
            for q in 0..per_quota {
                let mut texts = Vec::new();
                let mut ttls = Vec::new();
                for ((_, store), key) in stores.iter().zip(&keys) {
                    let k = &store.keys(&spec, key)[q];
                    let v: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(&mut server).unwrap();
                    texts.push(v);
                    let t: i64 = redis::cmd("PTTL").arg(k).query(&mut server).unwrap();
                    ttls.push(t);
                }
                prop_assert!(texts.windows(2).all(|w| w[0] == w[1]), "step {} {:?} quota {}: {:?}", i, op, q, texts);
                // The engines set the same expiry, to the millisecond or
                // nearly (the fast scripts round in doubles), at the step
                // that last wrote the key: the remaining times differ by at
                // most the time between the writes (at most the longest
                // step so far) and that rounding; 50 ms, as the module's
                // interop test allows, unless a step took longer.
                let slack = (longest + 2).max(50);
                let spread = ttls.iter().max().unwrap() - ttls.iter().min().unwrap();
                prop_assert!(
                    ttls.iter().all(|&t| t == -2) || (ttls.iter().all(|&t| t > 0) && spread <= slack),
                    "step {} {:?} quota {}: expiries {:?} (slack {} ms)", i, op, q, ttls, slack
                );
            }
        }
    }
}
