//! An integer token bucket whose fill rate can change and may be negative.
//!
//! The level is kept in nano-units (`units × 10⁹`), so refilling at `r`
//! units per second for `dt` ns adds exactly `r × dt` nano-units: no
//! rounding, no floats. A negative rate drains the bucket (GTB uses this to
//! account for traffic arriving at other limiters).
//!
//! **Refunds.** A reservation taken from the bucket keeps a [`BucketMark`]
//! (taken right after its admission); [`VarBucket::refund`] gives back at
//! most what the reservation still holds the bucket below the level it
//! would have had, had the reservation taken less (same other
//! consumptions). Let `A` be this bucket and `B` the one whose reservation
//! took `u` units less: `d = level(B) − level(A)` starts at `u` and never
//! grows. It shrinks only when `B` is clamped: at its depth while the fill
//! rate is positive (then `d` equals `A`'s deficit, `depth − level(A)`),
//! or while `A` sits at its floor under a negative rate (then by at most
//! `|rate|` per second). `A`'s deficit, from `D0` right after the
//! admission, falls by at most the positive refill `P` plus the refunds
//! `Q` given back since (consumptions only raise it). So
//! `d ≥ min(u, D0 − ΔP − ΔQ) − ΔN`, with `N` the negative refill: that
//! is what a refund gives back (in whole units, rounded down). A
//! `fill`/`fill_to` sets the level whatever it was (both buckets alike),
//! so a mark taken before one refunds nothing.

use drl_core::Nanos;

const NANO: i128 = 1_000_000_000;

/// Token bucket with a variable signed fill rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarBucket {
    level: i128,
    depth: i128,
    rate: i64,
    last: Nanos,
    /// Times the level was set whatever it was (`fill`, `fill_to`).
    epoch: u64,
    /// Positive refill plus refunds since creation (nano-units, unclamped).
    raised: u128,
    /// Negative refill since creation (nano-units, unclamped).
    drained: u128,
}

/// What bounds a refund of a reservation taken from a [`VarBucket`]: its
/// state right after the admission (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketMark {
    /// The bucket's epoch (a `fill` since makes the mark void).
    pub epoch: u64,
    /// Its deficit `depth − level`, whole units rounded down.
    pub deficit: u64,
    /// Its positive refill plus refunds so far, whole units rounded down,
    /// modulo 2^64.
    pub raised: u64,
    /// Its negative refill so far, whole units rounded down, modulo 2^64.
    pub drained: u64,
}

