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

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    let now = now.max(s.last);
    let t = quota.emission_interval();
    let cap = quota.capacity_ns();
    let c = credit_at(quota, s, now);
    if cost > quota.burst() {
        return impossible(quota, c / t, cap - c);
    }
    let need = cost * t;
    if c >= need {
        let after = c - need;
        Decision {
            allowed: true,
            remaining: after / t,
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: cap - after,
            delay: 0,
            reason: None,
        }
    } else {
        Decision {
            allowed: false,
            remaining: c / t,
            limit: quota.limit(),
            retry_after: Some(need - c),
            reset_after: cap - c,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        }
    }
}

/// Applies an admitted request (call only after `check` allowed it).
pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let c = credit_at(quota, s, now);
    s.credit = c - cost * quota.emission_interval();
    s.last = now;
}

/// True when the bucket is full at `now` (dropping it changes nothing).
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    credit_at(quota, s, now.max(s.last)) == quota.capacity_ns()
}
