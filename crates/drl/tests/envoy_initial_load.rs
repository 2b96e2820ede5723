//! A start without a loadable config (`drl serve --wait-for-config`,
//! `DRL_WAIT_FOR_CONFIG=1`), as envoyproxy/ratelimit starts when its
//! runtime files fail to load: every API answers an error ("no rate limit
//! configuration loaded"), never a decision; the gRPC health service
//! (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`) and `/readyz` report not
//! serving until a reload (file change or SIGHUP) loads the config, and
//! from then on drl serves as if it had started with it. Two tests are
//! ported from the reference's `test/service/ratelimit_test.go` (each names
//! its Go test); the reference mocks its config provider, here a real
//! `drl serve` reads a real file. Every wait is on a condition (health
//! polled until SERVING, a log line), bounded by drl-test-kit's deadline.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{BIN, DEADLINE, Drl, http_get, http_request, metric};
use drl_api::kuadrant::rate_limit_service_client::RateLimitServiceClient as KuadrantClient;
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest};
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// An envoyproxy/ratelimit file that does not parse (an unclosed flow
/// sequence, line 5).
const BROKEN: &str = "domain: test-domain
descriptors:
  - key: hello
    value: world
    rate_limit: [
";

/// The same file, fixed: 10 per minute for `hello=world`.
const FIXED: &str = "domain: test-domain
descriptors:
  - key: hello
    value: world
    rate_limit:
      unit: minute
      requests_per_unit: 10
";

/// drl's own format with a native limit (its forward-auth key from a
/// header) and an inline Envoy domain.
const NATIVE: &str = "limits:
  - name: api
    quota: 5/s
    key: {headers: [x-tenant], default: anonymous}
envoy:
  - domain: test-domain
    descriptors:
      - key: hello
        value: world
        rate_limit: {unit: minute, requests_per_unit: 10}
";

const HELLO: &[(&str, &str)] = &[("hello", "world")];

/// The health service's names: the server, drl's services and
/// `ratelimit` (the reference's).
const HEALTH_NAMES: [&str; 5] = [
    "",
    "drl.v1.RateLimiter",
    "envoy.service.ratelimit.v3.RateLimitService",
    "kuadrant.service.ratelimit.v1.RateLimitService",
    "ratelimit",
];

/// `drl serve --config FILE` holding `yaml`, on free ports, with
/// `--wait-for-config` and `extra`; returns once it listens (it is not
/// ready, so not waiting for `/readyz`).
fn spawn_waiting(yaml: &str, extra: &[&str]) -> Drl {
    let mut args = vec![
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--wait-for-config",
    ];
    args.extend_from_slice(extra);
    Drl::spawn(yaml, &args)
}

async fn health(drl: &Drl, service: &str) -> i32 {
    let channel = tonic::transport::Endpoint::from_shared(drl.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    h.check(HealthCheckRequest {
        service: service.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

/// Polls the health of `ratelimit` until it is SERVING (at most
/// [`DEADLINE`]).
async fn wait_serving(drl: &Drl) {
    let start = Instant::now();
    while health(drl, "ratelimit").await != ServingStatus::Serving as i32 {
        assert!(
            start.elapsed() < DEADLINE,
            "not SERVING after {DEADLINE:?}; log:\n{}",
            drl.log.lock().unwrap().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ask(drl: &Drl, hits: u32) -> Result<RateLimitResponse, tonic::Status> {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    c.should_rate_limit(request("test-domain", &[HELLO], hits))
        .await
        .map(tonic::Response::into_inner)
}

fn stat(drl: &Drl, series: &str) -> f64 {
    let text = http_get(&drl.url("/metrics")).unwrap().1;
    metric(&text, series).unwrap_or(0.0)
}

const SERVICE_ERROR: &str =
    r#"ratelimit_service_should_rate_limit_error{err_type="service_error"}"#;

/// The RLS answer of a config not loaded: the reference's message, as
/// UNAVAILABLE (the reference's plain error is UNKNOWN in gRPC; either is
/// an error to Envoy).
fn assert_not_loaded(e: &tonic::Status) {
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert_eq!(e.message(), "no rate limit configuration loaded");
}

/// A served answer: OK, under the fixed file's rule.
fn assert_served(a: &RateLimitResponse) {
    assert_eq!(a.overall_code, Code::Ok as i32, "{a:?}");
    let limit = a.statuses[0]
        .current_limit
        .as_ref()
        .expect("a rule applies");
    assert_eq!(limit.requests_per_unit, 10);
}

/// test/service/ratelimit_test.go: TestInitialLoadError. The initial
/// config fails to load; ShouldRateLimit answers the error "no rate limit
/// configuration loaded", counted as `service_error` (and the load as
/// `config_load_error`).
#[tokio::test]
async fn test_initial_load_error() {
    let drl = spawn_waiting(BROKEN, &[]);
    drl.wait_log("config not loaded");
    assert_eq!(stat(&drl, "ratelimit_service_config_load_error"), 1.0);
    assert_eq!(stat(&drl, SERVICE_ERROR), 0.0);
    let e = ask(&drl, 1).await.unwrap_err();
    assert_not_loaded(&e);
    assert_eq!(stat(&drl, SERVICE_ERROR), 1.0);
    // The error names where the file fails.
    let line = drl.wait_log("config not loaded");
    assert!(line.contains("drl.yaml:"), "{line}");
}

/// test/service/ratelimit_test.go:
/// TestServiceHealthStatusAtLeastOneConfigLoaded. NOT_SERVING while no
/// config has loaded (for `ratelimit` and every other name), SERVING once
/// one has. The reference's last step reloads a config with no domains
/// and turns NOT_SERVING; on a file change drl refuses a file that would
/// drop the domain serving (`server.allow_limit_removal` unset) and keeps
/// the config that loaded, so it stays SERVING and keeps deciding.
#[tokio::test]
async fn test_service_health_status_at_least_one_config_loaded() {
    let drl = spawn_waiting(BROKEN, &[]);
    for name in HEALTH_NAMES {
        assert_eq!(
            health(&drl, name).await,
            ServingStatus::NotServing as i32,
            "{name:?}"
        );
    }
    // A config loads (the watcher sees the fixed file).
    std::fs::write(&drl.config, FIXED).unwrap();
    wait_serving(&drl).await;
    for name in HEALTH_NAMES {
        assert_eq!(
            health(&drl, name).await,
            ServingStatus::Serving as i32,
            "{name:?}"
        );
    }
    assert_served(&ask(&drl, 1).await.unwrap());
    assert_eq!(stat(&drl, "ratelimit_service_config_load_success"), 1.0);
    // A config with no domains is refused; the one that loaded stays.
    std::fs::write(&drl.config, "server:\n  max_cost: 5\n").unwrap();
    drl.wait_log("config reload refused");
    assert_eq!(
        health(&drl, "ratelimit").await,
        ServingStatus::Serving as i32
    );
    assert_served(&ask(&drl, 1).await.unwrap());
}

/// Before a config loads, every API answers an error, never a decision:
/// Envoy RLS and limitador's API `UNAVAILABLE`, the native gRPC `Check`
/// `UNAVAILABLE`, `POST /v1/check` and forward-auth 503 with a problem
/// naming the cause; `/readyz` 503, `/healthz` 200 (the process lives).
/// A file fixed while the watcher is off stays unread; SIGHUP loads it,
/// and every API then decides.
#[tokio::test]
async fn every_api_errors_until_sighup_loads_the_config() {
    let drl = spawn_waiting(
        "limits:\n  - name: api\n    quota: 5/s\n    brust: 3\n",
        &["--no-watch"],
    );
    let (status, body) = http_get(&drl.url("/readyz")).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (503, "no rate limit configuration loaded\n")
    );
    assert_eq!(http_get(&drl.url("/healthz")).unwrap().0, 200);

    assert_not_loaded(&ask(&drl, 1).await.unwrap_err());
    let mut native = RateLimiterClient::connect(drl.grpc_url()).await.unwrap();
    let check = || CheckRequest {
        requests: vec![CheckItem {
            limit: "api".into(),
            key: "k".into(),
            cost: Some(1),
            ..Default::default()
        }],
    };
    let e = native.check(check()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert_eq!(e.message(), "no rate limit configuration loaded");
    let mut kuadrant = KuadrantClient::connect(drl.grpc_url()).await.unwrap();
    let e = kuadrant
        .check_rate_limit(request("test-domain", &[HELLO], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let e = kuadrant
        .report(request("test-domain", &[HELLO], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    let post_check = || {
        let body = br#"{"requests":[{"limit":"api","key":"k"}]}"#;
        let json = [("content-type", "application/json")];
        let (status, _, text) = http_request("POST", &drl.url("/v1/check"), &json, body).unwrap();
        (status, text)
    };
    let (status, text) = post_check();
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("no rate limit configuration loaded"),
        "{text}"
    );
    let (status, text) = http_get(&drl.url("/v1/auth/api")).unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("no rate limit configuration loaded"),
        "{text}"
    );

    // Fixed, but not watched: still not loaded.
    std::fs::write(&drl.config, NATIVE).unwrap();
    assert_not_loaded(&ask(&drl, 1).await.unwrap_err());
    drl.signal("HUP");
    wait_serving(&drl).await;
    assert_eq!(http_get(&drl.url("/readyz")).unwrap().0, 200);
    assert_served(&ask(&drl, 1).await.unwrap());
    let r = native.check(check()).await.unwrap().into_inner();
    assert_eq!((r.results.len(), r.results[0].limit), (1, 5));
    let (status, text) = post_check();
    assert_eq!(status, 200, "{text}");
    // A fresh key's first request is admitted.
    let (status, text) = http_get(&drl.url("/v1/auth/api")).unwrap();
    assert_eq!(status, 200, "{text}");
    drl.wait_log("config loaded (SIGHUP)");
}

/// A runtime directory (`--config DIR`, `DRL_WAIT_FOR_CONFIG=1`) whose one
/// file is broken: errors and NOT_SERVING; the file fixed in place is
/// picked up by the directory watcher and served.
#[tokio::test]
async fn a_directory_with_a_broken_file_is_served_once_fixed() {
    let drl = Drl(drl_test_kit::drl::Drl::spawn_dir(
        std::path::Path::new(BIN),
        &[("test_domain.yaml", BROKEN)],
        &[("DRL_WAIT_FOR_CONFIG", "1")],
    ));
    assert_eq!(
        health(&drl, "ratelimit").await,
        ServingStatus::NotServing as i32
    );
    assert_not_loaded(&ask(&drl, 1).await.unwrap_err());
    std::fs::write(drl.config.join("test_domain.yaml"), FIXED).unwrap();
    wait_serving(&drl).await;
    assert_served(&ask(&drl, 1).await.unwrap());
}

/// Without the flag, a config that cannot be loaded stops the start, as
/// before (exit status non-zero, the error on stderr); the flag without a
/// config file (the embedded default always loads) is refused, from the
/// command line or the environment.
#[test]
fn without_the_flag_a_bad_config_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("drl.yaml");
    std::fs::write(&bad, BROKEN).unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&bad)
        .env_remove("DRL_WAIT_FOR_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("drl.yaml:"), "{err}");
    assert!(!err.contains("listening"), "{err}");

    for (args, env) in [
        (&["serve", "--wait-for-config"][..], None),
        (&["serve"][..], Some(("DRL_WAIT_FOR_CONFIG", "1"))),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
        cmd.env_remove("DRL_CONFIG")
            .env_remove("DRL_WAIT_FOR_CONFIG");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("needs --config"), "{args:?}: {err}");
    }
}
