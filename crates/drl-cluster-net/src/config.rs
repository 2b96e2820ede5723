//! [`GossipConfig`]: the `cluster:` section of a `scope: gossip` service,
//! and its mapping to drl-cluster's [`Settings`] ([`GossipConfig::settings`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::dither::GrdDraws;
use drl_cluster::alloc::fps::FpsConfig;
use drl_cluster::alloc::grd::GrdSmoothConfig;
use drl_cluster::cloud_control::{Aggregation, Settings};
use drl_cluster::gossip::LossCompensation;
use serde::Deserialize;

use crate::discovery::{DiscoveryConfig, Seed};
use crate::transport::fault::FaultConfig;
use crate::transport::{ClusterKey, KeyError, KeyRing};

/// Configuration of one gossip node (deserializable from YAML/JSON).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GossipConfig {
    /// This node's id, unique in the cluster: a number, or `ordinal` (a
    /// StatefulSet pod's ordinal plus one, from its hostname).
    #[serde(deserialize_with = "crate::discovery::de_node_id")]
    pub node_id: u32,
    /// UDP address to bind (gossip and membership share it).
    pub bind: SocketAddr,
    /// The other nodes: UDP addresses `IP:PORT` (this node's own address,
    /// if listed, is ignored), or `dns:NAME:PORT`, resolved every
    /// `discovery.interval_ms` (every A/AAAA record a peer; a record gone
    /// is a peer gone). Used to join and to count the cluster.
    #[serde(default)]
    pub seeds: Vec<Seed>,
    /// How `dns:` seeds are resolved.
    #[serde(default)]
    pub discovery: DiscoveryConfig,
    /// The IP peers reach this node at, when `bind` is a wildcard
    /// (`0.0.0.0`): an IP, or `env:VAR` (e.g. the pod IP). Default: the
    /// bound address.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Expected cluster size `N` (default: distinct seeds + this node;
    /// required with `dns:` seeds). Each peer lost takes `1/N` of the
    /// global limit away.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// File holding the cluster key (at least 16 bytes): the key frames are
    /// sent with (and accepted under).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Files holding further cluster keys accepted on receive only, during
    /// a key rotation (each at least 16 bytes, all distinct from each other
    /// and from the send key; at most 7).
    #[serde(default)]
    pub previous_key_files: Vec<PathBuf>,
    /// Environment variable holding the cluster key (used if `key_file` is
    /// not set; default `DRL_CLUSTER_KEY`).
    #[serde(default)]
    pub key_env: Option<String>,
    /// Allocator: `grd`, `grd-smooth`, `fps` or `fps-mean` (default `grd`).
    #[serde(default = "default_algorithm", deserialize_with = "de_algorithm")]
    pub algorithm: AlgorithmKind,
    /// How a node learns the others' values: `flow-updating` (averaging
    /// by idempotent per-link flows on a graph of bounded degree; the
    /// default), `peer-table` (each node's latest value per key, lost
    /// peers zeroed at once; GRD does not hold on it from 50 nodes) or
    /// `push-sum` (the paper's mass-conserving averaging; not held to the
    /// membership bounds). docs/gossip.md, "Aggregation".
    #[serde(default, deserialize_with = "de_aggregation")]
    pub aggregation: Aggregation,
    /// Push-sum loss compensation: `cumulative` (running totals, exact;
    /// the default), `paper` (scale by the sequence gap) or `none`. Only
    /// used with `aggregation: push-sum`.
    #[serde(default, deserialize_with = "de_compensation")]
    pub compensation: LossCompensation,
    /// FPS tunables (`fps` and `fps-mean`); unset fields keep the
    /// algorithm's defaults.
    #[serde(default)]
    pub fps: FpsTuning,
    /// `grd-smooth` tunables; unset fields keep the defaults.
    #[serde(default)]
    pub grd_smooth: GrdSmoothTuning,
    /// How GRD draws its drops: `dithered` (the default: every drop is a
    /// random draw, tilted so that the count admitted per second stays
    /// within a few requests of `limit / demand` of the arrivals) or
    /// `independent` (one independent draw per request, as the paper
    /// writes it: the count per second spreads binomially, about ±15 at
    /// 940 requests/s against a limit of 600).
    #[serde(default, deserialize_with = "de_grd_draws")]
    pub grd_draws: GrdDraws,
    /// Estimate (and gossip) interval, milliseconds (default 50).
    #[serde(default = "default_interval")]
    pub estimate_interval_ms: u64,
    /// 1-second EWMA parameter of the demand estimators (default 0.1).
    #[serde(default = "default_ewma")]
    pub ewma: f64,
    /// Peers each node sends its estimates to per interval (default 3).
    #[serde(default = "default_branching")]
    pub branching: u32,
    /// A peer's estimate older than this is treated as 0 (default: twice
    /// the failure-detection time, [`MembershipConfig::detection_ms`], or 10
    /// rounds of hearing from everyone if longer). It must not be shorter
    /// than failure detection: a partitioned peer's estimate has to count
    /// until membership declares it down (and the 1/N rule takes over),
    /// or both sides of the partition would admit the whole limit meanwhile.
    #[serde(default)]
    pub stale_after_ms: Option<u64>,
    /// Limit keys that are idle this long are forgotten (default 30,000).
    #[serde(default = "default_idle")]
    pub idle_expiry_ms: u64,
    /// The 1/N rule raises the limit in force at most from 0 to the whole
    /// limit in this time when peers are counted again (default: twice
    /// the time in which a node sends to every peer,
    /// `2 x ceil((N-1)/branching)` intervals).
    #[serde(default)]
    pub rise_ms: Option<u64>,
    /// Most limit keys tracked (and accepted from each peer), default 100,000.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// If set, a limit key is split at the last occurrence of this string:
    /// the part before is the aggregate the global limit applies to, the
    /// part after is the client ("flow") for FPS. Unset: the whole key is
    /// the aggregate and every request of it is one flow.
    #[serde(default)]
    pub flow_separator: Option<String>,
    /// Failure detection tuning.
    #[serde(default)]
    pub membership: MembershipConfig,
    /// Fault injection (tests only; off by default). Exists only with the
    /// cargo feature `fault-injection`: a build without it refuses the key.
    #[serde(default)]
    #[cfg_attr(
        not(feature = "fault-injection"),
        serde(deserialize_with = "crate::test_only::cluster_faults")
    )]
    pub faults: FaultConfig,
    /// Seed of the node's random streams (default: the node id).
    #[serde(default)]
    pub seed: Option<u64>,
}

