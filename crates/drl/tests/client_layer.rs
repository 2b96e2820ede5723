//! drl-client's tower layer in front of a real axum app, with each backend
//! (in-process, remote gRPC, remote HTTP against a real `drl serve`):
//! admissions, `RateLimit*` headers, and a 429 problem+json answered
//! exactly as `drl serve`'s forward-auth answers the same denial.

mod common;

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use common::{DEADLINE, Drl};
use drl_client::extract::{by_header, by_peer_ip};
use drl_client::{Client, InProcess, RateLimitLayer, RemoteBuilder};

const CONFIG: &str = r#"
limits:
  - name: hourly
    algorithm: fixed-window
    quota: 3/h
  - name: multi
    algorithm: token-bucket
    quotas: [5/h, 2/h]
"#;

/// Serves `app` on a free loopback port; returns its address.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

fn app(client: Client, limit: &'static str) -> Router {
    Router::new()
        .route("/hello", get(|| async { "hi" }))
        .layer(RateLimitLayer::new(
            client,
            by_header(limit, "x-api-key", None),
        ))
}

/// One answer, headers lower-cased.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

async fn get_with_key(url: &str, key: Option<&str>) -> Answer {
    let mut req = reqwest::Client::new().get(url);
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.text().await.unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

fn h<'a>(a: &'a Answer, name: &str) -> Option<&'a str> {
    a.headers.get(name).map(|v| v.to_str().unwrap())
}

/// The body with `retry_after_ms` and the detail's ms masked (two
/// denials a few ms apart wait a few ms less or more).
fn masked(body: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert!(v["retry_after_ms"].as_u64().unwrap() > 0, "{body}");
    v["retry_after_ms"] = serde_json::json!("MS");
    let detail = v["detail"].as_str().unwrap();
    let cut = detail.rfind("retry in ").expect("detail names the wait");
    v["detail"] = serde_json::json!(format!("{}retry in N ms", &detail[..cut]));
    v
}

/// Three admissions with decreasing `r`, then a 429 identical to what
/// forward-auth answers for a fresh key of the same limit.
async fn limits_headers_and_429(drl: &Drl, client: Client, tag: &str) {
    let addr = serve(app(client, "hourly")).await;
    let url = format!("http://{addr}/hello");
    let key = format!("layer-{tag}");
    for r in [2, 1, 0] {
        let a = get_with_key(&url, Some(&key)).await;
        assert_eq!(a.status, 200, "{tag}: {}", a.body);
        assert_eq!(a.body, "hi");
        assert_eq!(
            h(&a, "ratelimit-policy"),
            Some("\"hourly\";q=3;w=3600"),
            "{tag}"
        );
        let rl = h(&a, "ratelimit").unwrap();
        assert!(
            rl.starts_with(&format!("\"hourly\";r={r};t=")),
            "{tag}: {rl}"
        );
        assert!(h(&a, "retry-after").is_none());
    }
    let denied = get_with_key(&url, Some(&key)).await;
    assert_eq!(denied.status, 429, "{tag}: {}", denied.body);
    assert_eq!(h(&denied, "content-type"), Some("application/problem+json"));
    assert!(h(&denied, "retry-after").unwrap().parse::<u64>().unwrap() >= 1);

    // drl serve's forward-auth, same limit, a fresh key, same state.
    let fa_url = drl.url("/v1/auth/hourly");
    let fa_key = format!("fa-{tag}");
    for _ in 0..3 {
        assert_eq!(get_with_key(&fa_url, Some(&fa_key)).await.status, 200);
    }
    let fa = get_with_key(&fa_url, Some(&fa_key)).await;
    assert_eq!(fa.status, 429);
    let names = |a: &Answer| {
        let mut n: Vec<String> = a
            .headers
            .keys()
            .map(|k| k.as_str().to_string())
            .filter(|k| k != "date")
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&denied), names(&fa), "{tag}: same headers");
    for name in ["content-type", "ratelimit-policy", "content-length"] {
        assert_eq!(h(&denied, name), h(&fa, name), "{tag}: {name}");
    }
    let rl = |a: &Answer| {
        h(a, "ratelimit")
            .unwrap()
            .split(";t=")
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(rl(&denied), rl(&fa), "{tag}");
    assert_eq!(masked(&denied.body), masked(&fa.body), "{tag}");

    // No key: not limited, no headers.
    let free = get_with_key(&url, None).await;
    assert_eq!(free.status, 200);
    assert!(h(&free, "ratelimit").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_limits_with_each_backend_like_forward_auth() {
    let drl = tokio::task::block_in_place(|| Drl::start(CONFIG));
    let in_process = Client::in_process(InProcess::from_file(&drl.config).unwrap());
    limits_headers_and_429(&drl, in_process, "in-process").await;
    // A hang guard as the deadline (the default 100 ms, then fail open,
    // is within reach of a loaded machine: an admission nobody decided).
    let grpc = RemoteBuilder::grpc(drl.grpc_url())
        .deadline(DEADLINE)
        .config_file(&drl.config)
        .unwrap()
        .build()
        .unwrap();
    limits_headers_and_429(&drl, grpc.clone(), "grpc").await;
    assert!(grpc.stats().requests >= 1);
    let http = RemoteBuilder::http(drl.url(""))
        .deadline(DEADLINE)
        .config_file(&drl.config)
        .unwrap()
        .build()
        .unwrap();
    limits_headers_and_429(&drl, http.clone(), "http").await;
    assert!(http.stats().requests >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_without_config_and_by_peer_and_unknown_limit() {
    let drl = tokio::task::block_in_place(|| Drl::start(CONFIG));
    // Without the config, RateLimit-Policy comes from the decision.
    let grpc = RemoteBuilder::grpc(drl.grpc_url())
        .deadline(DEADLINE)
        .build()
        .unwrap();
    let addr = serve(
        Router::new()
            .route("/x", get(|| async { "x" }))
            .layer(RateLimitLayer::new(grpc.clone(), by_peer_ip("multi"))),
    )
    .await;
    let url = format!("http://{addr}/x");
    let a = get_with_key(&url, None).await;
    assert_eq!(a.status, 200);
    assert_eq!(h(&a, "ratelimit-policy"), Some("\"multi\";q=2"));
    assert_eq!(get_with_key(&url, None).await.status, 200);
    let d = get_with_key(&url, None).await;
    assert_eq!(d.status, 429, "{}", d.body);
    // The peer (127.0.0.1) was the key at the server.
    let direct = grpc.check("multi", "127.0.0.1", 1).await.unwrap();
    assert!(!direct.allowed);

    // A limit the server does not know: a 500 problem, not a pass.
    let addr = serve(app(grpc, "nope")).await;
    let a = get_with_key(&format!("http://{addr}/hello"), Some("k")).await;
    assert_eq!(a.status, 500, "{}", a.body);
    assert_eq!(h(&a, "content-type"), Some("application/problem+json"));
    assert!(a.body.contains("limit_error"), "{}", a.body);
}
