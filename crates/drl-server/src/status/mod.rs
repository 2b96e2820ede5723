//! What the service believes, for people: the status page at `/` and its
//! JSON, `GET /v1/status` (field names in `docs/server.md`).
//!
//! - [`StatusConfig`]: the `status:` section (`status.enabled`, default
//!   true; off, both routes answer 404 and nothing below is recorded;
//!   `status.keys`, how client keys are shown: hashed by default).
//! - [`LimitStatus`]: per native limit, the decision latency
//!   ([`latency`]) and the top keys by demand and by denials
//!   ([`topkeys`], fixed memory, off per limit with `top_keys: false`),
//!   sampled 1 in `s` above [`sampling::SAMPLES_PER_S`] decisions a
//!   second ([`sampling`]), reached from the decision path through the limit's
//!   [`crate::metrics::LimitMetrics`]. Keys never leave the process
//!   except in answers to those two routes (never in `/metrics`).
//! - [`StatusHub`]: the per-second history of every limit
//!   ([`history`]), sampled by a task once a second ([`spawn_sampler`])
//!   from the decision counters, never on the decision path, which also
//!   sets each limit's top-keys sampling from its last second's rate; the
//!   gossip members seen.
//! - [`snapshot`]: the JSON document, assembled from the limits, the
//!   history and the stores (gossip node, Orbit ring, Redis breaker).
//! - [`page`]: the server-rendered HTML (readable without JavaScript) and
//!   its embedded script, which re-renders from `/v1/status` every second.
//! - [`routes`]: the two handlers.

pub mod history;
pub mod latency;
pub mod page;
pub mod routes;
pub mod sampling;
pub mod snapshot;
pub mod space_saving;
pub mod topkeys;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use crate::engine::Engine;
use history::{LATENCY_EVERY, Series};
use latency::Latency;
use topkeys::{GENERATION_S, TopKeys};

/// The `status:` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusConfig {
    /// Serve the status page at `/` and `GET /v1/status`, and record what
    /// they show (latency and top keys per limit). Default true.
    pub enabled: bool,
    /// How client keys (API keys, user ids) appear on the page and in
    /// `/v1/status`. Default `hash`.
    pub keys: KeyDisplay,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            keys: KeyDisplay::Hash,
        }
    }
}

/// How the status page shows client keys (`status.keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KeyDisplay {
    /// As they are.
    Show,
    /// As `sha256:` and the first 16 hex digits of the key's SHA-256 (an
    /// operator finds a known key by hashing it; the page never shows it).
    #[default]
    Hash,
    /// Not at all: every key list is empty (counts and totals stay).
    Hide,
}

