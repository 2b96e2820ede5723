//! Flow proportional share (FPS), paper §3.2.2 and Figure 2.
//!
//! Each limiter polices with a local token bucket whose rate is its share of
//! the global limit in proportion to a *weight*, an estimate of how many
//! unbottlenecked flows its demand is worth. Every estimate interval:
//!
//! * if local demand ≥ local limit (some flow is held back here), the weight
//!   is `local limit / max sampled flow rate`: TCP's own fair share tells
//!   how many such flows the limit is feeding;
//! * otherwise (every flow is bottlenecked elsewhere) the weight is the one
//!   that would set the local limit equal to the demand:
//!   `demand · remote / (limit − demand)`;
//!
//! then `local limit = weight · limit / (remote + weight)`, where `remote`
//! is the gossiped sum of the other limiters' weights. The weight is smoothed
//! with the same EWMA as the demand estimator (the paper smooths the
//! oscillation between the two regimes this way).
//!
//! Flow rates come from a constant-size sample set: an arriving unit of a
//! flow not in the set joins it with probability `resample_probability`,
//! evicting the slowest established flow when full; flows idle for
//! `flow_expiry` leave. When the local limit falls to zero the bucket is
//! filled to its depth so that a newly arriving TCP flow can get its first
//! packets through (slow start), and the first interval with demand after
//! that is treated as bottlenecked (second regime).
//!
//! **Weights are flow counts, and are not clamped to a small constant.**
//! The second regime's division is bounded by capping the demand it uses at
//! [`MAX_SHARE`] of the limit (the weight is then at most 999 times the
//! others' sum), which is scale-free; [`FpsConfig::max_weight`] is only a
//! safety net on a published value (default 1,000,000 flows). With the
//! former absolute clamp of 1,000, 5,000 flows split 3:7 (paper §5.6)
//! gave both limiters the clamp and a 47:53 split.
//!
//! **Local random drop** ([`Fps::with_random_drop`], `fps-lrd`, the paper's
//! footnote 3): the same weights and local limit, enforced by dropping each
//! arrival with probability `(demand − local limit) / demand` (GRD's rule
//! applied to the local share) instead of by the token bucket. The bucket
//! still gives the slow-start burst while the local limit is zero.

use std::collections::BTreeMap;

use drl_core::Nanos;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;

use super::{
    AlgorithmKind, Allocator, FlowId, IntervalInput, VarBucket, Verdict, to_threshold, to_units,
};
use crate::estimator::Ewma;

/// Tuning of [`Fps`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FpsConfig {
    /// Maximum number of flows in the sample set.
    pub sample_capacity: usize,
    /// Probability that an arrival of an unsampled flow adds it to the set.
    pub resample_probability: f64,
    /// Sampled flows idle this long (ns) are dropped from the set.
    pub flow_expiry: Nanos,
    /// Upper bound on a published weight, in flows: a safety net only (the
    /// second regime's division is bounded by [`MAX_SHARE`]). Default
    /// 1,000,000; the former 1,000 split 5,000 flows 47:53 instead of 3:7.
    pub max_weight: f64,
    /// 1-second EWMA parameter for per-flow rates (`None`: the cluster's
    /// estimator setting). The paper leaves ESTIMATE(f) unspecified.
    pub flow_ewma: Option<f64>,
    /// How the rate of one unbottlenecked flow is estimated from the sample.
    pub flow_rate: FlowRateEstimator,
}

/// Estimator of "the rate of an unbottlenecked flow" (FPS-ESTIMATE line 5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FlowRateEstimator {
    /// The paper: the maximum sampled flow rate.
    Max,
    /// The mean rate of the sampled flows within `fraction` of the maximum
    /// (`rate >= fraction · max`): flows far below the fastest are taken to
    /// be bottlenecked elsewhere, the others to share the limiter. Less
    /// biased than the maximum when TCP splits a limit unevenly.
    MeanAbove(f64),
}

/// `depth` scaled by `part / whole` (all of it when `whole` is not
/// positive).
fn share_of(depth: u64, part: f64, whole: f64) -> u64 {
    if whole > 0.0 && part.is_finite() {
        (depth as f64 * (part / whole).clamp(0.0, 1.0)).ceil() as u64
    } else {
        depth
    }
}

