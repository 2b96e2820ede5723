//! Costs known afterwards (docs/semantics.md): take, check, charge,
//! reserve, settle, release, refunds and expiry, checked field for field
//! against small reference models of the documented semantics, for each of
//! the seven algorithms, on a manual clock.

use std::collections::HashMap;

use drl_core::{
    Algorithm, Decision, DenyReason, KeyedConfig, KeyedLimiter, Limiter, ManualClock, Mark,
    MultiLimiter, Quota, Reservation,
};
use proptest::prelude::*;

// ---------------------------------------------------------------- models

/// The reference model of one key under one quota: the formulas of
/// docs/semantics.md written plainly (absolute times, counts per window,
/// an unmerged log, waits found by search where the page says "shortest
/// wait").
#[derive(Debug, Clone)]
enum Model {
    /// Token bucket, leaky meter, GCRA, shaper: a theoretical arrival time.
    Tat { last: u64, tat: u128, shaper: bool },
    /// Fixed window: a count per window index.
    Fixed {
        last: u64,
        counts: HashMap<u64, u64>,
    },
    /// Sliding log: every admission and charge, unmerged.
    Log { last: u64, log: Vec<(u64, u64)> },
    /// Sliding window: a count per window index.
    Sliding {
        last: u64,
        counts: HashMap<u64, u64>,
    },
}

fn denied(q: &Quota, remaining: u64, retry: Option<u64>, reset: u64) -> Decision {
    Decision {
        allowed: false,
        remaining,
        limit: q.limit(),
        retry_after: retry,
        reset_after: reset,
        delay: 0,
        reason: Some(if retry.is_some() {
            DenyReason::OverLimit
        } else {
            DenyReason::CostExceedsCapacity
        }),
    }
}

fn admitted(q: &Quota, remaining: u64, reset: u64, delay: u64) -> Decision {
    Decision {
        allowed: true,
        remaining,
        limit: q.limit(),
        retry_after: Some(0),
        reset_after: reset,
        delay,
        reason: None,
    }
}

/// The least `d >= 1` (up to `limit`) with `fits(t + d)`.
fn shortest_wait(t: u64, limit: u64, fits: impl Fn(u64) -> bool) -> u64 {
    (1..=limit)
        .find(|&d| fits(t + d))
        .expect("fits within the bound")
}

impl Model {
    fn new(alg: Algorithm) -> Self {
        match alg {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => Model::Tat {
                last: 0,
                tat: 0,
                shaper: false,
            },
            Algorithm::LeakyQueue => Model::Tat {
                last: 0,
                tat: 0,
                shaper: true,
            },
            Algorithm::FixedWindow => Model::Fixed {
                last: 0,
                counts: HashMap::new(),
            },
            Algorithm::SlidingLog => Model::Log {
                last: 0,
                log: Vec::new(),
            },
            Algorithm::SlidingWindow => Model::Sliding {
                last: 0,
                counts: HashMap::new(),
            },
        }
    }

    fn last(&self) -> u64 {
        match self {
            Model::Tat { last, .. }
            | Model::Fixed { last, .. }
            | Model::Log { last, .. }
            | Model::Sliding { last, .. } => *last,
        }
    }

    fn set_last(&mut self, t: u64) {
        match self {
            Model::Tat { last, .. }
            | Model::Fixed { last, .. }
            | Model::Log { last, .. }
            | Model::Sliding { last, .. } => *last = t,
        }
    }

