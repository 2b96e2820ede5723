//! Faults against a real `redis-server`: killed mid-load, paused (SIGSTOP),
//! restarted. Each failure policy does what it says, latency stays bounded,
//! nothing piles up, and decisions go back to Redis when it returns. A kill
//! and a pause case also run with the module engine.
//!
//! No verdict depends on how fast the machine runs the test: what waited
//! on the store and what did not is read from the store's own counts
//! ([`Resilient::stats`]: errors, timeouts, fail-overs), not from clocks;
//! the deadline is long enough that a live Redis on a loaded machine meets
//! it, and the breaker stays open long enough for everything the test
//! does while it is open. Latency bounds are hang guards.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::RedisServer;
use drl_core::{Algorithm, Quota};
use drl_store::{
    BreakerConfig, BreakerState, Check, Engine, FailurePolicy, LimitSpec, OnStoreError,
    RedisConfig, RedisStore, ResilienceConfig, Resilient, Store, TimeSource,
};

/// The policy's deadline: a live Redis meets it even on a loaded 2-core CI
/// box (at 25 ms it sometimes did not, and a live store's answer became
/// the policy's); still below the connection-level response timeout set
/// in [`resilient`], so a paused Redis is a timeout, not an error.
const TIMEOUT_MS: u64 = 3_000;
/// A hang guard on one decision: the deadline and then some.
const BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 10_000);
/// How long the breaker stays open: longer than anything a test does
/// while it is open, however slow the machine (at 100 ms a pause let a
/// probe through where the test counted none).
const OPEN_MS: u64 = 5_000;

fn spec(name: &str, q: &str) -> LimitSpec {
    LimitSpec::new(name, Algorithm::Gcra, vec![Quota::parse(q).unwrap()])
}

async fn resilient(
    server: &RedisServer,
    policy: FailurePolicy,
    breaker: BreakerConfig,
    engine: Engine,
) -> Resilient<RedisStore> {
    let mut cfg = RedisConfig::single(server.url());
    cfg.time = TimeSource::Caller;
    cfg.engine = engine;
    // Calls to a paused Redis stay in flight until it resumes (the
    // default 1 s would end them while the test runs).
    cfg.response_timeout_ms = 120_000;
    let store = RedisStore::connect(&cfg).await.unwrap();
    store.ping().await.unwrap();
    Resilient::new(
        store,
        ResilienceConfig {
            default_policy: FailurePolicy {
                timeout_ms: TIMEOUT_MS,
                ..policy
            },
            breaker,
            ..ResilienceConfig::default()
        },
    )
}

fn breaker() -> BreakerConfig {
    BreakerConfig {
        failure_threshold: 3,
        open_ms: OPEN_MS,
        max_in_flight: 1000,
    }
}

/// Admissions out of `n` sequential requests on a fresh key, each bounded.
async fn admitted(store: &Resilient<RedisStore>, spec: &LimitSpec, key: &str, n: u64) -> u64 {
    let mut ok = 0;
    for i in 0..n {
        let t = Instant::now();
        let d = store
            .decide(Check {
                spec,
                key,
                cost: 1,
                now: 1_000 + i,
            })
            .await
            .expect("the policy always answers");
        assert!(t.elapsed() < BOUND, "a decision took {:?}", t.elapsed());
        ok += d.allowed as u64;
    }
    ok
}

/// Waits until decisions are made by Redis again: a fresh key gets exactly
/// the global quota (10), which no failure policy would give (0, all, 5).
async fn wait_recovered(store: &Resilient<RedisStore>, tag: &str) {
    let s = spec(&format!("recovered-{tag}"), "10/h");
    let mut attempt = 0;
    common::wait_until_async(Duration::from_secs(60), "decisions back on Redis", || {
        attempt += 1;
        let key = format!("probe-{attempt}");
        let s = &s;
        async move {
            // Let the breaker probe and close first.
            let _ = store
                .decide(Check {
                    spec: s,
                    key: "poke",
                    cost: 0,
                    now: 1,
                })
                .await;
            store.breaker_state() == BreakerState::Closed
                && admitted(store, s, &key, 12).await == 10
        }
    })
    .await;
}

/// Background load on many keys; returns the worst latency seen.
fn load(
    store: Arc<Resilient<RedisStore>>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let s = spec("load", "1000000/s");
        let mut worst = Duration::ZERO;
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("k{}", i % 64);
            let t = Instant::now();
            store
                .decide(Check {
                    spec: &s,
                    key: &key,
                    cost: 1,
                    now: 1_000 + i,
                })
                .await
                .unwrap();
            worst = worst.max(t.elapsed());
            count.fetch_add(1, Ordering::Relaxed);
            i += 1;
            // An open breaker answers without awaiting anything: let the
            // other tasks (and the probe) run, as separate requests would.
            tokio::task::yield_now().await;
        }
        worst
    })
}

