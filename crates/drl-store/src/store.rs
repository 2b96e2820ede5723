//! The one async [`Store`] trait every scope's state sits behind, with
//! the check it decides and its error.

use async_trait::async_trait;
use drl_core::{Decision, Mark, Nanos};

use crate::spec::LimitSpec;

/// A store could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend did not answer within the configured timeout.
    #[error("store timed out after {0} ms")]
    Timeout(u64),
    /// The circuit breaker is open: the backend is considered down.
    #[error("store unavailable (circuit open)")]
    Unavailable,
    /// The backend answered with an error.
    #[error("store error: {0}")]
    Backend(String),
    /// The request itself is invalid for this store.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// One decision to make: `cost` for `key` under `spec`.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit (algorithm and quotas, all-or-nothing).
    pub spec: &'a LimitSpec,
    /// The limit key (e.g. a tenant id).
    pub key: &'a str,
    /// The cost; 0 is a query.
    pub cost: u64,
    /// The caller's clock. Stores configured to use their own clock (Redis
    /// `TIME`) ignore it.
    pub now: Nanos,
}

/// Where rate-limit state lives. Implementations decide exactly as
/// `docs/semantics.md` says (the same decisions as drl-core on the same trace).
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Decides one request (all quotas of `check.spec` all-or-nothing).
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError>;

    /// Decides several independent requests, answering in order. Backends
    /// that can (Redis) pipeline them in one round trip.
    async fn decide_many(&self, checks: &[Check<'_>]) -> Vec<Result<Decision, StoreError>> {
        let mut out = Vec::with_capacity(checks.len());
        for c in checks {
            out.push(self.decide(*c).await);
        }
        out
    }

    /// Charges `check.cost` whatever remains: the key may go into debt
    /// (docs/semantics.md, "Costs known afterwards"); the answer is a query
    /// right after. A store that cannot charge answers
    /// [`StoreError::Invalid`], never a silent take.
    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let _ = check;
        Err(StoreError::Invalid(
            "this store cannot charge costs known afterwards".into(),
        ))
    }

    /// True when this store implements [`Store::check`],
    /// [`Store::reserve`] and [`Store::refund`] (the default methods refuse
    /// them): callers can refuse those modes up front, before deciding
    /// anything.
    fn settles(&self) -> bool {
        false
    }

    /// What a take of `check.cost` would get, changing nothing (a *check*;
    /// docs/semantics.md, "Costs known afterwards"). A store that cannot
    /// answers [`StoreError::Invalid`].
    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let _ = check;
        Err(StoreError::Invalid(
            "this store cannot check without taking".into(),
        ))
    }

    /// Reserves the estimate `check.cost`: a take; when admitted, also the
    /// [`Mark`] of every quota (in the spec's order) that bounds a later
    /// [`Store::refund`], as drl-core's `MultiLimiter::reserve` computes
    /// them. A store that cannot answers [`StoreError::Invalid`].
    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        let _ = check;
        Err(StoreError::Invalid(
            "this store cannot reserve costs known afterwards".into(),
        ))
    }

    /// Gives back up to `check.cost` units of a reservation admitted with
    /// `marks` (as [`Store::reserve`] returned them), each quota on its
    /// own, as drl-core's `MultiLimiter::refund` does. Answers a query
    /// right after and the units given back: `check.cost` for drl-core's
    /// refund (each quota gives back at most that, only what of the
    /// reservation still holds it back), fewer where the store gives back
    /// less, 0 where it gave back nothing (a refund dropped, or one the
    /// scope cannot make); never more than it gave. A store that cannot
    /// answers [`StoreError::Invalid`].
    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        let _ = (check, marks);
        Err(StoreError::Invalid(
            "this store cannot refund reservations".into(),
        ))
    }

    /// The configuration changed: keep state for `specs` that are unchanged,
    /// drop state of limits that are gone or changed.
    fn retain(&self, _specs: &[LimitSpec]) {}
}
