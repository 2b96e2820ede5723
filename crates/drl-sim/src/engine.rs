//! The simulation loop: flows, links, limiters and gossip on one event
//! queue.
//!
//! Topology (the paper's mesh, one path per flow): each flow's source sits
//! behind its own access link (serialising at the link rate, with a quarter
//! of the flow RTT of propagation delay) into its limiter; forwarded packets
//! leave through the link to the flow's own sink (serialising, another
//! quarter RTT; one per source-sink pair, so flows at a busy limiter do not
//! queue behind each other and the central and distributed runs see the same
//! paths); ACKs return directly in half an RTT (limiters pass ACKs
//! untouched, as in the paper). Centralised algorithms (CTB, central
//! random drop) run one limiter for all traffic; rates are still
//! attributed to the limiter each flow entered.
//!
//! Flows (see [`crate::scenario::FlowSpec`]) start and stop at given
//! times, each with its own RTT (per flow or per limiter). Finite flows
//! open with a handshake: the client's SYN reaches the source unpoliced,
//! the source's SYN-ACK crosses the limiter like data (and can be dropped
//! there), and the client retries after 3 s, then 6 s, ...; data starts
//! when its ACK and request arrive, and the flow's completion time is its
//! last byte's arrival at the sink. A shared upstream link (a FIFO at its
//! own rate with a drop-tail queue) can sit between some flows' access
//! links and their limiter from a given time on.
//!
//! Each limiter is a [`drl_cluster::cloud_control::Node`], the type
//! `drl serve` runs for `scope: gossip`: its payloads travel over gossip
//! links with half the inter-limiter RTT of delay, optional loss, jitter
//! (reordering) and duplication. Membership is modelled, not simulated: all
//! limiters know each other at the start; a kill or a cut is reported to
//! the others `detection` later, a heal or a restart within `detection`, at
//! a seeded random moment per node (asymmetric views, as with SWIM).

use drl_cluster::cloud_control::{KeyLimit, KeyRef, Node, Roster};
use drl_core::Nanos;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::event::EventQueue;
use crate::rng::{Component, stream};
use crate::scenario::{Scenario, ScenarioError};
use crate::tcp::{Ack, Segment, TcpConfig, TcpSender, TcpSink, TcpStats};

/// A packet on the data path.
#[derive(Debug, Clone, Copy)]
enum Pkt {
    Data(Segment),
    /// The server's SYN-ACK.
    SynAck,
}

/// Bytes of a handshake packet on the wire.
const HANDSHAKE_BYTES: u32 = 60;
/// Linux's initial retransmission timeout for a SYN (RFC 2988's 3 s).
const SYN_RTO: Nanos = 3_000_000_000;

enum Ev {
    /// The flow begins (its request is made).
    Start(u32),
    /// The handshake is done: the source starts sending data.
    Open(u32),
    /// The source leaves.
    Stop(u32),
    /// The client's SYN timer for its `attempt`-th SYN.
    SynTimer(u32, u32),
    /// A packet reaches the shared upstream link.
    AtUpstream(u32, Pkt),
    AtLimiter(u32, Pkt),
    AtSink(u32, Segment),
    AtSender(u32, Ack),
    Rto(u32),
    /// Node n's timer, for its incarnation (generation) g.
    Tick(u32, u32),
    Datagram {
        from: u32,
        to: u32,
        bytes: Vec<u8>,
    },
    Kill(u32),
    Restart(u32),
    Cut(usize),
    Heal(usize),
    /// Membership at `at` reports `peer` up (true) or down (false), if
    /// still true of `peer`'s incarnation.
    Member {
        at: u32,
        peer: u32,
        up: bool,
        incarnation: u32,
    },
}

/// The one key every simulated limiter polices.
const KEY: KeyRef<'static> = KeyRef {
    limit: "sim",
    aggregate: "",
};

struct Flow {
    limiter: usize,
    sender: TcpSender,
    sink: TcpSink,
    access_free: Nanos,
    rto_event: Option<Nanos>,
    goodput: u64,
    delivered_total: u64,
    spec: crate::scenario::FlowSpec,
    rtt: Nanos,
    segments: Option<u64>,
    opened: bool,
    syn_attempts: u32,
    stopped: bool,
    finished: Option<Nanos>,
}

