//! Leaky bucket as a queue (a shaper): requests wait instead of being
//! dropped while the backlog has room; one permit leaves every `T`.
//!
//! `next_free` plays the role of GCRA's `tat`: admitting `cost` makes the
//! backlog `max(next_free, now) + cost*T - now`, allowed while it is at most
//! `burst * T` (the same as `ceil(backlog / T) <= burst`, since `burst * T`
//! is a multiple of `T`). So the admit rule is GCRA's, plus a delay.

use super::gcra;
use super::impossible;
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Shaper state: `next_free = last + ahead`.
pub type State = gcra::State;

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    let now = now.max(s.last);
    let st = gcra::step(quota, s, now, cost);
    if cost > quota.burst() {
        return impossible(quota, gcra::remaining(quota, st.queued), st.queued);
    }
    let cap = quota.capacity_ns() as u128;
    if st.new_ahead <= cap {
        let queued = st.new_ahead as u64;
        Decision {
            allowed: true,
            remaining: gcra::remaining(quota, queued),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: queued,
            delay: if cost == 0 { 0 } else { st.queued },
            reason: None,
        }
    } else {
        Decision {
            allowed: false,
            remaining: gcra::remaining(quota, st.queued),
            limit: quota.limit(),
            retry_after: Some((st.new_ahead - cap) as u64),
            reset_after: st.queued,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        }
    }
}

/// Applies an admitted request.
pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    gcra::commit(quota, s, now, cost)
}

/// True when the queue is empty at `now`.
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    gcra::is_fresh(quota, s, now)
}
