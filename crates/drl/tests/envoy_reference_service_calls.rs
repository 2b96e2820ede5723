//! More of envoyproxy/ratelimit's service tests
//! (`test/service/ratelimit_test.go`), ported to a real `drl serve` over
//! Envoy RLS v3, with the service stats they check read from `/metrics`
//! under the reference's Prometheus names
//! (`ratelimit_service_config_load_success`, `_config_load_error`,
//! `_global_shadow_mode`, `_should_rate_limit_error{err_type}`). The
//! reference mocks its cache's answers; here a descriptor is over its
//! 10-per-minute rule because the request carries 11 hits, so no verdict
//! depends on the clock. Each test names the Go test it comes from.
//!
//! TestCacheError needs `on_store_error: error` (drl's default failure
//! policy decides locally at quota/N instead of answering an error).
//! TestInitialLoadError and TestServiceHealthStatusAtLeastOneConfigLoaded
//! (a start whose config fails to load: `drl serve --wait-for-config`) are
//! in `envoy_initial_load.rs`, TestServiceTracer in
//! `envoy_reference_tracing.rs`, TestServiceHealthStatus in `serve_grpc.rs`.

mod common;

use common::{Drl, http_get, metric};
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const MINUTE: i32 = 2;

/// `(code, (name, requests_per_unit, unit) of the current limit, remaining)`.
type Status = (i32, Option<(String, u32, i32)>, u32);

fn statuses(a: &RateLimitResponse) -> Vec<Status> {
    a.statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.current_limit
                    .as_ref()
                    .map(|l| (l.name.clone(), l.requests_per_unit, l.unit)),
                s.limit_remaining,
            )
        })
        .collect()
}

fn limit(name: &str, rpu: u32, unit: i32) -> Option<(String, u32, i32)> {
    Some((name.to_string(), rpu, unit))
}

async fn ask(
    drl: &Drl,
    domain: &str,
    ds: &[&[(&str, &str)]],
    hits: u32,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    c.should_rate_limit(request(domain, ds, hits))
        .await
        .map(tonic::Response::into_inner)
}

fn stat(drl: &Drl, series: &str) -> f64 {
    let text = http_get(&drl.url("/metrics")).unwrap().1;
    metric(&text, series).unwrap_or(0.0)
}

const FOO: &[(&str, &str)] = &[("foo", "bar")];
const HELLO: &[(&str, &str)] = &[("hello", "world")];

/// TestService: a request no rule matches is OK; after a reload adds a
/// domain, its named rule over and an unmatched descriptor answer
/// OVER_LIMIT; a reload that fails keeps the config in force (in either
/// order of descriptors); loads counted 2 ok and 1 failed.
#[tokio::test]
async fn test_service() {
    let first = "envoy:
  - domain: test-domain
    descriptors:
      - key: other
        rate_limit: {unit: hour, requests_per_unit: 5}
";
    let drl = Drl::start_with(first, &["--no-watch"]);
    let a = ask(&drl, "test-domain", &[HELLO], 1).await.unwrap();
    assert_eq!((a.overall_code, statuses(&a)), (OK, vec![(OK, None, 0)]));

    let second = format!(
        "{first}  - domain: different-domain
    descriptors:
      - key: foo
        value: bar
        rate_limit: {{name: key_name, unit: minute, requests_per_unit: 10}}
"
    );
    std::fs::write(&drl.config, second).unwrap();
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    let a = ask(&drl, "different-domain", &[FOO, HELLO], 11)
        .await
        .unwrap();
    assert_eq!(
        (a.overall_code, statuses(&a)),
        (
            OVER,
            vec![(OVER, limit("key_name", 10, MINUTE), 0), (OK, None, 0)]
        )
    );

    std::fs::write(&drl.config, "envoy: [").unwrap();
    drl.signal("HUP");
    drl.wait_log("config reload refused (SIGHUP)");
    let a = ask(&drl, "different-domain", &[HELLO, FOO], 11)
        .await
        .unwrap();
    assert_eq!(
        (a.overall_code, statuses(&a)),
        (
            OVER,
            vec![(OK, None, 0), (OVER, limit("key_name", 10, MINUTE), 0)]
        )
    );
    assert_eq!(stat(&drl, "ratelimit_service_config_load_success"), 2.0);
    assert_eq!(stat(&drl, "ratelimit_service_config_load_error"), 1.0);
    assert_eq!(stat(&drl, "ratelimit_service_global_shadow_mode"), 0.0);
}

fn two_rules(shadow_foo: bool, shadow_hello: bool) -> String {
    format!(
        "envoy:
  - domain: different-domain
    descriptors:
      - key: foo
        value: bar
        shadow_mode: {shadow_foo}
        rate_limit: {{unit: minute, requests_per_unit: 10}}
      - key: hello
        value: world
        shadow_mode: {shadow_hello}
        rate_limit: {{unit: minute, requests_per_unit: 10}}
"
    )
}

