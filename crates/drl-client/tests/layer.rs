//! The tower layer in front of an axum router, driven through
//! `tower::ServiceExt::oneshot` (no sockets: the end-to-end tests over
//! TCP, with every backend, are crates/drl/tests/client_layer.rs): every
//! answer is the one the client API and drl-http give for the same check
//! (status, body, `RateLimit-Policy`, `RateLimit`, `Retry-After`), for
//! short (inline) and long (heap) keys, admissions, denials and checks that
//! fail.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use drl_client::extract::RequestView;
use drl_client::{Client, InProcess, RateLimitLayer, Target};
use drl_core::ManualClock;
use http::{Request, Response, StatusCode, header};
use proptest::prelude::*;
use tower::ServiceExt;

const CONFIG: &str = r#"
server:
  max_key_bytes: 100
  max_cost: 50
limits:
  - name: one
    algorithm: gcra
    quota: 3/s
  - name: multi
    algorithm: token-bucket
    quotas: [5/m, 2/s]
  - name: window
    algorithm: fixed-window
    quota: 4/s
"#;

fn client(clock: Arc<ManualClock>) -> Client {
    Client::in_process(
        InProcess::from_yaml(CONFIG, "test")
            .unwrap()
            .with_clock(clock),
    )
}

/// Limit `x-limit`, key `x-key`, cost `x-cost` (default 1); no `x-key`:
/// not limited.
fn classify(req: &RequestView<'_>) -> Option<Target> {
    let key = req.header("x-key")?;
    let limit = req.header("x-limit").unwrap_or("one").to_owned();
    let cost = req.header("x-cost").map_or(1, |c| c.parse().unwrap());
    Some(Target::new(limit, key, cost))
}

fn app(client: Client) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(client, classify))
}

fn request(limit: &str, key: Option<&str>, cost: u64) -> Request<Body> {
    let mut b = Request::builder()
        .uri("/")
        .header("x-limit", limit)
        .header("x-cost", cost.to_string());
    if let Some(k) = key {
        b = b.header("x-key", k);
    }
    b.body(Body::empty()).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

async fn answer(app: &Router, req: Request<Body>) -> (Response<()>, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    (
        Response::from_parts(parts, ()),
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

#[derive(Debug, Clone)]
struct Step {
    limit: &'static str,
    key: String,
    cost: u64,
    advance_ms: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let key = prop_oneof![
        (0..4u8).prop_map(|i| format!("k{i}")),
        // Longer than Key::INLINE (56): kept on the heap.
        (0..2u8).prop_map(|i| format!("{i}{}", "long-".repeat(14))),
        // Longer than max_key_bytes (100): invalid.
        Just("x".repeat(101)),
    ];
    let step = (
        prop::sample::select(vec!["one", "multi", "window", "nope"]),
        key,
        prop_oneof![4 => 0..4u64, 1 => 49..52u64],
        prop_oneof![2 => Just(0u64), 1 => 0..1500u64],
    )
        .prop_map(|(limit, key, cost, advance_ms)| Step {
            limit,
            key,
            cost,
            advance_ms,
        });
    prop::collection::vec(step, 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The layered app answers each request exactly as a twin client
    /// (same config, same clock) decides it, formatted by drl-http: the
    /// same status, body and headers.
    #[test]
    fn the_layer_answers_as_the_client_decides(steps in steps()) {
        let start = 1_000_000_000_000;
        let (ca, cb) = (Arc::new(ManualClock::new(start)), Arc::new(ManualClock::new(start)));
        let layered = app(client(ca.clone()));
        let twin = client(cb.clone());
        let rt = rt();
        for (i, s) in steps.iter().enumerate() {
            ca.advance(s.advance_ms * 1_000_000);
            cb.advance(s.advance_ms * 1_000_000);
            let (resp, body) = rt.block_on(answer(&layered, request(s.limit, Some(&s.key), s.cost)));
            let h = |name: &str| resp.headers().get(name).cloned();
            match rt.block_on(twin.check(s.limit, &s.key, s.cost)) {
                Err(e) => {
                    let (status, kind) = match e {
                        drl_client::Error::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_key"),
                        _ => (StatusCode::INTERNAL_SERVER_ERROR, "limit_error"),
                    };
                    let want = drl_http::problem::body(
                        status, kind, status.canonical_reason().unwrap(), &e.to_string());
                    prop_assert_eq!(resp.status(), status, "step {} {:?}", i, s);
                    prop_assert_eq!(body, want, "step {} {:?}", i, s);
                    prop_assert!(h("ratelimit").is_none());
                }
                Ok(d) => {
                    let policy = twin.policy_header(s.limit, &d);
                    prop_assert_eq!(h("ratelimit-policy"), Some(policy.clone()), "step {} {:?}", i, s);
                    prop_assert_eq!(h("ratelimit"), Some(drl_http::headers::ratelimit(&policy, &d)), "step {} {:?}", i, s);
                    prop_assert_eq!(h("retry-after"), drl_http::headers::retry_after(&d), "step {} {:?}", i, s);
                    if d.allowed {
                        prop_assert_eq!(resp.status(), StatusCode::OK, "step {} {:?}", i, s);
                        prop_assert_eq!(body, "hello");
                    } else {
                        prop_assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "step {} {:?}", i, s);
                        prop_assert_eq!(h("content-type").unwrap(), "application/problem+json");
                        prop_assert_eq!(body, drl_http::problem::rate_limited_body(
                            s.limit, s.cost, StatusCode::TOO_MANY_REQUESTS, &policy, &d));
                    }
                }
            }
        }
    }
}

#[test]
fn an_unclassified_request_passes_without_headers_and_costs_nothing() {
    let clock = Arc::new(ManualClock::new(1_000_000_000_000));
    let app = app(client(clock));
    let rt = rt();
    for _ in 0..5 {
        let (resp, body) = rt.block_on(answer(&app, request("one", None, 1)));
        assert_eq!((resp.status(), body.as_str()), (StatusCode::OK, "hello"));
        assert!(resp.headers().get("ratelimit").is_none());
        assert!(resp.headers().get("ratelimit-policy").is_none());
    }
    // The 3/s budget is untouched: three admissions, then a denial.
    for i in 0..4 {
        let (resp, _) = rt.block_on(answer(&app, request("one", Some("k"), 1)));
        let want = if i < 3 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(resp.status(), want, "request {i}");
    }
}

#[test]
fn a_denial_status_other_than_429_is_used() {
    let clock = Arc::new(ManualClock::new(1_000_000_000_000));
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(client(clock), classify).deny_status(StatusCode::FORBIDDEN));
    let rt = rt();
    let statuses: Vec<_> = (0..4)
        .map(|_| rt.block_on(answer(&app, request("one", Some("k"), 1))).0)
        .collect();
    assert_eq!(statuses[2].status(), StatusCode::OK);
    let denied = &statuses[3];
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
    assert_eq!(denied.headers()[header::RETRY_AFTER], "1");
    let rl = denied.headers()["ratelimit"].to_str().unwrap();
    assert!(rl.starts_with("\"one\";r=0;t="), "{rl}");
}
