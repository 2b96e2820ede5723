//! Charges (costs known afterwards, docs/semantics.md) in Redis, against a
//! real `redis-server`: random sequences of takes, queries and charges on
//! random algorithms and quotas give, with every engine (fast scripts,
//! general script, module, and all three taking turns on one key), the
//! decisions of drl-core's `MultiLimiter` on a manual clock and leave the
//! same states in Redis; debts written by a charge are read as debts by
//! every engine, batches included; the token-quota scenario; and charges
//! on a 3-master Redis Cluster, with both engines.

mod common;

use std::sync::OnceLock;

use common::{RedisCluster, StoreEnv, unique};
use drl_core::{Algorithm, Decision, Quota, State};
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
    /// A charge.
    Charge(u64),
}

/// The states Redis holds for `key` under `spec`, parsed (missing: fresh).
fn stored(spec: &LimitSpec, store: &RedisStore, key: &str) -> Vec<State> {
    let mut c = env().server.admin();
    let limiter = spec.limiter();
    store
        .keys(spec, key)
        .iter()
        .zip(limiter.parts())
        .map(|(k, l)| {
            let raw: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(&mut c).unwrap();
            drl_redis_wire::state_text::parse(l, &raw.unwrap_or_default()).unwrap()
        })
        .collect()
}

/// `trace` on one fresh key, step `i` by `stores[i % stores.len()]`:
/// every answer and, after every step, every stored state equal drl-core's.
fn identity_on(
    stores: &[&RedisStore],
    spec: &LimitSpec,
    trace: &[(u64, Op)],
) -> Result<(), TestCaseError> {
    let env = env();
    let key = unique("k");
    let reference = spec.limiter();
    let mut states = reference.new_states();
    for (i, &(now, op)) in trace.iter().enumerate() {
        let store = stores[i % stores.len()];
        let (want, got) = match op {
            Op::Take(cost) => {
                let check = Check {
                    spec,
                    key: &key,
                    cost,
                    now,
                };
                (
                    reference.decide(&mut states, now, cost),
                    env.rt.block_on(store.decide(check)),
                )
            }
            Op::Charge(cost) => {
                let check = Check {
                    spec,
                    key: &key,
                    cost,
                    now,
                };
                (
                    reference.charge(&mut states, now, cost),
                    env.rt.block_on(store.charge(check)),
                )
            }
        };
        let engine = (store.config().engine, store.config().fast_path);
        let got = got.map_err(|e| TestCaseError::fail(format!("step {i} {op:?}: {e}")))?;
        prop_assert_eq!(
            got,
            want,
            "step {} (now {}, {:?}, engine {:?}) of {:?}",
            i,
            now,
            op,
            engine,
            spec
        );
        prop_assert_eq!(
            stored(spec, store, &key),
            states.clone(),
            "state after step {} (now {}, {:?}, engine {:?}) of {:?}",
            i,
            now,
            op,
            engine,
            spec
        );
    }
    Ok(())
}

/// `trace` on one fresh key by `store` as `drl replay --store` sends it:
/// each run of takes as one `decide_many` (one script call, the fast
/// script's batch), each charge alone. Every answer and, after every run
/// and charge, every stored state equal drl-core's.
fn identity_batched(
    store: &RedisStore,
    spec: &LimitSpec,
    trace: &[(u64, Op)],
) -> Result<(), TestCaseError> {
    let env = env();
    let key = unique("k");
    let reference = spec.limiter();
    let mut states = reference.new_states();
    let engine = (store.config().engine, store.config().fast_path);
    let mut i = 0;
    while i < trace.len() {
        match trace[i] {
            (now, Op::Charge(cost)) => {
                let want = reference.charge(&mut states, now, cost);
                let got = env
                    .rt
                    .block_on(store.charge(check(spec, &key, cost, now)))
                    .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
                prop_assert_eq!(got, want, "charge at step {} ({:?})", i, engine);
                i += 1;
            }
            (_, Op::Take(_)) => {
                let run: Vec<(u64, u64)> = trace[i..]
                    .iter()
                    .map_while(|&(now, op)| match op {
                        Op::Take(cost) => Some((now, cost)),
                        Op::Charge(_) => None,
                    })
                    .collect();
                let checks: Vec<Check<'_>> = run
                    .iter()
                    .map(|&(now, cost)| check(spec, &key, cost, now))
                    .collect();
                let got = env.rt.block_on(store.decide_many(&checks));
                for (j, (&(now, cost), got)) in run.iter().zip(got).enumerate() {
                    let want = reference.decide(&mut states, now, cost);
                    let got =
                        got.map_err(|e| TestCaseError::fail(format!("step {}: {e}", i + j)))?;
                    prop_assert_eq!(
                        got,
                        want,
                        "take at step {} (now {}, cost {}, run from step {}, {:?}) of {:?}",
                        i + j,
                        now,
                        cost,
                        i,
                        engine,
                        spec
                    );
                }
                i += run.len();
            }
        }
        prop_assert_eq!(
            stored(spec, store, &key),
            states.clone(),
            "state before step {} ({:?}) of {:?}",
            i,
            engine,
            spec
        );
    }
    Ok(())
}

