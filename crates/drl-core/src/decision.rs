//! The answer a limiter gives: [`Decision`] (see `docs/semantics.md`).

use crate::time::Nanos;

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The quota is used up for now; waiting `retry_after` would admit it.
    OverLimit,
    /// The cost is larger than the quota can ever hold (`cost > burst`, or
    /// `cost > limit` for window algorithms): no wait admits it.
    CostExceedsCapacity,
}

impl DenyReason {
    /// A short stable name for logs, metrics and APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::OverLimit => "over_limit",
            DenyReason::CostExceedsCapacity => "cost_exceeds_capacity",
        }
    }
}

/// The outcome of one rate-limit check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request is admitted (and consumed its cost).
    pub allowed: bool,
    /// Whole permits a request right after this one could still take (floor).
    pub remaining: u64,
    /// The quota's `limit` (permits per window).
    pub limit: u64,
    /// Denied: the shortest wait after which the same request would be
    /// admitted if nothing else arrived; `None` when no wait ever admits it.
    /// Admitted: `Some(0)`.
    pub retry_after: Option<Nanos>,
    /// The wait until the state is back to fresh (full bucket, empty window,
    /// empty log, empty queue).
    pub reset_after: Nanos,
    /// The shaper (`leaky-queue`) only: how long an admitted request must be
    /// held before it is released. Zero for every other algorithm.
    pub delay: Nanos,
    /// `None` when admitted (or a query on a state within quota).
    pub reason: Option<DenyReason>,
}

impl Decision {
    /// Combines the decisions of several quotas checked together
    /// (all-or-nothing): allowed only if all allow; `retry_after` is the
    /// largest of the denying quotas' (`None` if any denial can never be
    /// admitted); `remaining` is the smallest of all; `reset_after` and
    /// `delay` the largest; `limit` the one of the quota with the smallest
    /// `remaining` (ties: the first).
    ///
    /// Returns `None` for an empty slice.
    pub fn combine(parts: &[Decision]) -> Option<Decision> {
        let first = *parts.first()?;
        let allowed = parts.iter().all(|d| d.allowed);
        let mut out = first;
        out.allowed = allowed;
        for d in &parts[1..] {
            if d.remaining < out.remaining {
                out.remaining = d.remaining;
                out.limit = d.limit;
            }
            out.reset_after = out.reset_after.max(d.reset_after);
            out.delay = out.delay.max(d.delay);
        }
        if allowed {
            out.retry_after = Some(0);
            out.reason = None;
        } else {
            let denials = parts.iter().filter(|d| !d.allowed);
            let mut retry = Some(0u64);
            let mut reason = DenyReason::OverLimit;
            for d in denials {
                match (retry, d.retry_after) {
                    (Some(a), Some(b)) => retry = Some(a.max(b)),
                    _ => retry = None,
                }
                if d.reason == Some(DenyReason::CostExceedsCapacity) {
                    reason = DenyReason::CostExceedsCapacity;
                }
            }
            out.retry_after = retry;
            out.reason = Some(reason);
            out.delay = 0;
        }
        Some(out)
    }
}
