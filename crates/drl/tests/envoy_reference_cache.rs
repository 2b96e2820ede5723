//! envoyproxy/ratelimit's cache test `TestRedis`
//! (`test/redis/fixed_cache_impl_test.go`), ported to a real `drl serve`
//! over Envoy RLS v3, in memory and on a real redis-server
//! (`server.envoy_scope: redis`). The reference mocks the count its
//! `INCRBY` returns; here a step's earlier count is made by the same
//! request's first descriptors (per-descriptor `hits_addend`), so every
//! descriptor of a step is decided at the same instant and no window can
//! turn in between. The per-rule stats are read from `/metrics` under the
//! reference's Prometheus names; they include the hits that made the
//! earlier count.
//!
//! Elsewhere: TestOverLimitWithLocalCache and
//! TestOverLimitWithLocalCacheShadowRule in
//! `envoy_reference_local_cache.rs`; TestRedisWithJitter in drl-store's
//! `tests/redis_jitter.rs`; TestNearLimit in drl-service's `envoy_stats`
//! unit tests and `envoy_reference_service.rs`; TestRedisTracer in
//! `envoy_reference_tracing.rs`.

mod common;

use common::{Drl, http_get, metric};
use drl_test_kit::envoy::{descriptor, request};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const DOMAIN: &str = "envoy:
  - domain: domain
    descriptors:
      - key: key
        value: value
        rate_limit: {unit: second, requests_per_unit: 10}
      - key: key2
        value: value2
        descriptors:
          - key: subkey2
            value: subvalue2
            rate_limit: {unit: minute, requests_per_unit: 10}
      - key: key3
        value: value3
        rate_limit: {unit: hour, requests_per_unit: 10}
        descriptors:
          - key: subkey3
            value: subvalue3
            rate_limit: {unit: day, requests_per_unit: 10}
";

/// One request of descriptors `(entries, hits)`: `(code, remaining)` of
/// each status, and the overall code.
async fn ask(drl: &Drl, ds: &[(&[(&str, &str)], u64)]) -> (i32, Vec<(i32, bool, u32)>) {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let mut req = request("domain", &[], 1);
    req.descriptors = ds
        .iter()
        .map(|(e, hits)| {
            let mut d = descriptor(e);
            d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: *hits });
            d
        })
        .collect();
    let a: RateLimitResponse = c.should_rate_limit(req).await.unwrap().into_inner();
    let s = a
        .statuses
        .iter()
        .map(|s| (s.code, s.current_limit.is_some(), s.limit_remaining))
        .collect();
    (a.overall_code, s)
}

/// `[total_hits, over_limit, near_limit, within_limit]` of the rule at
/// `DOMAIN.key1[.key2]`.
fn stats(drl: &Drl, key1: &str, key2: Option<&str>) -> [u64; 4] {
    let text = http_get(&drl.url("/metrics")).unwrap().1;
    let labels = match key2 {
        Some(k2) => format!(r#"domain="domain",key1="{key1}",key2="{k2}""#),
        None => format!(r#"domain="domain",key1="{key1}""#),
    };
    ["total_hits", "over_limit", "near_limit", "within_limit"].map(|n| {
        metric(
            &text,
            &format!("ratelimit_service_rate_limit_{n}{{{labels}}}"),
        )
        .unwrap_or(0.0) as u64
    })
}

/// `exact`: the store reports the count before a call's hits (memory).
/// On Redis a call whose hits cross the limit counts them all as over
/// (docs/server.md), which only the preloads here do.
async fn test_redis(drl: &Drl, exact: bool) {
    // A 10 per second rule at 4, then one hit: OK, 5 left (within).
    let kv: &[(&str, &str)] = &[("key", "value")];
    assert_eq!(
        ask(drl, &[(kv, 4), (kv, 1)]).await,
        (OK, vec![(OK, true, 6), (OK, true, 5)])
    );
    assert_eq!(stats(drl, "key_value", None), [5, 0, 0, 5]);

    // A descriptor without a rule (hits 0) and a 10 per minute rule at
    // 10, then one hit: OK without a limit, and OVER_LIMIT.
    let top: &[(&str, &str)] = &[("key2", "value2")];
    let sub: &[(&str, &str)] = &[("key2", "value2"), ("subkey2", "subvalue2")];
    assert_eq!(
        ask(drl, &[(sub, 10), (top, 0), (sub, 1)]).await,
        (OVER, vec![(OK, true, 0), (OK, false, 0), (OVER, true, 0)])
    );
    // The ten made the count (two past 80 %: near), the one is over.
    assert_eq!(
        stats(drl, "key2_value2", Some("subkey2_subvalue2")),
        [11, 1, 2, 10]
    );

    // A 10 per hour rule at 11 checked with 0 hits, and a 10 per day rule
    // at 12, then one hit: both OVER_LIMIT; the check adds no stats.
    let top: &[(&str, &str)] = &[("key3", "value3")];
    let sub: &[(&str, &str)] = &[("key3", "value3"), ("subkey3", "subvalue3")];
    let (code, statuses) = ask(drl, &[(top, 11), (sub, 12), (top, 0), (sub, 1)]).await;
    assert_eq!(code, OVER);
    assert_eq!(statuses[2..], [(OVER, true, 0), (OVER, true, 0)]);
    let (hour, day) = if exact {
        // 11 made the hour count (1 over, 2 near); 12 the day's (2 over,
        // 2 near); the step's hit is over.
        ([11, 1, 2, 0], [13, 3, 2, 0])
    } else {
        ([11, 11, 0, 0], [13, 13, 0, 0])
    };
    assert_eq!(stats(drl, "key3_value3", None), hour);
    assert_eq!(stats(drl, "key3_value3", Some("subkey3_subvalue3")), day);
}

#[tokio::test]
async fn test_redis_in_memory() {
    let drl = Drl::start(DOMAIN);
    test_redis(&drl, true).await;
}

#[tokio::test]
async fn test_redis_on_redis() {
    let redis = common::Redis::start();
    let drl = Drl::start(&format!(
        "server:
  envoy_scope: redis
  request_timeout_ms: 60000
redis:
  url: {}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}
{DOMAIN}",
        redis.url()
    ));
    test_redis(&drl, false).await;
}
