//! Per-key allocator state and the table of peers' published values.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use drl_cluster::alloc::fps::{Fps, FpsConfig, Smoothing};
use drl_cluster::alloc::grd::{Grd, GrdSmooth, GrdSmoothConfig};
use drl_cluster::alloc::{AlgorithmKind, Allocator, FlowId, IntervalInput, Verdict};
use drl_cluster::estimator::{RateEstimator, history_weight};
use drl_core::Nanos;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Parameters every key of a node shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyParams {
    /// Allocator.
    pub algorithm: AlgorithmKind,
    /// Estimate interval, ns.
    pub interval: Nanos,
    /// 1-second EWMA parameter.
    pub ewma: f64,
}

/// What a key reports about itself (for tests, metrics and debugging).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySnapshot {
    /// The configured global limit, units/s.
    pub limit: u64,
    /// The limit in force after the 1/N rule, units/s.
    pub effective_limit: u64,
    /// Live nodes counted at the last interval (this one included).
    pub live_nodes: u32,
    /// Smoothed local arrival rate, units/s.
    pub local_rate: f64,
    /// Sum of the live peers' fresh published values.
    pub remote: f64,
    /// The value this node publishes (rate for GRD, weight for FPS).
    pub published: f64,
    /// FPS local limit, units/s.
    pub local_limit: Option<f64>,
    /// GRD drop probability.
    pub drop_probability: Option<f64>,
    /// Units admitted here since the key was created.
    pub admitted: u64,
    /// Units denied here since the key was created.
    pub denied: u64,
}

/// What the request path needs, behind the key's decision lock: the
/// allocator, its random stream, and counters. The node loop holds this
/// lock only to take the interval's counts and to run the allocator's
/// `on_interval`; everything else it does outside.
#[derive(Debug)]
struct Fast {
    alloc: Box<dyn Allocator>,
    rng: ChaCha8Rng,
    /// Units arrived / forwarded since the node loop last took them.
    pending_in: u64,
    pending_fwd: u64,
    last_arrival: Nanos,
    admitted: u64,
    denied: u64,
    /// The effective limit and the global demand estimate as of the last
    /// interval, for [`KeyState::decide`]'s headroom.
    effective: u64,
    demand: f64,
}

/// What only the node loop (and reports) use, behind its own lock.
#[derive(Debug)]
struct Slow {
    params: KeyParams,
    limit: u64,
    depth: u64,
    effective: u64,
    live: u32,
    ingress: RateEstimator,
    forwarded: RateEstimator,
    last_tick: Nanos,
    published: f64,
    remote: f64,
    quiet_ticks: u32,
}

/// One aggregate's state on this node.
///
/// Two locks: decisions take only the first ([`Fast`]: allocator, random
/// stream, counters); the estimate interval's work (EWMA, the 1/N rule,
/// building a new allocator when membership changed) happens under the
/// second and outside the first, which the tick takes twice, briefly: to
/// take the counts, and to run the allocator's `on_interval` (and swap in a
/// new allocator, built beforehand; the old one is dropped after unlocking).
#[derive(Debug)]
pub struct KeyState {
    fast: Mutex<Fast>,
    slow: Mutex<Slow>,
}

/// A local decision and what remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Admitted.
    pub allowed: bool,
    /// Approximate units left this second: the effective limit minus the
    /// global demand estimate (0 when denied).
    pub headroom: u64,
}

fn build(p: &KeyParams, limit: u64, depth: u64, live: u32, now: Nanos) -> Box<dyn Allocator> {
    let limit = limit.max(1);
    match p.algorithm {
        AlgorithmKind::GrdSmooth => Box::new(GrdSmooth::new(limit, GrdSmoothConfig::default())),
        AlgorithmKind::Fps | AlgorithmKind::FpsMean => {
            let f = if p.algorithm == AlgorithmKind::Fps {
                FpsConfig::default()
            } else {
                FpsConfig::mean_variant()
            };
            Box::new(Fps::new(
                limit,
                depth.max(1),
                limit / live.max(1) as u64,
                1.0,
                Smoothing {
                    weight: history_weight(p.ewma, p.interval),
                    flow: history_weight(f.flow_ewma.unwrap_or(p.ewma), p.interval),
                },
                f,
                now,
            ))
        }
        _ => Box::new(Grd::new(limit, false)),
    }
}

