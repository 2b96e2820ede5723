//! A cluster of sans-IO `cloud_control::Node`s in one test: created fully
//! connected, their datagrams delivered at once. (Each test binary uses
//! a part of it.)
#![allow(dead_code)]

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, Node, PeerId, Settings};
use drl_core::Nanos;

/// One millisecond.
pub const MS: Nanos = 1_000_000;

/// `n` nodes of `algorithm` on `aggregation`, every one up to every other
/// at time 0.
pub fn cluster(algorithm: AlgorithmKind, aggregation: Aggregation, n: u32) -> Vec<Node> {
    cluster_with(
        Settings {
            aggregation,
            ..Settings::new(algorithm, n)
        },
        n,
    )
}

/// `n` nodes with settings `s`, every one up to every other at time 0.
pub fn cluster_with(s: Settings, n: u32) -> Vec<Node> {
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
    deliver_unless(nodes, now, &|_, _| false);
}

/// Delivers every datagram the nodes have to send at `now` unless `cut`
/// says its link (from, to) is down; returns how many were delivered.
pub fn deliver_unless(
    nodes: &mut [Node],
    now: Nanos,
    cut: &dyn Fn(PeerId, PeerId) -> bool,
) -> usize {
    let mut mail = Vec::new();
    let mut buf = Vec::new();
    for n in nodes.iter_mut() {
        while let Some(to) = n.poll_transmit(now, &mut buf) {
            mail.push((n.id(), to, buf.clone()));
        }
    }
    let mut delivered = 0;
    for (from, to, bytes) in mail {
        if !cut(from, to) {
            nodes[to as usize]
                .handle_datagram(now, from, &bytes)
                .unwrap();
            delivered += 1;
        }
    }
    delivered
}
