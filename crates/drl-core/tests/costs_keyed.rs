//! Costs known afterwards on the keyed limiter: settles racing from many
//! threads, debt surviving eviction (never fail open), and the ledger.

use std::collections::HashMap;

use drl_core::{
    Algorithm, KeyedConfig, KeyedLimiter, Ledger, MultiLimiter, Quota, Reservation, State,
};
use proptest::prelude::*;

const HOUR: u64 = 3_600_000_000_000;

fn uniform(alg: Algorithm, two: bool) -> MultiLimiter {
    let mut q = vec![Quota::new(1_000, HOUR).unwrap()];
    if two {
        q.push(Quota::new(5_000, 24 * HOUR).unwrap());
    }
    MultiLimiter::uniform(alg, &q)
}

/// Many settles and charges racing on one key leave exactly the state the
/// same operations leave one after the other: every algorithm, one quota
/// (lock-free cells for four of them) and two (per-key mutex).
#[test]
fn racing_settles_end_in_the_sequential_state() {
    const N: usize = 64;
    const THREADS: usize = 4;
    let now = 1_000 * HOUR + 17;
    for alg in Algorithm::ALL {
        for two in [false, true] {
            let raced = KeyedLimiter::<u64>::new(uniform(alg, two), KeyedConfig::default());
            let sequential = KeyedLimiter::<u64>::new(uniform(alg, two), KeyedConfig::default());
            let reserve = |l: &KeyedLimiter<u64>| -> Vec<Reservation<u64>> {
                (0..N)
                    .map(|_| {
                        let (d, r) = l.reserve(&9, now, 3, HOUR);
                        assert!(d.allowed, "{alg}: {d:?}");
                        r.unwrap()
                    })
                    .collect()
            };
            // Actual costs 0..=6 around the estimate 3: refunds, exact
            // settlements and charges beyond the estimate.
            let actual = |i: usize| (i * 5 % 7) as u64;
            let mut by_thread: Vec<Vec<(usize, Reservation<u64>)>> =
                (0..THREADS).map(|_| Vec::new()).collect();
            for (i, r) in reserve(&raced).into_iter().enumerate() {
                by_thread[i % THREADS].push((i, r));
            }
            std::thread::scope(|s| {
                for mine in by_thread {
                    let raced = &raced;
                    s.spawn(move || {
                        for (i, r) in mine {
                            raced.settle(r, now, actual(i));
                            raced.charge(&9, now, 1);
                        }
                    });
                }
            });
            for (i, r) in reserve(&sequential).into_iter().enumerate() {
                sequential.settle(r, now, actual(i));
                sequential.charge(&9, now, 1);
            }
            assert_eq!(
                raced.snapshot(&9),
                sequential.snapshot(&9),
                "{alg}, two: {two}"
            );
            // And the state counts exactly what was spent.
            let spent: u64 = (0..N).map(|i| actual(i) + 1).sum();
            let d = raced.check(&9, now, 0);
            assert_eq!(d.remaining, 1_000 - spent, "{alg}, two: {two}: {d:?}");
        }
    }
}

/// A key deep in debt, evicted by a flood of drained keys, comes back with
/// its debt: a query and a take are both denied.
#[test]
fn a_flood_of_keys_never_forgives_a_debt() {
    let q = Quota::new(10, HOUR).unwrap();
    for alg in Algorithm::ALL {
        // One key per table: every new key evicts the one held.
        let cfg = KeyedConfig {
            max_keys: 1,
            shards: 1,
            ..KeyedConfig::default()
        };
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let mut t = 1_000 * HOUR;
        assert!(!keyed.charge(&0, t, 1_000).allowed, "{alg}");
        for k in 1..=2_000u64 {
            t += 1_000_000;
            keyed.decide(&k, t, 10);
        }
        assert!(keyed.stats().evicted_live > 0, "{alg}");
        assert!(
            keyed.snapshot(&0).is_none(),
            "{alg}: the victim was evicted"
        );
        assert!(
            !keyed.check(&0, t, 0).allowed,
            "{alg}: query after the flood"
        );
        assert!(
            !keyed.decide(&0, t, 1).allowed,
            "{alg}: take after the flood"
        );
    }
}

/// Replays take / query / charge steps on a bounded table, and checks each
/// answer that allows (an admitted take, a query or a charge answered
/// "allowed") against an exact limiter fed every charge and every
/// admitted take of that key.
fn replay(
    m: &MultiLimiter,
    max_keys: usize,
    sweep_interval: u64,
    steps: &[(u64, u64, u32, u8, u64)],
) -> Result<(), TestCaseError> {
    let cfg = KeyedConfig {
        max_keys,
        shards: 1,
        sweep_interval,
        ..KeyedConfig::default()
    };
    let keyed = KeyedLimiter::<u32>::new(m.clone(), cfg);
    let mut exact: HashMap<u32, Vec<State>> = HashMap::new();
    let mut t = 1_000;
    for &(dt, back, k, kind, cost) in steps {
        t += dt;
        let now = t.saturating_sub(back);
        let states = exact.entry(k).or_insert_with(|| m.new_states());
        match kind % 3 {
            0 => {
                if keyed.decide(&k, now, cost).allowed {
                    let d = m.decide(states, now, cost);
                    prop_assert!(d.allowed, "key {} take {} at {}: {:?}", k, cost, now, d);
                }
            }
            1 => {
                if keyed.check(&k, now, 0).allowed {
                    let d = m.check(states, now, 0);
                    prop_assert!(d.allowed, "key {} query at {}: {:?}", k, now, d);
                }
            }
            _ => {
                let got = keyed.charge(&k, now, cost * 3);
                let d = m.charge(states, now, cost * 3);
                prop_assert!(
                    !got.allowed || d.allowed,
                    "key {} charge at {}: {:?}",
                    k,
                    now,
                    d
                );
            }
        }
    }
    Ok(())
}

