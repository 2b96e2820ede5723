//! Tests of [`super::Resilient`]: breaker, deadlines, failure policies,
//! pending charges, and the fail-over of checks, reserves and refunds.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use drl_core::Algorithm;

use super::*;
use tokio::time::Instant;

/// 0: answers like a memory store; 1: errs; 2: never answers; 3: invalid.
#[derive(Default)]
struct Fake {
    mode: AtomicU8,
    calls: AtomicU32,
    mem: MemoryStore,
    /// (key, cost, now) of every charge it took.
    charged: parking_lot::Mutex<Vec<(String, u64, u64)>>,
}

#[async_trait]
impl Store for Fake {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            0 => Ok(self.mem.decide_now(check)),
            1 => Err(StoreError::Backend("down".into())),
            2 => std::future::pending().await,
            _ => Err(StoreError::Invalid("bad".into())),
        }
    }

    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            0 => {
                self.charged
                    .lock()
                    .push((check.key.to_string(), check.cost, check.now));
                Ok(self.mem.decide_now(Check { cost: 0, ..check }))
            }
            1 => Err(StoreError::Backend("down".into())),
            2 => std::future::pending().await,
            _ => Err(StoreError::Invalid("bad".into())),
        }
    }

    fn settles(&self) -> bool {
        true
    }

    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            0 => Ok(self.mem.check_now(check)),
            1 => Err(StoreError::Backend("down".into())),
            2 => std::future::pending().await,
            _ => Err(StoreError::Invalid("bad".into())),
        }
    }

    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            0 => Ok(self.mem.reserve_now(check)),
            1 => Err(StoreError::Backend("down".into())),
            2 => std::future::pending().await,
            _ => Err(StoreError::Invalid("bad".into())),
        }
    }

    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode.load(Ordering::SeqCst) {
            0 => Ok((self.mem.refund_now(check, marks), check.cost)),
            1 => Err(StoreError::Backend("down".into())),
            2 => std::future::pending().await,
            _ => Err(StoreError::Invalid("bad".into())),
        }
    }
}

fn store(on: OnStoreError, n: u64) -> Resilient<Fake> {
    Resilient::new(
        Fake::default(),
        ResilienceConfig {
            default_policy: FailurePolicy {
                timeout_ms: 20,
                on_store_error: on,
                local_divisor: n,
            },
            breaker: BreakerConfig {
                failure_threshold: 2,
                open_ms: 50,
                max_in_flight: 8,
            },
            ..ResilienceConfig::default()
        },
    )
}

fn spec() -> LimitSpec {
    LimitSpec::new(
        "l",
        Algorithm::Gcra,
        vec![Quota::new(10, 3_600_000_000_000).unwrap()],
    )
}

async fn admitted(s: &Resilient<Fake>, spec: &LimitSpec, key: &str, n: u64) -> u64 {
    let mut ok = 0;
    for i in 0..n {
        let c = Check {
            spec,
            key,
            cost: 1,
            now: i,
        };
        ok += s.decide(c).await.unwrap().allowed as u64;
    }
    ok
}

/// Probes (one request at a time) until the breaker has closed again.
/// On the paused clock: each sleep advances virtual time only.
async fn probe_until_closed(s: &Resilient<Fake>, spec: &LimitSpec) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.breaker_state() != BreakerState::Closed {
        assert!(Instant::now() < deadline, "breaker never closed");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = admitted(s, spec, "probe", 1).await;
    }
}

/// On the paused clock: the 100 checks while open take no virtual
/// time, so none is a probe however slow the machine (on the wall
/// clock, a pause over `open_ms` (50 ms) let one through).
#[tokio::test(start_paused = true)]
async fn breaker_opens_fails_fast_then_probes_and_closes() {
    let s = store(OnStoreError::Deny, 1);
    let spec = spec();
    s.inner.mode.store(1, Ordering::SeqCst);
    assert_eq!(admitted(&s, &spec, "k", 2).await, 0);
    assert_eq!(s.breaker_state(), BreakerState::Open);
    let before = s.inner.calls.load(Ordering::SeqCst);
    assert_eq!(admitted(&s, &spec, "k", 100).await, 0);
    assert_eq!(
        s.inner.calls.load(Ordering::SeqCst),
        before,
        "open: store untouched"
    );
    s.inner.mode.store(0, Ordering::SeqCst);
    probe_until_closed(&s, &spec).await;
    assert_eq!(admitted(&s, &spec, "fresh", 12).await, 10);
}