/// Every engine alone, one call per step and with runs of takes batched,
/// then all three taking turns on one key.
fn identity(spec: &LimitSpec, trace: &[(u64, Op)]) -> Result<(), TestCaseError> {
    let env = env();
    let [lua, general, module] = env.engines();
    for (_, store) in env.engines() {
        identity_on(&[store], spec, trace)?;
        identity_batched(store, spec, trace)?;
    }
    identity_on(&[lua.1, module.1, general.1], spec, trace)
}

/// Quotas small enough to go into debt and out of it within a trace, with
/// windows of whole seconds (fast window script) or not (general); and,
/// now and then, the wide quotas whose products pass 2^53 (general script).
fn quota() -> impl Strategy<Value = Quota> {
    let small = small_quota();
    let wide = (
        prop_oneof![
            1u64..2_000,
            1_000_000_000_000u64..100_000_000_000_000_000,
            (1u64 << 60)..u64::MAX,
        ],
        prop_oneof![1u64..12, 1u64..u64::MAX],
        prop_oneof![Just(None), (1u64..40).prop_map(Some)],
    )
        .prop_filter_map("valid quota", |(w, l, b)| {
            Quota::with_burst(l, w, b.unwrap_or(l)).ok()
        });
    prop_oneof![4 => small, 1 => wide]
}

/// A quota small enough to go into debt and out of it within a trace
/// (windows of whole seconds or not).
fn small_quota() -> impl Strategy<Value = Quota> {
    (1u64..6, 1u64..5, 1u64..8, any::<bool>()).prop_map(|(l, b, w, whole)| {
        let unit = if whole { 1_000_000_000 } else { 1_000_000_007 };
        Quota::with_burst(l, w * unit, b).unwrap()
    })
}

/// A trace at today's stamps or near 2^64: steps forward (sometimes by an
/// exact interval or window, by up to a whole capacity so debts drain
/// within a few steps, sometimes back), takes (costs above the burst
/// included), queries and charges of every size, debts deeper than the
/// capacity included.
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
        1 => 0i128..=(w as i128).saturating_mul(3),
        1 => 0i128..=cap,
        1 => -(t.min(1 << 40) as i128)..0,
    ];
    let op = prop_oneof![
        3 => (0u64..4).prop_map(Op::Take),
        1 => (0u64..=over).prop_map(Op::Take),
        1 => Just(Op::Take(0)),
        3 => (0u64..8).prop_map(Op::Charge),
        1 => any::<u64>().prop_map(Op::Charge),
    ];
    (start, prop::collection::vec((dt, op), 1..40)).prop_map(|(start, steps)| {
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
        cases: 48,
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

/// Rounds of one charge (often into debt) followed by a run of takes that
/// drains it, costs above the burst included: the pattern where a fast
/// script meets a debt in the middle of a batch. Small quotas, so the
/// bucket algorithms go through the fast script.
fn debts_then_takes() -> impl Strategy<Value = (LimitSpec, Vec<(u64, Op)>)> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        prop::collection::vec(small_quota(), 1..=2),
    )
        .prop_flat_map(|(alg, quotas)| {
            let q = quotas[0];
            let (b, cap) = (q.burst(), q.capacity_ns());
            let take = (0..=cap / 2, 0..=b + 1);
            let round = (1..=3 * b, prop::collection::vec(take, 1..10));
            let spec = LimitSpec::new(unique("debt"), alg, quotas);
            (
                Just(spec),
                1_760_000_000_000_000_000u64..1_770_000_000_000_000_000,
                prop::collection::vec(round, 1..5),
            )
        })
        .prop_map(|(spec, start, rounds)| {
            let mut now = start;
            let mut trace = Vec::new();
            for (charge, takes) in rounds {
                trace.push((now, Op::Charge(charge)));
                for (dt, cost) in takes {
                    now += dt;
                    trace.push((now, Op::Take(cost)));
                }
            }
            (spec, trace)
        })
}

