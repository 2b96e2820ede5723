//! The `/v1/status` document (version 1). Field names are stable and
//! documented in `docs/server.md`; new fields may be added, none renamed.

use serde::Serialize;

use super::history::Series;
use super::latency::quantile_ns;
use super::topkeys::{self, Ranking};
use crate::engine::Engine;
use crate::limits::Limit;
use drl_cluster_net::orbit::OrbitStore;
use drl_cluster_net::{GossipConfig, GossipStore};
use drl_config::Scope;
use drl_store::{RedisStore, Resilient};

/// Keys shown per ranking and per cluster table.
pub const TOP_N: usize = 10;

/// The whole document.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Format version (1).
    pub version: u32,
    /// This process.
    pub node: NodeInfo,
    /// Every limit: native ones in config order, then those made from
    /// Envoy descriptors (and limitador files).
    pub limits: Vec<LimitInfo>,
    /// The gossip node, with `cluster:`.
    pub gossip: Option<GossipInfo>,
    /// The Orbit ring, with `orbit:`.
    pub orbit: Option<OrbitInfo>,
    /// The Redis connection, with `redis:`.
    pub redis: Option<RedisInfo>,
    /// How client keys appear below (`status.keys`: `show`, `hash`, `hide`).
    pub keys: drl_config::sections::KeyDisplay,
}

/// The process.
#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    /// drl's version.
    pub version: &'static str,
    /// When this document was made, ms since the Unix epoch.
    pub now_ms: u64,
    /// When the service started, ms since the Unix epoch.
    pub started_ms: u64,
    /// Seconds since the start.
    pub uptime_s: u64,
    /// True once shutdown began.
    pub draining: bool,
}

/// One limit.
#[derive(Debug, Clone, Serialize)]
pub struct LimitInfo {
    /// Its name.
    pub name: String,
    /// `local`, `redis`, `gossip` or `orbit`.
    pub scope: &'static str,
    /// `native` (the `limits:` section) or `envoy` (a descriptor).
    pub kind: &'static str,
    /// The algorithm's name.
    pub algorithm: String,
    /// The quotas (`100/s`, `1000/1m (burst 50)`).
    pub quotas: Vec<String>,
    /// Shadow mode.
    pub shadow: bool,
    /// Decisions allowed since the start.
    pub allowed_total: u64,
    /// Decisions denied since the start (shadow mode: would-be denials).
    pub denied_total: u64,
    /// Allowed per second over the last minute, oldest first (one entry
    /// per completed second, at most 60).
    pub allowed_per_s: Vec<u64>,
    /// Denied per second, aligned with `allowed_per_s`.
    pub denied_per_s: Vec<u64>,
    /// Decision latency over about the last minute (native limits).
    pub latency: Option<LatencyInfo>,
    /// The heaviest keys (native limits without `top_keys: false`).
    pub top_keys: Option<TopKeysInfo>,
    /// Gossip state of the heaviest keys (`scope: gossip`).
    pub gossip_keys: Option<Vec<GossipKeyInfo>>,
    /// Orbit window usage of the heaviest keys (`scope: orbit`).
    pub orbit_keys: Option<Vec<OrbitKeyInfo>>,
}

/// Latency percentiles.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyInfo {
    /// Decisions measured.
    pub samples: u64,
    /// Median, microseconds (upper edge of its bucket: at most 25 % above
    /// the true value).
    pub p50_us: f64,
    /// 99th percentile, microseconds (same resolution).
    pub p99_us: f64,
}

/// Top keys.
#[derive(Debug, Clone, Serialize)]
pub struct TopKeysInfo {
    /// Keys each sketch monitors (the `k` of the bound `total / k`).
    pub capacity: usize,
    /// Seconds per sketch generation (the rankings cover the last one to
    /// two).
    pub generation_s: u64,
    /// The rankings were fed 1 decision in this many, each weighted by
    /// it (the largest such `s` over the generations shown): 1 means every
    /// decision and exact bounds; above 1, counts, totals and bounds are
    /// estimates (docs/server.md, "Top keys").
    pub sample_1_in: u32,
    /// By demand (the cost of every check).
    pub by_demand: RankingInfo,
    /// By denials (the cost of every denied check).
    pub by_denials: RankingInfo,
}

