//! The direct limiter's one-word cell (`AtomicLimiter`, `keyed::tat`)
//! against the exact contract (docs/semantics.md, "The direct limiter: one
//! word"): identical on monotone clocks, never more permissive than the
//! clamp one step at a time, and within `burst + floor((t2 - t1) / T)` over
//! any span of stamps on any trace.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use drl_core::keyed::tat;
use drl_core::{Algorithm, AtomicLimiter, DenyReason, Limiter, Quota, State};
use proptest::prelude::*;

const BUCKETS: [Algorithm; 3] = [
    Algorithm::TokenBucket,
    Algorithm::LeakyBucket,
    Algorithm::Gcra,
];

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=12, 1u64..=120, 1u64..=16)
        .prop_map(|(limit, window, burst)| Quota::with_burst(limit, window, burst).unwrap())
}

/// A first stamp near 0, in the middle of the clock, or near its end (far
/// enough from `u64::MAX` that every stamp plus `burst * T` fits).
fn base() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..1_000,
        (1u64 << 62)..(1u64 << 62) + 1_000,
        u64::MAX - 2_000_000..u64::MAX - 1_000_000,
    ]
}

/// Monotone stamps (steps of 0 to 400 ns) with costs up to `burst + 1`.
fn monotone(base: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..400, 0u64..=17), 1..150).prop_map(move |steps| {
        let mut t = base;
        steps
            .into_iter()
            .map(|(dt, c)| {
                t += dt;
                (t, c)
            })
            .collect()
    })
}

/// Stamps in any order: repeated stamps, small steps either way (a few
/// emission intervals, so requests queue), and steps back of up to
/// 3,000 ns.
fn any_order(base: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let step = prop_oneof![
        2 => Just(0i64),
        5 => -300i64..300,
        1 => -3_000i64..1_000,
    ];
    prop::collection::vec((step, 0u64..=17), 1..150).prop_map(move |steps| {
        let mut t = base + 3_000 * 150;
        steps
            .into_iter()
            .map(|(dt, c)| {
                t = t.wrapping_add_signed(dt);
                (t, c)
            })
            .collect()
    })
}

