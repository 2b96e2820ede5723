//! Allocators: how a limiter turns local traffic and gossiped global state
//! into forward/drop decisions.
//!
//! * [`ctb`]: central token bucket, the reference (one limiter sees all
//!   traffic);
//! * [`gtb`]: global token bucket (each limiter refills at the global limit
//!   and drains at the other limiters' reported arrival rate);
//! * [`grd`]: global random drop as the paper writes it (Figure 1), and
//!   `grd-smooth`, our variant with a feedback-controlled drop probability;
//! * [`fps`]: flow proportional share (Figure 2), with flow sampling, its two
//!   regimes and the slow-start burst; `fps-mean` is FPS with a less
//!   biased estimate of an unbottlenecked flow's rate; `fps-lrd` is FPS
//!   enforcing its share by local random drop instead of a token bucket
//!   (the paper's footnote 3);
//! * [`static_share`]: static 1/N, the paper's §5.7 baseline (a token
//!   bucket at `limit / N` per limiter, no coordination).
//!
//! All allocators count abstract *units* (bytes, packets or request cost)
//! and decide with integers; the floating-point work happens once per
//! estimate interval in [`Allocator::on_interval`].

pub mod bucket;
pub mod ctb;
pub mod dither;
pub mod fps;
pub mod grd;
pub mod gtb;
pub mod static_share;

use std::fmt;
use std::str::FromStr;

use drl_core::Nanos;
use rand_chacha::ChaCha8Rng;

pub use bucket::{BucketMark, VarBucket};

/// Identifies a flow (a TCP connection in the simulator, a client id in the
/// service).
pub type FlowId = u64;

/// What to do with an arriving unit of traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Let it through.
    Forward,
    /// Police it.
    Drop,
}

/// What an allocator learns at the end of each estimate interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalInput {
    /// End of the interval.
    pub now: Nanos,
    /// Length of the interval that just ended (ns).
    pub elapsed: Nanos,
    /// Smoothed local arrival (ingress) rate, units per second.
    pub local_rate: f64,
    /// Smoothed local forwarded rate, units per second.
    pub local_forwarded: f64,
    /// Unsmoothed local forwarded rate over the interval that just ended.
    pub raw_forwarded: f64,
    /// Estimate of the sum of the other limiters' published values (rates
    /// for GTB and GRD, weights for FPS, forwarded rates for `grd-smooth`).
    pub remote: f64,
    /// Number of limiters in the cluster.
    pub nodes: u32,
    /// What the other limiters hold for this one's published value, when
    /// it lags the latest (`None`: they hold the latest, as with a few
    /// nodes or push-sum). The others' sums count this limiter at `heard`,
    /// so they hand out the limit as if its value were `heard`; an
    /// allocator must claim no more than `heard` entitles it to, or the
    /// cluster admits the difference twice (peer table at scale,
    /// `cloud_control::key::KeyState`).
    pub heard: Option<f64>,
    /// This limiter left idle and has not published its value since: the
    /// others count it at nothing. FPS then holds the burst it was ready
    /// for instead of refilling it every interval (every idle limiter may
    /// be surging at once).
    pub unpublished: bool,
    /// Most units per second this limiter may admit this interval, if
    /// bounded: a Flow Updating node whose estimate is settling after a
    /// membership change keeps to what it was entitled to before it
    /// (`cloud_control::key::KeyState`). GRD and the FPS family honour it.
    pub ceiling: Option<f64>,
}

/// A per-limiter allocation policy.
pub trait Allocator: fmt::Debug + Send {
    /// Which algorithm this is.
    fn kind(&self) -> AlgorithmKind;
    /// Decides one arrival of `size` units from `flow` at `now`.
    fn on_arrival(&mut self, now: Nanos, flow: FlowId, size: u64, rng: &mut ChaCha8Rng) -> Verdict;
    /// Runs once per estimate interval; returns the value this limiter
    /// publishes to the others through gossip.
    fn on_interval(&mut self, input: &IntervalInput) -> f64;
    /// The current local rate limit in units per second, for allocators
    /// that have one (reports only).
    fn local_limit(&self) -> Option<f64>;
    /// The current drop probability, for allocators that have one.
    fn drop_probability(&self) -> Option<f64> {
        None
    }
    /// Changes the global limit (units/s, at least 1) at `now`, keeping
    /// everything learned so far (drop probability, weights, flow samples,
    /// tokens). A Cloud Control node calls it when the paper's 1/N rule
    /// moves the limit in force (a peer lost or back): rebuilding the
    /// allocator instead would forget its state, and a fresh GRD admits
    /// everything until its next interval.
    fn set_limit(&mut self, now: Nanos, limit: u64);
    /// Consumes `size` units from `flow` at `now` whatever the state (a
    /// cost known afterwards, docs/semantics.md): a token bucket goes into
    /// debt and admits nothing until it is repaid. The default consumes
    /// nothing (GRD: the units count as demand, which the key's interval
    /// step measures).
    fn on_charge(&mut self, now: Nanos, flow: FlowId, size: u64) {
        let _ = (now, flow, size);
    }
    /// True while a charge's debt is not repaid at `now` (then nothing is
    /// admitted). The default has no debt.
    fn in_debt(&mut self, now: Nanos) -> bool {
        let _ = now;
        false
    }
    /// True when an arrival of `size` units at `now` would surely be
    /// forwarded; changes nothing and draws nothing (a *check*). A token
    /// bucket answers whether it holds `size`; random drop answers true
    /// only while its drop probability is 0 (a draw could drop it
    /// otherwise: conservative). For `size` 0 (a query): true unless a
    /// charge's debt is owed.
    fn admits(&self, now: Nanos, size: u64) -> bool;
    /// The token bucket that decides arrivals now, if any: a reservation
    /// it admitted can be marked and refunded into it
    /// ([`VarBucket::refund`]). `None` for random drop (GRD, and `fps-lrd`
    /// while its local limit is positive): nothing to give back into.
    fn bucket(&mut self) -> Option<&mut VarBucket> {
        None
    }
}