impl KeyDisplay {
    /// `key` as this mode shows it (`None`: hidden).
    pub fn show(self, key: &str) -> Option<String> {
        use sha2::Digest as _;
        match self {
            KeyDisplay::Show => Some(key.to_string()),
            KeyDisplay::Hash => {
                let d = sha2::Sha256::digest(key.as_bytes());
                let mut out = String::with_capacity(23);
                out.push_str("sha256:");
                for b in &d[..8] {
                    out.push_str(&format!("{b:02x}"));
                }
                Some(out)
            }
            KeyDisplay::Hide => None,
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> Self {
        match c {
            0 => KeyDisplay::Show,
            2 => KeyDisplay::Hide,
            _ => KeyDisplay::Hash,
        }
    }
}

/// What the status page records for one native limit on the decision
/// path. Its histogram and sketches are made at the limit's first
/// decision: a limit that is configured but never used costs a few words
/// (10,000 idle limits must not hold the sketches of 10,000 busy ones).
#[derive(Debug, Default)]
pub struct LimitStatus {
    latency: OnceLock<Latency>,
    /// `None`: `top_keys: false`.
    top: Option<OnceLock<TopKeys>>,
}

impl LimitStatus {
    /// Recording for a limit, with or without top keys.
    pub fn new(top_keys: bool) -> Self {
        Self {
            latency: OnceLock::new(),
            top: top_keys.then(OnceLock::new),
        }
    }

    /// Records one decision of `cost` for `key` (before shadow mode: what
    /// the limit decided).
    #[inline]
    pub fn observe(&self, key: &str, cost: u64, allowed: bool) {
        if let Some(t) = &self.top {
            t.get_or_init(TopKeys::new).observe(key, cost, allowed);
        }
    }

    /// Records one decision's latency.
    #[inline]
    pub fn record_latency(&self, ns: u64) {
        self.latency.get_or_init(Latency::new).record(ns);
    }

    /// Counts per latency bucket so far (all zero before any decision).
    pub fn latency_snapshot(&self) -> [u64; latency::BUCKETS] {
        self.latency
            .get()
            .map_or([0; latency::BUCKETS], Latency::snapshot)
    }

    /// The top-keys sketches, once the limit has recorded a decision
    /// (never with `top_keys: false`).
    pub fn top_keys(&self) -> Option<&TopKeys> {
        self.top.as_ref()?.get()
    }

    /// The `n` heaviest keys by demand and by denials (empty before any
    /// decision), unless `top_keys: false`.
    pub fn top_report(&self, n: usize) -> Option<(topkeys::Ranking, topkeys::Ranking)> {
        let top = self.top.as_ref()?;
        Some(match top.get() {
            Some(t) => t.report(n),
            None => (topkeys::Ranking::empty(), topkeys::Ranking::empty()),
        })
    }
}

fn registry() -> &'static Mutex<BTreeMap<String, Arc<LimitStatus>>> {
    static R: OnceLock<Mutex<BTreeMap<String, Arc<LimitStatus>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// The recording of limit `name` (the same one across reloads while
/// `top_keys` stays the same, like the decision counters).
pub fn for_limit(name: &str, top_keys: bool) -> Arc<LimitStatus> {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    match r.get(name) {
        Some(s) if s.top.is_some() == top_keys => s.clone(),
        _ => {
            let s = Arc::new(LimitStatus::new(top_keys));
            r.insert(name.to_string(), s.clone());
            s
        }
    }
}

/// A gossip member as the sampler saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenMember {
    /// Its UDP address.
    pub addr: SocketAddr,
    /// Up at the last sample.
    pub up: bool,
}

#[derive(Debug, Default)]
struct HubState {
    series: BTreeMap<String, Series>,
    ticks: u64,
    /// When the previous sample was taken.
    last_tick: Option<Instant>,
    members: BTreeMap<u32, SeenMember>,
    /// The limits the series were last pruned against (their address: a
    /// reload swaps in new ones).
    pruned_for: usize,
}

/// The status page's own state: history and gossip members, per engine.
#[derive(Debug)]
pub struct StatusHub {
    enabled: AtomicBool,
    keys: AtomicU8,
    started: Instant,
    started_unix_ms: u64,
    state: Mutex<HubState>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl StatusHub {
    /// A hub configured by `cfg`.
    pub fn new(cfg: &StatusConfig) -> Self {
        Self {
            enabled: AtomicBool::new(cfg.enabled),
            keys: AtomicU8::new(cfg.keys.code()),
            started: Instant::now(),
            started_unix_ms: unix_ms(),
            state: Mutex::default(),
        }
    }

    /// Applies a (re)loaded `status:` section.
    pub fn configure(&self, cfg: &StatusConfig) {
        self.enabled.store(cfg.enabled, Ordering::Relaxed);
        self.keys.store(cfg.keys.code(), Ordering::Relaxed);
    }

    /// How keys are shown now (`status.keys`).
    pub fn keys(&self) -> KeyDisplay {
        KeyDisplay::from_code(self.keys.load(Ordering::Relaxed))
    }

    /// True if the page and `/v1/status` are served.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One sample, a second after the previous: per-limit counts, each
    /// limit's top-keys sampling from its decisions per second since the
    /// previous sample, latency snapshots every [`LATENCY_EVERY`] s, a new
    /// top-keys generation every [`GENERATION_S`] s, gossip members.
    pub fn tick(&self, engine: &Engine) {
        if !self.enabled() {
            return;
        }
        let limits = engine.limits();
        let mut st = self.state();
        st.ticks += 1;
        let ticks = st.ticks;
        let now = Instant::now();
        // Seconds since the previous sample (a delayed tick must not
        // read as a higher rate).
        let secs = st
            .last_tick
            .replace(now)
            .map_or(1.0, |t| now.duration_since(t).as_secs_f64().max(0.001));
        let all: Vec<_> = limits
            .limits
            .iter()
            .chain(limits.envoy_limits.iter())
            .collect();
        // Prune the series of removed limits once per reload, not every
        // second (10,000 names hashed a second was most of the idle cost).
        let at = std::sync::Arc::as_ptr(&*limits) as usize;
        if st.pruned_for != at {
            st.pruned_for = at;
            let names: std::collections::HashSet<&str> = all.iter().map(|l| &*l.name).collect();
            st.series.retain(|name, _| names.contains(name.as_str()));
        }
        for l in &all {
            let (a, d, _) = l.metrics.totals();
            // A limit that never decided has no history yet (and costs
            // nothing here): its series starts at its first decision.
            if (a, d) == (0, 0) && !st.series.contains_key(&*l.name) {
                continue;
            }
            let s = st.series.entry(l.name.to_string()).or_default();
            let decided = s.sample((a, d));
            if let (Some(n), Some(t)) = (decided, l.metrics.status().and_then(|s| s.top_keys())) {
                t.set_rate((n as f64 / secs) as u64);
            }
            if let Some(ls) = l.metrics.status()
                && (ticks - 1) % LATENCY_EVERY == 0
            {
                s.snapshot_latency(ls.latency_snapshot());
            }
        }
        if ticks % GENERATION_S == 0 {
            for l in limits.limits.iter() {
                if let Some(t) = l.metrics.status().and_then(|s| s.top_keys()) {
                    t.rotate();
                }
            }
        }
        if let Some((_, store)) = engine.stores().gossip() {
            let up = store.members();
            for m in st.members.values_mut() {
                m.up = false;
            }
            for m in up {
                st.members.insert(
                    m.id,
                    SeenMember {
                        addr: m.addr,
                        up: true,
                    },
                );
            }
        }
    }

    /// A copy of limit `name`'s history.
    pub fn series(&self, name: &str) -> Option<Series> {
        self.state().series.get(name).cloned()
    }

    /// Gossip members seen since start, by id (this node excluded).
    pub fn members(&self) -> BTreeMap<u32, SeenMember> {
        self.state().members.clone()
    }

    /// When the engine started (ms since the Unix epoch) and its uptime.
    pub fn started(&self) -> (u64, Duration) {
        (self.started_unix_ms, self.started.elapsed())
    }
}

/// Samples `engine`'s status once a second while the runtime runs.
pub fn spawn_sampler(engine: Arc<Engine>) {
    tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            engine.status.tick(&engine);
        }
    });
}
