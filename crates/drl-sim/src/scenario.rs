//! What to simulate: the parameters of one run.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::fps::FpsConfig;
use drl_cluster::alloc::grd::GrdSmoothConfig;
use drl_cluster::gossip::LossCompensation;
use drl_cluster::limiter::LimiterConfig;
use drl_core::Nanos;

use crate::tcp::TcpConfig;

/// Nanoseconds per millisecond.
pub const MS: Nanos = 1_000_000;
/// Nanoseconds per second.
pub const SEC: Nanos = 1_000_000_000;

/// A rejected scenario.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScenarioError {
    /// Needs at least one limiter with at least one flow.
    #[error("need at least one limiter and one flow (flows per limiter: {0:?})")]
    NoFlows(Vec<u32>),
    /// Too many flows for the simulator's bounds.
    #[error("too many flows: {0} (at most 100000)")]
    TooManyFlows(u64),
    /// A probability outside [0, 1).
    #[error("{what} must be in [0, 1), got {value}")]
    Probability {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: f64,
    },
    /// A parameter that must be positive.
    #[error("{0} must be positive")]
    NotPositive(&'static str),
    /// The warm-up is not shorter than the run.
    #[error("warm-up ({warmup} ns) must be shorter than the duration ({duration} ns)")]
    Warmup {
        /// Warm-up.
        warmup: Nanos,
        /// Duration.
        duration: Nanos,
    },
    /// The limiter configuration is invalid.
    #[error(transparent)]
    Limiter(#[from] drl_cluster::limiter::ConfigError),
}

/// One simulated experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The allocator at every limiter.
    pub algorithm: AlgorithmKind,
    /// Long-lived TCP flows entering at each limiter (its length is the
    /// number of limiters).
    pub flows_per_limiter: Vec<u32>,
    /// Global limit, bits per second.
    pub limit_bps: u64,
    /// Token bucket depth, bytes.
    pub depth_bytes: u64,
    /// Estimate interval.
    pub estimate_interval: Nanos,
    /// 1-second EWMA parameter.
    pub ewma: f64,
    /// Gossip branching factor.
    pub branching: u32,
    /// Probability that a gossip message is lost.
    pub gossip_loss: f64,
    /// How gossip compensates for lost messages.
    pub compensation: LossCompensation,
    /// Round-trip time of every flow (source to sink and back).
    pub flow_rtt: Nanos,
    /// Round-trip time between limiters (gossip one-way delay is half).
    pub limiter_rtt: Nanos,
    /// Simulated time.
    pub duration: Nanos,
    /// Start of the measurement window (means, goodput, fairness).
    pub warmup: Nanos,
    /// Run seed.
    pub seed: u64,
    /// Capacity of every link, bits per second.
    pub link_bps: u64,
    /// Size of a data packet on the wire, bytes.
    pub packet_bytes: u32,
    /// Flows start uniformly at random in `[0, start_spread)`.
    pub start_spread: Nanos,
    /// Per-packet host jitter, uniform in `[0, jitter)`.
    pub jitter: Nanos,
    /// Random loss probability on the data path (before the limiter).
    pub data_loss: f64,
    /// Width of the bins of the rate time series.
    pub bin: Nanos,
    /// TCP sender parameters.
    pub tcp: TcpConfig,
    /// FPS tuning (`fps`).
    pub fps: FpsConfig,
    /// FPS tuning (`fps-mean`).
    pub fps_mean: FpsConfig,
    /// `grd-smooth` tuning.
    pub grd_smooth: GrdSmoothConfig,
}

impl Scenario {
    /// The paper's baseline (§5.1): two limiters, 3 and 7 flows, 10 Mbps,
    /// 75,000-byte buckets, 40 ms flow and inter-limiter RTTs, 50 ms
    /// estimate interval, EWMA 0.1, 60 s, measured from t = 10 s.
    pub fn paper_baseline(algorithm: AlgorithmKind) -> Self {
        Self {
            algorithm,
            flows_per_limiter: vec![3, 7],
            limit_bps: 10_000_000,
            depth_bytes: 75_000,
            estimate_interval: 50 * MS,
            ewma: 0.1,
            branching: 1,
            gossip_loss: 0.0,
            compensation: LossCompensation::Cumulative,
            flow_rtt: 40 * MS,
            limiter_rtt: 40 * MS,
            duration: 60 * SEC,
            warmup: 10 * SEC,
            seed: 1,
            link_bps: 100_000_000,
            packet_bytes: 1_500,
            start_spread: 500 * MS,
            jitter: 50_000,
            data_loss: 0.0,
            bin: 10 * MS,
            tcp: TcpConfig::default(),
            fps: FpsConfig::default(),
            fps_mean: FpsConfig::mean_variant(),
            grd_smooth: GrdSmoothConfig::default(),
        }
    }

    /// Number of limiters.
    pub fn limiters(&self) -> usize {
        self.flows_per_limiter.len()
    }

    /// Total number of flows.
    pub fn total_flows(&self) -> u64 {
        self.flows_per_limiter.iter().map(|&f| f as u64).sum()
    }

    /// The limiter configuration (in bytes) this scenario implies.
    pub fn limiter_config(&self) -> LimiterConfig {
        let nodes = if self.algorithm.is_central() {
            1
        } else {
            self.limiters() as u32
        };
        LimiterConfig {
            algorithm: self.algorithm,
            limit: self.limit_bps / 8,
            depth: self.depth_bytes,
            interval: self.estimate_interval,
            ewma: self.ewma,
            nodes,
            branching: self.branching,
            compensation: self.compensation,
            fps: self.fps,
            fps_mean: self.fps_mean,
            grd_smooth: self.grd_smooth,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let total = self.total_flows();
        if self.flows_per_limiter.is_empty() || total == 0 {
            return Err(ScenarioError::NoFlows(self.flows_per_limiter.clone()));
        }
        if total > 100_000 || self.flows_per_limiter.len() > 10_000 {
            return Err(ScenarioError::TooManyFlows(total));
        }
        for (what, value) in [
            ("gossip loss", self.gossip_loss),
            ("data loss", self.data_loss),
        ] {
            if !(0.0..1.0).contains(&value) {
                return Err(ScenarioError::Probability { what, value });
            }
        }
        for (what, v) in [
            ("duration", self.duration),
            ("bin", self.bin),
            ("flow RTT", self.flow_rtt),
            ("link rate", self.link_bps),
            ("packet size", self.packet_bytes as u64),
        ] {
            if v == 0 {
                return Err(ScenarioError::NotPositive(what));
            }
        }
        if self.warmup >= self.duration {
            return Err(ScenarioError::Warmup {
                warmup: self.warmup,
                duration: self.duration,
            });
        }
        self.limiter_config().validate()?;
        Ok(())
    }
}