fn small(alg: Algorithm, two: bool) -> MultiLimiter {
    let mut q = vec![Quota::with_burst(3, 100, 4).unwrap()];
    if two {
        q.push(Quota::new(5, 700).unwrap());
    }
    MultiLimiter::uniform(alg, &q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// docs/semantics.md, "Bounded memory in the keyed limiter", under
    /// debt: whatever is evicted, a key never answers "allowed" (a take, a
    /// query, a charge's answer) where an exact limiter fed the same
    /// charges and admitted takes would not. Tables of 1-6 keys, all
    /// seven algorithms, one quota or two, stamps that step back.
    #[test]
    fn eviction_never_forgives_debt(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two in any::<bool>(),
        max_keys in 1usize..7,
        sweep_interval in 1u64..200,
        steps in prop::collection::vec(
            (0u64..40, prop_oneof![3 => Just(0u64), 1 => 0u64..60], 0u32..12, any::<u8>(), 0u64..6),
            1..400,
        ),
    ) {
        replay(&small(alg, two), max_keys, sweep_interval, &steps)?;
    }
}

#[test]
fn the_ledger_hands_back_a_reservation_once_and_only_for_its_key() {
    let keyed = KeyedLimiter::<String>::new(
        MultiLimiter::uniform(Algorithm::TokenBucket, &[Quota::new(10, HOUR).unwrap()]),
        KeyedConfig::default(),
    );
    let mut ledger = Ledger::new(2);
    let (_, r) = keyed.reserve("a", 1_000, 4, 500);
    let id = ledger.insert(r.unwrap(), 1_000);
    assert!(
        ledger.take(id, "b").is_none(),
        "another key's id settles nothing"
    );
    let r = ledger.take(id, "a").expect("held");
    assert!(ledger.take(id, "a").is_none(), "taken once");
    let s = keyed.release(r, 1_100);
    assert_eq!((s.refunded, s.expired), (4, false));
    assert_eq!(keyed.check("a", 1_100, 0).remaining, 10);
}

#[test]
fn the_ledger_closes_expired_and_excess_reservations_at_their_estimate() {
    let keyed = KeyedLimiter::<String>::new(
        MultiLimiter::uniform(Algorithm::FixedWindow, &[Quota::new(10, HOUR).unwrap()]),
        KeyedConfig::default(),
    );
    let mut ledger = Ledger::new(2);
    let mut ids = Vec::new();
    for (i, ttl) in [(0u64, 100u64), (1, 50), (2, 400)] {
        let (_, r) = keyed.reserve("k", 1_000 + i, 2, ttl);
        ids.push(ledger.insert(r.unwrap(), 1_000 + i));
    }
    // Full at two: the one expiring first (ttl 50) was closed.
    assert_eq!((ledger.len(), ledger.closed()), (2, 1));
    assert!(ledger.take(ids[1], "k").is_none());
    assert_eq!(ledger.expire(1_100), 1);
    assert_eq!((ledger.len(), ledger.closed()), (1, 2));
    // Closed ones stay consumed at their estimate: 3 x 2 of 10.
    assert_eq!(keyed.check("k", 1_200, 0).remaining, 4);
    // Settling after the expiry refunds nothing, and still charges more.
    let r = ledger.take(ids[2], "k").unwrap();
    let s = keyed.settle(r, 1_500, 7);
    assert_eq!((s.expired, s.charged, s.refunded), (true, 5, 0));
    assert_eq!(keyed.check("k", 1_500, 0).remaining, 0);
    assert!(!s.decision.allowed, "2 + 2 + 7 = 11 of 10: in debt");
}

proptest! {
    /// `charge_seen` answers what a query then a charge answer one after
    /// the other, and leaves the same state: every algorithm, one quota
    /// (cells) and two (mutex), on random costs and stamps.
    #[test]
    fn charge_seen_is_a_query_then_a_charge(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two in any::<bool>(),
        steps in prop::collection::vec((0u64..1_500, 0u64..HOUR / 100, 0u64..3), 1..40),
    ) {
        let seen = KeyedLimiter::<u64>::new(uniform(alg, two), KeyedConfig::default());
        let twin = KeyedLimiter::<u64>::new(uniform(alg, two), KeyedConfig::default());
        let mut now = 1_000 * HOUR;
        for (cost, dt, key) in steps {
            now += dt;
            let (before, after) = seen.charge_seen(&key, now, cost);
            prop_assert_eq!(before, twin.check(&key, now, 0), "{} before", alg);
            prop_assert_eq!(after, twin.charge(&key, now, cost), "{} after", alg);
        }
        for key in 0..3u64 {
            prop_assert_eq!(seen.check(&key, now, 1), twin.check(&key, now, 1));
        }
    }
}