/// Keys that published nothing for this many intervals stop being sent.
pub const QUIET_TICKS: u32 = 5;

/// Approximate remaining units: the effective limit minus the demand.
fn headroom(effective: u64, demand: f64) -> u64 {
    let h = effective as f64 - demand;
    if h.is_finite() && h > 0.0 {
        h as u64
    } else {
        0
    }
}

impl KeyState {
    /// A key for a global `limit` (units/s) with local bucket `depth`,
    /// created at `now` with `live` nodes of `nodes` up.
    pub fn new(
        params: KeyParams,
        limit: u64,
        depth: u64,
        live: u32,
        nodes: u32,
        seed: u64,
        now: Nanos,
    ) -> Self {
        let effective = effective_limit(limit, live, nodes);
        Self {
            fast: Mutex::new(Fast {
                alloc: build(&params, effective, depth, live, now),
                rng: ChaCha8Rng::seed_from_u64(seed),
                pending_in: 0,
                pending_fwd: 0,
                last_arrival: now,
                admitted: 0,
                denied: 0,
                effective,
                demand: 0.0,
            }),
            slow: Mutex::new(Slow {
                params,
                limit,
                depth,
                effective,
                live,
                ingress: RateEstimator::new(params.interval, params.ewma),
                forwarded: RateEstimator::new(params.interval, params.ewma),
                last_tick: now,
                published: 0.0,
                remote: 0.0,
                quiet_ticks: 0,
            }),
        }
    }

    /// Decides `cost` units from `flow` at `now`, locally (the decision
    /// lock only). `cost` 0 is a query: nothing is recorded.
    pub fn decide(&self, now: Nanos, flow: FlowId, cost: u64) -> Admission {
        let mut f = self.fast.lock();
        if cost == 0 {
            return Admission {
                allowed: true,
                headroom: headroom(f.effective, f.demand),
            };
        }
        let f = &mut *f;
        f.last_arrival = now;
        f.pending_in = f.pending_in.saturating_add(cost);
        let ok = f.alloc.on_arrival(now, flow, cost, &mut f.rng) == Verdict::Forward;
        if ok {
            f.pending_fwd = f.pending_fwd.saturating_add(cost);
            f.admitted = f.admitted.saturating_add(cost);
            Admission {
                allowed: true,
                headroom: headroom(f.effective, f.demand),
            }
        } else {
            f.denied = f.denied.saturating_add(cost);
            Admission {
                allowed: false,
                headroom: 0,
            }
        }
    }

    /// Ends an estimate interval at `now`, with `remote` the sum of the
    /// live peers' values and `live` of `nodes` nodes up. Returns the value
    /// to publish, or `None` if the key has been quiet long enough that
    /// nothing needs sending.
    pub fn tick(&self, now: Nanos, remote: f64, live: u32, nodes: u32) -> Option<f64> {
        let mut s = self.slow.lock();
        let effective = effective_limit(s.limit, live, nodes);
        // Membership changed: restart the allocator at the new limit
        // (estimators keep their history). Built before taking the
        // decision lock.
        let fresh = (effective != s.effective || live != s.live)
            .then(|| build(&s.params, effective, s.depth, live, now));
        s.effective = effective;
        s.live = live;
        let (arrived, forwarded) = {
            let mut f = self.fast.lock();
            (
                std::mem::take(&mut f.pending_in),
                std::mem::take(&mut f.pending_fwd),
            )
        };
        let interval = s.params.interval;
        s.ingress.record(arrived);
        s.forwarded.record(forwarded);
        let elapsed = now.saturating_sub(s.last_tick).max(1);
        s.last_tick = now;
        let local_rate = s.ingress.close(now, interval);
        let local_forwarded = s.forwarded.close(now, interval);
        s.remote = remote;
        let input = IntervalInput {
            now,
            elapsed,
            local_rate,
            local_forwarded,
            raw_forwarded: s.forwarded.raw_rate(),
            remote,
            nodes: live,
        };
        let (published, old) = {
            let mut f = self.fast.lock();
            let old = fresh.map(|a| std::mem::replace(&mut f.alloc, a));
            let published = f.alloc.on_interval(&input);
            f.effective = effective;
            f.demand = local_rate + remote;
            (published, old)
        };
        drop(old);
        s.published = published;
        if published > 0.0 {
            s.quiet_ticks = 0;
        } else {
            s.quiet_ticks = s.quiet_ticks.saturating_add(1);
        }
        (s.quiet_ticks <= QUIET_TICKS).then_some(published)
    }

