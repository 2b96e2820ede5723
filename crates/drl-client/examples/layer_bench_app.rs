//! The server side of the layer benchmark (scripts/client-bench): the same
//! axum handler twice, bare on one port and behind `RateLimitLayer` with
//! the in-process backend on another, so `wrk` can alternate between them.
//! The layer wraps the whole `Router` (`Layer::layer(router)`, served with
//! `into_make_service`), the usual way to put one middleware in front of
//! an app: `Router::layer` would instead wrap each route, and axum clones
//! that per-route stack for every request (~900 instructions, the no-op
//! port below, whatever the layer does).
//!
//! ```text
//! cargo run --release -p drl-client --example layer_bench_app -- BARE_ADDR LAYERED_ADDR [NOOP_ADDR]
//! ```
//!
//! With `NOOP_ADDR`, a third port serves the handler behind a layer that
//! does nothing (`MapResponseLayer` with the identity): what axum's
//! per-route layer plumbing costs by itself, whatever the layer
//! (`NOOP=1 scripts/layer-instructions`).

use axum::response::Response;
use axum::routing::get;
use axum::{Router, ServiceExt};
use drl_client::extract::by_header;
use drl_client::{Client, InProcess, RateLimitLayer};
use tower::Layer as _;
use tower::util::MapResponseLayer;

/// Every request is admitted: the benchmark measures the layer's cost,
/// not 429s (which are cheaper than the handler).
const CONFIG: &str = "limits:\n  - name: bench\n    algorithm: gcra\n    quota: 1000000000/s\n";

async fn hello() -> &'static str {
    "hello\n"
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: layer_bench_app BARE_ADDR LAYERED_ADDR [NOOP_ADDR]";
    let bare_addr = args.next().ok_or(usage)?;
    let layered_addr = args.next().ok_or(usage)?;
    if let Some(noop_addr) = args.next() {
        let noop = Router::new()
            .route("/", get(hello))
            .layer(MapResponseLayer::new(|r: Response| r));
        let l3 = tokio::net::TcpListener::bind(&noop_addr).await?;
        eprintln!("layer_bench_app: no-op layer http://{}", l3.local_addr()?);
        tokio::spawn(async move { axum::serve(l3, noop).await });
    }
    let client = Client::in_process(InProcess::from_yaml(CONFIG, "<bench>")?);
    let bare = Router::new().route("/", get(hello));
    let layered = RateLimitLayer::new(client, by_header("bench", "x-api-key", Some("anonymous")))
        .layer(Router::new().route("/", get(hello)));
    let l1 = tokio::net::TcpListener::bind(&bare_addr).await?;
    let l2 = tokio::net::TcpListener::bind(&layered_addr).await?;
    eprintln!(
        "layer_bench_app: bare http://{} layered http://{}",
        l1.local_addr()?,
        l2.local_addr()?
    );
    let a = tokio::spawn(async move { axum::serve(l1, bare).await });
    let b = tokio::spawn(async move {
        axum::serve(
            l2,
            ServiceExt::<axum::extract::Request>::into_make_service(layered),
        )
        .await
    });
    let _ = tokio::try_join!(a, b)?;
    Ok(())
}
