//! Sliding window counter (Cloudflare style), strict form: the estimate
//! `prev * (window - elapsed) / window + curr` never exceeds `limit`,
//! checked in exact integers.
//!
//! **Debt.** A charge may take `curr` past `limit` (saturating at
//! `2^64 - 1`); requests are denied until the weighted estimate is back
//! within the limit (at the latest, two windows later).

use super::{impossible, sat};
use crate::decision::{Decision, DenyReason};
use crate::quota::Quota;
use crate::time::Nanos;

/// Sliding window counter state: empty as constructed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct State {
    /// `now` of the last write.
    pub last: Nanos,
    /// Index of the window `curr` counts.
    pub index: u64,
    /// Count of window `index - 1`.
    pub prev: u64,
    /// Count of window `index`.
    pub curr: u64,
}

/// `(prev, curr)` as seen from window `index` (rolled forward, not stored).
fn counts_at(s: &State, index: u64) -> (u64, u64) {
    match index - s.index {
        0 => (s.prev, s.curr),
        1 => (s.curr, 0),
        _ => (0, 0),
    }
}

/// What a request of `cost` at `now` would get. Pure.
pub fn check(quota: &Quota, s: &State, now: Nanos, cost: u64) -> Decision {
    let now = now.max(s.last);
    let w = quota.window() as u128;
    let limit = quota.limit();
    let elapsed = (now % quota.window()) as u128;
    let to_end = w - elapsed;
    let (prev, curr) = counts_at(s, now / quota.window());
    let weighted = prev as u128 * to_end;
    let remaining_with = |curr: u64| {
        let room = (limit as u128 * w).saturating_sub(weighted) / w;
        sat(room.saturating_sub(curr as u128))
    };
    let reset = |curr: u64| {
        if curr > 0 {
            sat(to_end + w)
        } else if prev > 0 {
            sat(to_end)
        } else {
            0
        }
    };
    if cost > limit {
        return impossible(quota, remaining_with(curr), reset(curr));
    }
    // `curr + cost <= limit` first, so the products below stay in u128.
    let fits = curr.checked_add(cost).is_some_and(|x| x <= limit)
        && weighted
            .checked_add((curr + cost) as u128 * w)
            .is_some_and(|x| x <= limit as u128 * w);
    if fits {
        let after = curr + cost;
        return Decision {
            allowed: true,
            remaining: remaining_with(after),
            limit,
            retry_after: Some(0),
            reset_after: reset(after),
            delay: 0,
            reason: None,
        };
    }
    // Shortest wait: prev's weight falls while this window lasts; after the
    // rollover `curr` becomes the weighted count and falls in turn.
    let retry = if curr.checked_add(cost).is_some_and(|x| x <= limit) {
        // Fits within this window once prev * (to_end - wait) <= room * w.
        let room = (limit - curr - cost) as u128 * w;
        to_end - room / prev as u128
    } else {
        // Next window: curr * (w - e) <= (limit - cost) * w.
        let room = (limit - cost) as u128 * w;
        let e = if curr as u128 * w <= room {
            0
        } else {
            w - room / curr as u128
        };
        to_end + e
    };
    Decision {
        allowed: false,
        remaining: remaining_with(curr),
        limit,
        retry_after: Some(sat(retry)),
        reset_after: reset(curr),
        delay: 0,
        reason: Some(DenyReason::OverLimit),
    }
}

/// Applies an admitted request.
pub fn commit(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let index = now / quota.window();
    let (prev, curr) = counts_at(s, index);
    *s = State {
        last: now,
        index,
        prev,
        curr: curr + cost,
    };
}

/// Consumes `cost` at `now` whatever the estimate (`curr` may pass `limit`).
pub fn charge(quota: &Quota, s: &mut State, now: Nanos, cost: u64) {
    if cost == 0 {
        return;
    }
    let now = now.max(s.last);
    let index = now / quota.window();
    let (prev, curr) = counts_at(s, index);
    *s = State {
        last: now,
        index,
        prev,
        curr: curr.saturating_add(cost),
    };
}

/// Returns up to `units` of a reservation admitted in window `mark`: from
/// `curr` while that window lasts, from `prev` during the next one,
/// nothing later.
pub fn refund(quota: &Quota, s: &mut State, now: Nanos, mark: u64, units: u64) {
    let now = now.max(s.last);
    let index = now / quota.window();
    let (mut prev, mut curr) = counts_at(s, index);
    let count = if index == mark {
        &mut curr
    } else if index == mark.wrapping_add(1) {
        &mut prev
    } else {
        return;
    };
    if units == 0 || *count == 0 {
        return;
    }
    *count -= units.min(*count);
    *s = State {
        last: now,
        index,
        prev,
        curr,
    };
}

/// The window index of (clamped) `now`.
pub fn mark(quota: &Quota, s: &State, now: Nanos) -> u64 {
    now.max(s.last) / quota.window()
}

/// True when both counts are zero (or rolled out) at `now`.
pub fn is_fresh(quota: &Quota, s: &State, now: Nanos) -> bool {
    counts_at(s, now.max(s.last) / quota.window()) == (0, 0)
}
