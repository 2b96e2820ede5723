//! [`Resilient`]: a failure policy around any [`Store`] (meant for Redis).
//!
//! Every decision gets a deadline (`timeout_ms` of the limit's
//! [`FailurePolicy`]). A store that errs or misses the deadline counts as a
//! failure; `failure_threshold` consecutive failures open a circuit breaker,
//! and while it is open requests do not touch the store at all (a dead Redis
//! costs a mutex and a clock read, not a timeout). After `open_ms` one
//! request probes the store (half-open): success closes the breaker,
//! failure re-opens it. The number of decisions in flight is bounded
//! (`max_in_flight`); beyond it requests fail over at once instead of
//! queueing. A failed-over request is decided by the limit's
//! `on_store_error`:
//!
//! - `deny`: denied (reason `over_limit`, `retry_after` = the breaker's
//!   open time);
//! - `allow`: admitted (`remaining` 0, so clients do not plan on more);
//! - `local`: decided by an in-process limiter at quota/N (limit and burst
//!   divided by `local_divisor`, at least 1), N being the number of drl
//!   nodes sharing the Redis, so that together they stay near the global
//!   quota until Redis answers again.
//!
//! Metrics (the `metrics` crate; names are stable): counters
//! `drl_store_errors_total{kind}`, `drl_store_timeouts_total`,
//! `drl_store_fallbacks_total{policy,cause}`,
//! `drl_store_breaker_transitions_total{to}`, and the gauge
//! `drl_store_breaker_state` (0 closed, 1 open, 2 half-open).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drl_core::{Decision, DenyReason, Quota};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::{Check, LimitSpec, MemoryStore, Store, StoreError};

/// What to do with a request the store could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnStoreError {
    /// Deny it (fail closed).
    Deny,
    /// Admit it (fail open).
    Allow,
    /// Decide it locally at quota/N (the default).
    #[default]
    Local,
}

impl OnStoreError {
    fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Deny => "deny",
            OnStoreError::Allow => "allow",
            OnStoreError::Local => "local",
        }
    }
}

/// The failure policy of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailurePolicy {
    /// Deadline of one decision in the store, in ms (default 5).
    pub timeout_ms: u64,
    /// What to do when the store fails (default `local`).
    pub on_store_error: OnStoreError,
    /// N for `local`: the local limiter enforces quota/N (default 1).
    pub local_divisor: u64,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self {
            timeout_ms: 5,
            on_store_error: OnStoreError::Local,
            local_divisor: 1,
        }
    }
}

impl FailurePolicy {
    /// The default policy with `on_store_error` set.
    pub fn on_error(on_store_error: OnStoreError) -> Self {
        Self {
            on_store_error,
            ..Self::default()
        }
    }
}

/// Circuit breaker and concurrency bound, shared by all limits of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (default 5).
    pub failure_threshold: u32,
    /// How long the breaker stays open before a probe, in ms (default 500).
    pub open_ms: u64,
    /// Most decisions in flight at once; more fail over at once
    /// (default 10000).
    pub max_in_flight: usize,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            open_ms: 500,
            max_in_flight: 10_000,
        }
    }
}

/// Everything [`Resilient`] needs: a default policy, per-limit overrides
/// (by limit name) and the breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResilienceConfig {
    /// The policy of limits without an override.
    pub default_policy: FailurePolicy,
    /// Per-limit policies, by limit name.
    pub limits: BTreeMap<String, FailurePolicy>,
    /// The breaker.
    pub breaker: BreakerConfig,
}

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests go to the store.
    Closed,
    /// The store is considered down: requests fail over without trying it.
    Open,
    /// One probe request is trying the store.
    HalfOpen,
}

impl BreakerState {
    fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug)]
struct BreakerInner {
    state: BreakerState,
    failures: u32,
    /// Open: when to let a probe through. Half-open: when the probe started.
    since: Instant,
}

#[derive(Debug)]
struct Breaker {
    cfg: BreakerConfig,
    inner: Mutex<BreakerInner>,
}

impl Breaker {
    fn new(cfg: BreakerConfig) -> Self {
        metrics::gauge!("drl_store_breaker_state").set(0.0);
        Self {
            cfg,
            inner: Mutex::new(BreakerInner {
                state: BreakerState::Closed,
                failures: 0,
                since: Instant::now(),
            }),
        }
    }

    fn open_for(&self) -> Duration {
        Duration::from_millis(self.cfg.open_ms)
    }

    fn set(inner: &mut BreakerInner, to: BreakerState) {
        if inner.state != to {
            inner.state = to;
            metrics::gauge!("drl_store_breaker_state").set(to.gauge());
            metrics::counter!("drl_store_breaker_transitions_total", "to" => to.as_str())
                .increment(1);
        }
    }

    /// May this request use the store?
    fn try_pass(&self) -> bool {
        let mut b = self.inner.lock();
        match b.state {
            BreakerState::Closed => true,
            BreakerState::Open => {
                if b.since.elapsed() >= self.open_for() {
                    Self::set(&mut b, BreakerState::HalfOpen);
                    b.since = Instant::now();
                    true
                } else {
                    false
                }
            }
            // A probe that never reported (its future was dropped) must not
            // wedge the breaker: allow another after `open_ms`.
            BreakerState::HalfOpen => {
                if b.since.elapsed() >= self.open_for() {
                    b.since = Instant::now();
                    true
                } else {
                    false
                }
            }
        }
    }

    fn success(&self) {
        let mut b = self.inner.lock();
        b.failures = 0;
        Self::set(&mut b, BreakerState::Closed);
    }

