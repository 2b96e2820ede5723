//! [`InProcess`]: limits decided in this process with drl-core, from the
//! same config file as `drl serve` (every limit as `scope: local`).

use std::path::Path;
use std::sync::Arc;

use drl_core::{Clock, Decision, KeyedConfig, KeyedLimiter, MultiLimiter, Nanos, SystemClock};
use http::HeaderValue;

use crate::Error;
use crate::config::{ClientConfig, Scope};

/// One limit, ready to decide.
#[derive(Debug)]
pub(crate) struct Limit {
    limiter: KeyedLimiter<String>,
    shadow: bool,
    /// The limit's `RateLimit-Policy` value (the layer adds it to every
    /// answer; built once here, so a check looks the limit up once).
    policy: HeaderValue,
}

impl Limit {
    /// The limit's `RateLimit-Policy` header value.
    #[inline]
    pub(crate) fn policy(&self) -> &HeaderValue {
        &self.policy
    }
}

/// The in-process backend: one drl-core keyed limiter per configured limit,
/// bounded by the limit's `max_keys` / `max_bytes`. No network, no task.
#[derive(Debug)]
pub struct InProcess {
    limits: foldhash::HashMap<String, Limit>,
    config: ClientConfig,
    clock: Arc<dyn ClockDebug>,
}

/// A [`Clock`] that can be shown in `Debug` output.
pub trait ClockDebug: Clock + std::fmt::Debug {}
impl<T: Clock + std::fmt::Debug> ClockDebug for T {}

impl InProcess {
    /// Limits from a config file (`drl serve --config`'s format). A limit
    /// with another scope than `local` is refused (its state lives in the
    /// server); see [`InProcess::from_config_any_scope`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::from_config(ClientConfig::load(path)?)
    }

    /// Limits from a config text; `source_name` names it in errors.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Self, Error> {
        Self::from_config(ClientConfig::parse(text, source_name)?)
    }

    /// Limits from a parsed config; only `scope: local` limits.
    pub fn from_config(config: ClientConfig) -> Result<Self, Error> {
        if let Some(l) = config.limits.iter().find(|l| l.scope != Scope::Local) {
            return Err(Error::Setup(format!(
                "limit {:?} has scope {:?}: its state lives in drl serve's store, so decide it remotely (Remote), or decide every limit in this process with from_config_any_scope",
                l.name, l.scope
            )));
        }
        Ok(Self::from_config_any_scope(config))
    }

    /// Limits from a parsed config, every scope decided in this process
    /// (one process's share of the traffic only).
    pub fn from_config_any_scope(config: ClientConfig) -> Self {
        let limits = config
            .limits
            .iter()
            .map(|l| {
                let keyed = KeyedConfig {
                    max_keys: l.max_keys,
                    max_bytes: l.max_bytes,
                    ..KeyedConfig::default()
                };
                let limiter =
                    KeyedLimiter::new(MultiLimiter::uniform(l.algorithm, &l.quotas), keyed);
                (
                    l.name.clone(),
                    Limit {
                        limiter,
                        shadow: l.shadow,
                        policy: drl_http::headers::policy(&l.name, &l.quotas),
                    },
                )
            })
            .collect();
        Self {
            limits,
            config,
            clock: Arc::new(SystemClock),
        }
    }

    /// Decides with `clock` instead of the system clock (tests, replay).
    pub fn with_clock(mut self, clock: Arc<dyn ClockDebug>) -> Self {
        self.clock = clock;
        self
    }

    /// The config the limits came from.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The time decisions use.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Checks a request as the server validates it: known limit, key
    /// length, cost bound.
    pub(crate) fn validate(&self, limit: &str, key: &str, cost: u64) -> Result<&Limit, Error> {
        self.validate_len(limit, key.len(), cost)
    }

    /// [`InProcess::validate`] of a key of `key_len` bytes.
    #[inline]
    pub(crate) fn validate_len(
        &self,
        limit: &str,
        key_len: usize,
        cost: u64,
    ) -> Result<&Limit, Error> {
        let Some(l) = self.limits.get(limit) else {
            return Err(Error::UnknownLimit {
                limit: limit.to_string(),
            });
        };
        if key_len > self.config.max_key_bytes {
            return Err(Error::Invalid(format!(
                "the key is {} bytes; at most {} (server.max_key_bytes)",
                key_len, self.config.max_key_bytes
            )));
        }
        if cost > self.config.max_cost {
            return Err(Error::Invalid(format!(
                "cost {cost} is larger than server.max_cost ({})",
                self.config.max_cost
            )));
        }
        Ok(l)
    }

    /// Reserves `cost` on a validated limit at `now` (shadow mode applied
    /// to the decision; a shadowed denial holds no reservation).
    pub(crate) fn reserve_at(
        &self,
        l: &Limit,
        key: &str,
        cost: u64,
        now: Nanos,
        ttl: std::time::Duration,
    ) -> (Decision, Option<drl_core::Reservation<String>>) {
        let ttl = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        let (d, r) = l.limiter.reserve(key, now, cost, ttl);
        (shadowed(l, d), r)
    }

    /// Charges `cost` on a validated limit at `now` (shadow mode applied).
    pub(crate) fn charge_at(&self, l: &Limit, key: &str, cost: u64, now: Nanos) -> Decision {
        shadowed(l, l.limiter.charge(key, now, cost))
    }

    /// Settles `r` on its limit at `now` with the `actual` cost.
    pub(crate) fn settle_at(
        &self,
        l: &Limit,
        r: drl_core::Reservation<String>,
        actual: u64,
        now: Nanos,
    ) -> drl_core::Settlement {
        let mut s = l.limiter.settle(r, now, actual);
        s.decision = shadowed(l, s.decision);
        s
    }

    /// Decides one validated check at `now` (shadow mode applied).
    pub(crate) fn decide_at(&self, l: &Limit, key: &str, cost: u64, now: Nanos) -> Decision {
        shadowed(l, l.limiter.decide(key, now, cost))
    }
}

/// `d` under `l`'s shadow mode: a denial answered as allowed.
fn shadowed(l: &Limit, mut d: Decision) -> Decision {
    if l.shadow && !d.allowed {
        d.allowed = true;
        d.retry_after = Some(0);
        d.reason = None;
    }
    d
}
