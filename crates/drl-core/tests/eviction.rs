//! Issue 42, defect D11: eviction must never admit more than the exact
//! limiter. A key whose live state is evicted comes back no more generous
//! than it left (docs/semantics.md, "Bounded memory in the keyed limiter").

use std::collections::HashMap;

use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, MultiLimiter, Quota, State};
use proptest::prelude::*;

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SECOND;

/// The cost that drains a fresh key: the burst, or the limit for the
/// windowed algorithms.
fn drain_cost(alg: Algorithm, q: &Quota) -> u64 {
    if alg.is_windowed() {
        q.limit()
    } else {
        q.burst()
    }
}

/// The attack: a 10/hour victim is drained, then a flood of distinct keys,
/// each drained at once, keeps the table full so that the victim (the
/// entry nearest to fresh) is evicted again and again. Between flood keys
/// the victim retries. Over 20 s it must be admitted 0 times: its hour is
/// not over. (Before the summary, it was admitted 462-901 times.)
#[test]
fn a_flood_of_drained_keys_never_resets_a_drained_victim() {
    let q = Quota::new(10, HOUR).unwrap();
    let mut reset = Vec::new();
    // One shard of 1 key (every new key evicts the victim) or of 16 (every
    // eviction samples every entry; the victim goes when nearest to fresh).
    for (max_keys, alg) in [1, 16]
        .into_iter()
        .flat_map(|n| Algorithm::ALL.map(|a| (n, a)))
    {
        let cfg = KeyedConfig {
            max_keys,
            shards: 1,
            sweep_interval: SECOND,
            ..KeyedConfig::default()
        };
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let drain = drain_cost(alg, &q);
        let t0 = 1_000 * HOUR; // the start of an hour window
        assert!(keyed.decide(&0, t0, drain).allowed, "{alg}");
        let (mut admitted, mut evicted) = (0, 0);
        // One flood key and one victim retry every 1 ms for 20 s.
        for i in 1..=20_000u64 {
            let now = t0 + i * 1_000_000;
            keyed.decide(&i, now, drain);
            evicted += u64::from(keyed.snapshot(&0).is_none());
            if keyed.decide(&0, now, 1).allowed {
                admitted += 1;
            }
        }
        let st = keyed.stats();
        // Evicted once, it stays out: its retries are denied on the
        // summary's state and so never stored again.
        assert!(
            evicted > 0 || max_keys > 1,
            "{alg}: the victim was never evicted ({st:?})"
        );
        if admitted > 0 {
            reset.push((max_keys, alg, admitted));
        }
    }
    assert!(
        reset.is_empty(),
        "victims reset (max_keys, algorithm, admissions): {reset:?}"
    );
}

/// Feeds `steps` (`dt` or a step back, key, cost) to a keyed limiter of
/// `max_keys` keys over `shards` shards, and each request it admits to an
/// exact limiter of its key that sees only those admitted requests: the
/// exact limiter must admit every one. Returns how many the keyed limiter
/// admitted, to check that the trace exercised something.
fn replay_admitted(
    m: &MultiLimiter,
    max_keys: usize,
    shards: usize,
    sweep_interval: u64,
    steps: &[(u64, u64, u32, u64)],
) -> Result<u64, TestCaseError> {
    let cfg = KeyedConfig {
        max_keys,
        shards,
        sweep_interval,
        ..KeyedConfig::default()
    };
    let keyed = KeyedLimiter::<u32>::new(m.clone(), cfg);
    let mut exact: HashMap<u32, Vec<State>> = HashMap::new();
    let mut t = 1_000;
    let mut admitted = 0;
    for &(dt, back, k, cost) in steps {
        t += dt;
        let now = t.saturating_sub(back);
        if keyed.decide(&k, now, cost).allowed {
            admitted += 1;
            let states = exact.entry(k).or_insert_with(|| m.new_states());
            let d = m.decide(states, now, cost);
            prop_assert!(
                d.allowed,
                "key {} admitted cost {} at {} beyond the exact limiter: {:?}",
                k,
                cost,
                now,
                d
            );
        }
    }
    Ok(admitted)
}

