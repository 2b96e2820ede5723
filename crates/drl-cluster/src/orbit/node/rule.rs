//! The rebalance rule of `docs/orbit.md`: what a visit keeps and leaves.

use super::KeyState;
use crate::orbit::config::PPM;

/// The constants of the rebalance rule at one instant.
pub(super) struct Rule {
    pub(super) lap: u128,
    pub(super) elapsed: u128,
    pub(super) window: u128,
    pub(super) headroom_pct: u128,
    pub(super) cap: u64,
    pub(super) rollover_ppm: u32,
}

impl Rule {
    /// Demand forecast until the table is back: `max(rate this window, rate
    /// last window) * lap * headroom`, at most the cap; plus the key's debt
    /// (what the node must obtain before it admits anything).
    pub(super) fn want(&self, ks: &KeyState) -> u64 {
        let cur = ks.demand as u128 * self.lap / self.elapsed;
        let prev = ks.prev_demand as u128 * self.lap / self.window;
        let want = cur.max(prev) * self.headroom_pct / 100;
        (want.min(self.cap as u128) as u64).saturating_add(ks.debt)
    }

    /// What a visit must leave in the table: `floor(r * free)`.
    pub(super) fn reserve(&self, free: u64) -> u64 {
        (free as u128 * self.rollover_ppm as u128 / PPM as u128) as u64
    }

    /// The rebalance rule of `docs/orbit.md`: holding `h` and free `f` become
    /// `keep = min(want, h + max(0, f - reserve))` and `h + f - keep`.
    pub(super) fn split(&self, h: u64, f: u64, reserve: u64, want: u64) -> (u64, u64) {
        // Hysteresis: a node gives back only when it holds more than twice
        // what it wants, so steady keys do not change (small deltas).
        if want <= h && h <= want.saturating_mul(2) {
            return (h, f);
        }
        let takeable = f.saturating_sub(reserve);
        let keep = (want as u128).min(h as u128 + takeable as u128) as u64;
        // keep <= h + f; h + f <= cap by conservation (tables with any free
        // above the cap are rejected), so the rest fits in u64.
        let free = u64::try_from(h as u128 + f as u128 - keep as u128).unwrap_or(u64::MAX);
        (keep, free)
    }
}
