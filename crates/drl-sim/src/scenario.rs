//! What to simulate: the parameters of one run.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::fps::FpsConfig;
use drl_cluster::alloc::grd::GrdSmoothConfig;
use drl_cluster::cloud_control::{Aggregation, Settings, SettingsError};
use drl_cluster::gossip::LossCompensation;
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
    /// The node settings are invalid.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// A fault event names a node that does not exist, or is malformed.
    #[error("fault event: {0}")]
    Fault(String),
}

/// A membership-changing event during a run (paper §5.6 and beyond).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultEvent {
    /// Limiter `node` stops at `at`: its traffic is dropped, it sends and
    /// receives nothing; the others notice after the detection time.
    Kill {
        /// Which limiter.
        node: u32,
        /// When.
        at: Nanos,
    },
    /// Limiter `node` starts again at `at` with fresh state (a new process).
    Restart {
        /// Which limiter.
        node: u32,
        /// When.
        at: Nanos,
    },
    /// Gossip between the groups is cut from `from` to `until`. `groups`
    /// lists the nodes of each side; nodes not listed join the first
    /// group.
    Partition {
        /// The sides.
        groups: Vec<Vec<u32>>,
        /// Cut at.
        from: Nanos,
        /// Healed at.
        until: Nanos,
    },
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
    /// Extra gossip delay, uniform in `[0, gossip_jitter)` per message (so
    /// messages can arrive out of order).
    pub gossip_jitter: Nanos,
    /// Probability that a gossip message is delivered twice.
    pub gossip_duplicate: f64,
    /// How gossip compensates for lost messages (push-sum).
    pub compensation: LossCompensation,
    /// How the limiters aggregate each other's values.
    pub aggregation: Aggregation,
    /// Membership's failure-detection time: a killed or cut-off limiter is
    /// declared down this long after the fact; after a heal or a restart,
    /// each side learns of the other within this time (at a seeded random
    /// moment per node, so views are briefly asymmetric, as with SWIM).
    pub detection: Nanos,
    /// Peer values older than this do not count (`None`: the service's
    /// default for this cluster size, [`Settings::default_stale_after`]).
    pub stale_after: Option<Nanos>,
    /// How fast the 1/N rule raises the limit in force (`None`: the
    /// service's default, [`Settings::default_rise`]).
    pub rise: Option<Nanos>,
    /// Kills, restarts and partitions.
    pub faults: Vec<FaultEvent>,
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
            gossip_jitter: 0,
            gossip_duplicate: 0.0,
            compensation: LossCompensation::Cumulative,
            aggregation: Aggregation::PeerTable,
            detection: 1_200 * MS,
            stale_after: None,
            rise: None,
            faults: Vec::new(),
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

    /// The paper's scaling setup (§5.6): `limiters` limiters with 0–5
    /// long-lived flows each (drawn from a fixed seed), a global limit of
    /// 50 Mbps, branching factor 3, `gossip_loss` of the gossip lost; flows
    /// start within the first 5 s; `secs` simulated, measured from 10 s.
    pub fn paper_scaling(
        limiters: usize,
        algorithm: AlgorithmKind,
        aggregation: Aggregation,
        gossip_loss: f64,
        secs: u64,
    ) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        Self {
            flows_per_limiter: (0..limiters).map(|_| rng.random_range(0..=5)).collect(),
            limit_bps: 50_000_000,
            branching: 3,
            gossip_loss,
            aggregation,
            duration: secs * SEC,
            warmup: (10 * SEC).min(secs * SEC / 2),
            start_spread: 5 * SEC,
            ..Self::paper_baseline(algorithm)
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

    /// Number of Cloud Control nodes: one for the central references
    /// (CTB, central random drop), one per limiter otherwise.
    pub fn nodes(&self) -> u32 {
        if self.algorithm.is_central() {
            1
        } else {
            self.limiters() as u32
        }
    }

    /// The node settings (in bytes) this scenario implies: what
    /// `drl serve` would run with the same `cluster:` values.
    pub fn settings(&self) -> Settings {
        let nodes = self.nodes();
        Settings {
            algorithm: self.algorithm,
            aggregation: self.aggregation,
            interval: self.estimate_interval,
            ewma: self.ewma,
            nodes,
            branching: self.branching,
            compensation: self.compensation,
            stale_after: self.stale_after.unwrap_or_else(|| {
                Settings::default_stale_after(
                    self.estimate_interval,
                    nodes,
                    self.branching,
                    self.detection,
                )
            }),
            idle_after: self.duration.saturating_add(SEC),
            rise: self.rise,
            max_keys: 16,
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
            ("gossip duplication", self.gossip_duplicate),
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
        self.settings().validate()?;
        let n = self.limiters() as u32;
        for f in &self.faults {
            let bad = |m: String| Err(ScenarioError::Fault(m));
            match f {
                FaultEvent::Kill { node, .. } | FaultEvent::Restart { node, .. } if *node >= n => {
                    return bad(format!("node {node} out of range (limiters 0..{n})"));
                }
                FaultEvent::Partition {
                    groups,
                    from,
                    until,
                } => {
                    if until <= from {
                        return bad(format!(
                            "partition ends ({until} ns) before it starts ({from} ns)"
                        ));
                    }
                    if let Some(x) = groups.iter().flatten().find(|x| **x >= n) {
                        return bad(format!("node {x} out of range (limiters 0..{n})"));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
