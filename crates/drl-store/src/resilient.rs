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
//! **Charges** ([`Store::charge`], costs known afterwards) pass through the
//! same deadline, breaker and in-flight bound. A charge the store could
//! not take is never dropped as if it had been charged, and never answered
//! as a take: its answer is the failure policy's for a query (cost 0; with
//! `local`, the local limiter charged at quota/N), and the charge itself is
//! **kept and retried**: it waits in a bounded set of pending charges (at
//! most [`MAX_PENDING_CHARGES`] keys; charges of one key merge into one, at
//! the latest stamp) and is sent again after the next call the store
//! answers (up to [`FLUSH_PER_CALL`] per call), until it is charged. So a
//! charge counts at least once: one whose call timed out after Redis had
//! applied it may count twice (stricter, never laxer). Only a full set
//! drops a new key's charge (counted in `drl_store_charges_dropped_total`).
//!
//! **Checks and reserves** pass through the same deadline, breaker and
//! bound; a failed one is answered by the failure policy as a take would
//! be (a check with `local` checks the local limiter, writing nothing), and
//! a failed reserve holds no marks, so the service opens no reservation
//! for it. **A refund** the store could not take is dropped (counted in
//! `drl_store_refunds_dropped_total`): the reservation stays consumed at
//! its estimate, which is stricter, never more generous.
//!
//! Metrics (the `metrics` crate; names are stable): counters
//! `drl_store_errors_total{kind}`, `drl_store_timeouts_total`,
//! `drl_store_fallbacks_total{policy,cause}`,
//! `drl_store_breaker_transitions_total{to}`, and the gauge
//! `drl_store_breaker_state` (0 closed, 1 open, 2 half-open).

mod breaker;
mod pending;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// The breaker reads tokio's clock, not std's: the same instant outside a
// paused runtime, and the tests' virtual time inside one (`start_paused`),
// so that no breaker verdict in them depends on how fast the machine runs
// them (`breaker.rs`).

use async_trait::async_trait;
use drl_core::{Decision, DenyReason, Mark, Quota};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::{Check, LimitSpec, MemoryStore, Store, StoreError};
use breaker::Breaker;
pub use breaker::BreakerState;
use pending::PendingCharge;
pub use pending::{FLUSH_PER_CALL, MAX_PENDING_CHARGES};

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
    /// Answer the caller an error (gRPC `UNAVAILABLE`, HTTP 503): the
    /// caller's own failure mode decides, as envoyproxy/ratelimit leaves it
    /// to Envoy's `failure_mode_deny`.
    Error,
}

impl OnStoreError {
    fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Deny => "deny",
            OnStoreError::Allow => "allow",
            OnStoreError::Local => "local",
            OnStoreError::Error => "error",
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

/// Which call of the store a request makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Decide,
    Charge,
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
    /// Errors (timeouts and overload included), timeouts, fail-overs.
    counts: [AtomicU64; 3],
    /// Charges the store could not take, by (limit, key), to retry.
    pending: Mutex<HashMap<(LimitSpec, String), PendingCharge>>,
}

/// What a [`Resilient`] store has been through (for status pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResilientStats {
    /// The breaker's state now.
    pub breaker: BreakerState,
    /// Store errors since the start: failed calls, timeouts, and calls
    /// refused because `max_in_flight` were already running.
    pub errors: u64,
    /// Of those, timeouts.
    pub timeouts: u64,
    /// Decisions answered by the failure policy instead of the store.
    pub fail_overs: u64,
    /// Calls in flight now.
    pub in_flight: usize,
    /// `breaker.max_in_flight`.
    pub max_in_flight: usize,
}

