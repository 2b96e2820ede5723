//! The circuit breaker of [`super::Resilient`]: closed, open for a while
//! after consecutive failures, then one half-open probe.

use std::time::Duration;

// Tokio's clock, not std's (see the parent module).
use tokio::time::Instant;

use parking_lot::Mutex;

use super::BreakerConfig;

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
    pub(super) fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
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
    /// When the breaker last opened from closed (for the recovery log).
    down_since: Option<Instant>,
}

#[derive(Debug)]
pub(super) struct Breaker {
    cfg: BreakerConfig,
    inner: Mutex<BreakerInner>,
}

impl Breaker {
    pub(super) fn new(cfg: BreakerConfig) -> Self {
        metrics::gauge!("drl_store_breaker_state").set(0.0);
        Self {
            cfg,
            inner: Mutex::new(BreakerInner {
                state: BreakerState::Closed,
                failures: 0,
                since: Instant::now(),
                down_since: None,
            }),
        }
    }

    fn open_for(&self) -> Duration {
        Duration::from_millis(self.cfg.open_ms)
    }

    fn set(inner: &mut BreakerInner, to: BreakerState) {
        if inner.state != to {
            // Logged on transitions only: a store that stays down is one
            // warning, not one per request.
            match (inner.state, to) {
                (BreakerState::Closed, BreakerState::Open) => {
                    inner.down_since = Some(Instant::now());
                    tracing::warn!(
                        failures = inner.failures,
                        "store unreachable: circuit breaker open; requests follow the limit's on_store_error policy until a probe succeeds"
                    );
                }
                (_, BreakerState::Closed) => {
                    let down_ms = inner
                        .down_since
                        .take()
                        .map_or(0, |t| t.elapsed().as_millis() as u64);
                    tracing::info!(down_ms, "store reachable again: circuit breaker closed");
                }
                (_, BreakerState::HalfOpen) => tracing::debug!("store probe: breaker half-open"),
                (_, BreakerState::Open) => {
                    tracing::debug!("store probe failed: breaker open again")
                }
            }
            inner.state = to;
            metrics::gauge!("drl_store_breaker_state").set(to.gauge());
            metrics::counter!("drl_store_breaker_transitions_total", "to" => to.as_str())
                .increment(1);
        }
    }

    /// May this request use the store?
    pub(super) fn try_pass(&self) -> bool {
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

    pub(super) fn success(&self) {
        let mut b = self.inner.lock();
        b.failures = 0;
        Self::set(&mut b, BreakerState::Closed);
    }

    pub(super) fn failure(&self) {
        let mut b = self.inner.lock();
        b.failures = b.failures.saturating_add(1);
        let trip = b.state == BreakerState::HalfOpen || b.failures >= self.cfg.failure_threshold;
        if trip {
            Self::set(&mut b, BreakerState::Open);
            b.since = Instant::now();
        }
    }

    pub(super) fn state(&self) -> BreakerState {
        self.inner.lock().state
    }
}
