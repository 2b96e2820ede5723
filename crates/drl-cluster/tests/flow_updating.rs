//! Flow Updating's invariants under arbitrary loss and departures.

use drl_cluster::gossip::FlowUpdating;
use proptest::prelude::*;

/// Ring plus chords of `n` nodes; returns each node's neighbours.
fn graph(n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let mut v: Vec<u32> = [1, n - 1, 2, n - 2]
                .iter()
                .map(|d| ((i + d) % n) as u32)
                .filter(|&j| j as usize != i)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        })
        .collect()
}

/// One round: every node averages, then sends to every neighbour; the
/// message `k` of the round is lost when `lost(k)`.
fn round(nodes: &mut [FlowUpdating], nbrs: &[Vec<u32>], mut lost: impl FnMut(usize) -> bool) {
    for (i, n) in nodes.iter_mut().enumerate() {
        n.average(&nbrs[i], &[]);
    }
    let mut msgs = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for &j in &nbrs[i] {
            msgs.push((i as u32, j, n.message_to(j)));
        }
    }
    for (k, (from, to, m)) in msgs.into_iter().enumerate() {
        if !lost(k) {
            nodes[to as usize].receive(from, m);
        }
    }
}

proptest! {
    /// Mass conservation: whatever was lost, once one message per link is
    /// delivered (flows agree on both ends of every link) the
    /// estimates sum to the values; and after the nodes in `dead` are
    /// forgotten by everyone, the survivors' estimates sum to the
    /// survivors' values.
    #[test]
    fn estimates_sum_to_values(
        values in proptest::collection::vec(0.0f64..1000.0, 4..24),
        loss in proptest::collection::vec(any::<bool>(), 64..512),
        rounds in 1usize..30,
        dead in 0usize..3,
    ) {
        let n = values.len();
        let nbrs = graph(n);
        let mut nodes: Vec<FlowUpdating> = values.iter().map(|&v| {
            let mut f = FlowUpdating::new();
            f.set_local(v);
            f
        }).collect();
        for _ in 0..rounds {
            round(&mut nodes, &nbrs, |k| loss[k % loss.len()]);
        }
        // One message per link, lower id to higher, no averaging: the
        // flows of every link agree.
        for i in 0..n {
            for &j in nbrs[i].iter().filter(|&&j| j as usize > i) {
                let m = nodes[i].message_to(j);
                nodes[j as usize].receive(i as u32, m);
            }
        }
        let total: f64 = values.iter().sum();
        let est: f64 = nodes.iter().map(|f| f.estimate()).sum();
        prop_assert!((est - total).abs() < 1e-6 * total.max(1.0), "{est} vs {total}");
        for d in 0..dead {
            for f in nodes.iter_mut() {
                f.forget(d as u32);
            }
        }
        let own: f64 = values[dead..].iter().sum();
        let left: f64 = nodes[dead..].iter().map(|f| f.estimate()).sum();
        prop_assert!((left - own).abs() < 1e-6 * own.max(1.0), "{left} vs {own}");
    }

    /// Convergence: on a lossless ring with chords, 12 nodes agree on the
    /// mean within 0.1 % in 150 rounds, from any values.
    #[test]
    fn converges_without_loss(values in proptest::collection::vec(1.0f64..1000.0, 12)) {
        let nbrs = graph(12);
        let mut nodes: Vec<FlowUpdating> = values.iter().map(|&v| {
            let mut f = FlowUpdating::new();
            f.set_local(v);
            f
        }).collect();
        for _ in 0..150 {
            round(&mut nodes, &nbrs, |_| false);
        }
        let mean = values.iter().sum::<f64>() / 12.0;
        for f in &nodes {
            prop_assert!((f.estimate() - mean).abs() < 1e-3 * mean, "{} vs {mean}", f.estimate());
        }
    }

    /// Issue 43: two nodes that stop being neighbours (the ring moved as
    /// members came and went) stop sending to each other, and the last
    /// averaging step of one end is never mirrored at the other: the two
    /// copies of their flow disagree, and with them the estimates' sum and
    /// the values' sum. Both ends unwind such a flow, so the sum returns
    /// to the values and every estimate to the mean (kept frozen, the
    /// difference counted for ever: a healed cut at 12 nodes left a third
    /// of the sum missing and FPS admitted 1.2x its limit).
    #[test]
    fn a_link_both_ends_left_is_unwound(
        values in proptest::collection::vec(1.0f64..1000.0, 8..16),
        rounds in 5usize..40,
        jolt in 1.0f64..500.0,
    ) {
        let n = values.len();
        let mut nbrs = graph(n);
        let mut nodes: Vec<FlowUpdating> = values.iter().map(|&v| {
            let mut f = FlowUpdating::new();
            f.set_local(v);
            f
        }).collect();
        for _ in 0..rounds {
            round(&mut nodes, &nbrs, |_| false);
        }
        // Node 0 moves its value and averages once more (its flow to 1
        // changes), then 0 and 1 stop being neighbours: 1 never hears it.
        let v0 = values[0] + jolt;
        nodes[0].set_local(v0);
        nodes[0].average(&nbrs[0], &[]);
        nbrs[0].retain(|&j| j != 1);
        nbrs[1].retain(|&j| j != 0);
        let total = values.iter().sum::<f64>() + jolt;
        let sum = |nodes: &[FlowUpdating]| nodes.iter().map(|f| f.estimate()).sum::<f64>();
        prop_assert!((sum(&nodes) - total).abs() > 1e-6, "the ends disagree");
        for _ in 0..400 {
            round(&mut nodes, &nbrs, |_| false);
        }
        prop_assert!((sum(&nodes) - total).abs() < 1e-6 * total, "{} vs {total}", sum(&nodes));
        let mean = total / n as f64;
        for f in &nodes {
            prop_assert!((f.estimate() - mean).abs() < 1e-3 * mean, "{} vs {mean}", f.estimate());
        }
    }
}
