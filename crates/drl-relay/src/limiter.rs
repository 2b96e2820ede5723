//! The limiter glue: one decision per packet against drl-cluster's Cloud
//! Control node.
//!
//! * `scope: local`: a [`Node`] with no peers, owned by the packet loop
//!   and ticked by it ([`Limiter::tick`]);
//! * `scope: gossip`: drl-cluster-net's [`GossipStore`] (the same node, driver,
//!   authenticated UDP transport and SWIM membership as `drl serve`'s
//!   `scope: gossip`), decided through [`GossipStore::decide_now`].
//!
//! Every class is one key (limit = class name, aggregate `all`); a packet
//! costs its IP length; its flow (FPS) is its 5-tuple.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use drl_cluster::cloud_control::{KeyLimit, KeyRef, KeySnapshot, Keys, Node, Settings};
use drl_cluster_net::{GossipStore, StartError};
use drl_core::{Algorithm, Nanos, Quota};
use drl_store::{Check, LimitSpec};

use crate::config::{Class, RelayConfig};

/// The aggregate every class's key uses.
pub const AGGREGATE: &str = "all";

/// Decides packets (see the module docs).
#[derive(Debug)]
pub enum Limiter {
    /// `scope: local`.
    Local {
        /// The node (no peers).
        node: Box<Node>,
        /// Per class: name and limit.
        limits: Vec<(String, KeyLimit)>,
        /// The clock's origin.
        origin: Instant,
    },
    /// `scope: gossip`.
    Gossip {
        /// The running gossip node.
        store: Arc<GossipStore>,
        /// Per class: the limit spec the store decides with.
        specs: Vec<LimitSpec>,
        /// Reused key buffer (`all#<flow>`).
        key: String,
    },
}

/// Read-only access to the classes' state for /metrics.
#[derive(Debug, Clone)]
pub enum Snapshots {
    /// A local node's key table.
    Local(Arc<Keys>),
    /// A gossip node.
    Gossip(Arc<GossipStore>),
}

impl Snapshots {
    /// The state of class `name`, once it has seen a packet.
    pub fn snapshot(&self, name: &str) -> Option<KeySnapshot> {
        match self {
            Snapshots::Local(k) => k.snapshot(KeyRef {
                limit: name,
                aggregate: AGGREGATE,
            }),
            Snapshots::Gossip(s) => s.snapshot(name, AGGREGATE),
        }
    }

    /// Nodes counted live (1 for a local relay).
    pub fn live_nodes(&self) -> u32 {
        match self {
            Snapshots::Local(_) => 1,
            Snapshots::Gossip(s) => s.live_nodes(),
        }
    }

    /// The gossip node, if any.
    pub fn store(&self) -> Option<&Arc<GossipStore>> {
        match self {
            Snapshots::Local(_) => None,
            Snapshots::Gossip(s) => Some(s),
        }
    }
}

fn spec(c: &Class) -> LimitSpec {
    let q = Quota::with_burst(c.rate, 1_000_000_000, c.burst.max(1))
        .or_else(|_| Quota::new(c.rate, 1_000_000_000))
        .expect("a positive rate over one second is a valid quota");
    LimitSpec::new(c.name.clone(), Algorithm::TokenBucket, vec![q])
}

impl Limiter {
    /// The local limiter of `cfg` (no network).
    pub fn local(cfg: &RelayConfig) -> Result<Self, String> {
        let settings = Settings::new(cfg.algorithm, 1);
        let node = Node::new(0, settings, cfg.seed, 0).map_err(|e| e.to_string())?;
        Ok(Limiter::Local {
            node: Box::new(node),
            limits: cfg
                .classes
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        KeyLimit {
                            rate: c.rate,
                            depth: c.burst.max(1),
                        },
                    )
                })
                .collect(),
            origin: Instant::now(),
        })
    }

    /// Starts the gossip node of `cfg` on the current tokio runtime.
    pub async fn gossip(cfg: &RelayConfig) -> Result<Self, StartError> {
        let cluster = cfg
            .cluster
            .clone()
            .expect("scope: gossip configs have a cluster section");
        let store = GossipStore::start(cluster).await?;
        Ok(Limiter::Gossip {
            store: Arc::new(store),
            specs: cfg.classes.iter().map(spec).collect(),
            key: String::with_capacity(32),
        })
    }

    /// What /metrics reads.
    pub fn snapshots(&self) -> Snapshots {
        match self {
            Limiter::Local { node, .. } => Snapshots::Local(node.keys().clone()),
            Limiter::Gossip { store, .. } => Snapshots::Gossip(store.clone()),
        }
    }

    /// Decides `cost` bytes of class `class` from `flow`: true to forward.
    /// A decision the node cannot make (too many keys: impossible with a
    /// class per key) forwards.
    pub fn decide(&mut self, class: usize, cost: u64, flow: u64) -> bool {
        match self {
            Limiter::Local {
                node,
                limits,
                origin,
            } => {
                let (name, limit) = &limits[class];
                let now = origin.elapsed().as_nanos() as Nanos;
                node.admit(
                    now,
                    KeyRef {
                        limit: name,
                        aggregate: AGGREGATE,
                    },
                    *limit,
                    cost,
                    flow,
                )
                .map_or(true, |a| a.allowed)
            }
            Limiter::Gossip { store, specs, key } => {
                key.clear();
                let _ = write!(key, "{AGGREGATE}#{flow:016x}");
                store
                    .decide_now(Check {
                        spec: &specs[class],
                        key,
                        cost,
                        now: 0,
                    })
                    .map_or(true, |d| d.allowed)
            }
        }
    }

    /// Runs a local node's interval step when it is due (the gossip node
    /// runs its own). Returns when it is next due, ns from now.
    pub fn tick(&mut self) -> Option<Nanos> {
        match self {
            Limiter::Local { node, origin, .. } => {
                let now = origin.elapsed().as_nanos() as Nanos;
                let due = node.poll_timeout()?;
                if now >= due {
                    node.handle_timeout(now);
                    // No peers: nothing is queued, but never let it grow.
                    let mut buf = Vec::new();
                    while node.poll_transmit(now, &mut buf).is_some() {}
                }
                node.poll_timeout().map(|d| d.saturating_sub(now))
            }
            Limiter::Gossip { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(alg: &str, rate: &str) -> RelayConfig {
        RelayConfig::parse(
            "t",
            &format!(
                "algorithm: {alg}\nclasses:\n  - name: a\n    quota: {rate}\n    burst: 3000\n"
            ),
        )
        .unwrap()
    }

    /// A local CTB admits the bucket depth at once, then about the rate.
    #[test]
    fn local_ctb_admits_burst_then_rate() {
        let mut l = Limiter::local(&cfg("ctb", "1MB/s")).unwrap();
        let mut admitted = 0u64;
        for _ in 0..10 {
            if l.decide(0, 1500, 1) {
                admitted += 1500;
            }
        }
        assert_eq!(admitted, 3000, "only the burst without time passing");
        let s = l.snapshots().snapshot("a").unwrap();
        assert_eq!(s.limit, 1_000_000);
        assert_eq!(l.snapshots().live_nodes(), 1);
    }

    /// GRD with one node never drops below its limit, whatever the
    /// ticks do.
    #[test]
    fn local_grd_forwards_under_the_limit() {
        let mut l = Limiter::local(&cfg("grd", "1GB/s")).unwrap();
        for i in 0..10_000 {
            assert!(l.decide(0, 1500, i % 7), "packet {i}");
            if i % 100 == 0 {
                l.tick();
            }
        }
    }
}
