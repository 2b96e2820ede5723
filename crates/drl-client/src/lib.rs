//! drl-client: rate limits from application code, decided in this process
//! or by a running `drl serve`, and a tower layer that puts them in front
//! of any HTTP service.
//!
//! One API, three backends: [`Client::check`] and [`Client::check_batch`]
//! return drl-core's [`Decision`], whether the client is
//!
//! - [`Client::in_process`]: the same config file as `drl serve`, decided
//!   in this process with drl-core (every limit `scope: local`), no network;
//! - [`RemoteBuilder::grpc`]: `drl serve`'s native gRPC API;
//! - [`RemoteBuilder::http`]: `drl serve`'s HTTP/JSON `POST /v1/check`.
//!
//! A remote client coalesces concurrent checks into batches (never waiting
//! for a batch to fill), bounds each check by a deadline and answers with
//! its [`FailurePolicy`] when the service cannot decide in time. A denial
//! cache ([`cache`]) answers a key denied with `retry_after` locally until
//! then.
//!
//! [`RateLimitLayer`] (tower, so axum too) maps each request to a limit,
//! key and cost ([`extract`] has helpers for a header, the peer address and
//! a path prefix); a denial answers 429 `application/problem+json` with
//! `Retry-After` and the IETF `RateLimit` / `RateLimit-Policy` headers,
//! exactly as `drl serve`'s forward-auth (the code is shared: drl-http).
//!
//! ```no_run
//! # async fn demo() -> Result<(), drl_client::Error> {
//! use drl_client::{Client, InProcess, RemoteBuilder, FailurePolicy};
//! let local = Client::in_process(InProcess::from_file("drl.yaml")?);
//! let d = local.check("api", "tenant-7", 1).await?;
//! let remote = RemoteBuilder::grpc("http://127.0.0.1:8081")
//!     .on_failure(FailurePolicy::Deny)
//!     .build()?;
//! let d2 = remote.check("api", "tenant-7", 1).await?;
//! # let _ = (d, d2); Ok(()) }
//! ```

pub mod cache;
pub mod config;
pub mod extract;
pub mod in_process;
pub mod layer;
pub mod policy;
pub mod remote;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use cache::{CacheConfig, DenialCache};
pub use config::{ClientConfig, ConfigError};
pub use drl_core::Decision;
pub use in_process::InProcess;
pub use layer::{RateLimit, RateLimitLayer, Target};
pub use policy::FailurePolicy;
pub use remote::{Protocol, RemoteBuilder};

use drl_core::{Clock, Nanos, SystemClock};
use http::HeaderValue;

use crate::remote::{Item, Remote, SendError};

/// What went wrong with a check (a service that cannot be reached is not
/// an error: the failure policy answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No limit of that name is configured.
    #[error("unknown limit {limit:?}")]
    UnknownLimit {
        /// The name asked for.
        limit: String,
    },
    /// The check is invalid (key too long, cost too large).
    #[error("invalid check: {0}")]
    Invalid(String),
    /// The service refused the check (unknown limit, bad key or cost, no
    /// token).
    #[error("drl refused the check: {0}")]
    Refused(String),
    /// A config file error (with line and column).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A setting that cannot work (bad endpoint, policy without config).
    #[error("{0}")]
    Setup(String),
}

/// One check of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The configured limit's name.
    pub limit: String,
    /// The key within the limit (a tenant, an API key, an address).
    pub key: String,
    /// The cost (1 for one request; 0 only queries).
    pub cost: u64,
}

impl Check {
    /// A check of `cost` on `limit` for `key`.
    pub fn new(limit: impl Into<String>, key: impl Into<String>, cost: u64) -> Self {
        Self {
            limit: limit.into(),
            key: key.into(),
            cost,
        }
    }
}

/// Counters of a client, for tests and dashboards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Checks answered from the denial cache.
    pub cache_hits: u64,
    /// Checks answered by the failure policy.
    pub fallbacks: u64,
    /// Requests sent to the service (remote only).
    pub requests: u64,
    /// Checks sent to the service (remote only); `checks_sent / requests`
    /// is the mean batch size.
    pub checks_sent: u64,
}

enum Backend {
    InProcess(InProcess),
    Remote(Remote),
}

struct Inner {
    backend: Backend,
    cache: Option<DenialCache>,
    clock: Arc<dyn Clock>,
    policies: foldhash::HashMap<String, HeaderValue>,
    cache_hits: AtomicU64,
    fallbacks: AtomicU64,
}

/// A rate-limit client: cheap to clone, shareable across tasks.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
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

    fn from_remote(b: RemoteBuilder) -> Result<Self, Error> {
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

    fn decide_local(
        &self,
        b: &InProcess,
        l: &in_process::Limit,
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
        rx: tokio::sync::oneshot::Receiver<Result<Decision, SendError>>,
    ) -> Result<Decision, Error> {
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(d))) => {
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

    /// The failure policy's answer to a check the service could not decide.
    fn fall_back(&self, r: &Remote, limit: &str, key: &str, cost: u64, why: &str) -> Decision {
        tracing::debug!(limit, why, policy = %r.fallback.policy(), "drl did not decide: the failure policy answers");
        self.inner.fallbacks.fetch_add(1, Ordering::Relaxed);
        r.fallback.decide(limit, key, cost, self.inner.clock.now())
    }
}