/// SWIM (foca) timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MembershipConfig {
    /// How often a random member is probed, ms (default 200).
    pub probe_period_ms: u64,
    /// How long a probe waits for an ack before asking others, ms
    /// (default 100).
    pub probe_rtt_ms: u64,
    /// How long a suspect has to refute before it is declared down, ms
    /// (default 600).
    pub suspect_to_down_ms: u64,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        Self {
            probe_period_ms: 200,
            probe_rtt_ms: 100,
            suspect_to_down_ms: 600,
        }
    }
}

impl MembershipConfig {
    /// Worst-case time to declare a crashed peer down, ms (a probe period to
    /// notice, the probe round trip and indirect probes, then suspicion).
    pub fn detection_ms(&self) -> u64 {
        2 * self.probe_period_ms + 2 * self.probe_rtt_ms + self.suspect_to_down_ms
    }
}

/// FPS tunables (`cluster.fps`). Every field is optional and overrides the
/// default of the configured variant (`fps` or `fps-mean`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FpsTuning {
    /// Most flows sampled per key (default 16).
    pub sample_capacity: Option<usize>,
    /// Probability that an arrival of an unsampled flow adds it to the
    /// sample (default 0.1).
    pub resample_probability: Option<f64>,
    /// Sampled flows idle this long are dropped, ms (default 3,000).
    pub flow_expiry_ms: Option<u64>,
    /// Upper bound on a published weight, in flows (default 1,000,000: a
    /// safety net; 1,000 split 5,000 flows 47:53 instead of 3:7).
    pub max_weight: Option<f64>,
    /// 1-second EWMA parameter of per-flow rates (default: `ewma` for
    /// `fps`, 0.95 for `fps-mean`).
    pub flow_ewma: Option<f64>,
}