/// Largest share of the limit the second regime (demand below the local
/// limit) asks for: it sets the weight to `d · remote / (limit − d)` with the
/// demand `d` capped at this fraction of the limit, so the division stays
/// bounded (at most 999 × `remote`) whatever the number of flows.
pub const MAX_SHARE: f64 = 0.999;

/// Per-interval EWMA history weights used by [`Fps`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Smoothing {
    /// History weight of the published weight.
    pub weight: f64,
    /// History weight of each sampled flow's rate.
    pub flow: f64,
}

impl Smoothing {
    /// The same history weight for both.
    pub fn uniform(h: f64) -> Self {
        Self { weight: h, flow: h }
    }
}

impl FpsConfig {
    /// The `fps-mean` variant: unbottlenecked rate = mean of the sampled
    /// flows within 30 % of the fastest, per-flow 1-second EWMA 0.95.
    pub fn mean_variant() -> Self {
        Self {
            flow_ewma: Some(0.95),
            flow_rate: FlowRateEstimator::MeanAbove(0.3),
            ..Self::default()
        }
    }
}

impl Default for FpsConfig {
    fn default() -> Self {
        Self {
            sample_capacity: 16,
            resample_probability: 0.1,
            flow_expiry: 3_000_000_000,
            max_weight: 1_000_000.0,
            flow_ewma: None,
            flow_rate: FlowRateEstimator::Max,
        }
    }
}

#[derive(Debug, Clone)]
struct FlowSample {
    units: u64,
    rate: Ewma,
    established: bool,
    last_active: Nanos,
}

/// Which branch of FPS-ESTIMATE the last interval took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// Demand at or above the local limit: weight from the fastest flow.
    Unbottlenecked,
    /// Demand below the local limit: weight that matches the demand.
    Bottlenecked,
    /// No local demand: zero weight, slow-start burst armed.
    Idle,
}

/// One FPS limiter.
#[derive(Debug, Clone)]
pub struct Fps {
    cfg: FpsConfig,
    limit: f64,
    depth: u64,
    /// The largest arrival seen (the idle burst is never below it).
    largest: u64,
    bucket: VarBucket,
    local_limit: f64,
    weight: Ewma,
    flow_history: f64,
    resample: u64,
    flows: BTreeMap<FlowId, FlowSample>,
    regime: Regime,
    /// Local random drop (`fps-lrd`) instead of the token bucket.
    random_drop: bool,
    /// The smoothed local demand of the last interval (units/s).
    demand: f64,
    /// Local random drop: the drop probability and its threshold.
    drop_p: f64,
    drop_threshold: u64,
}

impl Fps {
    /// An FPS limiter for a global `limit` (units/s) with bucket `depth`,
    /// starting at `initial_limit` with `initial_weight`, smoothing with
    /// the per-interval history weights `smoothing`.
    pub fn new(
        limit: u64,
        depth: u64,
        initial_limit: u64,
        initial_weight: f64,
        smoothing: Smoothing,
        cfg: FpsConfig,
        now: Nanos,
    ) -> Self {
        let mut weight = Ewma::new(smoothing.weight);
        weight.set(initial_weight.max(0.0));
        Self {
            cfg,
            limit: limit as f64,
            depth,
            largest: 0,
            bucket: {
                // The burst held at start is the share's part of the depth:
                // N limiters starting together release `depth` in all,
                // not N times it (490 full buckets of 75 kB were 294 Mbit
                // in the first second against a 50 Mbps limit).
                let mut b = VarBucket::new(depth, initial_limit.min(i64::MAX as u64) as i64, now);
                b.fill_to(now, share_of(depth, initial_limit as f64, limit as f64));
                b
            },
            local_limit: initial_limit as f64,
            weight,
            flow_history: smoothing.flow,
            resample: to_threshold(cfg.resample_probability),
            flows: BTreeMap::new(),
            regime: Regime::Unbottlenecked,
            random_drop: false,
            demand: 0.0,
            drop_p: 0.0,
            drop_threshold: 0,
        }
    }

    /// This limiter enforcing its local limit by local random drop (the
    /// paper's footnote 3, `fps-lrd`) instead of its token bucket.
    pub fn with_random_drop(mut self) -> Self {
        self.random_drop = true;
        self
    }

    /// Local random drop: the probability for the demand of the last
    /// interval and the current local limit.
    fn update_drop(&mut self) {
        self.drop_p = if self.demand > self.local_limit && self.demand > 0.0 {
            (self.demand - self.local_limit) / self.demand
        } else {
            0.0
        };
        self.drop_threshold = to_threshold(self.drop_p);
    }

