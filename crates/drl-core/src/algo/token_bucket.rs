//! Token bucket with continuous refill.
//!
//! Tokens are kept exactly as "credit" in nanoseconds: `tokens = credit / T`,
//! capacity `burst * T`. One token accrues per `T` ns.

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Token bucket state. Fresh (full) as constructed by [`State::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Tokens times `T`, at `last`.
    pub credit: Nanos,
}

impl State {
    /// A full bucket.
    pub fn new(quota: &Quota) -> Self {
        Self {
            last: 0,
            credit: quota.capacity_ns(),
        }
    }
}

/// Credit at `now` (already clamped).
fn credit_at(quota: &Quota, s: &State, now: Nanos) -> Nanos {
    let cap = quota.capacity_ns();
    sat(s.credit as u128 + (now - s.last) as u128).min(cap)
}

/// Decides a request of `cost` at `now`: the decision, and the state to
/// store if it changes (an admission with `cost > 0`). Pure.
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let now = now.max(s.last);
    let cap = quota.capacity_ns();
    let c = credit_at(quota, s, now);
    if cost > quota.burst() {
        return (impossible(quota, quota.permits_in(c), cap - c), None);
    }
    let need = cost * quota.emission_interval();
    if c >= need {
        let after = c - need;
        let d = Decision {
            allowed: true,
            remaining: quota.permits_in(after),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: cap - after,
            delay: 0,
            reason: None,
        };
        let next = (cost > 0).then_some(State {
            last: now,
            credit: after,
        });
        (d, next)
    } else {
        let d = Decision {
            allowed: false,
            remaining: quota.permits_in(c),
            limit: quota.limit(),
            retry_after: Some(need - c),
            reset_after: cap - c,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        (d, None)
    }
}

via_step!();

/// True when the bucket is full at `now` (dropping it changes nothing).
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    credit_at(quota, s, now.max(s.last)) == quota.capacity_ns()
}
