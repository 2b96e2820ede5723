//! [`Engine`]: the live configuration, the stores, and the decision logic
//! shared by every API.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use drl_core::{Clock, Decision, KeyedLimiter, Nanos, SystemClock};
use drl_store::StoreError;
use smallvec::SmallVec;

pub use crate::config_files::{is_empty_document, load_config_dir, load_config_file};
use crate::envoy_override::Overrides;
use crate::limits::{Limit, Limits};
use crate::metrics::ApiMetrics;
use crate::scope::{Backend, Stores};
use drl_config::{Config, ConfigError, ServerConfig};

pub use drl_api::{CheckRequest, INLINE_BATCH, Op, Outcome};

/// The answer of every API before a configuration has loaded (`drl serve
/// --wait-for-config`), envoyproxy/ratelimit's words for it.
pub const NOT_LOADED: &str = "no rate limit configuration loaded";

/// Why a batch was refused (nothing was decided).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No configuration has loaded yet ([`NOT_LOADED`]).
    #[error("{}", NOT_LOADED)]
    NotLoaded,
    /// A request names a limit that is not configured.
    #[error("requests[{index}]: unknown limit {name:?}; configured limits: {known}")]
    UnknownLimit {
        /// Position in the batch.
        index: usize,
        /// The name asked for.
        name: String,
        /// The configured names, comma-separated.
        known: String,
    },
    /// A cost above the configured maximum.
    #[error("requests[{index}]: cost {cost} exceeds the maximum of {max}")]
    CostTooLarge {
        /// Position in the batch.
        index: usize,
        /// The cost asked for.
        cost: u64,
        /// `server.max_cost`.
        max: u64,
    },
    /// A key longer than `server.max_key_bytes`.
    #[error("requests[{index}]: key is {len} bytes; at most {max} (server.max_key_bytes)")]
    KeyTooLong {
        /// Position in the batch.
        index: usize,
        /// Its length.
        len: usize,
        /// `server.max_key_bytes`.
        max: usize,
    },
    /// Too many requests in one batch.
    #[error("{n} requests in one call; at most {max}")]
    TooMany {
        /// How many.
        n: usize,
        /// `server.max_batch`.
        max: usize,
    },
    /// An empty batch.
    #[error("`requests` is empty")]
    Empty,
    /// A mode the limit's store cannot serve (a store that answers take
    /// and charge only; every scope drl ships serves every mode).
    #[error(
        "requests[{index}]: mode {mode:?} is not served by limit {limit:?}: its scope {scope} answers take and charge only"
    )]
    Unsupported {
        /// Position in the batch.
        index: usize,
        /// The limit.
        limit: String,
        /// The mode asked for.
        mode: &'static str,
        /// The limit's scope.
        scope: String,
    },
    /// A store could not decide.
    #[error("limit {limit:?}: {error}")]
    Store {
        /// The limit.
        limit: String,
        /// What failed.
        error: StoreError,
    },
}

impl CheckError {
    /// A short stable name for metrics and problem types.
    pub fn kind(&self) -> &'static str {
        match self {
            CheckError::NotLoaded => "no_config",
            CheckError::UnknownLimit { .. } => "unknown_limit",
            CheckError::CostTooLarge { .. } => "cost_too_large",
            CheckError::KeyTooLong { .. } => "key_too_long",
            CheckError::TooMany { .. } => "batch_too_large",
            CheckError::Empty => "empty_batch",
            CheckError::Unsupported { .. } => "unsupported_mode",
            CheckError::Store { .. } => "store_unavailable",
        }
    }
}

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP: the operator asked for it; it may remove limits.
    Signal,
    /// The watched file changed: it may remove limits only if the new file
    /// sets `server.allow_limit_removal: true` (a truncated or half-written
    /// file must never drop limits).
    FileChange,
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Limits in the new config.
    pub limits: usize,
    /// Of those, limits whose state was kept (unchanged spec).
    pub kept: usize,
}

/// The live limits as a request holds them ([`Engine::limits`]).
pub type LimitsGuard = arc_swap::Guard<Arc<Limits>>;

