//! Demand estimation: the average arrival rate over each estimate interval,
//! smoothed by an exponentially weighted moving average (EWMA).
//!
//! The paper quotes its EWMA as a "1-second" parameter (0.1 in the
//! baseline): the weight the old estimate keeps after one second. With an
//! estimate interval of `Δ` seconds the per-interval history weight is
//! therefore `ewma^Δ` (0.1^0.05 ≈ 0.891 at 50 ms). `ewma = 0` disables the
//! filter (the estimate is the last interval's raw rate), as in the paper's
//! sweep "EWMA from 0 to 0.75".
//!
//! Units are whatever the caller counts (bytes, packets, request cost); rates
//! are in those units per second. Floats live here, not in the deciders.

use drl_core::Nanos;

/// Nanoseconds per second, as a float.
const NS_PER_S: f64 = 1e9;

/// Per-interval history weight for a 1-second EWMA parameter `ewma`.
pub fn history_weight(ewma_per_second: f64, interval: Nanos) -> f64 {
    let e = if ewma_per_second.is_finite() {
        ewma_per_second.clamp(0.0, 1.0)
    } else {
        0.0
    };
    if e == 0.0 {
        return 0.0;
    }
    e.powf(interval as f64 / NS_PER_S)
}

/// A smoothed rate: EWMA over per-interval samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Ewma {
    history: f64,
    value: Option<f64>,
}

impl Ewma {
    /// A filter keeping `history` (in `[0, 1]`) of the old value per sample.
    pub fn new(history: f64) -> Self {
        let history = if history.is_finite() {
            history.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Self {
            history,
            value: None,
        }
    }

    /// Feeds one sample; the first sample initialises the filter.
    pub fn update(&mut self, sample: f64) -> f64 {
        let v = match self.value {
            None => sample,
            Some(old) => self.history * old + (1.0 - self.history) * sample,
        };
        self.value = Some(v);
        v
    }

    /// The current value (0 before the first sample).
    pub fn value(&self) -> f64 {
        self.value.unwrap_or(0.0)
    }

    /// Overwrites the current value.
    pub fn set(&mut self, v: f64) {
        self.value = Some(v);
    }
}

/// Counts units arriving during an interval and turns them into a smoothed
/// rate at the end of each interval.
#[derive(Debug, Clone)]
pub struct RateEstimator {
    pending: u64,
    last_close: Option<Nanos>,
    raw: f64,
    ewma: Ewma,
}

impl RateEstimator {
    /// An estimator for intervals of `interval` ns and a 1-second EWMA
    /// parameter `ewma` (see the module docs).
    pub fn new(interval: Nanos, ewma: f64) -> Self {
        Self {
            pending: 0,
            last_close: None,
            raw: 0.0,
            ewma: Ewma::new(history_weight(ewma, interval)),
        }
    }

    /// Records `units` arriving now.
    pub fn record(&mut self, units: u64) {
        self.pending = self.pending.saturating_add(units);
    }

    /// Units recorded since the last close.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Ends the interval at `now`: computes the raw rate over the time since
    /// the previous close (or `nominal` ns for the first one), feeds the EWMA
    /// and returns the smoothed rate in units per second.
    pub fn close(&mut self, now: Nanos, nominal: Nanos) -> f64 {
        let elapsed = match self.last_close {
            Some(t) if now > t => now - t,
            _ => nominal.max(1),
        };
        self.last_close = Some(now);
        self.raw = self.pending as f64 * NS_PER_S / elapsed as f64;
        self.pending = 0;
        self.ewma.update(self.raw)
    }

    /// The smoothed rate (units per second).
    pub fn rate(&self) -> f64 {
        self.ewma.value()
    }

    /// The last interval's unsmoothed rate (units per second).
    pub fn raw_rate(&self) -> f64 {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn history_weight_is_per_second_parameter_scaled_to_interval() {
        let h = history_weight(0.1, 50 * MS);
        // Twenty 50 ms intervals keep 0.1 of the old value.
        assert!((h.powi(20) - 0.1).abs() < 1e-9, "h = {h}");
        assert_eq!(history_weight(0.0, 50 * MS), 0.0);
        assert!((history_weight(0.5, 1_000 * MS) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn raw_rate_is_units_per_second_over_the_interval() {
        let mut e = RateEstimator::new(50 * MS, 0.0);
        e.record(1_000);
        e.record(250);
        let r = e.close(50 * MS, 50 * MS);
        assert!((r - 25_000.0).abs() < 1e-9, "r = {r}");
        // Next interval spans 100 ms.
        e.record(1_000);
        let r = e.close(150 * MS, 50 * MS);
        assert!((r - 10_000.0).abs() < 1e-9, "r = {r}");
        assert_eq!(e.pending(), 0);
    }

    #[test]
    fn ewma_converges_to_a_constant_input_and_smooths_steps() {
        let mut e = RateEstimator::new(50 * MS, 0.1);
        e.record(500);
        let first = e.close(50 * MS, 50 * MS);
        assert!((first - 10_000.0).abs() < 1e-9);
        // Step to 20_000/s: one interval later, still far below.
        e.record(1_000);
        let r = e.close(100 * MS, 50 * MS);
        assert!(r > 10_000.0 && r < 12_000.0, "r = {r}");
        // After one simulated second, 0.1 of the old gap remains.
        let mut t = 100 * MS;
        for _ in 0..19 {
            t += 50 * MS;
            e.record(1_000);
            e.close(t, 50 * MS);
        }
        let gap = 20_000.0 - e.rate();
        assert!(gap > 0.0 && gap < 1_100.0, "gap = {gap}");
    }
}
