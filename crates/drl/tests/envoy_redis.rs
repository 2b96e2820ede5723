//! `server.envoy_scope: redis`: Envoy descriptor rules and overrides
//! counted in one real redis-server, shared by two `drl serve` processes
//! as envoyproxy/ratelimit's replicas share their Redis. Needs
//! `redis-server`.

mod common;

use common::{Drl, config_check};
use drl_test_kit::envoy::{descriptor, request};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

fn config(url: &str, engine: &str) -> String {
    format!(
        "server:
  request_timeout_ms: 60000
  envoy_scope: redis
redis:
  url: {url}
  engine: {engine}
  connect_timeout_ms: 30000
  response_timeout_ms: 30000
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}
envoy:
  - domain: shared
    descriptors:
      - key: tenant
        rate_limit: {{unit: hour, requests_per_unit: 10}}
"
    )
}

/// The codes of `n` calls alternating between `a` and `b`, each with the
/// descriptor `d`.
async fn alternate(
    a: &Drl,
    b: &Drl,
    n: usize,
    d: impl Fn() -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor,
) -> Vec<i32> {
    let mut ca = RateLimitServiceClient::connect(a.grpc_url()).await.unwrap();
    let mut cb = RateLimitServiceClient::connect(b.grpc_url()).await.unwrap();
    let mut codes = Vec::new();
    for i in 0..n {
        let mut req = request("shared", &[], 1);
        req.descriptors = vec![d()];
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        codes.push(
            c.should_rate_limit(req)
                .await
                .unwrap()
                .into_inner()
                .overall_code,
        );
    }
    codes
}

async fn two_processes_share_one_count(engine: &str) {
    let redis = if engine == "module" {
        common::Redis::start_module()
    } else {
        common::Redis::start()
    };
    let cfg = config(&redis.url(), engine);
    let (a, b) = (Drl::start(&cfg), Drl::start(&cfg));
    // A 10-per-hour rule: the eleventh call, whichever process takes it,
    // is over.
    let codes = alternate(&a, &b, 12, || descriptor(&[("tenant", "t1")])).await;
    assert_eq!(codes[..10], [OK; 10], "{engine}: {codes:?}");
    assert_eq!(codes[10..], [OVER, OVER], "{engine}: {codes:?}");
    // An override of 3 per hour, counted once across both.
    let over = || {
        let mut d = descriptor(&[("tenant", "t2")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: 3, // HOUR
        });
        d
    };
    let codes = alternate(&a, &b, 5, over).await;
    assert_eq!(codes, [OK, OK, OK, OVER, OVER], "{engine}");
}

#[tokio::test]
async fn two_processes_share_one_count_lua() {
    two_processes_share_one_count("lua").await;
}

#[tokio::test]
async fn two_processes_share_one_count_module() {
    two_processes_share_one_count("module").await;
}

/// `envoy_scope: redis` without a `redis:` section, a scope Envoy rules
/// cannot have, and stats tags that are no label, are refused by `drl
/// config check` with the reason.
#[test]
fn envoy_scope_needs_redis_and_refuses_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drl.yaml");
    for (yaml, needle) in [
        (
            "server: {envoy_scope: redis}\n",
            "server.envoy_scope is redis, but the config has no `redis:` section",
        ),
        (
            "server: {envoy_scope: gossip}\n",
            "server.envoy_scope: gossip is not supported",
        ),
        // Not a label drl can add (envoy_stats_tags, the reference's
        // EXTRA_TAGS): taken, or not a Prometheus label name.
        (
            "server: {envoy_stats_tags: {domain: x}}\n",
            "server.envoy_stats_tags: \"domain\" is not a Prometheus label name",
        ),
        (
            "server: {envoy_stats_tags: {1x: y}}\n",
            "server.envoy_stats_tags: \"1x\" is not a Prometheus label name",
        ),
    ] {
        std::fs::write(&path, yaml).unwrap();
        let (ok, out) = config_check(&path);
        assert!(!ok, "{yaml}: accepted");
        assert!(out.contains(needle), "{yaml}: {out}");
    }
}