/// One ranking.
#[derive(Debug, Clone, Serialize)]
pub struct RankingInfo {
    /// Total weight seen.
    pub total: u64,
    /// Every key's `error` is at most this, and so is the weight of any
    /// key not listed that is lighter than the last one listed.
    pub error_bound: u64,
    /// The heaviest keys, heaviest first.
    pub keys: Vec<KeyCount>,
}

/// A key and its weight, which lies in `[count - error, count]`.
#[derive(Debug, Clone, Serialize)]
pub struct KeyCount {
    /// The key (longer than 128 bytes: a prefix, `#` and a hash).
    pub key: String,
    /// Upper bound of its weight.
    pub count: u64,
    /// Most the count may overestimate.
    pub error: u64,
}

/// A gossip key as this node sees it.
#[derive(Debug, Clone, Serialize)]
pub struct GossipKeyInfo {
    /// The aggregate (the key up to `cluster.flow_separator`).
    pub key: String,
    /// The configured global limit, units/s.
    pub limit: u64,
    /// The limit after the 1/N rule, units/s.
    pub effective_limit: u64,
    /// Live nodes counted (this one included).
    pub live_nodes: u32,
    /// This node's demand estimate (smoothed arrival rate), units/s.
    pub estimate: f64,
    /// The value this node publishes (rate for GRD, weight for FPS).
    pub published: f64,
    /// The sum of the other nodes' values used at the last interval.
    pub remote: f64,
    /// This node's share of the cluster's demand: `estimate / (estimate
    /// + remote)` (0 without demand).
    pub share: f64,
    /// The allocator's local limit, if it has one, units/s.
    pub local_limit: Option<f64>,
    /// The allocator's drop probability, if it has one.
    pub drop_probability: Option<f64>,
    /// Units admitted here since the key became active.
    pub admitted: u64,
    /// Units denied here since the key became active.
    pub denied: u64,
}

/// An Orbit key's window as this node sees it.
#[derive(Debug, Clone, Serialize)]
pub struct OrbitKeyInfo {
    /// The key.
    pub key: String,
    /// The window index (`now / window`).
    pub window: u64,
    /// The global cap per window.
    pub cap: u64,
    /// Admitted by this node in this window.
    pub admitted_here: u64,
    /// What this node could still admit in this window without a message.
    pub capacity_here: u64,
}

/// The gossip node.
#[derive(Debug, Clone, Serialize)]
pub struct GossipInfo {
    /// This node's id.
    pub node_id: u32,
    /// This node's UDP address.
    pub addr: String,
    /// `grd`, `fps`, ...
    pub algorithm: String,
    /// Nodes counted live (this one included).
    pub live_nodes: u32,
    /// `cluster.nodes`, if set.
    pub nodes: Option<u32>,
    /// Every node seen since the start, this one first.
    pub members: Vec<MemberInfo>,
}

/// A gossip member.
#[derive(Debug, Clone, Serialize)]
pub struct MemberInfo {
    /// Node id.
    pub id: u32,
    /// UDP address.
    pub addr: String,
    /// `up` or `down` (seen before, not active now).
    pub state: &'static str,
    /// True for this node.
    #[serde(rename = "self")]
    pub is_self: bool,
}

/// The Orbit ring.
#[derive(Debug, Clone, Serialize)]
pub struct OrbitInfo {
    /// This node's id.
    pub node_id: u32,
    /// Node ids in ring order.
    pub ring: Vec<u32>,
    /// `orbit.epoch_ms`.
    pub epoch_ms: u64,
    /// Ring members the failure detector believes down.
    pub down: Vec<u32>,
}

/// The Redis connection.
#[derive(Debug, Clone, Serialize)]
pub struct RedisInfo {
    /// `lua` or `module`.
    pub engine: &'static str,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// Store errors since the start (timeouts included).
    pub errors: u64,
    /// Of those, timeouts.
    pub timeouts: u64,
    /// Decisions answered by the failure policy instead of Redis.
    pub fail_overs: u64,
    /// Calls in flight now.
    pub in_flight: usize,
    /// `redis_resilience.breaker.max_in_flight`.
    pub max_in_flight: usize,
}

fn ranking(r: Ranking) -> RankingInfo {
    RankingInfo {
        total: r.total,
        error_bound: r.bound,
        keys: r
            .keys
            .into_iter()
            .map(|k| KeyCount {
                key: k.key,
                count: k.count,
                error: k.error,
            })
            .collect(),
    }
}

