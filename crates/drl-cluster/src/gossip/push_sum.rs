//! Push-sum gossip for a changing sum of per-node values.
//!
//! Every node holds a mass `(s, w)`. Node `i` contributes its current local
//! value `x_i` by adding the change `x_i - x_i_old` to `s` whenever the value
//! changes. Initially `w = 1` at every node, so `Σ w = n` and
//! `n · s/w → Σ x` at every node as mass mixes. Each round a node splits its
//! mass into `branching + 1` equal shares, keeps one and sends one to each of
//! `branching` distinct random peers.
//!
//! Lost messages destroy mass. Three policies ([`LossCompensation`]):
//! * `None`: lost mass is gone (for comparison only);
//! * `ScaleBySeqGap` (the paper, §4.2): each message carries a per-link
//!   sequence number; when `k` messages were missed the receiver scales the
//!   newest one by `k + 1`, assuming the missed ones carried about as much;
//! * `Cumulative`: each message carries the running totals sent on its link,
//!   and the receiver adds the difference to what it last applied. A later
//!   delivery thus carries every lost share exactly: mass is conserved under
//!   any loss pattern (once a link delivers again).

use std::collections::BTreeMap;

use rand::Rng;
use rand::seq::index::sample;

use super::NodeId;

/// How a receiver makes up for lost gossip messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LossCompensation {
    /// No compensation: lost mass is lost.
    None,
    /// The paper's rule: scale the newest update by the number of messages
    /// it stands for (gap in sequence numbers plus one). Approximate: under
    /// sustained loss in both directions weight leaks and estimates drift
    /// (see the tests).
    ScaleBySeqGap,
    /// Running totals per link: exact mass conservation (the default).
    #[default]
    Cumulative,
}

