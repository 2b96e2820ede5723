//! Deterministic fault harness for Cloud Control nodes (`scope: gossip`).
//!
//! N real [`Node`]s (the type `drl serve` runs) on virtual time, one
//! seeded stream, request traffic at constant per-node demand, and a
//! network that loses, delays (hence reorders) and duplicates payloads.
//! Nodes are killed and restarted, the network partitions and heals, and
//! membership (modelled: SWIM's outcome, not its messages) reports each
//! change late, at a random moment per observer, and sometimes wrongly
//! suspects a live peer for a moment (a flap, as SWIM does under loss).
//!
//! What is checked, per aligned 1 s window after the warm-up, from the
//! admissions the nodes actually made:
//!
//! * **global**: the cluster admits at most the limit + 10 %, always:
//!   during a partition, after a kill, across a heal or a restart;
//! * **k/N**: once a partition is detected (plus one second to settle),
//!   each side holding k of N nodes admits at most k/N of the limit + 10 %;
//! * **1/N after a kill**: once detected, the survivors admit at most
//!   (N-1)/N of the limit + 10 %;
//! * **steady state**: with no fault for a while and demand above the
//!   limit, the cluster admits at least the limit - 10 % (peer table,
//!   Flow Updating).
//!
//! [`random_scenario`] draws 3-12 nodes and the aggregation (Flow Updating,
//! the default, half the time; the peer table and push-sum a quarter
//! each); [`scaled_scenario`] runs a given
//! size and aggregation with the membership faults and 5 % loss.
//!
//! The same seed gives the same run.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, KeyLimit, KeyRef, Node, PeerId, Settings};
use drl_core::Nanos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::event::EventQueue;

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000_000_000;
const KEY: KeyRef<'static> = KeyRef {
    limit: "api",
    aggregate: "tenant",
};

/// A fault in a gossip scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `node` crashes at `at`; with `restart`, comes back then with fresh
    /// state.
    Kill {
        /// Which node.
        node: u32,
        /// When.
        at: Nanos,
        /// When it starts again, if it does.
        restart: Option<Nanos>,
    },
    /// The nodes with `side[i] == true` are cut from the others from
    /// `from` to `until`.
    Partition {
        /// Which side each node is on.
        side: Vec<bool>,
        /// Cut at.
        from: Nanos,
        /// Healed at.
        until: Nanos,
    },
}

/// One gossip scenario: a cluster, its demand, its network and faults.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Number of nodes (ids `0..nodes`).
    pub nodes: u32,
    /// What every node runs (its `nodes` is the `N` of the 1/N rule).
    pub settings: Settings,
    /// Global limit, units/s.
    pub limit: u64,
    /// Offered load per node, requests (of cost 1) per second.
    pub demand: Vec<u64>,
    /// Clients (FPS flows) per node.
    pub clients: Vec<u32>,
    /// Payload loss probability.
    pub loss: f64,
    /// Payload duplication probability.
    pub duplicate: f64,
    /// One-way delay range, ns (uniform: payloads reorder).
    pub delay: (Nanos, Nanos),
    /// Failure detection: a change is reported to each observer after a
    /// uniform lag in `detection / 2 ..= detection` (down) or
    /// `0 ..= detection` (up: a heal, a join).
    pub detection: Nanos,
    /// Wrong suspicions per second, cluster-wide: an observer reports a
    /// live peer down, and up again 100-400 ms later.
    pub flaps: f64,
    /// Kills and partitions.
    pub faults: Vec<Fault>,
    /// Simulated time.
    pub duration: Nanos,
    /// No check before this.
    pub warmup: Nanos,
}

/// What a passing run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Units admitted, all nodes.
    pub admitted: u64,
    /// Units offered, all nodes.
    pub offered: u64,
    /// Kills injected.
    pub kills: u64,
    /// Partitions injected.
    pub partitions: u64,
    /// Wrong suspicions injected.
    pub flaps: u64,
    /// When each wrong suspicion began.
    pub flap_times: Vec<Nanos>,
    /// Payloads sent (before loss).
    pub payloads: u64,
    /// Events processed.
    pub events: u64,
    /// Admitted per 1 s window, all nodes.
    pub per_second: Vec<u64>,
    /// Admitted per node per 1 s window.
    pub per_node: Vec<Vec<u64>>,
}

