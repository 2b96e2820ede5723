//! A Cloud Control node driven by a recorded trace, the way the simulator
//! drives its limiters: what the node decided and sent, in order.
//!
//! The simulator (`engine.rs`) and the gossip fault harness
//! (`faults/gossip.rs`) drain a node's payloads with [`drain`]; [`replay`]
//! feeds a whole trace. drl's `one_trace` test feeds the same trace to
//! drl-cluster-net's driver (the service's glue) and checks that verdicts and
//! outgoing bytes are identical: the simulator runs the service's node,
//! not a copy of it.

use drl_cluster::cloud_control::{KeyLimit, KeyRef, Keys, Node, PeerId};
use drl_core::Nanos;

/// One input to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A request of `cost` units on (`limit`, `aggregate`) from `flow`.
    Admit {
        /// When.
        at: Nanos,
        /// The limit's name.
        limit: String,
        /// The aggregate.
        aggregate: String,
        /// Global rate and local depth.
        rate: KeyLimit,
        /// Cost.
        cost: u64,
        /// Flow (client).
        flow: u64,
    },
    /// A payload from `from`.
    Datagram {
        /// When.
        at: Nanos,
        /// The sender.
        from: PeerId,
        /// The payload.
        bytes: Vec<u8>,
    },
    /// Membership reports `peer` up (`true`) or down.
    Member {
        /// When.
        at: Nanos,
        /// Which peer.
        peer: PeerId,
        /// Up or down.
        up: bool,
    },
    /// The node's timer fires.
    Timer {
        /// When.
        at: Nanos,
    },
}

/// One thing the node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A decision: admitted, and the headroom reported.
    Verdict {
        /// Admitted.
        allowed: bool,
        /// Approximate units left.
        headroom: u64,
    },
    /// A refused request (too many keys).
    Refused,
    /// A payload sent to `to`.
    Transmit {
        /// The peer.
        to: PeerId,
        /// The payload.
        bytes: Vec<u8>,
    },
}

impl Input {
    /// When it happens.
    pub fn at(&self) -> Nanos {
        match self {
            Input::Admit { at, .. }
            | Input::Datagram { at, .. }
            | Input::Member { at, .. }
            | Input::Timer { at } => *at,
        }
    }

    /// For an [`Input::Admit`], the decision of `keys` (a node's key
    /// table, as the request path reaches it); `None` for other inputs.
    pub fn decide(&self, keys: &Keys) -> Option<Output> {
        let Input::Admit {
            at,
            limit,
            aggregate,
            rate,
            cost,
            flow,
        } = self
        else {
            return None;
        };
        let key = KeyRef { limit, aggregate };
        Some(match keys.admit(*at, key, *rate, *cost, *flow) {
            Ok(a) => Output::Verdict {
                allowed: a.allowed,
                headroom: a.headroom,
            },
            Err(_) => Output::Refused,
        })
    }
}

/// Hands every queued payload of `node` to `send`, in order.
pub fn drain(node: &mut Node, now: Nanos, buf: &mut Vec<u8>, mut send: impl FnMut(PeerId, &[u8])) {
    while let Some(to) = node.poll_transmit(now, buf) {
        send(to, buf);
    }
}

/// Feeds `trace` to `node` in order (a timer input runs the interval step
/// only if it is due, as a real timer would) and returns what it did.
pub fn replay(node: &mut Node, trace: &[Input]) -> Vec<Output> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for input in trace {
        match input {
            Input::Admit { .. } => out.extend(input.decide(node.keys())),
            Input::Datagram { at, from, bytes } => {
                let _ = node.handle_datagram(*at, *from, bytes);
            }
            Input::Member { at, peer, up } => {
                if *up {
                    node.peer_up(*at, *peer);
                } else {
                    node.peer_down(*at, *peer);
                }
            }
            Input::Timer { at } => node.handle_timeout(*at),
        }
        let now = input.at();
        drain(node, now, &mut buf, |to, bytes| {
            out.push(Output::Transmit {
                to,
                bytes: bytes.to_vec(),
            })
        });
    }
    out
}
