//! The native gRPC API, mirroring `POST /v1/check`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::pb::rate_limiter_server::RateLimiter;
use super::pb::{CheckRequest, CheckResponse, CheckResult};
use crate::engine::{self, CheckError, Engine};
use crate::headers::ceil_ms;
use crate::metrics::{Api, rejected};

/// The `drl.v1.RateLimiter` service.
#[derive(Debug, Clone)]
pub struct NativeService {
    engine: Arc<Engine>,
}

impl NativeService {
    /// A service deciding with `engine`.
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

/// The gRPC status of a refused batch.
pub fn status_of(e: &CheckError) -> Status {
    match e {
        CheckError::UnknownLimit { .. } => Status::not_found(e.to_string()),
        CheckError::Store { .. } => Status::unavailable(e.to_string()),
        _ => Status::invalid_argument(e.to_string()),
    }
}

#[tonic::async_trait]
impl RateLimiter for NativeService {
    async fn check(&self, req: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        check(&self.engine, req.into_inner())
            .await
            .map(Response::new)
    }
}

/// One `Check` call, whichever transport carried it (tonic's service
/// above, or [`super::direct`]): the response, or the status to answer,
/// counted in the metrics either way.
pub async fn check(engine: &Engine, req: CheckRequest) -> Result<CheckResponse, Status> {
    // One clock reading is both the request's start and the decisions'
    // `now`; `check_each` returns the one at its end.
    let started = engine.now();
    fn item(i: &super::pb::CheckItem) -> engine::CheckRequest<'_> {
        engine::CheckRequest {
            limit: &i.limit,
            key: &i.key,
            cost: i.cost.unwrap_or(1),
        }
    }
    // A single check (the usual call) needs no collection at all.
    let one: [engine::CheckRequest<'_>; 1];
    let many: Vec<engine::CheckRequest<'_>>;
    let reqs: &[engine::CheckRequest<'_>] = match req.requests.as_slice() {
        [only] => {
            one = [item(only)];
            &one
        }
        all => {
            many = all.iter().map(item).collect();
            &many
        }
    };
    let limits = engine.limits();
    let mut results = Vec::with_capacity(reqs.len());
    let end = engine
        .check_each(&limits, reqs, started, |d| {
            results.push(CheckResult {
                allowed: d.allowed,
                limit: d.limit,
                remaining: d.remaining,
                retry_after_ms: if d.allowed {
                    None
                } else {
                    d.retry_after.map(ceil_ms)
                },
                reset_after_ms: ceil_ms(d.reset_after),
                delay_ms: ceil_ms(d.delay),
                reason: d.reason.map(|r| r.as_str().to_string()).unwrap_or_default(),
            })
        })
        .await
        .map_err(|e| {
            rejected(Api::GrpcCheck, e.kind());
            status_of(&e)
        })?;
    engine
        .api_metrics
        .observe_ns(Api::GrpcCheck, end.saturating_sub(started));
    Ok(CheckResponse { results })
}
