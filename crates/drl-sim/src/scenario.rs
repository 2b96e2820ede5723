//! What to simulate: the parameters of one run.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::dither::GrdDraws;
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

/// Default per-packet host jitter: each packet leaves its source up to
/// 1 ms late (uniform in `[0, 1 ms)`, order kept).
///
/// The paper's testbed (§4.2-4.3) was real Linux 2.6.9 hosts on ModelNet,
/// with limiters in user space: every packet went from the kernel to the
/// limiter process through an iptables queue and back out through a raw
/// socket, and the senders' timers tick at 1 ms (HZ = 1000). Such a path
/// varies by about a scheduler tick per packet, not by microseconds. With
/// 0-50 µs (our first default) every flow of a 40 ms RTT sent in the same
/// half of each round trip: the 100 ms histograms of the aggregate were
/// bimodal (peaks near 8 and 12 Mbps, 9 % of windows at 10) and CTB's
/// Jain index 0.941 against the paper's 0.971. From 1 ms on the
/// histograms are unimodal at the limit and CTB's index 0.981 (2 ms: 0.992,
/// 5 ms: 0.996); 1 ms is the smallest jitter a kernel tick justifies
/// (sweep: `cargo run -p drl-sim --example phase_lock`; EXPERIMENTS.md,
/// "Phase lock"; test `tests/phase_lock.rs`).
pub const DEFAULT_JITTER: Nanos = MS;

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
    /// A flow, workload or link is malformed.
    #[error("flows: {0}")]
    Flows(String),
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

/// One flow described on its own (paper §5.2-5.5, §5.7), beside the
/// long-lived flows of [`Scenario::flows_per_limiter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    /// The limiter it enters (0-based).
    pub limiter: u32,
    /// When its source starts (the request, if it opens with a handshake).
    pub start: Nanos,
    /// When its source leaves: nothing is sent after this (`None`: never).
    pub stop: Option<Nanos>,
    /// Its round-trip time (`None`: the limiter's, see
    /// [`Scenario::flow_rtt_of`]).
    pub rtt: Option<Nanos>,
    /// Bytes to transfer (`None`: an endless bulk transfer).
    pub bytes: Option<u64>,
    /// Opens with a TCP handshake whose SYN-ACK crosses the limiter; a
    /// lost one is retried after the initial RTO of 3 s, doubling.
    pub handshake: bool,
    /// The handshake's SYN-ACK is policed like data (`false`: it crosses
    /// the limiter unpoliced, never dropped there).
    pub police_handshake: bool,
    /// Crosses the shared upstream link ([`Scenario::upstream`]).
    pub upstream: bool,
}

impl FlowSpec {
    /// A long-lived flow at `limiter` from `start` to `stop`.
    pub fn bulk(limiter: u32, start: Nanos, stop: Option<Nanos>) -> Self {
        Self {
            limiter,
            start,
            stop,
            rtt: None,
            bytes: None,
            handshake: false,
            police_handshake: true,
            upstream: false,
        }
    }
}

/// A shared link upstream of some limiters (paper §5.4): every packet of
/// the flows that cross it is serialised at `bps` through one FIFO holding
/// at most `queue_packets` packets (drop-tail), from `from` on; before
/// that the link is not in their path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Capacity, bits per second.
    pub bps: u64,
    /// Drop-tail queue length, packets (the one being sent included).
    pub queue_packets: u32,
    /// When the link enters the path.
    pub from: Nanos,
    /// Limiters whose [`Scenario::flows_per_limiter`] flows cross it
    /// ([`FlowSpec::upstream`] decides for the others).
    pub limiters: Vec<u32>,
}

