//! envoyproxy/ratelimit's integration test `testBasicBaseConfig`
//! (`test/integration/integration_test.go`, with its runtime files
//! `basic.yaml` and `another.yaml` written inline), ported to a real
//! `drl serve` over Envoy RLS v3: every answer it expects, and its stats
//! read from `/metrics` under the names the reference's Prometheus mapping
//! gives them (`ratelimit_service_rate_limit_total_hits{domain,key1}` for
//! its `ratelimit.service.rate_limit.DOMAIN.KEY1.total_hits`). Run as the
//! reference runs it, and again with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
//! (`server.envoy_stop_increment_when_over_limit`). Its local-cache
//! variant (`*_local` keys, `over_limit_with_local_cache`) is in
//! `envoy_reference_local_cache.rs`.
//!
//! The reference's minute window could turn during a run; here a run
//! whose answers show a window turning (a `duration_until_reset` that
//! grows) is started again on a fresh server, so no verdict hangs on
//! where in the minute the run falls.

mod common;

use common::{Drl, http_get, metric};
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

const CONFIG: &str = "server:
  envoy_stop_increment_when_over_limit: STOP
SCOPE
envoy:
  - domain: basic
    descriptors:
      - key: key1
        rate_limit:
          unit: second
          requests_per_unit: 50
      - key: one_per_minute
        rate_limit:
          unit: minute
          requests_per_unit: 1
  - domain: another
    descriptors:
      - key: key2
        rate_limit:
          unit: minute
          requests_per_unit: 20
      - key: key3
        rate_limit:
          unit: hour
          requests_per_unit: 10
      - key: key4
        rate_limit:
          unit: day
          requests_per_unit: 20
";

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const HOUR: i32 = 3;

/// A window turned during the run.
struct Rolled;

/// Watches one rule's `duration_until_reset`: it only shrinks within a
/// window.
#[derive(Default)]
struct Window(Option<i64>);

impl Window {
    fn see(&mut self, a: &RateLimitResponse, i: usize) -> Result<(), Rolled> {
        let d = a.statuses[i]
            .duration_until_reset
            .as_ref()
            .map(|d| d.seconds)
            .expect("a limited status has a reset");
        match self.0 {
            Some(prev) if d > prev => Err(Rolled),
            _ => {
                self.0 = Some(d);
                Ok(())
            }
        }
    }
}

async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    ds: &[&[(&str, &str)]],
) -> RateLimitResponse {
    c.should_rate_limit(request(domain, ds, 1))
        .await
        .unwrap()
        .into_inner()
}

/// `(code, requests_per_unit, unit, remaining)` of each status.
fn statuses(a: &RateLimitResponse) -> Vec<(i32, u32, i32, u32)> {
    a.statuses
        .iter()
        .map(|s| {
            let (rpu, unit) = s
                .current_limit
                .as_ref()
                .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
            (s.code, rpu, unit, s.limit_remaining)
        })
        .collect()
}

/// The reference's stat `name` of `DOMAIN.KEY1` in its Prometheus form.
fn stat(text: &str, name: &str, domain: &str, key1: &str) -> u64 {
    let series =
        format!(r#"ratelimit_service_rate_limit_{name}{{domain="{domain}",key1="{key1}"}}"#);
    metric(text, &series).map_or(0, |v| v as u64)
}

/// Where a run counts: in memory, or on a real Redis set up as one of the
/// reference's integration tests sets up its Redis.
#[derive(Debug, Clone, Copy)]
enum On {
    /// In memory (drl's default).
    Memory,
    /// TestBasicConfig: one Redis.
    Redis,
    /// TestBasicConfig, `WithoutPerSecondRedisWithCachePrefix`: a key
    /// prefix (`CACHE_KEY_PREFIX`, drl's `redis.key_prefix`).
    Prefix,
    /// TestBasicAuthConfig: a Redis with a password.
    Password,
    /// TestBasicTLSConfig, `WithoutPerSecondRedisTLSWithClientCert`: TLS
    /// only, with a client certificate.
    Tls,
    /// TestBasicAuthConfigWithRedisCluster: a Redis Cluster (3 masters;
    /// without its password, which the test kit's cluster does not set).
    Cluster,
}

/// Starts what `on` needs; returns what must live for the run and the
/// config lines (server keys first, then top-level sections).
fn setup(on: On) -> (Box<dyn std::any::Any>, String) {
    let sections = |server: &str, redis: &str| {
        format!(
            "  envoy_scope: redis
  request_timeout_ms: 60000
{server}redis:
{redis}  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}"
        )
    };
    match on {
        On::Memory => (Box::new(()), String::new()),
        On::Redis | On::Prefix => {
            let r = common::Redis::start();
            let prefix = if matches!(on, On::Prefix) {
                "  key_prefix: \"ratelimit:\"\n"
            } else {
                ""
            };
            let text = sections("", &format!("  url: {}\n{prefix}", r.url()));
            (Box::new(r), text)
        }
        On::Password => {
            let r = common::Redis::start();
            // Set after the start: the launcher's readiness PING has no
            // password.
            let set =
                drl_test_kit::redis::raw_command(r.port, "CONFIG SET requirepass password123");
            assert!(
                set.as_deref().is_some_and(|s| s.starts_with("+OK")),
                "{set:?}"
            );
            let url = format!("redis://:password123@127.0.0.1:{}", r.port);
            (Box::new(r), sections("", &format!("  url: {url}\n")))
        }
        On::Tls => {
            let pki = std::sync::Arc::new(drl_test_kit::tls::Pki::generate());
            let r = common::Redis::start_tls(&pki, "yes", &[]);
            let tls = format!(
                "  tls: {{ca_file: {}, cert_file: {}, key_file: {}}}\n",
                pki.path("ca.pem").display(),
                pki.path("client.pem").display(),
                pki.path("client.key").display()
            );
            let text = sections("", &format!("  url: {}\n{tls}", r.url()));
            (Box::new((r, pki)), text)
        }
        On::Cluster => {
            let c = drl_test_kit::redis::RedisCluster::start(3);
            let nodes: String = c.urls().iter().map(|u| format!("    - {u}\n")).collect();
            let text = sections("", &format!("  cluster:\n{nodes}"));
            (Box::new(c), text)
        }
    }
}

