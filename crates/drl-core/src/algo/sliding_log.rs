//! Sliding window log: every admitted request is logged with its cost; an
//! entry logged at `ts` counts while `now - ts < window`.
//!
//! Entries with the same timestamp are merged, so the log holds at most
//! `min(limit, distinct admission times in one window)` entries; a charge
//! that would pass `limit` entries folds the oldest into the next.
//!
//! **Debt.** A charge logs its cost whatever is used, so `used` may pass
//! `limit` (sums saturate at `2^64 - 1`); requests are denied until enough
//! entries have expired.
//!
//! **Cost.** The state keeps the sum of its entries, so a decision costs a
//! binary search plus the entries that expired since the last write (each
//! expired entry is passed over at most until the next write drops it),
//! not a pass over the whole log: one key holding thousands of entries
//! decides as fast as one holding a few.

use std::collections::VecDeque;

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Sliding log state: empty as constructed ([`State::new`] from stored
/// entries).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// `(timestamp, cost)`, oldest first; timestamps strictly increasing.
    log: VecDeque<(Nanos, u64)>,
    /// The sum of the entries' costs (cannot overflow: at most `2^64 - 1`
    /// entries of at most `2^64 - 1`).
    total: u128,
}

impl State {
    /// A state with `last` and the entries `log` (`(timestamp, cost)`,
    /// oldest first, as stored).
    pub fn new(last: Nanos, log: VecDeque<(Nanos, u64)>) -> Self {
        let total = log.iter().map(|&(_, c)| c as u128).sum();
        Self { last, log, total }
    }

    /// The entries, oldest first.
    pub fn log(&self) -> &VecDeque<(Nanos, u64)> {
        &self.log
    }

    /// The sum of every entry's cost, live or not (saturating at
    /// `2^64 - 1`).
    pub fn sum(&self) -> u64 {
        sat(self.total)
    }

    /// The sum of the entries that count at `now` (saturating at
    /// `2^64 - 1`), and the index of the first of them.
    fn used(&self, quota: &Quota, now: Nanos) -> (u64, usize) {
        let live = first_live(quota, self, now);
        let expired: u128 = self.log.range(..live).map(|&(_, c)| c as u128).sum();
        (sat(self.total - expired), live)
    }

    /// Drops the first `n` entries.
    fn drop_front(&mut self, n: usize) {
        for (_, c) in self.log.drain(..n) {
            self.total -= c as u128;
        }
    }
}

/// Index of the first live entry at `now`.
fn first_live(quota: &Quota, s: &State, now: Nanos) -> usize {
    s.log.partition_point(|&(ts, _)| now - ts >= quota.window())
}

/// When the entry logged at `ts` stops counting, as a wait from `now`.
fn expires_in(quota: &Quota, ts: Nanos, now: Nanos) -> Nanos {
    sat(ts as u128 + quota.window() as u128 - now as u128)
}

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    let now = now.max(s.last);
    let limit = quota.limit();
    let (used, live) = s.used(quota, now);
    let newest = s
        .log
        .back()
        .filter(|_| live < s.log.len())
        .map(|&(ts, _)| ts);
    let reset_live = newest.map_or(0, |ts| expires_in(quota, ts, now));
    if cost > limit {
        return impossible(quota, limit.saturating_sub(used), reset_live);
    }
    // `used` may pass `limit` (debt): then nothing fits, not even a query.
    if used.checked_add(cost).is_some_and(|after| after <= limit) {
        Decision {
            allowed: true,
            remaining: limit.saturating_sub(used) - cost,
            limit,
            retry_after: Some(0),
            reset_after: if cost > 0 { quota.window() } else { reset_live },
            delay: 0,
            reason: None,
        }
    } else {
        // Free entries oldest first until the cost fits (at the latest
        // when the newest expires; only a saturated sum can get there).
        let mut left = used;
        let mut retry = reset_live;
        for &(ts, c) in s.log.range(live..) {
            left = left.saturating_sub(c);
            if left.checked_add(cost).is_some_and(|x| x <= limit) {
                retry = expires_in(quota, ts, now);
                break;
            }
        }
        Decision {
            allowed: false,
            remaining: limit.saturating_sub(used),
            limit,
            retry_after: Some(retry),
            reset_after: reset_live,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        }
    }
}

