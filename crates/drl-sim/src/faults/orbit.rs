//! Deterministic fault-injection harness for [`OrbitNode`]s.
//!
//! Virtual time on drl-sim's [`EventQueue`] (events ordered by
//! `(time, sequence)`), one seeded ChaCha8 stream, N nodes of the real state
//! machine, and a network that loses, delays, duplicates and reorders
//! messages, nodes that crash and restart, partitions, and a failure detector
//! that is late and sometimes wrong. Every message goes through the codec.
//! After every event the harness checks the invariant (admitted <= cap for
//! every key and window) and the stronger conservation claim of
//! `docs/orbit.md` (admitted + capacity still held by live nodes <= cap),
//! and that at most one table per window and lane is live (held, kept
//! aside, or in flight to a node that would accept it).
//!
//! The same seed gives the same run, event for event.

use std::collections::{BTreeMap, BTreeSet};

use drl_cluster::orbit::{ConfigError, NodeId, OrbitConfig, OrbitNode, Outgoing, codec};
use drl_core::Nanos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::event::EventQueue;

/// Network and node faults to inject.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Probability a message is lost.
    pub loss: f64,
    /// Probability a message is delivered twice.
    pub duplicate: f64,
    /// Message delay range, ns (uniform; random delays reorder messages).
    pub delay: (Nanos, Nanos),
    /// Probability per node per window that it crashes.
    pub crash: f64,
    /// Downtime range after a crash, ns.
    pub downtime: (Nanos, Nanos),
    /// Probability per window that a partition starts (if none is on).
    pub partition: f64,
    /// Partition length range, ns.
    pub partition_len: (Nanos, Nanos),
    /// Failure-detector lag range, ns.
    pub detect_lag: (Nanos, Nanos),
    /// Probability per node per window of a wrong suspicion of a live peer.
    pub false_suspicion: f64,
    /// Largest clock offset of a node, ns (each node gets a fixed random
    /// offset in `0..=clock_skew` added to the time it is given).
    pub clock_skew: Nanos,
}

impl Faults {
    /// A perfect network: no loss, no duplication, fixed small delay.
    pub fn none(delay: Nanos) -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            delay: (delay, delay),
            crash: 0.0,
            downtime: (0, 0),
            partition: 0.0,
            partition_len: (0, 0),
            detect_lag: (0, 0),
            false_suspicion: 0.0,
            clock_skew: 0,
        }
    }
}

/// One simulation: a ring, a workload and faults.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The Orbit configuration every node runs.
    pub orbit: OrbitConfig,
    /// Number of nodes (ids 0..nodes, ring in id order).
    pub nodes: usize,
    /// Number of keys (`k0`, `k1`, ...).
    pub keys: usize,
    /// Simulated time, ns.
    pub duration: Nanos,
    /// Relative demand of each node (length `nodes`); 0 = no requests.
    pub weights: Vec<u32>,
    /// Total demand per key per window, in cost units, over all nodes.
    pub demand_per_window: u64,
    /// Request cost range (inclusive).
    pub cost: (u64, u64),
    /// Timer period of every node, ns.
    pub tick: Nanos,
    /// Faults.
    pub faults: Faults,
}

/// What a run produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Admitted cost per (key index, window).
    pub admitted: BTreeMap<(usize, u64), u64>,
    /// Admitted cost per (node, window), all keys.
    pub admitted_by_node: BTreeMap<(usize, u64), u64>,
    /// Events processed.
    pub events: u64,
    /// Messages sent (before loss).
    pub messages: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Partitions injected.
    pub partitions: u64,
}

/// A broken invariant, with enough context to debug the seed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated at t={now}ns (event {event}): {what}")]
pub struct Violation {
    /// Virtual time.
    pub now: Nanos,
    /// Event index.
    pub event: u64,
    /// Description.
    pub what: String,
}

#[derive(Clone, Debug)]
enum Event {
    Tick(usize),
    Request(usize),
    Deliver {
        to: usize,
        from: usize,
        bytes: Vec<u8>,
        /// Header (window, lane, hop, base_hop), for the single-table check.
        head: (u64, u32, u32, u32),
    },
    Crash(usize),
    Restart(usize),
    PeerDown {
        at: usize,
        peer: usize,
    },
    PeerRestarted {
        at: usize,
        peer: usize,
    },
    PeerUp {
        at: usize,
        peer: usize,
    },
    PartitionStart,
    /// A scripted partition: these sides, for this long.
    Partition(Vec<u8>, Nanos),
    PartitionEnd,
    WindowFaults,
}