proptest! {
    // Short traces: many cases at little cost.
    #![proptest_config(ProptestConfig { cases: 256, ..config() })]
    /// Every engine, runs of takes batched as `drl replay --store` sends
    /// them, against drl-core.
    #[test]
    fn batched_takes_after_debts((spec, trace) in debts_then_takes()) {
        for (_, store) in env().engines() {
            identity_batched(store, &spec, &trace)?;
        }
    }
}

identity_test!(charges_token_bucket, Algorithm::TokenBucket);
identity_test!(charges_leaky_bucket, Algorithm::LeakyBucket);
identity_test!(charges_gcra, Algorithm::Gcra);
identity_test!(charges_leaky_queue, Algorithm::LeakyQueue);
identity_test!(charges_fixed_window, Algorithm::FixedWindow);
identity_test!(charges_sliding_log, Algorithm::SlidingLog);
identity_test!(charges_sliding_window, Algorithm::SlidingWindow);

const MINUTE: u64 = 60_000_000_000;

fn check<'a>(spec: &'a LimitSpec, key: &'a str, cost: u64, now: u64) -> Check<'a> {
    Check {
        spec,
        key,
        cost,
        now,
    }
}

/// Envoy's token-quota scenario (2 per minute, each request checked with
/// cost 0, then charged 1): checks 1 to 3 pass, check 4 is denied, with
/// every engine and every algorithm.
#[test]
fn token_quota_scenario() {
    let env = env();
    for (name, store) in env.engines() {
        for alg in Algorithm::ALL {
            let spec = LimitSpec::new(unique("quota"), alg, vec![Quota::new(2, MINUTE).unwrap()]);
            let key = unique("tenant");
            // Aligned to a minute, so the windows do not roll over.
            let t0 = 1_764_000_000_000_000_000 / MINUTE * MINUTE;
            let mut passed = Vec::new();
            for i in 0..4 {
                let now = t0 + i * 1_000_000;
                let d: Decision = env
                    .rt
                    .block_on(store.decide(check(&spec, &key, 0, now)))
                    .unwrap();
                passed.push(d.allowed);
                env.rt
                    .block_on(store.charge(check(&spec, &key, 1, now)))
                    .unwrap();
            }
            assert_eq!(passed, [true, true, true, false], "{name} {alg}");
        }
    }
}

/// The leaky-queue trace `drl replay --store` once answered wrongly with
/// the Lua engine: after a charge left the key in debt, the take at
/// +125 ms (admitted: the debt has drained by then) and the take of cost
/// 4 > burst at +132 ms went in one batch; the fast script left the first
/// undecided but answered the second on the debt state, ahead of the
/// first (remaining 3 and reset_after 0 instead of 2 and 9353027). Every
/// answer and the final state must equal drl-core's, every algorithm of
/// the fast bucket script included.
#[test]
fn a_take_after_an_undecided_one_in_a_batch_waits_for_it() {
    let env = env();
    let t0 = 1_763_700_000_006_670_726u64;
    let rows: [(u64, u64, bool); 10] = [
        (0, 3, false),
        (6_934_105, 0, false),
        (22_425_905, 1, false),
        (37_507_020, 4, false),
        (45_318_414, 3, true),
        (46_232_940, 2, false),
        (57_709_215, 4, false),
        (112_460_973, 3, false),
        (125_228_518, 1, false),
        (132_542_158, 4, false),
    ];
    let trace: Vec<(u64, Op)> = rows
        .iter()
        .map(|&(dt, cost, charge)| {
            let op = if charge {
                Op::Charge(cost)
            } else {
                Op::Take(cost)
            };
            (t0 + dt, op)
        })
        .collect();
    for alg in [
        Algorithm::LeakyQueue,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::TokenBucket,
    ] {
        for quotas in [
            vec![Quota::new(3, 50_000_000).unwrap()],
            vec![
                Quota::new(3, 50_000_000).unwrap(),
                Quota::new(20, 1_000_000_000).unwrap(),
            ],
            // The quota in debt second: a denial by the first must not
            // hide it.
            vec![
                Quota::new(20, 1_000_000_000).unwrap(),
                Quota::new(3, 50_000_000).unwrap(),
            ],
        ] {
            let spec = LimitSpec::new(unique("lq"), alg, quotas);
            for (name, store) in env.engines() {
                if let Err(e) = identity_batched(store, &spec, &trace) {
                    panic!("{alg} {name}: {e}");
                }
            }
        }
    }
    // The case itself, by the numbers (leaky-queue, the Lua engine).
    let spec = LimitSpec::new(
        unique("lq"),
        Algorithm::LeakyQueue,
        vec![Quota::new(3, 50_000_000).unwrap()],
    );
    let key = unique("k");
    let store = env.engines()[0].1;
    for &(now, op) in &trace[..8] {
        match op {
            Op::Take(cost) => env.rt.block_on(store.decide(check(&spec, &key, cost, now))),
            Op::Charge(cost) => env.rt.block_on(store.charge(check(&spec, &key, cost, now))),
        }
        .unwrap();
    }
    let last: Vec<Check<'_>> = trace[8..]
        .iter()
        .map(|&(now, op)| match op {
            Op::Take(cost) => check(&spec, &key, cost, now),
            Op::Charge(_) => unreachable!("takes"),
        })
        .collect();
    let got: Vec<Decision> = env
        .rt
        .block_on(store.decide_many(&last))
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(got[0].allowed);
    assert!(!got[1].allowed);
    assert_eq!((got[1].remaining, got[1].reset_after), (2, 9_353_027));
}