const ERRORS: usize = 0;
const TIMEOUTS: usize = 1;
const FAIL_OVERS: usize = 2;

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
            counts: Default::default(),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// How many keys wait with a charge to retry.
    pub fn pending_charges(&self) -> usize {
        self.pending.lock().len()
    }

    /// Keeps a charge the store could not take, to retry (merged with the
    /// key's pending one); a new key beyond [`MAX_PENDING_CHARGES`] is
    /// dropped and counted.
    fn defer(&self, spec: &LimitSpec, key: &str, cost: u64, now: drl_core::Nanos) {
        if cost == 0 {
            return;
        }
        let mut pending = self.pending.lock();
        if let Some(p) = pending.get_mut(&(spec.clone(), key.to_string())) {
            p.cost = p.cost.saturating_add(cost);
            p.now = p.now.max(now);
            return;
        }
        if pending.len() >= MAX_PENDING_CHARGES {
            metrics::counter!("drl_store_charges_dropped_total").increment(1);
            tracing::warn!(
                limit = %spec.name,
                "a charge is dropped: {MAX_PENDING_CHARGES} keys already wait to be charged"
            );
            return;
        }
        pending.insert((spec.clone(), key.to_string()), PendingCharge { cost, now });
    }

    /// Retries up to [`FLUSH_PER_CALL`] pending charges (after a call the
    /// store answered); one that fails again goes back and ends the round.
    async fn flush(&self) {
        let batch: Vec<_> = {
            let mut pending = self.pending.lock();
            if pending.is_empty() {
                return;
            }
            let keys: Vec<_> = pending.keys().take(FLUSH_PER_CALL).cloned().collect();
            keys.into_iter()
                .filter_map(|k| pending.remove(&k).map(|p| (k, p)))
                .collect()
        };
        let mut failed = false;
        for ((spec, key), p) in batch {
            if !failed {
                let check = Check {
                    spec: &spec,
                    key: &key,
                    cost: p.cost,
                    now: p.now,
                };
                let deadline = Duration::from_millis(self.policy(&spec.name).timeout_ms.max(1));
                match tokio::time::timeout(deadline, self.inner.charge(check)).await {
                    Ok(Ok(_)) => continue,
                    // A charge the store refuses as invalid never succeeds.
                    Ok(Err(StoreError::Invalid(why))) => {
                        tracing::warn!(limit = %spec.name, "a pending charge is refused: {why}");
                        continue;
                    }
                    _ => {
                        self.breaker.failure();
                        failed = true;
                    }
                }
            }
            self.defer(&spec, &key, p.cost, p.now);
        }
    }

    /// Breaker state, error counts and calls in flight.
    pub fn stats(&self) -> ResilientStats {
        let max = self.config.breaker.max_in_flight.max(1);
        let get = |i: usize| self.counts[i].load(Ordering::Relaxed);
        ResilientStats {
            breaker: self.breaker_state(),
            errors: get(ERRORS),
            timeouts: get(TIMEOUTS),
            fail_overs: get(FAIL_OVERS),
            in_flight: max.saturating_sub(self.in_flight.available_permits()),
            max_in_flight: max,
        }
    }

    fn count(&self, i: usize) {
        self.counts[i].fetch_add(1, Ordering::Relaxed);
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

    /// Counts a call the failure policy answers.
    fn failed_over(&self, policy: FailurePolicy, cause: &'static str) {
        self.count(FAIL_OVERS);
        metrics::counter!(
            "drl_store_fallbacks_total",
            "policy" => policy.on_store_error.as_str(),
            "cause" => cause
        )
        .increment(1);
    }

    fn fail_over(
        &self,
        check: Check<'_>,
        policy: FailurePolicy,
        cause: &'static str,
    ) -> Result<Decision, StoreError> {
        self.failed_over(policy, cause);
        let limit = check.spec.quotas.first().map_or(0, Quota::limit);
        Ok(match policy.on_store_error {
            OnStoreError::Error => return Err(failure(cause, policy)),
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
        })
    }
}

/// The error `on_store_error: error` answers for a call that failed with
/// `cause` (see [`Resilient::run`]).
fn failure(cause: &'static str, policy: FailurePolicy) -> StoreError {
    match cause {
        "timeout" => StoreError::Timeout(policy.timeout_ms),
        "breaker_open" => StoreError::Unavailable,
        "overloaded" => StoreError::Backend("too many calls in flight".into()),
        _ => StoreError::Backend("the store answered an error".into()),
    }
}

impl<S: Store> Resilient<S> {
    /// The answer of the failure policy to a charge the store could not
    /// take (already deferred): the policy's answer to a query; `local`
    /// charges the local limiter.
    fn charge_fail_over(
        &self,
        check: Check<'_>,
        policy: FailurePolicy,
        cause: &'static str,
    ) -> Result<Decision, StoreError> {
        if policy.on_store_error == OnStoreError::Local {
            self.failed_over(policy, cause);
            let spec = self.local_for(check.spec, policy.local_divisor);
            let local = Check {
                spec: &spec,
                ..check
            };
            // `charge` of the memory store is synchronous in effect.
            if let Some(Ok(d)) = futures::FutureExt::now_or_never(self.local.charge(local)) {
                return Ok(d);
            }
            return Ok(self.local.decide_now(Check { cost: 0, ..local }));
        }
        self.fail_over(Check { cost: 0, ..check }, policy, cause)
    }

    /// `decide` or `charge` of the inner store under the deadline, the
    /// breaker and the in-flight bound; a failure is answered by the
    /// failure policy (and a charge kept to retry).
    async fn guarded(&self, check: Check<'_>, call: Call) -> Result<Decision, StoreError> {
        let policy = self.policy(&check.spec.name);
        let answer = self
            .run(&policy, || async {
                match call {
                    Call::Decide => self.inner.decide(check).await,
                    Call::Charge => self.inner.charge(check).await,
                }
            })
            .await;
        match answer {
            Ok(a) => a,
            Err(cause) => match call {
                Call::Decide => self.fail_over(check, policy, cause),
                Call::Charge => {
                    self.defer(check.spec, check.key, check.cost, check.now);
                    self.charge_fail_over(check, policy, cause)
                }
            },
        }
    }

