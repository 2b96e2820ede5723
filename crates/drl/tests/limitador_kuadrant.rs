//! limitador's own gRPC API, `kuadrant.service.ratelimit.v1.RateLimitService`
//! (`CheckRateLimit`, `Report`), through a real `drl serve` serving a
//! limitador limits file. Each expectation names the limitador-server test
//! or handler line it comes from (`limitador-server/src/envoy_rls/
//! kuadrant_service.rs`, its `tests::check_rate_limit` and
//! `tests::report` modules).

mod common;

use drl_test_kit::envoy::request;
use std::time::Duration;

use common::Drl;
use drl_api::kuadrant::rate_limit_service_client::RateLimitServiceClient as KuadrantClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const UNKNOWN: i32 = Code::Unknown as i32;

/// The shapes of limitador-server's handler tests: `one` (1 per minute per
/// app in its `test_returns_ok_correctly`), `zero` (its
/// `test_returns_overlimit_correctly`), `five` (its
/// `test_going_overlimit_is_ok`), and its
/// `test_takes_into_account_all_the_descriptors` pair. Windows are an
/// hour here, so that a run stays in one (see `clear_of_window_end`).
const LIMITS: &str = r#"---
- namespace: one
  max_value: 1
  seconds: 3600
  conditions: ["descriptors[0]['req.method'] == 'GET'"]
  variables: ["descriptors[0]['app.id']"]
- namespace: zero
  max_value: 0
  seconds: 3600
  conditions: ["descriptors[0]['req.method'] == 'GET'"]
  variables: ["descriptors[0]['app.id']"]
- namespace: five
  max_value: 5
  seconds: 3600
  conditions: ["descriptors[0]['req.method'] == 'GET'"]
  variables: ["descriptors[0]['app.id']"]
- namespace: both
  max_value: 10
  seconds: 3600
  conditions: ["descriptors[0].x == '1'"]
  variables: ["descriptors[0].z"]
- namespace: both
  max_value: 0
  seconds: 3600
  conditions: ["descriptors[0].x == '1'", "descriptors[1].y == '2'"]
  variables: ["descriptors[0].z"]
"#;

type Client = KuadrantClient<tonic::transport::Channel>;

async fn check(c: &mut Client, domain: &str, entries: &[(&str, &str)], hits: u32) -> i32 {
    c.check_rate_limit(request(domain, &[entries], hits))
        .await
        .unwrap()
        .into_inner()
        .overall_code
}

async fn report(c: &mut Client, domain: &str, entries: &[(&str, &str)], hits: u32) -> i32 {
    c.report(request(domain, &[entries], hits))
        .await
        .unwrap()
        .into_inner()
        .overall_code
}

fn in_one_window() {
    common::clear_of_window_end(Duration::from_secs(3600), common::HOUR_MARGIN);
}