/// Per-flow outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowResult {
    /// Limiter the flow entered.
    pub limiter: usize,
    /// Bytes delivered in order to the sink after the warm-up.
    pub goodput_bytes: u64,
    /// Bytes delivered in order over the whole run.
    pub total_bytes: u64,
    /// TCP counters.
    pub tcp: TcpStats,
    /// When the flow began (its request, for Web flows).
    pub start: Nanos,
    /// When it left (`None`: it ran to the end).
    pub stop: Option<Nanos>,
    /// Its round-trip time (propagation).
    pub rtt: Nanos,
    /// Object size for finite flows, bytes.
    pub size_bytes: Option<u64>,
    /// When the last byte of a finite flow reached the sink.
    pub finished: Option<Nanos>,
    /// SYNs sent beyond the first (handshake losses).
    pub syn_retries: u32,
}

impl FlowResult {
    /// A finished finite flow's delivered rate: its size over the time
    /// from its request to its last byte, bits per second.
    pub fn completion_bps(&self) -> Option<f64> {
        let (size, done) = (self.size_bytes?, self.finished?);
        Some(crate::metrics::bps(
            size,
            done.saturating_sub(self.start).max(1),
        ))
    }
}

/// One limiter's state at an estimate-interval boundary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickSample {
    /// When.
    pub at: Nanos,
    /// Which limiter (node index).
    pub node: u32,
    /// Smoothed local arrival rate, bytes/s.
    pub local_rate: f64,
    /// Value published through gossip.
    pub published: f64,
    /// Estimate of the others' published sum.
    pub remote: f64,
    /// Local limit (bytes/s) if any.
    pub local_limit: Option<f64>,
    /// Drop probability if any.
    pub drop_probability: Option<f64>,
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The scenario run.
    pub scenario: Scenario,
    /// Bytes forwarded by each limiter, per bin of `scenario.bin`.
    pub forwarded: Vec<Vec<u64>>,
    /// Bytes arriving at each limiter, per bin.
    pub arrived: Vec<Vec<u64>>,
    /// Per-flow results, in flow order (limiter 0's flows first).
    pub flows: Vec<FlowResult>,
    /// Limiter states at each estimate interval.
    pub ticks: Vec<TickSample>,
    /// Gossip messages sent and lost.
    pub gossip_sent: u64,
    /// Gossip messages lost.
    pub gossip_lost: u64,
    /// Gossip payload bytes sent (lost ones included; the node's wire
    /// format, without transport framing or IP/UDP headers).
    pub gossip_bytes: u64,
    /// Events processed.
    pub events: u64,
    /// Packets dropped by the shared upstream link's queue.
    pub upstream_drops: u64,
}

fn tx_time(bytes: u32, bps: u64) -> Nanos {
    ((bytes as u128 * 8 * 1_000_000_000) / bps as u128) as Nanos
}

/// Every ordered pair (observer, peer) on different sides, observers in
/// id order: whom a cut or a heal is reported to, about whom.
pub(crate) fn crossing<T: PartialEq>(side: &[T]) -> Vec<(u32, u32)> {
    let n = side.len() as u32;
    (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .filter(|&(a, b)| side[a as usize] != side[b as usize])
        .collect()
}

/// What a run records beyond the rates and flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunOptions {
    /// Record every limiter's state at every interval
    /// ([`RunResult::ticks`]; at 10,000 limiters × 60 s that is 12 M
    /// samples, 0.9 GB, which Figure 8 does not use).
    pub ticks: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self { ticks: true }
    }
}

/// Runs `sc`; `progress` is called with the fraction of simulated time done
/// (about every simulated second).
pub fn run(sc: &Scenario, progress: &mut dyn FnMut(f64)) -> Result<RunResult, ScenarioError> {
    run_with(sc, RunOptions::default(), progress)
}

