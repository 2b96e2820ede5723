//! [`OrbitConfig`]: the `orbit:` section of a node's configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use drl_cluster::orbit::{self as proto, NodeId};
use drl_core::{Algorithm, Nanos};
use drl_store::LimitSpec;
use serde::Deserialize;

use crate::transport::fault::FaultConfig;
use crate::transport::{ClusterKey, KeyRing};

use super::error::OrbitError;

const MS: Nanos = 1_000_000;

/// One member of the ring: its node id and the UDP address its Orbit
/// runtime listens on. The ring order is the order of the list, and every
/// node must be given the same list.
///
/// In YAML `addr` is `IP:PORT`, or `dns:NAME:PORT`: a name with one
/// record (e.g. a StatefulSet pod's `drl-orbit-0.drl-orbit`), re-resolved
/// every `orbit.discovery.interval_ms`, so a member that comes back at
/// another address is found again. Ids and order stay those of the list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawMember")]
pub struct RingMember {
    /// Node id (unique in the ring).
    pub id: NodeId,
    /// UDP address of the node's Orbit runtime (for a `dns:` member, the
    /// unspecified address with its port until resolved).
    pub addr: SocketAddr,
    /// The `dns:` name and port the address is resolved from, if any.
    pub dns: Option<(String, u16)>,
}

impl RingMember {
    /// A member at a literal address.
    pub fn new(id: NodeId, addr: SocketAddr) -> Self {
        Self {
            id,
            addr,
            dns: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMember {
    id: NodeId,
    addr: crate::discovery::Seed,
}

impl TryFrom<RawMember> for RingMember {
    type Error = String;
    fn try_from(r: RawMember) -> Result<Self, String> {
        Ok(match r.addr {
            crate::discovery::Seed::Addr(addr) => RingMember::new(r.id, addr),
            crate::discovery::Seed::Dns { name, port } => RingMember {
                id: r.id,
                addr: SocketAddr::from(([0, 0, 0, 0], port)),
                dns: Some((name, port)),
            },
        })
    }
}

/// Where the shared cluster key (at least 16 bytes; frames are encrypted
/// and authenticated with a key derived from it) comes from: exactly one of
/// `file`, `env` or `inline` (the key frames are sent with, also accepted),
/// plus any `previous_files` accepted on receive only during a key
/// rotation, e.g. `key: {file: cluster.key}`, `key: {env: DRL_CLUSTER_KEY}`
/// or `key: {file: new.key, previous_files: [old.key]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySource {
    /// A file whose whole content (trimmed) is the key; a relative path is
    /// relative to the process's working directory.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An environment variable holding the key.
    #[serde(default)]
    pub env: Option<String>,
    /// The key inline (tests only: it would end up in the config file).
    #[serde(default)]
    pub inline: Option<String>,
    /// Files of further keys accepted on receive only (key rotation): each
    /// at least 16 bytes, all distinct, at most 7.
    #[serde(default)]
    pub previous_files: Vec<PathBuf>,
}

impl KeySource {
    /// The key from a file.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self {
            file: Some(path.into()),
            ..Self::default()
        }
    }

    /// The key from an environment variable.
    pub fn env(var: impl Into<String>) -> Self {
        Self {
            env: Some(var.into()),
            ..Self::default()
        }
    }

    /// The key itself.
    pub fn inline(key: impl Into<String>) -> Self {
        Self {
            inline: Some(key.into()),
            ..Self::default()
        }
    }

    /// `self` with `files` accepted on receive only.
    pub fn with_previous(mut self, files: Vec<PathBuf>) -> Self {
        self.previous_files = files;
        self
    }

    /// Loads every key: the send key ([`KeySource::load`]) and the
    /// receive-only `previous_files`, checked (at least 16 bytes each, all
    /// distinct). What the transport starts with, and what a reload passes
    /// to [`crate::orbit::OrbitStore::set_keys`].
    pub fn load_ring(&self) -> Result<KeyRing, OrbitError> {
        let send = self.load()?;
        let previous = self
            .previous_files
            .iter()
            .map(|p| ClusterKey::from_file(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KeyRing::new(send, previous)?)
    }

    /// Loads the send key.
    pub fn load(&self) -> Result<ClusterKey, OrbitError> {
        let k = match (&self.file, &self.env, &self.inline) {
            (Some(p), None, None) => ClusterKey::from_file(p),
            (None, Some(v), None) => ClusterKey::from_env(v),
            (None, None, Some(s)) => ClusterKey::new(s.as_bytes()),
            _ => {
                return Err(OrbitError::Config(
                    "orbit.key needs exactly one of file, env, inline".into(),
                ));
            }
        };
        k.map_err(OrbitError::Key)
    }

    fn check(&self) -> Result<(), OrbitError> {
        let n = usize::from(self.file.is_some())
            + usize::from(self.env.is_some())
            + usize::from(self.inline.is_some());
        if n != 1 {
            return Err(OrbitError::Config(
                "orbit.key needs exactly one of file, env, inline".into(),
            ));
        }
        let prev = &self.previous_files;
        if prev.len() >= crate::transport::keys::MAX_KEYS {
            return Err(OrbitError::Config(
                "orbit.key.previous_files: at most 7 files".into(),
            ));
        }
        for (i, p) in prev.iter().enumerate() {
            if prev[..i].contains(p) || self.file.as_ref() == Some(p) {
                return Err(OrbitError::Config(format!(
                    "orbit.key.previous_files: {} is given twice (or is also key.file)",
                    p.display()
                )));
            }
        }
        Ok(())
    }
}

/// Per-limit settings, by limit name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// When the node has used up its share and its local allowance, wait up
    /// to this long for the table to bring capacity before denying
    /// (milliseconds; 0 = deny at once). `None`: the section's default.
    pub max_wait_ms: Option<u64>,
}

