//! What the service believes, for people: the status page at `/` and its
//! JSON, `GET /v1/status` (field names in `docs/server.md`).
//!
//! - `StatusConfig` (`drl_config::sections`): the `status:` section
//!   (`status.enabled`, default true; off, both routes answer 404 and
//!   nothing below is recorded; `status.keys`, how client keys are shown:
//!   hashed by default).
//! - [`LimitStatus`]: per native limit, the decision latency
//!   ([`latency`]) and the top keys by demand and by denials
//!   ([`topkeys`], fixed memory, off per limit with `top_keys: false`),
//!   sampled 1 in `s` above [`sampling::SAMPLES_PER_S`] decisions a
//!   second ([`sampling`]), reached from the decision path through the limit's
//!   [`crate::metrics::LimitMetrics`]. Keys never leave the process
//!   except in answers to those two routes (never in `/metrics`).
//! - [`StatusHub`]: the per-second history of every limit
//!   ([`history`]), sampled by a task once a second ([`tick::spawn_sampler`])
//!   from the decision counters, never on the decision path, which also
//!   sets each limit's top-keys sampling from its last second's rate; the
//!   gossip members seen.
//! - [`snapshot`]: the JSON document, assembled from the limits, the
//!   history and the stores (gossip node, Orbit ring, Redis breaker).
//!
//! The page and its two routes are drl-server's (`status::page`,
//! `status::routes`).

pub mod history;
pub mod latency;
pub mod sampling;
pub mod snapshot;
pub mod space_saving;
pub mod tick;
pub mod topkeys;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use drl_config::sections::{KeyDisplay, StatusConfig};

use history::Series;
use latency::Latency;
use topkeys::TopKeys;

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
    /// The limits the last sample saw and `active` indexes (held, so that
    /// their address cannot be reused by a later reload's; a change prunes
    /// the series), and the first-use count `active` was read at.
    /// (Type-erased: the status data does not import the limits.)
    active_for: Option<(Arc<dyn std::any::Any + Send + Sync>, u64)>,
    /// Indices (native limits, then Envoy's) of the limits that decided.
    active: Vec<usize>,
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