/// A server for `engine` (with the module loaded for `Engine::Module`; a
/// restart loads it again).
fn server_for(engine: Engine) -> RedisServer {
    match engine {
        Engine::Lua => RedisServer::start(),
        Engine::Module => RedisServer::start_module(),
    }
}

async fn killed_mid_load(policy: FailurePolicy, expect_after_kill: u64, engine: Engine) {
    let mut server = server_for(engine);
    let store = Arc::new(resilient(&server, policy, breaker(), engine).await);
    let tag = format!("{:?}", policy.on_store_error);
    let s = spec(&format!("before-{tag}"), "10/h");
    assert_eq!(
        admitted(&store, &s, "a", 12).await,
        10,
        "Redis decides while up"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| load(store.clone(), stop.clone(), count.clone()))
        .collect();
    common::wait_until_async(Duration::from_secs(30), "load running", || {
        let c = count.load(Ordering::Relaxed);
        async move { c > 200 }
    })
    .await;
    tokio::task::block_in_place(|| server.kill());
    let at_kill = count.load(Ordering::Relaxed);
    common::wait_until_async(
        Duration::from_secs(30),
        "load continuing after the kill",
        || {
            let c = count.load(Ordering::Relaxed);
            async move { c > at_kill + 500 }
        },
    )
    .await;
    assert_eq!(
        store.breaker_state(),
        BreakerState::Open,
        "a dead Redis opens the breaker"
    );

    // The policy decides, without the store: the breaker is open, and
    // nothing reaches the store (no error, no timeout) for 1,012
    // decisions (the load's included).
    // Calls sent before the breaker opened end first (with an error).
    common::wait_until_async(Duration::from_secs(30), "no call in flight", || {
        let n = store.stats().in_flight;
        async move { n == 0 }
    })
    .await;
    let before = store.stats();
    assert_eq!(before.breaker, BreakerState::Open, "{before:?}");
    let s = spec(&format!("during-{tag}"), "10/h");
    assert_eq!(
        admitted(&store, &s, "b", 12).await,
        expect_after_kill,
        "{tag} policy"
    );
    for i in 0..1000 {
        let _ = store
            .decide(Check {
                spec: &s,
                key: "c",
                cost: 1,
                now: i,
            })
            .await;
    }
    let after = store.stats();
    assert_eq!(after.breaker, BreakerState::Open, "{after:?}");
    assert_eq!(
        (after.errors, after.timeouts),
        (before.errors, before.timeouts),
        "an open breaker touches no store: {before:?} then {after:?}"
    );
    assert!(after.fail_overs >= before.fail_overs + 1012, "{after:?}");

    tokio::task::block_in_place(|| server.restart());
    wait_recovered(&store, &tag).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let worst = w.await.unwrap();
        assert!(worst < BOUND, "a decision under load hung: {worst:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_deny_denies() {
    killed_mid_load(FailurePolicy::on_error(OnStoreError::Deny), 0, Engine::Lua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_allow_allows() {
    killed_mid_load(
        FailurePolicy::on_error(OnStoreError::Allow),
        12,
        Engine::Lua,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_local_enforces_quota_over_n() {
    let policy = FailurePolicy {
        local_divisor: 2,
        ..FailurePolicy::on_error(OnStoreError::Local)
    };
    killed_mid_load(policy, 5, Engine::Lua).await;
}

/// The module engine behind the same policy and breaker: identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_local_enforces_quota_over_n_module() {
    let policy = FailurePolicy {
        local_divisor: 2,
        ..FailurePolicy::on_error(OnStoreError::Local)
    };
    killed_mid_load(policy, 5, Engine::Module).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_costs_a_timeout_then_microseconds() {
    paused_redis(Engine::Lua).await;
}

/// The module engine behind the same policy and breaker: identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_costs_a_timeout_then_microseconds_module() {
    paused_redis(Engine::Module).await;
}

async fn paused_redis(engine: Engine) {
    let server = server_for(engine);
    let store = resilient(
        &server,
        FailurePolicy::on_error(OnStoreError::Deny),
        breaker(),
        engine,
    )
    .await;
    let s = spec("paused", "10/h");
    assert_eq!(admitted(&store, &s, "a", 3).await, 3);
    assert_eq!(store.stats().fail_overs, 0, "Redis decided while up");
    server.pause();
    // The first requests wait for the deadline, then the breaker opens.
    let mut slow = 0;
    for i in 0..10 {
        let t = Instant::now();
        let d = store
            .decide(Check {
                spec: &s,
                key: "a",
                cost: 1,
                now: 100 + i,
            })
            .await
            .unwrap();
        assert!(!d.allowed, "deny policy");
        let e = t.elapsed();
        assert!(e < BOUND, "{e:?}");
        // Never early: a request that timed out waited the deadline.
        if e >= Duration::from_millis(TIMEOUT_MS) {
            slow += 1;
        }
    }
    let st = store.stats();
    assert_eq!(
        (st.timeouts, st.errors, st.fail_overs),
        (3, 3, 10),
        "exactly failure_threshold requests wait for the timeout"
    );
    assert!(slow >= 3, "and they waited it: {slow}");
    assert_eq!(store.breaker_state(), BreakerState::Open);
    for i in 0..1000 {
        store
            .decide(Check {
                spec: &s,
                key: "a",
                cost: 1,
                now: 200 + i,
            })
            .await
            .unwrap();
    }
    let after = store.stats();
    assert_eq!(
        (after.timeouts, after.errors, after.fail_overs),
        (3, 3, 1010),
        "an open breaker answers without waiting on the store"
    );
    server.resume();
    wait_recovered(&store, "paused").await;
    // State written before the pause is still there: "a" had 3 of 10. Of
    // the 3 requests that timed out, as many as the store keeps calls in
    // flight (its default `batch_in_flight`: 2 with Lua, 4 with the
    // module) had been sent: Redis ran them when it woke up, so they count
    // (the caller got the policy's answer). Any other was still queued
    // behind them when its caller gave up, so it was never sent.
    let in_flight = RedisConfig {
        engine,
        ..RedisConfig::default()
    }
    .in_flight();
    let sent = 3.min(in_flight as u64);
    assert_eq!(admitted(&store, &s, "a", 10).await, 10 - 3 - sent);
}

/// 100 concurrent decisions on a paused Redis with `max_in_flight: 4`: the
/// four that got a slot wait on Redis, the other 96 are answered by the
/// policy at once ("overloaded"), and nothing piles up. Told apart by the
/// store's counts, not by how long each took: the deadline is a hang guard
/// and the four complete on Redis once it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_is_bounded_nothing_piles_up() {
    let server = RedisServer::start();
    let policy = FailurePolicy {
        timeout_ms: 60_000,
        ..FailurePolicy::on_error(OnStoreError::Deny)
    };
    let mut cfg = RedisConfig::single(server.url());
    cfg.time = TimeSource::Caller;
    cfg.response_timeout_ms = 120_000;
    let store = Arc::new(Resilient::new(
        RedisStore::connect(&cfg).await.unwrap(),
        ResilienceConfig {
            default_policy: policy,
            breaker: BreakerConfig {
                failure_threshold: 1000,
                open_ms: 100,
                max_in_flight: 4,
            },
            ..ResilienceConfig::default()
        },
    ));
    store.inner().ping().await.unwrap();
    tokio::task::block_in_place(|| server.pause());
    let s = Arc::new(spec("pile", "10/h"));
    let mut tasks = Vec::new();
    for i in 0..100u64 {
        let store = store.clone();
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            store
                .decide(Check {
                    spec: &s,
                    key: "k",
                    cost: 1,
                    now: i,
                })
                .await
                .unwrap()
        }));
    }
    common::wait_until_async(Duration::from_secs(30), "96 answered by the policy", || {
        let st = store.stats();
        async move { st.fail_overs >= 96 }
    })
    .await;
    let st = store.stats();
    assert_eq!(
        (st.in_flight, st.fail_overs, st.errors, st.timeouts),
        (4, 96, 96, 0),
        "only 4 may wait on the paused Redis: {st:?}"
    );
    tokio::task::block_in_place(|| server.resume());
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap().allowed as u64;
    }
    let st = store.stats();
    assert_eq!(
        (allowed, st.in_flight, st.fail_overs, st.timeouts),
        (4, 0, 96, 0),
        "the 4 were decided by Redis once it resumed: {st:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_limit_policies_apply() {
    let mut server = RedisServer::start();
    let mut cfg = RedisConfig::single(server.url());
    cfg.time = TimeSource::Caller;
    let mut limits = std::collections::BTreeMap::new();
    limits.insert(
        "open".to_string(),
        FailurePolicy {
            timeout_ms: TIMEOUT_MS,
            ..FailurePolicy::on_error(OnStoreError::Allow)
        },
    );
    let store = Resilient::new(
        RedisStore::connect(&cfg).await.unwrap(),
        ResilienceConfig {
            default_policy: FailurePolicy {
                timeout_ms: TIMEOUT_MS,
                ..FailurePolicy::on_error(OnStoreError::Deny)
            },
            limits,
            breaker: breaker(),
        },
    );
    server.kill();
    assert_eq!(admitted(&store, &spec("open", "1/h"), "k", 5).await, 5);
    assert_eq!(admitted(&store, &spec("closed", "1/h"), "k", 5).await, 0);
    let yaml = "default_policy: {timeout_ms: 3, on_store_error: deny}\nlimits:\n  api: {on_store_error: local, local_divisor: 4}\nbreaker: {failure_threshold: 2}\n";
    let cfg: ResilienceConfig = serde_norway::from_str(yaml).unwrap();
    assert_eq!(cfg.limits["api"].local_divisor, 4);
    assert_eq!(cfg.limits["api"].timeout_ms, 5);
    assert_eq!(cfg.breaker.open_ms, 500);
    assert_eq!(cfg.default_policy.on_store_error, OnStoreError::Deny);
}