/// Heavy-tailed object sizes for Web flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    /// The SURGE model (Barford & Crovella, 1998): a lognormal body
    /// (`mu`, `sigma` of ln bytes) below `cut` bytes and a Pareto tail
    /// (shape `alpha`, scale `cut`) above it with probability `tail`;
    /// sizes are capped at `max`.
    LognormalPareto {
        /// Mean of ln(size) in the body.
        mu: f64,
        /// Standard deviation of ln(size) in the body.
        sigma: f64,
        /// Where the tail starts, bytes.
        cut: f64,
        /// Pareto shape of the tail.
        alpha: f64,
        /// Probability that an object is from the tail.
        tail: f64,
        /// Largest object, bytes.
        max: f64,
    },
    /// Pareto with shape `alpha` and scale `min` bytes, capped at `max`.
    Pareto {
        /// Shape.
        alpha: f64,
        /// Smallest object, bytes.
        min: f64,
        /// Largest object, bytes.
        max: f64,
    },
}

impl SizeDist {
    /// The SURGE fit: body lognormal(9.357, 1.318), tail Pareto(1.1) from
    /// 133 KB for 7 % of objects, capped at 10 MB.
    pub const SURGE: SizeDist = SizeDist::LognormalPareto {
        mu: 9.357,
        sigma: 1.318,
        cut: 133_000.0,
        alpha: 1.1,
        tail: 0.07,
        max: 10_000_000.0,
    };

    /// The fit `drl sim table1` uses: body lognormal(8.5, 1.5) (median
    /// 4.9 KB) below 133 KB, tail Pareto(1.2) from 133 KB for 1 % of
    /// objects, capped at 10 MB. Mean ≈ 16.5 KB, so 15 requests per second
    /// offer ≈ 2 Mbps, what the paper's Web flows received (Table 1: 1.8-2.1
    /// Mbps); the paper's CAIDA-derived distribution itself is not
    /// published. (SURGE's mean, ≈ 60 KB, would offer ≈ 7.7 Mbps.)
    pub const WEB: SizeDist = SizeDist::LognormalPareto {
        mu: 8.5,
        sigma: 1.5,
        cut: 133_000.0,
        alpha: 1.2,
        tail: 0.01,
        max: 10_000_000.0,
    };

    /// Draws one size in bytes (at least 1).
    pub fn sample(&self, rng: &mut impl rand::Rng) -> u64 {
        let u = |rng: &mut dyn rand::RngCore| -> f64 {
            // Uniform in (0, 1].
            ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
        };
        let x = match *self {
            SizeDist::LognormalPareto {
                mu,
                sigma,
                cut,
                alpha,
                tail,
                max,
            } => {
                if u(rng) < tail {
                    (cut / u(rng).powf(1.0 / alpha)).min(max)
                } else {
                    // Box-Muller; redrawn above the cut (the body is the
                    // lognormal conditioned on being below it).
                    loop {
                        let (a, b) = (u(rng), u(rng));
                        let z = (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos();
                        let v = (mu + sigma * z).exp();
                        if v < cut {
                            break v;
                        }
                    }
                }
            }
            SizeDist::Pareto { alpha, min, max } => (min / u(rng).powf(1.0 / alpha)).min(max),
        };
        (x.round() as u64).max(1)
    }
}

/// Web requests arriving at one limiter (paper §5.3): a Poisson process of
/// finite transfers, each opening with a handshake.
#[derive(Debug, Clone, PartialEq)]
pub struct WebWorkload {
    /// The limiter the responses cross.
    pub limiter: u32,
    /// Mean arrivals per second.
    pub per_second: f64,
    /// Object sizes.
    pub sizes: SizeDist,
    /// First possible arrival.
    pub from: Nanos,
    /// No arrival at or after this.
    pub until: Nanos,
    /// Its SYN-ACKs are policed like data (the default in every figure);
    /// `false` lets them cross the limiter unpoliced (Table 1's
    /// `grd-syn-unpoliced`: the paper does not say which its limiters did).
    pub police_handshake: bool,
}

/// Flow churn (paper §5.6): the long-lived flows of
/// [`Scenario::flows_per_limiter`] start one every `every`, in a seeded
/// random order, and each leaves `life` after its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Churn {
    /// Time between two starts.
    pub every: Nanos,
    /// Life of each flow.
    pub life: Nanos,
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
    /// How GRD draws its drops (default [`GrdDraws::Independent`], the
    /// paper's; the service's default is [`GrdDraws::Dithered`]).
    pub grd_draws: GrdDraws,
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
    /// Per-packet host jitter, uniform in `[0, jitter)` ([`DEFAULT_JITTER`]).
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
    /// Round-trip time of the flows of each limiter (empty: `flow_rtt` for
    /// all; otherwise one per limiter).
    pub limiter_flow_rtts: Vec<Nanos>,
    /// Flows described one by one, after the long-lived ones.
    pub flow_specs: Vec<FlowSpec>,
    /// A shared upstream link with a drop-tail queue, if any.
    pub upstream: Option<Upstream>,
    /// Poisson Web workloads.
    pub web: Vec<WebWorkload>,
    /// Churn of the long-lived flows (`None`: all start within
    /// `start_spread` and live to the end).
    pub churn: Option<Churn>,
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
            aggregation: Aggregation::default(),
            grd_draws: GrdDraws::Independent,
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
            jitter: DEFAULT_JITTER,
            data_loss: 0.0,
            bin: 10 * MS,
            tcp: TcpConfig::default(),
            fps: FpsConfig::default(),
            fps_mean: FpsConfig::mean_variant(),
            grd_smooth: GrdSmoothConfig::default(),
            limiter_flow_rtts: Vec::new(),
            flow_specs: Vec::new(),
            upstream: None,
            web: Vec::new(),
            churn: None,
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

