//! [`Client`]: one API over three backends (in process, gRPC, HTTP), with
//! the denial cache and the failure policy in front.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use drl_core::{Clock, Decision, Nanos, SystemClock};
use http::HeaderValue;

use crate::cache::{CacheConfig, DenialCache};
use crate::check::{Check, Stats};
use crate::config::ClientConfig;
use crate::error::Error;
use crate::in_process::InProcess;
use crate::remote::{Item, Remote, RemoteBuilder, SendError};

pub(crate) enum Backend {
    InProcess(InProcess),
    Remote(Remote),
}

pub(crate) struct Inner {
    pub(crate) backend: Backend,
    cache: Option<DenialCache>,
    clock: Arc<dyn Clock>,
    policies: foldhash::HashMap<String, HeaderValue>,
    cache_hits: AtomicU64,
    fallbacks: AtomicU64,
}

/// A rate-limit client: cheap to clone, shareable across tasks.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Client");
        match &self.inner.backend {
            Backend::InProcess(b) => d.field("in_process", b),
            Backend::Remote(r) => d.field("remote", r),
        };
        d.field("denial_cache", &self.inner.cache.is_some())
            .finish()
    }
}

fn policies(config: Option<&ClientConfig>) -> foldhash::HashMap<String, HeaderValue> {
    config
        .map(|c| {
            c.limits
                .iter()
                .map(|l| {
                    (
                        l.name.clone(),
                        drl_http::headers::policy(&l.name, &l.quotas),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Client {
    /// A client deciding in this process. The denial cache is off (an
    /// in-process decision costs as little as a cache lookup); turn it on
    /// with [`Client::in_process_cached`].
    pub fn in_process(backend: InProcess) -> Self {
        Self::in_process_with(backend, None)
    }

    /// A client deciding in this process, with a denial cache.
    pub fn in_process_cached(backend: InProcess, cache: CacheConfig) -> Self {
        Self::in_process_with(backend, Some(cache))
    }

    fn in_process_with(backend: InProcess, cache: Option<CacheConfig>) -> Self {
        let policies = policies(Some(backend.config()));
        // The in-process backend reads its own clock (decide_local).
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Self {
            inner: Arc::new(Inner {
                backend: Backend::InProcess(backend),
                cache: cache.map(DenialCache::new),
                clock,
                policies,
                cache_hits: AtomicU64::new(0),
                fallbacks: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn from_remote(b: RemoteBuilder) -> Result<Self, Error> {
        let remote = Remote::start(&b)?;
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Backend::Remote(remote),
                cache: b.cache.map(DenialCache::new),
                clock: Arc::new(SystemClock),
                policies: policies(b.config.as_ref()),
                cache_hits: AtomicU64::new(0),
                fallbacks: AtomicU64::new(0),
            }),
        })
    }

    /// Decides one check of `cost` on `limit` for `key`.
    pub async fn check(&self, limit: &str, key: &str, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        match &inner.backend {
            Backend::InProcess(b) => {
                let l = b.validate(limit, key, cost)?;
                Ok(self.decide_local(b, l, limit, key, cost))
            }
            Backend::Remote(r) => {
                let now = inner.clock.now();
                if let Some(d) = self.cached(limit, key, cost, now) {
                    return Ok(d);
                }
                let rx = r.enqueue(Item {
                    limit: limit.to_string(),
                    key: key.to_string(),
                    cost,
                    op: drl_api::Op::Take,
                });
                let deadline = tokio::time::Instant::now() + r.deadline;
                self.answer(r, limit, key, cost, now, deadline, rx).await
            }
        }
    }

    /// Decides several independent checks, answered in order. In process,
    /// the batch is validated first (an invalid check decides nothing);
    /// remotely, each check is queued on its own (they usually share one
    /// request) and fails or falls back on its own.
    pub async fn check_batch(&self, checks: &[Check]) -> Result<Vec<Decision>, Error> {
        let inner = &*self.inner;
        match &inner.backend {
            Backend::InProcess(b) => {
                let limits = checks
                    .iter()
                    .map(|c| b.validate(&c.limit, &c.key, c.cost))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(checks
                    .iter()
                    .zip(limits)
                    .map(|(c, l)| self.decide_local(b, l, &c.limit, &c.key, c.cost))
                    .collect())
            }
            Backend::Remote(r) => {
                let now = inner.clock.now();
                let deadline = tokio::time::Instant::now() + r.deadline;
                let mut waits = Vec::with_capacity(checks.len());
                for c in checks {
                    match self.cached(&c.limit, &c.key, c.cost, now) {
                        Some(d) => waits.push(Err(d)),
                        None => waits.push(Ok(r.enqueue(Item {
                            limit: c.limit.clone(),
                            key: c.key.clone(),
                            cost: c.cost,
                            op: drl_api::Op::Take,
                        }))),
                    }
                }
                let mut out = Vec::with_capacity(checks.len());
                for (c, w) in checks.iter().zip(waits) {
                    out.push(match w {
                        Err(d) => d,
                        Ok(rx) => {
                            self.answer(r, &c.limit, &c.key, c.cost, now, deadline, rx)
                                .await?
                        }
                    });
                }
                Ok(out)
            }
        }
    }

    /// The `RateLimit-Policy` header of `limit`: from the config when the
    /// client has it (always in process), else from the decision's quota
    /// (`"api";q=100`, no window).
    pub fn policy_header(&self, limit: &str, d: &Decision) -> HeaderValue {
        match self.inner.policies.get(limit) {
            Some(p) => p.clone(),
            None => drl_http::headers::policy_of_decision(limit, d),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        let inner = &*self.inner;
        let (requests, checks_sent) = match &inner.backend {
            Backend::Remote(r) => (
                r.counters.requests.load(Ordering::Relaxed),
                r.counters.checks_sent.load(Ordering::Relaxed),
            ),
            Backend::InProcess(_) => (0, 0),
        };
        Stats {
            cache_hits: inner.cache_hits.load(Ordering::Relaxed),
            fallbacks: inner.fallbacks.load(Ordering::Relaxed),
            requests,
            checks_sent,
        }
    }

    /// The denial cache's answer, counted.
    fn cached(&self, limit: &str, key: &str, cost: u64, now: Nanos) -> Option<Decision> {
        let d = self.inner.cache.as_ref()?.lookup(limit, key, cost, now)?;
        self.inner.cache_hits.fetch_add(1, Ordering::Relaxed);
        Some(d)
    }

    pub(crate) fn decide_local(
        &self,
        b: &InProcess,
        l: &crate::in_process::Limit,
        limit: &str,
        key: &str,
        cost: u64,
    ) -> Decision {
        let Some(cache) = &self.inner.cache else {
            return b.decide_at(l, key, cost, b.now());
        };
        let now = b.now();
        if let Some(d) = self.cached(limit, key, cost, now) {
            return d;
        }
        let d = b.decide_at(l, key, cost, now);
        cache.insert(limit, key, cost, &d, now);
        d
    }

    /// Waits for a queued check's answer until `deadline`; the failure
    /// policy answers a check the service could not decide.
    #[allow(clippy::too_many_arguments)]
    async fn answer(
        &self,
        r: &Remote,
        limit: &str,
        key: &str,
        cost: u64,
        sent_at: Nanos,
        deadline: tokio::time::Instant,
        rx: tokio::sync::oneshot::Receiver<Result<drl_api::Outcome, SendError>>,
    ) -> Result<Decision, Error> {
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(o))) => {
                let d = o.decision;
                if let Some(c) = &self.inner.cache {
                    // Counted from when the check was sent: the service
                    // decided it no earlier, so the entry never outlives
                    // the service's own denial.
                    c.insert(limit, key, cost, &d, sent_at);
                }
                Ok(d)
            }
            Ok(Ok(Err(SendError::Refused { not_found, message }))) => Err(if not_found {
                Error::UnknownLimit {
                    limit: limit.to_string(),
                }
            } else {
                Error::Refused(message)
            }),
            Ok(Ok(Err(SendError::Unavailable(why)))) => {
                Ok(self.fall_back(r, limit, key, cost, &why))
            }
            Ok(Err(_)) => Ok(self.fall_back(r, limit, key, cost, "the coalescing task is gone")),
            Err(_) => Ok(self.fall_back(r, limit, key, cost, "no answer within the deadline")),
        }
    }

    /// [`Client::fall_back`], for the reservation calls.
    pub(crate) fn fall_back_decision(
        &self,
        r: &Remote,
        limit: &str,
        key: &str,
        cost: u64,
        why: &str,
    ) -> Decision {
        self.fall_back(r, limit, key, cost, why)
    }

    /// The failure policy's answer to a check the service could not decide.
    fn fall_back(&self, r: &Remote, limit: &str, key: &str, cost: u64, why: &str) -> Decision {
        tracing::debug!(limit, why, policy = %r.fallback.policy(), "drl did not decide: the failure policy answers");
        self.inner.fallbacks.fetch_add(1, Ordering::Relaxed);
        r.fallback.decide(limit, key, cost, self.inner.clock.now())
    }
}