    fn failure(&self) {
        let mut b = self.inner.lock();
        b.failures = b.failures.saturating_add(1);
        let trip = b.state == BreakerState::HalfOpen || b.failures >= self.cfg.failure_threshold;
        if trip {
            Self::set(&mut b, BreakerState::Open);
            b.since = Instant::now();
        }
    }

    fn state(&self) -> BreakerState {
        self.inner.lock().state
    }
}

/// A [`Store`] with deadlines, a circuit breaker, bounded concurrency and a
/// per-limit failure policy (see the module docs).
#[derive(Debug)]
pub struct Resilient<S: Store> {
    inner: S,
    config: ResilienceConfig,
    breaker: Breaker,
    in_flight: Arc<Semaphore>,
    local: MemoryStore,
    local_specs: RwLock<HashMap<(LimitSpec, u64), Arc<LimitSpec>>>,
}

impl<S: Store> Resilient<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: ResilienceConfig) -> Self {
        Self {
            inner,
            breaker: Breaker::new(config.breaker),
            in_flight: Arc::new(Semaphore::new(config.breaker.max_in_flight.max(1))),
            config,
            local: MemoryStore::default(),
            local_specs: RwLock::new(HashMap::new()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The breaker's current state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The policy of the limit named `name`.
    pub fn policy(&self, name: &str) -> FailurePolicy {
        self.config
            .limits
            .get(name)
            .copied()
            .unwrap_or(self.config.default_policy)
    }

    /// The spec the local fallback enforces for `spec`: every quota's limit
    /// and burst divided by `n` (at least 1), same window.
    pub fn local_spec(spec: &LimitSpec, n: u64) -> LimitSpec {
        let n = n.max(1);
        let quotas = spec
            .quotas
            .iter()
            .map(|q| {
                Quota::with_burst((q.limit() / n).max(1), q.window(), (q.burst() / n).max(1))
                    .unwrap_or(*q)
            })
            .collect();
        LimitSpec {
            name: spec.name.clone(),
            algorithm: spec.algorithm,
            quotas,
        }
    }

    fn local_for(&self, spec: &LimitSpec, n: u64) -> Arc<LimitSpec> {
        let k = (spec.clone(), n);
        if let Some(s) = self.local_specs.read().get(&k) {
            return s.clone();
        }
        self.local_specs
            .write()
            .entry(k)
            .or_insert_with(|| Arc::new(Self::local_spec(spec, n)))
            .clone()
    }

    fn fail_over(&self, check: Check<'_>, policy: FailurePolicy, cause: &'static str) -> Decision {
        metrics::counter!(
            "drl_store_fallbacks_total",
            "policy" => policy.on_store_error.as_str(),
            "cause" => cause
        )
        .increment(1);
        let limit = check.spec.quotas.first().map_or(0, Quota::limit);
        match policy.on_store_error {
            OnStoreError::Deny => Decision {
                allowed: false,
                remaining: 0,
                limit,
                retry_after: Some(self.config.breaker.open_ms.saturating_mul(1_000_000)),
                reset_after: 0,
                delay: 0,
                reason: Some(DenyReason::OverLimit),
            },
            OnStoreError::Allow => Decision {
                allowed: true,
                remaining: 0,
                limit,
                retry_after: Some(0),
                reset_after: 0,
                delay: 0,
                reason: None,
            },
            OnStoreError::Local => {
                let spec = self.local_for(check.spec, policy.local_divisor);
                self.local.decide_now(Check {
                    spec: &spec,
                    ..check
                })
            }
        }
    }
}

#[async_trait]
impl<S: Store> Store for Resilient<S> {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let policy = self.policy(&check.spec.name);
        if !self.breaker.try_pass() {
            return Ok(self.fail_over(check, policy, "breaker_open"));
        }
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            metrics::counter!("drl_store_errors_total", "kind" => "overloaded").increment(1);
            return Ok(self.fail_over(check, policy, "overloaded"));
        };
        let deadline = Duration::from_millis(policy.timeout_ms.max(1));
        match tokio::time::timeout(deadline, self.inner.decide(check)).await {
            Ok(Ok(d)) => {
                self.breaker.success();
                Ok(d)
            }
            Ok(Err(StoreError::Invalid(why))) => Err(StoreError::Invalid(why)),
            Ok(Err(e)) => {
                let kind = match e {
                    StoreError::Timeout(_) => "timeout",
                    StoreError::Unavailable => "unavailable",
                    _ => "backend",
                };
                metrics::counter!("drl_store_errors_total", "kind" => kind).increment(1);
                self.breaker.failure();
                Ok(self.fail_over(check, policy, "error"))
            }
            Err(_) => {
                metrics::counter!("drl_store_timeouts_total").increment(1);
                self.breaker.failure();
                Ok(self.fail_over(check, policy, "timeout"))
            }
        }
    }

    async fn decide_many(&self, checks: &[Check<'_>]) -> Vec<Result<Decision, StoreError>> {
        futures::future::join_all(checks.iter().map(|c| self.decide(*c))).await
    }

    fn retain(&self, specs: &[LimitSpec]) {
        self.inner.retain(specs);
        self.local.retain(
            &specs
                .iter()
                .flat_map(|s| {
                    self.local_specs
                        .read()
                        .iter()
                        .filter(|((orig, _), _)| orig == s)
                        .map(|(_, l)| (**l).clone())
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>(),
        );
        self.local_specs
            .write()
            .retain(|(orig, _), _| specs.contains(orig));
    }
}