#[tokio::test(start_paused = true)]
async fn failed_probe_reopens() {
    let s = store(OnStoreError::Allow, 1);
    let spec = spec();
    s.inner.mode.store(1, Ordering::SeqCst);
    assert_eq!(admitted(&s, &spec, "k", 2).await, 2, "allow policy admits");
    assert_eq!(s.breaker_state(), BreakerState::Open);
    tokio::time::sleep(Duration::from_millis(60)).await;
    let before = s.inner.calls.load(Ordering::SeqCst);
    admitted(&s, &spec, "k", 5).await;
    assert_eq!(
        s.inner.calls.load(Ordering::SeqCst),
        before + 1,
        "exactly one probe"
    );
    assert_eq!(s.breaker_state(), BreakerState::Open);
}

/// On the paused clock: the two hanging calls time out after exactly
/// their 20 ms each, and the breaker then answers without the store
/// (counted, not timed: a wall-clock bound failed on a loaded box).
#[tokio::test(start_paused = true)]
async fn hanging_store_times_out_and_local_enforces_quota_over_n() {
    let s = store(OnStoreError::Local, 3);
    let spec = spec();
    s.inner.mode.store(2, Ordering::SeqCst);
    let t = Instant::now();
    let ok = admitted(&s, &spec, "k", 12).await;
    assert_eq!(ok, 3, "10/h over 3 nodes: 3 locally");
    assert_eq!(t.elapsed(), Duration::from_millis(2 * 20));
    assert_eq!(
        s.inner.calls.load(Ordering::SeqCst),
        2,
        "two timeouts open the breaker; the other ten fail fast"
    );
    assert_eq!(Resilient::<Fake>::local_spec(&spec, 3).quotas[0].limit(), 3);
    assert_eq!(
        Resilient::<Fake>::local_spec(&spec, 100).quotas[0].limit(),
        1
    );
}

#[tokio::test]
async fn invalid_requests_are_errors_not_failures() {
    let s = store(OnStoreError::Allow, 1);
    let spec = spec();
    s.inner.mode.store(3, Ordering::SeqCst);
    for i in 0..5 {
        let c = Check {
            spec: &spec,
            key: "k",
            cost: 1,
            now: i,
        };
        assert!(matches!(s.decide(c).await, Err(StoreError::Invalid(_))));
    }
    assert_eq!(s.breaker_state(), BreakerState::Closed);
}

#[tokio::test]
async fn retain_drops_local_state_of_removed_limits() {
    let s = store(OnStoreError::Local, 1);
    let (a, b) = (
        spec(),
        LimitSpec::new("b", Algorithm::Gcra, vec![Quota::new(1, 1_000).unwrap()]),
    );
    s.inner.mode.store(1, Ordering::SeqCst);
    assert_eq!(admitted(&s, &a, "k", 12).await, 10);
    admitted(&s, &b, "k", 1).await;
    s.retain(std::slice::from_ref(&b));
    assert_eq!(s.local_specs.read().len(), 1);
    assert_eq!(admitted(&s, &a, "k", 12).await, 10, "a starts fresh");
}