/// The simulator. Create with [`Sim::new`], run with [`Sim::run`].
pub struct Sim {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    queue: EventQueue<Event>,
    nodes: Vec<Option<OrbitNode>>,
    /// Partition side of each node (all 0 when healed).
    side: Vec<u8>,
    report: SimReport,
    mean_gap: Vec<Nanos>,
    /// Clock offset of each node.
    offset: Vec<Nanos>,
    /// Downtime of scripted crashes, by node.
    scripted_downtime: BTreeMap<usize, Nanos>,
}

fn keyname(k: usize) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

impl Sim {
    /// A simulator for `cfg` seeded with `seed`. All nodes boot at time 0
    /// (so, by the restart rule, window 0 admits nothing).
    pub fn new(cfg: SimConfig, seed: u64) -> Result<Self, ConfigError> {
        let ring: Vec<NodeId> = (0..cfg.nodes as NodeId).collect();
        let total_w: u64 = cfg.weights.iter().map(|&w| w as u64).sum::<u64>().max(1);
        let avg_cost = (cfg.cost.0 + cfg.cost.1).max(2) / 2;
        let mean_gap = cfg
            .weights
            .iter()
            .map(|&w| {
                // Requests per window at this node, over all keys.
                let per_window =
                    cfg.demand_per_window * cfg.keys.max(1) as u64 * w as u64 / total_w / avg_cost;
                cfg.orbit
                    .window
                    .checked_div(per_window)
                    .map_or(0, |g| g.max(1))
            })
            .collect();
        let n = cfg.nodes;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let offset: Vec<Nanos> = (0..n)
            .map(|_| rng.random_range(0..=cfg.faults.clock_skew))
            .collect();
        let mut nodes = Vec::with_capacity(n);
        for (id, off) in offset.iter().enumerate() {
            nodes.push(Some(OrbitNode::new(
                cfg.orbit.clone(),
                id as NodeId,
                ring.clone(),
                *off,
            )?));
        }
        let mut sim = Self {
            cfg,
            rng,
            queue: EventQueue::new(),
            nodes,
            side: vec![0; n],
            report: SimReport::default(),
            mean_gap,
            offset,
            scripted_downtime: BTreeMap::new(),
        };
        for i in 0..n {
            let t = sim.rng.random_range(0..sim.cfg.tick.max(1));
            sim.push(t, Event::Tick(i));
            sim.schedule_request(i, 0);
        }
        sim.push(0, Event::WindowFaults);
        Ok(sim)
    }

    fn push(&mut self, at: Nanos, ev: Event) {
        self.queue.schedule(at, ev);
    }

    /// Virtual time: that of the event being processed.
    fn now(&self) -> Nanos {
        self.queue.now()
    }

    fn range(&mut self, r: (Nanos, Nanos)) -> Nanos {
        if r.1 <= r.0 {
            r.0
        } else {
            self.rng.random_range(r.0..=r.1)
        }
    }

    fn schedule_request(&mut self, i: usize, now: Nanos) {
        let gap = self.mean_gap[i];
        if gap == 0 {
            return;
        }
        let g = self.rng.random_range(gap / 2..=gap + gap / 2).max(1);
        self.push(now + g, Event::Request(i));
    }

    fn send(&mut self, from: usize, outs: Vec<Outgoing>) {
        for o in outs {
            self.report.messages += 1;
            let to = o.to as usize;
            if to >= self.nodes.len() {
                continue;
            }
            if self.side[from] != self.side[to] {
                continue;
            }
            if self.rng.random_bool(self.cfg.faults.loss) {
                continue;
            }
            let Ok(bytes) = codec::encode(&o.msg) else {
                // Unencodable tables are dropped by a transport: loss.
                continue;
            };
            let head = (o.msg.window, o.msg.lane, o.msg.hop, o.msg.base_hop);
            let copies = if self.rng.random_bool(self.cfg.faults.duplicate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let d = self.range(self.cfg.faults.delay);
                self.push(
                    self.now() + d,
                    Event::Deliver {
                        to,
                        from,
                        bytes: bytes.clone(),
                        head,
                    },
                );
            }
        }
    }