    /// Take (admit and consume, or deny); `commit` false makes it a check.
    fn take(&mut self, q: &Quota, now: u64, c: u64, commit: bool) -> Decision {
        let t = now.max(self.last());
        let w = q.window();
        let limit = q.limit();
        let d = match self {
            Model::Tat { tat, shaper, .. } => {
                let cap = q.capacity_ns() as u128;
                let queued = tat.saturating_sub(t as u128);
                let room = |x: u128| q.permits_in(cap.saturating_sub(x) as u64);
                let need = c as u128 * q.emission_interval() as u128;
                if c > q.burst() {
                    denied(q, room(queued), None, queued as u64)
                } else if queued + need <= cap {
                    if commit && c > 0 {
                        *tat = t as u128 + queued + need;
                    }
                    let delay = if *shaper && c > 0 { queued as u64 } else { 0 };
                    admitted(q, room(queued + need), (queued + need) as u64, delay)
                } else {
                    denied(
                        q,
                        room(queued),
                        Some((queued + need - cap) as u64),
                        queued as u64,
                    )
                }
            }
            Model::Fixed { counts, .. } => {
                let i = t / w;
                let count = counts.get(&i).copied().unwrap_or(0);
                let to_end = (i + 1) * w - t;
                let reset = |n: u64| if n > 0 { to_end } else { 0 };
                if c > limit {
                    denied(q, limit.saturating_sub(count), None, reset(count))
                } else if count + c <= limit {
                    if commit && c > 0 {
                        *counts.entry(i).or_default() += c;
                    }
                    admitted(q, limit - count - c, reset(count + c), 0)
                } else {
                    let fits = |s: u64| (if s / w == i { count } else { 0 }) + c <= limit;
                    let retry = shortest_wait(t, 3 * w, fits);
                    denied(q, limit.saturating_sub(count), Some(retry), reset(count))
                }
            }
            Model::Log { log, .. } => {
                let used_at =
                    |s: u64| -> u64 { log.iter().filter(|e| s - e.0 < w).map(|e| e.1).sum() };
                let used = used_at(t);
                let reset_live = log
                    .iter()
                    .filter(|e| t - e.0 < w)
                    .map(|e| e.0 + w - t)
                    .max()
                    .unwrap_or(0);
                if c > limit {
                    denied(q, limit.saturating_sub(used), None, reset_live)
                } else if used + c <= limit {
                    if commit && c > 0 {
                        log.push((t, c));
                    }
                    admitted(q, limit - used - c, if c > 0 { w } else { reset_live }, 0)
                } else {
                    let retry = shortest_wait(t, 3 * w, |s| used_at(s) + c <= limit);
                    denied(q, limit.saturating_sub(used), Some(retry), reset_live)
                }
            }
            Model::Sliding { counts, .. } => {
                let (w128, l128) = (w as u128, limit as u128);
                let at = |s: u64, extra: u64| {
                    let i = s / w;
                    let prev = if i == 0 {
                        0
                    } else {
                        counts.get(&(i - 1)).copied().unwrap_or(0)
                    };
                    let curr = counts.get(&i).copied().unwrap_or(0) + extra;
                    let weighted = prev as u128 * (w128 - (s % w) as u128);
                    (prev, curr, weighted)
                };
                let (prev, curr, weighted) = at(t, 0);
                let to_end = w - t % w;
                let remaining = |curr: u64| {
                    let room = (l128 * w128).saturating_sub(weighted) / w128;
                    room.saturating_sub(curr as u128) as u64
                };
                let reset = |curr: u64| {
                    if curr > 0 {
                        to_end + w
                    } else if prev > 0 {
                        to_end
                    } else {
                        0
                    }
                };
                let fits = |s: u64| {
                    let (_, curr, weighted) = at(s, 0);
                    weighted + (curr as u128 + c as u128) * w128 <= l128 * w128
                };
                if c > limit {
                    denied(q, remaining(curr), None, reset(curr))
                } else if fits(t) {
                    if commit && c > 0 {
                        *counts.entry(t / w).or_default() += c;
                    }
                    admitted(q, remaining(curr + c), reset(curr + c), 0)
                } else {
                    let retry = shortest_wait(t, 3 * w, fits);
                    denied(q, remaining(curr), Some(retry), reset(curr))
                }
            }
        };
        if commit && d.allowed && c > 0 {
            self.set_last(t);
        }
        d
    }

    fn query(&mut self, q: &Quota, now: u64) -> Decision {
        self.take(q, now, 0, false)
    }