/// A broken property.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("window {second} s: {what}: admitted {admitted} against a bound of {bound}")]
pub struct Violation {
    /// Start of the 1 s window, seconds.
    pub second: u64,
    /// Which property.
    pub what: String,
    /// Admitted in the window by the nodes concerned.
    pub admitted: u64,
    /// The bound (a ceiling, or for the steady state a floor).
    pub bound: u64,
}

enum Ev {
    Datagram {
        from: u32,
        to: u32,
        bytes: Vec<u8>,
    },
    Member {
        at: u32,
        peer: u32,
        up: bool,
        life: u32,
    },
    Kill(u32),
    Restart(u32),
    Cut(usize),
    Heal(usize),
}

/// The random scenario of `seed`.
pub fn random_scenario(seed: u64) -> Scenario {
    scenario(seed, None)
}

/// The random scenario of `seed` with `nodes` nodes running `aggregation`,
/// with the membership faults (kills, restarts, partitions, wrong
/// suspicions) and 5 % gossip loss: the harness at scale, for an
/// aggregation held to the membership bounds (`flow-updating`,
/// `peer-table`). Seeds give other scenarios than [`random_scenario`]'s.
pub fn scaled_scenario(seed: u64, nodes: u32, aggregation: Aggregation) -> Scenario {
    scenario(seed, Some((nodes, aggregation)))
}

fn scenario(seed: u64, force: Option<(u32, Aggregation)>) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6055_1950_6055_1950);
    let drawn = rng.random_range(3..=12u32);
    let n = force.map_or(drawn, |f| f.0.max(2));
    let algorithm = [AlgorithmKind::Grd, AlgorithmKind::Fps][rng.random_range(0..2)];
    // The default half the time, the other two a quarter each.
    let drawn = match rng.random_range(0..4u32) {
        0 => Aggregation::PeerTable,
        1 => Aggregation::PushSum,
        _ => Aggregation::FlowUpdating,
    };
    let aggregation = force.map_or(drawn, |f| f.1);
    let detection = rng.random_range(600..=1_500u64) * MS;
    // Push-sum with one link a round under loss and duplication does not
    // settle (FPS swung 2-3x the limit at 9 nodes, seed 2132): it is run
    // with branching 2-3, as the paper's scaling runs were.
    let branching = if aggregation == Aggregation::PushSum {
        rng.random_range(2..=3u32)
    } else {
        rng.random_range(1..=3u32)
    };
    let interval = 50 * MS;
    let settings = Settings {
        aggregation,
        branching,
        stale_after: Settings::default_stale_after(interval, n, branching, detection),
        ..Settings::new(algorithm, n)
    };
    let limit = 5_000;
    // Demand 1.5-3x the limit, spread unevenly; some nodes idle.
    let total = limit * rng.random_range(15..=30u64) / 10;
    let weights: Vec<u64> = (0..n)
        .map(|_| [0, 1, 2, 4][rng.random_range(0..4)])
        .collect();
    let wsum: u64 = weights.iter().sum::<u64>().max(1);
    let demand: Vec<u64> = weights.iter().map(|w| total * w / wsum).collect();
    let clients = (0..n).map(|_| rng.random_range(1..=4u32)).collect();
    let duration = rng.random_range(10..=14u64) * SEC;
    let mut faults = Vec::new();
    let mut t = 3 * SEC;
    // Push-sum is the paper's reference, not held to the membership
    // bounds: until a dead peer is detected, every share sent to it is
    // lost (with branching 2, a third of a node's mass per round: after
    // 12 rounds under 1% is left), and the local values folded in since
    // then swamp what is left (docs/gossip.md). Its seeds get a lossy,
    // delaying, duplicating network only.
    let membership_faults = aggregation != Aggregation::PushSum;
    while membership_faults && t + 3 * SEC < duration {
        let len = rng.random_range(2_000..=4_000u64) * MS;
        let dead = faults
            .iter()
            .filter(|f| matches!(f, Fault::Kill { restart: None, .. }))
            .count() as u32;
        if rng.random_bool(0.5) || dead + 2 > n {
            let mut side: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
            side[0] = true;
            if side.iter().all(|s| *s) {
                side[n as usize - 1] = false;
            }
            faults.push(Fault::Partition {
                side,
                from: t,
                until: t + len,
            });
        } else {
            let dead: Vec<u32> = faults
                .iter()
                .filter_map(|f| match f {
                    Fault::Kill {
                        node,
                        restart: None,
                        ..
                    } => Some(*node),
                    _ => None,
                })
                .collect();
            let mut node = rng.random_range(0..n);
            while dead.contains(&node) {
                node = (node + 1) % n;
            }
            let restart = rng.random_bool(0.6).then_some(t + len);
            faults.push(Fault::Kill {
                node,
                at: t,
                restart,
            });
        }
        t += len + rng.random_range(1_500..=3_000u64) * MS;
    }
    let d_lo = rng.random_range(0..=20u64) * MS;
    let loss = [0.0, 0.05, 0.1, 0.2][rng.random_range(0..4)];
    Scenario {
        nodes: n,
        settings,
        limit,
        demand,
        clients,
        loss: if force.is_some() { 0.05 } else { loss },
        duplicate: [0.0, 0.02, 0.1][rng.random_range(0..3)],
        delay: (d_lo, d_lo + rng.random_range(0..=40u64) * MS),
        detection,
        flaps: if membership_faults {
            [0.0, 0.5, 2.0][rng.random_range(0..3)]
        } else {
            0.0
        },
        faults,
        duration,
        // Push-sum mixes for a few seconds before its sums are right.
        warmup: if aggregation == Aggregation::PushSum {
            5 * SEC
        } else {
            3 * SEC
        },
    }
}

