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

use super::node_id::NodeId;

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
    /// Peers whose link was taken back ([`PushSum::reclaim`]), with the
    /// mass that took back: given back if the peer speaks again.
    reclaimed: BTreeMap<NodeId, (f64, f64)>,
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
            reclaimed: BTreeMap::new(),
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

    /// Forgets both links with `peer` (it restarted): running totals start
    /// again from zero on both sides, so a new incarnation's first share is
    /// not taken for a replay, nor the old totals for a windfall. The old
    /// incarnation is gone with its mass, so the link is first taken back
    /// ([`PushSum::reclaim`]) unless it already was, and stays taken back.
    pub fn forget(&mut self, peer: NodeId) {
        self.reclaim(peer);
        self.reclaimed.remove(&peer);
        self.out.remove(&peer);
        self.inbound.remove(&peer);
    }

    /// Takes back the link with `peer` (membership has it down): adds to
    /// this node's mass what it sent to `peer` less what it applied from
    /// it, in value and weight, so that the link's net flow is undone.
    ///
    /// In cumulative mode this makes up exactly for a dead peer: once every
    /// survivor has taken back its link, the survivors hold the sum of
    /// their own values and weight equal to their number, as if the dead
    /// node had never been there (whatever it held, whatever was in flight
    /// either way, whatever it relayed between them). Without it the mass a
    /// dead node held is lost for good and every estimate after it is off
    /// (paper §5.6 with push-sum). A cut with both ends taking back is
    /// neutral overall (the net flows of the two ends cancel), and each
    /// side then sums its own values. A wrong suspicion is undone: the
    /// next new message from `peer` gives the mass back first
    /// ([`PushSum::receive`]), and the running totals carry on. Nothing
    /// happens twice, nor in the other modes (their links keep no totals).
    pub fn reclaim(&mut self, peer: NodeId) {
        if self.mode != LossCompensation::Cumulative || self.reclaimed.contains_key(&peer) {
            return;
        }
        let sent = self.out.get(&peer).copied().unwrap_or_default();
        let got = self.inbound.get(&peer).copied().unwrap_or_default();
        let ds = sent.cum_value - got.cum_value;
        let dw = sent.cum_weight - got.cum_weight;
        self.s += ds;
        self.w += dw;
        self.reclaimed.insert(peer, (ds, dw));
    }

    /// Gives back the mass [`PushSum::reclaim`] took back for `peer` (it is
    /// up again: a wrong suspicion, a healed cut); the link's running
    /// totals carry on. Nothing happens if the link was not taken back.
    /// Membership's word is needed as well as the peer's next share: with
    /// fixed links a peer may never push to this node, and the mass taken
    /// back would stay counted twice.
    pub fn restore(&mut self, peer: NodeId) {
        if let Some((ds, dw)) = self.reclaimed.remove(&peer) {
            self.s -= ds;
            self.w -= dw;
        }
    }

    /// Whether the link with `peer` is taken back now.
    pub fn is_reclaimed(&self, peer: NodeId) -> bool {
        self.reclaimed.contains_key(&peer)
    }

    /// Applies a message received from `from`. Stale or duplicate messages
    /// (sequence number not above the last applied one) are ignored; so are
    /// messages with non-finite fields. A negative weight is taken: a node
    /// that took back a link ([`PushSum::reclaim`]) may hold negative
    /// weight for a while (the survivors' total is still their number),
    /// and its shares and running totals are then negative too.
    pub fn receive(&mut self, from: NodeId, msg: GossipMsg) {
        if !msg.value.is_finite() || !msg.weight.is_finite() {
            return;
        }
        if msg.seq <= self.inbound.get(&from).map_or(0, |l| l.seq) {
            return;
        }
        // It speaks again (a wrong suspicion, a healed cut): the link
        // carries on, so the mass taken back goes back.
        self.restore(from);
        let link = self.inbound.entry(from).or_default();
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

    /// A node that relayed weight from a peer, then took back its link to
    /// it, holds negative weight; its next share to a new peer carries a
    /// negative running total, which the receiver applies (refusing it
    /// cut the node off, its payloads counted malformed), and the
    /// survivors' weight stays their number.
    #[test]
    fn a_link_taken_back_can_leave_negative_weight_and_it_still_flows() {
        let c = LossCompensation::Cumulative;
        let mut ns: Vec<PushSum> = (0..5).map(|i| PushSum::new(i, 5, 3, c)).collect();
        // 4 pushes to 0 twice (0.5, then 0.25); 0 pushes to 1 and 2.
        let push = |ns: &mut Vec<PushSum>, from: NodeId, to: &[NodeId]| {
            let mut sent = Vec::new();
            ns[from as usize].round_to(to, |t, m| sent.push((t, m)));
            for (t, m) in sent {
                ns[t as usize].receive(from, m);
            }
        };
        push(&mut ns, 4, &[0]);
        push(&mut ns, 4, &[0]);
        push(&mut ns, 0, &[1, 2]);
        // 4 is gone: every survivor takes its link back.
        for n in &mut ns[..4] {
            n.forget(4);
        }
        assert!(ns[0].mass().1 < 0.0, "{:?}", ns[0].mass());
        let mut first = None;
        ns[0].round_to(&[3], |_, m| first = Some(m));
        let m = first.unwrap();
        assert!(m.weight < 0.0, "{m:?}");
        let before = ns[3].mass().1;
        ns[3].receive(0, m);
        assert!((ns[3].mass().1 - (before + m.weight)).abs() < 1e-12);
        let w: f64 = ns[..4].iter().map(|n| n.mass().1).sum();
        assert!((w - 4.0).abs() < 1e-12, "{w}");
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

    /// One synchronous round among the nodes `alive` says are running:
    /// each pushes to `branching` random running peers (when it has any);
    /// `lose(from, to)` drops a message.
    fn step(
        nodes: &mut [PushSum],
        alive: &[bool],
        branching: usize,
        rng: &mut ChaCha8Rng,
        mut lose: impl FnMut(NodeId, NodeId) -> bool,
    ) {
        let mut msgs = Vec::new();
        for i in 0..nodes.len() {
            if !alive[i] {
                continue;
            }
            let peers: Vec<NodeId> = (0..nodes.len() as NodeId)
                .filter(|&j| j as usize != i && alive[j as usize])
                .collect();
            if peers.is_empty() {
                continue;
            }
            let k = branching.min(peers.len());
            let picks = sample(rng, peers.len(), k);
            let mut targets: Vec<NodeId> = picks.into_iter().map(|p| peers[p]).collect();
            targets.sort_unstable();
            nodes[i].round_to(&targets, |to, m| msgs.push((i as NodeId, to, m)));
        }
        for (from, to, m) in msgs {
            if alive[to as usize] && !lose(from, to) {
                nodes[to as usize].receive(from, m);
            }
        }
    }

    /// Mass held by `nodes[i]` for `i` in `among`, plus what is in flight
    /// between them.
    fn mass_among(nodes: &[PushSum], among: &[usize]) -> (f64, f64) {
        let mut s: f64 = among.iter().map(|&i| nodes[i].mass().0).sum();
        let mut w: f64 = among.iter().map(|&i| nodes[i].mass().1).sum();
        for &i in among {
            for &j in among {
                if i != j {
                    let (ds, dw) = nodes[i].unapplied_towards(&nodes[j]);
                    s += ds;
                    w += dw;
                }
            }
        }
        (s, w)
    }

    /// Paper §5.6 with push-sum: one of three limiters dies holding mass;
    /// once the survivors take back their links with it, their estimates
    /// settle on the sum of their own values (without `reclaim`, on
    /// whatever the dead node's share of the mass left them).
    #[test]
    fn survivors_that_reclaim_a_dead_peer_sum_their_own_values() {
        let values = [4.0, 6.0, 30.0];
        let mut nodes: Vec<PushSum> = (0..3)
            .map(|i| PushSum::new(i, 3, 1, LossCompensation::Cumulative))
            .collect();
        for (n, v) in nodes.iter_mut().zip(values) {
            n.set_local(v);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut alive = [true; 3];
        for _ in 0..30 {
            step(&mut nodes, &alive, 1, &mut rng, |_, _| false);
        }
        alive[2] = false;
        // Shares pushed before detection go nowhere.
        for _ in 0..3 {
            step(&mut nodes, &[true, true, true], 1, &mut rng, |_, to| {
                to == 2
            });
        }
        let mut without = nodes.clone();
        for i in 0..2 {
            nodes[i].reclaim(2);
            nodes[i].reclaim(2); // twice is once
            nodes[i].set_nodes(2);
            without[i].set_nodes(2);
        }
        let (s, w) = mass_among(&nodes, &[0, 1]);
        assert!((s - 10.0).abs() < 1e-9, "s {s}");
        assert!((w - 2.0).abs() < 1e-12, "w {w}");
        for _ in 0..40 {
            step(&mut nodes, &alive, 1, &mut rng, |_, _| false);
            step(&mut without, &alive, 1, &mut rng, |_, _| false);
        }
        for i in 0..2 {
            let est = nodes[i].sum_estimate();
            assert!((est - 10.0).abs() < 1e-6, "node {i}: {est}");
            let off = without[i].sum_estimate();
            assert!((off - 10.0).abs() > 1.0, "node {i} without reclaim: {off}");
        }
    }

    /// A wrong suspicion of a peer that never pushes to this node (its
    /// fixed links do not include it): membership reporting it up again
    /// gives the mass back, and the mass is conserved.
    #[test]
    fn a_peer_back_up_gets_its_link_back_without_speaking() {
        let mut a = PushSum::new(0, 2, 1, LossCompensation::Cumulative);
        let mut b = PushSum::new(1, 2, 1, LossCompensation::Cumulative);
        a.set_local(10.0);
        b.set_local(4.0);
        for _ in 0..5 {
            // Only a pushes to b.
            let mut msgs = Vec::new();
            a.round_to(&[1], |to, m| msgs.push((to, m)));
            for (_, m) in msgs {
                b.receive(0, m);
            }
        }
        a.reclaim(1);
        assert!(a.is_reclaimed(1));
        let (s, w) = (a.mass().0 + b.mass().0, a.mass().1 + b.mass().1);
        assert!(
            s > 14.0 + 1.0 && w > 2.0 + 0.1,
            "counted twice while down: {s} {w}"
        );
        a.restore(1);
        a.restore(1); // once is all
        let (s, w) = (a.mass().0 + b.mass().0, a.mass().1 + b.mass().1);
        assert!(
            (s - 14.0).abs() < 1e-9 && (w - 2.0).abs() < 1e-12,
            "{s} {w}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A dead peer reclaimed by every survivor, whatever was lost or in
        /// flight before: the survivors' mass is exactly their own values
        /// and their number.
        #[test]
        fn reclaiming_a_dead_peer_conserves_the_survivors_mass(
            values in proptest::collection::vec(0.0f64..1e4, 3..8),
            dead in any::<proptest::sample::Index>(),
            branching in 1usize..3,
            rounds in 0usize..30,
            loss_seed in any::<u64>(),
            loss_pct in 0u64..60,
        ) {
            let n = values.len();
            let mut nodes: Vec<PushSum> = (0..n as NodeId)
                .map(|i| PushSum::new(i, n as u32, branching as u32, LossCompensation::Cumulative))
                .collect();
            for (node, v) in nodes.iter_mut().zip(&values) {
                node.set_local(*v);
            }
            let mut rng = ChaCha8Rng::seed_from_u64(loss_seed ^ 1);
            let mut lr = ChaCha8Rng::seed_from_u64(loss_seed);
            let alive = vec![true; n];
            for _ in 0..rounds {
                step(&mut nodes, &alive, branching, &mut rng, |_, _| lr.random_range(0..100) < loss_pct);
            }
            let d = dead.index(n);
            let survivors: Vec<usize> = (0..n).filter(|&i| i != d).collect();
            for &i in &survivors {
                nodes[i].reclaim(d as NodeId);
            }
            let (s, w) = mass_among(&nodes, &survivors);
            let total: f64 = values.iter().sum::<f64>() - values[d];
            prop_assert!((s - total).abs() <= 1e-6 * total.max(1.0), "s {} total {}", s, total);
            prop_assert!((w - (n - 1) as f64).abs() <= 1e-9 * n as f64, "w {}", w);
        }

        /// A cut that both sides take back, healed later (or a suspicion
        /// one side took back and the other did not): once every link has
        /// carried a new share, all mass is where it was, conserved.
        #[test]
        fn a_healed_cut_gives_the_reclaimed_mass_back(
            values in proptest::collection::vec(0.0f64..1e4, 2..7),
            split in 1usize..6,
            one_sided in any::<bool>(),
            rounds in 1usize..20,
            seed in any::<u64>(),
        ) {
            let n = values.len();
            let split = split.min(n - 1);
            let mut nodes: Vec<PushSum> = (0..n as NodeId)
                .map(|i| PushSum::new(i, n as u32, 2, LossCompensation::Cumulative))
                .collect();
            for (node, v) in nodes.iter_mut().zip(&values) {
                node.set_local(*v);
            }
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let alive = vec![true; n];
            for _ in 0..rounds {
                step(&mut nodes, &alive, 2, &mut rng, |_, _| false);
            }
            let side = |i: usize| i < split;
            for (i, node) in nodes.iter_mut().enumerate() {
                for j in 0..n {
                    if side(i) != side(j) && (!one_sided || side(i)) {
                        node.reclaim(j as NodeId);
                    }
                }
            }
            for _ in 0..rounds {
                step(&mut nodes, &alive, 2, &mut rng, |a, b| side(a as usize) != side(b as usize));
            }
            // Healed: every node sends to every other once more.
            for i in 0..n {
                let targets: Vec<NodeId> = (0..n as NodeId).filter(|&j| j as usize != i).collect();
                let mut msgs = Vec::new();
                nodes[i].round_to(&targets, |to, m| msgs.push((to, m)));
                for (to, m) in msgs {
                    nodes[to as usize].receive(i as NodeId, m);
                }
            }
            for node in &nodes {
                for j in 0..n {
                    prop_assert!(!node.is_reclaimed(j as NodeId));
                }
            }
            let all: Vec<usize> = (0..n).collect();
            let (s, w) = mass_among(&nodes, &all);
            let total: f64 = values.iter().sum();
            prop_assert!((s - total).abs() <= 1e-6 * total.max(1.0), "s {} total {}", s, total);
            prop_assert!((w - n as f64).abs() <= 1e-9 * n as f64, "w {}", w);
        }

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