    /// Charge: consume whatever the state holds, then a query.
    fn charge(&mut self, q: &Quota, now: u64, c: u64) -> Decision {
        let t = now.max(self.last());
        if c > 0 {
            let w = q.window();
            match self {
                Model::Tat { tat, .. } => {
                    *tat = (*tat).max(t as u128) + c as u128 * q.emission_interval() as u128;
                }
                Model::Fixed { counts, .. } | Model::Sliding { counts, .. } => {
                    *counts.entry(t / w).or_default() += c;
                }
                Model::Log { log, .. } => {
                    log.push((t, c));
                    // At most `limit` distinct live stamps: the oldest
                    // moves to the next (counted longer).
                    log.retain(|e| t - e.0 < w);
                    loop {
                        let mut stamps: Vec<u64> = log.iter().map(|e| e.0).collect();
                        stamps.sort_unstable();
                        stamps.dedup();
                        if stamps.len() as u64 <= q.limit() {
                            break;
                        }
                        for e in log.iter_mut().filter(|e| e.0 == stamps[0]) {
                            e.0 = stamps[1];
                        }
                    }
                }
            }
            self.set_last(t);
        }
        self.query(q, now)
    }

    /// The mark of a reservation admitted at `now` (after its take).
    fn mark(&self, q: &Quota, now: u64) -> u64 {
        let t = now.max(self.last());
        match self {
            Model::Tat { tat, .. } => *tat as u64,
            Model::Fixed { .. } | Model::Sliding { .. } => t / q.window(),
            Model::Log { .. } => t,
        }
    }

    /// A refund of `units` for a reservation with `mark`, then a query.
    fn refund(&mut self, q: &Quota, now: u64, mark: u64, units: u64) -> Decision {
        let t = now.max(self.last());
        let w = q.window();
        let changed = match self {
            Model::Tat { tat, .. } => {
                let ahead = mark.saturating_sub(t) as u128;
                let back = (units as u128 * q.emission_interval() as u128).min(ahead);
                if back > 0 {
                    *tat = ((*tat).max(t as u128) - back).max(t as u128);
                }
                back > 0
            }
            Model::Fixed { counts, .. } => {
                let n = counts.entry(t / w).or_default();
                let back = if t / w == mark { units.min(*n) } else { 0 };
                *n -= back;
                back > 0
            }
            Model::Sliding { counts, .. } => {
                let i = t / w;
                let n = counts.entry(mark).or_default();
                let back = if i == mark || i == mark + 1 {
                    units.min(*n)
                } else {
                    0
                };
                *n -= back;
                back > 0
            }
            Model::Log { log, .. } => {
                let mut left = if t - mark.min(t) < w { units } else { 0 };
                let mut back = 0;
                for e in log.iter_mut().filter(|e| e.0 == mark) {
                    let b = left.min(e.1);
                    e.1 -= b;
                    left -= b;
                    back += b;
                }
                log.retain(|e| e.1 > 0);
                back > 0
            }
        };
        if changed {
            self.set_last(t);
        }
        self.query(q, now)
    }
}

// ---------------------------------------------------------------- traces

/// One step of a trace: the clock moves by `dt`, then an operation is
/// stamped `back` ns behind it.
#[derive(Debug, Clone)]
enum Op {
    Take(u64),
    Check(u64),
    Charge(u64),
    Reserve(u64, u64),
    Settle(usize, u64),
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..=18).prop_map(Op::Take),
        2 => (0u64..=18).prop_map(Op::Check),
        2 => (0u64..=40).prop_map(Op::Charge),
        3 => ((0u64..=18), (0u64..=300)).prop_map(|(c, ttl)| Op::Reserve(c, ttl)),
        3 => (any::<usize>(), 0u64..=40).prop_map(|(i, a)| Op::Settle(i, a)),
        1 => any::<usize>().prop_map(Op::Release),
    ]
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=12, 1u64..=120, 1u64..=16)
        .prop_map(|(limit, window, burst)| Quota::with_burst(limit, window, burst).unwrap())
}

