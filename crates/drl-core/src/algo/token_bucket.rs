//! Token bucket with continuous refill.
//!
//! Tokens are kept exactly as "credit" in nanoseconds: `tokens = credit / T`,
//! capacity `burst * T`. One token accrues per `T` ns.
//!
//! **Debt.** A charge (docs/semantics.md, "Costs known afterwards") may
//! take the credit below zero. A stored `credit` never exceeds `cap`
//! otherwise, so a value above `cap` encodes the negative credit
//! `credit - 2^64` (two's complement): the stored word is always
//! `cap - level` modulo 2^64, with the leaky meter's `level` in
//! `[0, 2^64 - 1]`. Debt is thus at most `2^64 - 1 - cap` ns, as for the
//! meter and GCRA.

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Token bucket state. Fresh (full) as constructed by [`State::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Tokens times `T`, at `last`; a value above the capacity encodes a
    /// debt of `2^64 - credit` (see the module documentation).
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

const TWO_64: i128 = 1 << 64;

/// The signed credit a stored word encodes.
#[inline]
fn signed(quota: &Quota, credit: u64) -> i128 {
    if credit <= quota.capacity_ns() {
        credit as i128
    } else {
        credit as i128 - TWO_64
    }
}

/// The stored word of a signed credit at most `cap`; a debt deeper than
/// `2^64 - 1 - cap` is kept at that depth.
#[inline]
fn encode(quota: &Quota, c: i128) -> u64 {
    let cap = quota.capacity_ns() as i128;
    let c = c.min(cap);
    if c >= 0 {
        c as u64
    } else {
        (c.max(cap + 1 - TWO_64) + TWO_64) as u64
    }
}

/// Signed credit at `now` (already clamped).
#[inline]
fn credit_at(quota: &Quota, s: &State, now: Nanos) -> i128 {
    let cap = quota.capacity_ns() as i128;
    (signed(quota, s.credit) + (now - s.last) as i128).min(cap)
}

/// `cap - c`, the wait until full (at most `2^64 - 1` by the encoding).
#[inline]
fn to_full(quota: &Quota, c: i128) -> Nanos {
    sat((quota.capacity_ns() as i128 - c) as u128)
}

/// Whole tokens of a signed credit (0 in debt).
#[inline]
fn permits(quota: &Quota, c: i128) -> u64 {
    quota.permits_in(c.max(0) as u64)
}

/// Decides a request of `cost` at `now`: the decision, and the state to
/// store if it changes (an admission with `cost > 0`). Pure.
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let now = now.max(s.last);
    let c = credit_at(quota, s, now);
    if cost > quota.burst() {
        return (
            impossible(quota, permits(quota, c), to_full(quota, c)),
            None,
        );
    }
    let need = (cost * quota.emission_interval()) as i128;
    if c >= need {
        let after = c - need;
        let d = Decision {
            allowed: true,
            remaining: permits(quota, after),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: to_full(quota, after),
            delay: 0,
            reason: None,
        };
        let next = (cost > 0).then_some(State {
            last: now,
            credit: after as u64,
        });
        (d, next)
    } else {
        let d = Decision {
            allowed: false,
            remaining: permits(quota, c),
            limit: quota.limit(),
            retry_after: Some(sat((need - c) as u128)),
            reset_after: to_full(quota, c),
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        (d, None)
    }
}

via_step!();

/// Consumes `cost` at `now` whatever the credit: the credit may go below
/// zero (debt), down to `cap + 1 - 2^64`.
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let need = (cost as u128 * quota.emission_interval() as u128).min(TWO_64 as u128) as i128;
    *s = State {
        last: now,
        credit: encode(quota, credit_at(quota, s, now) - need),
    };
}

/// Returns up to `units` permits of a reservation whose admission left the
/// theoretical arrival time at `mark`: `min(units * T, mark - now)` ns of
/// credit (none once `now >= mark`), never past the capacity.
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    let back = super::refund_ns(quota, now, mark, units);
    if back == 0 {
        return;
    }
    *s = State {
        last: now,
        credit: encode(quota, credit_at(quota, s, now) + back as i128),
    };
}

/// The theoretical arrival time `last + (cap - credit)` (saturated): the
/// mark a reservation admitted on this state keeps for its refund.
pub fn mark(quota: &Quota, s: &State, _now: Nanos) -> u64 {
    s.last
        .saturating_add(quota.capacity_ns().wrapping_sub(s.credit))
}

/// True when the bucket is full at `now` (dropping it changes nothing).
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    credit_at(quota, s, now.max(s.last)) == quota.capacity_ns() as i128
}
