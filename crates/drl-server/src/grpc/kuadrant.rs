//! limitador's own API, `kuadrant.service.ratelimit.v1.RateLimitService`
//! (`CheckRateLimit`, `Report`), on the limitador namespaces
//! ([`drl_service::limitador::kuadrant`]). Answered as limitador-server's
//! handler answers (`limitador-server/src/envoy_rls/kuadrant_service.rs`):
//! the overall code only; UNKNOWN for an empty domain; OK for a namespace
//! with no limits; `Report` answers OK once counted. Before a config has
//! loaded (`drl serve --wait-for-config`), `UNAVAILABLE`.

use std::sync::Arc;

use drl_api::kuadrant::rate_limit_service_server::RateLimitService;
use drl_api::rls_request::RequestView;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use drl_service::engine::{self, Engine};
use drl_service::limitador::kuadrant;
use drl_service::limits::Limits;
use drl_service::metrics::{Api, rejected};

/// The `kuadrant.service.ratelimit.v1.RateLimitService`.
#[derive(Debug, Clone)]
pub struct KuadrantService {
    engine: Arc<Engine>,
}

impl KuadrantService {
    /// A service deciding with `engine`.
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

fn answer(code: Code) -> Response<RateLimitResponse> {
    Response::new(RateLimitResponse {
        overall_code: code as i32,
        ..Default::default()
    })
}

/// Before the first config has loaded (`--wait-for-config`): an error,
/// never OK (limitador's answer for a namespace without limits).
fn not_loaded(limits: &Limits) -> Result<(), Status> {
    if limits.loaded {
        return Ok(());
    }
    rejected(Api::EnvoyRls, "no_config");
    Err(Status::unavailable(engine::NOT_LOADED))
}

#[tonic::async_trait]
impl RateLimitService for KuadrantService {
    async fn check_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = self.engine.now();
        let req = req.into_inner();
        if req.domain.is_empty() {
            return Ok(answer(Code::Unknown));
        }
        let limits = self.engine.limits();
        not_loaded(&limits)?;
        let Some(rules) = limits.limitador.get(&req.domain) else {
            return Ok(answer(Code::Ok));
        };
        let view = RequestView::of(&req);
        let fits = kuadrant::check(&self.engine, &limits, rules, &view.descriptors).await?;
        let took = self.engine.now().saturating_sub(started);
        self.engine.api_metrics.observe_ns(Api::EnvoyRls, took);
        Ok(answer(if fits { Code::Ok } else { Code::OverLimit }))
    }

    async fn report(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = self.engine.now();
        let req = req.into_inner();
        if req.domain.is_empty() {
            return Ok(answer(Code::Unknown));
        }
        let limits = self.engine.limits();
        not_loaded(&limits)?;
        let Some(rules) = limits.limitador.get(&req.domain) else {
            return Ok(answer(Code::Ok));
        };
        let hits = u64::from(req.hits_addend.max(1));
        let view = RequestView::of(&req);
        kuadrant::report(&self.engine, &limits, rules, &view.descriptors, hits).await?;
        let took = self.engine.now().saturating_sub(started);
        self.engine.api_metrics.observe_ns(Api::EnvoyRls, took);
        Ok(answer(Code::Ok))
    }
}