/// Runs the random scenario of `seed` ([`random_scenario`]).
pub fn run_seed(seed: u64) -> Result<Report, Violation> {
    run(&random_scenario(seed), seed)
}

/// The windows (start second) a bound applies to, with the nodes it
/// covers and the bound, units per second.
struct Bound {
    from: Nanos,
    until: Nanos,
    nodes: Vec<bool>,
    limit: u64,
    what: String,
}

/// Runs `sc` with random streams from `seed` and checks the bounds.
pub fn run(sc: &Scenario, seed: u64) -> Result<Report, Violation> {
    let (report, bounds) = simulate(sc, seed);
    check(sc, &report, &bounds)?;
    Ok(report)
}

/// Runs `sc` with random streams from `seed`, without checking anything:
/// what each node admitted, per second.
pub fn trace(sc: &Scenario, seed: u64) -> Report {
    simulate(sc, seed).0
}

/// What [`observe`] calls after every simulated millisecond: the time,
/// the nodes, which are alive, which partition side each is on.
pub type Observer<'a> = dyn FnMut(Nanos, &[Node], &[bool], &[bool]) + 'a;

/// Runs `sc` as [`trace`] does, calling `observe` after every
/// millisecond's timers with the time, the nodes, which are alive, and
/// which partition side each is on (diagnostics).
pub fn observe(sc: &Scenario, seed: u64, observe: &mut Observer<'_>) -> Report {
    simulate_observed(sc, seed, observe).0
}

fn simulate(sc: &Scenario, seed: u64) -> (Report, Vec<Bound>) {
    simulate_observed(sc, seed, &mut |_, _, _, _| {})
}