/// Whole units of `nano` nano-units, rounded up, modulo 2^64.
fn units_up(nano: u128) -> u64 {
    nano.div_ceil(NANO as u128) as u64
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
            epoch: 0,
            raised: 0,
            drained: 0,
        }
    }

    /// The level at `now` (nano-units), changing nothing.
    fn level_at(&self, now: Nanos) -> i128 {
        if now > self.last {
            let dt = (now - self.last) as i128;
            let floor = self.level.min(0);
            (self.level + self.rate as i128 * dt).clamp(floor, self.depth)
        } else {
            self.level
        }
    }

    fn advance(&mut self, now: Nanos) {
        if now > self.last {
            let dt = (now - self.last) as i128;
            let flow = self.rate.unsigned_abs() as u128 * dt as u128;
            if self.rate > 0 {
                self.raised = self.raised.saturating_add(flow);
            } else {
                self.drained = self.drained.saturating_add(flow);
            }
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

    /// Fills the bucket to its depth (the FPS slow-start burst); a
    /// charge's debt stays (only the refill repays it).
    pub fn fill(&mut self, now: Nanos) {
        self.fill_to(now, u64::MAX);
    }

    /// Sets the level to `units` (at most the depth); a charge's debt
    /// stays (only the refill repays it: a burst handed to an idle FPS
    /// share wiped the debt of the charges made there).
    pub fn fill_to(&mut self, now: Nanos, units: u64) {
        self.advance(now);
        if self.level >= 0 {
            self.level = (units as i128 * NANO).min(self.depth);
        }
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// True when [`VarBucket::try_take`] of `size` would take at `now`;
    /// changes nothing.
    pub fn admits(&self, now: Nanos, size: u64) -> bool {
        self.level_at(now) >= size as i128 * NANO
    }

    /// True while a charge's debt is not repaid at `now`; changes nothing.
    pub fn owes(&self, now: Nanos) -> bool {
        self.level_at(now) < 0
    }

    /// The mark of a reservation admitted at `now` (right after its
    /// [`VarBucket::try_take`]).
    pub fn mark(&mut self, now: Nanos) -> BucketMark {
        self.advance(now);
        let deficit = (self.depth - self.level).max(0) / NANO;
        BucketMark {
            epoch: self.epoch,
            deficit: deficit.min(u64::MAX as i128) as u64,
            raised: (self.raised / NANO as u128) as u64,
            drained: (self.drained / NANO as u128) as u64,
        }
    }

    /// Gives back up to `units` of a reservation marked `mark`, at `now`:
    /// `min(units, D0 − ΔP − ΔQ) − ΔN` whole units (the module docs), and
    /// never past the depth; nothing after a `fill`. Returns the units
    /// given back.
    pub fn refund(&mut self, now: Nanos, mark: &BucketMark, units: u64) -> u64 {
        self.advance(now);
        if mark.epoch != self.epoch {
            return 0;
        }
        // Counters rounded up now, down at the mark: the changes are over-
        // rather than under-estimated.
        let raised = units_up(self.raised).wrapping_sub(mark.raised);
        let drained = units_up(self.drained).wrapping_sub(mark.drained);
        let room = ((self.depth - self.level).max(0) / NANO).min(u64::MAX as i128) as u64;
        let back = units
            .min(mark.deficit.saturating_sub(raised))
            .saturating_sub(drained)
            .min(room);
        let nano = back as i128 * NANO;
        self.level += nano;
        self.raised = self.raised.saturating_add(nano as u128);
        back
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

    #[test]
    fn a_fill_keeps_a_debt() {
        let mut b = VarBucket::new(10, 0, 0);
        b.charge(0, 25);
        b.fill_to(MS, 10);
        b.fill(MS);
        assert!(b.in_debt(MS), "only the refill repays a debt");
        b.set_rate(MS, 1_000);
        assert!(!b.in_debt(16 * MS));
        b.fill_to(16 * MS, 4);
        assert_eq!(b.available(16 * MS), 4);
    }

    #[test]
    fn a_refund_gives_back_what_the_reservation_still_holds() {
        // Depth 100, 1,000/s. A reservation of 60 from a full bucket.
        let mut b = VarBucket::new(100, 1_000, 0);
        assert!(b.try_take(0, 60));
        let m = b.mark(0);
        assert_eq!(m.deficit, 60);
        // At once: all of it comes back.
        let mut now = b.clone();
        assert_eq!(now.refund(0, &m, 45), 45);
        assert_eq!(now.available(0), 85);
        // 20 ms later 20 units refilled: 40 still held back.
        let mut later = b.clone();
        assert_eq!(later.refund(20 * MS, &m, 45), 40);
        assert_eq!(later.available(20 * MS), 100);
        // Refilled to the depth: nothing held back, nothing given.
        assert_eq!(b.clone().refund(60 * MS, &m, 45), 0);
        // A fill since voids the mark.
        let mut filled = b.clone();
        filled.fill_to(MS, 10);
        assert_eq!(filled.refund(MS, &m, 45), 0);
    }

    /// One step of the refund property: what both buckets do alike.
    #[derive(Debug, Clone)]
    enum Step {
        Wait(u64),
        Rate(i64),
        Take(u64),
        Charge(u64),
        Fill(u64),
        /// Another reservation, refunded (by up to its second field)
        /// `later` steps on.
        Other(u64, u64, usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u64..200).prop_map(Step::Wait),
            2 => (-3_000i64..5_000).prop_map(Step::Rate),
            3 => (1u64..80).prop_map(Step::Take),
            1 => (1u64..150).prop_map(Step::Charge),
            1 => (0u64..120).prop_map(Step::Fill),
            2 => (1u64..80, 0u64..80, 0usize..10).prop_map(|(c, u, l)| Step::Other(c, u, l)),
        ]
    }

    proptest::proptest! {
        /// The bound of the module docs: after a reservation of `cost` is
        /// refunded `units` (at most `cost`), the bucket is never above the
        /// one whose reservation took `cost - units` and that saw the same
        /// consumptions, fills, rates and other refunds; whatever the rates
        /// (negative included), debts and fills in between.
        #[test]
        fn a_refund_never_lifts_the_bucket_above_the_smaller_reservation(
            depth in 1u64..200,
            rate in -2_000i64..4_000,
            before in proptest::collection::vec(step(), 0..20),
            cost in 1u64..150,
            units in 0u64..150,
            after in proptest::collection::vec(step(), 0..40),
        ) {
            let units = units.min(cost);
            let mut a = VarBucket::new(depth, rate, 0);
            let mut b = a.clone();
            let mut now = 0;
            let mut others: Vec<(usize, BucketMark, u64)> = Vec::new();
            let run = |a: &mut VarBucket, b: &mut VarBucket, steps: &[Step], now: &mut Nanos,
                           others: &mut Vec<(usize, BucketMark, u64)>|
             -> Result<(), proptest::test_runner::TestCaseError> {
                for (i, s) in steps.iter().enumerate() {
                    match *s {
                        Step::Wait(ms) => *now += ms * MS,
                        Step::Rate(r) => {
                            a.set_rate(*now, r);
                            b.set_rate(*now, r);
                        }
                        Step::Take(n) => {
                            if a.try_take(*now, n) {
                                b.charge(*now, n);
                            }
                        }
                        Step::Charge(n) => {
                            a.charge(*now, n);
                            b.charge(*now, n);
                        }
                        Step::Fill(n) => {
                            a.fill_to(*now, n);
                            b.fill_to(*now, n);
                        }
                        Step::Other(c, u, later) => {
                            if a.try_take(*now, c) {
                                b.charge(*now, c);
                                others.push((i + later, a.mark(*now), u.min(c)));
                            }
                        }
                    }
                    // Other reservations due now are refunded, alike.
                    let due: Vec<_> = others.iter().filter(|o| o.0 <= i).cloned().collect();
                    others.retain(|o| o.0 > i);
                    for (_, m, u) in due {
                        let back = a.refund(*now, &m, u);
                        proptest::prop_assert!(back <= u);
                        b.advance(*now);
                        b.level = (b.level + back as i128 * NANO).min(b.depth);
                    }
                    proptest::prop_assert!(a.level_at(*now) <= b.level_at(*now), "{a:?} above {b:?}");
                }
                Ok(())
            };
            run(&mut a, &mut b, &before, &mut now, &mut others)?;
            // The reservation: `cost` here, `cost - units` in the other.
            if a.try_take(now, cost) {
                let m = a.mark(now);
                b.charge(now, cost - units);
                run(&mut a, &mut b, &after, &mut now, &mut others)?;
                let back = a.refund(now, &m, units);
                proptest::prop_assert!(back <= units);
                proptest::prop_assert!(a.level_at(now) <= b.level_at(now), "after the refund of {back}: {a:?} above {b:?}");
                run(&mut a, &mut b, &after, &mut now, &mut others)?;
            }
        }
    }
}
