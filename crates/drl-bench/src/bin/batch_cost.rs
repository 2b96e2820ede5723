//! A driver for counting the CPU cost per item of a batched check, under
//! `valgrind --tool=callgrind` (instruction counts do not depend on what
//! else the machine runs, unlike wall-clock benchmarks).
//!
//! `batch_cost http|grpc N ITERS` builds the benchmark config
//! (`scripts/bench-server.d/bench.yaml`: gcra 1,000,000/s), then decides
//! ITERS batches of N items (keys `tenant-0..999`) through the whole
//! handler without a network: for `http`, the axum router (JSON parse,
//! decide, JSON write); for `grpc`, protobuf decode, the native service,
//! protobuf encode. Every batch is the same body (built once), after one
//! warm-up batch (keys inserted, clocks calibrated). `scripts/batch-cost`
//! counts instructions only inside `measured_http` / `measured_grpc` and
//! divides by ITERS x N: instructions per item, the per-batch work
//! included.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::Request;
use drl_api::pb::rate_limiter_server::RateLimiter;
use drl_api::pb::{CheckItem, CheckRequest};
use drl_server::grpc::native::NativeService;
use drl_server::http::{AppState, router};
use drl_service::engine::Engine;
use prost::Message;
use tower::ServiceExt;

const CONFIG: &str = include_str!("../../../../scripts/bench-server.d/bench.yaml");

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: batch_cost http|grpc N ITERS";
    anyhow::ensure!(args.len() == 4, "{usage}");
    let n: usize = args[2].parse()?;
    let iters: usize = args[3].parse()?;
    let cfg = drl_config::parse(CONFIG, "bench.yaml").map_err(|e| anyhow::anyhow!("{e}"))?;
    let engine = Arc::new(Engine::new(&cfg, None).map_err(|e| anyhow::anyhow!("{e}"))?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut key = 0usize;
    let mut next_key = || {
        key = (key + 1) % 1000;
        format!("tenant-{key}")
    };
    let checksum = match args[1].as_str() {
        "http" => {
            let app = router(AppState {
                engine,
                metrics: drl_service::metrics::install(),
            });
            let items: Vec<String> = (0..n)
                .map(|_| {
                    format!(
                        "{{\"limit\":\"bench\",\"key\":\"{}\",\"cost\":1}}",
                        next_key()
                    )
                })
                .collect();
            let body = Bytes::from(format!("{{\"requests\":[{}]}}", items.join(",")));
            // Warm up (keys inserted, clocks calibrated), then measure.
            measured_http(&rt, &app, &body, 1)?;
            measured_http(&rt, &app, &body, iters)?
        }
        "grpc" => {
            let svc = NativeService::new(engine);
            let body = CheckRequest {
                requests: (0..n)
                    .map(|_| CheckItem {
                        limit: "bench".into(),
                        key: next_key(),
                        cost: Some(1),
                        ..Default::default()
                    })
                    .collect(),
            }
            .encode_to_vec();
            measured_grpc(&rt, &svc, &body, 1)?;
            measured_grpc(&rt, &svc, &body, iters)?
        }
        _ => anyhow::bail!("{usage}"),
    };
    println!("{checksum}");
    Ok(())
}

/// `iters` HTTP batches through the router; returns the response bytes.
#[inline(never)]
fn measured_http(
    rt: &tokio::runtime::Runtime,
    app: &axum::Router,
    body: &Bytes,
    iters: usize,
) -> anyhow::Result<usize> {
    rt.block_on(async {
        let mut checksum = 0;
        for _ in 0..iters {
            let req = Request::post("/v1/check")
                .header("content-type", "application/json")
                .body(Body::from(body.clone()))?;
            let resp = app.clone().oneshot(req).await?;
            anyhow::ensure!(resp.status() == 200, "status {}", resp.status());
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
            checksum += body.len();
        }
        Ok(checksum)
    })
}

/// `iters` native gRPC batches: decode, check, encode; returns the
/// response bytes.
#[inline(never)]
fn measured_grpc(
    rt: &tokio::runtime::Runtime,
    svc: &NativeService,
    body: &[u8],
    iters: usize,
) -> anyhow::Result<usize> {
    rt.block_on(async {
        let mut checksum = 0;
        for _ in 0..iters {
            let req = CheckRequest::decode(body)?;
            let resp = svc
                .check(tonic::Request::new(req))
                .await
                .map_err(|s| anyhow::anyhow!("{s}"))?;
            checksum += resp.into_inner().encode_to_vec().len();
        }
        Ok(checksum)
    })
}