/// The service's state: live limits and stores.
#[derive(Debug)]
pub struct Engine {
    /// The live limits. Read on every request: an `ArcSwap` load writes
    /// nothing that another thread reads (a lock's or an `Arc`'s count
    /// would move its cache line between the workers' cores each time).
    current: ArcSwap<Limits>,
    stores: Stores,
    source: Option<PathBuf>,
    reload_lock: parking_lot::Mutex<()>,
    draining: AtomicBool,
    /// Latency histograms.
    pub api_metrics: ApiMetrics,
    /// Envoy RLS limit overrides in use (kept across reloads).
    pub overrides: Overrides,
    /// The status page's history and switch.
    pub status: crate::status::StatusHub,
}

impl Engine {
    /// An engine serving `config`; `source` is the file reloads read (none
    /// for the embedded default).
    pub fn new(config: &Config, source: Option<PathBuf>) -> Result<Self, ConfigError> {
        Self::with_stores(config, source, Stores::new())
    }

    /// Like [`Engine::new`], with stores already connected (Redis).
    pub fn with_stores(
        config: &Config,
        source: Option<PathBuf>,
        stores: Stores,
    ) -> Result<Self, ConfigError> {
        let name = source_name(source.as_ref());
        let limits = Limits::build(config, &stores, &name)?;
        Ok(Self {
            current: ArcSwap::from_pointee(limits),
            stores,
            source,
            reload_lock: parking_lot::Mutex::new(()),
            draining: AtomicBool::new(false),
            api_metrics: ApiMetrics::new(),
            overrides: Overrides::new(),
            status: crate::status::StatusHub::new(&config.status),
        })
    }

    /// An engine with no configuration loaded yet (`drl serve
    /// --wait-for-config`): every decision is refused with
    /// [`CheckError::NotLoaded`] until the first successful
    /// [`Engine::apply_from`] of a config read from `source`.
    pub fn not_loaded(source: PathBuf, stores: Stores) -> Self {
        let engine = Self::with_stores(&Config::empty(), Some(source), stores)
            .expect("an empty config always compiles");
        engine
            .current
            .store(Arc::new(Limits::not_loaded(&engine.stores)));
        engine
    }

    /// True once a configuration has loaded (always, but for an engine
    /// made by [`Engine::not_loaded`] before its first load).
    pub fn is_loaded(&self) -> bool {
        self.current.load().loaded
    }

    /// The live limits, for the length of a request (a reload meanwhile
    /// swaps in new ones; these stay alive until the guard is dropped).
    #[inline]
    pub fn limits(&self) -> LimitsGuard {
        self.current.load()
    }

    /// The stores behind the limits (for the drain: leaving clusters).
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The config file reloads read.
    pub fn source(&self) -> Option<&PathBuf> {
        self.source.as_ref()
    }

    /// Marks the service as shutting down (`/readyz` answers 503).
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// True once shutdown began.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Re-reads the config file; on any error the old config keeps serving.
    pub fn reload(&self, trigger: Trigger) -> Result<ReloadReport, ConfigError> {
        let cfg = self.load()?;
        self.apply_from(&cfg, trigger)
    }

    /// Reads and parses the config file (without applying it). An empty
    /// file is refused ([`load_config_file`]).
    pub fn load(&self) -> Result<Config, ConfigError> {
        let Some(path) = &self.source else {
            return Err(ConfigError::new(
                "<embedded>",
                "no config file to reload (started without --config)",
            ));
        };
        load_config_file(path)
    }

    /// Serves `cfg` from now on, keeping the state of unchanged limits (it
    /// may remove limits: what SIGHUP does).
    pub fn apply(&self, cfg: &Config) -> Result<ReloadReport, ConfigError> {
        self.apply_from(cfg, Trigger::Signal)
    }