    /// The smoothed weight this limiter publishes.
    pub fn weight(&self) -> f64 {
        self.weight.value()
    }

    /// The regime of the last interval.
    pub fn regime(&self) -> Regime {
        self.regime
    }

    /// Number of flows in the sample set.
    pub fn sampled_flows(&self) -> usize {
        self.flows.len()
    }

    /// The highest established sampled flow rate (units/s).
    pub fn max_flow_rate(&self) -> f64 {
        self.flows
            .values()
            .filter(|f| f.established)
            .map(|f| f.rate.value())
            .fold(0.0, f64::max)
    }

    /// The estimated rate of one unbottlenecked flow (units/s), per
    /// [`FpsConfig::flow_rate`]; 0 with no established sampled flow.
    pub fn unbottlenecked_flow_rate(&self) -> f64 {
        let max = self.max_flow_rate();
        match self.cfg.flow_rate {
            FlowRateEstimator::Max => max,
            FlowRateEstimator::MeanAbove(fraction) => {
                let cut = max * fraction.clamp(0.0, 1.0);
                let (sum, n) = self
                    .flows
                    .values()
                    .filter(|f| f.established && f.rate.value() >= cut)
                    .fold((0.0, 0u32), |(s, n), f| (s + f.rate.value(), n + 1));
                if n == 0 { max } else { sum / n as f64 }
            }
        }
    }

    fn maybe_sample(&mut self, flow: FlowId, now: Nanos, rng: &mut ChaCha8Rng) {
        if self.flows.contains_key(&flow) || self.cfg.sample_capacity == 0 {
            return;
        }
        if self.resample == 0 || (rng.next_u32() as u64) >= self.resample {
            return;
        }
        if self.flows.len() >= self.cfg.sample_capacity {
            // Evict the slowest established flow; ties to the lowest id.
            let victim = self
                .flows
                .iter()
                .filter(|(_, f)| f.established)
                .min_by(|a, b| a.1.rate.value().total_cmp(&b.1.rate.value()))
                .map(|(id, _)| *id);
            match victim {
                Some(id) => {
                    self.flows.remove(&id);
                }
                None => return,
            }
        }
        self.flows.insert(
            flow,
            FlowSample {
                units: 0,
                rate: Ewma::new(self.flow_history),
                established: false,
                last_active: now,
            },
        );
    }

    fn update_flows(&mut self, now: Nanos, elapsed: Nanos) {
        let expiry = self.cfg.flow_expiry;
        self.flows
            .retain(|_, f| now.saturating_sub(f.last_active) <= expiry);
        let secs = elapsed.max(1) as f64 / 1e9;
        for f in self.flows.values_mut() {
            let sample = f.units as f64 / secs;
            f.units = 0;
            if f.established {
                f.rate.update(sample);
            } else {
                // The first interval was partial: start measuring from here.
                f.established = true;
            }
        }
    }
}

impl Allocator for Fps {
    fn kind(&self) -> AlgorithmKind {
        if self.random_drop {
            return AlgorithmKind::FpsLrd;
        }
        match self.cfg.flow_rate {
            FlowRateEstimator::Max => AlgorithmKind::Fps,
            FlowRateEstimator::MeanAbove(_) => AlgorithmKind::FpsMean,
        }
    }

    fn on_arrival(&mut self, now: Nanos, flow: FlowId, size: u64, rng: &mut ChaCha8Rng) -> Verdict {
        self.maybe_sample(flow, now, rng);
        self.largest = self.largest.max(size);
        let pass = if self.random_drop && self.local_limit > 0.0 {
            self.drop_threshold == 0 || (rng.next_u32() as u64) >= self.drop_threshold
        } else {
            // The token bucket (with a zero local limit, the slow-start
            // burst).
            self.bucket.try_take(now, size)
        };
        if pass {
            if let Some(f) = self.flows.get_mut(&flow) {
                f.units = f.units.saturating_add(size);
                f.last_active = now;
            }
            Verdict::Forward
        } else {
            if let Some(f) = self.flows.get_mut(&flow) {
                f.last_active = now;
            }
            Verdict::Drop
        }
    }

