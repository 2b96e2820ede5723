//! A small axum service limited per API key (see examples/axum-app).
//!
//! ```text
//! cargo run -p drl-client --example axum_app -- --config examples/axum-app/drl.yaml
//!     [--grpc http://127.0.0.1:8081 | --http http://127.0.0.1:8080] [--listen 127.0.0.1:3000]
//! ```

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use drl_client::extract::RequestView;
use drl_client::{Client, FailurePolicy, InProcess, RateLimitLayer, RemoteBuilder, Target};

const USAGE: &str = "usage: axum_app --config FILE [--grpc URL | --http URL] [--listen ADDR]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = None;
    let mut remote: Option<RemoteBuilder> = None;
    let mut listen: SocketAddr = "127.0.0.1:3000".parse()?;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(USAGE);
        match a.as_str() {
            "--config" => config = Some(value()?),
            "--grpc" => remote = Some(RemoteBuilder::grpc(value()?)),
            "--http" => remote = Some(RemoteBuilder::http(value()?)),
            "--listen" => listen = value()?.parse()?,
            _ => return Err(USAGE.into()),
        }
    }
    let config = config.ok_or(USAGE)?;
    let client = match remote {
        None => Client::in_process(InProcess::from_file(&config)?),
        Some(r) => r
            .config_file(&config)?
            .on_failure(FailurePolicy::Local(0.5))
            .build()?,
    };
    // /search costs 5 on `search`; everything else 1 on `per-key`.
    let classify = |req: &RequestView<'_>| {
        let key = req.header("x-api-key").unwrap_or("anonymous");
        Some(if req.uri.path() == "/search" {
            Target::new("search", key, 5)
        } else {
            Target::new("per-key", key, 1)
        })
    };
    let app = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .route("/search", get(|| async { "results\n" }))
        .layer(RateLimitLayer::new(client.clone(), classify));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!(
        "axum_app: listening on http://{} ({client:?})",
        listener.local_addr()?
    );
    axum::serve(listener, app).await?;
    Ok(())
}