fn simulate_observed(sc: &Scenario, seed: u64, observe: &mut Observer<'_>) -> (Report, Vec<Bound>) {
    let n = sc.nodes;
    let nu = n as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let limit = KeyLimit {
        rate: sc.limit,
        depth: (sc.limit / 50 / n as u64).max(1),
    };
    let new_node = |i: u32, life: u32, now: Nanos| {
        let seed = seed ^ ((i as u64) << 32) ^ life as u64;
        Node::new(i, sc.settings.clone(), seed, now).expect("valid settings")
    };
    let mut nodes: Vec<Node> = (0..n).map(|i| new_node(i, 0, 0)).collect();
    for a in nodes.iter_mut() {
        for b in 0..n {
            a.peer_up(0, b);
        }
    }
    let mut alive = vec![true; nu];
    let mut life = vec![0u32; nu];
    let mut side = vec![false; nu];
    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut report = Report::default();
    let mut bounds: Vec<Bound> = Vec::new();
    let settle = sc.detection + SEC;
    let all = vec![true; nu];
    bounds.push(Bound {
        from: sc.warmup,
        until: sc.duration,
        nodes: all.clone(),
        limit: sc.limit,
        what: "global".into(),
    });
    let mut partitions = Vec::new();
    for f in &sc.faults {
        match f {
            Fault::Kill { node, at, restart } => {
                report.kills += 1;
                q.schedule(*at, Ev::Kill(*node));
                let end = restart.unwrap_or(sc.duration);
                if let Some(r) = restart {
                    q.schedule(*r, Ev::Restart(*node));
                }
                let mut survivors = all.clone();
                survivors[*node as usize] = false;
                bounds.push(Bound {
                    from: at + settle,
                    until: end,
                    nodes: survivors,
                    limit: sc.limit * (n as u64 - 1) / n as u64,
                    what: format!("survivors of node {node}'s kill"),
                });
            }
            Fault::Partition {
                side: s,
                from,
                until,
            } => {
                report.partitions += 1;
                q.schedule(*from, Ev::Cut(partitions.len()));
                q.schedule(*until, Ev::Heal(partitions.len()));
                partitions.push(s.clone());
                for which in [true, false] {
                    let members: Vec<bool> = s.iter().map(|x| *x == which).collect();
                    let k = members.iter().filter(|x| **x).count() as u64;
                    bounds.push(Bound {
                        from: from + settle,
                        until: *until,
                        nodes: members,
                        limit: sc.limit * k / n as u64,
                        what: format!("partition side of {k}/{n}"),
                    });
                }
            }
        }
    }
    // Flaps: wrong suspicions at random moments.
    let mut flaps: Vec<(Nanos, u32, u32)> = Vec::new();
    if sc.flaps > 0.0 {
        let mut t = 0;
        loop {
            let gap = (-rng.random::<f64>().max(1e-12).ln() / sc.flaps * 1e9) as Nanos;
            t += gap.max(MS);
            if t >= sc.duration {
                break;
            }
            let a = rng.random_range(0..n);
            let b = (a + rng.random_range(1..n)) % n;
            flaps.push((t, a, b));
        }
    }
    for &(t, a, b) in &flaps {
        report.flaps += 1;
        report.flap_times.push(t);
        let back = t + rng.random_range(100..=400u64) * MS;
        q.schedule(
            t,
            Ev::Member {
                at: a,
                peer: b,
                up: false,
                life: u32::MAX,
            },
        );
        q.schedule(
            back,
            Ev::Member {
                at: a,
                peer: b,
                up: true,
                life: u32::MAX,
            },
        );
    }
    let secs = sc.duration.div_ceil(SEC) as usize;
    let mut admitted = vec![vec![0u64; secs]; nu];
    let mut owed = vec![0u64; nu];
    let mut rr = vec![0u32; nu];
    let mut buf = Vec::new();
    let mut now: Nanos = 0;
    while now < sc.duration {
        // Events due by now.
        while let Some((t, ev)) = q.pop_until(now) {
            report.events += 1;
            match ev {
                Ev::Datagram { from, to, bytes } => {
                    let (f, t) = (from as usize, to as usize);
                    if alive[t] && side[f] == side[t] {
                        let _ = nodes[t].handle_datagram(now, from, &bytes);
                    }
                }
                Ev::Member {
                    at,
                    peer,
                    up,
                    life: l,
                } => {
                    let (a, p) = (at as usize, peer as usize);
                    if !alive[a] {
                        continue;
                    }
                    let reachable = alive[p] && side[a] == side[p];
                    if l == u32::MAX {
                        // A flap: down regardless, up only if reachable.
                        if !up {
                            nodes[a].peer_down(t, peer);
                        } else if reachable {
                            nodes[a].peer_up(t, peer);
                        }
                    } else if l == life[p] {
                        if up && reachable {
                            nodes[a].peer_up(t, peer);
                        } else if !up && !reachable {
                            nodes[a].peer_down(t, peer);
                        }
                    }
                }
                Ev::Kill(k) => {
                    let i = k as usize;
                    alive[i] = false;
                    for m in 0..n {
                        if m != k {
                            let lag = rng.random_range(sc.detection / 2..=sc.detection);
                            let ev = Ev::Member {
                                at: m,
                                peer: k,
                                up: false,
                                life: life[i],
                            };
                            q.schedule(t + lag, ev);
                        }
                    }
                }
                Ev::Restart(k) => {
                    let i = k as usize;
                    life[i] += 1;
                    alive[i] = true;
                    nodes[i] = new_node(k, life[i], t);
                    for m in 0..n {
                        if m == k {
                            continue;
                        }
                        for (at, peer) in [(m, k), (k, m)] {
                            let lag = rng.random_range(0..=sc.detection);
                            let ev = Ev::Member {
                                at,
                                peer,
                                up: true,
                                life: life[peer as usize],
                            };
                            q.schedule(t + lag, ev);
                        }
                    }
                }
                Ev::Cut(p) => {
                    side.clone_from(&partitions[p]);
                    for (a, b) in crate::engine::crossing(&side) {
                        let lag = rng.random_range(sc.detection / 2..=sc.detection);
                        let ev = Ev::Member {
                            at: a,
                            peer: b,
                            up: false,
                            life: life[b as usize],
                        };
                        q.schedule(t + lag, ev);
                    }
                }
                Ev::Heal(p) => {
                    let was = std::mem::replace(&mut side, vec![false; nu]);
                    debug_assert_eq!(was, partitions[p]);
                    for (a, b) in crate::engine::crossing(&was) {
                        let lag = rng.random_range(0..=sc.detection);
                        let ev = Ev::Member {
                            at: a,
                            peer: b,
                            up: true,
                            life: life[b as usize],
                        };
                        q.schedule(t + lag, ev);
                    }
                }
            }
        }
        // One millisecond of traffic, then timers and transmissions.
        let second = (now / SEC) as usize;
        for i in 0..nu {
            if !alive[i] {
                continue;
            }
            owed[i] += sc.demand[i];
            let count = owed[i] / 1_000;
            owed[i] %= 1_000;
            report.offered += count;
            for _ in 0..count {
                rr[i] = (rr[i] + 1) % sc.clients[i].max(1);
                let flow = rr[i] as u64;
                if nodes[i]
                    .admit(now, KEY, limit, 1, flow)
                    .is_ok_and(|a| a.allowed)
                {
                    admitted[i][second] += 1;
                }
            }
            nodes[i].handle_timeout(now);
            crate::node_trace::drain(&mut nodes[i], now, &mut buf, |to, bytes| {
                report.payloads += 1;
                let t = to as usize;
                if side[i] != side[t] || rng.random_bool(sc.loss) {
                    return;
                }
                let copies = if rng.random_bool(sc.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    let d = rng.random_range(sc.delay.0..=sc.delay.1);
                    let ev = Ev::Datagram {
                        from: i as PeerId,
                        to,
                        bytes: bytes.to_vec(),
                    };
                    q.schedule(now + d, ev);
                }
            });
        }
        observe(now, &nodes, &alive, &side);
        now += MS;
    }
    report.per_second = (0..secs)
        .map(|s| admitted.iter().map(|a| a[s]).sum())
        .collect();
    report.admitted = report.per_second.iter().sum();
    report.per_node = admitted;
    (report, bounds)
}