fn latency_info(l: &Limit, series: Option<&Series>) -> Option<LatencyInfo> {
    let s = l.metrics.status()?;
    let now = s.latency_snapshot();
    let recent = match series {
        Some(x) => x.recent_latency(&now),
        None => now,
    };
    let us = |ns: u64| ns as f64 / 1_000.0;
    Some(LatencyInfo {
        samples: recent.iter().sum(),
        p50_us: quantile_ns(&recent, 0.5).map_or(0.0, us),
        p99_us: quantile_ns(&recent, 0.99).map_or(0.0, us),
    })
}

/// The document for `engine` now.
pub fn build(engine: &Engine) -> Status {
    let hub = &engine.status;
    let limits = engine.limits();
    let (started_ms, uptime) = hub.started();
    let gossip = engine.stores().gossip();
    let orbit = engine.stores().orbit();
    let mut out = Vec::with_capacity(limits.limits.len() + limits.envoy_limits.len());
    let native = limits.limits.iter().map(|l| (l, "native"));
    let envoy = limits.envoy_limits.iter().map(|l| (l, "envoy"));
    for (l, kind) in native.chain(envoy) {
        let series = hub.series(&l.name);
        let (a, d, _) = l.metrics.totals();
        let top = l.metrics.status().and_then(|s| s.top_report(TOP_N));
        let demand_keys: Vec<String> = top
            .as_ref()
            .map(|(d, _)| d.keys.iter().map(|k| k.key.clone()).collect())
            .unwrap_or_default();
        let gossip_keys = match (&gossip, l.scope) {
            (Some((cfg, store)), Scope::Gossip) => Some(gossip_keys(cfg, store, l, &demand_keys)),
            _ => None,
        };
        let orbit_keys = match (&orbit, l.scope) {
            (Some(store), Scope::Orbit) => Some(orbit_keys(store, l, &demand_keys)),
            _ => None,
        };
        out.push(LimitInfo {
            name: l.name.to_string(),
            scope: l.scope.name(),
            kind,
            algorithm: l.spec.algorithm.to_string(),
            quotas: l.spec.quotas.iter().map(|q| q.to_string()).collect(),
            shadow: l.shadow,
            allowed_total: a,
            denied_total: d,
            allowed_per_s: series
                .as_ref()
                .map(|s| s.allowed.iter().copied().collect())
                .unwrap_or_default(),
            denied_per_s: series
                .as_ref()
                .map(|s| s.denied.iter().copied().collect())
                .unwrap_or_default(),
            latency: latency_info(l, series.as_ref()),
            top_keys: top.map(|(d, n)| TopKeysInfo {
                capacity: topkeys::CAPACITY,
                generation_s: topkeys::GENERATION_S,
                sample_1_in: d.sample_1_in.max(n.sample_1_in),
                by_demand: ranking(d),
                by_denials: ranking(n),
            }),
            gossip_keys,
            orbit_keys,
        });
    }
    let gossip = gossip.map(|(cfg, store)| gossip_info(hub, &cfg, &store));
    let orbit = orbit.map(|store| orbit_info(&store));
    let redis = engine
        .stores()
        .redis_status()
        .map(|(eng, r)| redis_info(eng, &r));
    let keys = hub.keys();
    for l in &mut out {
        shown(l, keys);
    }
    Status {
        keys,
        version: 1,
        node: NodeInfo {
            version: env!("CARGO_PKG_VERSION"),
            now_ms: super::unix_ms(),
            started_ms,
            uptime_s: uptime.as_secs(),
            draining: engine.is_draining(),
        },
        limits: out,
        gossip,
        orbit,
        redis,
    }
}