    /// One cell of EXPERIMENTS.md's scale matrix: [`Scenario::paper_scaling`]
    /// with `seed`, measured from 10 s, every flow starting within 500 ms,
    /// or (`staggered`) one flow every 100 ms in a random order.
    pub fn scale_matrix_cell(
        limiters: usize,
        algorithm: AlgorithmKind,
        aggregation: Aggregation,
        gossip_loss: f64,
        secs: u64,
        seed: u64,
        staggered: bool,
    ) -> Self {
        let mut sc = Self::paper_scaling(limiters, algorithm, aggregation, gossip_loss, secs);
        sc.seed = seed;
        sc.warmup = 10 * SEC;
        sc.start_spread = 500 * MS;
        if staggered {
            sc.churn = Some(Churn {
                every: 100 * MS,
                life: 10_000 * SEC,
            });
        }
        sc
    }

    /// Number of limiters.
    pub fn limiters(&self) -> usize {
        self.flows_per_limiter.len()
    }

    /// Number of long-lived flows ([`Scenario::flows_per_limiter`]) plus
    /// the flows described one by one (Web arrivals not included).
    pub fn total_flows(&self) -> u64 {
        self.flows_per_limiter
            .iter()
            .map(|&f| f as u64)
            .sum::<u64>()
            + self.flow_specs.len() as u64
    }

    /// The round-trip time of the flows entering `limiter` (unless a
    /// [`FlowSpec`] sets its own).
    pub fn flow_rtt_of(&self, limiter: usize) -> Nanos {
        self.limiter_flow_rtts
            .get(limiter)
            .copied()
            .unwrap_or(self.flow_rtt)
    }