    fn on_interval(&mut self, input: &IntervalInput) -> f64 {
        self.update_flows(input.now, input.elapsed);
        let demand = if input.local_rate.is_finite() {
            input.local_rate.max(0.0)
        } else {
            0.0
        };
        let remote = if input.remote.is_finite() {
            input.remote.max(0.0)
        } else {
            0.0
        };
        let max_flow = self.unbottlenecked_flow_rate();
        let (regime, ideal) = if demand <= 0.0 {
            (Regime::Idle, 0.0)
        } else if demand >= self.local_limit && self.local_limit > 0.0 && max_flow > 0.0 {
            (Regime::Unbottlenecked, self.local_limit / max_flow)
        } else if remote <= 0.0 {
            // Nobody else has weight: any positive weight takes it all.
            (Regime::Bottlenecked, 1.0)
        } else {
            // The weight that sets the local limit to the demand, the
            // demand capped at MAX_SHARE of the limit (bounded division).
            let d = demand.min(self.limit * MAX_SHARE);
            let w = d * remote / (self.limit - d);
            // Every flow here runs below the fair rate of an unbottlenecked
            // flow (that is what this regime means), and the fastest sampled
            // one is a lower bound on that rate: the demand is worth at most
            // `demand / fastest` unbottlenecked flows. The bound anchors the
            // weight to flow counts where `remote` is only an estimate.
            let fastest = self.max_flow_rate();
            let w = if fastest > 0.0 {
                w.min(demand / fastest)
            } else {
                w
            };
            (Regime::Bottlenecked, w)
        };
        self.regime = regime;
        let ideal = ideal.clamp(0.0, self.cfg.max_weight);
        let w = if regime == Regime::Idle {
            // No demand: release the share at once.
            self.weight.set(0.0);
            0.0
        } else {
            self.weight.update(ideal)
        };
        // The others count this limiter at `heard` when its weight lags:
        // claim the share that weight entitles it to, no more.
        let claim = match input.heard {
            Some(h) if h.is_finite() => w.min(h.max(0.0)),
            _ => w,
        };
        let total = remote + claim;
        self.local_limit = if total > 0.0 {
            claim * self.limit / total
        } else {
            0.0
        };
        if let Some(c) = input.ceiling {
            self.local_limit = self.local_limit.min(c.max(0.0));
        }
        let units = to_units(self.local_limit);
        if units == 0 && regime != Regime::Idle && input.unpublished {
            // Demand, but nothing claimed yet: no refill either; the burst
            // it was ready for is its part until the others count it
            // (refilled every interval, three idle nodes surging together
            // took 1,129 against 1,000 in their first second).
            self.local_limit = 0.0;
            self.bucket.set_rate(input.now, 0);
        } else if units == 0 {
            self.local_limit = 0.0;
            self.bucket.set_rate(input.now, 0);
            // Idle: ready for a burst that shows its demand, but only its
            // `1/N` part of the depth (every idle limiter may surge at
            // once), and never less than the largest arrival seen.
            let depth = self.depth;
            let n = input.nodes.max(1) as f64;
            let burst = share_of(depth, self.limit / n, self.limit).max(self.largest.min(depth));
            self.bucket.fill_to(input.now, burst);
        } else {
            self.bucket.set_rate(input.now, units);
        }
        self.demand = demand;
        self.update_drop();
        w
    }

    fn set_limit(&mut self, now: Nanos, limit: u64) {
        // Scale the share in force at once (a smaller global limit must
        // bind before the next interval); weights and flows carry over.
        let limit = limit.max(1) as f64;
        if self.limit > 0.0 {
            self.local_limit *= limit / self.limit;
        }
        self.limit = limit;
        self.bucket.set_rate(now, to_units(self.local_limit));
        self.update_drop();
    }

    fn local_limit(&self) -> Option<f64> {
        Some(self.local_limit)
    }

