//! Check, reserve, settle and release on Cloud Control nodes (issue 45;
//! docs/gossip.md, "Costs known afterwards"), as properties over random
//! mixes of take, charge, check, reserve and settlement (below, at and
//! above the estimate; release is a settlement at 0) on three nodes with a
//! manual clock, every allocator and all three aggregations:
//!
//! - a check changes nothing: the same trace without its checks gives the
//!   same answers, refunds and key states, to the bit;
//! - a refund gives back at most what was asked, which is at most what
//!   was reserved; under random drop (GRD, `grd-smooth`, CRD) nothing; the
//!   units a key reports refunded are those the refunds answered;
//! - with a token bucket whose rate no demand moves (CTB, static 1/N), a
//!   node that reserved estimates and was refunded is never more generous
//!   than the same node seeing the same consumptions with each reservation
//!   at its actual cost: every check the first admits, the second admits.
//!   (The bucket-level proptest `alloc::bucket`'s
//!   `a_refund_never_lifts_the_bucket_above_the_smaller_reservation`
//!   proves the same inequality for any rate schedule, negative rates and
//!   fills included: what FPS and GTB add.)

mod common;

use common::{MS, cluster, deliver};
use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Admission, Aggregation, Hold, KeyLimit, KeyRef, Node};
use drl_core::Nanos;
use proptest::prelude::*;

const KEY: KeyRef<'static> = KeyRef {
    limit: "tokens",
    aggregate: "tenant",
};
const LIMIT: KeyLimit = KeyLimit {
    rate: 200,
    depth: 30,
};
const AGGREGATIONS: [Aggregation; 3] = [
    Aggregation::PeerTable,
    Aggregation::PushSum,
    Aggregation::FlowUpdating,
];

#[derive(Debug, Clone)]
enum Op {
    /// Milliseconds pass (interval steps and gossip on the way).
    Wait(u64),
    Take(usize, u64, u64),
    Charge(usize, u64),
    Check(usize, u64),
    /// Reserve an estimate at a node, settled at `actual` after `later`
    /// more operations (0: released).
    Reserve(usize, u64, u64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..120).prop_map(Op::Wait),
        4 => (0usize..3, 0u64..12, 0u64..4).prop_map(|(n, c, f)| Op::Take(n, c, f)),
        1 => (0usize..3, 1u64..25).prop_map(|(n, c)| Op::Charge(n, c)),
        3 => (0usize..3, 0u64..35).prop_map(|(n, c)| Op::Check(n, c)),
        3 => (0usize..3, 0u64..25, 0u64..30, 0usize..8)
            .prop_map(|(n, c, a, l)| Op::Reserve(n, c, a, l)),
    ]
}

/// A reservation waiting for its settlement.
struct Open {
    due: usize,
    node: usize,
    hold: Hold,
    actual: u64,
}

/// Three nodes on a manual clock.
struct Run {
    nodes: Vec<Node>,
    now: Nanos,
}

impl Run {
    fn new(alg: AlgorithmKind, agg: Aggregation) -> Self {
        Self {
            nodes: cluster(alg, agg, 3),
            now: 0,
        }
    }

    fn wait(&mut self, ms: u64) {
        for _ in 0..ms {
            self.now += MS;
            for n in self.nodes.iter_mut() {
                if n.poll_timeout().is_some_and(|t| t <= self.now) {
                    n.handle_timeout(self.now);
                }
            }
            deliver(&mut self.nodes, self.now);
        }
    }
}

/// What one operation answered.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Decided(Admission),
    Refunded(Admission, u64),
}