/// The allocation algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlgorithmKind {
    /// Central token bucket (reference; one limiter for all traffic).
    Ctb,
    /// Central random drop: GRD with a single limiter (paper, Figure 5).
    Crd,
    /// Global token bucket.
    Gtb,
    /// Global random drop, as in the paper's Figure 1.
    Grd,
    /// Global random drop with a feedback-controlled drop probability.
    GrdSmooth,
    /// Flow proportional share, as in the paper's Figure 2.
    Fps,
    /// FPS with the mean of the sampled flows within 30 % of the fastest
    /// (1-second EWMA 0.95 per flow) as the unbottlenecked rate instead of
    /// the maximum; see [`fps::FlowRateEstimator`]. An experiment, not an
    /// improvement: in the baseline it is less fair than the paper's FPS
    /// (EXPERIMENTS.md).
    FpsMean,
    /// Static 1/N: each of the `N` limiters a token bucket at `limit / N`,
    /// no coordination (the paper's §5.7 baseline, Figure 9a).
    Static,
    /// FPS enforcing its local share by random drop (drop probability
    /// `(demand − local limit) / demand`, as GRD does globally) instead of a
    /// token bucket: the paper's footnote 3, an experiment
    /// (EXPERIMENTS.md).
    FpsLrd,
}

impl AlgorithmKind {
    /// All kinds, in report order.
    /// (Appended kinds keep the wire codes of the others: a payload's
    /// algorithm code is 1 + the index here.)
    pub const ALL: [AlgorithmKind; 9] = [
        AlgorithmKind::Ctb,
        AlgorithmKind::Crd,
        AlgorithmKind::Gtb,
        AlgorithmKind::Grd,
        AlgorithmKind::GrdSmooth,
        AlgorithmKind::Fps,
        AlgorithmKind::FpsMean,
        AlgorithmKind::Static,
        AlgorithmKind::FpsLrd,
    ];

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::Ctb => "ctb",
            AlgorithmKind::Crd => "crd",
            AlgorithmKind::Gtb => "gtb",
            AlgorithmKind::Grd => "grd",
            AlgorithmKind::GrdSmooth => "grd-smooth",
            AlgorithmKind::Fps => "fps",
            AlgorithmKind::FpsMean => "fps-mean",
            AlgorithmKind::Static => "static",
            AlgorithmKind::FpsLrd => "fps-lrd",
        }
    }

    /// True for the centralized references (one limiter sees all traffic).
    pub fn is_central(self) -> bool {
        matches!(self, AlgorithmKind::Ctb | AlgorithmKind::Crd)
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of [`AlgorithmKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown allocator {0:?} (expected one of ctb, crd, gtb, grd, grd-smooth, fps, fps-mean, static, fps-lrd)"
)]
pub struct UnknownAllocator(pub String);

impl FromStr for AlgorithmKind {
    type Err = UnknownAllocator;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AlgorithmKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownAllocator(s.to_string()))
    }
}

/// Converts a float rate to an integer rate for a decider (non-finite or
/// negative values become 0; huge values saturate).
pub(crate) fn to_units(rate: f64) -> i64 {
    if rate.is_finite() && rate > 0.0 {
        if rate >= i64::MAX as f64 {
            i64::MAX
        } else {
            rate.round() as i64
        }
    } else {
        0
    }
}

/// A probability as a 32-bit fixed-point threshold: drop when a uniform
/// `u32` is below it. `1.0` maps to `u32::MAX + 1` (always).
pub(crate) fn to_threshold(p: f64) -> u64 {
    if !p.is_finite() || p <= 0.0 {
        0
    } else if p >= 1.0 {
        1 << 32
    } else {
        (p * (1u64 << 32) as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in AlgorithmKind::ALL {
            assert_eq!(k.name().parse::<AlgorithmKind>(), Ok(k));
        }
        assert!("tokenbucket".parse::<AlgorithmKind>().is_err());
    }

    #[test]
    fn conversions_are_total() {
        assert_eq!(to_units(f64::NAN), 0);
        assert_eq!(to_units(-3.0), 0);
        assert_eq!(to_units(2.6), 3);
        assert_eq!(to_units(1e30), i64::MAX);
        assert_eq!(to_threshold(0.0), 0);
        assert_eq!(to_threshold(1.5), 1 << 32);
        assert_eq!(to_threshold(0.5), 1 << 31);
    }
}
