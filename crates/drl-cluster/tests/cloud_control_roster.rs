//! A membership shared through a `Roster` is a representation, not a
//! behaviour: a cluster whose nodes all start from one shared roster
//! behaves exactly like one whose nodes were told `peer_up` peer by peer,
//! under any sequence of membership changes (each taken by one node
//! alone: the shared copy must not leak it to the others), traffic, loss
//! and restarts. Checked on everything a node shows: payload bytes and
//! destinations, admissions, view digests, `live`, peers up; and the
//! last three against a naive model of the counting rule kept beside the
//! cluster (a map per node of who is up since when, and who was heard
//! when with which view).

use drl_cluster::alloc::AlgorithmKind;
use std::collections::BTreeMap;

use drl_cluster::cloud_control::{Aggregation, KeyLimit, KeyRef, Node, Roster, Settings, fnv1a};
use drl_core::Nanos;
use proptest::prelude::*;

const MS: Nanos = 1_000_000;
const KEY: KeyRef<'static> = KeyRef {
    limit: "api",
    aggregate: "t",
};
const LIMIT: KeyLimit = KeyLimit {
    rate: 1_000,
    depth: 100,
};

#[derive(Debug, Clone)]
enum Op {
    /// `at` learns that `peer` is down (true) or up (false).
    Member { at: u32, peer: u32, down: bool },
    /// `ms` of traffic (node i offers `load[i % len]` per ms); payloads
    /// whose draw is under `loss` are lost.
    Run { ms: u32, load: Vec<u8>, loss: u8 },
    /// Node `node` restarts with fresh state and the whole membership up.
    Restart { node: u32 },
}

fn op(n: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..n, 0..n, any::<bool>()).prop_map(|(at, peer, down)| Op::Member { at, peer, down }),
        (0..n.min(3), 0..n.min(3), any::<bool>()).prop_map(|(at, peer, down)| Op::Member {
            at,
            peer,
            down
        }),
        (5u32..150, prop::collection::vec(0u8..4, 1..6), 0u8..30)
            .prop_map(|(ms, load, loss)| Op::Run { ms, load, loss }),
        (0..n).prop_map(|node| Op::Restart { node }),
    ]
}

fn settings(n: u32, aggregation: Aggregation, algorithm: AlgorithmKind) -> Settings {
    Settings {
        aggregation,
        stale_after: 300 * MS,
        ..Settings::new(algorithm, n)
    }
}

/// Node `i` of `n` at `now`, its membership reported peer by peer or
/// from `roster`.
fn node(i: u32, n: u32, s: &Settings, seed: u64, now: Nanos, roster: Option<&Roster>) -> Node {
    let mut node = Node::new(i, s.clone(), seed, now).unwrap();
    match roster {
        Some(r) => node.roster_up(r),
        None => (0..n).for_each(|p| node.peer_up(now, p)),
    }
    node
}

/// The naive model of one node: peers up (since when) and peers heard
/// (when, with which view).
#[derive(Default, Clone)]
struct Model {
    up: BTreeMap<u32, Nanos>,
    heard: BTreeMap<u32, (Nanos, u64)>,
}

impl Model {
    fn all_up(me: u32, n: u32, now: Nanos) -> Self {
        Self {
            up: (0..n).filter(|&p| p != me).map(|p| (p, now)).collect(),
            heard: BTreeMap::new(),
        }
    }

    fn view(&self, me: u32) -> u64 {
        let mut ids: Vec<u32> = self.up.keys().copied().chain([me]).collect();
        ids.sort_unstable();
        fnv1a(
            &ids.iter()
                .flat_map(|id| id.to_be_bytes())
                .collect::<Vec<u8>>(),
        )
    }

    fn live(&self, me: u32, now: Nanos, stale: Nanos) -> u32 {
        let view = self.view(me);
        1 + self
            .up
            .iter()
            .filter(|(p, up_at)| {
                self.heard
                    .get(p)
                    .is_some_and(|&(at, v)| v == view && at >= **up_at && now - at <= stale)
            })
            .count() as u32
    }
}