/// TestRuleShadowMode: both rules in shadow mode and over: both OK, OK
/// overall, and the global shadow mode never counted.
#[tokio::test]
async fn test_rule_shadow_mode() {
    let drl = Drl::start(&two_rules(true, true));
    let a = ask(&drl, "different-domain", &[FOO, HELLO], 11)
        .await
        .unwrap();
    assert_eq!(a.overall_code, OK);
    let codes: Vec<i32> = a.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [OK, OK]);
    assert_eq!(stat(&drl, "ratelimit_service_global_shadow_mode"), 0.0);
}

/// TestMixedRuleShadowMode: the shadow rule's descriptor is OK, the other
/// over: OVER_LIMIT overall.
#[tokio::test]
async fn test_mixed_rule_shadow_mode() {
    let drl = Drl::start(&two_rules(true, false));
    let a = ask(&drl, "different-domain", &[FOO, HELLO], 11)
        .await
        .unwrap();
    assert_eq!(a.overall_code, OVER);
    let codes: Vec<i32> = a.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [OK, OVER]);
    assert_eq!(stat(&drl, "ratelimit_service_global_shadow_mode"), 0.0);
}

/// TestServiceGlobalShadowMode (its stat) and
/// TestServiceMixedModeWithShadowMode: under the global shadow mode an
/// ordinary rule and a quota both over answer OK overall, each status
/// still OVER_LIMIT; each such answer counts once in `global_shadow_mode`.
#[tokio::test]
async fn test_service_mixed_mode_with_shadow_mode() {
    let drl = Drl::start(
        "server:
  envoy_shadow_mode: true
envoy:
  - domain: quota-domain
    descriptors:
      - key: regular
        value: limit
        rate_limit: {unit: minute, requests_per_unit: 5}
      - key: quota
        value: limit
        quota_mode: true
        rate_limit: {unit: minute, requests_per_unit: 3}
",
    );
    let a = ask(
        &drl,
        "quota-domain",
        &[&[("regular", "limit")], &[("quota", "limit")]],
        6,
    )
    .await
    .unwrap();
    assert_eq!(
        (a.overall_code, statuses(&a)),
        (
            OK,
            vec![
                (OVER, limit("", 5, MINUTE), 0),
                (OVER, limit("", 3, MINUTE), 0)
            ]
        )
    );
    assert_eq!(stat(&drl, "ratelimit_service_global_shadow_mode"), 1.0);
}

/// TestEmptyDomain and TestEmptyDescriptors: refused with the reference's
/// messages, each counted as a `service_error`.
#[tokio::test]
async fn test_empty_domain_and_descriptors() {
    let drl = Drl::start(&two_rules(false, false));
    let e = ask(&drl, "", &[HELLO], 1).await.unwrap_err();
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let series = r#"ratelimit_service_should_rate_limit_error{err_type="service_error"}"#;
    assert_eq!(stat(&drl, series), 1.0);
    let e = ask(&drl, "test-domain", &[], 1).await.unwrap_err();
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");
    assert_eq!(stat(&drl, series), 2.0);
}

/// TestUnlimited: a limited descriptor, an unmatched one and an unlimited
/// one: OK, the unlimited one's remaining the largest u32.
#[tokio::test]
async fn test_unlimited() {
    let drl = Drl::start(
        "envoy:
  - domain: some-domain
    descriptors:
      - key: foo
        value: bar
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: baz
        value: qux
        rate_limit: {unlimited: true}
",
    );
    let a = ask(&drl, "some-domain", &[FOO, HELLO, &[("baz", "qux")]], 1)
        .await
        .unwrap();
    assert_eq!(
        (a.overall_code, statuses(&a)),
        (
            OK,
            vec![
                (OK, limit("", 10, MINUTE), 9),
                (OK, None, 0),
                (OK, None, u32::MAX)
            ]
        )
    );
}

/// TestCacheError: with `redis_resilience` `on_store_error: error`, a
/// descriptor Redis cannot count answers the call an error status (the
/// reference's "cache error"; Envoy's `failure_mode_deny` then decides),
/// counted as a `redis_error`. The same call under the default policy is
/// decided locally (drl's documented difference, one setting away).
#[tokio::test]
async fn test_cache_error() {
    for policy in ["error", "local"] {
        let mut redis = common::Redis::start();
        let drl = Drl::start(&format!(
            "server:
  envoy_scope: redis
redis:
  url: {}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: {policy}}}
envoy:
  - domain: different-domain
    descriptors:
      - key: foo
        value: bar
        rate_limit: {{name: key, unit: minute, requests_per_unit: 10}}
",
            redis.url()
        ));
        let a = ask(&drl, "different-domain", &[FOO], 1).await.unwrap();
        assert_eq!(a.overall_code, OK, "{policy}: Redis up");
        redis.kill();
        let series = r#"ratelimit_service_should_rate_limit_error{err_type="redis_error"}"#;
        let answer = ask(&drl, "different-domain", &[FOO], 1).await;
        if policy == "error" {
            let e = answer.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            assert_eq!(stat(&drl, series), 1.0);
        } else {
            let a = answer.unwrap();
            assert_eq!(
                (a.overall_code, statuses(&a)),
                (OK, vec![(OK, limit("key", 10, MINUTE), 9)]),
                "local: decided by the local limiter at quota/1 (one hit was counted in Redis, not here)"
            );
            assert_eq!(stat(&drl, series), 0.0);
        }
    }
}