    /// Like [`Engine::apply`], for a reload started by `trigger`: after a
    /// file change, a config that would remove limits or Envoy domains is
    /// refused unless it sets `server.allow_limit_removal: true`.
    pub fn apply_from(&self, cfg: &Config, trigger: Trigger) -> Result<ReloadReport, ConfigError> {
        let _guard = self.reload_lock.lock();
        let name = source_name(self.source.as_ref());
        if trigger == Trigger::FileChange && !cfg.server.allow_limit_removal {
            let old = self.limits();
            let gone = removed(&old, cfg);
            if !gone.is_empty() {
                return Err(ConfigError::new(
                    &name,
                    format!(
                        "the changed file would remove {}; a reload on file change never removes limits (a truncated or half-written file must not drop them): set `server.allow_limit_removal: true` in the new file, or send SIGHUP",
                        gone.join(", ")
                    ),
                ));
            }
        }
        self.stores
            .started_with(cfg)
            .map_err(|e| ConfigError::new(&name, e))?;
        let keys = self
            .stores
            .load_keys(cfg.orbit.as_ref(), cfg.cluster.as_ref())
            .map_err(|e| ConfigError::new(&name, e))?;
        let old = self.limits();
        let mut new = Limits::build(cfg, &self.stores, &name)?;
        new.keep_reservations(&old);
        let old_specs: Vec<_> = old.live();
        let live = new.live();
        let kept = live.iter().filter(|s| old_specs.contains(s)).count();
        let report = ReloadReport {
            limits: live.len(),
            kept,
        };
        self.overrides
            .retain_domains(|d| new.domains.contains_key(d));
        self.overrides.drop_stateless(self.now());
        self.current.store(Arc::new(new));
        self.status.configure(&cfg.status);
        self.stores.retain(&live);
        self.stores
            .apply_keys(keys, cfg.orbit.as_ref(), cfg.cluster.as_ref());
        if let Some(c) = &cfg.cluster {
            self.stores.apply_gossip_faults(c);
        }
        Ok(report)
    }

    /// The time decisions use.
    #[inline]
    pub fn now(&self) -> Nanos {
        SystemClock.now()
    }

