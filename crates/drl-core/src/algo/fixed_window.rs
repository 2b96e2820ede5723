//! Fixed window counter; windows aligned to time 0 (the Unix epoch for
//! servers), so every node agrees on their boundaries.
//!
//! A choice of the contract (docs/semantics.md): `reset_after` is `window_end - now`
//! while the window holds a count, and 0 for an empty window (already fresh).
//!
//! **Debt.** A charge may take the count past `limit` (saturating at
//! `2^64 - 1`); every request is denied until the window ends.

use super::impossible;
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Fixed window state: empty as constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Index of the window `count` belongs to.
    pub index: u64,
    /// Permits admitted in window `index`.
    pub count: u64,
}

fn count_at(quota: &Quota, s: &State, now: Nanos) -> u64 {
    if quota.window_index(now) == s.index {
        s.count
    } else {
        0
    }
}

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    step(quota, s, now, cost).0
}

/// Decides a request of `cost` at `now`: the decision, and the state to
/// store if it changes (an admission with `cost > 0`), in one pass. Pure;
/// the state is [`commit`]'s after an admission (a property test pins it).
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let now = now.max(s.last);
    let index = quota.window_index(now);
    let count = if index == s.index { s.count } else { 0 };
    let limit = quota.limit();
    // `window_end - now`, at most `window`.
    let to_end = quota.window() - (now - index * quota.window());
    let reset = |count: u64| if count > 0 { to_end } else { 0 };
    if cost > limit {
        return (
            impossible(quota, limit.saturating_sub(count), reset(count)),
            None,
        );
    }
    // `count` may pass `limit` (debt): then nothing fits, not even a query.
    if count.checked_add(cost).is_some_and(|after| after <= limit) {
        let after = count + cost;
        let d = Decision {
            allowed: true,
            remaining: limit - after,
            limit,
            retry_after: Some(0),
            reset_after: reset(after),
            delay: 0,
            reason: None,
        };
        let next = (cost > 0).then_some(State {
            last: now,
            index,
            count: after,
        });
        (d, next)
    } else {
        let d = Decision {
            allowed: false,
            remaining: limit.saturating_sub(count),
            limit,
            retry_after: Some(to_end),
            reset_after: reset(count),
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        (d, None)
    }
}

/// Applies an admitted request.
pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    s.count = count_at(quota, s, now) + cost;
    s.index = quota.window_index(now);
    s.last = now;
}

/// Consumes `cost` at `now` whatever the count (it may pass `limit`).
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    *s = State {
        last: now,
        index: quota.window_index(now),
        count: count_at(quota, s, now).saturating_add(cost),
    };
}

/// Returns up to `units` of a reservation admitted in window `mark`: only
/// while that window lasts (its count is gone after it).
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    if quota.window_index(now) != mark || s.index != mark || units == 0 || s.count == 0 {
        return;
    }
    s.count -= units.min(s.count);
    s.last = now;
}

/// The window index of (clamped) `now`: the mark a reservation admitted
/// at `now` keeps for its refund.
pub fn mark(quota: &Quota, s: &State, now: Nanos) -> u64 {
    quota.window_index(now.max(s.last))
}

/// True when the current window is empty at `now`.
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    count_at(quota, s, now.max(s.last)) == 0
}