/// [`run`] recording what `opts` asks for.
pub fn run_with(
    sc: &Scenario,
    opts: RunOptions,
    progress: &mut dyn FnMut(f64),
) -> Result<RunResult, ScenarioError> {
    sc.validate()?;
    let settings = sc.settings();
    let nodes = settings.nodes;
    let limit = KeyLimit {
        rate: sc.limit_bps / 8,
        depth: sc.depth_bytes,
    };
    let start_node = |i: u32, incarnation: u32, now: Nanos, roster: &Roster| {
        let seed =
            crate::rng::derive_seed(sc.seed, Component::Limiter, i as u64) ^ (incarnation as u64);
        let mut n = Node::new(i, settings.clone(), seed, now)?;
        // The key exists from the start (a query creates it).
        let _ = n.admit(now, KEY, limit, 0, 0);
        // Every limiter up at `now` (one membership shared by all the
        // nodes until one of them sees a change).
        n.roster_up(roster);
        Ok::<Node, ScenarioError>(n)
    };
    let roster = Roster::new(0, 0..nodes);
    let mut limiters: Vec<Node> = (0..nodes)
        .map(|i| start_node(i, 0, 0, &roster))
        .collect::<Result<_, _>>()?;
    drop(roster);
    let mut alive = vec![true; nodes as usize];
    let mut incarnation = vec![0u32; nodes as usize];
    // Side of each node while a partition is in force (all 0 otherwise).
    let mut side = vec![0usize; nodes as usize];
    let mut member_rng = stream(sc.seed, Component::Membership, 0);
    let partitions: Vec<(Vec<usize>, Nanos, Nanos)> = sc
        .faults
        .iter()
        .filter_map(|f| match f {
            crate::scenario::FaultEvent::Partition {
                groups,
                from,
                until,
            } => {
                let mut s = vec![0usize; nodes as usize];
                for (g, members) in groups.iter().enumerate() {
                    for &m in members {
                        if (m as usize) < s.len() {
                            s[m as usize] = g;
                        }
                    }
                }
                Some((s, *from, *until))
            }
            _ => None,
        })
        .collect();
    let nl = sc.limiters();
    let nbins = sc.duration.div_ceil(sc.bin) as usize;
    let mut forwarded = vec![vec![0u64; nbins]; nl];
    let mut arrived = vec![vec![0u64; nbins]; nl];
    let payload = (sc.packet_bytes as u64).saturating_sub(40).max(1);
    let flows_plan = sc.plan_flows();
    if flows_plan.len() > 200_000 {
        return Err(ScenarioError::TooManyFlows(flows_plan.len() as u64));
    }
    let mut flows: Vec<Flow> = flows_plan
        .into_iter()
        .map(|spec| {
            let segments = spec.bytes.map(|b| b.div_ceil(payload));
            Flow {
                limiter: spec.limiter as usize,
                sender: TcpSender::new(TcpConfig {
                    total_segments: segments,
                    ..sc.tcp
                }),
                sink: TcpSink::new(),
                access_free: 0,
                rto_event: None,
                goodput: 0,
                delivered_total: 0,
                rtt: spec
                    .rtt
                    .unwrap_or_else(|| sc.flow_rtt_of(spec.limiter as usize)),
                segments,
                opened: false,
                syn_attempts: 0,
                stopped: false,
                finished: None,
                spec,
            }
        })
        .collect();
    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut jitter_rng: Vec<ChaCha8Rng> = (0..flows.len())
        .map(|i| stream(sc.seed, Component::Jitter, i as u64))
        .collect();
    let mut loss_rng: Vec<ChaCha8Rng> = (0..flows.len())
        .map(|i| stream(sc.seed, Component::DataLink, i as u64))
        .collect();
    let mut gossip_rng = stream(sc.seed, Component::GossipLink, 0);
    for (i, f) in flows.iter().enumerate() {
        q.schedule(f.spec.start, Ev::Start(i as u32));
        if let Some(t) = f.spec.stop {
            q.schedule(t, Ev::Stop(i as u32));
        }
    }
    for n in 0..nodes {
        if let Some(t) = limiters[n as usize].poll_timeout() {
            q.schedule(t, Ev::Tick(n, 0));
        }
    }
    if nodes > 1 {
        for f in &sc.faults {
            match f {
                crate::scenario::FaultEvent::Kill { node, at } => q.schedule(*at, Ev::Kill(*node)),
                crate::scenario::FaultEvent::Restart { node, at } => {
                    q.schedule(*at, Ev::Restart(*node))
                }
                crate::scenario::FaultEvent::Partition { .. } => {}
            }
        }
        for (i, (_, from, until)) in partitions.iter().enumerate() {
            q.schedule(*from, Ev::Cut(i));
            q.schedule(*until, Ev::Heal(i));
        }
    }
    let mut buf = Vec::new();
    // Propagation of each leg of a flow's path: a quarter of its RTT from
    // the source to the limiter, a quarter on to the sink, half back.
    let legs = |rtt: Nanos| (rtt / 4, rtt / 4, rtt - 2 * (rtt / 4));
    let up = sc.upstream.clone();
    let mut up_free: Nanos = 0;
    let mut upstream_drops = 0u64;
    let gossip_delay = sc.limiter_rtt / 2;
    let tx = tx_time(sc.packet_bytes, sc.link_bps);
    let tx_syn = tx_time(HANDSHAKE_BYTES, sc.link_bps);
    let mut egress_free = vec![0 as Nanos; flows.len()];
    let mut ticks = Vec::new();
    let (mut gossip_sent, mut gossip_lost, mut events) = (0u64, 0u64, 0u64);
    let mut gossip_bytes = 0u64;
    let pkt = sc.packet_bytes as u64;
    let mut next_progress = crate::scenario::SEC;

    // Sends segments of flow `i` at `now` through its access link.
    let send = |q: &mut EventQueue<Ev>,
                flows: &mut Vec<Flow>,
                jitter: &mut Vec<ChaCha8Rng>,
                loss: &mut Vec<ChaCha8Rng>,
                i: usize,
                now: Nanos,
                segs: Vec<Pkt>| {
        let f = &mut flows[i];
        if f.stopped {
            return;
        }
        let (access_prop, _, _) = legs(f.rtt);
        for p in segs {
            let j = if sc.jitter > 0 {
                jitter[i].random_range(0..sc.jitter)
            } else {
                0
            };
            let size = match p {
                Pkt::Data(_) => tx,
                Pkt::SynAck => tx_syn,
            };
            let depart = (now + j).max(f.access_free);
            f.access_free = depart + size;
            if sc.data_loss > 0.0 && loss[i].random_bool(sc.data_loss) {
                continue;
            }
            let at = depart + size + access_prop;
            if f.spec.upstream && up.as_ref().is_some_and(|u| at >= u.from) {
                q.schedule(at, Ev::AtUpstream(i as u32, p));
            } else {
                q.schedule(at, Ev::AtLimiter(i as u32, p));
            }
        }
        if let Some(d) = f.sender.rto_deadline()
            && f.rto_event.is_none_or(|t| d < t)
        {
            f.rto_event = Some(d);
            q.schedule(d, Ev::Rto(i as u32));
        }
    };

    while let Some((now, ev)) = q.pop_until(sc.duration) {
        events += 1;
        if now >= next_progress {
            progress(now as f64 / sc.duration as f64);
            next_progress += crate::scenario::SEC;
        }
        match ev {
            Ev::Start(i) => {
                let f = &mut flows[i as usize];
                if f.spec.handshake {
                    // The client's SYN reaches the server (unpoliced, like
                    // every packet towards the source) half an RTT later.
                    f.syn_attempts = 1;
                    let (_, _, back) = legs(f.rtt);
                    q.schedule(now + back, Ev::SynTimer(i, 0));
                    q.schedule(now + SYN_RTO, Ev::SynTimer(i, 1));
                } else {
                    q.schedule(now, Ev::Open(i));
                }
            }
            Ev::SynTimer(i, attempt) => {
                let f = &mut flows[i as usize];
                if f.opened || f.stopped {
                    continue;
                }
                if attempt == 0 {
                    // The SYN arrived: the server answers.
                    send(
                        &mut q,
                        &mut flows,
                        &mut jitter_rng,
                        &mut loss_rng,
                        i as usize,
                        now,
                        vec![Pkt::SynAck],
                    );
                } else if attempt == f.syn_attempts {
                    // No SYN-ACK yet: the client sends its SYN again and
                    // doubles the timer.
                    f.syn_attempts += 1;
                    let (_, _, back) = legs(f.rtt);
                    q.schedule(now + back, Ev::SynTimer(i, 0));
                    let wait = SYN_RTO.saturating_mul(1 << attempt.min(6));
                    q.schedule(now + wait, Ev::SynTimer(i, attempt + 1));
                }
            }
            Ev::Open(i) => {
                let f = &mut flows[i as usize];
                if f.opened || f.stopped {
                    continue;
                }
                f.opened = true;
                let segs = f.sender.start(now);
                send(
                    &mut q,
                    &mut flows,
                    &mut jitter_rng,
                    &mut loss_rng,
                    i as usize,
                    now,
                    segs.into_iter().map(Pkt::Data).collect(),
                );
            }
            Ev::Stop(i) => {
                let f = &mut flows[i as usize];
                f.stopped = true;
                f.rto_event = None;
            }
            Ev::AtUpstream(i, p) => {
                let Some(u) = up.as_ref() else { continue };
                let size = match p {
                    Pkt::Data(_) => sc.packet_bytes,
                    Pkt::SynAck => HANDSHAKE_BYTES,
                };
                let tx_up = tx_time(size, u.bps);
                let full = tx_time(sc.packet_bytes, u.bps).max(1);
                // Packets queued (the one on the wire included).
                let queued = up_free.saturating_sub(now).div_ceil(full);
                if queued >= u.queue_packets as u64 {
                    upstream_drops += 1;
                    continue;
                }
                up_free = up_free.max(now) + tx_up;
                q.schedule(up_free, Ev::AtLimiter(i, p));
            }
            Ev::AtLimiter(i, p) => {
                let l = flows[i as usize].limiter;
                let node = if nodes == 1 { 0 } else { l };
                let bin = ((now / sc.bin) as usize).min(nbins - 1);
                let bytes = match p {
                    Pkt::Data(_) => pkt,
                    Pkt::SynAck => HANDSHAKE_BYTES as u64,
                };
                arrived[l][bin] += bytes;
                let unpoliced =
                    matches!(p, Pkt::SynAck) && !flows[i as usize].spec.police_handshake;
                let allowed = alive[node]
                    && (unpoliced
                        || limiters[node]
                            .admit(now, KEY, limit, bytes, i as u64)
                            .is_ok_and(|a| a.allowed));
                if allowed {
                    forwarded[l][bin] += bytes;
                    let (_, egress_prop, back) = legs(flows[i as usize].rtt);
                    let e = &mut egress_free[i as usize];
                    let depart = now.max(*e);
                    match p {
                        Pkt::Data(seg) => {
                            *e = depart + tx;
                            q.schedule(depart + tx + egress_prop, Ev::AtSink(i, seg));
                        }
                        Pkt::SynAck => {
                            // The client answers with its ACK and the
                            // request; data starts when it arrives.
                            *e = depart + tx_syn;
                            q.schedule(depart + tx_syn + egress_prop + back, Ev::Open(i));
                        }
                    }
                }
            }
            Ev::AtSink(i, seg) => {
                let f = &mut flows[i as usize];
                let (ack, newly) = f.sink.on_segment(&seg);
                let bytes = newly * pkt;
                f.delivered_total += bytes;
                if now >= sc.warmup {
                    f.goodput += bytes;
                }
                if f.finished.is_none() && f.segments.is_some_and(|n| f.sink.delivered() >= n) {
                    f.finished = Some(now);
                }
                let (_, _, back) = legs(f.rtt);
                q.schedule(now + back, Ev::AtSender(i, ack));
            }
            Ev::AtSender(i, ack) => {
                if flows[i as usize].stopped {
                    continue;
                }
                let segs = flows[i as usize].sender.on_ack(now, &ack);
                send(
                    &mut q,
                    &mut flows,
                    &mut jitter_rng,
                    &mut loss_rng,
                    i as usize,
                    now,
                    segs.into_iter().map(Pkt::Data).collect(),
                );
            }
            Ev::Rto(i) => {
                let f = &mut flows[i as usize];
                if f.stopped || f.rto_event != Some(now) {
                    continue; // superseded by an earlier one
                }
                f.rto_event = None;
                match f.sender.rto_deadline() {
                    Some(d) if d <= now => {
                        let segs = f.sender.on_timeout(now);
                        send(
                            &mut q,
                            &mut flows,
                            &mut jitter_rng,
                            &mut loss_rng,
                            i as usize,
                            now,
                            segs.into_iter().map(Pkt::Data).collect(),
                        );
                    }
                    Some(d) => {
                        f.rto_event = Some(d);
                        q.schedule(d, Ev::Rto(i));
                    }
                    None => {}
                }
            }
            Ev::Tick(n, g) => {
                let n = n as usize;
                if !alive[n] || incarnation[n] != g {
                    continue; // a dead incarnation's timer
                }
                let lim = &mut limiters[n];
                lim.handle_timeout(now);
                if opts.ticks
                    && let Some(s) = lim.keys().snapshot(KEY)
                {
                    ticks.push(TickSample {
                        at: now,
                        node: n as u32,
                        local_rate: s.local_rate,
                        published: s.published,
                        remote: s.remote,
                        local_limit: s.local_limit,
                        drop_probability: s.drop_probability,
                    });
                }
                if let Some(t) = lim.poll_timeout() {
                    q.schedule(t, Ev::Tick(n as u32, g));
                }
                crate::node_trace::drain(&mut limiters[n], now, &mut buf, |to, bytes| {
                    gossip_sent += 1;
                    gossip_bytes += bytes.len() as u64;
                    let cut = side[n] != side[to as usize];
                    if cut || (sc.gossip_loss > 0.0 && gossip_rng.random_bool(sc.gossip_loss)) {
                        gossip_lost += 1;
                        return;
                    }
                    let copies = if sc.gossip_duplicate > 0.0
                        && gossip_rng.random_bool(sc.gossip_duplicate)
                    {
                        2
                    } else {
                        1
                    };
                    for _ in 0..copies {
                        let j = if sc.gossip_jitter > 0 {
                            gossip_rng.random_range(0..sc.gossip_jitter)
                        } else {
                            0
                        };
                        q.schedule(
                            now + gossip_delay + j,
                            Ev::Datagram {
                                from: n as u32,
                                to,
                                bytes: bytes.to_vec(),
                            },
                        );
                    }
                });
            }
            Ev::Datagram { from, to, bytes } => {
                let t = to as usize;
                if alive[t] && side[t] == side[from as usize] {
                    let _ = limiters[t].handle_datagram(now, from, &bytes);
                }
            }
            Ev::Kill(n) => {
                alive[n as usize] = false;
                for m in 0..nodes {
                    if m != n {
                        let ev = Ev::Member {
                            at: m,
                            peer: n,
                            up: false,
                            incarnation: incarnation[n as usize],
                        };
                        q.schedule(now + sc.detection, ev);
                    }
                }
            }
            Ev::Restart(n) => {
                let i = n as usize;
                if alive[i] {
                    continue;
                }
                incarnation[i] += 1;
                alive[i] = true;
                limiters[i] = start_node(n, incarnation[i], now, &Roster::new(now, 0..nodes))?;
                for m in 0..nodes {
                    if m != n {
                        limiters[i].peer_down(now, m);
                        let joined = member_rng.random_range(0..=sc.detection);
                        for (at, peer) in [(m, n), (n, m)] {
                            let g = incarnation[peer as usize];
                            let ev = Ev::Member {
                                at,
                                peer,
                                up: true,
                                incarnation: g,
                            };
                            q.schedule(now + joined, ev);
                        }
                    }
                }
                if let Some(t) = limiters[i].poll_timeout() {
                    q.schedule(t, Ev::Tick(n, incarnation[i]));
                }
            }
            Ev::Cut(p) => {
                side.clone_from(&partitions[p].0);
                for (a, b) in crossing(&side) {
                    let ev = Ev::Member {
                        at: a,
                        peer: b,
                        up: false,
                        incarnation: incarnation[b as usize],
                    };
                    q.schedule(now + sc.detection, ev);
                }
            }
            Ev::Heal(p) => {
                let was = std::mem::replace(&mut side, vec![0; nodes as usize]);
                debug_assert_eq!(was, partitions[p].0);
                for (a, b) in crossing(&was) {
                    let ev = Ev::Member {
                        at: a,
                        peer: b,
                        up: true,
                        incarnation: incarnation[b as usize],
                    };
                    let after = member_rng.random_range(0..=sc.detection);
                    q.schedule(now + after, ev);
                }
            }
            Ev::Member {
                at,
                peer,
                up,
                incarnation: g,
            } => {
                let (a, p) = (at as usize, peer as usize);
                if !alive[a] || incarnation[p] != g {
                    continue;
                }
                let reachable = alive[p] && side[a] == side[p];
                if up && reachable {
                    limiters[a].peer_up(now, peer);
                } else if !up && !reachable {
                    limiters[a].peer_down(now, peer);
                }
            }
        }
    }
    progress(1.0);
    Ok(RunResult {
        scenario: sc.clone(),
        forwarded,
        arrived,
        flows: flows
            .iter()
            .map(|f| FlowResult {
                limiter: f.limiter,
                goodput_bytes: f.goodput,
                total_bytes: f.delivered_total,
                tcp: f.sender.stats(),
                start: f.spec.start,
                stop: f.spec.stop,
                rtt: f.rtt,
                size_bytes: f.spec.bytes,
                finished: f.finished,
                syn_retries: f.syn_attempts.saturating_sub(1),
            })
            .collect(),
        ticks,
        gossip_sent,
        gossip_lost,
        gossip_bytes,
        events,
        upstream_drops,
    })
}
