//! GCRA: a theoretical arrival time `tat`.
//!
//! Stored as `ahead = tat - last` (never negative once written, at most
//! `burst * T`), so that `tat` near `u64::MAX` cannot overflow and the state
//! fits two words; the arithmetic is done in `u128`.

use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

use super::impossible;

/// GCRA state: `tat = last + ahead`; fresh (`tat = 0`) as constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// `tat - last`.
    pub ahead: Nanos,
}

/// GCRA's rule at `now`, shared with the shaper: the decision (without
/// `delay`), the shaper's delay for an admission, and the state to store.
#[inline]
pub(crate) fn rule(
    quota: &Quota,
    s: &State,
    now: Nanos,
    cost: u64,
) -> (Decision, u64, Option<State>) {
    let now = now.max(s.last);
    let tat = s.last as u128 + s.ahead as u128;
    // max(tat, now) - now: what is queued ahead of this request (<= ahead).
    let queued = tat.saturating_sub(now as u128) as u64;
    if cost > quota.burst() {
        return (impossible(quota, remaining(quota, queued), queued), 0, None);
    }
    let cap = quota.capacity_ns() as u128;
    let new_ahead = queued as u128 + cost as u128 * quota.emission_interval() as u128;
    if new_ahead <= cap {
        let after = new_ahead as u64;
        let d = Decision {
            allowed: true,
            remaining: remaining(quota, after),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: after,
            delay: 0,
            reason: None,
        };
        let next = (cost > 0).then_some(State {
            last: now,
            ahead: after,
        });
        (d, queued, next)
    } else {
        let d = Decision {
            allowed: false,
            remaining: remaining(quota, queued),
            limit: quota.limit(),
            retry_after: Some((new_ahead - cap) as u64),
            reset_after: queued,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        (d, 0, None)
    }
}

/// `remaining = floor((now - (tat - burst*T)) / T)` clamped to `[0, burst]`,
/// with `queued = tat - now` (zero when `tat <= now`).
#[inline]
fn remaining(quota: &Quota, queued: u64) -> u64 {
    quota.permits_in(quota.capacity_ns().saturating_sub(queued))
}

/// Decides a request of `cost` at `now`: the decision, and the state to
/// store if it changes (an admission with `cost > 0`). Pure.
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let (d, _, next) = rule(quota, s, now, cost);
    (d, next)
}

via_step!();

/// Consumes `cost` at `now` whatever is queued: `tat = max(tat, now) +
/// cost * T`, which may pass `now + cap` (debt; `tat - now` is kept at
/// most `2^64 - 1`).
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let queued = (s.last as u128 + s.ahead as u128).saturating_sub(now as u128);
    let add = cost as u128 * quota.emission_interval() as u128;
    *s = State {
        last: now,
        ahead: super::sat(queued + add),
    };
}

/// Returns up to `units` permits of a reservation whose admission left
/// `tat` at `mark`: `tat` moves back by `min(units * T, mark - now)`.
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    let back = super::refund_ns(quota, now, mark, units);
    if back == 0 {
        return;
    }
    let queued = (s.last as u128 + s.ahead as u128).saturating_sub(now as u128) as u64;
    *s = State {
        last: now,
        ahead: queued.saturating_sub(back),
    };
}

/// The theoretical arrival time `last + ahead` (saturated).
pub fn mark(_quota: &Quota, s: &State, _now: Nanos) -> u64 {
    s.last.saturating_add(s.ahead)
}

/// True when `tat <= now`.
pub fn is_fresh(_quota: &Quota, s: &State, now: Nanos) -> bool {
    let now = now.max(s.last);
    (s.last as u128 + s.ahead as u128) <= now as u128
}