    /// True if nothing arrived for `idle` ns and nothing is published.
    pub fn is_idle(&self, now: Nanos, idle: Nanos) -> bool {
        let quiet = self.slow.lock().quiet_ticks > QUIET_TICKS;
        quiet && now.saturating_sub(self.fast.lock().last_arrival) > idle
    }

    /// The global limit of this key, units/s.
    pub fn limit(&self) -> u64 {
        self.slow.lock().limit
    }

    /// The limit in force after the 1/N rule.
    pub fn effective_limit(&self) -> u64 {
        self.slow.lock().effective
    }

    /// Global demand estimate (local + remote) for GRD, units/s.
    pub fn demand(&self) -> f64 {
        let s = self.slow.lock();
        s.ingress.rate() + s.remote
    }

    /// A report.
    pub fn snapshot(&self) -> KeySnapshot {
        let s = self.slow.lock();
        let f = self.fast.lock();
        KeySnapshot {
            limit: s.limit,
            effective_limit: s.effective,
            live_nodes: s.live,
            local_rate: s.ingress.rate(),
            remote: s.remote,
            published: s.published,
            local_limit: f.alloc.local_limit(),
            drop_probability: f.alloc.drop_probability(),
            admitted: f.admitted,
            denied: f.denied,
        }
    }
}

/// The paper's rule (§5.6): with `live` of `nodes` nodes reachable, the
/// limit is reduced by `1/N` for each one lost. More nodes than expected
/// never raise it above `limit`.
pub fn effective_limit(limit: u64, live: u32, nodes: u32) -> u64 {
    let n = nodes.max(live).max(1) as u128;
    let live = live.clamp(1, n as u32) as u128;
    ((limit as u128 * live) / n).max(1).min(u64::MAX as u128) as u64
}

/// What this node knows about one peer.
#[derive(Debug, Default)]
struct Peer {
    addr: Option<SocketAddr>,
    live: bool,
    values: HashMap<Vec<u8>, (f32, Nanos)>,
}

/// The latest published values of every peer, per key.
#[derive(Debug, Default)]
pub struct Peers {
    peers: BTreeMap<u32, Peer>,
    max_keys: usize,
}

impl Peers {
    /// An empty table accepting at most `max_keys` keys per peer.
    pub fn new(max_keys: usize) -> Self {
        Self {
            peers: BTreeMap::new(),
            max_keys,
        }
    }

    /// Membership says `id` at `addr` is up.
    pub fn up(&mut self, id: u32, addr: SocketAddr) {
        let p = self.peers.entry(id).or_default();
        p.addr = Some(addr);
        p.live = true;
    }

    /// Membership says `id` is down: its estimates are zeroed (§5.6).
    pub fn down(&mut self, id: u32) {
        if let Some(p) = self.peers.get_mut(&id) {
            p.live = false;
            p.values.clear();
        }
    }

    /// Live peers (id, address), ascending by id.
    pub fn live(&self) -> Vec<(u32, SocketAddr)> {
        self.peers
            .iter()
            .filter(|(_, p)| p.live)
            .filter_map(|(id, p)| p.addr.map(|a| (*id, a)))
            .collect()
    }

    /// Number of live peers.
    pub fn live_count(&self) -> u32 {
        self.peers.values().filter(|p| p.live).count() as u32
    }