/// Runs `ops` (its checks only when `checks`); the answers of everything
/// but the checks, with the refunds' asked units, and each node's units
/// refunded by its answers.
fn play(
    alg: AlgorithmKind,
    agg: Aggregation,
    ops: &[Op],
    checks: bool,
) -> (Run, Vec<Answer>, Vec<(u64, u64, u64)>) {
    let mut r = Run::new(alg, agg);
    let mut out = Vec::new();
    let mut refunds = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Wait(ms) => r.wait(ms),
            Op::Take(n, c, f) => {
                let a = r.nodes[n].admit(r.now, KEY, LIMIT, c, f).unwrap();
                out.push(Answer::Decided(a));
            }
            Op::Charge(n, c) => {
                let a = r.nodes[n].charge(r.now, KEY, LIMIT, c, 9).unwrap();
                out.push(Answer::Decided(a));
            }
            Op::Check(n, c) => {
                if checks {
                    let before = r.nodes[n].keys().snapshot(KEY);
                    r.nodes[n].check(r.now, KEY, LIMIT, c);
                    assert_eq!(r.nodes[n].keys().snapshot(KEY), before, "a check wrote");
                }
            }
            Op::Reserve(n, c, actual, later) => {
                let (a, hold) = r.nodes[n].reserve(r.now, KEY, LIMIT, c, 7).unwrap();
                assert_eq!(a.allowed, hold.is_some(), "a hold exactly when admitted");
                out.push(Answer::Decided(a));
                if let Some(hold) = hold {
                    assert_eq!(hold.cost, c);
                    open.push(Open {
                        due: i + later,
                        node: n,
                        hold,
                        actual,
                    });
                }
            }
        }
        let (due, rest): (Vec<Open>, Vec<Open>) = open.into_iter().partition(|o| o.due <= i);
        open = rest;
        for o in due {
            let est = o.hold.cost;
            let node = &r.nodes[o.node];
            if o.actual > est {
                let a = node.charge(r.now, KEY, LIMIT, o.actual - est, 7).unwrap();
                out.push(Answer::Decided(a));
            } else {
                let asked = est - o.actual;
                let (a, back) = node.refund(r.now, KEY, LIMIT, &o.hold, asked);
                refunds.push((o.node as u64, asked, back));
                out.push(Answer::Refunded(a, back));
            }
        }
    }
    (r, out, refunds)
}