/// The Orbit runtime configuration of one node (the `orbit:` section).
///
/// Each limit served with `scope: orbit` runs its own ring (same members,
/// same epoch) with `cap` and `window` taken from the limit's quota.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrbitConfig {
    /// This node's id; must be one of `ring`. A number, or `ordinal` (a
    /// StatefulSet pod's ordinal plus one, from its hostname).
    #[serde(deserialize_with = "crate::discovery::de_node_id")]
    pub node_id: NodeId,
    /// UDP address to bind (port 0: any free port, for tests).
    pub bind: SocketAddr,
    /// The ring, in order (at least one member, at most 1024).
    pub ring: Vec<RingMember>,
    /// How `dns:` member addresses are resolved.
    #[serde(default)]
    pub discovery: crate::discovery::DiscoveryConfig,
    /// The cluster key.
    pub key: KeySource,
    /// How long a node holds the table before passing it on, ms (> 0).
    /// A limit's window must be at least `epoch_ms x ring size`.
    #[serde(default = "defaults::epoch_ms")]
    pub epoch_ms: u64,
    /// Share of the free capacity a node leaves for the nodes after it,
    /// `[0, 1)` (default 0.1).
    #[serde(default = "defaults::rollover_ratio")]
    pub rollover_ratio: f64,
    /// Share of the cap carved out as per-node local allowances, `[0, 1]`
    /// (default 0.1); what a node admits while it has no table.
    #[serde(default = "defaults::local_fraction")]
    pub local_fraction: f64,
    /// Independent tables per window (default 2, 1..=16).
    #[serde(default = "defaults::lanes")]
    pub lanes: u32,
    /// Demand forecast multiplier, percent (default 200).
    #[serde(default = "defaults::headroom_pct")]
    pub headroom_pct: u32,
    /// Bound on keys per table and per node and window (default 1,048,576).
    #[serde(default = "defaults::max_keys")]
    pub max_keys: usize,
    /// Failure detector: heartbeat period to every ring member, ms.
    #[serde(default = "defaults::heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Failure detector: a member not heard from for this long is down, ms.
    #[serde(default = "defaults::suspect_after_ms")]
    pub suspect_after_ms: u64,
    /// Default bounded wait for every Orbit limit, ms (default 0: deny).
    #[serde(default)]
    pub max_wait_ms: u64,
    /// Per-limit overrides, by limit name.
    #[serde(default)]
    pub limits: BTreeMap<String, LimitSettings>,
    /// Largest encoded table accepted from a peer, bytes (default 8 MiB).
    #[serde(default = "defaults::max_message_bytes")]
    pub max_message_bytes: usize,
    /// Fault injection on this node's ring traffic (tests only). Exists
    /// only with the cargo feature `fault-injection`: a build without it
    /// refuses the key.
    #[serde(default)]
    #[cfg_attr(
        not(feature = "fault-injection"),
        serde(deserialize_with = "crate::test_only::orbit_fault")
    )]
    pub fault: Option<FaultConfig>,
}

mod defaults {
    pub fn epoch_ms() -> u64 {
        100
    }
    pub fn rollover_ratio() -> f64 {
        0.1
    }
    pub fn local_fraction() -> f64 {
        0.1
    }
    pub fn lanes() -> u32 {
        2
    }
    pub fn headroom_pct() -> u32 {
        200
    }
    pub fn max_keys() -> usize {
        1 << 20
    }
    pub fn heartbeat_ms() -> u64 {
        100
    }
    pub fn suspect_after_ms() -> u64 {
        600
    }
    pub fn max_message_bytes() -> usize {
        8 << 20
    }
}

/// Largest accepted `max_message_bytes` (64 MiB, the codec's frame bound).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