/// The gossip state of a limit's busiest keys (flows folded into their
/// aggregate key).
fn gossip_keys(
    cfg: &GossipConfig,
    store: &GossipStore,
    l: &Limit,
    demand_keys: &[String],
) -> Vec<GossipKeyInfo> {
    let mut seen: Vec<String> = Vec::new();
    let mut v = Vec::new();
    for k in demand_keys {
        let agg = match &cfg.flow_separator {
            Some(sep) => k.rfind(sep.as_str()).map_or(k.as_str(), |i| &k[..i]),
            None => k.as_str(),
        };
        if seen.iter().any(|s| s == agg) {
            continue;
        }
        seen.push(agg.to_string());
        if let Some(s) = store.snapshot(&l.name, agg) {
            let sum = s.local_rate + s.remote;
            v.push(GossipKeyInfo {
                key: agg.to_string(),
                limit: s.limit,
                effective_limit: s.effective_limit,
                live_nodes: s.live_nodes,
                estimate: s.local_rate,
                published: s.published,
                remote: s.remote,
                share: if sum > 0.0 { s.local_rate / sum } else { 0.0 },
                local_limit: s.local_limit,
                drop_probability: s.drop_probability,
                admitted: s.admitted,
                denied: s.denied,
            });
        }
    }
    v
}

/// The Orbit windows of a limit's busiest keys.
fn orbit_keys(store: &OrbitStore, l: &Limit, demand_keys: &[String]) -> Vec<OrbitKeyInfo> {
    demand_keys
        .iter()
        .filter_map(|k| {
            let w = store.key_window(&l.name, k)?;
            Some(OrbitKeyInfo {
                key: k.clone(),
                window: w.window,
                cap: w.cap,
                admitted_here: w.admitted_here,
                capacity_here: w.capacity_here,
            })
        })
        .collect()
}

/// This node and the gossip members it has seen.
fn gossip_info(hub: &super::StatusHub, cfg: &GossipConfig, store: &GossipStore) -> GossipInfo {
    let mut members = vec![MemberInfo {
        id: cfg.node_id,
        addr: store.local_addr().to_string(),
        state: "up",
        is_self: true,
    }];
    for (id, m) in hub.members() {
        if id != cfg.node_id {
            members.push(MemberInfo {
                id,
                addr: m.addr.to_string(),
                state: if m.up { "up" } else { "down" },
                is_self: false,
            });
        }
    }
    GossipInfo {
        node_id: cfg.node_id,
        addr: store.local_addr().to_string(),
        algorithm: cfg.algorithm.to_string(),
        live_nodes: store.live_nodes(),
        nodes: cfg.nodes,
        members,
    }
}

/// This node's Orbit ring.
fn orbit_info(store: &OrbitStore) -> OrbitInfo {
    let cfg = store.config();
    OrbitInfo {
        node_id: store.node_id(),
        ring: cfg.ring.iter().map(|m| m.id).collect(),
        epoch_ms: cfg.epoch_ms,
        down: store.stats().down,
    }
}

/// The Redis store's engine, breaker and counters.
fn redis_info(eng: drl_store::Engine, r: &Resilient<RedisStore>) -> RedisInfo {
    let s = r.stats();
    RedisInfo {
        engine: match eng {
            drl_store::Engine::Lua => "lua",
            drl_store::Engine::Module => "module",
        },
        breaker: match s.breaker {
            drl_store::BreakerState::Closed => "closed",
            drl_store::BreakerState::Open => "open",
            drl_store::BreakerState::HalfOpen => "half_open",
        },
        errors: s.errors,
        timeouts: s.timeouts,
        fail_overs: s.fail_overs,
        in_flight: s.in_flight,
        max_in_flight: s.max_in_flight,
    }
}

/// Rewrites every client key of `l` as `mode` shows it (hidden: dropped).
fn shown(l: &mut LimitInfo, mode: drl_config::sections::KeyDisplay) {
    if mode == drl_config::sections::KeyDisplay::Show {
        return;
    }
    if let Some(t) = &mut l.top_keys {
        for r in [&mut t.by_demand, &mut t.by_denials] {
            r.keys = std::mem::take(&mut r.keys)
                .into_iter()
                .filter_map(|mut k| {
                    k.key = mode.show(&k.key)?;
                    Some(k)
                })
                .collect();
        }
    }
    if let Some(g) = &mut l.gossip_keys {
        *g = std::mem::take(g)
            .into_iter()
            .filter_map(|mut k| {
                k.key = mode.show(&k.key)?;
                Some(k)
            })
            .collect();
    }
    if let Some(o) = &mut l.orbit_keys {
        *o = std::mem::take(o)
            .into_iter()
            .filter_map(|mut k| {
                k.key = mode.show(&k.key)?;
                Some(k)
            })
            .collect();
    }
}
