//! Costs known afterwards on an Orbit ring (docs/orbit.md, "Costs known
//! afterwards"), driven by hand on virtual time: the rules one by one, and
//! a property test over arbitrary sequences of takes, checks, charges,
//! reservations, settlements, releases, stray refunds and crashes at random
//! nodes, on a network that loses, duplicates, delays and reorders
//! messages. For every key and window it asserts the stated bound:
//!
//! - takes alone: `admitted - refunded <= cap`;
//! - with charges: `admitted + charged - refunded <= cap + shortfall`,
//!   where `shortfall` is what the charges of that window did not consume
//!   (recorded as debt, or recorded nowhere by a node that could not hold
//!   the key);
//! - exactly: the capacity used, `admitted + charged - refunded - (debt
//!   still outstanding when the window closed or its node crashed) -
//!   (shortfall recorded nowhere)`, is at most `cap`.

use std::collections::BTreeMap;

use drl_cluster::orbit::{Admit, DenyReason, OrbitConfig, OrbitNode, Outgoing};
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const WINDOW: u64 = 300 * MS;

fn cfg(cap: u64) -> OrbitConfig {
    // Up to 5 nodes x 10 ms epoch = 50 ms lap; 300 ms window = 6 laps.
    OrbitConfig::new(cap, WINDOW, 10 * MS)
}

fn ring(n: u32, c: &OrbitConfig) -> Vec<OrbitNode> {
    let ids: Vec<u32> = (0..n).collect();
    ids.iter()
        .map(|&i| OrbitNode::new(c.clone(), i, ids.clone(), 0).expect("valid"))
        .collect()
}

/// A deterministic generator (splitmix64) for the network's faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `pct` percent.
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

/// Network faults, percent per message, and the delay range in ms.
#[derive(Clone, Copy, Debug)]
struct Faults {
    loss: u64,
    dup: u64,
    max_delay: u64,
}

/// What happened to one key in one window, summed over the nodes.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    admitted: u64,
    charged: u64,
    refunded: u64,
    /// Charges' shortfall recorded as debt.
    debt: u64,
    /// Charges' shortfall recorded nowhere.
    unrecorded: u64,
    /// Debt still outstanding when its window closed or its node crashed.
    forgiven: u64,
}

/// An open reservation: node, key, estimate, mark.
type Open = (usize, u8, u64, u64);

struct Sim {
    cfg: OrbitConfig,
    nodes: Vec<OrbitNode>,
    /// (delivery time, sender, message).
    wire: Vec<(u64, u32, Outgoing)>,
    now: u64,
    rng: Rng,
    faults: Faults,
    tally: BTreeMap<(u8, u64), Tally>,
    open: Vec<Open>,
}

const KEYS: [&[u8]; 2] = [b"a", b"b"];

impl Sim {
    fn new(n: u32, cap: u64, seed: u64, faults: Faults) -> Sim {
        let cfg = cfg(cap);
        Sim {
            nodes: ring(n, &cfg),
            cfg,
            wire: Vec::new(),
            // Window 0 is every node's restart window: start in window 1.
            now: WINDOW,
            rng: Rng(seed),
            faults,
            tally: BTreeMap::new(),
            open: Vec::new(),
        }
    }