/// A charge the store cannot take is answered by the failure policy as
/// a query (never admitted under `deny`), kept (merged per key), and
/// charged once the store answers again; one it refuses as invalid is
/// an error, not kept.
#[tokio::test(start_paused = true)]
async fn failed_charges_are_kept_and_retried() {
    let s = store(OnStoreError::Deny, 1);
    let spec = spec();
    let charge = |key: &'static str, cost, now| {
        let spec = spec.clone();
        let s = &s;
        async move {
            s.charge(Check {
                spec: &spec,
                key,
                cost,
                now,
            })
            .await
        }
    };
    s.inner.mode.store(1, Ordering::SeqCst);
    for (cost, now) in [(3, 10), (4, 20)] {
        let d = charge("k", cost, now).await.unwrap();
        assert!(
            !d.allowed,
            "a failed charge is never an admission under deny"
        );
    }
    charge("j", 1, 5).await.unwrap();
    // The breaker is open now: charges are kept without a call.
    let calls = s.inner.calls.load(Ordering::SeqCst);
    charge("k", 2, 15).await.unwrap();
    assert_eq!(s.inner.calls.load(Ordering::SeqCst), calls);
    assert_eq!(s.pending_charges(), 2);
    assert!(s.inner.charged.lock().is_empty());
    s.inner.mode.store(0, Ordering::SeqCst);
    probe_until_closed(&s, &spec).await;
    assert_eq!(s.pending_charges(), 0);
    let mut got = s.inner.charged.lock().clone();
    got.sort();
    assert_eq!(got, [("j".to_string(), 1, 5), ("k".to_string(), 9, 20)]);
    // Invalid: an error, nothing kept.
    s.inner.mode.store(3, Ordering::SeqCst);
    assert!(matches!(
        charge("k", 1, 30).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(s.pending_charges(), 0);
}

/// Checks, reserves and refunds go through the breaker: a check the
/// store cannot answer is the local limiter's check (no write), a
/// reserve the policy answers holds no marks, and a refund that cannot
/// reach the store is dropped (the estimate stays consumed).
#[tokio::test(start_paused = true)]
async fn reservations_fail_over_strictly() {
    let s = store(OnStoreError::Local, 1);
    let spec = spec();
    let c = |cost, now| Check {
        spec: &spec,
        key: "k",
        cost,
        now,
    };
    let (d, marks) = s.reserve(c(4, 1)).await.unwrap();
    let marks = marks.expect("admitted: marks");
    assert_eq!(d.remaining, 6);
    assert!(s.settles());
    s.inner.mode.store(1, Ordering::SeqCst);
    // The refund is dropped (0 given back); the answer is the local
    // limiter's query.
    let (q, back) = s.refund(c(3, 2), &marks).await.unwrap();
    assert!(q.allowed);
    assert_eq!(back, 0, "a dropped refund gives back nothing");
    // Checks fail over to the local limiter without writing: ten
    // checks of 10, then it still admits 10.
    for now in 3..13 {
        assert!(s.check(c(10, now)).await.unwrap().allowed);
    }
    // A reserve the policy admits holds no marks.
    let (d, marks) = s.reserve(c(1, 14)).await.unwrap();
    assert!(d.allowed);
    assert!(marks.is_none());
    s.inner.mode.store(0, Ordering::SeqCst);
    probe_until_closed(&s, &spec).await;
    // The store never saw the refund (3 back would leave 9): the
    // estimate of 4 stays consumed.
    let left = s.check(c(0, 20)).await.unwrap().remaining;
    assert_eq!(left, 6, "the refund was dropped");
    // Invalid: an error.
    s.inner.mode.store(3, Ordering::SeqCst);
    assert!(matches!(
        s.check(c(1, 21)).await,
        Err(StoreError::Invalid(_))
    ));
}

/// `on_store_error: error`: every kind of call the store fails answers
/// the caller an error (a deadline as `Timeout`, an open breaker as
/// `Unavailable`), never a decision; a failed charge is still kept to
/// retry.
#[tokio::test(start_paused = true)]
async fn the_error_policy_answers_errors() {
    let s = store(OnStoreError::Error, 1);
    let spec = spec();
    let c = |cost, now| Check {
        spec: &spec,
        key: "k",
        cost,
        now,
    };
    let (_, marks) = s.reserve(c(2, 1)).await.unwrap();
    let marks = marks.expect("admitted: marks");
    s.inner.mode.store(2, Ordering::SeqCst);
    assert!(matches!(
        s.decide(c(1, 2)).await,
        Err(StoreError::Timeout(20))
    ));
    s.inner.mode.store(1, Ordering::SeqCst);
    assert!(matches!(
        s.check(c(1, 3)).await,
        Err(StoreError::Backend(_))
    ));
    // Two failures opened the breaker: now refused at once.
    assert_eq!(s.breaker_state(), BreakerState::Open);
    assert!(matches!(
        s.decide(c(1, 4)).await,
        Err(StoreError::Unavailable)
    ));
    assert!(s.reserve(c(1, 5)).await.is_err());
    assert!(s.refund(c(1, 6), &marks).await.is_err());
    assert!(s.charge(c(3, 7)).await.is_err());
    s.inner.mode.store(0, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.breaker_state() != BreakerState::Closed {
        assert!(Instant::now() < deadline, "breaker never closed");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = s.decide(c(0, 8)).await;
    }
    assert!(
        s.inner
            .charged
            .lock()
            .iter()
            .any(|(k, cost, _)| k == "k" && *cost == 3),
        "the failed charge was retried"
    );
}