/// The limiter of the property tests: `alg` over a short window (3 per
/// 100 ns, burst 4) and, with `two`, a longer one (5 per 700 ns) too.
fn limiter(alg: Algorithm, two: bool) -> MultiLimiter {
    let mut q = vec![Quota::with_burst(3, 100, 4).unwrap()];
    if two {
        q.push(Quota::new(5, 700).unwrap());
    }
    MultiLimiter::uniform(alg, &q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The invariant of docs/semantics.md, "Bounded memory in the keyed
    /// limiter": whatever is evicted, every request the bounded table
    /// admits for a key is admitted by an exact limiter fed only that
    /// key's admitted requests. Arbitrary floods of keys and costs on a
    /// clock moving forward, a table of 1-6 keys so that live state is
    /// evicted constantly, all seven algorithms, one quota (lock-free
    /// cells for four of them) or two (per-key mutexes).
    #[test]
    fn eviction_never_admits_beyond_the_exact_limiter(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two in any::<bool>(),
        max_keys in 1usize..7,
        shards in prop::sample::select(vec![1usize, 2]),
        sweep_interval in 1u64..200,
        steps in prop::collection::vec((0u64..40, 0u32..12, 0u64..6), 1..400),
    ) {
        let steps: Vec<_> = steps.into_iter().map(|(dt, k, c)| (dt, 0, k, c)).collect();
        replay_admitted(&limiter(alg, two), max_keys, shards, sweep_interval, &steps)?;
    }

    /// The same with stamps that step back (up to 60 ns behind the latest,
    /// as concurrent callers' stamps do): the clock mark of a state the
    /// summary restores never lets an early stamp through.
    #[test]
    fn eviction_never_admits_beyond_the_exact_limiter_with_steps_back(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two in any::<bool>(),
        max_keys in 1usize..7,
        shards in prop::sample::select(vec![1usize, 2]),
        sweep_interval in 1u64..200,
        steps in prop::collection::vec((0u64..40, 0u64..60, 0u32..12, 0u64..6), 1..400),
    ) {
        replay_admitted(&limiter(alg, two), max_keys, shards, sweep_interval, &steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The same bound with four threads sharing a table of 2-8 keys: each
    /// key's requests are decided in trace order by one thread, while
    /// other threads evict, fold and restore around it.
    #[test]
    fn concurrent_eviction_never_admits_beyond_the_exact_limiter(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two in any::<bool>(),
        max_keys in 2usize..9,
        steps in prop::collection::vec((0u64..30, 0u32..24, 0u64..5), 1..600),
    ) {
        let m = limiter(alg, two);
        let cfg = KeyedConfig { max_keys, shards: 2, sweep_interval: 10, ..KeyedConfig::default() };
        let keyed = KeyedLimiter::<u32>::new(m.clone(), cfg);
        let mut t = 1_000;
        let trace: Vec<(u64, u32, u64)> =
            steps.into_iter().map(|(dt, k, c)| { t += dt; (t, k, c) }).collect();
        let threads = 4;
        let admitted: Vec<Vec<(u64, u32, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|i| {
                let (keyed, trace) = (&keyed, &trace);
                s.spawn(move || {
                    trace.iter()
                        .filter(|(_, k, _)| *k as usize % threads == i)
                        .filter(|&&(t, k, c)| keyed.decide(&k, t, c).allowed)
                        .copied()
                        .collect()
                })
            }).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut exact: HashMap<u32, Vec<State>> = HashMap::new();
        for (t, k, c) in admitted.into_iter().flatten() {
            let d = m.decide(exact.entry(k).or_insert_with(|| m.new_states()), t, c);
            prop_assert!(d.allowed, "key {} cost {} at {}: {:?}", k, c, t, d);
        }
    }
}

/// A limiter whose keys were all evicted is not stateless while the
/// summary still holds one back, and is once that state has aged out.
#[test]
fn a_limiter_is_stateless_only_once_the_summary_holds_nothing_back() {
    let q = Quota::new(10, HOUR).unwrap();
    for alg in Algorithm::ALL {
        let cfg = KeyedConfig {
            max_keys: 1,
            shards: 1,
            ..KeyedConfig::default()
        };
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let t0 = 1_000 * HOUR;
        assert!(keyed.is_stateless(t0), "{alg}");
        assert!(keyed.decide(&1, t0, drain_cost(alg, &q)).allowed);
        assert!(keyed.decide(&2, t0 + 1, 1).allowed, "{alg}");
        // Key 1 was evicted live; key 2 is held.
        assert!(keyed.snapshot(&1).is_none());
        keyed.sweep(t0 + 3 * HOUR);
        assert!(keyed.is_empty(), "{alg}");
        assert!(!keyed.is_stateless(t0 + 2), "{alg}");
        assert!(!keyed.decide(&1, t0 + 2, 1).allowed, "{alg}");
        assert!(keyed.is_stateless(t0 + 3 * HOUR), "{alg}");
    }
}