/// What a cluster did: one line per observation.
fn trace(n: u32, s: &Settings, ops: &[Op], shared: bool) -> Vec<String> {
    let roster = Roster::new(0, 0..n);
    let mut nodes: Vec<Node> = (0..n)
        .map(|i| node(i, n, s, i as u64 + 1, 0, shared.then_some(&roster)))
        .collect();
    let mut out = Vec::new();
    let mut now: Nanos = 0;
    let mut draw: u64 = 7;
    let mut restarts = 0;
    let mut models: Vec<Model> = (0..n).map(|i| Model::all_up(i, n, 0)).collect();
    for o in ops {
        match o {
            Op::Member { at, peer, down } => {
                let nd = &mut nodes[*at as usize];
                let m = &mut models[*at as usize];
                if *down {
                    nd.peer_down(now, *peer);
                    m.up.remove(peer);
                } else {
                    nd.peer_up(now, *peer);
                    if *peer != *at {
                        m.up.entry(*peer).or_insert(now);
                    }
                }
            }
            Op::Restart { node: i } => {
                restarts += 1;
                let r = Roster::new(now, 0..n);
                nodes[*i as usize] = node(*i, n, s, 1000 + restarts, now, shared.then_some(&r));
                models[*i as usize] = Model::all_up(*i, n, now);
            }
            Op::Run { ms, load, loss } => {
                for _ in 0..*ms {
                    now += MS;
                    let mut mail = Vec::new();
                    let mut buf = Vec::new();
                    for (i, nd) in nodes.iter_mut().enumerate() {
                        let mut ok = 0;
                        for _ in 0..load[i % load.len()] {
                            ok += u32::from(nd.admit(now, KEY, LIMIT, 1, 0).unwrap().allowed);
                        }
                        nd.handle_timeout(now);
                        while let Some(to) = nd.poll_transmit(now, &mut buf) {
                            mail.push((nd.id(), to, buf.clone(), nd.view()));
                        }
                        out.push(format!("{now} {i} ok {ok}"));
                    }
                    for (from, to, bytes, view) in mail {
                        draw = draw.wrapping_mul(6364136223846793005).wrapping_add(1);
                        out.push(format!("{from}->{to} {bytes:?}"));
                        if (draw >> 56) as u8 >= loss * 6 {
                            // What an honest node sends, its peers take.
                            let r = nodes[to as usize].handle_datagram(now, from, &bytes);
                            assert_eq!(r, Ok(()), "{from}->{to} at {now}");
                            models[to as usize].heard.insert(from, (now, view));
                        }
                    }
                }
            }
        }
        for (nd, m) in nodes.iter().zip(&models) {
            let me = nd.id();
            let up: Vec<u32> = nd.peers_up().collect();
            assert_eq!(
                up,
                m.up.keys().copied().collect::<Vec<_>>(),
                "node {me}: peers up"
            );
            assert_eq!(nd.view(), m.view(me), "node {me}: view");
            // The peer table counts the members heard from; push-sum and
            // Flow Updating count the members up.
            let live = if s.aggregation == Aggregation::PeerTable {
                m.live(me, now, s.stale_after)
            } else {
                1 + up.len() as u32
            };
            assert_eq!(nd.live(now), live, "node {me}: live");
            out.push(format!(
                "{} view {:x} live {} up {up:?}",
                nd.id(),
                nd.view(),
                nd.live(now)
            ));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_shared_roster_behaves_like_peer_by_peer_membership(
        n in 2u32..7,
        aggregation in prop::sample::select(vec![
            Aggregation::FlowUpdating,
            Aggregation::PeerTable,
            Aggregation::PushSum,
        ]),
        grd in any::<bool>(),
        ops in prop::collection::vec(op(6), 1..30),
    ) {
        let algorithm = if grd { AlgorithmKind::Grd } else { AlgorithmKind::Fps };
        let s = settings(n, aggregation, algorithm);
        // Ops naming nodes beyond `n` are dropped.
        let ops: Vec<Op> = ops
            .into_iter()
            .filter(|o| match o {
                Op::Member { at, peer, .. } => *at < n && *peer < n,
                Op::Restart { node } => *node < n,
                Op::Run { .. } => true,
            })
            .collect();
        let reference = trace(n, &s, &ops, false);
        let shared = trace(n, &s, &ops, true);
        prop_assert_eq!(reference.len(), shared.len());
        for (a, b) in reference.iter().zip(&shared) {
            prop_assert_eq!(a, b);
        }
    }
}

#[test]
fn a_change_at_one_node_does_not_reach_the_others_sharing_the_roster() {
    let s = settings(4, Aggregation::PeerTable, AlgorithmKind::Fps);
    let roster = Roster::new(0, 0..4);
    assert_eq!(roster.len(), 4);
    let mut nodes: Vec<Node> = (0..4)
        .map(|i| node(i, 4, &s, 1, 0, Some(&roster)))
        .collect();
    let view = nodes[1].view();
    nodes[0].peer_down(MS, 3);
    assert_eq!(nodes[0].peers_up().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(nodes[1].peers_up().collect::<Vec<_>>(), vec![0, 2, 3]);
    assert_eq!(nodes[2].peers_up().collect::<Vec<_>>(), vec![0, 1, 3]);
    assert_eq!(nodes[1].view(), view);
    assert_ne!(nodes[0].view(), view);
    // A roster given to a node that already has a membership adds to it.
    nodes[0].roster_up(&Roster::new(2 * MS, [3]));
    assert_eq!(nodes[0].peers_up().collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(nodes[0].view(), view);
}