    /// Scripts a crash of `node` at `at`, restarting after `downtime`.
    pub fn schedule_crash(&mut self, at: Nanos, node: usize, downtime: Nanos) {
        if node < self.nodes.len() {
            self.push(at, Event::Crash(node));
            // The restart is scheduled by the crash with the configured
            // downtime range; pin it by using a zero-width range here.
            self.scripted_downtime.insert(node, downtime);
        }
    }

    /// Scripts a partition at `at`: node `i` is on side `sides[i]`; it heals
    /// after `len`.
    pub fn schedule_partition(&mut self, at: Nanos, sides: Vec<u8>, len: Nanos) {
        if sides.len() == self.nodes.len() {
            self.push(at, Event::Partition(sides, len));
        }
    }

    /// Runs to the end; `Err` on the first broken invariant.
    pub fn run(mut self) -> Result<SimReport, Violation> {
        while let Some((_, ev)) = self.queue.pop_until(self.cfg.duration) {
            self.report.events += 1;
            self.step(ev)?;
            self.check()?;
        }
        Ok(self.report)
    }

    fn step(&mut self, ev: Event) -> Result<(), Violation> {
        let now = self.now();
        match ev {
            Event::Tick(i) => {
                let mut next = now + self.cfg.tick;
                let local = now + self.offset[i];
                if let Some(n) = &mut self.nodes[i] {
                    let outs = n.on_tick(local);
                    let deadline = n.next_deadline().saturating_sub(self.offset[i]);
                    next = next.min(deadline).max(now + 1);
                    self.send(i, outs);
                }
                self.push(next, Event::Tick(i));
            }
            Event::Request(i) => {
                self.schedule_request(i, now);
                let k = self.rng.random_range(0..self.cfg.keys.max(1));
                let cost = self.range(self.cfg.cost);
                let local = now + self.offset[i];
                if let Some(n) = &mut self.nodes[i] {
                    let d = n.admit(local, &keyname(k), cost);
                    if d.is_allowed() && cost > 0 {
                        // The node charges the window of its (monotonic) now.
                        let w = n.current_window();
                        let total = self.report.admitted.entry((k, w)).or_default();
                        *total += cost;
                        let total = *total;
                        *self.report.admitted_by_node.entry((i, w)).or_default() += cost;
                        let cap = self.cfg.orbit.cap;
                        if total > cap {
                            return Err(self.violation(format!(
                                "key k{k} window {w}: admitted {total} > cap {cap}"
                            )));
                        }
                    }
                }
            }
            Event::Deliver {
                to, from, bytes, ..
            } => {
                if self.side[from] != self.side[to] {
                    return Ok(());
                }
                let msg = codec::decode(&bytes).map_err(|e| Violation {
                    now,
                    event: self.report.events,
                    what: format!("codec could not decode its own output: {e}"),
                })?;
                let local = now + self.offset[to];
                if let Some(n) = &mut self.nodes[to] {
                    let outs = n.on_message(local, from as NodeId, msg);
                    self.send(to, outs);
                }
            }
            Event::Crash(i) => {
                if self.nodes[i].take().is_some() {
                    self.report.crashes += 1;
                    let down = match self.scripted_downtime.remove(&i) {
                        Some(d) => d.max(1),
                        None => self.range(self.cfg.faults.downtime).max(1),
                    };
                    self.push(now + down, Event::Restart(i));
                    for j in 0..self.nodes.len() {
                        if j != i {
                            let lag = self.range(self.cfg.faults.detect_lag);
                            self.push(now + lag, Event::PeerDown { at: j, peer: i });
                        }
                    }
                }
            }
            Event::Restart(i) => {
                let ring: Vec<NodeId> = (0..self.cfg.nodes as NodeId).collect();
                let local = now + self.offset[i];
                let node = OrbitNode::new(self.cfg.orbit.clone(), i as NodeId, ring, local)
                    .map_err(|e| Violation {
                        now,
                        event: self.report.events,
                        what: format!("restart failed: {e}"),
                    })?;
                self.nodes[i] = Some(node);
                for j in 0..self.nodes.len() {
                    if j != i {
                        let lag = self.range(self.cfg.faults.detect_lag);
                        self.push(now + lag, Event::PeerRestarted { at: j, peer: i });
                    }
                }
            }
            Event::PeerDown { at, peer } => {
                if let Some(n) = &mut self.nodes[at] {
                    n.on_peer_down(peer as NodeId);
                }
            }
            Event::PeerRestarted { at, peer } => {
                if let Some(n) = &mut self.nodes[at] {
                    n.on_peer_restarted(peer as NodeId);
                }
            }
            Event::PeerUp { at, peer } => {
                if let Some(n) = &mut self.nodes[at] {
                    n.on_peer_up(peer as NodeId);
                }
            }
            Event::PartitionStart => {
                if self.side.iter().all(|&s| s == 0) && self.nodes.len() > 1 {
                    self.report.partitions += 1;
                    for s in self.side.iter_mut() {
                        *s = self.rng.random_range(0..2);
                    }
                    let len = self.range(self.cfg.faults.partition_len);
                    self.push(now + len.max(1), Event::PartitionEnd);
                    self.detector_follow_partition(now);
                }
            }
            Event::Partition(sides, len) => {
                self.report.partitions += 1;
                self.side = sides;
                self.push(now + len.max(1), Event::PartitionEnd);
                self.detector_follow_partition(now);
            }
            Event::PartitionEnd => {
                self.side.iter_mut().for_each(|s| *s = 0);
                self.detector_follow_partition(now);
            }
            Event::WindowFaults => {
                let w = self.cfg.orbit.window;
                let f = self.cfg.faults.clone();
                for i in 0..self.nodes.len() {
                    if self.rng.random_bool(f.crash) {
                        let t = self.rng.random_range(0..w);
                        self.push(now + t, Event::Crash(i));
                    }
                    if self.rng.random_bool(f.false_suspicion) {
                        let peer = self.rng.random_range(0..self.nodes.len());
                        let t = self.rng.random_range(0..w);
                        let len = self.range(f.detect_lag).max(1);
                        self.push(now + t, Event::PeerDown { at: i, peer });
                        self.push(now + t + len, Event::PeerUp { at: i, peer });
                    }
                }
                if self.rng.random_bool(f.partition) {
                    let t = self.rng.random_range(0..w);
                    self.push(now + t, Event::PartitionStart);
                }
                self.push(now + w, Event::WindowFaults);
            }
        }
        Ok(())
    }

