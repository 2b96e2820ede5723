//! Unit tests of the Orbit state machine, driven by hand on virtual time.

use drl_cluster::orbit::{Admit, ConfigError, DenyReason, OrbitConfig, OrbitNode, Outgoing};

const MS: u64 = 1_000_000;

fn cfg(cap: u64) -> OrbitConfig {
    // 3 nodes x 10 ms epoch = 30 ms lap; 300 ms window = 10 laps.
    OrbitConfig::new(cap, 300 * MS, 10 * MS)
}

fn ring(n: u32, cap: u64) -> Vec<OrbitNode> {
    let ids: Vec<u32> = (0..n).collect();
    ids.iter()
        .map(|&i| OrbitNode::new(cfg(cap), i, ids.clone(), 0).expect("valid"))
        .collect()
}

/// Messages in flight on a perfect network: (delivery time, sender, message).
type Wire = Vec<(u64, u32, Outgoing)>;

/// Perfect network: ticks every node every ms from `from` to `to`,
/// delivering every message 1 ms after it was sent; returns the messages
/// sent. Messages still in flight stay in `wire`.
fn run(nodes: &mut [OrbitNode], wire: &mut Wire, from: u64, to: u64) -> Vec<Outgoing> {
    let mut seen = Vec::new();
    let mut t = from;
    while t < to {
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(wire)
            .into_iter()
            .partition(|(at, _, _)| *at <= t);
        *wire = rest;
        for (_, src, o) in due {
            let me = o.to;
            let outs = nodes[me as usize].on_message(t, src, o.msg.clone());
            for x in outs {
                seen.push(x.clone());
                wire.push((t + MS, me, x));
            }
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            for o in node.on_tick(t) {
                seen.push(o.clone());
                wire.push((t + MS, i as u32, o));
            }
        }
        t += MS;
    }
    seen
}

fn admit_all(node: &mut OrbitNode, now: u64, key: &[u8]) -> u64 {
    let mut n = 0;
    while node.admit(now, key, 1).is_allowed() {
        n += 1;
    }
    n
}

#[test]
fn window_shorter_than_a_lap_is_rejected_with_a_clear_error() {
    let c = OrbitConfig::new(10, 20 * MS, 10 * MS);
    let err = OrbitNode::new(c, 0, vec![0, 1, 2], 0).unwrap_err();
    assert_eq!(
        err,
        ConfigError::WindowShorterThanLap {
            window: 20 * MS,
            epoch: 10 * MS,
            nodes: 3,
            min: 30 * MS
        }
    );
    assert!(err.to_string().contains("shorter than one lap"), "{err}");
    assert_eq!(OrbitConfig::new(10, 30 * MS, 10 * MS).validate(3), Ok(()));
}

#[test]
fn ring_errors() {
    assert_eq!(
        OrbitNode::new(cfg(10), 0, vec![0, 1, 1], 0).unwrap_err(),
        ConfigError::DuplicateNode(1)
    );
    assert_eq!(
        OrbitNode::new(cfg(10), 9, vec![0, 1, 2], 0).unwrap_err(),
        ConfigError::NotInRing(9)
    );
    assert_eq!(
        OrbitNode::new(cfg(0), 0, vec![0], 0).unwrap_err(),
        ConfigError::ZeroCap
    );
}

#[test]
fn local_allowances_are_carved_out_of_the_cap() {
    let c = cfg(1000).with_local_fraction(0.1);
    let sum: u64 = (0..7).map(|p| c.local_allowance(p, 7)).sum();
    assert_eq!(sum, c.local_total());
    assert_eq!(sum + c.pool(), 1000);
    assert_eq!(c.local_allowance(0, 7), 15);
    assert_eq!(c.local_allowance(6, 7), 14);
}

#[test]
fn a_node_sits_out_the_window_it_started_in() {
    let mut n = ring(3, 90);
    let w = 300 * MS;
    match n[0].admit(5 * MS, b"k", 1) {
        Admit::Denied {
            reason: DenyReason::Recovering,
            retry_after: Some(r),
        } => assert_eq!(r, w - 5 * MS),
        d => panic!("expected Recovering, got {d:?}"),
    }
    // Next window: the local allowance (10% of 90 over 3 nodes = 3) is there
    // at once, without any message. (Window 1's lane origins are positions
    // 1 and 2; node 0 only has its allowance.)
    assert_eq!(admit_all(&mut n[0], w + MS, b"k"), 3);
    // A node restarted mid-window sits out the rest of that window.
    n[0] = OrbitNode::new(cfg(90), 0, vec![0, 1, 2], w + 2 * MS).unwrap();
    assert!(!n[0].admit(w + 3 * MS, b"k", 1).is_allowed());
    assert!(n[0].admit(2 * w + MS, b"k", 1).is_allowed());
}

