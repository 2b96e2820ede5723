//! The HTTP listener's hot path on HTTP/1.1 without hyper: `POST
//! /v1/check` read, answered and written by hand, every other request
//! through hyper and axum unchanged.
//!
//! A connection starts here ([`serve::serve_connection`]): bytes are read
//! into a buffer and each head is classified by [`parse`] (httparse,
//! hyper's own parser). A plain `POST /v1/check HTTP/1.1` with a
//! `Content-Length` body is answered by [`Handler::check`], which for
//! `drl serve` is [`crate::http::check_answer`], the function the axum
//! route calls too; the response is written as hyper writes it
//! ([`response`]), answers to pipelined requests in one write. At the first
//! request the fast path does not take (another path, a query string,
//! chunked, `Expect`, `Upgrade`, HTTP/1.0, an HTTP/2 preface, a head that
//! does not parse or passes [`parse::MAX_HEAD`]) the connection is handed
//! to hyper with the bytes read and not answered in front
//! ([`rewind::Rewind`]), for the rest of its life: hyper answers exactly as
//! without the fast path, errors included. Over TLS, a connection whose
//! ALPN chose `h2` goes to hyper at once. `server.http_engine: hyper`
//! turns the fast path off.

pub mod linger;
pub mod parse;
pub mod response;
pub mod rewind;
pub mod serve;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::auth::{Auth, Class};
use crate::engine::{Engine, LimitsGuard};
use crate::http::Answer;
use crate::metrics::Api;

/// Why a check was refused before its body was read.
#[derive(Debug)]
pub enum Refused {
    /// An answer of the router's shape.
    Answer(Answer),
    /// A response made outside the router (a token denial).
    Response(Box<axum::response::Response>),
}

/// What the fast path answers `POST /v1/check` with.
pub trait Handler: Send + Sync {
    /// What one request holds on to (e.g. the config it is decided with).
    type Req: Send + Sync;

    /// Starts a request.
    fn begin(&self) -> Self::Req;

    /// The largest body accepted.
    fn max_body(req: &Self::Req) -> usize;

    /// How long reading the body and answering may take (zero: no bound).
    fn timeout(req: &Self::Req) -> Duration;

    /// Checks the request's first `Authorization` value before its body is
    /// read.
    fn authorize(&self, authorization: Option<&[u8]>) -> Result<(), Refused> {
        let _ = authorization;
        Ok(())
    }

    /// The answer to a body over [`max_body`](Self::max_body).
    fn too_large(&self, req: &Self::Req) -> Answer;

    /// The answer to a request that ran out of [`timeout`](Self::timeout).
    fn timed_out(&self, req: &Self::Req) -> Answer;

    /// Answers a whole body.
    fn check(
        &self,
        req: &Self::Req,
        body: &[u8],
        started: Instant,
    ) -> impl Future<Output = Answer> + Send;
}

/// `drl serve`'s check: the same token check, bounds, handler and metrics
/// as the axum route behind [`crate::guard::HttpGuard`].
#[derive(Debug, Clone)]
pub struct DrlCheck {
    engine: Arc<Engine>,
    auth: Auth,
}

impl DrlCheck {
    /// Decides with `engine` behind `auth`'s tokens.
    pub fn new(engine: Arc<Engine>, auth: Auth) -> Self {
        Self { engine, auth }
    }
}

impl Handler for DrlCheck {
    type Req = LimitsGuard;

    fn begin(&self) -> LimitsGuard {
        self.engine.limits()
    }

    fn max_body(req: &LimitsGuard) -> usize {
        req.server.max_body_bytes
    }

    fn timeout(req: &LimitsGuard) -> Duration {
        Duration::from_millis(req.server.request_timeout_ms)
    }

    fn authorize(&self, authorization: Option<&[u8]>) -> Result<(), Refused> {
        self.auth
            .check_authorization(Class::Api, authorization, "http")
            .map_err(|d| Refused::Response(Box::new(d.http_response())))
    }

    fn too_large(&self, req: &LimitsGuard) -> Answer {
        crate::http::too_large_answer(Api::HttpCheck, req.server.max_body_bytes)
    }

    fn timed_out(&self, req: &LimitsGuard) -> Answer {
        crate::http::timed_out_answer(Api::HttpCheck, req.server.request_timeout_ms)
    }

    async fn check(&self, req: &LimitsGuard, body: &[u8], started: Instant) -> Answer {
        crate::http::check_answer(&self.engine, req, body, started).await
    }
}
