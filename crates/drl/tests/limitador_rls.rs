//! limitador limits files through a real `drl serve` and its Envoy RLS v3
//! gRPC API: the file given as `--config` unchanged (detected as
//! limitador's format), and the same file named from a native config
//! (`limitador: [{file: ...}]`). Decisions are limitador's: the request's
//! domain is the namespace, every limit whose conditions hold and whose
//! variables are present counts, all or nothing. Bad files are refused by
//! `drl config check` with the line and column.

mod common;

use common::{Drl, config_check};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// limitador's sandbox limits, with a per-user limit in the older form.
const LIMITS: &str = r#"---
- namespace: test_namespace
  max_value: 10
  seconds: 60
  conditions:
    - "descriptors[0]['req.method'] == 'GET'"
    - "descriptors[0]['req.path'] != '/json'"
  variables: []
- namespace: test_namespace
  max_value: 5
  seconds: 60
  conditions:
    - "descriptors[0]['req.method'] == 'POST'"
    - "descriptors[0]['req.path'] != '/json'"
  variables: []
- namespace: test_namespace
  max_value: 3
  seconds: 60
  conditions:
    - "descriptors[0]['keyA'] == 'valueA'"
  variables:
    - descriptors[0]['varA']
- namespace: other
  name: per-user
  max_value: 2
  seconds: 3600
  conditions:
    - "req.method == \"DELETE\""
  variables:
    - user_id
"#;

type Client = RateLimitServiceClient<tonic::transport::Channel>;

async fn ask(c: &mut Client, domain: &str, entries: &[(&str, &str)], hits: u32) -> i32 {
    let req = drl_test_kit::envoy::request(domain, &[entries], hits);
    c.should_rate_limit(req)
        .await
        .unwrap()
        .into_inner()
        .overall_code
}

async fn count_ok(c: &mut Client, domain: &str, entries: &[(&str, &str)], n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if ask(c, domain, entries, 1).await == OK {
            ok += 1;
        }
    }
    ok
}

async fn decisions(drl: &Drl) {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let get = [("req.method", "GET"), ("req.path", "/a")];
    assert_eq!(count_ok(&mut c, "test_namespace", &get, 15).await, 10);
    let post = [("req.method", "POST"), ("req.path", "/a")];
    assert_eq!(count_ok(&mut c, "test_namespace", &post, 8).await, 5);
    // The excluded path: no limit applies.
    let json = [("req.method", "GET"), ("req.path", "/json")];
    assert_eq!(count_ok(&mut c, "test_namespace", &json, 20).await, 20);
    // One counter per varA value.
    let a1 = [("keyA", "valueA"), ("varA", "1")];
    let a2 = [("keyA", "valueA"), ("varA", "2")];
    assert_eq!(count_ok(&mut c, "test_namespace", &a1, 5).await, 3);
    assert_eq!(count_ok(&mut c, "test_namespace", &a2, 5).await, 3);
    // Hits beyond the room are denied whole, and count nothing.
    let u = [("req.method", "DELETE"), ("user_id", "ann")];
    assert_eq!(ask(&mut c, "other", &u, 3).await, OVER);
    assert_eq!(ask(&mut c, "other", &u, 2).await, OK);
    assert_eq!(ask(&mut c, "other", &u, 1).await, OVER);
    let v = [("req.method", "DELETE"), ("user_id", "bob")];
    assert_eq!(ask(&mut c, "other", &v, 1).await, OK);
    // A namespace with no limits limits nothing: OK, as limitador and
    // envoyproxy/ratelimit answer (`server.envoy_unknown_domain: not_found`
    // makes it an error).
    let r = c
        .should_rate_limit(RateLimitRequest {
            domain: "nope".into(),
            descriptors: vec![Default::default()],
            hits_addend: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, OK, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limitador_file_as_the_config_decides_as_limitador() {
    let drl = Drl::start(LIMITS);
    decisions(&drl).await;
    let (ok, out) = config_check(&drl.config);
    assert!(ok, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limitador_file_named_by_a_native_config_decides_as_limitador() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("limits.yaml");
    std::fs::write(&f, LIMITS).unwrap();
    let drl = Drl::start(&format!("limitador:\n  - file: {}\n", f.display()));
    decisions(&drl).await;
}

#[test]
fn config_check_names_the_line_of_an_unsupported_condition() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("limits.yaml");
    let bad = LIMITS.replace(
        "\"descriptors[0]['keyA'] == 'valueA'\"",
        "\"descriptors[0]['keyA'] == 'valueA' || descriptors[0]['keyB'] == 'b'\"",
    );
    std::fs::write(&f, bad).unwrap();
    let (ok, out) = config_check(&f);
    assert!(!ok);
    // Line 20, the `||` at column 8 + 35.
    assert!(out.contains(&format!("{}:20:43: ", f.display())), "{out}");
    assert!(out.contains("||"), "{out}");
}

/// A limitador file scoped to Redis: two `drl serve` processes share its
/// counters through one real redis-server. Its RLS calls wait on the store
/// (the handler's async path, not the in-memory one), and the namespace's
/// limits hold across both nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_scoped_limitador_file_holds_across_two_nodes() {
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
    let mut ca = RateLimitServiceClient::connect(a.grpc_url()).await.unwrap();
    let mut cb = RateLimitServiceClient::connect(b.grpc_url()).await.unwrap();
    // 3 per varA value, shared: alternate between the nodes.
    let a1 = [("keyA", "valueA"), ("varA", "1")];
    let mut ok = 0;
    for i in 0..8 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        if ask(c, "test_namespace", &a1, 1).await == OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 3, "the namespace's limit holds across both nodes");
    // Another value has its own counter; hits beyond the room count nothing.
    let u = [("req.method", "DELETE"), ("user_id", "ann")];
    assert_eq!(ask(&mut ca, "other", &u, 3).await, OVER);
    assert_eq!(ask(&mut cb, "other", &u, 2).await, OK);
    assert_eq!(ask(&mut ca, "other", &u, 1).await, OVER);
}