#[test]
fn a_single_node_ring_admits_exactly_the_cap_per_window() {
    let mut n = ring(1, 50);
    let w = 300 * MS;
    for win in 1..4u64 {
        let mut admitted = 0;
        let mut t = win * w;
        while t < (win + 1) * w {
            assert!(n[0].on_tick(t).is_empty(), "nobody to send to");
            admitted += u64::from(n[0].admit(t, b"k", 1).is_allowed());
            t += MS / 2;
        }
        assert_eq!(admitted, 50, "window {win}");
    }
}

#[test]
fn the_ring_never_admits_more_than_the_cap_and_shares_it() {
    let mut n = ring(3, 300);
    let w = 300 * MS;
    let mut wire = Wire::new();
    let msgs = run(&mut n, &mut wire, w, w + 100 * MS);
    assert!(
        msgs.len() >= 6,
        "the table circulates: {} forwards",
        msgs.len()
    );
    // Second lap onwards, messages are deltas on the receiver's base.
    assert!(msgs.iter().any(|m| m.msg.is_delta()));
    assert!(n.iter().all(|x| x.stats().dropped_no_base == 0));
    let mut total = 0;
    let mut t = w + 100 * MS;
    while t < 2 * w {
        for node in n.iter_mut() {
            total += u64::from(node.admit(t, b"k", 1).is_allowed());
        }
        run(&mut n, &mut wire, t, t + MS);
        t += MS;
        assert!(n.iter().all(|x| x.stats().dropped_no_base == 0));
    }
    assert!(total <= 300, "admitted {total} > cap");
    assert!(total >= 270, "admitted only {total} of 300");
}

#[test]
fn duplicates_and_stale_tables_are_ignored() {
    let mut n = ring(2, 100);
    let w = 300 * MS;
    let mut wire = Wire::new();
    // Window 1's origin is position 1 % 2 = 1.
    let outs = run(&mut n, &mut wire, w, w + 12 * MS);
    let first = outs
        .into_iter()
        .find(|o| o.to == 0)
        .expect("node 1 forwards to node 0");
    let before = n[0].live_capacity(b"k", 1);
    // Deliver the same message again (network duplicate).
    n[0].on_message(w + 12 * MS, 1, first.msg.clone());
    assert_eq!(n[0].stats().dropped_duplicate, 1);
    assert_eq!(n[0].live_capacity(b"k", 1), before);
    // And once more in the next window: stale.
    n[0].on_message(2 * w + MS, 1, first.msg);
    assert_eq!(n[0].stats().dropped_stale, 1);
}

#[test]
fn forged_tables_are_dropped() {
    let mut n = ring(2, 100);
    let w = 300 * MS;
    let mut wire = Wire::new();
    let outs = run(&mut n, &mut wire, w, w + 11 * MS);
    let mut m = outs.into_iter().find(|o| o.to == 0).unwrap().msg;
    m.hop += 100;
    m.entries = vec![(b"k".to_vec(), 101, m.hop)];
    n[0].on_message(w + 12 * MS, 1, m.clone());
    assert_eq!(n[0].stats().dropped_invalid, 1);
    m.entries.clear();
    m.pool += 1; // a node with another configuration
    n[0].on_message(w + 12 * MS, 1, m.clone());
    assert_eq!(n[0].stats().dropped_invalid, 2);
    m.pool -= 1;
    m.from = 0; // claims to come from the receiver itself
    n[0].on_message(w + 12 * MS, 0, m.clone());
    assert_eq!(n[0].stats().dropped_invalid, 3);
    m.from = 1; // the transport saw another sender than the message names
    n[0].on_message(w + 12 * MS, 2, m);
    assert_eq!(n[0].stats().dropped_invalid, 4);
}

#[test]
fn a_dead_successor_is_skipped_and_the_table_goes_to_one_node_only() {
    let mut n = ring(3, 100);
    let w = 300 * MS;
    let mut wire = Wire::new();
    // Window 1's origin is position 1; its successor 2 is believed down.
    n[1].on_peer_down(2);
    let outs = run(&mut n, &mut wire, w, w + 12 * MS);
    let from1: Vec<_> = outs.iter().filter(|o| o.msg.from == 1).collect();
    assert_eq!(from1.len(), 1);
    assert_eq!(from1[0].to, 0, "skips node 2");
    n[1].on_peer_up(2);
    assert_eq!(n[1].stats().tables_forwarded, 1);
}

