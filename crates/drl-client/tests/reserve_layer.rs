//! `ReserveLayer` in front of an axum router, in process, on a manual
//! clock: each request reserves its estimate, the response's usage header
//! settles it (refund below the estimate, charge above, even into debt),
//! a missing usage or a service error keeps the estimate, and a denial
//! answers as `RateLimitLayer` denies.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use drl_client::extract::RequestView;
use drl_client::{Client, InProcess, RateLimitLayer, ReserveLayer, Target, UsageHeader};
use drl_core::ManualClock;
use http::{HeaderMap, Request, Response, StatusCode};
use tower::{ServiceBuilder, ServiceExt};

/// 100 tokens per hour: nothing is repaid during a test.
const CONFIG: &str = r#"
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 100/h
"#;

fn client() -> Client {
    Client::in_process(
        InProcess::from_yaml(CONFIG, "test")
            .unwrap()
            .with_clock(Arc::new(ManualClock::new(1_000_000_000))),
    )
}

/// Key `x-key`, estimate `x-estimate`.
fn classify(req: &RequestView<'_>) -> Option<Target> {
    let key = req.header("x-key")?;
    let estimate = req.header("x-estimate").map_or(10, |c| c.parse().unwrap());
    Some(Target::new("tokens", key, estimate))
}

/// Answers with `x-usage-tokens` set to the request's `x-use`, if any.
fn app(client: Client) -> Router {
    Router::new()
        .route(
            "/",
            get(|headers: HeaderMap| async move {
                let mut resp = Response::new(Body::from("done"));
                if let Some(u) = headers.get("x-use") {
                    resp.headers_mut().insert("x-usage-tokens", u.clone());
                }
                resp
            }),
        )
        .layer(ReserveLayer::new(
            client,
            classify,
            UsageHeader::new("x-usage-tokens"),
        ))
}

fn request(key: &str, estimate: u64, used: Option<u64>) -> Request<Body> {
    let mut b = Request::builder()
        .uri("/")
        .header("x-key", key)
        .header("x-estimate", estimate.to_string());
    if let Some(u) = used {
        b = b.header("x-use", u.to_string());
    }
    b.body(Body::empty()).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

async fn remaining(client: &Client, key: &str) -> (bool, u64) {
    let d = client.check("tokens", key, 0).await.unwrap();
    (d.allowed, d.remaining)
}

#[test]
fn settles_at_the_usage_header_refunding_and_charging() {
    rt().block_on(async {
        let c = client();
        let app = app(c.clone());
        // Reserve 30, use 12: 18 refunded.
        let r = app
            .clone()
            .oneshot(request("t", 30, Some(12)))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().contains_key("ratelimit"));
        assert_eq!(remaining(&c, "t").await, (true, 88));
        // Reserve 10, use 50: 40 more charged.
        let r = app
            .clone()
            .oneshot(request("t", 10, Some(50)))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(remaining(&c, "t").await, (true, 38));
        // Reserve 30 (fits), use 90: 60 charged past the limit, into debt.
        let r = app
            .clone()
            .oneshot(request("t", 30, Some(90)))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(remaining(&c, "t").await, (false, 0));
        // In debt: even an estimate of 1 is denied, as RateLimitLayer denies.
        let denied = app.clone().oneshot(request("t", 1, Some(1))).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        let plain = Router::new()
            .route("/", get(|| async { "x" }))
            .layer(RateLimitLayer::new(c.clone(), classify));
        let same = plain.oneshot(request("t", 1, None)).await.unwrap();
        assert_eq!(same.status(), StatusCode::TOO_MANY_REQUESTS);
        for h in [
            "ratelimit",
            "ratelimit-policy",
            "retry-after",
            "content-type",
        ] {
            assert_eq!(denied.headers().get(h), same.headers().get(h), "{h}");
        }
        let a = axum::body::to_bytes(denied.into_body(), 1 << 16)
            .await
            .unwrap();
        let b = axum::body::to_bytes(same.into_body(), 1 << 16)
            .await
            .unwrap();
        assert_eq!(a, b);
        // Another key is untouched.
        assert_eq!(remaining(&c, "u").await, (true, 100));
    });
}

#[test]
fn no_usage_keeps_the_estimate_and_a_malformed_one_too() {
    rt().block_on(async {
        let c = client();
        let app = app(c.clone());
        let r = app.clone().oneshot(request("t", 25, None)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(remaining(&c, "t").await, (true, 75));
        let mut req = request("t", 25, None);
        req.headers_mut().insert("x-use", "lots".parse().unwrap());
        assert_eq!(app.oneshot(req).await.unwrap().status(), StatusCode::OK);
        assert_eq!(remaining(&c, "t").await, (true, 50));
    });
}

#[test]
fn an_estimate_above_what_remains_is_denied_and_consumes_nothing() {
    rt().block_on(async {
        let c = client();
        let app = app(c.clone());
        let r = app
            .clone()
            .oneshot(request("t", 90, Some(90)))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let r = app
            .clone()
            .oneshot(request("t", 20, Some(1)))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(remaining(&c, "t").await, (true, 10));
        // An unclassified request passes untouched.
        let free = Request::builder().uri("/").body(Body::empty()).unwrap();
        let r = app.oneshot(free).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(!r.headers().contains_key("ratelimit"));
        assert_eq!(remaining(&c, "t").await, (true, 10));
    });
}

#[test]
fn a_service_error_keeps_the_estimate_and_a_callback_decides_the_actual() {
    rt().block_on(async {
        let c = client();
        let failing = ServiceBuilder::new()
            .layer(ReserveLayer::new(
                c.clone(),
                classify,
                UsageHeader::new("x-usage-tokens"),
            ))
            .service_fn(|_req: Request<Body>| async {
                Err::<Response<Body>, _>(std::io::Error::other("model down"))
            });
        assert!(failing.oneshot(request("t", 40, Some(1))).await.is_err());
        assert_eq!(remaining(&c, "t").await, (true, 60));
        // A callback: the actual is twice the body-length header.
        let doubled = ServiceBuilder::new()
            .layer(ReserveLayer::new(
                c.clone(),
                classify,
                |r: &Response<Body>| -> Option<u64> {
                    let n: u64 = r.headers().get("x-n")?.to_str().ok()?.parse().ok()?;
                    Some(2 * n)
                },
            ))
            .service_fn(|_req: Request<Body>| async {
                let mut r = Response::new(Body::empty());
                r.headers_mut().insert("x-n", "5".parse().unwrap());
                Ok::<_, Infallible>(r)
            });
        let r = doubled.oneshot(request("t", 30, None)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        // 60 - 30 reserved + 20 refunded.
        assert_eq!(remaining(&c, "t").await, (true, 50));
    });
}

#[test]
fn a_failed_reserve_answers_a_problem() {
    rt().block_on(async {
        let c = client();
        let app = Router::new()
            .route("/", get(|| async { "x" }))
            .layer(ReserveLayer::new(
                c,
                |_: &RequestView<'_>| Some(Target::new("nope", "k", 1)),
                UsageHeader::new("x-usage-tokens"),
            ));
        let req = Request::builder().uri("/").body(Body::empty()).unwrap();
        let r = app.oneshot(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    });
}
