//! Leaky bucket as a meter: fills by `cost` per admitted request, leaks
//! `limit` per `window`. Its decisions equal the token bucket's field for
//! field; it is written in its own terms (a level that drains) and the two
//! are checked against each other by property tests.

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Leaky bucket (meter) state: empty as constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Fill level times `T`, at `last`.
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
    if cost > quota.burst() {
        return (
            impossible(quota, quota.permits_in(cap - level), level),
            None,
        );
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
            remaining: quota.permits_in(cap - level),
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

/// True when the bucket has drained empty at `now`.
pub fn is_fresh(_quota: &Quota, s: &State, now: Nanos) -> bool {
    level_at(s, now.max(s.last)) == 0
}