    fn detector_follow_partition(&mut self, now: Nanos) {
        for a in 0..self.nodes.len() {
            for b in 0..self.nodes.len() {
                if a == b {
                    continue;
                }
                let lag = self.range(self.cfg.faults.detect_lag);
                let ev = if self.side[a] != self.side[b] {
                    Event::PeerDown { at: a, peer: b }
                } else if self.nodes[b].is_some() {
                    Event::PeerUp { at: a, peer: b }
                } else {
                    // A crashed node does not come back with a healed link.
                    continue;
                };
                self.push(now + lag, ev);
            }
        }
    }

    fn check(&self) -> Result<(), Violation> {
        let cap = self.cfg.orbit.cap;
        // 1. Conservation: admitted + capacity live nodes still hold <= cap,
        //    for every window some node is in (and the one before).
        let mut windows = BTreeSet::new();
        for n in self.nodes.iter().flatten() {
            windows.insert(n.current_window());
            windows.insert(n.current_window().saturating_sub(1));
        }
        for k in 0..self.cfg.keys.max(1) {
            let key = keyname(k);
            for &win in &windows {
                let admitted = self.report.admitted.get(&(k, win)).copied().unwrap_or(0);
                let live: u64 = self
                    .nodes
                    .iter()
                    .flatten()
                    .map(|n| n.live_capacity(&key, win))
                    .sum();
                if admitted + live > cap {
                    return Err(self.violation(format!(
                        "key k{k} window {win}: admitted {admitted} + live {live} > cap {cap}"
                    )));
                }
            }
        }
        // 2. At most one live table per window: held or kept aside by a
        //    node, or in flight to a node that would accept it.
        type Lineages = BTreeMap<(u64, u32), BTreeSet<(usize, u32)>>;
        let mut tables: Lineages = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(n) = n {
                for (w, lane, hop) in n.live_tables() {
                    tables.entry((w, lane)).or_default().insert((i, hop));
                }
            }
        }
        for (_, ev) in self.queue.iter() {
            if let Event::Deliver {
                to,
                from,
                head: (w, lane, hop, base),
                ..
            } = ev
                && self.side[*from] == self.side[*to]
                && let Some(n) = &self.nodes[*to]
                && n.would_accept(*w, *lane, *hop, *base)
            {
                tables.entry((*w, *lane)).or_default().insert((*to, *hop));
            }
        }
        for ((w, lane), t) in tables {
            if t.len() > 1 {
                return Err(self.violation(format!(
                    "window {w} lane {lane}: {} live tables (node, hop): {t:?}",
                    t.len()
                )));
            }
        }
        Ok(())
    }

    fn violation(&self, what: String) -> Violation {
        Violation {
            now: self.now(),
            event: self.report.events,
            what,
        }
    }
}