#[test]
fn decisions_never_wait_and_costs_are_checked() {
    let mut n = ring(3, 90);
    let w = 300 * MS;
    match n[0].admit(w, b"k", 91) {
        Admit::Denied {
            reason: DenyReason::CostExceedsCap,
            retry_after: None,
        } => {}
        d => panic!("{d:?}"),
    }
    assert!(n[0].admit(w, b"k", 0).is_allowed(), "a query");
    // Node 0 is not window 1's origin: 3 permits of local allowance, then a
    // denial with a retry hint no longer than one lap.
    assert_eq!(admit_all(&mut n[0], w, b"k"), 3);
    match n[0].admit(w, b"k", 1) {
        Admit::Denied {
            reason: DenyReason::Exhausted,
            retry_after: Some(r),
        } => assert!(r > 0 && r <= 30 * MS, "{r}"),
        d => panic!("{d:?}"),
    }
    let long = vec![b'x'; 2000];
    assert!(matches!(
        n[0].admit(w, &long, 1),
        Admit::Denied {
            reason: DenyReason::KeyTooLong,
            ..
        }
    ));
}

#[test]
fn deltas_carry_only_keys_that_changed() {
    let mut n = ring(3, 300);
    let w = 300 * MS;
    let mut wire = Wire::new();
    // 1000 keys with a little demand at node 0 early in the window.
    for i in 0..1000 {
        let key = format!("user:{i:04}");
        assert!(n[0].admit(w + MS, key.as_bytes(), 1).is_allowed());
    }
    let early = run(&mut n, &mut wire, w + MS, w + 61 * MS);
    let full = early.iter().map(|o| o.msg.entries.len()).max().unwrap();
    assert!(full >= 1000, "the first lap carries every key: {full}");
    // Afterwards only one hot key changes; the deltas must stay small.
    let mut late = Vec::new();
    let mut t = w + 61 * MS;
    while t < w + 200 * MS {
        n[1].admit(t, b"hot", 1);
        late.extend(run(&mut n, &mut wire, t, t + MS));
        t += MS;
    }
    assert!(
        late.len() >= 6,
        "the table kept circulating: {}",
        late.len()
    );
    let deltas: Vec<usize> = late
        .iter()
        .filter(|o| o.msg.is_delta())
        .map(|o| o.msg.entries.len())
        .collect();
    // Once node 0 has given back what its idle keys held (first lap after
    // the demand stopped), only the hot key changes.
    assert!(deltas.len() >= 6, "{deltas:?}");
    let steady = &deltas[deltas.len() - 6..];
    assert!(
        steady.iter().all(|&d| d <= 2),
        "delta entries per message: {deltas:?}"
    );
    assert!(n.iter().all(|x| x.stats().dropped_no_base == 0));
}

mod hostile {
    //! Arbitrary, forged and out-of-order inputs never panic the node.

    use super::*;
    use drl_cluster::orbit::TableMsg;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Admit { key: u8, cost: u64, dt: u64 },
        Msg { from: u32, msg: TableMsg, dt: u64 },
        Tick { dt: u64 },
        Down(u32),
        Up(u32),
        Restarted(u32),
    }

    fn msg() -> impl Strategy<Value = TableMsg> {
        (
            0u64..4,
            0u32..4,
            0u32..12,
            0u32..12,
            0u32..4,
            prop_oneof![Just(135u64), Just(270u64), 0u64..400],
            prop::collection::vec(0u32..12, 0..5),
            prop::collection::btree_map(0u8..6, (0u64..400, 0u32..14), 0..6),
        )
            .prop_map(
                |(window, lane, hop, base_hop, from, pool, visits, entries)| TableMsg {
                    window,
                    lane,
                    hop,
                    from,
                    base_hop,
                    pool,
                    visits,
                    entries: entries
                        .into_iter()
                        .map(|(k, (f, m))| (vec![b'k', k], f, m))
                        .collect(),
                },
            )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6, 0u64..400, 0u64..20 * MS).prop_map(|(key, cost, dt)| Op::Admit {
                key,
                cost,
                dt
            }),
            (0u32..4, msg(), 0u64..20 * MS).prop_map(|(from, msg, dt)| Op::Msg { from, msg, dt }),
            (0u64..200 * MS).prop_map(|dt| Op::Tick { dt }),
            (0u32..4).prop_map(Op::Down),
            (0u32..4).prop_map(Op::Up),
            (0u32..4).prop_map(Op::Restarted),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_inputs_never_panic(ops in prop::collection::vec(op(), 0..120)) {
            let mut node = OrbitNode::new(cfg(300), 1, vec![0, 1, 2], 0).unwrap();
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Admit { key, cost, dt } => {
                        now += dt;
                        if let Admit::Allowed { remaining } = node.admit(now, &[b'k', key], cost) {
                            prop_assert!(remaining <= 300);
                        }
                    }
                    Op::Msg { from, msg, dt } => {
                        now += dt;
                        for o in node.on_message(now, from, msg) {
                            prop_assert!(o.to != 1, "sent to itself");
                        }
                    }
                    Op::Tick { dt } => {
                        now += dt;
                        node.on_tick(now);
                        prop_assert!(node.next_deadline() > now);
                    }
                    Op::Down(p) => node.on_peer_down(p),
                    Op::Up(p) => node.on_peer_up(p),
                    Op::Restarted(p) => node.on_peer_restarted(p),
                }
            }
        }
    }
}