const APP1: &[(&str, &str)] = &[("req.method", "GET"), ("app.id", "1")];
const APP2: &[(&str, &str)] = &[("req.method", "GET"), ("app.id", "2")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_rate_limit_asks_and_changes_nothing() {
    in_one_window();
    let drl = Drl::start(LIMITS);
    let mut c = Client::connect(drl.grpc_url()).await.unwrap();
    // `test_returns_ok_correctly`: a limit of 1, checked twice: OK both
    // times (the check does not count).
    assert_eq!(check(&mut c, "one", APP1, 1).await, OK);
    assert_eq!(check(&mut c, "one", APP1, 1).await, OK);
    // The handler asks `is_rate_limited(namespace, ctx, 1)`: one hit,
    // whatever `hits_addend` says.
    assert_eq!(check(&mut c, "one", APP1, 5).await, OK);
    // The counter is the one ShouldRateLimit counts in: one hit there
    // fills it, and the next check is over.
    let mut rls = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let r = rls
        .should_rate_limit(request("one", &[APP1], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    assert_eq!(check(&mut c, "one", APP1, 1).await, OVER);
    assert_eq!(check(&mut c, "one", APP2, 1).await, OK, "its own counter");
    // `test_returns_overlimit_correctly`: a limit of 0 is over at once.
    assert_eq!(check(&mut c, "zero", APP1, 1).await, OVER);
    // `test_takes_into_account_all_the_descriptors`: the second
    // descriptor makes the limit of 0 apply.
    let r = c
        .check_rate_limit(request(
            "both",
            &[&[("x", "1"), ("z", "1")], &[("y", "2")]],
            1,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OVER);
    let r = c
        .check_rate_limit(request("both", &[&[("x", "1"), ("z", "1")]], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.overall_code, OK,
        "without it only the limit of 10 applies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_counts_past_the_limit_and_the_next_check_is_over() {
    in_one_window();
    let drl = Drl::start(LIMITS);
    let mut c = Client::connect(drl.grpc_url()).await.unwrap();
    // `test_returns_ok_correctly` (report): 4 hits on a limit of 10 is OK.
    // `test_going_overlimit_is_ok`: 20 hits on a limit of 5 is OK too
    // (`update_counters` counts unconditionally).
    assert_eq!(check(&mut c, "five", APP1, 1).await, OK);
    assert_eq!(report(&mut c, "five", APP1, 20).await, OK);
    // Counted past the limit: the next check is over.
    assert_eq!(check(&mut c, "five", APP1, 1).await, OVER);
    assert_eq!(report(&mut c, "five", APP1, 1).await, OK, "still OK");
    assert_eq!(check(&mut c, "five", APP2, 1).await, OK, "its own counter");
    // The handler's `hits_addend` of 0 means 1: five reports of 0 fill
    // a limit of 5 exactly.
    for _ in 0..4 {
        assert_eq!(report(&mut c, "five", APP2, 0).await, OK);
    }
    assert_eq!(check(&mut c, "five", APP2, 1).await, OK, "4 of 5 used");
    assert_eq!(report(&mut c, "five", APP2, 0).await, OK);
    assert_eq!(check(&mut c, "five", APP2, 1).await, OVER, "5 of 5 used");
    // A report on a limit of 0 has nothing to count: OK.
    assert_eq!(report(&mut c, "zero", APP1, 3).await, OK);
    // ShouldRateLimit sees the same counter: denied.
    let mut rls = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let r = rls
        .should_rate_limit(request("five", &[APP1], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OVER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_namespace_and_empty_domain_answer_as_limitador() {
    let drl = Drl::start(LIMITS);
    let mut c = Client::connect(drl.grpc_url()).await.unwrap();
    // `test_returns_ok_when_no_limits_apply` (both modules): a namespace
    // without limits is OK.
    let get = &[("req.method", "GET")][..];
    assert_eq!(check(&mut c, "test_namespace", get, 1).await, OK);
    assert_eq!(report(&mut c, "test_namespace", get, 1).await, OK);
    // A known namespace whose limits do not apply: OK.
    let post = &[("req.method", "POST"), ("app.id", "1")][..];
    assert_eq!(check(&mut c, "zero", post, 1).await, OK);
    // `test_returns_unknown_when_domain_is_empty` (both modules): an
    // answer with the code UNKNOWN, not an error status.
    assert_eq!(check(&mut c, "", get, 1).await, UNKNOWN);
    assert_eq!(report(&mut c, "", get, 1).await, UNKNOWN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guard_applies_to_the_kuadrant_api() {
    in_one_window();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let token = "a-token-of-at-least-16-bytes";
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITS).unwrap();
    let drl = Drl::start(&format!(
        "auth:\n  tokens_file: {}\nlimitador:\n  - file: {}\n",
        tokens.display(),
        limits.display()
    ));
    // The gRPC health service names it SERVING (probes need no token).
    {
        use tonic_health::pb::HealthCheckRequest;
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::health_client::HealthClient;
        let channel = tonic::transport::Endpoint::from_shared(drl.grpc_url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut h = HealthClient::new(channel);
        let r = h
            .check(HealthCheckRequest {
                service: "kuadrant.service.ratelimit.v1.RateLimitService".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32);
    }
    let mut c = Client::connect(drl.grpc_url()).await.unwrap();
    let e = c
        .check_rate_limit(request("five", &[APP1], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let e = c.report(request("five", &[APP1], 9)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    // With the token: the refused report counted nothing.
    let with = |r: RateLimitRequest| {
        let mut r = tonic::Request::new(r);
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    let r = c
        .check_rate_limit(with(request("five", &[APP1], 1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    let r = c
        .report(with(request("five", &[APP1], 5)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK);
    let r = c
        .check_rate_limit(with(request("five", &[APP1], 1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OVER);
}

/// A Redis-scoped limitador file: a report on one node is seen by a check
/// on another (`RedisStore::charge`), past the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_on_one_redis_scoped_node_is_seen_by_another() {
    in_one_window();
    let redis = common::Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("limits.yaml");
    std::fs::write(&f, LIMITS).unwrap();
    let config = format!(
        "server:\n  request_timeout_ms: 60000\n\
         redis:\n  url: {}\n  engine: lua\n  connect_timeout_ms: 30000\n  \
         response_timeout_ms: 30000\nredis_resilience:\n  \
         default_policy: {{timeout_ms: 30000, on_store_error: deny}}\n\
         limitador:\n  - file: {}\n    scope: redis\n",
        redis.url(),
        f.display()
    );
    let (a, b) = (Drl::start(&config), Drl::start(&config));
    let mut ca = Client::connect(a.grpc_url()).await.unwrap();
    let mut cb = Client::connect(b.grpc_url()).await.unwrap();
    assert_eq!(check(&mut cb, "five", APP1, 1).await, OK);
    assert_eq!(report(&mut ca, "five", APP1, 4).await, OK);
    assert_eq!(check(&mut cb, "five", APP1, 1).await, OK, "4 of 5 used");
    assert_eq!(report(&mut ca, "five", APP1, 7).await, OK);
    assert_eq!(check(&mut cb, "five", APP1, 1).await, OVER, "11 of 5 used");
    assert_eq!(check(&mut ca, "five", APP1, 1).await, OVER);
    assert_eq!(check(&mut ca, "five", APP2, 1).await, OK, "its own counter");
}
