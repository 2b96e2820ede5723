//! The aggregation instances a [`super::Node`] holds per wire key, Flow
//! Updating's neighbour graph, and what a node reports.

use drl_core::Nanos;

use crate::cloud_control::settings::Settings;
use crate::cloud_control::wire;
use crate::gossip::{FlowUpdating, PushSum};

/// A peer's identity ([`super::PeerId`]).
type PeerId = u32;

/// A push-sum instance for one wire key.
#[derive(Debug)]
pub(super) struct Mass {
    pub(super) sum: PushSum,
    pub(super) touched: Nanos,
}

impl Mass {
    pub(super) fn new(me: PeerId, s: &Settings, now: Nanos) -> Self {
        Self {
            sum: PushSum::new(me, s.nodes, s.branching, s.compensation),
            touched: now,
        }
    }
}

/// A Flow Updating instance for one wire key.
#[derive(Debug)]
pub(super) struct Flows {
    pub(super) fu: FlowUpdating,
    pub(super) touched: Nanos,
}

/// Flow Updating's neighbours of `me` among `up` (ascending, `me` among
/// them or not): its two neighbours on the ring of ids, which keeps the
/// graph connected, and every peer `j` whose pair `{me, j}` hashes under
/// `chords / (nodes - 1)`, a random graph of about `chords` extra links
/// per node. The chords depend on the pair alone, not on who else is up,
/// so a peer going down takes its own links away and no other.
pub(super) fn neighbours(me: PeerId, up: &[PeerId], nodes: u32, chords: u32) -> Vec<PeerId> {
    let others = up.iter().filter(|&&p| p != me).count();
    let mut out = Vec::new();
    if others == 0 {
        return out;
    }
    let pos = up.partition_point(|&p| p < me);
    let ring: Vec<PeerId> = up.iter().copied().filter(|&p| p != me).collect();
    out.push(ring[pos % ring.len()]);
    out.push(ring[(pos + ring.len() - 1) % ring.len()]);
    let p = (chords as f64 / nodes.saturating_sub(1).max(1) as f64).min(1.0);
    let threshold = (p * u64::MAX as f64) as u64;
    for &j in &ring {
        let (a, b) = if j < me { (j, me) } else { (me, j) };
        if splitmix((a as u64) << 32 | b as u64) <= threshold {
            out.push(j);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One Flow Updating instance as a node holds it ([`super::Node::flow_state`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowState {
    /// This node's own value.
    pub local: f64,
    /// Its estimate of the average.
    pub estimate: f64,
    /// The flow it holds with each peer it has a link with.
    pub flows: Vec<(PeerId, f64)>,
}

/// Counters of what a node refused.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeStats {
    /// Payloads that did not decode.
    pub malformed: u64,
    /// Payloads of another algorithm or aggregation (mixed configs).
    pub mismatched: u64,
    /// Values not stored because a peer already filled `max_keys`.
    pub refused_values: u64,
    /// Payloads emitted.
    pub sent: u64,
}

/// A payload that was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// It did not decode.
    #[error(transparent)]
    Malformed(#[from] wire::WireError),
    /// It came from a node running another algorithm or aggregation.
    #[error("gossip from a node with another algorithm or aggregation")]
    Mismatched,
    /// It claims to come from this node.
    #[error("gossip claiming this node as its sender")]
    FromSelf,
}
