//! `/metrics` (Prometheus text) and `/healthz` on a small axum listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::limiter::Snapshots;
use crate::nfqueue::kernel_stats;
use crate::stats::Stats;

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// Counters.
    pub stats: Arc<Stats>,
    /// Class state.
    pub snaps: Snapshots,
    /// Set while the packet loop runs with its rules in place.
    pub ready: Arc<AtomicBool>,
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    let body = s.stats.render(&s.snaps, kernel_stats(s.stats.queue));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

async fn healthz(State(s): State<HttpState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (
            StatusCode::OK,
            format!("ok live_nodes={}\n", s.snaps.live_nodes()),
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n".to_string())
    }
}

/// Binds `addr` and serves until the runtime stops.
pub async fn serve(addr: SocketAddr, state: HttpState) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("metrics listener {addr} (config `listen:`): {e}"),
        )
    })?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(state);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "metrics listener stopped");
        }
    });
    Ok(local)
}