    fn drop_probability(&self) -> Option<f64> {
        self.random_drop.then_some(self.drop_p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const IV: Nanos = 50_000_000;

    fn cfg() -> FpsConfig {
        FpsConfig {
            resample_probability: 1.0,
            ..FpsConfig::default()
        }
    }

    /// Offers each flow `rates[k]` units/s over one interval ending at
    /// `start + IV`, as evenly spaced 10-unit arrivals, then closes it.
    fn run_interval(
        f: &mut Fps,
        rng: &mut ChaCha8Rng,
        start: Nanos,
        rates: &[f64],
        remote: f64,
    ) -> (u64, f64) {
        run_interval_sized(f, rng, start, rates, remote, 10)
    }

    /// As [`run_interval`], with arrivals of `size` units.
    fn run_interval_sized(
        f: &mut Fps,
        rng: &mut ChaCha8Rng,
        start: Nanos,
        rates: &[f64],
        remote: f64,
        size: u64,
    ) -> (u64, f64) {
        let mut events = Vec::new();
        let mut offered = 0u64;
        for (k, r) in rates.iter().enumerate() {
            let n = (r * IV as f64 / 1e9 / size as f64).round() as u64;
            offered += n * size;
            for j in 0..n {
                events.push((start + j * IV / n.max(1), k as FlowId));
            }
        }
        events.sort();
        let mut fwd = 0;
        for (t, flow) in events {
            if f.on_arrival(t, flow, size, rng) == Verdict::Forward {
                fwd += size;
            }
        }
        let rate = offered as f64 * 1e9 / IV as f64;
        let w = f.on_interval(&IntervalInput {
            now: start + IV,
            elapsed: IV,
            local_rate: rate,
            local_forwarded: fwd as f64 * 1e9 / IV as f64,
            raw_forwarded: fwd as f64 * 1e9 / IV as f64,
            remote,
            nodes: 2,
            heard: None,
            unpublished: false,
            ceiling: None,
        });
        (fwd, w)
    }

    /// The appendix: at the ideal allocation FPS stays there. Two limiters,
    /// L = 10⁷ units/s; limiter 1 has a1 = 3 unbottlenecked flows and one
    /// flow bottlenecked at B1 = 5·10⁵; limiter 2 has a2 = 7 and B2 = 0.
    /// U = L − B1, I1 = U·3/10 + B1, I2 = L − I1, w1 = I1·a1/(I1 − B1),
    /// w2 = 7. The unbottlenecked flows offer their share of the *current*
    /// local limit plus 0.5 % (TCP probing); the bucket is deep enough that
    /// nothing is dropped, so forwarded = offered as in the appendix model.
    #[test]
    fn appendix_fixed_point_is_stable() {
        let limit = 10_000_000.0f64;
        let (a1, b1, a2) = (3.0f64, 500_000.0f64, 7.0f64);
        let u = limit - b1;
        let i1 = u * a1 / (a1 + a2) + b1;
        let w1 = i1 * a1 / (i1 - b1);
        let w2 = a2;
        assert!((w1 * limit / (w1 + w2) - i1).abs() < 1e-6);
        let mut f = Fps::new(
            10_000_000,
            10_000_000,
            i1.round() as u64,
            w1,
            Smoothing::uniform(0.9),
            cfg(),
            0,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for k in 0..200 {
            let l = f.local_limit().unwrap();
            let share = (l - b1) / a1 * 1.005;
            let (fwd, _) = run_interval_sized(
                &mut f,
                &mut rng,
                k * IV,
                &[share, share, share, b1],
                w2,
                100,
            );
            assert!(fwd > 0);
            let l = f.local_limit().unwrap();
            assert!(
                (l - i1).abs() / i1 < 0.01,
                "interval {k}: limit {l} vs {i1}"
            );
            if k >= 2 {
                // (Sampled flows need one full interval before they count.)
                assert_eq!(f.regime(), Regime::Unbottlenecked, "interval {k}");
            }
        }
        assert_eq!(f.sampled_flows(), 4);
        // The published weight is the appendix's w1 (within the probe bias).
        assert!((f.weight() - w1).abs() / w1 < 0.01, "w = {}", f.weight());
    }

    /// Closed loop over two limiters with an idealised TCP model (each
    /// unbottlenecked flow gets `(l_i − B_i)/a_i`): from an even split FPS
    /// moves to the max-min fair allocation.
    #[test]
    fn two_limiters_converge_to_max_min_shares() {
        let limit = 10_000.0;
        let a = [3.0, 7.0];
        let mut nodes: Vec<Fps> = (0..2)
            .map(|_| Fps::new(10_000, 1_000, 5_000, 1.0, Smoothing::uniform(0.5), cfg(), 0))
            .collect();
        let mut rngs: Vec<ChaCha8Rng> = (0..2).map(ChaCha8Rng::seed_from_u64).collect();
        let mut weights = [1.0, 1.0];
        for k in 0..400 {
            let mut next = [0.0; 2];
            for i in 0..2 {
                let l = nodes[i].local_limit().unwrap();
                let per_flow = l / a[i] * 1.05;
                let rates = vec![per_flow; a[i] as usize];
                let (_, w) =
                    run_interval(&mut nodes[i], &mut rngs[i], k * IV, &rates, weights[1 - i]);
                next[i] = w;
            }
            weights = next;
        }
        let l0 = nodes[0].local_limit().unwrap();
        let l1 = nodes[1].local_limit().unwrap();
        assert!((l0 - 3_000.0).abs() < 150.0, "l0 = {l0}");
        assert!((l1 - 7_000.0).abs() < 150.0, "l1 = {l1}");
        assert!((l0 + l1 - limit).abs() < 100.0);
    }

    /// Second regime: demand below the limit sets the limit to the demand.
    #[test]
    fn bottlenecked_demand_gets_exactly_its_rate() {
        let mut f = Fps::new(10_000, 1_000, 5_000, 5.0, Smoothing::uniform(0.0), cfg(), 0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        run_interval(&mut f, &mut rng, 0, &[2_000.0], 5.0);
        assert_eq!(f.regime(), Regime::Bottlenecked);
        let l = f.local_limit().unwrap();
        assert!((l - 2_000.0).abs() < 1e-6, "limit {l}");
        // w = 2000·5/(10000 − 2000) = 1.25
        assert!((f.weight() - 1.25).abs() < 1e-9);
    }

    /// With no traffic the limit drops to zero, the bucket keeps a full
    /// burst for a newcomer, and the newcomer's first interval counts as
    /// bottlenecked demand.
    #[test]
    fn slow_start_burst_when_the_local_limit_is_zero() {
        let mut f = Fps::new(10_000, 300, 5_000, 1.0, Smoothing::uniform(0.0), cfg(), 0);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        run_interval(&mut f, &mut rng, 0, &[], 7.0);
        assert_eq!(f.regime(), Regime::Idle);
        assert_eq!(f.local_limit(), Some(0.0));
        assert_eq!(f.weight(), 0.0);
        // A flow arrives: exactly the burst gets through, this limiter's
        // half (of two) of the 300-unit depth: idle limiters surging
        // together release the depth once, not once each.
        let (fwd, _) = run_interval(&mut f, &mut rng, IV, &[20_000.0], 7.0);
        assert_eq!(fwd, 150);
        // Its demand (20000/s offered) made it bottlenecked, not idle.
        assert_eq!(f.regime(), Regime::Bottlenecked);
        assert!(f.local_limit().unwrap() > 0.0);
    }

    /// Issue 15, defect 3: a weight is a flow count, not clamped at 1,000.
    /// The others weigh 3,500 flows and this limiter's demand is 30 % of
    /// the limit: its weight is 1,500 and its local limit 30 % (the former
    /// clamp made it 1,000, i.e. 22 %; with both weights clamped the two
    /// limiters split 50:50).
    #[test]
    fn weights_count_thousands_of_flows() {
        let mut f = Fps::new(10_000, 1_000, 5_000, 5.0, Smoothing::uniform(0.0), cfg(), 0);
        f.on_interval(&IntervalInput {
            now: IV,
            elapsed: IV,
            local_rate: 3_000.0,
            local_forwarded: 3_000.0,
            raw_forwarded: 3_000.0,
            remote: 3_500.0,
            nodes: 2,
            heard: None,
            unpublished: false,
            ceiling: None,
        });
        assert_eq!(f.regime(), Regime::Bottlenecked);
        assert!((f.weight() - 1_500.0).abs() < 1e-6, "weight {}", f.weight());
        let l = f.local_limit().unwrap();
        assert!((l - 3_000.0).abs() < 1e-6, "local limit {l}");
    }

    /// The second regime near the whole limit: the division is bounded by
    /// MAX_SHARE, relative to the others' weight (no absolute clamp).
    #[test]
    fn second_regime_is_bounded_relative_to_the_others() {
        let mut f = Fps::new(10_000, 1_000, 5_000, 5.0, Smoothing::uniform(0.0), cfg(), 0);
        f.on_interval(&IntervalInput {
            now: IV,
            elapsed: IV,
            local_rate: 20_000.0,
            local_forwarded: 0.0,
            raw_forwarded: 0.0,
            remote: 200.0,
            nodes: 2,
            heard: None,
            unpublished: false,
            ceiling: None,
        });
        // No sampled flow: second regime with demand above the limit.
        assert_eq!(f.regime(), Regime::Bottlenecked);
        let w = f.weight();
        assert!(
            (w - 200.0 * MAX_SHARE / (1.0 - MAX_SHARE)).abs() < 1e-6,
            "w = {w}"
        );
        let l = f.local_limit().unwrap();
        assert!((l - 10_000.0 * MAX_SHARE).abs() < 1e-6, "local limit {l}");
    }

    /// Issue 15 (Figure 6 with push-sum): the second regime's weight is at
    /// most the demand over the fastest sampled flow, however large the
    /// estimate of the others is. Two flows of 2,000 and 400 units/s are
    /// worth at most 1.2 flows of 2,000; with the others estimated at
    /// 5,000 (the exact formula asks 1,579) the weight is 1.2. Without
    /// the bound an error in a push-sum estimate went into the weight, from
    /// it into the others' estimates, and weights reached 10^5-10^6.
    #[test]
    fn second_regime_weight_is_at_most_the_demand_in_fastest_flows() {
        let mut f = Fps::new(10_000, 1_000, 5_000, 5.0, Smoothing::uniform(0.0), cfg(), 0);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // The first interval samples both flows, the second measures them.
        run_interval(&mut f, &mut rng, 0, &[2_000.0, 400.0], 0.5);
        run_interval(&mut f, &mut rng, IV, &[2_000.0, 400.0], 0.5);
        assert!(f.local_limit().unwrap() > 2_400.0);
        run_interval(&mut f, &mut rng, 2 * IV, &[2_000.0, 400.0], 5_000.0);
        assert_eq!(f.regime(), Regime::Bottlenecked);
        let fastest = f.max_flow_rate();
        assert!((fastest - 2_000.0).abs() < 1e-6, "fastest {fastest}");
        let w = f.weight();
        assert!((w - 1.2).abs() < 1e-9, "weight {w}");
        assert!(2_400.0 * 5_000.0 / 7_600.0 > 1_000.0 * w);
    }

    /// `fps-lrd`: the same local limit, enforced by dropping the excess
    /// fraction of the demand at random instead of by the bucket.
    #[test]
    fn local_random_drop_forwards_the_local_limit_on_average() {
        let mut f =
            Fps::new(10_000, 100, 4_000, 1.0, Smoothing::uniform(0.0), cfg(), 0).with_random_drop();
        assert_eq!(f.kind(), AlgorithmKind::FpsLrd);
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        // One flow offering 8,000/s; the other limiter's weight is 1, so
        // the local limit settles at half the limit.
        let mut fwd = 0;
        for k in 0..40 {
            let (x, _) = run_interval_sized(&mut f, &mut rng, k * IV, &[8_000.0], 1.0, 1);
            if k >= 20 {
                fwd += x;
            }
        }
        let limit = f.local_limit().unwrap();
        assert!((limit - 5_000.0).abs() < 500.0, "local limit {limit}");
        let p = f.drop_probability().unwrap();
        assert!((p - 3.0 / 8.0).abs() < 0.05, "p = {p}");
        let rate = fwd as f64 / (20.0 * IV as f64 / 1e9);
        assert!((rate - 5_000.0).abs() < 500.0, "forwarded {rate}/s");
    }

    #[test]
    fn sample_set_is_bounded_and_evicts_the_slowest() {
        let c = FpsConfig {
            sample_capacity: 2,
            resample_probability: 1.0,
            ..FpsConfig::default()
        };
        let mut f = Fps::new(
            1_000_000,
            1_000_000,
            1_000_000,
            1.0,
            Smoothing::uniform(0.0),
            c,
            0,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        run_interval(&mut f, &mut rng, 0, &[1_000.0, 5_000.0], 0.0);
        run_interval(&mut f, &mut rng, IV, &[1_000.0, 5_000.0], 0.0);
        assert_eq!(f.sampled_flows(), 2);
        // Flow 2 arrives: flow 0 (slowest) is evicted.
        run_interval(&mut f, &mut rng, 2 * IV, &[0.0, 5_000.0, 9_000.0], 0.0);
        run_interval(&mut f, &mut rng, 3 * IV, &[0.0, 5_000.0, 9_000.0], 0.0);
        assert_eq!(f.sampled_flows(), 2);
        assert!((f.max_flow_rate() - 9_000.0).abs() < 1.0);
    }
}