async fn run(stop: bool, scope: &str) -> Result<(), Rolled> {
    let drl = Drl::start(
        &CONFIG
            .replace("STOP", &stop.to_string())
            .replace("SCOPE", scope),
    );
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let page = || http_get(&drl.url("/metrics")).unwrap().1;

    // An unknown domain: OK, no limit.
    let a = ask(&mut c, "foo", &[&[("hello", "world")]]).await;
    assert_eq!((a.overall_code, statuses(&a)), (OK, vec![(OK, 0, 0, 0)]));

    // One hit of a 50 per second limit.
    let a = ask(&mut c, "basic", &[&[("key1", "foo")]]).await;
    assert_eq!(
        (a.overall_code, statuses(&a)),
        (OK, vec![(OK, 50, SECOND, 49)])
    );
    assert_eq!(stat(&page(), "total_hits", "basic", "key1"), 1);

    // 25 hits of a 20 per minute limit, on a value of its own.
    let v = format!("{}", std::process::id() as u64 * 7919 + stop as u64);
    let mut minute = Window::default();
    for i in 0..25u64 {
        let a = ask(&mut c, "another", &[&[("key2", &v)]]).await;
        minute.see(&a, 0)?;
        let (code, remaining) = if i >= 20 {
            (OVER, 0)
        } else {
            (OK, 20 - (i as u32 + 1))
        };
        assert_eq!(
            (a.overall_code, statuses(&a)),
            (code, vec![(code, 20, MINUTE, remaining)]),
            "hit {i}"
        );
        let text = page();
        assert_eq!(stat(&text, "total_hits", "another", "key2"), i + 1);
        assert_eq!(
            stat(&text, "over_limit", "another", "key2"),
            i.saturating_sub(19),
            "hit {i}"
        );
    }

    // Not asserted by the reference test, but what its formula gives: the
    // hits that brought the count from 16 (80 % of 20) to 20 were near,
    // the 20 before the limit within.
    let text = page();
    assert_eq!(stat(&text, "near_limit", "another", "key2"), 4);
    assert_eq!(stat(&text, "within_limit", "another", "key2"), 20);

    // Two descriptors together: key2 (20 per minute) and key3 (10 per
    // hour), on another value.
    let v = format!("{v}-2");
    let (mut minute, mut hour) = (Window::default(), Window::default());
    for i in 0..15u64 {
        let a = ask(&mut c, "another", &[&[("key2", &v)], &[("key3", &v)]]).await;
        minute.see(&a, 0)?;
        hour.see(&a, 1)?;
        let mut remaining1 = 20 - (i as u32 + 1);
        let mut remaining2 = 10u32.saturating_sub(i as u32 + 1);
        let mut code = OK;
        if i >= 10 {
            code = OVER;
            remaining2 = 0;
            // With the stop, key2 is no longer counted once key3 is over.
            if stop {
                remaining1 = 10;
            }
        }
        assert_eq!(
            (a.overall_code, statuses(&a)),
            (
                code,
                vec![(OK, 20, MINUTE, remaining1), (code, 10, HOUR, remaining2)]
            ),
            "hit {i}"
        );
        let text = page();
        assert_eq!(stat(&text, "total_hits", "another", "key2"), i + 26);
        assert_eq!(stat(&text, "over_limit", "another", "key2"), 5);
        assert_eq!(stat(&text, "total_hits", "another", "key3"), i + 1);
        assert_eq!(
            stat(&text, "over_limit", "another", "key3"),
            i.saturating_sub(9),
            "hit {i}"
        );
    }

    // The page as Prometheus's own parser reads it: the same counters
    // (the parser names a counter's sample with `_total` added, as
    // OpenMetrics does; the page, like the reference's, writes the bare
    // name).
    let families = drl_test_kit::prometheus::parse(&page());
    let hits = drl_test_kit::prometheus::value(
        &families,
        "ratelimit_service_rate_limit_total_hits_total",
        &[("domain", "another"), ("key1", "key3")],
    );
    assert_eq!(hits, Some(15.0));
    Ok(())
}

