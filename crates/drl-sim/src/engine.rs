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
//! untouched, as in the paper). Limiters gossip over links with half the
//! inter-limiter RTT of delay and an optional loss rate. Centralised
//! algorithms (CTB, central random drop) run one limiter for all traffic;
//! rates are still attributed to the limiter each flow entered.

use drl_cluster::alloc::Verdict;
use drl_cluster::gossip::GossipMsg;
use drl_cluster::limiter::Limiter;
use drl_core::Nanos;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::event::EventQueue;
use crate::rng::{Component, stream};
use crate::scenario::{Scenario, ScenarioError};
use crate::tcp::{Ack, Segment, TcpSender, TcpSink, TcpStats};

enum Ev {
    Start(u32),
    AtLimiter(u32, Segment),
    AtSink(u32, Segment),
    AtSender(u32, Ack),
    Rto(u32),
    Tick(u32),
    Gossip(u32, u32, GossipMsg),
}

struct Flow {
    limiter: usize,
    sender: TcpSender,
    sink: TcpSink,
    access_free: Nanos,
    rto_event: Option<Nanos>,
    goodput: u64,
    delivered_total: u64,
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
    /// Events processed.
    pub events: u64,
}

fn tx_time(bytes: u32, bps: u64) -> Nanos {
    ((bytes as u128 * 8 * 1_000_000_000) / bps as u128) as Nanos
}

/// Runs `sc`; `progress` is called with the fraction of simulated time done
/// (about every simulated second).
pub fn run(sc: &Scenario, progress: &mut dyn FnMut(f64)) -> Result<RunResult, ScenarioError> {
    sc.validate()?;
    let cfg = sc.limiter_config();
    let nodes = cfg.nodes;
    let mut limiters: Vec<Limiter> = (0..nodes)
        .map(|i| {
            let seed = crate::rng::derive_seed(sc.seed, Component::Limiter, i as u64);
            Limiter::new(i, cfg.clone(), seed, 0)
        })
        .collect::<Result<_, _>>()?;
    let nl = sc.limiters();
    let nbins = sc.duration.div_ceil(sc.bin) as usize;
    let mut forwarded = vec![vec![0u64; nbins]; nl];
    let mut arrived = vec![vec![0u64; nbins]; nl];
    let mut flows: Vec<Flow> = Vec::new();
    for (l, &k) in sc.flows_per_limiter.iter().enumerate() {
        for _ in 0..k {
            flows.push(Flow {
                limiter: l,
                sender: TcpSender::new(sc.tcp),
                sink: TcpSink::new(),
                access_free: 0,
                rto_event: None,
                goodput: 0,
                delivered_total: 0,
            });
        }
    }
    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut start_rng = stream(sc.seed, Component::FlowStart, 0);
    let mut jitter_rng: Vec<ChaCha8Rng> = (0..flows.len())
        .map(|i| stream(sc.seed, Component::Jitter, i as u64))
        .collect();
    let mut loss_rng: Vec<ChaCha8Rng> = (0..flows.len())
        .map(|i| stream(sc.seed, Component::DataLink, i as u64))
        .collect();
    let mut gossip_rng = stream(sc.seed, Component::GossipLink, 0);
    for i in 0..flows.len() {
        let t = if sc.start_spread > 0 {
            start_rng.random_range(0..sc.start_spread)
        } else {
            0
        };
        q.schedule(t, Ev::Start(i as u32));
    }
    for n in 0..nodes {
        q.schedule(limiters[n as usize].next_tick(), Ev::Tick(n));
    }
    let egress_prop = sc.flow_rtt / 4;
    let access_prop = sc.flow_rtt / 4;
    let ack_prop = sc.flow_rtt - egress_prop - access_prop;
    let gossip_delay = sc.limiter_rtt / 2;
    let tx = tx_time(sc.packet_bytes, sc.link_bps);
    let mut egress_free = vec![0 as Nanos; flows.len()];
    let mut ticks = Vec::new();
    let (mut gossip_sent, mut gossip_lost, mut events) = (0u64, 0u64, 0u64);
    let pkt = sc.packet_bytes as u64;
    let mut next_progress = crate::scenario::SEC;

    // Sends segments of flow `i` at `now` through its access link.
    let send = |q: &mut EventQueue<Ev>,
                flows: &mut Vec<Flow>,
                jitter: &mut Vec<ChaCha8Rng>,
                loss: &mut Vec<ChaCha8Rng>,
                i: usize,
                now: Nanos,
                segs: Vec<Segment>| {
        let f = &mut flows[i];
        for seg in segs {
            let j = if sc.jitter > 0 {
                jitter[i].random_range(0..sc.jitter)
            } else {
                0
            };
            let depart = (now + j).max(f.access_free);
            f.access_free = depart + tx;
            if sc.data_loss > 0.0 && loss[i].random_bool(sc.data_loss) {
                continue;
            }
            q.schedule(depart + tx + access_prop, Ev::AtLimiter(i as u32, seg));
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
                let segs = flows[i as usize].sender.start(now);
                send(
                    &mut q,
                    &mut flows,
                    &mut jitter_rng,
                    &mut loss_rng,
                    i as usize,
                    now,
                    segs,
                );
            }
            Ev::AtLimiter(i, seg) => {
                let l = flows[i as usize].limiter;
                let node = if nodes == 1 { 0 } else { l };
                let bin = ((now / sc.bin) as usize).min(nbins - 1);
                arrived[l][bin] += pkt;
                if limiters[node].on_arrival(now, i as u64, pkt) == Verdict::Forward {
                    forwarded[l][bin] += pkt;
                    let e = &mut egress_free[i as usize];
                    let depart = now.max(*e);
                    *e = depart + tx;
                    q.schedule(depart + tx + egress_prop, Ev::AtSink(i, seg));
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
                q.schedule(now + ack_prop, Ev::AtSender(i, ack));
            }
            Ev::AtSender(i, ack) => {
                let segs = flows[i as usize].sender.on_ack(now, &ack);
                send(
                    &mut q,
                    &mut flows,
                    &mut jitter_rng,
                    &mut loss_rng,
                    i as usize,
                    now,
                    segs,
                );
            }
            Ev::Rto(i) => {
                let f = &mut flows[i as usize];
                if f.rto_event != Some(now) {
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
                            segs,
                        );
                    }
                    Some(d) => {
                        f.rto_event = Some(d);
                        q.schedule(d, Ev::Rto(i));
                    }
                    None => {}
                }
            }
            Ev::Tick(n) => {
                let lim = &mut limiters[n as usize];
                let out = lim.on_tick(now);
                let s = lim.snapshot();
                ticks.push(TickSample {
                    at: now,
                    node: n,
                    local_rate: s.local_rate,
                    published: s.published,
                    remote: s.remote,
                    local_limit: s.local_limit,
                    drop_probability: s.drop_probability,
                });
                q.schedule(lim.next_tick(), Ev::Tick(n));
                for o in out {
                    gossip_sent += 1;
                    if sc.gossip_loss > 0.0 && gossip_rng.random_bool(sc.gossip_loss) {
                        gossip_lost += 1;
                        continue;
                    }
                    q.schedule(now + gossip_delay, Ev::Gossip(n, o.to, o.msg));
                }
            }
            Ev::Gossip(from, to, msg) => {
                limiters[to as usize].on_message(now, from, msg);
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
            })
            .collect(),
        ticks,
        gossip_sent,
        gossip_lost,
        events,
    })
}
