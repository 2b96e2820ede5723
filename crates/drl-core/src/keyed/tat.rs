//! The direct limiter's cell: one 64-bit word holding only the theoretical
//! arrival time `tat`, each request judged at its own `now` (no clock
//! clamp). Used by [`super::AtomicLimiter`] only; every other decider keeps
//! the exact two-word state of [`super::cell`].
//!
//! Token bucket, leaky meter and GCRA decide identically, field for field
//! (docs/semantics.md): with `queued = max(tat, now) - now`, the bucket's
//! credit is `burst*T - queued` and the meter's level is `queued`. One rule
//! therefore serves all three, and a fresh state of each is `tat = 0`.
//!
//! What this gives up and why it is sound is in docs/semantics.md, "The
//! direct limiter": on a monotone clock it decides exactly as the exact
//! cell; a request stamped before an earlier admission is judged at its own
//! stamp, which never admits what the clamped rule would deny; and in every
//! span of stamps `[t1, t2]` it admits at most `burst + floor((t2 - t1) / T)`
//! units. The word must fit `tat`: an admission whose new `tat` would pass
//! `u64::MAX` is denied (`retry_after = None`), only within `burst*T` of the
//! end of the 64-bit clock (the year 2554 for Unix-epoch nanoseconds).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algo::impossible;
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// The fresh state: `tat = 0` (nothing queued at any `now`).
pub const FRESH: Nanos = 0;

/// The 64-bit word the cell needs: load and compare-exchange.
pub trait Word64: Send + Sync {
    /// A word holding `v`.
    fn new(v: u64) -> Self;
    /// Reads the word.
    fn load(&self) -> u64;
    /// Replaces `current` with `new`; on failure returns the value seen.
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64>;
}

/// Relaxed ordering is enough: the limiter publishes no other memory
/// through the word, and every write is a compare-exchange, so writes are
/// totally ordered and none is lost. A load that returns an older `tat`
/// (smaller: `tat` never decreases) is either followed by a failing
/// exchange, or ends in a denial that the newer, larger `tat` would give
/// too.
impl Word64 for AtomicU64 {
    fn new(v: u64) -> Self {
        AtomicU64::new(v)
    }
    #[inline]
    fn load(&self) -> u64 {
        AtomicU64::load(self, Ordering::Relaxed)
    }
    #[inline]
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
    }
}

/// Decides a request of `cost` at `now` against `tat`: the decision, and
/// the `tat` to store if it changes (an admission with `cost > 0`). Pure.
#[inline]
pub fn step(quota: &Quota, tat: Nanos, now: Nanos, cost: u64) -> (Decision, Option<Nanos>) {
    let cap = quota.capacity_ns();
    // What is queued ahead of this request, seen from its own `now`.
    let queued = tat.saturating_sub(now);
    if cost > quota.burst() {
        let left = quota.permits_in(cap.saturating_sub(queued));
        return (impossible(quota, left, queued), None);
    }
    // cost <= burst, so cost * T <= burst * T fits (checked by `Quota`).
    let need = cost * quota.emission_interval();
    let room = cap - need;
    if queued > room {
        let d = Decision {
            allowed: false,
            remaining: quota.permits_in(cap.saturating_sub(queued)),
            limit: quota.limit(),
            retry_after: Some(queued - room),
            reset_after: queued,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        return (d, None);
    }
    let after = queued + need; // <= cap
    let next = if cost == 0 {
        None
    } else {
        // A new tat that does not fit the word: the end of the clock.
        let Some(tat) = now.checked_add(after) else {
            let left = quota.permits_in(cap - queued);
            return (impossible(quota, left, queued), None);
        };
        Some(tat)
    };
    let d = Decision {
        allowed: true,
        remaining: quota.permits_in(cap - after),
        limit: quota.limit(),
        retry_after: Some(0),
        reset_after: after,
        delay: 0,
        reason: None,
    };
    (d, next)
}

/// Decides one request on `word`: load, check, compare-exchange, retry on
/// interference. Denials and queries never write.
#[inline]
pub fn decide<W: Word64>(quota: &Quota, word: &W, now: Nanos, cost: u64) -> Decision {
    let mut cur = word.load();
    loop {
        let (d, next) = step(quota, cur, now, cost);
        match next {
            None => return d,
            Some(n) => match word.compare_exchange(cur, n) {
                Ok(_) => return d,
                Err(seen) => cur = seen,
            },
        }
    }
}

/// The `tat` an exact state of token bucket, leaky meter or GCRA stands
/// for (`None` if it does not fit 64 bits, or for another algorithm):
/// `last + burst*T - credit`, `last + level`, `last + ahead`.
pub fn tat_of(quota: &Quota, state: &crate::limiter::State) -> Option<Nanos> {
    use crate::limiter::State;
    match state {
        State::TokenBucket(s) => s
            .last
            .checked_add(quota.capacity_ns().checked_sub(s.credit)?),
        State::LeakyBucket(s) => s.last.checked_add(s.level),
        State::Gcra(s) => s.last.checked_add(s.ahead),
        _ => None,
    }
}
