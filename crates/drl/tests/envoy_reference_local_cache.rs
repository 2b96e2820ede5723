//! envoyproxy/ratelimit's local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`,
//! drl's `server.envoy_local_cache_bytes`), ported to a real `drl serve` on
//! a real redis-server (`server.envoy_scope: redis`) over Envoy RLS v3:
//! - `TestOverLimitWithLocalCache` and `TestOverLimitWithLocalCacheShadowRule`
//!   (`test/redis/fixed_cache_impl_test.go`): every answer, the rule's
//!   stats (`over_limit_with_local_cache` included) and the cache's
//!   `hitCount`, `missCount`, `lookupCount`, `expiredCount` and
//!   `entryCount` after each step, read from `/metrics` as
//!   `ratelimit_localcache_*` (the reference's `ratelimit.localcache.*`
//!   gauges under statsd_exporter's default mapping).
//! - the local-cache run of `testBasicBaseConfig`
//!   (`test/integration/integration_test.go`, its `*_local` keys): a
//!   minute rule of 20 asked 25 times.
//!
//! The reference mocks the count its `INCRBY` returns; here a step's count
//! is made by the step's own `hits_addend`, so the rule's stats include
//! those hits (the cache's own counters are the reference's exactly). A
//! cache hit is proven to make no store round trip: the redis-server is
//! paused (SIGSTOP) while it is answered. A run whose answers show its
//! window turning is started again on a fresh server and store.

mod common;

use common::{Drl, http_get, metric};
use drl_test_kit::envoy::{descriptor, request};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// A window turned during the run.
#[derive(Debug)]
struct Rolled;

/// drl on a fresh redis-server with a 1,000-byte local cache (the
/// reference's integration size).
fn start(domains: &str) -> (common::Redis, Drl) {
    let redis = common::Redis::start();
    let drl = Drl::start(&format!(
        "server:
  envoy_scope: redis
  envoy_local_cache_bytes: 1000
  request_timeout_ms: 60000
redis:
  url: {}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}
{domains}",
        redis.url()
    ));
    (redis, drl)
}

/// One descriptor `entries` with `hits`: `(overall, code, remaining,
/// seconds until reset)`.
async fn ask(drl: &Drl, domain: &str, entries: &[(&str, &str)], hits: u64) -> (i32, i32, u32, i64) {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let mut req = request(domain, &[], 1);
    let mut d = descriptor(entries);
    d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
    req.descriptors = vec![d];
    let a: RateLimitResponse = c.should_rate_limit(req).await.unwrap().into_inner();
    let s = &a.statuses[0];
    let reset = s.duration_until_reset.as_ref().map_or(-1, |d| d.seconds);
    (a.overall_code, s.code, s.limit_remaining, reset)
}

