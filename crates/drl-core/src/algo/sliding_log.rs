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

use std::collections::VecDeque;

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Sliding log state: empty as constructed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// `(timestamp, cost)`, oldest first; timestamps strictly increasing.
    pub log: VecDeque<(Nanos, u64)>,
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
    let live = first_live(quota, s, now);
    let used = s
        .log
        .range(live..)
        .fold(0u64, |a, &(_, c)| a.saturating_add(c));
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
    s.log.drain(..live);
    match s.log.back_mut() {
        Some((ts, c)) if *ts == now => *c = c.saturating_add(cost),
        _ => s.log.push_back((now, cost)),
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
        *next = next.saturating_add(c);
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
    *c -= units.min(*c);
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
