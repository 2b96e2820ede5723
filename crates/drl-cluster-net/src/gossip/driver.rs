//! [`Driver`]: the sans-IO glue between drl-cluster-net's inputs (membership
//! events, authenticated datagrams, a timer) and drl-cluster's Cloud
//! Control [`Node`].
//!
//! No socket, no clock, no tokio: time is passed in, datagrams are handed
//! over as bytes with the authenticated sender id, and what the node wants
//! sent comes out of [`Driver::drain`] as (address, payload). `store.rs`
//! wraps it in the async node loop; the tests drive several drivers with a
//! manual clock and pass the bytes between them by hand.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use drl_cluster::cloud_control::{DatagramError, Keys, Node, NodeStats, PeerId};
use drl_core::Nanos;

use crate::membership::Event;

/// What the driver counted (the node's own counters are in
/// [`Driver::node_stats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DriverStats {
    /// Payloads handed to `send` by [`Driver::drain`].
    pub sent: u64,
    /// Payloads dropped by [`Driver::drain`] because the peer's address
    /// is not known (it went down between the interval step and the
    /// drain).
    pub unknown_peer: u64,
    /// Gossip payloads the node refused ([`Driver::on_datagram`]
    /// returned an error).
    pub rejected: u64,
}

/// One gossip node's protocol state: drl-cluster's [`Node`] and the
/// peer id -> UDP address map learned from membership.
///
/// Inputs, in any order, with a `now` that never goes backwards:
/// [`Driver::on_membership`], [`Driver::on_datagram`], [`Driver::on_timer`]
/// (when `now` reaches [`Driver::poll_timeout`]). After each, call
/// [`Driver::drain`] to send what the node queued. The request path
/// decides through [`Driver::keys`] (an `Arc`, shared), never through the
/// driver.
#[derive(Debug)]
pub struct Driver {
    node: Node,
    addrs: BTreeMap<PeerId, SocketAddr>,
    buf: Vec<u8>,
    stats: DriverStats,
}

impl Driver {
    /// A driver around `node` (no peer known yet).
    pub fn new(node: Node) -> Self {
        Self {
            node,
            addrs: BTreeMap::new(),
            buf: Vec::with_capacity(drl_cluster::cloud_control::MAX_PAYLOAD),
            stats: DriverStats::default(),
        }
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The key table the request path decides with.
    pub fn keys(&self) -> &Arc<Keys> {
        self.node.keys()
    }

    /// This node's id.
    pub fn id(&self) -> PeerId {
        self.node.id()
    }

    /// The address membership last reported for `peer`, while it is up.
    pub fn address(&self, peer: PeerId) -> Option<SocketAddr> {
        self.addrs.get(&peer).copied()
    }

    /// Nodes counted live at `now`, this one included (up, and heard from
    /// since: see [`Node`]).
    pub fn live(&self, now: Nanos) -> u32 {
        self.node.live(now)
    }

    /// The driver's counters.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The node's counters.
    pub fn node_stats(&self) -> NodeStats {
        self.node.stats()
    }

    /// A membership change at `now`. `Up` records the peer's address and
    /// brings it up; `Down` (a failure, a partition or a graceful leave,
    /// which foca reports as down) takes it down and forgets its address.
    /// Events about this node itself are ignored.
    pub fn on_membership(&mut self, now: Nanos, event: Event) {
        match event {
            Event::Up(id) if id.id != self.node.id() => {
                self.addrs.insert(id.id, id.addr);
                self.node.peer_up(now, id.id);
            }
            Event::Down(id) if id.id != self.node.id() => {
                self.addrs.remove(&id.id);
                self.node.peer_down(now, id.id);
            }
            _ => {}
        }
    }

    /// A gossip payload from `from` (the transport's authenticated sender
    /// id) received at `now`. A payload the node refuses (malformed, other
    /// algorithm or aggregation, claiming to be from this node) changes
    /// nothing and is counted.
    pub fn on_datagram(
        &mut self,
        now: Nanos,
        from: PeerId,
        payload: &[u8],
    ) -> Result<(), DatagramError> {
        let r = self.node.handle_datagram(now, from, payload);
        if r.is_err() {
            self.stats.rejected += 1;
        }
        r
    }

    /// When [`Driver::on_timer`] is next due.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.node.poll_timeout()
    }