/// A random scenario for fault testing, derived from `seed` only.
pub fn random_config(seed: u64) -> SimConfig {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b17_0b17_0b17_0b17);
    let nodes = rng.random_range(1..=7usize);
    let ms = 1_000_000u64;
    let epoch = rng.random_range(1..=4u64) * ms;
    let laps = [1u64, 2, 4, 8][rng.random_range(0..4)];
    let window = epoch * nodes as u64 * laps + rng.random_range(0..epoch);
    let cap = [1u64, 3, 10, 50, 200][rng.random_range(0..5)];
    let rollover = [0.0, 0.1, 0.3, 0.5, 0.9][rng.random_range(0..5)];
    let local = [0.0, 0.1, 0.3, 1.0][rng.random_range(0..4)];
    let mut orbit = OrbitConfig::new(cap, window, epoch)
        .with_rollover_ratio(rollover)
        .with_local_fraction(local);
    orbit.headroom_pct = [100, 200, 400][rng.random_range(0..3)];
    orbit.max_keys = [1usize, 2, 1 << 20][rng.random_range(0..3)];
    orbit.lanes = [1u32, 2, 3][rng.random_range(0..3)];
    orbit.resend_laps = [0u32, 1, 2][rng.random_range(0..3)];
    let weights = (0..nodes)
        .map(|_| [0u32, 1, 1, 5][rng.random_range(0..4)])
        .collect();
    let max_cost = (cap / 5).max(1) + u64::from(rng.random_bool(0.2)) * cap;
    let delay_max = rng.random_range(0..=3 * epoch);
    let faults = Faults {
        loss: [0.0, 0.02, 0.2][rng.random_range(0..3)],
        duplicate: [0.0, 0.2, 0.6][rng.random_range(0..3)],
        delay: (rng.random_range(0..=delay_max), delay_max),
        crash: [0.0, 0.05, 0.3][rng.random_range(0..3)],
        downtime: (epoch, window * 2),
        partition: [0.0, 0.2, 0.5][rng.random_range(0..3)],
        partition_len: (epoch, window * 2),
        detect_lag: (0, epoch * 3),
        false_suspicion: [0.0, 0.1, 0.5][rng.random_range(0..3)],
        clock_skew: [0, epoch, window / 2][rng.random_range(0..3)],
    };
    SimConfig {
        orbit,
        nodes,
        keys: rng.random_range(1..=3),
        duration: window * rng.random_range(3..=6),
        weights,
        demand_per_window: cap * rng.random_range(1..=3),
        cost: (rng.random_range(0..=1), max_cost),
        tick: (epoch / rng.random_range(1..=4)).max(1),
        faults,
    }
}

/// Runs the random scenario of `seed` (see [`random_config`]).
pub fn run_seed(seed: u64) -> Result<SimReport, Violation> {
    let cfg = random_config(seed);
    let sim = Sim::new(cfg, seed).map_err(|e| Violation {
        now: 0,
        event: 0,
        what: format!("scenario config rejected: {e}"),
    })?;
    sim.run()
}
