//! One limiter of a cluster, as a sans-IO state machine.
//!
//! A [`Limiter`] combines the demand estimator, push-sum gossip and an
//! [`Allocator`]. The shell (the simulator, or the service's node runtime)
//! drives it with three calls and never lets it read a clock:
//!
//! * [`Limiter::on_arrival`] for every unit of traffic: forward or drop;
//! * [`Limiter::on_tick`] at every estimate interval boundary
//!   ([`Limiter::next_tick`]): closes the interval, reallocates, and returns
//!   the gossip messages to send;
//! * [`Limiter::on_message`] for every gossip message received.

use drl_core::Nanos;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::alloc::ctb::Ctb;
use crate::alloc::fps::{Fps, FpsConfig, Smoothing};
use crate::alloc::grd::{Grd, GrdSmooth, GrdSmoothConfig};
use crate::alloc::gtb::Gtb;
use crate::alloc::{AlgorithmKind, Allocator, FlowId, IntervalInput, Verdict};
use crate::estimator::{RateEstimator, history_weight};
use crate::gossip::{GossipMsg, LossCompensation, NodeId, PushSum};

/// Parameters shared by all limiters of a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterConfig {
    /// Allocation algorithm.
    pub algorithm: AlgorithmKind,
    /// Global limit, units per second.
    pub limit: u64,
    /// Token bucket depth, units.
    pub depth: u64,
    /// Estimate interval, ns.
    pub interval: Nanos,
    /// 1-second EWMA parameter of the estimators (see [`crate::estimator`]).
    pub ewma: f64,
    /// Number of limiters in the cluster.
    pub nodes: u32,
    /// Gossip branching factor (peers contacted per interval).
    pub branching: u32,
    /// How gossip receivers compensate for lost messages.
    pub compensation: LossCompensation,
    /// FPS tuning (used by `fps`).
    pub fps: FpsConfig,
    /// FPS tuning used by `fps-mean`.
    pub fps_mean: FpsConfig,
    /// `grd-smooth` tuning.
    pub grd_smooth: GrdSmoothConfig,
}

impl LimiterConfig {
    /// The paper's baseline (§5.1) in bytes: 10 Mbps, 75,000-byte buckets,
    /// 50 ms estimate interval, EWMA 0.1, for `nodes` limiters.
    pub fn paper_baseline(algorithm: AlgorithmKind, nodes: u32) -> Self {
        Self {
            algorithm,
            limit: 10_000_000 / 8,
            depth: 75_000,
            interval: 50_000_000,
            ewma: 0.1,
            nodes,
            branching: 1,
            compensation: LossCompensation::Cumulative,
            fps: FpsConfig::default(),
            fps_mean: FpsConfig::mean_variant(),
            grd_smooth: GrdSmoothConfig::default(),
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.limit == 0 || self.limit > i64::MAX as u64 {
            return Err(ConfigError::Limit(self.limit));
        }
        if self.depth == 0 || self.depth > (i64::MAX as u64) / 1_000_000_000 {
            return Err(ConfigError::Depth(self.depth));
        }
        if self.interval == 0 {
            return Err(ConfigError::Interval);
        }
        if !(0.0..1.0).contains(&self.ewma) {
            return Err(ConfigError::Ewma(self.ewma));
        }
        if self.nodes == 0 {
            return Err(ConfigError::Nodes);
        }
        for f in [&self.fps, &self.fps_mean] {
            let p = f.resample_probability;
            if !(0.0..=1.0).contains(&p) {
                return Err(ConfigError::Probability(p));
            }
        }
        Ok(())
    }
}

/// A rejected [`LimiterConfig`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The limit must be positive.
    #[error("limit must be in 1..=i64::MAX units/s, got {0}")]
    Limit(u64),
    /// The depth must be positive and not overflow nano-units.
    #[error("bucket depth must be in 1..=9.2e9 units, got {0}")]
    Depth(u64),
    /// The estimate interval must be positive.
    #[error("estimate interval must be positive")]
    Interval,
    /// The EWMA parameter must be in [0, 1).
    #[error("EWMA parameter must be in [0, 1), got {0}")]
    Ewma(f64),
    /// At least one limiter.
    #[error("a cluster needs at least one limiter")]
    Nodes,
    /// A probability outside [0, 1].
    #[error("probability must be in [0, 1], got {0}")]
    Probability(f64),
    /// A node id outside the cluster.
    #[error("node id {id} out of range for {nodes} nodes")]
    NodeId {
        /// The id given.
        id: NodeId,
        /// The cluster size.
        nodes: u32,
    },
}