    /// Decides a batch of independent checks, in order. The batch is
    /// validated first: if any check is invalid nothing is decided.
    pub async fn check(
        &self,
        limits: &Limits,
        reqs: &[CheckRequest<'_>],
    ) -> Result<Vec<Decision>, CheckError> {
        let mut out = Vec::with_capacity(reqs.len());
        self.check_each(limits, reqs, self.now(), |o| out.push(o.decision))
            .await?;
        Ok(out)
    }

    /// Like [`Engine::check`], deciding at `now` (the caller's reading of
    /// [`Engine::now`]) and handing each decision to `emit` in order
    /// instead of collecting them (the APIs write their responses
    /// directly, with no intermediate vector). On a store error, `emit`
    /// has seen the decisions before the failing check; callers discard
    /// them. Returns the clock's reading at the end of the batch (the one
    /// read the status page's latency and the caller's request histogram
    /// share).
    ///
    /// In-memory (`local`) checks are decided inline. From the first check
    /// that needs a store (Redis, gossip, Orbit) on, the rest of the batch
    /// is decided concurrently, so that a batch of Redis checks is coalesced
    /// into as few script calls as the store's batcher allows (whatever the
    /// threads do: [`drl_store::coalesce`]) instead of one round trip per
    /// check; the store still decides them in request order. On a store error every check of the batch has been decided;
    /// the first error is returned.
    pub async fn check_each(
        &self,
        limits: &Limits,
        reqs: &[CheckRequest<'_>],
        now: Nanos,
        mut emit: impl FnMut(Outcome),
    ) -> Result<Nanos, CheckError> {
        let resolved = resolve(limits, reqs)?;
        let server = &limits.server;
        // Decisions are counted per run of checks on the same limit: one
        // counter update per run instead of one per check.
        let mut tally = Tally::new(now);
        let mut pairs = reqs.iter().zip(resolved);
        let mut pending = None;
        for (r, l) in pairs.by_ref() {
            match l.backend.local() {
                Some(k) => emit(tally.outcome(l, r, apply_local(l, k, r, now, server))),
                None => {
                    pending = Some((r, l));
                    break;
                }
            }
        }
        if let Some(first) = pending {
            let rest: Vec<_> = std::iter::once(first).chain(pairs).collect();
            // Submitted in one poll, handed to the Redis batchers together.
            let decided = drl_store::coalesce(futures::future::join_all(
                rest.iter().map(|(r, l)| apply_raw(l, r, now, server)),
            ))
            .await;
            for (&(r, l), d) in rest.iter().zip(decided) {
                match d {
                    Ok(o) => emit(tally.outcome(l, r, o)),
                    Err(e) => {
                        tally.finish(SystemClock.now());
                        return Err(e);
                    }
                }
            }
        }
        let end = SystemClock.now();
        tally.finish(end);
        Ok(end)
    }

    /// [`Engine::check_each`] without a future, for a batch whose limits
    /// are all in memory (`local`): `None` (nothing decided, `emit` not
    /// called) when one of them needs a store. A caller holding the batch
    /// in its own state thus keeps that state out of an `async` frame.
    pub fn check_now(
        &self,
        limits: &Limits,
        reqs: &[CheckRequest<'_>],
        now: Nanos,
        mut emit: impl FnMut(Outcome),
    ) -> Option<Result<Nanos, CheckError>> {
        let resolved = match resolve(limits, reqs) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        if !resolved.iter().all(|l| l.backend.local().is_some()) {
            return None;
        }
        let mut tally = Tally::new(now);
        for (r, l) in reqs.iter().zip(resolved) {
            // Every one is local (above): nothing is skipped.
            if let Some(k) = l.backend.local() {
                let o = apply_local(l, k, r, now, &limits.server);
                emit(tally.outcome(l, r, o));
            }
        }
        let end = SystemClock.now();
        tally.finish(end);
        Some(Ok(end))
    }
}

/// The native limits and Envoy domains serving in `old` that `new` lacks,
/// described for an error message.
fn removed(old: &Limits, new: &Config) -> Vec<String> {
    let mut gone: Vec<String> = old
        .names()
        .into_iter()
        .filter(|n| !new.limits.iter().any(|l| l.name == *n))
        .map(|n| format!("limit {n:?}"))
        .collect();
    let mut domains: Vec<&String> = old
        .domains
        .keys()
        .filter(|d| !new.envoy.iter().any(|e| &e.domain == *d))
        .collect();
    domains.sort_unstable();
    gone.extend(domains.into_iter().map(|d| format!("envoy domain {d:?}")));
    gone
}

fn source_name(p: Option<&PathBuf>) -> String {
    p.map_or_else(|| "<embedded>".to_string(), |p| p.display().to_string())
}

/// The limits of a batch's checks, in order (small batches, the common
/// case, on the stack).
pub type Resolved<'l> = SmallVec<[&'l Arc<Limit>; INLINE_BATCH]>;

/// Looks every check's limit up and validates it.
pub fn resolve<'l>(
    limits: &'l Limits,
    reqs: &[CheckRequest<'_>],
) -> Result<Resolved<'l>, CheckError> {
    if !limits.loaded {
        return Err(CheckError::NotLoaded);
    }
    if reqs.is_empty() {
        return Err(CheckError::Empty);
    }
    let s = &limits.server;
    if reqs.len() > s.max_batch {
        return Err(CheckError::TooMany {
            n: reqs.len(),
            max: s.max_batch,
        });
    }
    let mut out = Resolved::with_capacity(reqs.len());
    let mut prev: Option<(&str, &'l Arc<Limit>)> = None;
    for (index, r) in reqs.iter().enumerate() {
        // Batches usually repeat a limit: compare with the previous name
        // before hashing.
        let found = match prev {
            Some((name, l)) if name == r.limit => Some(l),
            _ => limits.get(r.limit),
        };
        let Some(l) = found else {
            return Err(CheckError::UnknownLimit {
                index,
                name: r.limit.to_string(),
                known: limits.names().join(", "),
            });
        };
        if r.cost > s.max_cost {
            return Err(CheckError::CostTooLarge {
                index,
                cost: r.cost,
                max: s.max_cost,
            });
        }
        if r.key.len() > s.max_key_bytes {
            return Err(CheckError::KeyTooLong {
                index,
                len: r.key.len(),
                max: s.max_key_bytes,
            });
        }
        if !matches!(r.op, Op::Take | Op::Charge) && !settles(&l.backend) {
            return Err(CheckError::Unsupported {
                index,
                limit: r.limit.to_string(),
                mode: op_name(r.op),
                scope: format!("{:?}", l.scope).to_lowercase(),
            });
        }
        prev = Some((r.limit, l));
        out.push(l);
    }
    Ok(out)
}

/// Decides one check on `limit`, counting it, applying shadow mode.
#[inline]
pub async fn decide(
    limit: &Limit,
    key: &str,
    cost: u64,
    now: Nanos,
) -> Result<Decision, CheckError> {
    let d = decide_raw(limit, key, cost, now).await?;
    if let Some(s) = limit.metrics.status() {
        s.observe(key, cost, d.allowed);
        s.record_latency(SystemClock.now().saturating_sub(now));
    }
    Ok(finish(limit, d))
}

/// Decides one check on `limit`; no metrics, no shadow mode.
#[inline]
pub async fn decide_raw(
    limit: &Limit,
    key: &str,
    cost: u64,
    now: Nanos,
) -> Result<Decision, CheckError> {
    match limit.backend.decide_now(key, cost, now) {
        Some(d) => Ok(d),
        None => limit
            .backend
            .decide(&limit.spec, key, cost, now)
            .await
            .map_err(|error| CheckError::Store {
                limit: limit.name.to_string(),
                error,
            }),
    }
}

/// Charges `cost` on `limit` even past the limit (docs/semantics.md,
/// "Costs known afterwards"); no metrics, no shadow mode. A store that
/// cannot charge answers [`CheckError::Store`], never a take.
#[inline]
pub async fn charge_raw(
    limit: &Limit,
    key: &str,
    cost: u64,
    now: Nanos,
) -> Result<Decision, CheckError> {
    match limit.backend.local() {
        Some(k) => Ok(k.charge(key, now, cost)),
        None => limit
            .backend
            .charge(&limit.spec, key, cost, now)
            .await
            .map_err(|error| CheckError::Store {
                limit: limit.name.to_string(),
                error,
            }),
    }
}

/// Applies check `r` (any [`Op`]) on `limit`, whose state is the keyed
/// limiter `k` in memory; no metrics, no shadow mode.
///
/// A settle or release naming a reservation this limit settled among its
/// last `server.max_reservations` closings (a retry) answers that
/// settlement again and applies nothing. One naming a reservation it does
/// not hold otherwise (unknown, expired and closed, another key's, or
/// closed by a reload that changed the limit) answers `expired`: its
/// estimate stays consumed. A settle then charges its whole actual cost,
/// since the estimate is no longer known: stricter than the settlement it
/// replaces, never more generous.
pub fn apply_local(
    limit: &Limit,
    k: &KeyedLimiter<String>,
    r: &CheckRequest<'_>,
    now: Nanos,
    server: &ServerConfig,
) -> Outcome {
    match r.op {
        Op::Take => Outcome::of(k.decide(r.key, now, r.cost)),
        Op::Check => Outcome::of(k.check(r.key, now, r.cost)),
        Op::Charge => Outcome::of(k.charge(r.key, now, r.cost)),
        Op::Reserve => {
            let ttl = server
                .reservation_ttl_ms
                .saturating_mul(drl_core::time::MILLISECOND);
            let (decision, held) = k.reserve(r.key, now, r.cost, ttl);
            let reservation = held.map_or(0, |h| {
                limit.reservations.open(h, now, server.max_reservations)
            });
            Outcome {
                reservation,
                ..Outcome::of(decision)
            }
        }
        Op::Settle(id) | Op::Release(id) => {
            let actual = if matches!(r.op, Op::Settle(_)) {
                r.cost
            } else {
                0
            };
            match limit.reservations.take(id, r.key) {
                Some(held) => {
                    let s = k.settle(held, now, actual);
                    let c = crate::reservations::Closed {
                        charged: s.charged,
                        refunded: s.refunded,
                        expired: s.expired,
                    };
                    limit
                        .reservations
                        .remember(id, r.key, c, server.max_reservations);
                    Outcome {
                        decision: s.decision,
                        reservation: 0,
                        charged: s.charged,
                        refunded: s.refunded,
                        expired: s.expired,
                    }
                }
                // Settled already (a retry): the same answer, nothing
                // applied.
                None => match limit.reservations.closed(id, r.key) {
                    Some(c) => Outcome {
                        decision: k.check(r.key, now, 0),
                        reservation: 0,
                        charged: c.charged,
                        refunded: c.refunded,
                        expired: c.expired,
                    },
                    None => Outcome {
                        charged: actual,
                        expired: true,
                        ..Outcome::of(if actual > 0 {
                            k.charge(r.key, now, actual)
                        } else {
                            k.check(r.key, now, 0)
                        })
                    },
                },
            }
        }
    }
}

/// True when `backend` serves check, reserve, settle and release: in
/// memory, or a store that implements them ([`drl_store::Store::settles`]:
/// Redis, Orbit, gossip).
fn settles(backend: &Backend) -> bool {
    match backend {
        Backend::Local(_) => true,
        Backend::Store(s) => s.settles(),
    }
}

/// Applies check `r` (any [`Op`]) on `limit`, in memory or in its store;
/// no metrics, no shadow mode. Check, reserve, settle and release need a
/// backend that settles (every scope's does) and are refused otherwise
/// ([`CheckError::Unsupported`], nothing decided); a store applies them as
/// [`crate::reservations::apply_store`] says.
pub async fn apply_raw(
    limit: &Limit,
    r: &CheckRequest<'_>,
    now: Nanos,
    server: &ServerConfig,
) -> Result<Outcome, CheckError> {
    match &limit.backend {
        Backend::Local(k) => Ok(apply_local(limit, k, r, now, server)),
        Backend::Store(s) => match r.op {
            Op::Take => decide_raw(limit, r.key, r.cost, now).await.map(Outcome::of),
            Op::Charge => charge_raw(limit, r.key, r.cost, now).await.map(Outcome::of),
            op if !s.settles() => Err(CheckError::Unsupported {
                index: 0,
                limit: limit.name.to_string(),
                mode: op_name(op),
                scope: format!("{:?}", limit.scope).to_lowercase(),
            }),
            _ => crate::reservations::apply_store(
                &limit.spec,
                &limit.reservations,
                s.as_ref(),
                r,
                now,
                server,
            )
            .await
            .map_err(|error| CheckError::Store {
                limit: limit.name.to_string(),
                error,
            }),
        },
    }
}

/// The name of `op` as the APIs spell its mode.
pub fn op_name(op: Op) -> &'static str {
    match op {
        Op::Take => "take",
        Op::Check => "check",
        Op::Charge => "charge",
        Op::Reserve => "reserve",
        Op::Settle(_) => "settle",
        Op::Release(_) => "release",
    }
}

/// Counts a decision and applies shadow mode.
#[inline]
pub fn finish(limit: &Limit, d: Decision) -> Decision {
    limit.metrics.record(d.allowed);
    apply_shadow(limit, d)
}

/// Shadow mode: a denial is counted as a shadow override and answered as
/// allowed.
#[inline]
pub fn apply_shadow(limit: &Limit, mut d: Decision) -> Decision {
    if limit.shadow && !d.allowed {
        limit.metrics.shadow_allowed();
        d.allowed = true;
        d.retry_after = Some(0);
        d.reason = None;
    }
    d
}

/// Decision counts of a run of checks on one limit; with the status page
/// on, the run's latency (from `start`, the batch's clock reading, to the
/// end of the run) too.
pub struct Tally<'a> {
    limit: Option<&'a Limit>,
    allowed: u64,
    denied: u64,
    start: Nanos,
}