/// A batch (`decide_many`, one call per script kind) on keys in debt: the
/// fast script leaves those undecided and they are decided again by the
/// general script; every answer equals drl-core's, in order.
#[test]
fn batches_read_debts_exactly() {
    let env = env();
    for (name, store) in env.engines() {
        for alg in Algorithm::ALL {
            let spec = LimitSpec::new(
                unique("batch"),
                alg,
                vec![
                    Quota::with_burst(3, 3_000_000_000, 3).unwrap(),
                    Quota::new(10, MINUTE).unwrap(),
                ],
            );
            let reference = spec.limiter();
            let keys: Vec<String> = (0..4).map(|_| unique("b")).collect();
            let mut states: Vec<Vec<State>> = keys.iter().map(|_| reference.new_states()).collect();
            let t0 = 1_764_000_000_000_000_000 / MINUTE * MINUTE;
            // Keys 0 and 2 in debt (4 on a capacity of 3), 1 half full, 3 fresh.
            for (k, cost) in [(0, 4), (1, 2), (2, 4)] {
                let want = reference.charge(&mut states[k], t0, cost);
                let got = env
                    .rt
                    .block_on(store.charge(check(&spec, &keys[k], cost, t0)))
                    .unwrap();
                assert_eq!(got, want, "{name} {alg} charge {k}");
            }
            for step in 0..6u64 {
                let now = t0 + step * 700_000_000;
                let batch: Vec<(usize, u64)> = vec![(0, 1), (1, 1), (2, 0), (3, 1), (0, 0), (1, 1)];
                let checks: Vec<Check<'_>> = batch
                    .iter()
                    .map(|&(k, cost)| check(&spec, &keys[k], cost, now))
                    .collect();
                let got = env.rt.block_on(store.decide_many(&checks));
                for (&(k, cost), got) in batch.iter().zip(got) {
                    let want = reference.decide(&mut states[k], now, cost);
                    assert_eq!(got.unwrap(), want, "{name} {alg} step {step} key {k}");
                }
            }
            for (k, key) in keys.iter().enumerate() {
                assert_eq!(stored(&spec, store, key), states[k], "{name} {alg} key {k}");
            }
        }
    }
}

/// Charges on a 3-master cluster, both engines: multi-quota limits over
/// many keys (spread over every node), each charge one call in its key's
/// slot; every answer equals drl-core's, and so does every later take.
#[test]
fn cluster_charges_are_exact() {
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
        let mut denied = 0;
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
            for k in 0..12u64 {
                let key = format!("tenant-{k}");
                let mut states = reference.new_states();
                for step in 0..6u64 {
                    let now = t0 + step * 300_000_000;
                    let cost = (k + step) % 4;
                    let want = reference.charge(&mut states, now, cost);
                    let got = rt
                        .block_on(store.charge(check(&spec, &key, cost, now)))
                        .unwrap_or_else(|e| panic!("{engine:?} {alg} {key}: {e}"));
                    assert_eq!(got, want, "{engine:?} {alg} {key} charge at {step}");
                    let want = reference.decide(&mut states, now, 1);
                    let got = rt
                        .block_on(store.decide(check(&spec, &key, 1, now)))
                        .unwrap();
                    assert_eq!(got, want, "{engine:?} {alg} {key} take at {step}");
                    denied += !got.allowed as u64;
                }
            }
        }
        assert!(denied > 0, "some takes met debts");
        for i in 0..3 {
            let n: i64 = redis::cmd("DBSIZE")
                .query(&mut cluster.nodes[i].admin())
                .unwrap();
            assert!(n > 0, "node {i} holds no key: keys are not spread");
        }
    }
}