    fn send(&mut self, from: u32, outs: Vec<Outgoing>) {
        for o in outs {
            if self.rng.chance(self.faults.loss) {
                continue;
            }
            let copies = if self.rng.chance(self.faults.dup) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let delay = 1 + self.rng.next() % self.faults.max_delay.max(1);
                self.wire.push((self.now + delay * MS, from, o.clone()));
            }
        }
    }

    /// Moves virtual time on by `ms`, one ms at a time: the debt each node
    /// still has when its window closes is recorded first, then messages
    /// due are delivered (in random order) and every node is ticked.
    fn advance(&mut self, ms: u64) {
        for _ in 0..ms {
            let next = self.now + MS;
            if next / WINDOW != self.now / WINDOW {
                for i in 0..self.nodes.len() {
                    self.forgive(i);
                }
            }
            self.now = next;
            let (mut due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.wire)
                .into_iter()
                .partition(|(at, _, _)| *at <= self.now);
            self.wire = rest;
            // Reordering beyond the delays: shuffle what is due.
            for i in (1..due.len()).rev() {
                let j = (self.rng.next() % (i as u64 + 1)) as usize;
                due.swap(i, j);
            }
            for (_, from, o) in due {
                let to = o.to;
                let outs = self.nodes[to as usize].on_message(self.now, from, o.msg);
                self.send(to, outs);
            }
            for i in 0..self.nodes.len() {
                let outs = self.nodes[i].on_tick(self.now);
                self.send(i as u32, outs);
            }
        }
    }

    /// Records node `i`'s outstanding debt as forgiven in its window.
    fn forgive(&mut self, i: usize) {
        let w = self.nodes[i].current_window();
        for (k, key) in KEYS.iter().enumerate() {
            let d = self.nodes[i].debt(key);
            self.tally.entry((k as u8, w)).or_default().forgiven += d;
        }
    }

    fn at(&mut self, key: u8) -> &mut Tally {
        let w = self.now / WINDOW;
        self.tally.entry((key, w)).or_default()
    }

    fn take(&mut self, i: usize, key: u8, cost: u64) -> Admit {
        let d = self.nodes[i].admit(self.now, KEYS[key as usize], cost);
        if d.is_allowed() {
            self.at(key).admitted += cost;
        }
        d
    }

    fn charge(&mut self, i: usize, key: u8, cost: u64) {
        let c = self.nodes[i].charge(self.now, KEYS[key as usize], cost);
        assert!(c.consumed + c.debt <= cost, "{c:?} of {cost}");
        let debt = self.nodes[i].debt(KEYS[key as usize]);
        if debt > 0 {
            assert!(
                matches!(
                    c.answer,
                    Admit::Denied {
                        reason: DenyReason::InDebt,
                        ..
                    }
                ),
                "a key in debt answers InDebt: {c:?}"
            );
        }
        let t = self.at(key);
        t.charged += cost;
        t.debt += c.debt;
        t.unrecorded += cost - c.consumed - c.debt;
    }

    fn refund(&mut self, i: usize, key: u8, amount: u64, mark: u64) {
        let r = self.nodes[i].refund(self.now, KEYS[key as usize], amount, mark);
        assert!(r.credited <= amount, "{r:?} of {amount}");
        if mark != self.now / WINDOW {
            assert_eq!(r.credited, 0, "a refund after its window gives nothing");
        }
        self.at(key).refunded += r.credited;
    }

    /// A check answers what a take at the same instant gets, and changes
    /// nothing (asked twice, the same answer; the same live capacity).
    fn check_then_take(&mut self, i: usize, key: u8, cost: u64) {
        let k = KEYS[key as usize];
        let w = self.now / WINDOW;
        let c1 = self.nodes[i].check(self.now, k, cost);
        let live = self.nodes[i].live_capacity(k, w);
        let c2 = self.nodes[i].check(self.now, k, cost);
        assert_eq!(c1, c2, "a check changed the state");
        assert_eq!(live, self.nodes[i].live_capacity(k, w));
        let t = self.take(i, key, cost);
        assert_eq!(c1, t, "check and take at the same instant");
    }

    fn crash(&mut self, i: usize) {
        self.forgive(i);
        let ids: Vec<u32> = (0..self.nodes.len() as u32).collect();
        self.nodes[i] = OrbitNode::new(self.cfg.clone(), i as u32, ids, self.now).expect("valid");
    }

    fn apply(&mut self, op: Op) {
        let n = self.nodes.len();
        match op {
            Op::Wait(ms) => self.advance(ms),
            Op::Take { node, key, cost } => {
                self.take(node % n, key, cost);
            }
            Op::Check { node, key, cost } => self.check_then_take(node % n, key, cost),
            Op::Charge { node, key, cost } => self.charge(node % n, key, cost),
            Op::Reserve { node, key, cost } => {
                let i = node % n;
                let (d, mark) = self.nodes[i].reserve(self.now, KEYS[key as usize], cost);
                assert_eq!(d.is_allowed(), mark.is_some());
                if let Some(m) = mark {
                    assert_eq!(m, self.now / WINDOW, "the mark is the window");
                    self.at(key).admitted += cost;
                    self.open.push((i, key, cost, m));
                }
            }
            Op::Settle { pick, actual } => {
                if self.open.is_empty() {
                    return;
                }
                let (i, key, est, mark) = self.open.remove(pick % self.open.len());
                match actual {
                    // Release, or settle below the estimate: a refund of
                    // the difference (the caller's ledger's rule).
                    Some(a) if a > est => self.charge(i, key, a - est),
                    Some(a) => self.refund(i, key, est - a, mark),
                    None => self.refund(i, key, est, mark),
                }
            }
            Op::StrayRefund { node, key, amount } => {
                // A refund no reservation backs (a lying or confused
                // caller): the node gives back at most what its
                // reservations of the key hold.
                let w = self.now / WINDOW;
                self.refund(node % n, key, amount, w);
            }
            Op::Crash(node) => self.crash(node % n),
        }
    }

    fn assert_bound(&self) {
        let cap = self.cfg.cap;
        // Debt outstanding now counts as forgiven in its (open) window.
        let mut tally = self.tally.clone();
        for node in &self.nodes {
            for (k, key) in KEYS.iter().enumerate() {
                let w = node.current_window();
                tally.entry((k as u8, w)).or_default().forgiven += node.debt(key);
            }
        }
        for (&(key, w), t) in &tally {
            assert!(
                t.refunded <= t.admitted,
                "key {key} window {w}: refunded more than was admitted: {t:?}"
            );
            assert!(
                t.admitted - t.refunded <= cap,
                "key {key} window {w}: takes alone over the cap: {t:?}"
            );
            let consumed = t.admitted + t.charged - t.refunded;
            assert!(
                consumed <= cap + t.debt + t.unrecorded,
                "key {key} window {w}: over cap + shortfall: {t:?}"
            );
            assert!(
                consumed - t.forgiven - t.unrecorded <= cap,
                "key {key} window {w}: capacity used over the cap: {t:?}"
            );
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Wait(u64),
    Take {
        node: usize,
        key: u8,
        cost: u64,
    },
    Check {
        node: usize,
        key: u8,
        cost: u64,
    },
    Charge {
        node: usize,
        key: u8,
        cost: u64,
    },
    Reserve {
        node: usize,
        key: u8,
        cost: u64,
    },
    /// `actual` None: a release.
    Settle {
        pick: usize,
        actual: Option<u64>,
    },
    StrayRefund {
        node: usize,
        key: u8,
        amount: u64,
    },
    Crash(usize),
}

fn op(cap: u64) -> impl Strategy<Value = Op> {
    let node = 0usize..5;
    let key = 0u8..2;
    let cost = 0..=cap;
    prop_oneof![
        6 => (1u64..40).prop_map(Op::Wait),
        6 => (node.clone(), key.clone(), cost.clone())
            .prop_map(|(node, key, cost)| Op::Take { node, key, cost }),
        2 => (node.clone(), key.clone(), cost.clone())
            .prop_map(|(node, key, cost)| Op::Check { node, key, cost }),
        3 => (node.clone(), key.clone(), 0..=2 * cap)
            .prop_map(|(node, key, cost)| Op::Charge { node, key, cost }),
        3 => (node.clone(), key.clone(), cost.clone())
            .prop_map(|(node, key, cost)| Op::Reserve { node, key, cost }),
        3 => (any::<usize>(), prop::option::of(0..=2 * cap))
            .prop_map(|(pick, actual)| Op::Settle { pick, actual }),
        1 => (node.clone(), key.clone(), 0..=2 * cap)
            .prop_map(|(node, key, amount)| Op::StrayRefund { node, key, amount }),
        1 => node.prop_map(Op::Crash),
    ]
}

fn case() -> impl Strategy<Value = (u32, u64, u64, Faults, Vec<Op>)> {
    (2u32..=5, 4u64..40).prop_flat_map(|(n, cap)| {
        (
            Just(n),
            Just(cap),
            any::<u64>(),
            (0u64..=30, 0u64..=30, 1u64..=40).prop_map(|(loss, dup, max_delay)| Faults {
                loss,
                dup,
                max_delay,
            }),
            prop::collection::vec(op(cap), 1..160),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The bound per key per window, whatever the sequence and the network.
    #[test]
    fn charges_and_reservations_keep_the_stated_bound((n, cap, seed, faults, ops) in case()) {
        let mut sim = Sim::new(n, cap, seed, faults);
        for op in ops {
            sim.apply(op);
            sim.assert_bound();
        }
        // Close the last window so its outstanding debt is counted.
        let to_end = WINDOW - sim.now % WINDOW;
        sim.advance(to_end / MS + 1);
        sim.assert_bound();
    }
}

/// A single-node ring holds its table the whole window: charges consume it,
/// the one that does not fit goes into debt, and the key is denied (queries
/// included) until the window ends; the next window starts clean, as a
/// fixed window's count does.
#[test]
fn a_charge_past_the_cap_is_debt_until_the_window_ends() {
    let c = cfg(10);
    let mut n = ring(1, &c);
    let t = WINDOW + MS;
    n[0].on_tick(t);
    let a = n[0].charge(t, b"k", 6);
    assert_eq!((a.consumed, a.debt), (6, 0));
    assert!(a.answer.is_allowed(), "not in debt: a query passes");
    assert!(n[0].admit(t, b"k", 3).is_allowed());
    let b = n[0].charge(t, b"k", 5);
    assert_eq!((b.consumed, b.debt), (1, 4), "1 left, 4 of debt");
    assert!(matches!(
        b.answer,
        Admit::Denied {
            reason: DenyReason::InDebt,
            ..
        }
    ));
    assert!(!n[0].check(t, b"k", 0).is_allowed(), "a query in debt");
    assert!(!n[0].admit(t + 100 * MS, b"k", 1).is_allowed());
    assert_eq!(n[0].debt(b"k"), 4);
    // The next window: fresh.
    let t2 = 2 * WINDOW + MS;
    n[0].on_tick(t2);
    assert_eq!(n[0].debt(b"k"), 0);
    assert!(n[0].admit(t2, b"k", 10).is_allowed());
}

/// A refund gives back at most what the node's reservations hold, repays
/// the debt first, and gives nothing once the reservation's window is over.
#[test]
fn refunds_are_bounded_by_the_reservation_and_its_window() {
    let c = cfg(10);
    let mut n = ring(1, &c);
    let t = WINDOW + MS;
    n[0].on_tick(t);
    let (d, mark) = n[0].reserve(t, b"k", 8);
    assert!(d.is_allowed());
    assert_eq!(mark, Some(1));
    assert_eq!(n[0].charge(t, b"k", 5).debt, 3, "2 left, 3 of debt");
    // Settle at 2 of 8: 6 back, 3 of them repay the debt.
    let r = n[0].refund(t, b"k", 6, 1);
    assert_eq!(r.credited, 6);
    assert_eq!(n[0].debt(b"k"), 0);
    assert_eq!(
        n[0].check(t, b"k", 0),
        Admit::Allowed { remaining: 3 },
        "3 held again"
    );
    // Only 2 of the reservation are left to give back, whatever is asked.
    assert_eq!(n[0].refund(t, b"k", 50, 1).credited, 2);
    assert_eq!(n[0].refund(t, b"k", 50, 1).credited, 0);
    // A reservation of window 1 refunded in window 2: nothing.
    let (_, mark) = n[0].reserve(t, b"k", 5);
    assert_eq!(mark, Some(1));
    let t2 = 2 * WINDOW + MS;
    n[0].on_tick(t2);
    assert_eq!(n[0].refund(t2, b"k", 5, 1).credited, 0);
}

/// A check changes nothing: no capacity moves from the table, no demand is
/// counted, and a take right after gets what it said.
#[test]
fn a_check_is_a_take_that_changes_nothing() {
    let c = cfg(30);
    let mut n = ring(3, &c);
    let mut wire: Vec<(u64, u32, Outgoing)> = Vec::new();
    let mut t = WINDOW;
    // Let the tables go round for a while.
    while t < WINDOW + 100 * MS {
        let due: Vec<_> = wire.iter().filter(|m| m.0 <= t).cloned().collect();
        wire.retain(|m| m.0 > t);
        for (_, from, o) in due {
            let to = o.to;
            for x in n[to as usize].on_message(t, from, o.msg) {
                wire.push((t + MS, to, x));
            }
        }
        for (i, node) in n.iter_mut().enumerate() {
            for o in node.on_tick(t) {
                wire.push((t + MS, i as u32, o));
            }
        }
        for node in n.iter_mut() {
            for cost in [0, 1, 5, 12, 30] {
                let w = node.current_window();
                let live = node.live_capacity(b"k", w);
                let c = node.check(t, b"k", cost);
                assert_eq!(live, node.live_capacity(b"k", w));
                assert_eq!(c, node.check(t, b"k", cost));
            }
            let c = node.check(t, b"k", 2);
            assert_eq!(c, node.admit(t, b"k", 2), "at {t}");
        }
        t += MS;
    }
}