/// The exact state's clock mark.
fn mark(s: &State) -> u64 {
    match s {
        State::TokenBucket(s) => s.last,
        State::LeakyBucket(s) => s.last,
        State::Gcra(s) => s.last,
        other => unreachable!("not a bucket: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// (a) On a monotone clock the one-word cell and the exact cell decide
    /// identically, field for field, and hold the same `tat`.
    #[test]
    fn monotone_traces_decide_exactly_as_the_contract(
        q in quota(),
        a in 0usize..3,
        tr in base().prop_flat_map(monotone),
    ) {
        let exact = Limiter::new(BUCKETS[a], q);
        let mut state = exact.new_state();
        let direct = AtomicLimiter::new(BUCKETS[a], q).unwrap();
        let mut word = tat::FRESH;
        for (i, &(now, cost)) in tr.iter().enumerate() {
            let want = exact.decide(&mut state, now, cost);
            prop_assert_eq!(direct.decide(now, cost), want, "request {} at {} cost {}", i, now, cost);
            let (d, next) = tat::step(&q, word, now, cost);
            prop_assert_eq!(d, want);
            word = next.unwrap_or(word);
            prop_assert_eq!(Some(word), tat::tat_of(&q, &state));
        }
    }

    /// (b) On any trace, clock steps back included, the admitted costs with
    /// stamps in any span `[t1, t2]` sum to at most
    /// `burst + floor((t2 - t1) / T)`.
    #[test]
    fn any_trace_admits_at_most_burst_plus_the_rate(
        q in quota(),
        a in 0usize..3,
        tr in base().prop_flat_map(any_order),
    ) {
        let direct = AtomicLimiter::new(BUCKETS[a], q).unwrap();
        let mut admitted: Vec<(u64, u64)> = tr
            .iter()
            .filter(|&&(now, cost)| direct.decide(now, cost).allowed && cost > 0)
            .copied()
            .collect();
        admitted.sort_unstable();
        let t = q.emission_interval();
        // The worst span starts and ends at admitted stamps.
        for i in 0..admitted.len() {
            let mut sum = 0u64;
            for &(t2, c) in &admitted[i..] {
                sum += c;
                let bound = q.burst() + (t2 - admitted[i].0) / t;
                prop_assert!(
                    sum <= bound,
                    "{} units admitted in [{}, {}], bound {}", sum, admitted[i].0, t2, bound
                );
            }
        }
    }

    /// The soundness step of docs/semantics.md: from the state the exact
    /// contract holds at any point of any trace, the one-word rule judged at
    /// the request's own `now` admits only what the clamped rule admits,
    /// leaves the same `tat` when both admit, and decides identically when
    /// the request is not stamped before the clock mark.
    #[test]
    fn one_step_is_never_more_permissive_than_the_clamp(
        q in quota(),
        a in 0usize..3,
        tr in base().prop_flat_map(any_order),
    ) {
        let exact = Limiter::new(BUCKETS[a], q);
        let mut state = exact.new_state();
        for &(now, cost) in &tr {
            let word = tat::tat_of(&q, &state).unwrap();
            let (mine, next) = tat::step(&q, word, now, cost);
            let before = mark(&state);
            let want = exact.decide(&mut state, now, cost);
            if now >= before {
                prop_assert_eq!(mine, want);
            }
            if mine.allowed {
                prop_assert!(want.allowed, "admitted at {} where the clamp denies: {:?}", now, want);
                prop_assert_eq!(next.unwrap_or(word), tat::tat_of(&q, &state).unwrap());
            }
        }
    }
}

#[test]
fn only_the_bucket_family_fits_one_word() {
    let q = Quota::new(10, 1_000).unwrap();
    for a in Algorithm::ALL {
        let l = AtomicLimiter::new(a, q);
        assert_eq!(l.is_some(), BUCKETS.contains(&a), "{a}");
        if let Some(l) = l {
            assert_eq!((l.algorithm(), *l.quota()), (a, q));
        }
    }
}

/// A request stamped before an earlier admission is judged from its own
/// stamp: worked example of docs/semantics.md.
#[test]
fn a_request_stamped_early_waits_from_its_own_stamp() {
    // T = 100 ns, burst 2.
    let q = Quota::with_burst(10, 1_000, 2).unwrap();
    let l = AtomicLimiter::new(Algorithm::Gcra, q).unwrap();
    assert!(l.decide(1_000, 2).allowed); // tat = 1_200
    // Exact contract: clamped to 1_000, queued 200, denied with retry 100.
    // Here: judged at 900, queued 300, denied with retry 200.
    let d = l.decide(900, 1);
    assert_eq!(
        (d.allowed, d.retry_after, d.reset_after),
        (false, Some(200), 300)
    );
    // At 1_100 one permit is free again, as under the exact contract.
    let d = l.decide(1_100, 1);
    assert_eq!((d.allowed, d.reset_after, d.remaining), (true, 200, 0));
}

/// The word must hold `tat`: within `burst * T` of `u64::MAX` an admission
/// whose new `tat` would not fit is denied for good; queries still answer.
#[test]
fn the_end_of_the_clock_denies_instead_of_wrapping() {
    let q = Quota::with_burst(1, 100, 3).unwrap();
    let l = AtomicLimiter::new(Algorithm::TokenBucket, q).unwrap();
    let now = u64::MAX - 150;
    assert!(l.decide(now, 1).allowed); // tat = MAX - 50
    let d = l.decide(now, 1);
    assert_eq!(
        (d.allowed, d.retry_after, d.reason),
        (false, None, Some(DenyReason::CostExceedsCapacity))
    );
    let d = l.decide(now, 0);
    assert_eq!((d.allowed, d.reset_after, d.remaining), (true, 100, 2));
}

/// Many threads on one limiter at one instant: exactly `burst` admitted,
/// whatever the interleaving (the loom model checks every interleaving of
/// three; this runs real threads).
#[test]
fn concurrent_deciders_admit_exactly_the_burst() {
    let q = Quota::with_burst(1, 1_000_000, 5_000).unwrap();
    for a in BUCKETS {
        let l = AtomicLimiter::new(a, q).unwrap();
        let admitted = AtomicUsize::new(0);
        let turns = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while turns.fetch_add(1, Ordering::Relaxed) < 8_000 {
                        if l.decide(7, 1).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 5_000, "{a}");
        assert!(!l.decide(7, 1).allowed);
    }
}