/// A gossip message to deliver to another limiter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outgoing {
    /// Destination limiter.
    pub to: NodeId,
    /// The message.
    pub msg: GossipMsg,
}

/// What a limiter reports about itself (floats: for reports only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// Smoothed local arrival rate (units/s).
    pub local_rate: f64,
    /// Smoothed local forwarded rate (units/s).
    pub local_forwarded: f64,
    /// The value this limiter publishes (rate or weight).
    pub published: f64,
    /// Its estimate of the sum of the others' published values.
    pub remote: f64,
    /// Local rate limit, if the allocator has one.
    pub local_limit: Option<f64>,
    /// Drop probability, if the allocator has one.
    pub drop_probability: Option<f64>,
}

/// One limiter: estimator + gossip + allocator.
#[derive(Debug)]
pub struct Limiter {
    id: NodeId,
    cfg: LimiterConfig,
    alloc: Box<dyn Allocator>,
    ingress: RateEstimator,
    forwarded: RateEstimator,
    gossip: PushSum,
    rng: ChaCha8Rng,
    next_tick: Nanos,
    published: f64,
    remote: f64,
}

impl Limiter {
    /// Limiter `id` of `cfg.nodes`, created at `now`, with its random stream
    /// seeded from `seed`.
    pub fn new(id: NodeId, cfg: LimiterConfig, seed: u64, now: Nanos) -> Result<Self, ConfigError> {
        cfg.validate()?;
        if id >= cfg.nodes {
            return Err(ConfigError::NodeId {
                id,
                nodes: cfg.nodes,
            });
        }
        let n = cfg.nodes as u64;
        let alloc: Box<dyn Allocator> = match cfg.algorithm {
            AlgorithmKind::Ctb => Box::new(Ctb::new(cfg.limit, cfg.depth, now)),
            AlgorithmKind::Crd => Box::new(Grd::new(cfg.limit, true)),
            AlgorithmKind::Gtb => Box::new(Gtb::new(cfg.limit, cfg.depth, now)),
            AlgorithmKind::Grd => Box::new(Grd::new(cfg.limit, false)),
            AlgorithmKind::GrdSmooth => Box::new(GrdSmooth::new(cfg.limit, cfg.grd_smooth)),
            AlgorithmKind::Fps | AlgorithmKind::FpsMean => {
                let f = if cfg.algorithm == AlgorithmKind::Fps {
                    cfg.fps
                } else {
                    cfg.fps_mean
                };
                Box::new(Fps::new(
                    cfg.limit,
                    cfg.depth,
                    cfg.limit / n,
                    1.0,
                    Smoothing {
                        weight: history_weight(cfg.ewma, cfg.interval),
                        flow: history_weight(f.flow_ewma.unwrap_or(cfg.ewma), cfg.interval),
                    },
                    f,
                    now,
                ))
            }
        };
        Ok(Self {
            id,
            ingress: RateEstimator::new(cfg.interval, cfg.ewma),
            forwarded: RateEstimator::new(cfg.interval, cfg.ewma),
            gossip: PushSum::new(id, cfg.nodes, cfg.branching, cfg.compensation),
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_tick: now.saturating_add(cfg.interval),
            published: 0.0,
            remote: 0.0,
            alloc,
            cfg,
        })
    }

    /// This limiter's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The configuration.
    pub fn config(&self) -> &LimiterConfig {
        &self.cfg
    }

    /// When [`Limiter::on_tick`] is next due.
    pub fn next_tick(&self) -> Nanos {
        self.next_tick
    }

    /// Decides an arrival of `size` units from `flow` at `now`.
    pub fn on_arrival(&mut self, now: Nanos, flow: FlowId, size: u64) -> Verdict {
        self.ingress.record(size);
        let v = self.alloc.on_arrival(now, flow, size, &mut self.rng);
        if v == Verdict::Forward {
            self.forwarded.record(size);
        }
        v
    }