impl FpsTuning {
    /// `base` with the fields set here replaced.
    pub fn apply(&self, base: FpsConfig) -> FpsConfig {
        FpsConfig {
            sample_capacity: self.sample_capacity.unwrap_or(base.sample_capacity),
            resample_probability: self
                .resample_probability
                .unwrap_or(base.resample_probability),
            flow_expiry: self
                .flow_expiry_ms
                .map_or(base.flow_expiry, |ms| ms.saturating_mul(1_000_000)),
            max_weight: self.max_weight.unwrap_or(base.max_weight),
            flow_ewma: self.flow_ewma.or(base.flow_ewma),
            flow_rate: base.flow_rate,
        }
    }
}

/// `grd-smooth` tunables (`cluster.grd_smooth`); unset fields keep the
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrdSmoothTuning {
    /// Change of the drop probability per interval per 100 % of excess
    /// forwarded rate (default 0.04).
    pub gain: Option<f64>,
    /// Upper bound on the drop probability (default 0.5).
    pub max_probability: Option<f64>,
}

impl GrdSmoothTuning {
    /// `base` with the fields set here replaced.
    pub fn apply(&self, base: GrdSmoothConfig) -> GrdSmoothConfig {
        GrdSmoothConfig {
            gain: self.gain.unwrap_or(base.gain),
            max_probability: self.max_probability.unwrap_or(base.max_probability),
        }
    }
}

fn default_algorithm() -> AlgorithmKind {
    AlgorithmKind::Grd
}
fn default_interval() -> u64 {
    50
}
fn default_ewma() -> f64 {
    0.1
}
fn default_branching() -> u32 {
    3
}
fn default_idle() -> u64 {
    30_000
}
fn default_max_keys() -> usize {
    100_000
}

fn de_algorithm<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AlgorithmKind, D::Error> {
    let s = String::deserialize(d)?;
    let k: AlgorithmKind = s.parse().map_err(serde::de::Error::custom)?;
    if is_gossip_algorithm(k) {
        Ok(k)
    } else {
        Err(serde::de::Error::custom(format!(
            "algorithm {k} is not a gossip allocator (use grd, grd-smooth, fps or fps-mean)"
        )))
    }
}

fn de_grd_draws<'de, D: serde::Deserializer<'de>>(d: D) -> Result<GrdDraws, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

fn de_aggregation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Aggregation, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

/// Parses a push-sum loss compensation name (`cumulative`, `paper`,
/// `none`; `scale` is an alias of `paper`, as in `drl sim`).
pub fn parse_compensation(s: &str) -> Result<LossCompensation, String> {
    match s.trim() {
        "cumulative" => Ok(LossCompensation::Cumulative),
        "paper" | "scale" => Ok(LossCompensation::ScaleBySeqGap),
        "none" => Ok(LossCompensation::None),
        other => Err(format!(
            "unknown compensation {other:?} (expected cumulative, paper or none)"
        )),
    }
}