impl OrbitConfig {
    /// A configuration with every default: node `node_id` bound to `bind`
    /// on `ring`, authenticated with `key`.
    pub fn new(node_id: NodeId, bind: SocketAddr, ring: Vec<RingMember>, key: KeySource) -> Self {
        Self {
            node_id,
            bind,
            ring,
            discovery: crate::discovery::DiscoveryConfig::default(),
            key,
            epoch_ms: defaults::epoch_ms(),
            rollover_ratio: defaults::rollover_ratio(),
            local_fraction: defaults::local_fraction(),
            lanes: defaults::lanes(),
            headroom_pct: defaults::headroom_pct(),
            max_keys: defaults::max_keys(),
            heartbeat_ms: defaults::heartbeat_ms(),
            suspect_after_ms: defaults::suspect_after_ms(),
            max_wait_ms: 0,
            limits: BTreeMap::new(),
            max_message_bytes: defaults::max_message_bytes(),
            fault: None,
        }
    }

    /// Checks everything that does not depend on a limit.
    pub fn validate(&self) -> Result<(), OrbitError> {
        let bad = |s: String| Err(OrbitError::Config(s));
        self.key.check()?;
        if self.ring.is_empty() {
            return bad("orbit.ring is empty".into());
        }
        if self.ring.len() > proto::MAX_RING {
            return bad(format!(
                "orbit.ring has {} members, at most {}",
                self.ring.len(),
                proto::MAX_RING
            ));
        }
        let mut ids = std::collections::BTreeSet::new();
        for m in &self.ring {
            if !ids.insert(m.id) {
                return bad(format!("orbit.ring: node {} appears twice", m.id));
            }
        }
        if !ids.contains(&self.node_id) {
            return bad(format!(
                "orbit.node_id {} is not in orbit.ring",
                self.node_id
            ));
        }
        if self.epoch_ms == 0 {
            return bad("orbit.epoch_ms must be positive".into());
        }
        if let Err(e) = self.discovery.validate() {
            return bad(format!("orbit.{e}"));
        }
        if !(0.0..1.0).contains(&self.rollover_ratio) {
            return bad(format!(
                "orbit.rollover_ratio {} must be in [0, 1)",
                self.rollover_ratio
            ));
        }
        if !(0.0..=1.0).contains(&self.local_fraction) {
            return bad(format!(
                "orbit.local_fraction {} must be in [0, 1]",
                self.local_fraction
            ));
        }
        if self.heartbeat_ms == 0 || self.suspect_after_ms <= self.heartbeat_ms {
            return bad(format!(
                "orbit: heartbeat_ms ({}) must be positive and below suspect_after_ms ({})",
                self.heartbeat_ms, self.suspect_after_ms
            ));
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > MAX_MESSAGE_BYTES {
            return bad(format!(
                "orbit.max_message_bytes {} must be in 1..={MAX_MESSAGE_BYTES}",
                self.max_message_bytes
            ));
        }
        // The protocol's own checks (lanes, headroom, max_keys) with a
        // window that cannot fail the lap check.
        let probe = self.protocol(1, self.epoch().saturating_mul(self.ring.len() as u64));
        probe
            .validate(self.ring.len())
            .map_err(|e| OrbitError::Config(e.to_string()))
    }

    /// The epoch in nanoseconds.
    pub fn epoch(&self) -> Nanos {
        self.epoch_ms.saturating_mul(MS)
    }

    /// Ring node ids in ring order.
    pub fn ring_ids(&self) -> Vec<NodeId> {
        self.ring.iter().map(|m| m.id).collect()
    }

    /// The bounded wait of the limit `name`, ns.
    pub fn max_wait(&self, name: &str) -> Nanos {
        self.limits
            .get(name)
            .and_then(|l| l.max_wait_ms)
            .unwrap_or(self.max_wait_ms)
            .saturating_mul(MS)
    }

    /// The protocol configuration for a limit of `cap` per `window`.
    pub fn protocol(&self, cap: u64, window: Nanos) -> proto::OrbitConfig {
        let mut c = proto::OrbitConfig::new(cap, window, self.epoch())
            .with_rollover_ratio(self.rollover_ratio)
            .with_local_fraction(self.local_fraction);
        c.lanes = self.lanes;
        c.headroom_pct = self.headroom_pct;
        c.max_keys = self.max_keys;
        c
    }

    /// The protocol configuration for `spec`, or why `spec` cannot be served
    /// by Orbit: it must be `fixed-window` with a single quota whose window
    /// is at least one lap of the ring (`epoch_ms x ring size`). The server
    /// should call this at config load for every `scope: orbit` limit.
    pub fn protocol_for(&self, spec: &LimitSpec) -> Result<proto::OrbitConfig, OrbitError> {
        if spec.algorithm != Algorithm::FixedWindow {
            return Err(OrbitError::Limit(format!(
                "limit {:?}: scope orbit enforces a cap per fixed window; use algorithm fixed-window (got {})",
                spec.name,
                spec.algorithm.name()
            )));
        }
        let [q] = spec.quotas.as_slice() else {
            return Err(OrbitError::Limit(format!(
                "limit {:?}: scope orbit takes exactly one quota (got {})",
                spec.name,
                spec.quotas.len()
            )));
        };
        let c = self.protocol(q.limit(), q.window());
        c.validate(self.ring.len())
            .map_err(|e| OrbitError::Limit(format!("limit {:?}: {e}", spec.name)))?;
        Ok(c)
    }
}
