//! Property tests of the invariants in docs/semantics.md.

use drl_core::{Algorithm, Decision, Limiter, MultiLimiter, Quota};
use proptest::prelude::*;

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=12, 1u64..=120, 1u64..=16)
        .prop_map(|(limit, window, burst)| Quota::with_burst(limit, window, burst).unwrap())
}

/// Requests as `(now, cost)`; times mostly move forward, sometimes back.
fn trace(max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((-20i64..60, 0u64..=max_cost), 1..120).prop_map(|steps| {
        let mut t: i64 = 1_000;
        steps
            .into_iter()
            .map(|(dt, c)| {
                t = (t + dt).max(0);
                (t as u64, c)
            })
            .collect()
    })
}

/// Monotone traces (for the bound properties).
fn forward_trace(max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..40, 0u64..=max_cost), 1..150).prop_map(|steps| {
        let mut t = 0u64;
        steps
            .into_iter()
            .map(|(dt, c)| {
                t += dt;
                (t, c)
            })
            .collect()
    })
}

fn decide_all(l: &Limiter, trace: &[(u64, u64)]) -> Vec<Decision> {
    let mut s = l.new_state();
    trace.iter().map(|&(t, c)| l.decide(&mut s, t, c)).collect()
}

/// Admitted `(time, cost)` of a monotone trace.
fn admitted(l: &Limiter, trace: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut s = l.new_state();
    trace
        .iter()
        .filter(|&&(t, c)| l.decide(&mut s, t, c).allowed && c > 0)
        .copied()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Token bucket, leaky meter and GCRA decide identically, field for field.
    #[test]
    fn bucket_family_is_one_algorithm(q in quota(), tr in trace(18)) {
        let tb = decide_all(&Limiter::new(Algorithm::TokenBucket, q), &tr);
        let lb = decide_all(&Limiter::new(Algorithm::LeakyBucket, q), &tr);
        let gc = decide_all(&Limiter::new(Algorithm::Gcra, q), &tr);
        prop_assert_eq!(&tb, &lb);
        prop_assert_eq!(&tb, &gc);
    }

    /// The shaper admits exactly what GCRA admits (same rule), with a delay.
    #[test]
    fn shaper_admits_what_gcra_admits(q in quota(), tr in trace(18)) {
        let gc = decide_all(&Limiter::new(Algorithm::Gcra, q), &tr);
        let lq = decide_all(&Limiter::new(Algorithm::LeakyQueue, q), &tr);
        for (g, l) in gc.iter().zip(&lq) {
            prop_assert_eq!(Decision { delay: 0, ..*l }, *g);
            prop_assert!(l.delay <= q.capacity_ns());
        }
    }

    /// Bucket family and shaper: over any interval [a, b] the admitted cost
    /// is at most burst + floor((b - a) / T).
    #[test]
    fn bucket_bound(q in quota(), tr in forward_trace(18), alg in prop::sample::select(vec![
        Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra, Algorithm::LeakyQueue])) {
        let adm = admitted(&Limiter::new(alg, q), &tr);
        for i in 0..adm.len() {
            let mut sum = 0;
            for &(t, c) in &adm[i..] {
                sum += c;
                let bound = q.burst() + (t - adm[i].0) / q.emission_interval();
                prop_assert!(sum <= bound, "{} admitted {} in [{}, {}], bound {}", alg, sum, adm[i].0, t, bound);
            }
        }
    }

    /// The fixed window's one-pass `step` (the lock-free cell's) is
    /// `check` then `commit`: the same decision, and the state `commit`
    /// leaves after an admission with a cost (none otherwise), from any
    /// state the algorithm writes, at times up to the end of `u64` and
    /// windows up to a day.
    #[test]
    fn fixed_window_step_is_check_then_commit(
        limit in 1u64..=20,
        window in prop_oneof![1u64..=120, 1u64..=drl_core::time::DAY],
        last in prop_oneof![0u64..5_000, any::<u64>()],
        count in 0u64..=25,
        ahead in prop_oneof![0u64..300, any::<u64>()],
        back in 0u64..300,
        cost in 0u64..=22,
    ) {
        use drl_core::algo::fixed_window::{self, State};
        let q = Quota::new(limit, window).unwrap();
        let s = State { last, index: last / window, count: count.min(limit) };
        for now in [last.saturating_add(ahead), last.saturating_sub(back)] {
            let (d, next) = fixed_window::step(&q, &s, now, cost);
            prop_assert_eq!(d, fixed_window::check(&q, &s, now, cost));
            let mut committed = s;
            if d.allowed {
                fixed_window::commit(&q, &mut committed, now, cost);
            }
            prop_assert_eq!(next, (d.allowed && cost > 0).then_some(committed));
            if let Some(n) = next {
                prop_assert_eq!(n.index, n.last / window);
            }
        }
    }

    /// Fixed window: at most `limit` per aligned window.
    #[test]
    fn fixed_window_bound(q in quota(), tr in forward_trace(14)) {
        let adm = admitted(&Limiter::new(Algorithm::FixedWindow, q), &tr);
        let mut per = std::collections::BTreeMap::new();
        for (t, c) in adm {
            *per.entry(t / q.window()).or_insert(0u64) += c;
        }
        prop_assert!(per.values().all(|&n| n <= q.limit()));
    }

    /// Sliding log: at most `limit` in any half-open window (t - window, t].
    #[test]
    fn sliding_log_bound(q in quota(), tr in forward_trace(14)) {
        let adm = admitted(&Limiter::new(Algorithm::SlidingLog, q), &tr);
        for &(t, _) in &adm {
            let live: u64 = adm.iter().filter(|&&(ts, _)| ts <= t && t - ts < q.window()).map(|&(_, c)| c).sum();
            prop_assert!(live <= q.limit());
        }
    }

    /// Sliding window counter: at most `limit` per aligned window, and at
    /// every admission the weighted estimate is within the limit (exact).
    #[test]
    fn sliding_window_bound(q in quota(), tr in forward_trace(14)) {
        let adm = admitted(&Limiter::new(Algorithm::SlidingWindow, q), &tr);
        let w = q.window();
        for &(t, _) in &adm {
            let k = t / w;
            let count = |idx: u64| adm.iter().filter(|&&(ts, _)| ts <= t && ts / w == idx).map(|&(_, c)| c).sum::<u64>();
            let (prev, curr) = (if k > 0 { count(k - 1) } else { 0 }, count(k));
            prop_assert!(curr <= q.limit());
            prop_assert!(prev as u128 * (w - t % w) as u128 + curr as u128 * w as u128 <= q.limit() as u128 * w as u128);
        }
    }

    /// For every algorithm: a denial and a query change nothing; a denial's
    /// retry_after is exact (the same request fits after it, not 1 ns
    /// before); reset_after is exact (fresh after it, not 1 ns before).
    #[test]
    fn retry_and_reset_are_exact(q in quota(), tr in trace(14), alg in prop::sample::select(Algorithm::ALL.to_vec())) {
        let l = Limiter::new(alg, q);
        let mut s = l.new_state();
        for &(t, c) in &tr {
            let before = s.clone();
            let d = l.decide(&mut s, t, c);
            if !d.allowed || c == 0 {
                prop_assert_eq!(&s, &before, "{} changed state on a denial or query", alg);
            }
            let last = match &s { drl_core::State::TokenBucket(x) => x.last, drl_core::State::LeakyBucket(x) => x.last,
                drl_core::State::Gcra(x) => x.last, drl_core::State::LeakyQueue(x) => x.last,
                drl_core::State::FixedWindow(x) => x.last, drl_core::State::SlidingLog(x) => x.last,
                drl_core::State::SlidingWindow(x) => x.last };
            let now = t.max(last);
            if let (false, Some(r)) = (d.allowed, d.retry_after) {
                prop_assert!(r > 0);
                prop_assert!(l.check(&s, now + r, c).allowed, "{}: not admitted after retry_after {}", alg, r);
                prop_assert!(!l.check(&s, now + r - 1, c).allowed, "{}: admitted before retry_after {}", alg, r);
            }
            prop_assert!(l.is_fresh(&s, now + d.reset_after), "{}: not fresh after reset_after", alg);
            if d.reset_after > 0 {
                prop_assert!(!l.is_fresh(&s, now + d.reset_after - 1), "{}: fresh before reset_after", alg);
            }
            let cap = if alg.is_windowed() { q.limit() } else { q.burst() };
            prop_assert_eq!(d.retry_after.is_none(), c > cap);
        }
    }

    /// Multi-limit: admitted only if every quota admits; a denial consumes
    /// nothing in any quota; an admission consumes in every quota exactly as
    /// each would alone.
    #[test]
    fn multi_limit_is_all_or_nothing(
        qs in prop::collection::vec(quota(), 1..4),
        tr in trace(14),
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
    ) {
        let m = MultiLimiter::uniform(alg, &qs);
        let mut states = m.new_states();
        for &(t, c) in &tr {
            let before = states.clone();
            let singles: Vec<Decision> = m.parts().iter().zip(&before).map(|(l, s)| l.check(s, t, c)).collect();
            let d = m.decide(&mut states, t, c);
            prop_assert_eq!(d.allowed, singles.iter().all(|x| x.allowed));
            prop_assert_eq!(d.remaining, singles.iter().map(|x| x.remaining).min().unwrap());
            if d.allowed {
                for ((l, s), after) in m.parts().iter().zip(&before).zip(&states) {
                    let mut alone = s.clone();
                    l.decide(&mut alone, t, c);
                    prop_assert_eq!(&alone, after);
                }
            } else {
                prop_assert_eq!(&states, &before);
                let expect = singles.iter().filter(|x| !x.allowed).map(|x| x.retry_after).try_fold(0u64, |acc, r| r.map(|r| acc.max(r)));
                prop_assert_eq!(d.retry_after, expect);
            }
        }
    }
}

proptest! {
    /// The precomputed reciprocal of T divides exactly, for every u64.
    #[test]
    fn permits_in_is_exact_division(limit in 1u64..=u64::MAX, window in 1u64..=u64::MAX, x in any::<u64>()) {
        let q = Quota::with_burst(limit, window, 1).unwrap();
        prop_assert_eq!(q.permits_in(x), x / q.emission_interval());
    }
}