fn random_drop(alg: AlgorithmKind) -> bool {
    matches!(
        alg,
        AlgorithmKind::Grd | AlgorithmKind::GrdSmooth | AlgorithmKind::Crd
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Checks change nothing; refunds are bounded by what was asked and
    /// reserved, nothing under random drop, and counted as answered.
    #[test]
    fn checks_change_nothing_and_refunds_are_bounded(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        for alg in AlgorithmKind::ALL {
            for agg in AGGREGATIONS {
                let (with, a, refunds) = play(alg, agg, &ops, true);
                let (without, b, _) = play(alg, agg, &ops, false);
                prop_assert_eq!(&a, &b, "{:?} {:?}: the checks changed an answer", alg, agg);
                for (x, y) in with.nodes.iter().zip(&without.nodes) {
                    prop_assert_eq!(x.keys().snapshot(KEY), y.keys().snapshot(KEY));
                }
                let mut per_node = [0u64; 3];
                for &(n, asked, back) in &refunds {
                    prop_assert!(back <= asked, "{:?}: {} back of {} asked", alg, back, asked);
                    if random_drop(alg) {
                        prop_assert_eq!(back, 0, "{:?}: random drop gave back", alg);
                    }
                    per_node[n as usize] += back;
                }
                for (i, n) in with.nodes.iter().enumerate() {
                    let got = n.keys().snapshot(KEY).map_or(0, |s| s.refunded);
                    prop_assert_eq!(got, per_node[i], "{:?} node {}", alg, i);
                }
            }
        }
    }

    /// CTB and static 1/N: a node with refunds is never more generous
    /// than the same node seeing the same consumptions with every
    /// reservation at its actual cost (probed by checks of every cost).
    #[test]
    fn a_refunded_node_is_never_more_generous_than_the_actual_costs(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        for alg in [AlgorithmKind::Ctb, AlgorithmKind::Static] {
            for agg in AGGREGATIONS {
                bound(alg, agg, &ops)?;
            }
        }
    }
}

/// Runs `ops` on `x` and, in lockstep, the same consumptions on `z` as
/// charges, with each reservation at its actual cost (when below the
/// estimate) and nothing refunded; after every step, every check `x`
/// admits `z` admits.
fn bound(alg: AlgorithmKind, agg: Aggregation, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut x = Run::new(alg, agg);
    let mut z = Run::new(alg, agg);
    // The key made at every node of both at once (a query makes it): a
    // key's bucket refills from its creation on, at the limit in force.
    for r in [&mut x, &mut z] {
        for n in &r.nodes {
            n.admit(0, KEY, LIMIT, 0, 0).unwrap();
        }
    }
    let mut open: Vec<Open> = Vec::new();
    let at_most = |x: &Run, z: &Run, what: &str| -> Result<(), TestCaseError> {
        for n in 0..3 {
            for c in [0, 1, 5, 10, 20, LIMIT.depth] {
                let a = x.nodes[n].check(x.now, KEY, LIMIT, c).allowed;
                let b = z.nodes[n].check(z.now, KEY, LIMIT, c).allowed;
                prop_assert!(
                    !a || b,
                    "{:?} {:?} node {} cost {} after {}: refunded admits, actual denies",
                    alg,
                    agg,
                    n,
                    c,
                    what
                );
            }
        }
        Ok(())
    };
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Wait(ms) => {
                x.wait(ms);
                z.wait(ms);
            }
            Op::Take(n, c, f) => {
                if x.nodes[n].admit(x.now, KEY, LIMIT, c, f).unwrap().allowed && c > 0 {
                    z.nodes[n].charge(z.now, KEY, LIMIT, c, f).unwrap();
                }
            }
            Op::Charge(n, c) => {
                x.nodes[n].charge(x.now, KEY, LIMIT, c, 9).unwrap();
                z.nodes[n].charge(z.now, KEY, LIMIT, c, 9).unwrap();
            }
            Op::Check(..) => {}
            Op::Reserve(n, c, actual, later) => {
                let (_, hold) = x.nodes[n].reserve(x.now, KEY, LIMIT, c, 7).unwrap();
                if let Some(hold) = hold {
                    let took = c.min(actual);
                    if took > 0 {
                        z.nodes[n].charge(z.now, KEY, LIMIT, took, 7).unwrap();
                    }
                    open.push(Open {
                        due: i + later,
                        node: n,
                        hold,
                        actual,
                    });
                }
            }
        }
        let (due, rest): (Vec<Open>, Vec<Open>) = open.into_iter().partition(|o| o.due <= i);
        open = rest;
        for o in due {
            let est = o.hold.cost;
            if o.actual > est {
                let extra = o.actual - est;
                x.nodes[o.node].charge(x.now, KEY, LIMIT, extra, 7).unwrap();
                z.nodes[o.node].charge(z.now, KEY, LIMIT, extra, 7).unwrap();
            } else {
                x.nodes[o.node].refund(x.now, KEY, LIMIT, &o.hold, est - o.actual);
            }
        }
        at_most(&x, &z, &format!("step {i} ({op:?})"))?;
    }
    Ok(())
}

/// Refunds give back, at once, what a reservation took from a full
/// bucket, and the node admits it again; GRD reports 0.
#[test]
fn a_refund_at_once_restores_the_bucket_and_grd_reports_nothing() {
    let mut r = Run::new(AlgorithmKind::Ctb, Aggregation::PeerTable);
    r.wait(200);
    let n = &r.nodes[0];
    let (a, hold) = n.reserve(r.now, KEY, LIMIT, 30, 1).unwrap();
    assert!(a.allowed);
    assert!(
        !n.check(r.now, KEY, LIMIT, 1).allowed,
        "the bucket is empty"
    );
    let (_, back) = n.refund(r.now, KEY, LIMIT, &hold.unwrap(), 12);
    assert_eq!(back, 12);
    assert!(n.check(r.now, KEY, LIMIT, 12).allowed);
    assert!(!n.check(r.now, KEY, LIMIT, 13).allowed);

    let mut g = Run::new(AlgorithmKind::Grd, Aggregation::PeerTable);
    g.wait(200);
    let n = &g.nodes[0];
    let (a, hold) = n.reserve(g.now, KEY, LIMIT, 30, 1).unwrap();
    assert!(a.allowed, "GRD admits at p = 0");
    let (q, back) = n.refund(g.now, KEY, LIMIT, &hold.unwrap(), 30);
    assert_eq!(back, 0, "GRD has no bucket to give back into");
    assert!(q.allowed);
}