    /// The timer at `now`: runs the node's interval step if it is due.
    pub fn on_timer(&mut self, now: Nanos) {
        self.node.handle_timeout(now);
    }

    /// Empties the node's transmit queue at `now`, calling `send` with each
    /// payload and its peer's address. Payloads for a peer without a known
    /// address are skipped and counted ([`DriverStats::unknown_peer`]).
    /// Returns the number of payloads handed to `send`.
    pub fn drain(&mut self, now: Nanos, mut send: impl FnMut(SocketAddr, &[u8])) -> usize {
        let mut n = 0;
        while let Some(to) = self.node.poll_transmit(now, &mut self.buf) {
            match self.addrs.get(&to) {
                Some(addr) => {
                    send(*addr, &self.buf);
                    n += 1;
                }
                None => self.stats.unknown_peer += 1,
            }
        }
        self.stats.sent += n as u64;
        n
    }
}

#[cfg(test)]
mod tests {
    use drl_cluster::alloc::AlgorithmKind;
    use drl_cluster::cloud_control::{Settings, wire};

    use super::*;
    use crate::membership::NodeIdent;

    fn ident(id: u32) -> NodeIdent {
        NodeIdent {
            id,
            addr: SocketAddr::from(([127, 0, 0, id as u8], 7946)),
            generation: 1,
        }
    }

    fn driver(id: u32) -> Driver {
        Driver::new(Node::new(id, Settings::new(AlgorithmKind::Grd, 3), id as u64, 0).unwrap())
    }

    #[test]
    fn membership_maps_to_peer_events_and_addresses() {
        let mut d = driver(1);
        d.on_membership(0, Event::Up(ident(1)));
        assert_eq!(d.address(1), None, "events about itself are ignored");
        d.on_membership(0, Event::Up(ident(2)));
        assert_eq!(d.address(2), Some(ident(2).addr));
        assert_eq!(d.node().peers_up().collect::<Vec<_>>(), vec![2]);
        // Flow Updating (the default) counts the members up.
        assert_eq!(d.live(0), 2, "up, counted live");
        d.on_membership(1, Event::Down(ident(2)));
        assert_eq!(d.address(2), None);
        assert_eq!(d.node().peers_up().count(), 0);
    }

    #[test]
    fn heartbeats_go_to_known_addresses_and_unknown_peers_are_counted() {
        let mut d = driver(1);
        d.on_membership(0, Event::Up(ident(2)));
        d.on_membership(0, Event::Up(ident(3)));
        let due = d.poll_timeout().unwrap();
        d.on_timer(due);
        let mut out = Vec::new();
        assert_eq!(d.drain(due, |a, p| out.push((a, p.to_vec()))), 2);
        assert_eq!(
            out.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            vec![ident(2).addr, ident(3).addr]
        );
        // No key: each payload is a heartbeat (the head alone).
        assert!(out.iter().all(|(_, p)| p.len() == wire::HEAD_LEN));
        // A peer lost between the step and the drain: its payload is
        // skipped and counted.
        let due = d.poll_timeout().unwrap();
        d.on_timer(due);
        d.on_membership(due, Event::Down(ident(3)));
        out.clear();
        assert_eq!(d.drain(due, |a, p| out.push((a, p.to_vec()))), 1);
        assert_eq!(d.stats().unknown_peer, 1);
        assert_eq!(d.stats().sent, 3);
    }

    #[test]
    fn refused_payloads_are_counted() {
        // A real heartbeat from node 2.
        let mut two = driver(2);
        two.on_membership(0, Event::Up(ident(1)));
        let due = two.poll_timeout().unwrap();
        two.on_timer(due);
        let mut heartbeat = Vec::new();
        two.drain(due, |_, p| heartbeat = p.to_vec());
        let mut d = driver(1);
        assert!(d.on_datagram(due, 2, b"\x07junk").is_err());
        assert!(d.on_datagram(due, 1, &heartbeat).is_err(), "from itself");
        assert_eq!(d.stats().rejected, 2);
        assert!(d.on_datagram(due, 2, &heartbeat).is_ok());
        assert_eq!(d.stats().rejected, 2);
    }
}
