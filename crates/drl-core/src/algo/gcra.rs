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

/// The outcome of GCRA's rule at `now` (clamped): what both GCRA and the
/// shaper share.
pub(crate) struct Step {
    /// `max(tat, now) - now`: what is queued ahead of a new request.
    pub queued: u64,
    /// `new_tat - now` if admitted.
    pub new_ahead: u128,
}

pub(crate) fn step(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Step {
    let tat = s.last as u128 + s.ahead as u128;
    let queued = tat.saturating_sub(now as u128) as u64; // <= ahead
    Step {
        queued,
        new_ahead: queued as u128 + cost as u128 * quota.emission_interval() as u128,
    }
}

/// `remaining = floor((now - (tat - burst*T)) / T)` clamped to `[0, burst]`,
/// with `queued = tat - now` (zero when `tat <= now`).
pub(crate) fn remaining(quota: &Quota, queued: u64) -> u64 {
    quota.capacity_ns().saturating_sub(queued) / quota.emission_interval()
}

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    let now = now.max(s.last);
    let st = step(quota, s, now, cost);
    if cost > quota.burst() {
        return impossible(quota, remaining(quota, st.queued), st.queued);
    }
    let cap = quota.capacity_ns() as u128;
    if st.new_ahead <= cap {
        let after = st.new_ahead as u64;
        Decision {
            allowed: true,
            remaining: remaining(quota, after),
            limit: quota.limit(),
            retry_after: Some(0),
            reset_after: after,
            delay: 0,
            reason: None,
        }
    } else {
        Decision {
            allowed: false,
            remaining: remaining(quota, st.queued),
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
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let st = step(quota, s, now, cost);
    s.ahead = st.new_ahead as u64;
    s.last = now;
}

/// True when `tat <= now`.
pub fn is_fresh(_quota: &Quota, s: &State, now: Nanos) -> bool {
    let now = now.max(s.last);
    (s.last as u128 + s.ahead as u128) <= now as u128
}