fn de_compensation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<LossCompensation, D::Error> {
    parse_compensation(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// True for the allocators a gossip node runs.
pub fn is_gossip_algorithm(k: AlgorithmKind) -> bool {
    matches!(
        k,
        AlgorithmKind::Grd | AlgorithmKind::GrdSmooth | AlgorithmKind::Fps | AlgorithmKind::FpsMean
    )
}

/// An invalid [`GossipConfig`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The key could not be loaded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A field out of range.
    #[error("cluster config: {0}")]
    Invalid(String),
}

/// The default environment variable for the cluster key.
pub const DEFAULT_KEY_ENV: &str = "DRL_CLUSTER_KEY";

impl GossipConfig {
    /// A config for node `node_id` on `bind` with these seeds and defaults
    /// elsewhere (key from `DRL_CLUSTER_KEY`).
    pub fn new(node_id: u32, bind: SocketAddr, seeds: Vec<SocketAddr>) -> Self {
        Self {
            node_id,
            bind,
            seeds: seeds.into_iter().map(Seed::Addr).collect(),
            discovery: DiscoveryConfig::default(),
            advertise: None,
            nodes: None,
            key_file: None,
            previous_key_files: Vec::new(),
            key_env: None,
            algorithm: default_algorithm(),
            aggregation: Aggregation::default(),
            compensation: LossCompensation::default(),
            fps: FpsTuning::default(),
            grd_smooth: GrdSmoothTuning::default(),
            grd_draws: GrdDraws::default(),
            estimate_interval_ms: default_interval(),
            ewma: default_ewma(),
            branching: default_branching(),
            stale_after_ms: None,
            idle_expiry_ms: default_idle(),
            rise_ms: None,
            max_keys: default_max_keys(),
            flow_separator: None,
            membership: MembershipConfig::default(),
            faults: FaultConfig::default(),
            seed: None,
        }
    }

    /// The literal seeds other than this node, deduplicated, in order.
    pub fn peers(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        let me = self.advertise_ip().ok().flatten();
        for s in &self.seeds {
            if let Seed::Addr(s) = s
                && *s != self.bind
                && me.is_none_or(|ip| *s != SocketAddr::new(ip, self.bind.port()))
                && !out.contains(s)
            {
                out.push(*s);
            }
        }
        out
    }

    /// The `dns:` seeds, as (name, port).
    pub fn dns_seeds(&self) -> Vec<(String, u16)> {
        self.seeds
            .iter()
            .filter_map(|s| match s {
                Seed::Dns { name, port } => Some((name.clone(), *port)),
                Seed::Addr(_) => None,
            })
            .collect()
    }

    /// The `advertise` IP, if set.
    pub fn advertise_ip(&self) -> Result<Option<std::net::IpAddr>, String> {
        self.advertise
            .as_deref()
            .map(crate::discovery::advertise_ip)
            .transpose()
    }

    /// The address peers reach this node at, given the bound `local` one.
    pub fn advertised(&self, local: SocketAddr) -> SocketAddr {
        match self.advertise_ip() {
            Ok(Some(ip)) => SocketAddr::new(ip, local.port()),
            _ => local,
        }
    }

    /// The expected cluster size `N`.
    pub fn cluster_size(&self) -> u32 {
        self.nodes.unwrap_or(self.peers().len() as u32 + 1).max(1)
    }

    /// How long a peer's estimate stays valid, ms.
    pub fn stale_after(&self) -> u64 {
        self.stale_after_ms.unwrap_or_else(|| {
            let ms = 1_000_000;
            Settings::default_stale_after(
                self.estimate_interval_ms.saturating_mul(ms),
                self.cluster_size(),
                self.branching,
                self.membership.detection_ms().saturating_mul(ms),
            ) / ms
        })
    }

    /// The node's [`Settings`]: every field of drl-cluster's Cloud Control
    /// node, from this section (durations in ns, `N` from
    /// [`GossipConfig::cluster_size`], staleness from
    /// [`GossipConfig::stale_after`], FPS and grd-smooth tunables over
    /// their defaults).
    pub fn settings(&self) -> Settings {
        let ms = |v: u64| v.saturating_mul(1_000_000);
        Settings {
            algorithm: self.algorithm,
            aggregation: self.aggregation,
            interval: ms(self.estimate_interval_ms),
            ewma: self.ewma,
            nodes: self.cluster_size(),
            branching: self.branching,
            compensation: self.compensation,
            stale_after: ms(self.stale_after()),
            idle_after: ms(self.idle_expiry_ms),
            rise: self.rise_ms.map(ms),
            max_keys: self.max_keys,
            fps: self.fps.apply(FpsConfig::default()),
            fps_mean: self.fps.apply(FpsConfig::mean_variant()),
            grd_smooth: self.grd_smooth.apply(GrdSmoothConfig::default()),
            grd_draws: self.grd_draws,
        }
    }

    /// Loads the cluster key: `key_file` if set, else `key_env` (default
    /// `DRL_CLUSTER_KEY`). Never from the command line.
    pub fn load_key(&self) -> Result<ClusterKey, KeyError> {
        match &self.key_file {
            Some(p) => ClusterKey::from_file(p),
            None => ClusterKey::from_env(self.key_env.as_deref().unwrap_or(DEFAULT_KEY_ENV)),
        }
    }

    /// Loads every cluster key: the send key ([`GossipConfig::load_key`])
    /// and the receive-only `previous_key_files`, checked (each at least 16
    /// bytes, all distinct). What the transport is started with, and what a
    /// reload passes to [`crate::GossipStore::set_keys`].
    pub fn load_keys(&self) -> Result<KeyRing, KeyError> {
        let send = self.load_key()?;
        let previous = self
            .previous_key_files
            .iter()
            .map(|p| ClusterKey::from_file(p))
            .collect::<Result<Vec<_>, _>>()?;
        KeyRing::new(send, previous)
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.estimate_interval_ms == 0 || self.estimate_interval_ms > 60_000 {
            return bad("estimate_interval_ms must be in 1..=60000");
        }
        if !(0.0..1.0).contains(&self.ewma) {
            return bad("ewma must be in [0, 1)");
        }
        if self.branching == 0 {
            return bad("branching must be at least 1");
        }
        if self.max_keys == 0 {
            return bad("max_keys must be at least 1");
        }
        if let Some(n) = self.nodes
            && (n == 0 || (n as usize) < self.peers().len() + 1)
        {
            return bad("nodes must be at least the number of seeds plus this node");
        }
        if !self.dns_seeds().is_empty() && self.nodes.is_none() {
            return bad(
                "nodes (the expected cluster size N) is required with dns: seeds: the 1/N rule needs N before the first answer",
            );
        }
        self.discovery.validate().map_err(ConfigError::Invalid)?;
        let advertise = self.advertise_ip().map_err(ConfigError::Invalid)?;
        if self.bind.ip().is_unspecified() && advertise.is_none() {
            return bad(
                "bind is a wildcard address: set advertise (an IP, or env:VAR such as env:POD_IP) so peers can reach this node",
            );
        }
        if self.flow_separator.as_deref() == Some("") {
            return bad("flow_separator must not be empty");
        }
        let fps = &self.fps;
        if fps.sample_capacity == Some(0) {
            return bad("fps.sample_capacity must be at least 1");
        }
        if fps.flow_expiry_ms == Some(0) {
            return bad("fps.flow_expiry_ms must be positive");
        }
        if fps.max_weight.is_some_and(|w| !(w.is_finite() && w > 0.0)) {
            return bad("fps.max_weight must be positive");
        }
        if fps.flow_ewma.is_some_and(|e| !(0.0..1.0).contains(&e)) {
            return bad("fps.flow_ewma must be in [0, 1)");
        }
        let g = &self.grd_smooth;
        if g.gain.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            return bad("grd_smooth.gain must be positive");
        }
        if g.max_probability.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
            return bad("grd_smooth.max_probability must be in [0, 1]");
        }
        if let Err(e) = self.settings().validate() {
            return Err(ConfigError::Invalid(e.to_string()));
        }
        #[cfg(feature = "fault-injection")]
        if !(0.0..=1.0).contains(&self.faults.drop_rate) {
            return bad("faults.drop_rate must be in [0, 1]");
        }
        let m = &self.membership;
        if m.probe_period_ms == 0 || m.probe_rtt_ms == 0 || m.probe_rtt_ms >= m.probe_period_ms {
            return bad("membership: need 0 < probe_rtt_ms < probe_period_ms");
        }
        if m.suspect_to_down_ms == 0 {
            return bad("membership.suspect_to_down_ms must be positive");
        }
        let prev = &self.previous_key_files;
        if prev.len() >= crate::transport::keys::MAX_KEYS {
            return bad("previous_key_files: at most 7 files");
        }
        for (i, p) in prev.iter().enumerate() {
            if prev[..i].contains(p) || self.key_file.as_ref() == Some(p) {
                return Err(ConfigError::Invalid(format!(
                    "previous_key_files: {} is given twice (or is also key_file)",
                    p.display()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_keys_load_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, content: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p
        };
        let new = write("new.key", "the new cluster key, 32 bytes...\n");
        let old = write("old.key", "the old cluster key, 32 bytes...\n");
        let copy = write("copy.key", "the new cluster key, 32 bytes...");
        let short = write("short.key", "too short\n");
        let yaml = format!(
            "node_id: 1\nbind: 127.0.0.1:1\nkey_file: {}\nprevious_key_files: [{}]\n",
            new.display(),
            old.display()
        );
        let mut c: GossipConfig = serde_norway::from_str(&yaml).unwrap();
        c.validate().unwrap();
        let ring = c.load_keys().unwrap();
        let id = |p: &std::path::Path| ClusterKey::from_file(p).unwrap().id();
        assert_eq!(ring.send_id(), id(&new));
        assert_eq!(ring.ids(), vec![id(&new), id(&old)]);
        // The same key under another file name is refused at load.
        c.previous_key_files = vec![old.clone(), copy];
        assert_eq!(c.load_keys().unwrap_err(), KeyError::Duplicate(2));
        c.previous_key_files = vec![short.clone()];
        let e = c.load_keys().unwrap_err().to_string();
        assert!(e.contains("short.key") && e.contains("9 bytes"), "{e}");
        // The same path twice, or the send key's path, is refused by validate.
        c.previous_key_files = vec![old.clone(), old.clone()];
        assert!(c.validate().unwrap_err().to_string().contains("twice"));
        c.previous_key_files = vec![new.clone()];
        assert!(c.validate().is_err());
        c.previous_key_files = (0..8).map(|i| dir.path().join(format!("k{i}"))).collect();
        assert!(c.validate().unwrap_err().to_string().contains("at most 7"));
    }

    #[test]
    fn yaml_shape_parses_with_defaults() {
        let c: GossipConfig = serde_norway::from_str(
            "node_id: 1\nbind: 127.0.0.1:9181\nseeds: [127.0.0.1:9181, 127.0.0.1:9182, 127.0.0.1:9183]\nkey_file: cluster.key\nalgorithm: fps\n",
        )
        .unwrap();
        assert_eq!(c.algorithm, AlgorithmKind::Fps);
        assert_eq!(c.peers().len(), 2);
        assert_eq!(c.cluster_size(), 3);
        assert_eq!(c.estimate_interval_ms, 50);
        assert_eq!(c.stale_after(), 2_400, "twice failure detection");
        assert!(c.faults.is_off());
        c.validate().unwrap();
        let bad: Result<GossipConfig, _> =
            serde_norway::from_str("node_id: 1\nbind: 127.0.0.1:1\nalgorithm: gtb\n");
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("not a gossip allocator")
        );
        let unknown: Result<GossipConfig, _> =
            serde_norway::from_str("node_id: 1\nbind: 127.0.0.1:1\nkey: secret\n");
        assert!(unknown.is_err(), "the key itself is never a config field");
    }

    #[test]
    fn validation_catches_ranges() {
        let mut c = GossipConfig::new(1, "127.0.0.1:1".parse().unwrap(), vec![]);
        c.validate().unwrap();
        c.ewma = 1.0;
        assert!(c.validate().is_err());
        c.ewma = 0.1;
        c.nodes = Some(0);
        assert!(c.validate().is_err());
        c.nodes = None;
        c.fps.resample_probability = Some(1.5);
        assert!(c.validate().is_err(), "Settings::validate is applied");
        c.fps.resample_probability = None;
        c.grd_smooth.max_probability = Some(2.0);
        assert!(c.validate().is_err());
    }

    #[test]
    fn settings_map_every_field() {
        let c: GossipConfig = serde_norway::from_str(
            "node_id: 1\nbind: 127.0.0.1:9181\nseeds: [127.0.0.1:9182, 127.0.0.1:9183]\n\
             algorithm: fps-mean\naggregation: push-sum\ncompensation: paper\n\
             estimate_interval_ms: 20\newma: 0.2\nbranching: 1\nidle_expiry_ms: 5000\n\
             max_keys: 7\nfps: {sample_capacity: 4, flow_expiry_ms: 100, flow_ewma: 0.5}\n\
             grd_smooth: {gain: 0.1}\ngrd_draws: independent\n",
        )
        .unwrap();
        c.validate().unwrap();
        let s = c.settings();
        assert_eq!(s.algorithm, AlgorithmKind::FpsMean);
        assert_eq!(s.aggregation, Aggregation::PushSum);
        assert_eq!(s.compensation, LossCompensation::ScaleBySeqGap);
        assert_eq!(s.interval, 20_000_000);
        assert_eq!(s.ewma, 0.2);
        assert_eq!(s.nodes, 3);
        assert_eq!(s.branching, 1);
        assert_eq!(s.stale_after, c.stale_after() * 1_000_000);
        assert_eq!(s.idle_after, 5_000_000_000);
        assert_eq!(s.max_keys, 7);
        // Tunables override each variant's defaults, field by field.
        assert_eq!(s.fps.sample_capacity, 4);
        assert_eq!(s.fps.flow_expiry, 100_000_000);
        assert_eq!(s.fps.flow_ewma, Some(0.5));
        assert_eq!(s.fps.flow_rate, FpsConfig::default().flow_rate);
        assert_eq!(s.fps_mean.flow_rate, FpsConfig::mean_variant().flow_rate);
        assert_eq!(s.fps_mean.sample_capacity, 4);
        assert_eq!(s.fps_config(), s.fps_mean);
        assert_eq!(s.grd_smooth.gain, 0.1);
        assert_eq!(s.grd_draws, GrdDraws::Independent);
        assert_eq!(
            s.grd_smooth.max_probability,
            GrdSmoothConfig::default().max_probability
        );
        // Defaults: Flow Updating, cumulative, the allocators' own tunings.
        let d = GossipConfig::new(1, "127.0.0.1:1".parse().unwrap(), vec![]).settings();
        assert_eq!(d.aggregation, Aggregation::FlowUpdating);
        assert_eq!(d.compensation, LossCompensation::Cumulative);
        assert_eq!(d.fps, FpsConfig::default());
        assert_eq!(d.fps_mean, FpsConfig::mean_variant());
        assert_eq!(d.grd_smooth, GrdSmoothConfig::default());
        assert_eq!(d.stale_after, 2_400_000_000);
        assert_eq!(d.grd_draws, GrdDraws::Dithered);
        let bad: Result<GossipConfig, _> =
            serde_norway::from_str("node_id: 1\nbind: 127.0.0.1:1\ngrd_draws: random\n");
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("dithered or independent")
        );
        let bad: Result<GossipConfig, _> =
            serde_norway::from_str("node_id: 1\nbind: 127.0.0.1:1\naggregation: gossip\n");
        assert!(bad.unwrap_err().to_string().contains("peer-table"));
        let bad: Result<GossipConfig, _> =
            serde_norway::from_str("node_id: 1\nbind: 127.0.0.1:1\ncompensation: exact\n");
        assert!(bad.unwrap_err().to_string().contains("cumulative"));
    }
}