#[test]
fn a_lost_table_is_sent_again_to_the_same_node_only() {
    let mut n = ring(3, 300);
    let w = 300 * MS;
    let mut wire = Wire::new();
    // Let lane 0's origin (node 1) forward once, then lose that message.
    let sent = run(&mut n, &mut wire, w, w + 11 * MS);
    let lost = sent
        .iter()
        .find(|o| o.msg.from == 1)
        .expect("node 1 forwarded")
        .clone();
    wire.retain(|(_, _, o)| o.msg != lost.msg);
    // Two laps (60 ms) later node 1 sends the same message to the same node.
    let later = run(&mut n, &mut wire, w + 11 * MS, w + 80 * MS);
    let again: Vec<_> = later
        .iter()
        .filter(|o| o.msg.from == 1 && o.msg.lane == lost.msg.lane && o.msg.hop == lost.msg.hop)
        .collect();
    assert_eq!(again.len(), 1, "one resend");
    assert_eq!(again[0], &lost, "identical message, same destination");
    assert_eq!(n[1].stats().tables_resent, 1);
    // ... and the lane is alive again: its table is processed downstream.
    let received: u64 = n.iter().map(|x| x.stats().tables_received).sum();
    assert!(received >= 2, "{received}");
}

/// Issue 42, D11 in the Orbit key table: a node holding `max_keys` keys
/// in a window refuses new ones (`TooManyKeys`, nothing consumed) and
/// never drops a live key to make room, so a flood of new keys cannot
/// reset a drained victim. The victim's verdicts with the flood are
/// exactly its verdicts without it.
#[test]
fn a_flood_of_new_keys_at_max_keys_never_resets_a_victim() {
    let verdicts = |flood: bool| -> (Vec<bool>, u64) {
        let c = OrbitConfig {
            max_keys: 4,
            ..cfg(90)
        };
        let ids = vec![0, 1, 2];
        let mut n: Vec<OrbitNode> = ids
            .iter()
            .map(|&i| OrbitNode::new(c.clone(), i, ids.clone(), 0).unwrap())
            .collect();
        let mut wire = Wire::new();
        let mut out = Vec::new();
        let mut refused = 0;
        // Three windows after the one the nodes started in.
        for ms in (300..1_200u64).step_by(3) {
            run(&mut n, &mut wire, ms * MS, (ms + 3) * MS);
            let now = (ms + 3) * MS;
            // The victim asks 4 every 3 ms: 400 a window, cap 90.
            for _ in 0..4 {
                out.push(n[0].admit(now, b"victim", 1).is_allowed());
            }
            if flood {
                for j in 0..10 {
                    let key = format!("flood-{ms}-{j}");
                    if let Admit::Denied {
                        reason: DenyReason::TooManyKeys,
                        ..
                    } = n[0].admit(now, key.as_bytes(), 5)
                    {
                        refused += 1;
                    }
                }
            }
        }
        (out, refused)
    };
    let (alone, _) = verdicts(false);
    let (flooded, refused) = verdicts(true);
    assert!(refused > 2_000, "refused {refused}");
    let admitted = alone.iter().filter(|&&a| a).count();
    assert!(
        admitted > 0 && admitted < alone.len() / 2,
        "{admitted} of {}",
        alone.len()
    );
    assert_eq!(flooded, alone, "the flood changed the victim's verdicts");
}
