//! drl-client's `ReserveLayer` in front of a real axum app, remote over
//! gRPC and HTTP against a real `drl serve`: the estimate is reserved in
//! the service, the response's usage header settles it there (refund,
//! charge into debt), and a denial is a 429.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::{DEADLINE, Drl, HOUR_MARGIN};
use drl_client::extract::RequestView;
use drl_client::{Client, FailurePolicy, RemoteBuilder, ReserveLayer, Target, UsageHeader};

const CONFIG: &str = "
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 100/h
";

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Estimate from `x-estimate`; the handler reports `x-use` as its usage.
fn app(client: Client) -> Router {
    Router::new()
        .route(
            "/",
            get(|h: http::HeaderMap| async move {
                let used = h.get("x-use").cloned().unwrap();
                ([("x-usage-tokens", used)], "done")
            }),
        )
        .layer(ReserveLayer::new(
            client,
            |r: &RequestView<'_>| {
                let est = r.header("x-estimate")?.parse().ok()?;
                Some(Target::new("tokens", r.header("x-key")?, est))
            },
            UsageHeader::new("x-usage-tokens"),
        ))
}

async fn send(url: &str, key: &str, estimate: u64, used: u64) -> u16 {
    reqwest::Client::new()
        .get(url)
        .header("x-key", key)
        .header("x-estimate", estimate.to_string())
        .header("x-use", used.to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn budget(client: Client, key: &str) {
    let url = format!("http://{}/", serve(app(client.clone())).await);
    let left = |c: Client| async move {
        let d = c.check("tokens", key, 0).await.unwrap();
        (d.allowed, d.remaining)
    };
    assert_eq!(send(&url, key, 30, 12).await, 200);
    assert_eq!(left(client.clone()).await, (true, 88), "18 refunded");
    assert_eq!(send(&url, key, 10, 50).await, 200);
    assert_eq!(left(client.clone()).await, (true, 38), "40 charged");
    assert_eq!(send(&url, key, 40, 1).await, 429, "40 > 38 left");
    assert_eq!(
        left(client.clone()).await,
        (true, 38),
        "a denial consumes nothing"
    );
    assert_eq!(send(&url, key, 30, 90).await, 200);
    assert_eq!(left(client.clone()).await, (false, 0), "in debt");
    assert_eq!(send(&url, key, 1, 1).await, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_layer_settles_in_a_real_service_over_grpc_and_http() {
    common::clear_of_window_end(Duration::from_secs(3600), HOUR_MARGIN);
    let drl = tokio::task::block_in_place(|| Drl::start(CONFIG));
    let make = |b: RemoteBuilder| {
        b.deadline(DEADLINE)
            .on_failure(FailurePolicy::Deny)
            .denial_cache(None)
            .build()
            .unwrap()
    };
    budget(make(RemoteBuilder::grpc(drl.grpc_url())), "grpc").await;
    budget(make(RemoteBuilder::http(drl.url(""))), "http").await;
}
