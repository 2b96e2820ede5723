//! A cluster of sans-IO `cloud_control::Node`s in one test: created fully
//! connected, their datagrams delivered at once.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, Node, Settings};
use drl_core::Nanos;

/// One millisecond.
pub const MS: Nanos = 1_000_000;

/// `n` nodes of `algorithm` on `aggregation`, every one up to every other
/// at time 0.
pub fn cluster(algorithm: AlgorithmKind, aggregation: Aggregation, n: u32) -> Vec<Node> {
    let s = Settings {
        aggregation,
        ..Settings::new(algorithm, n)
    };
    let mut nodes: Vec<Node> = (0..n)
        .map(|i| Node::new(i, s.clone(), i as u64 + 1, 0).unwrap())
        .collect();
    for a in 0..n {
        for b in 0..n {
            nodes[a as usize].peer_up(0, b);
        }
    }
    nodes
}

/// Delivers every datagram the nodes have to send at `now`.
pub fn deliver(nodes: &mut [Node], now: Nanos) {
    let mut mail = Vec::new();
    let mut buf = Vec::new();
    for n in nodes.iter_mut() {
        while let Some(to) = n.poll_transmit(now, &mut buf) {
            mail.push((n.id(), to, buf.clone()));
        }
    }
    for (from, to, bytes) in mail {
        nodes[to as usize]
            .handle_datagram(now, from, &bytes)
            .unwrap();
    }
}