async fn run_until_one_window(stop: bool, on: On) {
    for _ in 0..3 {
        // A fresh store each run: a run's counters start at zero.
        let (_guard, scope) = setup(on);
        if run(stop, &scope).await.is_ok() {
            return;
        }
    }
    panic!("a window turned in each of 3 runs ({on:?})");
}

#[tokio::test]
async fn test_basic_base_config() {
    run_until_one_window(false, On::Memory).await;
}

#[tokio::test]
async fn test_basic_base_config_stop_increment_when_over_limit() {
    run_until_one_window(true, On::Memory).await;
}

#[tokio::test]
async fn test_basic_config_on_redis() {
    run_until_one_window(false, On::Redis).await;
}

#[tokio::test]
async fn test_basic_config_on_redis_stop_increment_when_over_limit() {
    run_until_one_window(true, On::Redis).await;
}

#[tokio::test]
async fn test_basic_config_with_cache_prefix() {
    run_until_one_window(false, On::Prefix).await;
}

#[tokio::test]
async fn test_basic_auth_config() {
    run_until_one_window(false, On::Password).await;
}

#[tokio::test]
async fn test_basic_tls_config_with_client_cert() {
    run_until_one_window(false, On::Tls).await;
}

/// TestBasicConfig, `WithPerSecondRedis`: per-second rules count in a
/// second Redis (`REDIS_PERSECOND`, drl's `redis_per_second:`), the others
/// in the first; the answers are the same.
#[tokio::test]
async fn test_basic_config_with_per_second_redis() {
    for _ in 0..3 {
        let (main, fast) = (common::Redis::start(), common::Redis::start());
        let scope = format!(
            "  envoy_scope: redis
  request_timeout_ms: 60000
redis:
  url: {}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_per_second:
  url: {}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}",
            main.url(),
            fast.url()
        );
        if run(false, &scope).await.is_err() {
            continue;
        }
        let keys = |r: &common::Redis| drl_test_kit::redis::raw_command(r.port, "KEYS *").unwrap();
        let (in_main, in_fast) = (keys(&main), keys(&fast));
        // `basic` key1 is 50 per second; `another` key2 and key3 are per
        // minute and per hour.
        assert!(in_fast.contains("key1"), "{in_fast}");
        assert!(
            !in_fast.contains("key2") && !in_fast.contains("key3"),
            "{in_fast}"
        );
        assert!(
            in_main.contains("key2") && in_main.contains("key3"),
            "{in_main}"
        );
        assert!(!in_main.contains("key1"), "{in_main}");
        return;
    }
    panic!("a window turned in each of 3 runs (per-second Redis)");
}

#[tokio::test]
async fn test_basic_config_with_redis_cluster() {
    run_until_one_window(false, On::Cluster).await;
}

/// TestBasicConfig_ExtraTags: `EXTRA_TAGS` (`server.envoy_stats_tags`)
/// label the per-rule and service stats.
#[tokio::test]
async fn test_basic_config_extra_tags() {
    let drl = Drl::start(
        &CONFIG
            .replace("STOP", "false")
            .replace("SCOPE", "  envoy_stats_tags: {foo: bar, a: b}"),
    );
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    ask(&mut c, "basic", &[&[("key1", "foo")]]).await;
    let text = http_get(&drl.url("/metrics")).unwrap().1;
    assert_eq!(
        metric(
            &text,
            r#"ratelimit_service_rate_limit_total_hits{domain="basic",key1="key1",a="b",foo="bar"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"ratelimit_service_config_load_success{a="b",foo="bar"}"#
        ),
        Some(1.0),
        "{text}"
    );
}

/// `server.envoy_stats_values`: the reference's stats keys named by
/// request values (here `value_to_metric`, its
/// TestValueToMetric_UsesRuntimeValuesInStats) reach `/metrics` as its
/// Prometheus mapping labels them; without the setting, the rule's path.
#[tokio::test]
async fn stats_named_by_values_when_asked() {
    let domain = "envoy:
  - domain: domain
    descriptors:
      - key: route
        value_to_metric: true
        descriptors:
          - key: http_method
            value_to_metric: true
            descriptors:
              - key: subject_id
                rate_limit: {unit: minute, requests_per_unit: 60}
";
    let entries: &[(&str, &str)] = &[
        ("route", "draw"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    for (values, key1, key2) in [
        (true, "route_draw", "http_method_GET"),
        (false, "route", "http_method"),
    ] {
        let drl = Drl::start(&format!(
            "server:\n  envoy_stats_values: {values}\n{domain}"
        ));
        let mut c = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .unwrap();
        ask(&mut c, "domain", &[entries]).await;
        let text = http_get(&drl.url("/metrics")).unwrap().1;
        let series = format!(
            r#"ratelimit_service_rate_limit_within_limit{{domain="domain",key1="{key1}",key2="{key2}"}}"#
        );
        assert_eq!(metric(&text, &series), Some(1.0), "{values}: {text}");
    }
}