    /// Every flow of the run, in flow order: the long-lived flows of
    /// [`Scenario::flows_per_limiter`] (limiter 0's first; start times
    /// drawn in `[0, start_spread)`, or staggered by [`Scenario::churn`]),
    /// then [`Scenario::flow_specs`], then the Web arrivals of
    /// [`Scenario::web`] in time order. Random draws come from the seed.
    pub fn plan_flows(&self) -> Vec<FlowSpec> {
        use crate::rng::{Component, stream};
        use rand::Rng;
        use rand::seq::SliceRandom;
        let mut out = Vec::new();
        let mut start_rng = stream(self.seed, Component::FlowStart, 0);
        for (l, &k) in self.flows_per_limiter.iter().enumerate() {
            let upstream = self
                .upstream
                .as_ref()
                .is_some_and(|u| u.limiters.contains(&(l as u32)));
            for _ in 0..k {
                let start = if self.start_spread > 0 {
                    start_rng.random_range(0..self.start_spread)
                } else {
                    0
                };
                out.push(FlowSpec {
                    upstream,
                    ..FlowSpec::bulk(l as u32, start, None)
                });
            }
        }
        if let Some(c) = self.churn {
            let mut order: Vec<usize> = (0..out.len()).collect();
            order.shuffle(&mut stream(self.seed, Component::FlowStart, 1));
            for (k, i) in order.into_iter().enumerate() {
                let start = c.every.saturating_mul(k as u64);
                out[i].start = start;
                out[i].stop = Some(start.saturating_add(c.life));
            }
        }
        out.extend(self.flow_specs.iter().cloned());
        let mut web = Vec::new();
        for (w, wl) in self.web.iter().enumerate() {
            let mut rng = stream(self.seed, Component::Workload, w as u64);
            let mut t = wl.from as f64;
            loop {
                // Exponential inter-arrival times (a Poisson process).
                let u: f64 = 1.0 - rng.random::<f64>();
                t += -u.ln() / wl.per_second * SEC as f64;
                if t >= wl.until as f64 || t >= self.duration as f64 {
                    break;
                }
                web.push(FlowSpec {
                    bytes: Some(wl.sizes.sample(&mut rng)),
                    handshake: true,
                    police_handshake: wl.police_handshake,
                    ..FlowSpec::bulk(wl.limiter, t as Nanos, None)
                });
            }
        }
        web.sort_by_key(|f| (f.start, f.limiter));
        out.extend(web);
        out
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
            grd_draws: self.grd_draws,
        }
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let total = self.total_flows();
        if self.flows_per_limiter.is_empty() || (total == 0 && self.web.is_empty()) {
            return Err(ScenarioError::NoFlows(self.flows_per_limiter.clone()));
        }
        let nl = self.limiters() as u32;
        let expected_web: f64 = self
            .web
            .iter()
            .map(|w| w.per_second * w.until.min(self.duration).saturating_sub(w.from) as f64 / 1e9)
            .sum();
        if expected_web > 100_000.0 {
            return Err(ScenarioError::TooManyFlows(expected_web as u64));
        }
        if !self.limiter_flow_rtts.is_empty() && self.limiter_flow_rtts.len() != nl as usize {
            return Err(ScenarioError::Flows(format!(
                "{} flow RTTs for {nl} limiters (give one, or one per limiter)",
                self.limiter_flow_rtts.len()
            )));
        }
        if self.limiter_flow_rtts.contains(&0) {
            return Err(ScenarioError::NotPositive("flow RTT"));
        }
        for (i, f) in self.flow_specs.iter().enumerate() {
            if f.limiter >= nl {
                return Err(ScenarioError::Flows(format!(
                    "flow {i} enters limiter {} (limiters 0..{nl})",
                    f.limiter
                )));
            }
            if f.stop.is_some_and(|s| s <= f.start) {
                return Err(ScenarioError::Flows(format!(
                    "flow {i} stops before it starts"
                )));
            }
            if f.rtt == Some(0) || f.bytes == Some(0) {
                return Err(ScenarioError::Flows(format!(
                    "flow {i}: RTT and size must be positive"
                )));
            }
        }
        for w in &self.web {
            if w.limiter >= nl {
                return Err(ScenarioError::Flows(format!(
                    "Web workload at limiter {} (limiters 0..{nl})",
                    w.limiter
                )));
            }
            if !(w.per_second.is_finite() && w.per_second > 0.0) {
                return Err(ScenarioError::NotPositive("Web arrival rate"));
            }
        }
        if let Some(u) = &self.upstream {
            if u.bps == 0 || u.queue_packets == 0 {
                return Err(ScenarioError::NotPositive("upstream link rate and queue"));
            }
            if let Some(l) = u.limiters.iter().find(|&&l| l >= nl) {
                return Err(ScenarioError::Flows(format!(
                    "upstream link before limiter {l} (limiters 0..{nl})"
                )));
            }
        }
        if self.churn.is_some_and(|c| c.every == 0 || c.life == 0) {
            return Err(ScenarioError::NotPositive("churn interval and life"));
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