impl<'a> Tally<'a> {
    /// An empty tally of a batch decided at `start`.
    pub fn new(start: Nanos) -> Self {
        Self {
            limit: None,
            allowed: 0,
            denied: 0,
            start,
        }
    }

    /// Counts decision `d` of `cost` for `key` on `limit` (the top-keys
    /// sketch too) and applies shadow mode: what the caller answers.
    #[inline]
    pub fn settle(&mut self, limit: &'a Limit, key: &str, cost: u64, d: Decision) -> Decision {
        self.add(limit, d.allowed);
        if let Some(s) = limit.metrics.status() {
            s.observe(key, cost, d.allowed);
        }
        apply_shadow(limit, d)
    }

    /// [`Tally::settle`] for the outcome `o` of check `r` on `limit`.
    #[inline]
    pub fn outcome(&mut self, limit: &'a Limit, r: &CheckRequest<'_>, mut o: Outcome) -> Outcome {
        o.decision = self.settle(limit, r.key, r.cost, o.decision);
        o
    }

    #[inline]
    fn add(&mut self, limit: &'a Limit, allowed: bool) {
        if !self.limit.is_some_and(|l| std::ptr::eq(l, limit)) {
            // A new run: the previous one ends now (read only if its
            // limit records latency).
            self.flush_with(|| SystemClock.now());
            self.limit = Some(limit);
        }
        if allowed {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
    }

    /// Records the last run, which ended at `end`.
    pub fn finish(mut self, end: Nanos) {
        self.flush_with(|| end);
    }

    #[inline]
    fn flush_with(&mut self, end: impl FnOnce() -> Nanos) {
        if let Some(l) = self.limit.take() {
            l.metrics.record_many(self.allowed, self.denied);
            if let Some(s) = l.metrics.status() {
                s.record_latency(end().saturating_sub(self.start));
            }
        }
        self.allowed = 0;
        self.denied = 0;
    }
}
