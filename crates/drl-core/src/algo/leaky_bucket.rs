//! Leaky bucket as a meter: fills by `cost` per admitted request, leaks
//! `limit` per `window`. Its decisions equal the token bucket's field for
//! field; it is written in its own terms (a level that drains) and the two
//! are checked against each other by property tests.
//!
//! **Debt.** A charge may fill the bucket past its capacity (`level >
//! cap`, at most `2^64 - 1`); every request is denied until it has leaked
//! back to `cap`.

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Leaky bucket (meter) state: empty as constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Fill level times `T`, at `last` (above the capacity in debt).
    pub level: Nanos,
}

fn level_at(s: &State, now: Nanos) -> Nanos {
    s.level.saturating_sub(now - s.last)
}

/// Decides a request of `cost` at `now`: the decision, and the state to
/// store if it changes (an admission with `cost > 0`). Pure.
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let now = now.max(s.last);
    let cap = quota.capacity_ns();
    let level = level_at(s, now);
    let room = quota.permits_in(cap.saturating_sub(level));
    if cost > quota.burst() {
        return (impossible(quota, room, level), None);
    }
    let add = cost * quota.emission_interval();
    let after = level as u128 + add as u128;
    if after <= cap as u128 {
        let after = after as u64;
        let d = Decision {
            allowed: true,
            remaining: quota.permits_in(cap - after),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: after,
            delay: 0,
            reason: None,
        };
        let next = (cost > 0).then_some(State {
            last: now,
            level: after,
        });
        (d, next)
    } else {
        let d = Decision {
            allowed: false,
            remaining: room,
            limit: quota.limit(),
            retry_after: Some(sat(after - cap as u128)),
            reset_after: level,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        (d, None)
    }
}

via_step!();

/// Consumes `cost` at `now` whatever the level: it may pass the capacity
/// (debt), up to `2^64 - 1`.
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let add = cost as u128 * quota.emission_interval() as u128;
    *s = State {
        last: now,
        level: sat(level_at(s, now) as u128 + add),
    };
}

/// Returns up to `units` permits of a reservation whose admission left the
/// theoretical arrival time at `mark` (see [`super::token_bucket::refund`]).
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    let back = super::refund_ns(quota, now, mark, units);
    if back == 0 {
        return;
    }
    *s = State {
        last: now,
        level: level_at(s, now).saturating_sub(back),
    };
}

/// The theoretical arrival time `last + level` (saturated).
pub fn mark(_quota: &Quota, s: &State, _now: Nanos) -> u64 {
    s.last.saturating_add(s.level)
}

/// True when the bucket has drained empty at `now`.
pub fn is_fresh(_quota: &Quota, s: &State, now: Nanos) -> bool {
    level_at(s, now.max(s.last)) == 0
}
