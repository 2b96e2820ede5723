//! The seven algorithms, one file each. Every one is a pair of pure
//! functions over a small state: `check` (what would happen, no mutation)
//! and `commit` (apply an admitted check). Denials and queries (`cost = 0`)
//! never write state, so "a denied request consumes nothing" holds bit for
//! bit, and multi-limit all-or-nothing is `check` everything, then `commit`
//! everything.
//!
//! Costs known afterwards (docs/semantics.md): each module also has
//! `charge` (consume whatever the state holds, into debt if need be),
//! `mark` (what a reservation admitted at `now` keeps) and `refund` (give
//! back what of a reservation still holds the state back). These write;
//! checks, denials and queries still never do.
//!
//! Clock clamping: each state remembers `last`, the `now` of the last
//! write (an admission of non-zero cost, a charge, a refund); an earlier
//! `now` is treated as `last`.

/// Defines `check` and `commit` of an algorithm module from its `step`
/// (decision and next state in one pass).
macro_rules! via_step {
    () => {
        /// What a request of `cost` at `now` would get. Pure.
        pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
            step(quota, s, now, cost).0
        }

        /// Applies a request that `check` admitted at the same `now` and `cost`.
        pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
            if let (_, Some(next)) = step(quota, s, now, cost) {
                *s = next;
            }
        }
    };
}

pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod leaky_queue;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// The nanoseconds a refund of `units` returns to a bucket-family state at
/// (clamped) `now`, for a reservation whose admission left the theoretical
/// arrival time at `mark`: `min(units * T, mark - now)`, 0 once `now >=
/// mark`. What of the reservation is still ahead of `now` can be given back;
/// what time has already drained cannot (docs/semantics.md).
pub(crate) fn refund_ns(quota: &Quota, now: Nanos, mark: u64, units: u64) -> u64 {
    let per = units as u128 * quota.emission_interval() as u128;
    sat(per.min(mark.saturating_sub(now) as u128))
}

/// Saturates a `u128` into a `u64`.
pub(crate) fn sat(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// The denial for a cost no wait can ever admit.
pub(crate) fn impossible(quota: &Quota, remaining: u64, reset_after: Nanos) -> Decision {
    Decision {
        allowed: false,
        remaining,
        limit: quota.limit(),
        retry_after: None,
        reset_after,
        delay: 0,
        reason: Some(DenyReason::CostExceedsCapacity),
    }
}