/// One push-sum message. Plain data; a wire codec can be added later.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GossipMsg {
    /// Per (sender, receiver) link sequence number, starting at 1.
    pub seq: u64,
    /// The value share `s` (or, in `Cumulative` mode, the running total of
    /// value shares sent on this link).
    pub value: f64,
    /// The weight share `w` (or its running total in `Cumulative` mode).
    pub weight: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct LinkOut {
    seq: u64,
    cum_value: f64,
    cum_weight: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct LinkIn {
    seq: u64,
    cum_value: f64,
    cum_weight: f64,
}

/// Push-sum state of one node.
#[derive(Debug, Clone)]
pub struct PushSum {
    me: NodeId,
    n: u32,
    branching: u32,
    mode: LossCompensation,
    s: f64,
    w: f64,
    local: f64,
    /// The part of `s` that is this node's own recent changes, not yet
    /// mixed: every change of the local value is added here as to `s`,
    /// and divided as `s` is when shares leave (see
    /// [`PushSum::remote_estimate`]).
    home: f64,
    out: BTreeMap<NodeId, LinkOut>,
    inbound: BTreeMap<NodeId, LinkIn>,
}

impl PushSum {
    /// Node `me` of `n` nodes (ids `0..n`), pushing to `branching` peers per
    /// round (clamped to `1..=n-1`).
    pub fn new(me: NodeId, n: u32, branching: u32, mode: LossCompensation) -> Self {
        let n = n.max(1);
        Self {
            me,
            n,
            branching: branching.clamp(1, (n - 1).max(1)),
            mode,
            s: 0.0,
            w: 1.0,
            local: 0.0,
            home: 0.0,
            out: BTreeMap::new(),
            inbound: BTreeMap::new(),
        }
    }

    /// Sets this node's local value (folding the change into its mass).
    pub fn set_local(&mut self, value: f64) {
        if value.is_finite() {
            self.s += value - self.local;
            self.home += value - self.local;
            self.local = value;
        }
    }

    /// This node's local value.
    pub fn local(&self) -> f64 {
        self.local
    }

    /// Current mass `(s, w)` held by this node.
    pub fn mass(&self) -> (f64, f64) {
        (self.s, self.w)
    }

    /// Estimate of the sum of all nodes' local values.
    pub fn sum_estimate(&self) -> f64 {
        if self.n == 1 {
            return self.local;
        }
        if self.w <= 1e-12 {
            // All weight left with in-flight messages: fall back to what we
            // know (our own value as the average).
            return self.local * self.n as f64;
        }
        self.n as f64 * self.s / self.w
    }

    /// Estimate of the sum of the *other* nodes' values, never negative.
    ///
    /// Not `sum_estimate() - local`: `n s / w` multiplies everything the
    /// node holds by `n / w`, also the change of its own value it has just
    /// folded into `s`, before any of it has mixed. With thousands of nodes
    /// and demand at a few of them, a node holds about `Σx / n` of mixed
    /// mass, so one drop of its own value by more than that made `s`
    /// negative, the estimate of the others 0, and the node took the whole
    /// limit (Figure 8 at 5,000 limiters). So the unmixed own part, `home`,
    /// counts at face value: the rest, `s - home`, is the node's sample of
    /// the mixed mass, scaled by `n / w`; then the own part is added and the
    /// own value taken off. Once mixed (`home` decays by the fan-out each
    /// round) this is `n s / w - local` again.
    pub fn remote_estimate(&self) -> f64 {
        if self.n == 1 {
            return 0.0;
        }
        if self.w <= 1e-12 {
            return (self.sum_estimate() - self.local).max(0.0);
        }
        let mixed = self.n as f64 * (self.s - self.home) / self.w;
        (mixed + self.home - self.local).max(0.0)
    }

    /// One gossip round: picks `branching` distinct peers with `rng` and
    /// returns the messages to send (empty when alone).
    pub fn round<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Vec<(NodeId, GossipMsg)> {
        if self.n <= 1 {
            return Vec::new();
        }
        let others = (self.n - 1) as usize;
        let k = (self.branching as usize).min(others);
        let mut picks: Vec<NodeId> = sample(rng, others, k)
            .into_iter()
            .map(|i| {
                let i = i as NodeId;
                if i >= self.me { i + 1 } else { i }
            })
            .collect();
        picks.sort_unstable();
        let mut out = Vec::with_capacity(picks.len());
        self.round_to(&picks, |to, m| out.push((to, m)));
        out
    }

    /// Sets the number of nodes the sum is taken over (the live members of
    /// a cluster whose membership changes; at least 1).
    pub fn set_nodes(&mut self, n: u32) {
        self.n = n.max(1);
    }

    /// One gossip round towards peers chosen by the caller (distinct, not
    /// this node): splits the mass into `targets.len() + 1` equal shares,
    /// keeps one and hands one message per target to `send`. Nothing
    /// happens with no target.
    pub fn round_to(&mut self, targets: &[NodeId], mut send: impl FnMut(NodeId, GossipMsg)) {
        if targets.is_empty() {
            return;
        }
        let k = targets.len() as f64 + 1.0;
        let share_s = self.s / k;
        let share_w = self.w / k;
        self.s = share_s;
        self.w = share_w;
        self.home /= k;
        for &to in targets {
            let link = self.out.entry(to).or_default();
            link.seq += 1;
            link.cum_value += share_s;
            link.cum_weight += share_w;
            let msg = match self.mode {
                LossCompensation::Cumulative => GossipMsg {
                    seq: link.seq,
                    value: link.cum_value,
                    weight: link.cum_weight,
                },
                _ => GossipMsg {
                    seq: link.seq,
                    value: share_s,
                    weight: share_w,
                },
            };
            send(to, msg);
        }
    }

    /// Forgets both links with `peer` (it restarted): running totals start again from zero on both sides, so a new
    /// incarnation's first share is not taken for a replay, nor the old
    /// totals for a windfall. Mass in flight on the old links is lost.
    pub fn forget(&mut self, peer: NodeId) {
        self.out.remove(&peer);
        self.inbound.remove(&peer);
    }

    /// Applies a message received from `from`. Stale or duplicate messages
    /// (sequence number not above the last applied one) are ignored; so are
    /// messages with non-finite fields.
    pub fn receive(&mut self, from: NodeId, msg: GossipMsg) {
        if !msg.value.is_finite() || !msg.weight.is_finite() || msg.weight < 0.0 {
            return;
        }
        let link = self.inbound.entry(from).or_default();
        if msg.seq <= link.seq {
            return;
        }
        let gap = msg.seq - link.seq - 1;
        link.seq = msg.seq;
        match self.mode {
            LossCompensation::None => {
                self.s += msg.value;
                self.w += msg.weight;
            }
            LossCompensation::ScaleBySeqGap => {
                let k = (gap + 1) as f64;
                self.s += msg.value * k;
                self.w += msg.weight * k;
            }
            LossCompensation::Cumulative => {
                self.s += msg.value - link.cum_value;
                self.w += msg.weight - link.cum_weight;
                link.cum_value = msg.value;
                link.cum_weight = msg.weight;
            }
        }
    }

    /// Mass sent to `to` that `to` has not applied yet, given `to`'s state
    /// (only meaningful in `Cumulative` mode; used by tests and audits).
    pub fn unapplied_towards(&self, to: &PushSum) -> (f64, f64) {
        let sent = self.out.get(&to.me).copied().unwrap_or_default();
        let got = to.inbound.get(&self.me).copied().unwrap_or_default();
        (
            sent.cum_value - got.cum_value,
            sent.cum_weight - got.cum_weight,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Runs `rounds` synchronous rounds; `lose(round, from, to)` decides loss.
    fn simulate(
        values: &[f64],
        branching: u32,
        mode: LossCompensation,
        rounds: usize,
        mut lose: impl FnMut(usize, NodeId, NodeId) -> bool,
    ) -> Vec<PushSum> {
        let n = values.len() as u32;
        let mut nodes: Vec<PushSum> = (0..n)
            .map(|i| PushSum::new(i, n, branching, mode))
            .collect();
        for (node, v) in nodes.iter_mut().zip(values) {
            node.set_local(*v);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for r in 0..rounds {
            let mut msgs = Vec::new();
            for (i, node) in nodes.iter_mut().enumerate() {
                for (to, m) in node.round(&mut rng) {
                    msgs.push((i as NodeId, to, m));
                }
            }
            for (from, to, m) in msgs {
                if !lose(r, from, to) {
                    nodes[to as usize].receive(from, m);
                }
            }
        }
        nodes
    }

    #[test]
    fn converges_to_the_sum_without_loss() {
        let values = [3.0, 7.0, 0.0, 10.0, 5.0];
        let nodes = simulate(&values, 1, LossCompensation::None, 40, |_, _, _| false);
        for n in &nodes {
            assert!(
                (n.sum_estimate() - 25.0).abs() < 0.01,
                "{}",
                n.sum_estimate()
            );
        }
    }

    #[test]
    fn tracks_a_changed_local_value() {
        let n = 3;
        let mut nodes: Vec<PushSum> = (0..n)
            .map(|i| PushSum::new(i, n, 2, LossCompensation::Cumulative))
            .collect();
        nodes[0].set_local(4.0);
        nodes[1].set_local(4.0);
        nodes[2].set_local(4.0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut step = |nodes: &mut Vec<PushSum>| {
            let mut msgs = Vec::new();
            for (i, node) in nodes.iter_mut().enumerate() {
                for (to, m) in node.round(&mut rng) {
                    msgs.push((i as NodeId, to, m));
                }
            }
            for (from, to, m) in msgs {
                nodes[to as usize].receive(from, m);
            }
        };
        for _ in 0..20 {
            step(&mut nodes);
        }
        assert!((nodes[2].sum_estimate() - 12.0).abs() < 1e-6);
        nodes[0].set_local(10.0);
        for _ in 0..30 {
            step(&mut nodes);
        }
        for node in &nodes {
            assert!((node.sum_estimate() - 18.0).abs() < 1e-3);
            assert!((node.remote_estimate() - (18.0 - node.local())).abs() < 1e-3);
        }
    }

    #[test]
    fn paper_compensation_restores_a_lost_constant_stream() {
        // Two nodes at steady state exchange equal shares; losing every
        // other message from 0 to 1 is made up by the doubled newest one.
        let nodes = simulate(
            &[6.0, 2.0],
            1,
            LossCompensation::ScaleBySeqGap,
            60,
            |r, f, _| f == 0 && r % 2 == 1 && r < 59,
        );
        for node in &nodes {
            assert!(
                (node.sum_estimate() - 8.0).abs() < 0.8,
                "{}",
                node.sum_estimate()
            );
        }
        let lossy = simulate(&[6.0, 2.0], 1, LossCompensation::None, 60, |r, f, _| {
            f == 0 && r % 2 == 1 && r < 59
        });
        let total_w: f64 = lossy.iter().map(|n| n.mass().1).sum();
        assert!(
            total_w < 1.0,
            "without compensation weight leaks: {total_w}"
        );
    }

    #[test]
    fn stale_and_duplicate_messages_are_ignored() {
        let mut a = PushSum::new(0, 2, 1, LossCompensation::ScaleBySeqGap);
        let m2 = GossipMsg {
            seq: 2,
            value: 1.0,
            weight: 0.5,
        };
        a.receive(1, m2);
        let after = a.mass();
        a.receive(1, m2);
        a.receive(
            1,
            GossipMsg {
                seq: 1,
                value: 9.0,
                weight: 9.0,
            },
        );
        a.receive(
            1,
            GossipMsg {
                seq: 3,
                value: f64::NAN,
                weight: 0.1,
            },
        );
        assert_eq!(a.mass(), after);
        // seq 2 after nothing: one message missed, so counted twice.
        assert_eq!(after, (2.0, 2.0));
    }

    /// Sustained loss in both directions: the paper's scale-by-gap rule
    /// only approximates lost shares (both sides shrink when both lose), so
    /// weight leaks round after round and the sum estimate drifts away;
    /// cumulative totals keep it exact.
    #[test]
    fn paper_compensation_leaks_under_sustained_loss_cumulative_does_not() {
        let run = |mode| {
            let mut nodes: Vec<PushSum> = (0..2).map(|i| PushSum::new(i, 2, 1, mode)).collect();
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let mut lr = ChaCha8Rng::seed_from_u64(2);
            for _ in 0..1000 {
                nodes[0].set_local(3.0);
                nodes[1].set_local(7.0);
                let mut msgs = Vec::new();
                for (i, node) in nodes.iter_mut().enumerate() {
                    for (to, m) in node.round(&mut rng) {
                        msgs.push((i as NodeId, to, m));
                    }
                }
                for (f, t, m) in msgs {
                    if lr.random_range(0..100) >= 20 {
                        nodes[t as usize].receive(f, m);
                    }
                }
            }
            nodes
        };
        let paper = run(LossCompensation::ScaleBySeqGap);
        let w: f64 = paper.iter().map(|n| n.mass().1).sum();
        assert!(w < 0.5, "paper mode kept weight {w}");
        let cum = run(LossCompensation::Cumulative);
        for n in &cum {
            assert!(
                (n.sum_estimate() - 10.0).abs() < 1e-6,
                "{}",
                n.sum_estimate()
            );
        }
    }

    /// Figure 8 at 5,000 limiters in miniature: 2,000 nodes, demand at 10.
    /// Once mixed, every node holds about `Σx / n` of value mass; an
    /// active node whose value then halves must still see the other nine,
    /// not 0 (which made it take the whole limit). `n s / w - local` gives
    /// `2,000 × (0.005 - 0.5) - 0.5`, clamped to 0.
    #[test]
    fn an_own_drop_at_scale_keeps_the_others_in_view() {
        let n = 2_000usize;
        let mut values = vec![0.0; n];
        for v in values.iter_mut().take(10) {
            *v = 1.0;
        }
        let mut nodes = simulate(&values, 3, LossCompensation::Cumulative, 60, |_, _, _| {
            false
        });
        let mixed = nodes[0].remote_estimate();
        assert!((mixed - 9.0).abs() < 0.05, "mixed {mixed}");
        nodes[0].set_local(0.5);
        let remote = nodes[0].remote_estimate();
        assert!((remote - 9.0).abs() < 0.05, "remote {remote}");
        // A rise, at a node that has not heard of node 0's drop yet: the
        // nine others it last knew, not 2,000 x its own rise.
        nodes[1].set_local(2.0);
        let remote = nodes[1].remote_estimate();
        assert!((remote - 9.0).abs() < 0.05, "remote {remote}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// In cumulative mode, mass held plus mass in flight equals the sum
        /// of local values, whatever messages are lost.
        #[test]
        fn cumulative_mode_conserves_mass_under_loss(
            values in proptest::collection::vec(0.0f64..1e6, 2..8),
            branching in 1u32..4,
            rounds in 1usize..40,
            loss_seed in any::<u64>(),
            loss_pct in 0u64..90,
        ) {
            let mut lr = ChaCha8Rng::seed_from_u64(loss_seed);
            let nodes = simulate(&values, branching, LossCompensation::Cumulative, rounds,
                |_, _, _| lr.random_range(0..100) < loss_pct);
            let n = nodes.len();
            let mut s: f64 = nodes.iter().map(|x| x.mass().0).sum();
            let mut w: f64 = nodes.iter().map(|x| x.mass().1).sum();
            for i in 0..n {
                for j in 0..n {
                    if i != j {
                        let (ds, dw) = nodes[i].unapplied_towards(&nodes[j]);
                        s += ds;
                        w += dw;
                    }
                }
            }
            let total: f64 = values.iter().sum();
            prop_assert!((s - total).abs() <= 1e-6 * total.max(1.0), "s {} total {}", s, total);
            prop_assert!((w - n as f64).abs() <= 1e-9 * n as f64, "w {}", w);
        }

        /// Once mixed, a change of a node's own value, of any size, leaves
        /// its estimate of the others' sum where it was: the change is
        /// counted at face value, not multiplied by `n / w`.
        #[test]
        fn an_own_change_does_not_move_the_estimate_of_the_others(
            values in proptest::collection::vec(0.0f64..1000.0, 2..40),
            who in any::<proptest::sample::Index>(),
            new_value in 0.0f64..5000.0,
        ) {
            let mut nodes = simulate(&values, 2, LossCompensation::Cumulative, 200,
                |_, _, _| false);
            let i = who.index(values.len());
            let others: f64 = values.iter().sum::<f64>() - values[i];
            nodes[i].set_local(new_value);
            let tol = 1e-6 * values.iter().sum::<f64>().max(1.0) * values.len() as f64;
            prop_assert!((nodes[i].remote_estimate() - others).abs() <= tol,
                "remote {} others {}", nodes[i].remote_estimate(), others);
        }

        /// After lossy rounds followed by lossless ones, cumulative mode
        /// still converges to the true sum at every node.
        #[test]
        fn cumulative_mode_converges_after_loss(
            values in proptest::collection::vec(0.0f64..1000.0, 2..6),
            loss_seed in any::<u64>(),
        ) {
            let mut lr = ChaCha8Rng::seed_from_u64(loss_seed);
            let nodes = simulate(&values, 2, LossCompensation::Cumulative, 120,
                |r, _, _| r < 30 && lr.random_range(0..100) < 50);
            let total: f64 = values.iter().sum();
            for node in &nodes {
                prop_assert!((node.sum_estimate() - total).abs() <= 1e-3 * total.max(1.0));
            }
        }
    }
}
