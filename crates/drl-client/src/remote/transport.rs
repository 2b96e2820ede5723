//! What the remote backend asks of a wire protocol: send one batch of
//! [`Item`]s, answer their decisions; and decisions read from wire fields.

use std::future::Future;
use std::pin::Pin;

use drl_api::{Op, Outcome};
use drl_core::Decision;

/// One check on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) limit: String,
    pub(crate) key: String,
    pub(crate) cost: u64,
    /// What it does (take for [`crate::Client::check`]).
    pub(crate) op: Op,
}

/// Why a batch got no decisions.
#[derive(Debug, Clone)]
pub(crate) enum SendError {
    /// The service could not be reached or did not answer: the failure
    /// policy applies.
    Unavailable(String),
    /// The service refused the batch (bad limit, key, cost, token).
    Refused { not_found: bool, message: String },
}

/// Boxed future of one batch.
pub(crate) type SendFuture = Pin<Box<dyn Future<Output = Result<Vec<Outcome>, SendError>> + Send>>;

/// A wire protocol: sends one batch, answers its outcomes in order.
pub(crate) trait Transport: Send + Sync + 'static {
    fn send(&self, batch: Vec<Item>) -> SendFuture;
}

/// Milliseconds (as the APIs give them) to a decision's nanoseconds.
pub(crate) fn ms(v: u64) -> u64 {
    v.saturating_mul(1_000_000)
}

/// A decision from the wire fields.
pub(crate) fn decision(
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
    delay_ms: u64,
    reason: &str,
) -> Decision {
    Decision {
        allowed,
        remaining,
        limit,
        retry_after: if allowed {
            Some(0)
        } else {
            retry_after_ms.map(ms)
        },
        reset_after: ms(reset_after_ms),
        delay: ms(delay_ms),
        reason: match reason {
            "over_limit" => Some(drl_core::DenyReason::OverLimit),
            "cost_exceeds_capacity" => Some(drl_core::DenyReason::CostExceedsCapacity),
            _ if allowed => None,
            _ => Some(drl_core::DenyReason::OverLimit),
        },
    }
}