fn steps() -> impl Strategy<Value = Vec<(u64, u64, Op)>> {
    prop::collection::vec(
        (0u64..50, prop_oneof![4 => Just(0u64), 1 => 0u64..30], op()),
        1..160,
    )
}

/// One model per quota of a multi-quota limit: all-or-nothing takes, every
/// quota charged and refunded on its own, answers combined.
struct Models(Vec<(Quota, Model)>);

impl Models {
    fn new(alg: Algorithm, quotas: &[Quota]) -> Self {
        Models(quotas.iter().map(|q| (*q, Model::new(alg))).collect())
    }

    fn combine(parts: Vec<Decision>) -> Decision {
        Decision::combine(&parts).unwrap()
    }

    fn take(&mut self, now: u64, c: u64, commit: bool) -> Decision {
        let all = Self::combine(
            self.0
                .iter_mut()
                .map(|(q, m)| m.take(q, now, c, false))
                .collect(),
        );
        if commit && all.allowed {
            for (q, m) in &mut self.0 {
                m.take(q, now, c, true);
            }
        }
        all
    }

    fn query(&mut self, now: u64) -> Decision {
        self.take(now, 0, false)
    }

    fn charge(&mut self, now: u64, c: u64) -> Decision {
        Self::combine(
            self.0
                .iter_mut()
                .map(|(q, m)| m.charge(q, now, c))
                .collect(),
        )
    }

    fn marks(&self, now: u64) -> Vec<u64> {
        self.0.iter().map(|(q, m)| m.mark(q, now)).collect()
    }

    fn refund(&mut self, now: u64, marks: &[u64], u: u64) -> Decision {
        Self::combine(
            self.0
                .iter_mut()
                .zip(marks)
                .map(|((q, m), &mark)| m.refund(q, now, mark, u))
                .collect(),
        )
    }
}

/// Replays `steps` on a keyed limiter (one key, never evicted) and on the
/// models; every answer must agree field for field.
fn replay(alg: Algorithm, quotas: &[Quota], steps: &[(u64, u64, Op)]) -> Result<(), TestCaseError> {
    let keyed =
        KeyedLimiter::<u32>::new(MultiLimiter::uniform(alg, quotas), KeyedConfig::default());
    let clock = ManualClock::new(1_000);
    let mut model = Models::new(alg, quotas);
    let mut open: Vec<(Reservation<u32>, Vec<u64>)> = Vec::new();
    for (dt, back, op) in steps {
        clock.advance(*dt);
        let now = drl_core::Clock::now(&clock).saturating_sub(*back);
        match *op {
            Op::Take(c) => {
                let got = keyed.decide(&7, now, c);
                prop_assert_eq!(got, model.take(now, c, true), "take {} at {}", c, now);
            }
            Op::Check(c) => {
                let got = keyed.check(&7, now, c);
                prop_assert_eq!(got, model.take(now, c, false), "check {} at {}", c, now);
            }
            Op::Charge(c) => {
                let got = keyed.charge(&7, now, c);
                prop_assert_eq!(got, model.charge(now, c), "charge {} at {}", c, now);
            }
            Op::Reserve(c, ttl) => {
                let (got, r) = keyed.reserve(&7, now, c, ttl);
                let want = model.take(now, c, true);
                prop_assert_eq!(got, want, "reserve {} at {}", c, now);
                prop_assert_eq!(r.is_some(), want.allowed);
                if let Some(r) = r {
                    let marks = model.marks(now);
                    let want: Vec<Mark> = marks.iter().map(|&m| Mark(m)).collect();
                    prop_assert_eq!(r.marks(), &want[..]);
                    prop_assert_eq!((r.cost(), r.expires_at()), (c, now + ttl));
                    open.push((r, marks));
                }
            }
            Op::Settle(i, _) | Op::Release(i) if !open.is_empty() => {
                let actual = if let Op::Settle(_, a) = *op { a } else { 0 };
                let (r, marks) = open.swap_remove(i % open.len());
                let (cost, expired) = (r.cost(), now >= r.expires_at());
                let got = if let Op::Settle(..) = op {
                    keyed.settle(r, now, actual)
                } else {
                    keyed.release(r, now)
                };
                let want = if actual > cost {
                    model.charge(now, actual - cost)
                } else if actual < cost && !expired {
                    model.refund(now, &marks, cost - actual)
                } else {
                    model.query(now)
                };
                prop_assert_eq!(
                    got.decision,
                    want,
                    "settle {} of {} at {}",
                    actual,
                    cost,
                    now
                );
                prop_assert_eq!(got.expired, expired);
                prop_assert_eq!(got.charged, actual.saturating_sub(cost));
                let refunded = if expired {
                    0
                } else {
                    cost.saturating_sub(actual)
                };
                prop_assert_eq!(got.refunded, refunded);
            }
            Op::Settle(..) | Op::Release(_) => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn token_bucket_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::TokenBucket, &[q], &s)?;
    }

    #[test]
    fn leaky_bucket_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::LeakyBucket, &[q], &s)?;
    }

    #[test]
    fn gcra_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::Gcra, &[q], &s)?;
    }

    #[test]
    fn leaky_queue_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::LeakyQueue, &[q], &s)?;
    }

    #[test]
    fn fixed_window_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::FixedWindow, &[q], &s)?;
    }

    #[test]
    fn sliding_log_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::SlidingLog, &[q], &s)?;
    }

    #[test]
    fn sliding_window_matches_the_model(q in quota(), s in steps()) {
        replay(Algorithm::SlidingWindow, &[q], &s)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Two quotas at once (per-key mutexes): takes and reservations
    /// all-or-nothing, charges and refunds in each quota on its own.
    #[test]
    fn two_quotas_match_the_models(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        q1 in quota(),
        q2 in quota(),
        s in steps(),
    ) {
        replay(alg, &[q1, q2], &s)?;
    }
}