    /// Ends the estimate interval at `now`: updates the estimates and the
    /// allocation, and returns the gossip messages to send.
    pub fn on_tick(&mut self, now: Nanos) -> Vec<Outgoing> {
        let interval = self.cfg.interval;
        let elapsed = now
            .saturating_sub(self.next_tick.saturating_sub(interval))
            .max(1);
        let local_rate = self.ingress.close(now, interval);
        let local_forwarded = self.forwarded.close(now, interval);
        self.remote = self.gossip.remote_estimate();
        let input = IntervalInput {
            now,
            elapsed,
            local_rate,
            local_forwarded,
            raw_forwarded: self.forwarded.raw_rate(),
            remote: self.remote,
            nodes: self.cfg.nodes,
        };
        self.published = self.alloc.on_interval(&input);
        self.gossip.set_local(self.published);
        self.next_tick = now.saturating_add(interval);
        self.gossip
            .round(&mut self.rng)
            .into_iter()
            .map(|(to, msg)| Outgoing { to, msg })
            .collect()
    }

    /// Applies a gossip message from limiter `from`.
    pub fn on_message(&mut self, _now: Nanos, from: NodeId, msg: GossipMsg) {
        if from < self.cfg.nodes && from != self.id {
            self.gossip.receive(from, msg);
        }
    }

    /// A report of the current state.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            local_rate: self.ingress.rate(),
            local_forwarded: self.forwarded.rate(),
            published: self.published,
            remote: self.remote,
            local_limit: self.alloc.local_limit(),
            drop_probability: self.alloc.drop_probability(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn rejects_bad_configs() {
        let mut c = LimiterConfig::paper_baseline(AlgorithmKind::Fps, 2);
        assert!(Limiter::new(2, c.clone(), 0, 0).is_err());
        c.limit = 0;
        assert_eq!(
            Limiter::new(0, c.clone(), 0, 0).unwrap_err(),
            ConfigError::Limit(0)
        );
        c.limit = 1;
        c.ewma = 1.5;
        assert!(matches!(
            Limiter::new(0, c, 0, 0),
            Err(ConfigError::Ewma(_))
        ));
    }

    /// Two GRD limiters exchanging gossip learn the global demand and drop
    /// the excess share at both.
    #[test]
    fn two_grd_limiters_share_demand_through_gossip() {
        let cfg = LimiterConfig {
            ewma: 0.0,
            ..LimiterConfig::paper_baseline(AlgorithmKind::Grd, 2)
        };
        let limit = cfg.limit;
        let mut nodes: Vec<Limiter> = (0..2)
            .map(|i| Limiter::new(i, cfg.clone(), i as u64, 0).unwrap())
            .collect();
        // Offer 1.0x and 1.0x the limit: 2x overall, p should reach 1/2.
        let per_ms = limit / 1000;
        for ms in 0..2_000u64 {
            let now = ms * MS;
            for n in nodes.iter_mut() {
                n.on_arrival(now, 1, per_ms);
            }
            if ms % 50 == 49 {
                let mut mail = Vec::new();
                for n in nodes.iter_mut() {
                    let from = n.id();
                    for o in n.on_tick(now + MS) {
                        mail.push((from, o));
                    }
                }
                for (from, o) in mail {
                    nodes[o.to as usize].on_message(now, from, o.msg);
                }
            }
        }
        for n in &nodes {
            let s = n.snapshot();
            let p = s.drop_probability.unwrap();
            assert!((p - 0.5).abs() < 0.02, "p = {p}");
            assert!((s.remote - limit as f64).abs() / (limit as f64) < 0.05);
        }
    }

    #[test]
    fn ticks_are_scheduled_every_interval() {
        let cfg = LimiterConfig::paper_baseline(AlgorithmKind::Ctb, 1);
        let mut l = Limiter::new(0, cfg, 9, 5).unwrap();
        assert_eq!(l.next_tick(), 5 + 50 * MS);
        assert!(l.on_tick(50 * MS + 5).is_empty());
        assert_eq!(l.next_tick(), 100 * MS + 5);
    }
}
