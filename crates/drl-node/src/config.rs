//! [`GossipConfig`]: the `cluster:` section of a `scope: gossip` service.

use std::net::SocketAddr;
use std::path::PathBuf;

use drl_cluster::alloc::AlgorithmKind;
use serde::Deserialize;

use crate::transport::fault::FaultConfig;
use crate::transport::{ClusterKey, KeyError};

/// Configuration of one gossip node (deserializable from YAML/JSON).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GossipConfig {
    /// This node's id, unique in the cluster.
    pub node_id: u32,
    /// UDP address to bind (gossip and membership share it).
    pub bind: SocketAddr,
    /// UDP addresses of the other nodes (this node's own address, if
    /// listed, is ignored). Used to join and to count the cluster.
    #[serde(default)]
    pub seeds: Vec<SocketAddr>,
    /// Expected cluster size `N` (default: distinct seeds + this node).
    /// Each peer lost takes `1/N` of the global limit away.
    #[serde(default)]
    pub nodes: Option<u32>,
    /// File holding the cluster key (at least 16 bytes).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Environment variable holding the cluster key (used if `key_file` is
    /// not set; default `DRL_CLUSTER_KEY`).
    #[serde(default)]
    pub key_env: Option<String>,
    /// Allocator: `grd`, `grd-smooth`, `fps` or `fps-mean` (default `grd`).
    #[serde(default = "default_algorithm", deserialize_with = "de_algorithm")]
    pub algorithm: AlgorithmKind,
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
    /// Fault injection (tests only; off by default).
    #[serde(default)]
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
            seeds,
            nodes: None,
            key_file: None,
            key_env: None,
            algorithm: default_algorithm(),
            estimate_interval_ms: default_interval(),
            ewma: default_ewma(),
            branching: default_branching(),
            stale_after_ms: None,
            idle_expiry_ms: default_idle(),
            max_keys: default_max_keys(),
            flow_separator: None,
            membership: MembershipConfig::default(),
            faults: FaultConfig::default(),
            seed: None,
        }
    }

    /// The seeds other than this node, deduplicated, in order.
    pub fn peers(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for s in &self.seeds {
            if *s != self.bind && !out.contains(s) {
                out.push(*s);
            }
        }
        out
    }

    /// The expected cluster size `N`.
    pub fn cluster_size(&self) -> u32 {
        self.nodes.unwrap_or(self.peers().len() as u32 + 1).max(1)
    }

    /// How long a peer's estimate stays valid, ms.
    pub fn stale_after(&self) -> u64 {
        self.stale_after_ms.unwrap_or_else(|| {
            let n = self.cluster_size().saturating_sub(1).max(1) as u64;
            let rounds = n.div_ceil(self.branching.max(1) as u64);
            let hear_everyone = self.estimate_interval_ms * (10 * rounds).max(10);
            hear_everyone.max(2 * self.membership.detection_ms())
        })
    }

    /// Loads the cluster key: `key_file` if set, else `key_env` (default
    /// `DRL_CLUSTER_KEY`). Never from the command line.
    pub fn load_key(&self) -> Result<ClusterKey, KeyError> {
        match &self.key_file {
            Some(p) => ClusterKey::from_file(p),
            None => ClusterKey::from_env(self.key_env.as_deref().unwrap_or(DEFAULT_KEY_ENV)),
        }
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
        if self.flow_separator.as_deref() == Some("") {
            return bad("flow_separator must not be empty");
        }
        let f = &self.faults;
        if !(0.0..=1.0).contains(&f.drop_rate) {
            return bad("faults.drop_rate must be in [0, 1]");
        }
        let m = &self.membership;
        if m.probe_period_ms == 0 || m.probe_rtt_ms == 0 || m.probe_rtt_ms >= m.probe_period_ms {
            return bad("membership: need 0 < probe_rtt_ms < probe_period_ms");
        }
        if m.suspect_to_down_ms == 0 {
            return bad("membership.suspect_to_down_ms must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
