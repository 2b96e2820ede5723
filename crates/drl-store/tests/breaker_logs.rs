//! A store going down is logged once (a warning when the breaker opens)
//! and its recovery once (when it closes), not per request.
//!
//! Its own test binary: tracing caches each log site's interest process
//! wide, and a site first reached by a test thread without a subscriber
//! could be cached as uninteresting while this test's scoped subscriber
//! waits for it (it failed that way beside the other breaker tests).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use drl_core::{Algorithm, Decision, Quota};
use drl_store::{
    BreakerConfig, BreakerState, Check, FailurePolicy, LimitSpec, MemoryStore, OnStoreError,
    ResilienceConfig, Resilient, Store, StoreError,
};

/// A memory store that fails while `down`.
#[derive(Default)]
struct Flaky {
    down: AtomicBool,
    mem: MemoryStore,
}

#[async_trait]
impl Store for Flaky {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Backend("down".into()));
        }
        self.mem.decide(check).await
    }
}

#[derive(Clone, Default)]
struct Buf(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn store_down_and_back_are_logged_once_each() {
    let buf = Buf::default();
    let sink = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let s = Resilient::new(
        Flaky::default(),
        ResilienceConfig {
            default_policy: FailurePolicy {
                timeout_ms: 20,
                on_store_error: OnStoreError::Deny,
                local_divisor: 1,
            },
            breaker: BreakerConfig {
                failure_threshold: 2,
                open_ms: 50,
                max_in_flight: 8,
            },
            ..ResilienceConfig::default()
        },
    );
    let spec = LimitSpec::new(
        "l",
        Algorithm::Gcra,
        vec![Quota::new(10, 3_600_000_000_000).unwrap()],
    );
    let check = |now| Check {
        spec: &spec,
        key: "k",
        cost: 1,
        now,
    };
    s.inner().down.store(true, Ordering::SeqCst);
    for now in 0..200 {
        assert!(!s.decide(check(now)).await.unwrap().allowed);
    }
    s.inner().down.store(false, Ordering::SeqCst);
    // Probe (on the paused clock: virtual time) until the breaker closes.
    let mut now = 200;
    while s.breaker_state() != BreakerState::Closed {
        assert!(now < 2_000, "breaker never closed");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = s.decide(check(now)).await;
        now += 1;
    }
    let log = String::from_utf8(buf.0.lock().clone()).unwrap();
    assert_eq!(log.matches("store unreachable").count(), 1, "{log}");
    assert_eq!(log.matches("store reachable again").count(), 1, "{log}");
    assert!(log.contains("WARN"), "{log}");
}
