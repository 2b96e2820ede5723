//! One trace, one verdict: the same sequence of arrivals, payloads,
//! membership events and timer firings, fed to a Cloud Control node through
//! drl-sim (`drl_sim::node_trace`, how the simulator drives its limiters)
//! and through drl-cluster-net's `Driver` (the service's glue, on a manual clock),
//! gives identical verdicts and identical outgoing bytes. The simulator
//! runs the service's node, not a copy of it.

use std::net::SocketAddr;

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, KeyLimit, KeyRef, Node, PeerId, Settings};
use drl_cluster_net::gossip::Driver;
use drl_cluster_net::membership::{Event, NodeIdent};
use drl_core::Nanos;
use drl_sim::node_trace::{Input, Output, drain, replay};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MS: Nanos = 1_000_000;

fn settings(algorithm: AlgorithmKind, aggregation: Aggregation) -> Settings {
    Settings {
        aggregation,
        ..Settings::new(algorithm, 3)
    }
}

/// Records node 0's inputs and outputs while it runs with two live peers
/// over a lossy link, with a wrong suspicion and a partition on the way.
fn record(s: &Settings, seed: u64) -> (Vec<Input>, Vec<Output>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut me = Node::new(0, s.clone(), 100, 0).unwrap();
    let mut peers: Vec<Node> = (1..3)
        .map(|i| Node::new(i, s.clone(), 100 + i as u64, 0).unwrap())
        .collect();
    let mut trace = Vec::new();
    let mut outs = Vec::new();
    let mut feed = |me: &mut Node, input: Input, outs: &mut Vec<Output>| {
        outs.extend(replay(me, std::slice::from_ref(&input)));
        trace.push(input);
    };
    for p in peers.iter_mut() {
        for q in 0..3 {
            p.peer_up(0, q);
        }
    }
    for peer in [1, 2] {
        feed(
            &mut me,
            Input::Member {
                at: 0,
                peer,
                up: true,
            },
            &mut outs,
        );
    }
    let mut buf = Vec::new();
    let mut delivered = 0;
    for ms in 1..3_000u64 {
        let now = ms * MS;
        // Membership: node 2 wrongly suspected for 300 ms, then node 1 cut
        // off from 1.5 s to 2.2 s.
        let events: &[(PeerId, bool)] = match ms {
            700 => &[(2, false)],
            1_000 => &[(2, true)],
            1_500 => &[(1, false)],
            2_200 => &[(1, true)],
            _ => &[],
        };
        for &(peer, up) in events {
            feed(&mut me, Input::Member { at: now, peer, up }, &mut outs);
        }
        for _ in 0..rng.random_range(0..4) {
            let aggregate = format!("tenant-{}", rng.random_range(0..3));
            let input = Input::Admit {
                at: now,
                limit: "api".into(),
                aggregate,
                rate: KeyLimit {
                    rate: 1_000,
                    depth: 50,
                },
                cost: rng.random_range(1..4),
                flow: rng.random_range(0..5),
            };
            feed(&mut me, input, &mut outs);
        }
        for (i, p) in peers.iter_mut().enumerate() {
            for _ in 0..rng.random_range(0..3) {
                let key = KeyRef {
                    limit: "api",
                    aggregate: "tenant-0",
                };
                let lim = KeyLimit {
                    rate: 1_000,
                    depth: 50,
                };
                let _ = p.admit(now, key, lim, 1, i as u64);
            }
            p.handle_timeout(now);
            let from = p.id();
            let cut = from == 1 && (1_500..2_200).contains(&ms);
            let mut mail = Vec::new();
            drain(p, now, &mut buf, |to, bytes| {
                if to == 0 && !cut && rng.random_bool(0.9) {
                    mail.push(bytes.to_vec());
                }
            });
            for bytes in mail {
                delivered += 1;
                feed(
                    &mut me,
                    Input::Datagram {
                        at: now,
                        from,
                        bytes,
                    },
                    &mut outs,
                );
            }
        }
        feed(&mut me, Input::Timer { at: now }, &mut outs);
        // Node 0's payloads reach its peers (not part of node 0's trace).
        for o in outs
            .iter()
            .rev()
            .take_while(|o| matches!(o, Output::Transmit { .. }))
        {
            if let Output::Transmit { to, bytes } = o {
                let _ = peers[*to as usize - 1].handle_datagram(now, 0, bytes);
            }
        }
    }
    assert!(delivered > 50, "the peers talked to node 0: {delivered}");
    (trace, outs)
}

fn addr(id: PeerId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9_000 + id as u16))
}

/// Feeds the trace to drl-cluster-net's `Driver` the way `GossipStore` does:
/// membership as foca events, payloads with their sender id, decisions on
/// the shared key table, the timer when due, and a drain after each input.
fn through_driver(s: &Settings, trace: &[Input]) -> Vec<Output> {
    let mut d = Driver::new(Node::new(0, s.clone(), 100, 0).unwrap());
    let mut out = Vec::new();
    for input in trace {
        match input {
            Input::Admit { .. } => out.extend(input.decide(d.keys())),
            Input::Datagram { at, from, bytes } => {
                let _ = d.on_datagram(*at, *from, bytes);
            }
            Input::Member { at, peer, up } => {
                let id = NodeIdent {
                    id: *peer,
                    addr: addr(*peer),
                    generation: 1,
                };
                d.on_membership(*at, if *up { Event::Up(id) } else { Event::Down(id) });
            }
            Input::Timer { at } => {
                if d.poll_timeout().is_some_and(|t| t <= *at) {
                    d.on_timer(*at);
                }
            }
        }
        let now = input.at();
        d.drain(now, |a, bytes| {
            let to = (a.port() - 9_000) as PeerId;
            out.push(Output::Transmit {
                to,
                bytes: bytes.to_vec(),
            });
        });
    }
    out
}

#[test]
fn one_trace_one_verdict() {
    for algorithm in [AlgorithmKind::Grd, AlgorithmKind::Fps] {
        for aggregation in [Aggregation::PeerTable, Aggregation::PushSum] {
            let s = settings(algorithm, aggregation);
            let (trace, recorded) = record(&s, 7);
            let sim = replay(&mut Node::new(0, s.clone(), 100, 0).unwrap(), &trace);
            let service = through_driver(&s, &trace);
            let what = format!("{algorithm} {aggregation}");
            let verdicts = sim
                .iter()
                .filter(|o| matches!(o, Output::Verdict { .. }))
                .count();
            let denied = sim
                .iter()
                .filter(|o| matches!(o, Output::Verdict { allowed: false, .. }))
                .count();
            let sent = sim.len() - verdicts;
            assert!(
                verdicts > 3_000 && denied > 100 && sent > 50,
                "{what}: {verdicts} {denied} {sent}"
            );
            assert_eq!(sim, recorded, "{what}: a replay is the recorded run");
            // Outputs are compared in order; the first difference, if any,
            // is reported by position.
            if let Some(i) =
                (0..sim.len().max(service.len())).find(|&i| sim.get(i) != service.get(i))
            {
                panic!(
                    "{what}: output {i} differs: drl-sim {:?}, drl-cluster-net {:?}",
                    sim.get(i),
                    service.get(i)
                );
            }
        }
    }
}
