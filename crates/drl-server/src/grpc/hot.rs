//! The gRPC listener's hot path, on the `h2` crate directly
//! ([`super::direct`]): Envoy RLS v3 `ShouldRateLimit` and the native
//! `drl.v1.RateLimiter/Check` are answered here, by the same functions
//! tonic's services call ([`super::rls::should_rate_limit`],
//! [`super::native::check`]), behind the same token check and request
//! deadline as [`GrpcGuard`]. Every other stream goes to [`GrpcGuard`]
//! itself (tonic's routes), so whatever else the listener answers (today
//! `UNIMPLEMENTED` for unknown paths) answers exactly as before.
//!
//! Errors are tonic's to the byte: the same statuses and messages, sent by
//! [`tonic::Status::into_http`]; a request message that does not decode is
//! `INVALID_ARGUMENT` with prost's error (the client's fault, not the
//! server's: tonic-prost would answer `INTERNAL`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use h2::RecvStream;
use h2::server::SendResponse;
use http::Request;
use prost::Message as _;
use tonic::Status;

use super::direct::{self, RecvBody, Unary};
use crate::auth::{Auth, Class};
use crate::guard::GrpcGuard;
use drl_api::frame;
use drl_api::pb::CheckRequest;
use drl_api::rls_request::{self, RequestView};
use drl_api::wire;
use drl_service::engine::Engine;
use drl_service::metrics::{Api, rejected};

/// The path of the native `Check`.
pub const CHECK_PATH: &str = "/drl.v1.RateLimiter/Check";
/// The path of Envoy RLS v3 `ShouldRateLimit`.
pub const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A method of the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `drl.v1.RateLimiter/Check`.
    Check,
    /// `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
    Rls,
}

impl Method {
    fn api(self) -> Api {
        match self {
            Method::Check => Api::GrpcCheck,
            Method::Rls => Api::EnvoyRls,
        }
    }
}

/// The gRPC listener's service on the direct transport.
#[derive(Clone)]
pub struct HotPath {
    engine: Arc<Engine>,
    auth: Auth,
    timeout: Duration,
    max_message: usize,
    fallback: GrpcGuard,
    /// The worker threads' runtime (the one that built this), where large
    /// batches run: off the connection's thread, spread over the workers.
    workers: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for HotPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotPath")
            .field("timeout", &self.timeout)
            .field("max_message", &self.max_message)
            .finish_non_exhaustive()
    }
}

