//! Applying one operation to a limit's node: registration, the decision
//! it answers, and the bounded wait for a table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drl_cluster::orbit::{Admit, DenyReason as OrbitDeny, OrbitNode};
use drl_core::{Decision, DenyReason, Nanos};
use drl_store::{LimitSpec, StoreError};
use tokio::sync::Notify;

use super::{OrbitDecision, OrbitStore, limit_id};

impl OrbitStore {
    /// Applies `op` to the limit's node now (registering `spec` if needed):
    /// its answer as a decision, what else it returned, and what a bounded
    /// wait needs.
    pub(super) fn apply<T>(
        &self,
        spec: &LimitSpec,
        key: &str,
        op: impl FnOnce(&mut OrbitNode, Nanos) -> (Admit, T),
    ) -> Result<(OrbitDecision, T, Arc<Notify>, Nanos), StoreError> {
        let inner = &self.inner;
        let now = inner.now();
        let mut st = inner.state.lock();
        let id = limit_id(spec);
        if st.names.get(&spec.name) != Some(&id) {
            inner
                .register_locked(&mut st, spec, now)
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            inner.wake.notify_one();
        }
        let Some(l) = st.limits.get_mut(&id) else {
            return Err(StoreError::Invalid(format!(
                "orbit: limit {:?} not registered",
                spec.name
            )));
        };
        if key.len() > drl_cluster::orbit::MAX_KEY_LEN {
            return Err(StoreError::Invalid(format!(
                "orbit: key longer than {} bytes",
                drl_cluster::orbit::MAX_KEY_LEN
            )));
        }
        let (a, extra) = op(&mut l.node, now);
        let window = l.node.current_window();
        let reset_after = (window + 1)
            .saturating_mul(l.window_len)
            .saturating_sub(now);
        let (decision, reason) = match a {
            Admit::Allowed { remaining } => (
                Decision {
                    allowed: true,
                    remaining,
                    limit: l.cap,
                    retry_after: Some(0),
                    reset_after,
                    delay: 0,
                    reason: None,
                },
                None,
            ),
            Admit::Denied {
                reason,
                retry_after,
            } => (
                Decision {
                    allowed: false,
                    remaining: 0,
                    limit: l.cap,
                    retry_after,
                    reset_after,
                    delay: 0,
                    reason: Some(if reason == OrbitDeny::CostExceedsCap {
                        DenyReason::CostExceedsCapacity
                    } else {
                        DenyReason::OverLimit
                    }),
                },
                Some(reason),
            ),
        };
        Ok((
            OrbitDecision {
                decision,
                window,
                reason,
            },
            extra,
            l.notify.clone(),
            l.max_wait,
        ))
    }

    /// Applies `op` (a take, a check or a reserve) until it is admitted, or
    /// it is denied for a reason no table can change, or the limit's
    /// bounded wait is over: a key that holds too little or is in debt
    /// waits for a table to bring capacity, retrying whenever one arrives
    /// or the window changes.
    pub(super) async fn waiting<T>(
        &self,
        spec: &LimitSpec,
        key: &str,
        mut op: impl FnMut(&mut OrbitNode, Nanos) -> (Admit, T),
    ) -> Result<(OrbitDecision, T), StoreError> {
        let started = Instant::now();
        loop {
            let (d, extra, notify, max_wait) = self.apply(spec, key, &mut op)?;
            let waitable =
                matches!(d.reason, Some(OrbitDeny::Exhausted | OrbitDeny::InDebt)) && max_wait > 0;
            let left = Duration::from_nanos(max_wait).saturating_sub(started.elapsed());
            if !waitable || left.is_zero() {
                return Ok((d, extra));
            }
            let retry = Duration::from_nanos(d.decision.retry_after.unwrap_or(max_wait).max(1));
            let notified = notify.notified();
            // Either a table arrives / the window changes (notified), or
            // the retry hint or the bound passes.
            let _ = tokio::time::timeout(left.min(retry), notified).await;
        }
    }
}