    /// One call of the inner store (`call`, made only if the breaker and
    /// the in-flight bound let it through) under the deadline: its answer
    /// (an invalid request is the caller's error, not a failure), or the
    /// cause of a failure, counted, for the failure policy to answer.
    async fn run<T, F, Fut>(
        &self,
        policy: &FailurePolicy,
        call: F,
    ) -> Result<Result<T, StoreError>, &'static str>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        if !self.breaker.try_pass() {
            return Err("breaker_open");
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            metrics::counter!("drl_store_errors_total", "kind" => "overloaded").increment(1);
            self.count(ERRORS);
            return Err("overloaded");
        };
        let deadline = Duration::from_millis(policy.timeout_ms.max(1));
        let answer = tokio::time::timeout(deadline, call()).await;
        drop(permit);
        match answer {
            Ok(Ok(d)) => {
                self.breaker.success();
                self.flush().await;
                Ok(Ok(d))
            }
            Ok(Err(StoreError::Invalid(why))) => Ok(Err(StoreError::Invalid(why))),
            Ok(Err(e)) => {
                let kind = match e {
                    StoreError::Timeout(_) => "timeout",
                    StoreError::Unavailable => "unavailable",
                    _ => "backend",
                };
                metrics::counter!("drl_store_errors_total", "kind" => kind).increment(1);
                self.count(ERRORS);
                self.breaker.failure();
                Err("error")
            }
            Err(_) => {
                metrics::counter!("drl_store_timeouts_total").increment(1);
                self.count(ERRORS);
                self.count(TIMEOUTS);
                self.breaker.failure();
                Err("timeout")
            }
        }
    }

    /// The failure policy's answer to a check the store could not answer:
    /// its answer to a take, except that `local` checks the local limiter
    /// without writing.
    fn check_fail_over(
        &self,
        check: Check<'_>,
        policy: FailurePolicy,
        cause: &'static str,
    ) -> Result<Decision, StoreError> {
        if policy.on_store_error != OnStoreError::Local {
            return self.fail_over(check, policy, cause);
        }
        self.failed_over(policy, cause);
        let spec = self.local_for(check.spec, policy.local_divisor);
        Ok(self.local.check_now(Check {
            spec: &spec,
            ..check
        }))
    }
}

#[async_trait]
impl<S: Store> Store for Resilient<S> {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.guarded(check, Call::Decide).await
    }

    /// Charges through the breaker like `decide`; a charge the store could
    /// not take is answered by the failure policy (as a query) and kept to
    /// retry (see the module docs).
    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.guarded(check, Call::Charge).await
    }

    async fn decide_many(&self, checks: &[Check<'_>]) -> Vec<Result<Decision, StoreError>> {
        futures::future::join_all(checks.iter().map(|c| self.decide(*c))).await
    }

    fn settles(&self) -> bool {
        self.inner.settles()
    }

    /// Through the breaker like `decide`; a failure is answered by the
    /// failure policy as a take would be (`local`: the local limiter's
    /// check, which writes nothing).
    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let policy = self.policy(&check.spec.name);
        match self.run(&policy, || self.inner.check(check)).await {
            Ok(a) => a,
            Err(cause) => self.check_fail_over(check, policy, cause),
        }
    }

    /// Through the breaker like `decide`; a failure is answered by the
    /// failure policy as a take, with no marks: an admission the policy
    /// grants holds no reservation, so its settlement refunds nothing
    /// (stricter, never more generous).
    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        let policy = self.policy(&check.spec.name);
        match self.run(&policy, || self.inner.reserve(check)).await {
            Ok(a) => a,
            Err(cause) => self.fail_over(check, policy, cause).map(|d| (d, None)),
        }
    }

    /// Through the breaker like `decide`. A refund the store could not
    /// take is **dropped** (counted in `drl_store_refunds_dropped_total`):
    /// the reservation stays consumed at its estimate, which can only deny
    /// more, never admit more. The answer is then the failure policy's
    /// for a query, with 0 units given back.
    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        let policy = self.policy(&check.spec.name);
        match self.run(&policy, || self.inner.refund(check, marks)).await {
            Ok(a) => a,
            Err(cause) => {
                metrics::counter!("drl_store_refunds_dropped_total").increment(1);
                self.check_fail_over(Check { cost: 0, ..check }, policy, cause)
                    .map(|d| (d, 0))
            }
        }
    }

    fn retain(&self, specs: &[LimitSpec]) {
        self.inner.retain(specs);
        let mut local_specs = self.local_specs.write();
        local_specs.retain(|(orig, _), _| specs.contains(orig));
        let kept: Vec<LimitSpec> = local_specs.values().map(|l| (**l).clone()).collect();
        self.local.retain(&kept);
    }
}

#[cfg(test)]
mod tests;
