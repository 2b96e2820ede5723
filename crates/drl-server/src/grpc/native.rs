//! The native gRPC API, mirroring `POST /v1/check`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use drl_api::pb::rate_limiter_server::RateLimiter;
use drl_api::pb::{CheckRequest, CheckResponse};
use drl_api::wire::ResultFields;
use drl_service::engine::{self, CheckError, Engine};
use drl_service::metrics::{Api, rejected};

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
        CheckError::Store {
            error: drl_store::StoreError::Invalid(_),
            ..
        } => Status::invalid_argument(e.to_string()),
        CheckError::Store { .. } | CheckError::NotLoaded => Status::unavailable(e.to_string()),
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
/// above, or [`super::hot`] when [`drl_api::wire`] does not take the
/// message): the response, or the status to answer, counted in the
/// metrics either way.
pub async fn check(engine: &Engine, req: CheckRequest) -> Result<CheckResponse, Status> {
    fn item(i: &drl_api::pb::CheckItem) -> engine::CheckRequest<'_> {
        engine::CheckRequest {
            limit: &i.limit,
            key: &i.key,
            cost: i.cost.unwrap_or(1),
            // An unknown mode is refused below, before anything is decided.
            op: engine::Op::from_proto(i.mode, i.reservation_id).unwrap_or_default(),
        }
    }
    for (index, i) in req.requests.iter().enumerate() {
        let op = engine::Op::from_proto(i.mode, i.reservation_id);
        let problem = match op {
            None => Some(format!("unknown mode {}", i.mode)),
            Some(engine::Op::Settle(0) | engine::Op::Release(0)) => Some(
                "SETTLE and RELEASE need `reservation_id` (the id a RESERVE answered)".to_string(),
            ),
            Some(engine::Op::Settle(_) | engine::Op::Release(_)) => None,
            Some(_) if i.reservation_id != 0 => {
                Some("`reservation_id` goes with SETTLE or RELEASE only".to_string())
            }
            Some(_) => None,
        };
        if let Some(p) = problem {
            rejected(Api::GrpcCheck, "invalid_mode");
            return Err(Status::invalid_argument(format!("requests[{index}]: {p}")));
        }
    }
    // A single check (the usual call) needs no collection at all (and
    // keeps this future small: an inline batch here would grow every
    // call's allocation on the hot path, whose future holds this one).
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
    let mut results = Vec::with_capacity(reqs.len());
    decide(engine, reqs, |r| results.push(r.message())).await?;
    Ok(CheckResponse { results })
}

/// Decides a `Check` call's checks, giving each result's fields to `emit`
/// in order; the status to answer for a refused batch. Counted in the
/// metrics either way.
pub async fn decide(
    engine: &Engine,
    reqs: &[engine::CheckRequest<'_>],
    mut emit: impl FnMut(&ResultFields),
) -> Result<(), Status> {
    // One clock reading is both the request's start and the decisions'
    // `now`; `check_each` returns the one at its end.
    let started = engine.now();
    let limits = engine.limits();
    let end = engine
        .check_each(&limits, reqs, started, |o| {
            emit(&ResultFields::of_outcome(&o))
        })
        .await;
    counted(engine, started, end)
}

/// [`decide`] without a future, for a call that arrived at `started`
/// (its decisions' `now`), when every check's limit is in memory
/// ([`Engine::check_now`]); `None`, nothing decided, otherwise.
pub fn decide_now(
    engine: &Engine,
    reqs: &[engine::CheckRequest<'_>],
    started: u64,
    mut emit: impl FnMut(&ResultFields),
) -> Option<Result<(), Status>> {
    let limits = engine.limits();
    let end = engine.check_now(&limits, reqs, started, |o| {
        emit(&ResultFields::of_outcome(&o))
    })?;
    Some(counted(engine, started, end))
}

/// A decided call in the metrics: its latency, or its refusal.
fn counted(engine: &Engine, started: u64, end: Result<u64, CheckError>) -> Result<(), Status> {
    let end = end.map_err(|e| {
        rejected(Api::GrpcCheck, e.kind());
        status_of(&e)
    })?;
    engine
        .api_metrics
        .observe_ns(Api::GrpcCheck, end.saturating_sub(started));
    Ok(())
}