// ------------------------------------------------- refunds never overpay

/// Whether `a` is at least as strict as `b` at `now`: every cost `a`
/// admits, `b` admits.
fn at_least_as_strict(
    l: &Limiter,
    a: &drl_core::State,
    b: &drl_core::State,
    now: u64,
) -> Result<(), TestCaseError> {
    let top = l.quota().burst().max(l.quota().limit()) + 1;
    for c in 0..=top {
        if l.check(a, now, c).allowed {
            prop_assert!(
                l.check(b, now, c).allowed,
                "cost {} at {}: settled {:?} admits, known-upfront {:?} denies",
                c,
                now,
                a,
                b
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// A settled reservation never leaves a state more generous than the
    /// one where the actual cost was known and charged when the estimate
    /// was reserved, whatever else was charged meanwhile: a refund gives
    /// back at most what of the reservation still holds the state back.
    #[test]
    fn a_settlement_is_never_more_generous_than_the_cost_known_upfront(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        q in quota(),
        before in prop::collection::vec((0u64..60, 0u64..3), 0..8),
        estimate in 0u64..=16,
        actual in 0u64..=24,
        between in prop::collection::vec((0u64..60, 0u64..6), 0..12),
        later in prop::collection::vec(0u64..80, 1..8),
    ) {
        let l = Limiter::new(alg, q);
        let (mut a, mut b) = (l.new_state(), l.new_state());
        let mut t = 1_000;
        for &(dt, c) in &before {
            t += dt;
            l.charge(&mut a, t, c);
            l.charge(&mut b, t, c);
        }
        let estimate = estimate.min(q.burst().min(q.limit()));
        let (d, mark) = l.reserve(&mut a, t, estimate);
        if !d.allowed {
            // Denied: nothing reserved, nothing to settle.
            prop_assert!(mark.is_none());
            return Ok(());
        }
        l.charge(&mut b, t, actual);
        for &(dt, c) in &between {
            t += dt;
            l.charge(&mut a, t, c);
            l.charge(&mut b, t, c);
        }
        let mark = mark.unwrap();
        if actual > estimate {
            l.charge(&mut a, t, actual - estimate);
        } else {
            l.refund(&mut a, t, mark, estimate - actual);
        }
        for dt in later {
            t += dt;
            at_least_as_strict(&l, &a, &b, t)?;
        }
    }

    /// A release alone, right after the reservation, restores the state
    /// exactly (nothing has drained yet, the window is the same).
    #[test]
    fn a_release_at_once_undoes_the_reservation(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        q in quota(),
        before in prop::collection::vec((0u64..60, 0u64..3), 0..8),
        estimate in 1u64..=16,
    ) {
        let estimate = estimate.min(q.burst().min(q.limit()));
        let l = Limiter::new(alg, q);
        let mut a = l.new_state();
        let mut t = 1_000;
        for &(dt, c) in &before {
            t += dt;
            l.charge(&mut a, t, c);
        }
        let was = a.clone();
        let (d, mark) = l.reserve(&mut a, t, estimate);
        if !d.allowed {
            return Ok(());
        }
        l.refund(&mut a, t, mark.unwrap(), estimate);
        for c in 0..=q.burst().max(q.limit()) + 1 {
            prop_assert_eq!(l.check(&a, t, c), l.check(&was, t, c));
        }
    }
}

// ---------------------------------------------------- the token quota

/// envoyproxy/ratelimit's token-quota scenario: 2 per minute, each call a
/// check-only request (`hits_addend` 0: a query) and, on the response, a
/// charge of 1 (`apply_on_stream_done`). Calls 1-3 pass, the 4th is
/// denied; under every algorithm.
#[test]
fn the_token_quota_scenario_admits_three_and_denies_the_fourth() {
    let q = Quota::parse("2/min").unwrap();
    for alg in Algorithm::ALL {
        let keyed =
            KeyedLimiter::<String>::new(MultiLimiter::uniform(alg, &[q]), KeyedConfig::default());
        let t0 = 60_000_000_000 * 1_000;
        let mut answers = Vec::new();
        for i in 0..4u64 {
            let now = t0 + i * 1_000_000;
            let d = keyed.check("service_2", now, 0);
            answers.push(d.allowed);
            if d.allowed {
                keyed.charge("service_2", now, 1);
            }
        }
        assert_eq!(answers, [true, true, true, false], "{alg}");
        // Before the debt is repaid the answer stays a denial, with a
        // retry that admits the query.
        let d = keyed.check("service_2", t0 + 4_000_000, 0);
        assert!(!d.allowed && d.remaining == 0, "{alg}: {d:?}");
        let wait = d.retry_after.expect("time repays a debt");
        assert!(
            !keyed
                .check("service_2", t0 + 4_000_000 + wait - 1, 0)
                .allowed,
            "{alg}"
        );
        assert!(
            keyed.check("service_2", t0 + 4_000_000 + wait, 0).allowed,
            "{alg}"
        );
    }
}

/// Today's take refuses what a charge accepts: a cost above the capacity.
#[test]
fn a_charge_above_capacity_is_consumed_and_repaid_by_time() {
    let q = Quota::new(10, 10_000).unwrap(); // T = 1,000 ns
    for alg in Algorithm::ALL {
        let l = Limiter::new(alg, q);
        let mut s = l.new_state();
        assert_eq!(
            l.decide(&mut s, 5_000, 25).reason,
            Some(DenyReason::CostExceedsCapacity)
        );
        let d = l.charge(&mut s, 5_000, 25);
        assert!(!d.allowed, "{alg}: {d:?}");
        assert_eq!(d.reason, Some(DenyReason::OverLimit), "{alg}");
        assert_eq!(d.remaining, 0, "{alg}");
        let wait = d.retry_after.unwrap();
        assert!(!l.check(&s, 5_000 + wait - 1, 0).allowed, "{alg}");
        assert!(l.check(&s, 5_000 + wait, 0).allowed, "{alg}");
        if !alg.is_windowed() {
            // 25 - 10 = 15 permits of debt, one per 1,000 ns.
            assert_eq!(wait, 15_000, "{alg}");
            assert_eq!(d.reset_after, 25_000, "{alg}");
        }
    }
}