impl HotPath {
    /// Decides with `engine`; `fallback` (tonic's routes behind the same
    /// token check and deadline) answers every other path; requests over
    /// `max_message` bytes are refused.
    pub fn new(engine: Arc<Engine>, fallback: GrpcGuard, max_message: usize) -> Self {
        Self {
            engine,
            auth: fallback.auth.clone(),
            timeout: fallback.timeout,
            max_message,
            fallback,
            workers: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

impl Unary for HotPath {
    type Method = Method;

    fn route(&self, path: &str) -> Option<Method> {
        match path {
            RLS_PATH => Some(Method::Rls),
            CHECK_PATH => Some(Method::Check),
            _ => None,
        }
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn admit(&self, _method: Method, head: &http::request::Parts) -> Result<(), Status> {
        let authorization = head.headers.get(http::header::AUTHORIZATION);
        self.admit_token(authorization.map(|v| v.as_bytes()))
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn timed_out(&self, method: Method) -> Status {
        rejected(method.api(), "timeout");
        Status::deadline_exceeded(format!(
            "the request took longer than request_timeout_ms ({} ms)",
            self.timeout.as_millis()
        ))
    }

    async fn call(
        &self,
        method: Method,
        head: &http::request::Parts,
        msg: Bytes,
    ) -> Result<Bytes, Status> {
        // Traced (`tracing:` on): the RLS call runs in its span, boxed;
        // off, this is one atomic load.
        if method == Method::Rls
            && let Some(span) = crate::trace::rls_span(&head.headers)
        {
            return crate::trace::within(span, self.decide(method, msg)).await;
        }
        self.decide(method, msg).await
    }

    async fn fallback(&self, req: Request<RecvStream>, respond: SendResponse<Bytes>) {
        let mut svc = self.fallback.clone();
        let req = req.map(RecvBody::new);
        let Ok(resp) = tower::Service::call(&mut svc, req).await;
        direct::send_http(respond, resp).await;
    }
}

impl HotPath {
    /// The token check of [`GrpcGuard`], given the first `authorization`
    /// header, as a status.
    fn admit_token(&self, authorization: Option<&[u8]>) -> Result<(), Status> {
        self.auth
            .check_authorization(Class::Api, authorization, "grpc")
            .map_err(|d| {
                let resp = d.grpc_response();
                Status::from_header_map(resp.headers())
                    .unwrap_or_else(|| Status::unauthenticated(""))
            })
    }

    /// Decides one call (large batches on their own task).
    async fn decide(&self, method: Method, msg: Bytes) -> Result<Bytes, Status> {
        if msg.len() < SPAWN_AT {
            return answer(&self.engine, method, msg).await;
        }
        // A large batch runs as its own task on the worker threads, so
        // that one connection's large batches spread over them (a
        // connection's streams otherwise share its task, and its thread:
        // crate::conn_threads). Dropped (the deadline, a reset), the task
        // is aborted.
        let engine = self.engine.clone();
        let call = async move { answer(&engine, method, msg).await };
        // A traced call's span goes along into the task.
        let work = match crate::trace::current() {
            Some(span) => futures::future::Either::Left(crate::trace::within(span, call)),
            None => futures::future::Either::Right(call),
        };
        let mut task = AbortOnDrop(match &self.workers {
            Some(workers) => workers.spawn(work),
            None => tokio::spawn(work),
        });
        match (&mut task.0).await {
            Ok(r) => r,
            Err(e) => Err(Status::internal(format!("the request failed: {e}"))),
        }
    }
}

/// Request messages of this many bytes or more are decided on their own
/// task (a native batch of ~250 items; an RLS request is far smaller).
const SPAWN_AT: usize = 8 * 1024;

/// Aborts its task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One hot-path call: `msg` (a request message without its prefix)
/// decoded, decided by `engine`, and the response framed.
pub async fn answer(engine: &Engine, method: Method, msg: Bytes) -> Result<Bytes, Status> {
    let bad = |e: prost::DecodeError| Status::invalid_argument(e.to_string());
    match method {
        Method::Rls => {
            let started = engine.now();
            if let Some(resp) = answer_rls_now(engine, &msg, started) {
                return resp;
            }
            let req = RateLimitRequest::decode(msg).map_err(bad)?;
            let view = RequestView::of(&req);
            let limits = engine.limits();
            super::rls::should_rate_limit_on(engine, &limits, &view, started, |a| a.encode()).await
        }
        Method::Check => {
            // The usual call (a message prost would read the same, on
            // limits in memory) is decoded in place, decided and answered
            // without an await: the batch stays out of this future, whose
            // size every call's allocation pays. Anything else through
            // prost and the store's future, as before.
            if let Some(resp) = answer_check_now(engine, &msg, engine.now()) {
                return resp;
            }
            let req = CheckRequest::decode(msg).map_err(bad)?;
            let resp = super::native::check(engine, req).await?;
            Ok(frame::encode(&resp))
        }
    }
}

/// A `Check` call that arrived at `started` answered synchronously by
/// [`wire`], or `None` when the message or a limit needs the general path.
fn answer_check_now(engine: &Engine, msg: &[u8], started: u64) -> Option<Result<Bytes, Status>> {
    let reqs = wire::decode_check(msg)?;
    let mut results = wire::Results::new();
    let decided = super::native::decide_now(engine, &reqs, started, |r| results.push(*r))?;
    Some(decided.map(|()| wire::encode_response(&results)))
}

/// An Envoy RLS call answered at once, or `None` (nothing decided) when an
/// Envoy limit lives in a store.
///
/// The request is read in place ([`rls_request::decode`]), or by prost
/// when that decoder leaves it to prost. With every Envoy limit in memory
/// (`Limits::rls_in_memory`, read from the same limits the call is decided
/// on), nothing in [`super::rls::should_rate_limit_on`] waits: each of its
/// awaits is on a decision made in memory, ready at once. So one poll, on
/// this stack, finishes it, and the call's future is never boxed.
fn answer_rls_now(engine: &Engine, msg: &[u8], started: u64) -> Option<Result<Bytes, Status>> {
    let limits = engine.limits();
    if !limits.rls_in_memory {
        return None;
    }
    let decoded;
    let view = match rls_request::decode(msg) {
        Some(view) => view,
        None => {
            decoded = match RateLimitRequest::decode(msg) {
                Ok(req) => req,
                Err(e) => return Some(Err(Status::invalid_argument(e.to_string()))),
            };
            RequestView::of(&decoded)
        }
    };
    let call = super::rls::should_rate_limit_on(engine, &limits, &view, started, |a| a.encode());
    let Some(framed) = futures::FutureExt::now_or_never(call) else {
        // Unreachable while the above holds (a test pins it); answered as
        // a failure rather than dropped silently if it ever breaks.
        debug_assert!(false, "an in-memory RLS call was not ready at once");
        return Some(Err(Status::internal(
            "the rate limit decision did not complete",
        )));
    };
    Some(framed)
}