fn check(sc: &Scenario, report: &Report, bounds: &[Bound]) -> Result<(), Violation> {
    let nu = sc.nodes as usize;
    let admitted = &report.per_node;
    // The bounds, on every whole window inside their span.
    for b in bounds {
        let first = b.from.div_ceil(SEC);
        let last = (b.until / SEC).min(sc.duration / SEC);
        for s in first..last {
            let got: u64 = (0..nu)
                .filter(|i| b.nodes[*i])
                .map(|i| admitted[i][s as usize])
                .sum();
            let bound = b.limit + b.limit / 10;
            if got > bound {
                return Err(Violation {
                    second: s,
                    what: b.what.clone(),
                    admitted: got,
                    bound,
                });
            }
        }
    }
    steady_state(sc, report)
}

/// With the peer table or Flow Updating, demand above the limit and no
/// fault for three seconds (settling), the cluster admits at least the
/// limit - 10 %.
fn steady_state(sc: &Scenario, report: &Report) -> Result<(), Violation> {
    if sc.settings.aggregation == Aggregation::PushSum {
        return Ok(());
    }
    let offered: u64 = sc.demand.iter().sum();
    if offered < sc.limit * 12 / 10 {
        return Ok(());
    }
    let floor = sc.limit - sc.limit / 10;
    for s in 0..sc.duration / SEC {
        let start = s * SEC;
        let end = start + SEC;
        let disturbed = start < sc.warmup
            || sc.faults.iter().any(|f| {
                let (a, b) = match f {
                    Fault::Kill { at, restart, .. } => (*at, restart.unwrap_or(sc.duration)),
                    Fault::Partition { from, until, .. } => (*from, *until),
                };
                // From the fault to 3 s after it ended.
                start < b + 3 * SEC && end > a
            })
            // A wrong suspicion costs its observer 1/N for up to 2 s.
            || report
                .flap_times
                .iter()
                .any(|t| start < t + 2 * SEC && end > *t);
        let got = report.per_second[s as usize];
        if !disturbed && got < floor {
            return Err(Violation {
                second: s,
                what: "steady state: under the floor".into(),
                admitted: got,
                bound: floor,
            });
        }
    }
    Ok(())
}
