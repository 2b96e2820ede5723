//! Leaky bucket as a queue (a shaper): requests wait instead of being
//! dropped while the backlog has room; one permit leaves every `T`.
//!
//! `next_free` plays the role of GCRA's `tat`: admitting `cost` makes the
//! backlog `max(next_free, now) + cost*T - now`, allowed while it is at most
//! `burst * T` (the same as `ceil(backlog / T) <= burst`, since `burst * T`
//! is a multiple of `T`). So the admit rule is GCRA's, plus a delay.

use super::gcra;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::time::Nanos;

/// Shaper state: `next_free = last + ahead`.
pub type State = gcra::State;

/// Decides a request of `cost` at `now`: the decision (with the delay an
/// admitted request must be held), and the state to store. Pure.
#[inline]
pub fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> (Decision, Option<State>) {
    let (mut d, delay, next) = gcra::rule(quota, s, now, cost);
    if d.allowed && cost > 0 {
        d.delay = delay;
    }
    (d, next)
}

via_step!();

pub use gcra::{charge, mark, refund};

/// True when the queue is empty at `now`.
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    gcra::is_fresh(quota, s, now)
}