/// `[total_hits, over_limit, over_limit_with_local_cache, near_limit,
/// within_limit, shadow_mode]` of the rule `domain.key1`.
fn stats(text: &str, domain: &str, key1: &str) -> [u64; 6] {
    let labels = format!(r#"domain="{domain}",key1="{key1}""#);
    [
        "total_hits",
        "over_limit",
        "over_limit_with_local_cache",
        "near_limit",
        "within_limit",
        "shadow_mode",
    ]
    .map(|n| {
        metric(
            text,
            &format!("ratelimit_service_rate_limit_{n}{{{labels}}}"),
        )
        .unwrap_or(0.0) as u64
    })
}

/// The cache's `[hitCount, missCount, lookupCount, expiredCount,
/// entryCount]`.
fn cache_stats(text: &str) -> [u64; 5] {
    [
        "hitCount",
        "missCount",
        "lookupCount",
        "expiredCount",
        "entryCount",
    ]
    .map(|n| {
        metric(text, &format!("ratelimit_localcache_{n}"))
            .unwrap_or_else(|| panic!("ratelimit_localcache_{n} in /metrics")) as u64
    })
}

fn metrics(drl: &Drl) -> String {
    http_get(&drl.url("/metrics")).unwrap().1
}

/// Watches `duration_until_reset`: it only shrinks within a window.
fn same_window(prev: &mut Option<i64>, reset: i64) -> Result<(), Rolled> {
    match *prev {
        Some(p) if reset > p => Err(Rolled),
        _ => {
            *prev = Some(reset);
            Ok(())
        }
    }
}

/// TestOverLimitWithLocalCache (`shadow`: ...ShadowRule): an hour rule of
/// 15 at 11, 13, then 16 (over: the key is cached), then answered from
/// the cache with the store paused.
async fn over_limit_with_local_cache(shadow: bool) -> Result<(), Rolled> {
    let (redis, drl) = start(&format!(
        "envoy:
  - domain: domain
    descriptors:
      - key: key4
        value: value4
        shadow_mode: {shadow}
        rate_limit: {{unit: hour, requests_per_unit: 15}}
"
    ));
    let kv: &[(&str, &str)] = &[("key4", "value4")];
    let over = if shadow { OK } else { OVER };
    let mut window = None;

    // Under the near-limit ratio: OK, 4 left; one lookup, a miss.
    let (code, s, left, reset) = ask(&drl, "domain", kv, 11).await;
    same_window(&mut window, reset)?;
    assert_eq!((code, s, left), (OK, OK, 4));
    let m = metrics(&drl);
    assert_eq!(stats(&m, "domain", "key4_value4"), [11, 0, 0, 0, 11, 0]);
    assert_eq!(cache_stats(&m), [0, 1, 1, 0, 0]);

    // At the near-limit ratio: still OK, 2 left.
    let (code, s, left, reset) = ask(&drl, "domain", kv, 2).await;
    same_window(&mut window, reset)?;
    assert_eq!((code, s, left), (OK, OK, 2));
    let m = metrics(&drl);
    assert_eq!(stats(&m, "domain", "key4_value4"), [13, 0, 0, 1, 13, 0]);
    assert_eq!(cache_stats(&m), [0, 2, 2, 0, 0]);

    // Over the limit in the store: OVER_LIMIT (OK in shadow mode), and
    // the key is cached (one entry). On Redis a call whose hits cross the
    // limit counts them all as over.
    let (code, s, left, reset) = ask(&drl, "domain", kv, 3).await;
    same_window(&mut window, reset)?;
    assert_eq!((code, s, left), (over, over, 0));
    let shadowed = if shadow { 3 } else { 0 };
    let m = metrics(&drl);
    assert_eq!(
        stats(&m, "domain", "key4_value4"),
        [16, 3, 0, 1, 13, shadowed]
    );
    assert_eq!(cache_stats(&m), [0, 3, 3, 0, 1]);

    // From the cache: no store round trip (the store is paused), the same
    // answer, counted over the limit with the local cache.
    redis.pause();
    let answered = ask(&drl, "domain", kv, 1).await;
    redis.resume();
    let (code, s, left, reset) = answered;
    same_window(&mut window, reset)?;
    assert_eq!((code, s, left), (over, over, 0));
    let shadowed = if shadow { 4 } else { 0 };
    let m = metrics(&drl);
    assert_eq!(
        stats(&m, "domain", "key4_value4"),
        [17, 4, 1, 1, 13, shadowed]
    );
    assert_eq!(cache_stats(&m), [1, 3, 4, 0, 1]);
    Ok(())
}

async fn until_one_window<F: std::future::Future<Output = Result<(), Rolled>>>(
    run: impl Fn() -> F,
) {
    for _ in 0..3 {
        if run().await.is_ok() {
            return;
        }
    }
    panic!("a window turned in each of 3 runs");
}

#[tokio::test]
async fn test_over_limit_with_local_cache() {
    until_one_window(|| over_limit_with_local_cache(false)).await;
}

#[tokio::test]
async fn test_over_limit_with_local_cache_shadow_rule() {
    until_one_window(|| over_limit_with_local_cache(true)).await;
}

/// testBasicBaseConfig with a local cache: `hello_local` has no rule (no
/// lookup); `key1_local` (50 a second) is one miss; `key2_local` (20 a
/// minute) asked 25 times: within, then over from the store once, then
/// over from the cache.
async fn basic_config_with_local_cache() -> Result<(), Rolled> {
    let (_redis, drl) = start(
        "envoy:
  - domain: basic
    descriptors:
      - key: key1_local
        rate_limit: {unit: second, requests_per_unit: 50}
  - domain: another
    descriptors:
      - key: key2_local
        rate_limit: {unit: minute, requests_per_unit: 20}
",
    );
    let (code, s, left, _) = ask(&drl, "foo", &[("hello_local", "world")], 1).await;
    assert_eq!((code, s, left), (OK, OK, 0));
    let m = metrics(&drl);
    assert_eq!(cache_stats(&m)[..2], [0, 0]);

    let (code, s, left, _) = ask(&drl, "basic", &[("key1_local", "foo")], 1).await;
    assert_eq!((code, s, left), (OK, OK, 49));
    let m = metrics(&drl);
    assert_eq!(stats(&m, "basic", "key1_local")[0], 1);
    assert_eq!(cache_stats(&m)[..2], [0, 1]);

    let mut window = None;
    for i in 0..25u64 {
        let (code, s, left, reset) = ask(&drl, "another", &[("key2_local", "7")], 1).await;
        same_window(&mut window, reset)?;
        let want = if i >= 20 {
            (OVER, OVER, 0)
        } else {
            (OK, OK, 19 - i as u32)
        };
        assert_eq!((code, s, left), want, "request {i}");
        let m = metrics(&drl);
        let [total, over, local, ..] = stats(&m, "another", "key2_local");
        assert_eq!(total, i + 1);
        assert_eq!(over, i.saturating_sub(19));
        assert_eq!(local, i.saturating_sub(20));
        let [hit, miss, ..] = cache_stats(&m);
        assert_eq!(hit, i.saturating_sub(20), "hitCount after request {i}");
        assert_eq!(miss, (i + 2).min(22), "missCount after request {i}");
    }
    Ok(())
}

#[tokio::test]
async fn test_basic_config_with_local_cache() {
    until_one_window(basic_config_with_local_cache).await;
}

/// Off by default, as in the reference: no cache, no `localcache` gauges,
/// and every over-limit answer comes from the store.
#[tokio::test]
async fn no_local_cache_by_default() {
    let redis = common::Redis::start();
    let drl = Drl::start(&format!(
        "server:
  envoy_scope: redis
redis:
  url: {}
envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {{unit: day, requests_per_unit: 1}}
",
        redis.url()
    ));
    for _ in 0..3 {
        ask(&drl, "d", &[("k", "v")], 1).await;
    }
    let m = metrics(&drl);
    assert!(!m.contains("ratelimit_localcache_hitCount"), "{m}");
    assert_eq!(stats(&m, "d", "k")[2], 0);
}