/// Applies an admitted request; drops entries that no longer count.
pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let live = first_live(quota, s, now);
    s.drop_front(live);
    match s.log.back_mut() {
        Some((ts, c)) if *ts == now => {
            let merged = c.saturating_add(cost);
            s.total += (merged - *c) as u128;
            *c = merged;
        }
        _ => {
            s.log.push_back((now, cost));
            s.total += cost as u128;
        }
    }
    s.last = now;
}

/// Logs `cost` at `now` whatever is used (it may pass `limit`). The log
/// keeps at most `limit` entries: past that, the oldest entry's cost moves
/// into the next one, which counts it longer (stricter, never laxer), so
/// a flood of charges at distinct stamps cannot grow it.
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    commit(quota, s, now, cost);
    while s.log.len() as u64 > quota.limit() {
        let (_, c) = s.log.pop_front().expect("longer than limit >= 1");
        let next = &mut s.log[0].1;
        let merged = next.saturating_add(c);
        // What saturation loses leaves the sum too.
        s.total -= (c - (merged - *next)) as u128;
        *next = merged;
    }
}

/// Returns up to `units` of a reservation logged at `mark`, while its entry
/// still counts; an entry brought to 0 is dropped.
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    if units == 0 || now - mark.min(now) >= quota.window() {
        return;
    }
    let Ok(at) = s.log.binary_search_by_key(&mark, |&(ts, _)| ts) else {
        return;
    };
    let c = &mut s.log[at].1;
    let back = units.min(*c);
    *c -= back;
    s.total -= back as u128;
    if *c == 0 {
        s.log.remove(at);
    }
    s.last = now;
}

/// The stamp an admission at (clamped) `now` is logged at.
pub fn mark(_quota: &Quota, s: &State, now: Nanos) -> u64 {
    now.max(s.last)
}

/// True when no entry counts any more at `now`.
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    first_live(quota, s, now.max(s.last)) == s.log.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `check` decided before the state kept its sum: a pass over the
    /// live entries.
    fn used_by_pass(quota: &Quota, s: &State, now: Nanos) -> u64 {
        let now = now.max(s.last);
        s.log
            .range(first_live(quota, s, now)..)
            .fold(0u64, |a, &(_, c)| a.saturating_add(c))
    }

    #[derive(Debug, Clone)]
    enum Op {
        Take(u64, u64),
        Charge(u64, u64),
        Refund(u64, u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..400u64, 0..6u64).prop_map(|(dt, c)| Op::Take(dt, c)),
            (0..400u64, prop_oneof![0..6u64, Just(u64::MAX)]).prop_map(|(dt, c)| Op::Charge(dt, c)),
            (0..400u64, 0..2_000u64, 0..4u64).prop_map(|(dt, back, u)| Op::Refund(dt, back, u)),
        ]
    }

    proptest! {
        /// The kept sum is the entries' sum after any writes, and every
        /// decision equals the one a pass over the entries gives.
        #[test]
        fn the_kept_sum_decides_as_a_pass_over_the_log(
            limit in 1..12u64,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let q = Quota::new(limit, 1_000).unwrap();
            let mut s = State::default();
            let mut now = 0;
            for op in ops {
                match op {
                    Op::Take(dt, c) => {
                        now += dt;
                        if check(&q, &s, now, c).allowed {
                            commit(&q, &mut s, now, c);
                        }
                    }
                    Op::Charge(dt, c) => {
                        now += dt;
                        charge(&q, &mut s, now, c);
                    }
                    Op::Refund(dt, back, u) => {
                        now += dt;
                        refund(&q, &mut s, now, now.saturating_sub(back), u);
                    }
                }
                let sum: u128 = s.log.iter().map(|&(_, c)| c as u128).sum();
                prop_assert_eq!(s.total, sum);
                prop_assert_eq!(State::new(s.last, s.log.clone()), s.clone());
                for later in [0, 1, 500, 999, 1_000, 5_000] {
                    let at = now + later;
                    prop_assert_eq!(s.used(&q, at.max(s.last)).0, used_by_pass(&q, &s, at));
                    for cost in [0, 1, limit] {
                        let d = check(&q, &s, at, cost);
                        let used = used_by_pass(&q, &s, at);
                        prop_assert_eq!(d.remaining, limit.saturating_sub(used).saturating_sub(if d.allowed { cost } else { 0 }));
                        prop_assert_eq!(d.allowed, used.checked_add(cost).is_some_and(|x| x <= limit));
                    }
                }
            }
        }
    }
}