    /// Records values published by `id` at `now`. Values of peers not (yet)
    /// known live are kept, but count only once membership says they are up.
    pub fn record(&mut self, id: u32, now: Nanos, entries: Vec<super::wire::Entry>) {
        let max = self.max_keys;
        let p = self.peers.entry(id).or_default();
        for e in entries {
            let len = p.values.len();
            match p.values.get_mut(&e.key) {
                Some(v) => *v = (e.value, now),
                None if len < max => {
                    p.values.insert(e.key, (e.value, now));
                }
                None => {}
            }
        }
    }

    /// Sum of the live peers' values for `key` no older than `stale` ns.
    pub fn remote(&self, key: &[u8], now: Nanos, stale: Nanos) -> f64 {
        self.peers
            .values()
            .filter(|p| p.live)
            .filter_map(|p| p.values.get(key))
            .filter(|(_, t)| now.saturating_sub(*t) <= stale)
            .map(|(v, _)| *v as f64)
            .sum()
    }

    /// Forgets values older than `stale` ns.
    pub fn expire(&mut self, now: Nanos, stale: Nanos) {
        for p in self.peers.values_mut() {
            p.values.retain(|_, (_, t)| now.saturating_sub(*t) <= stale);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::wire::Entry;

    const MS: Nanos = 1_000_000;

    #[test]
    fn one_over_n_rule() {
        assert_eq!(effective_limit(1_000, 3, 3), 1_000);
        assert_eq!(effective_limit(1_000, 2, 3), 666);
        assert_eq!(effective_limit(1_000, 1, 3), 333);
        assert_eq!(effective_limit(1_000, 4, 3), 1_000);
        assert_eq!(effective_limit(1_000, 0, 3), 333);
    }

    #[test]
    fn down_peers_and_stale_values_count_zero() {
        let mut p = Peers::new(10);
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        p.record(
            2,
            0,
            vec![Entry {
                key: b"k".to_vec(),
                value: 100.0,
            }],
        );
        assert_eq!(p.remote(b"k", 0, 100 * MS), 0.0, "not live yet");
        p.up(2, a);
        assert_eq!(p.remote(b"k", 50 * MS, 100 * MS), 100.0);
        assert_eq!(p.remote(b"k", 150 * MS, 100 * MS), 0.0, "stale");
        p.down(2);
        p.up(2, a);
        assert_eq!(p.remote(b"k", 50 * MS, 100 * MS), 0.0, "zeroed on down");
        assert_eq!(p.live(), vec![(2, a)]);
    }

    #[test]
    fn demand_is_counted_in_cost_units() {
        let params = KeyParams {
            algorithm: AlgorithmKind::Grd,
            interval: 50 * MS,
            ewma: 0.0,
        };
        let k = KeyState::new(params, 1_000, 100, 1, 1, 1, 0);
        // 50 requests of cost 2 in 50 ms: 2,000 units/s, twice the limit.
        for i in 0..50 {
            k.decide(i * MS, 0, 2);
        }
        k.tick(50 * MS, 0.0, 1, 1);
        let s = k.snapshot();
        assert!((s.local_rate - 2_000.0).abs() < 1e-6, "{}", s.local_rate);
        assert!((s.drop_probability.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(s.admitted + s.denied, 100);
    }

    #[test]
    fn grd_key_drops_the_global_excess() {
        let params = KeyParams {
            algorithm: AlgorithmKind::Grd,
            interval: 50 * MS,
            ewma: 0.0,
        };
        let k = KeyState::new(params, 1_000, 100, 3, 3, 1, 0);
        // 500/s here, 1500/s elsewhere: admit half.
        let mut t = 0;
        for _ in 0..20 {
            for i in 0..25 {
                k.decide(t + i * 2 * MS, 0, 1);
            }
            t += 50 * MS;
            k.tick(t, 1_500.0, 3, 3);
        }
        let before = k.snapshot().admitted;
        for i in 0..10_000 {
            k.decide(t + i, 0, 1);
        }
        let got = k.snapshot().admitted - before;
        assert!((4_700..5_300).contains(&got), "admitted {got} of 10000");
        assert!((k.snapshot().drop_probability.unwrap() - 0.5).abs() < 0.01);
    }
}
