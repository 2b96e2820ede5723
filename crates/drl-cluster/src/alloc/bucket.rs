//! An integer token bucket whose fill rate can change and may be negative.
//!
//! The level is kept in nano-units (`units × 10⁹`), so refilling at `r`
//! units per second for `dt` ns adds exactly `r × dt` nano-units: no
//! rounding, no floats. A negative rate drains the bucket (GTB uses this to
//! account for traffic arriving at other limiters).

use drl_core::Nanos;

const NANO: i128 = 1_000_000_000;

/// Token bucket with a variable signed fill rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarBucket {
    level: i128,
    depth: i128,
    rate: i64,
    last: Nanos,
}

impl VarBucket {
    /// A full bucket of `depth` units filling at `rate` units per second.
    pub fn new(depth: u64, rate: i64, now: Nanos) -> Self {
        let depth = depth as i128 * NANO;
        Self {
            level: depth,
            depth,
            rate,
            last: now,
        }
    }

    fn advance(&mut self, now: Nanos) {
        if now > self.last {
            let dt = (now - self.last) as i128;
            // A debt (a charge past empty) is repaid by the refill; a
            // negative rate drains to empty, not into more debt.
            let floor = self.level.min(0);
            self.level = (self.level + self.rate as i128 * dt).clamp(floor, self.depth);
            self.last = now;
        }
    }

    /// Takes `size` units whatever the level: past empty the bucket goes
    /// into debt, and [`VarBucket::try_take`] admits nothing until the
    /// refill has repaid it (a cost known afterwards).
    pub fn charge(&mut self, now: Nanos, size: u64) {
        self.advance(now);
        // Bounded far beyond any real debt (2^100 nano-units).
        self.level = (self.level - size as i128 * NANO).max(-(1 << 100));
    }

    /// Changes the fill rate from `now` on.
    pub fn set_rate(&mut self, now: Nanos, rate: i64) {
        self.advance(now);
        self.rate = rate;
    }

    /// The fill rate (units per second).
    pub fn rate(&self) -> i64 {
        self.rate
    }

    /// Fills the bucket to its depth (the FPS slow-start burst).
    pub fn fill(&mut self, now: Nanos) {
        self.advance(now);
        self.level = self.depth;
    }

    /// Sets the level to `units` (at most the depth).
    pub fn fill_to(&mut self, now: Nanos, units: u64) {
        self.advance(now);
        self.level = (units as i128 * NANO).min(self.depth);
    }

    /// True while a charge's debt is not repaid at `now`.
    pub fn in_debt(&mut self, now: Nanos) -> bool {
        self.advance(now);
        self.level < 0
    }

    /// Whole units available at `now` (none in debt).
    pub fn available(&mut self, now: Nanos) -> u64 {
        self.advance(now);
        (self.level.max(0) / NANO) as u64
    }

    /// Takes `size` units if available; true when taken.
    pub fn try_take(&mut self, now: Nanos, size: u64) -> bool {
        self.advance(now);
        let need = size as i128 * NANO;
        if self.level >= need {
            self.level -= need;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn refills_exactly_and_caps_at_depth() {
        let mut b = VarBucket::new(3_000, 1_000_000, 0);
        assert!(b.try_take(0, 3_000));
        assert!(!b.try_take(0, 1));
        // 1 ms at 1e6 units/s = 1000 units.
        assert!(b.try_take(MS, 1_000));
        assert!(!b.try_take(MS, 1));
        assert_eq!(b.available(100 * MS), 3_000);
    }

    #[test]
    fn a_charge_goes_into_debt_and_the_refill_repays_it() {
        let mut b = VarBucket::new(10, 1_000, 0);
        b.charge(0, 25);
        assert_eq!(b.available(0), 0);
        assert!(!b.try_take(0, 1));
        // 15 units of debt: repaid after 15 ms at 1,000/s, then 1 more.
        assert!(!b.try_take(15 * MS, 1));
        assert!(b.try_take(16 * MS, 1));
        // A negative rate never deepens a debt.
        b.charge(16 * MS, 5);
        b.set_rate(16 * MS, -1_000);
        assert_eq!(b.available(1_000 * MS), 0);
        b.set_rate(1_000 * MS, 1_000);
        assert!(!b.try_take(1_004 * MS, 1));
        assert!(b.try_take(1_006 * MS, 1));
    }

    #[test]
    fn negative_rate_drains_to_zero() {
        let mut b = VarBucket::new(1_000, -1_000, 0);
        assert_eq!(b.available(500 * MS), 500);
        assert_eq!(b.available(5_000 * MS), 0);
        b.set_rate(5_000 * MS, 2_000);
        assert_eq!(b.available(5_250 * MS), 500);
    }

    #[test]
    fn fill_restores_depth_at_zero_rate() {
        let mut b = VarBucket::new(10, 0, 0);
        assert!(b.try_take(0, 10));
        assert_eq!(b.available(10 * MS), 0);
        b.fill(10 * MS);
        assert_eq!(b.available(10 * MS), 10);
    }
}
