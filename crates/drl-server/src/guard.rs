//! The services each listener serves: the HTTP router or the gRPC routes
//! behind the bearer-token check ([`crate::auth`]), and for gRPC the
//! request deadline (`server.request_timeout_ms`; the HTTP handlers bound
//! themselves, see [`crate::deadline`]).
//!
//! Without tokens configured, the check is one uncontended read lock and
//! the request goes straight on; no future is boxed either way.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Request, Response};
use hyper::body::Incoming;

use crate::auth::{Auth, Class};
use crate::deadline::{Bounded, bounded};

/// The HTTP router behind the token check.
#[derive(Clone)]
pub struct HttpGuard {
    /// The router.
    pub router: axum::Router,
    /// The live token sets.
    pub auth: Auth,
}

impl tower::Service<Request<Incoming>> for HttpGuard {
    type Response = Response<axum::body::Body>;
    type Error = Infallible;
    type Future = Either<
        <axum::Router as tower::Service<Request<Incoming>>>::Future,
        Response<axum::body::Body>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let class = Class::of_http_path(req.uri().path());
        match self.auth.check(class, req.headers(), "http") {
            Ok(()) => Either::inner(tower::Service::call(&mut self.router, req)),
            Err(d) => Either::ready(d.http_response()),
        }
    }
}

/// The gRPC routes behind the token check and the request deadline.
#[derive(Clone)]
pub struct GrpcGuard {
    /// The native API and Envoy RLS.
    pub routes: tonic::service::Routes,
    /// The live token sets.
    pub auth: Auth,
    /// `server.request_timeout_ms` (zero: none).
    pub timeout: Duration,
}

/// Generic over the request body: hyper's (`Incoming`), or the direct h2
/// transport's for the streams it does not answer itself
/// ([`crate::grpc::direct`]).
impl<B> tower::Service<Request<B>> for GrpcGuard
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Either<
        Deadline<<tonic::service::Routes as tower::Service<Request<B>>>::Future>,
        Response<tonic::body::Body>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match self
            .auth
            .check(Class::of_grpc_path(req.uri().path()), req.headers(), "grpc")
        {
            Ok(()) => Either::inner(Deadline {
                api: if req.uri().path().starts_with("/envoy.") {
                    drl_service::metrics::Api::EnvoyRls
                } else {
                    drl_service::metrics::Api::GrpcCheck
                },
                inner: bounded(
                    Instant::now(),
                    self.timeout,
                    tower::Service::call(&mut self.routes, req),
                ),
                limit: self.timeout,
            }),
            Err(d) => Either::ready(d.grpc_response()),
        }
    }
}

pin_project_lite::pin_project! {
    /// A gRPC call bounded by the request deadline: past it, the answer is
    /// `DEADLINE_EXCEEDED`.
    pub struct Deadline<F> {
        #[pin]
        inner: Bounded<F>,
        limit: Duration,
        api: drl_service::metrics::Api,
    }
}

impl<F> Future for Deadline<F>
where
    F: Future<Output = Result<Response<tonic::body::Body>, Infallible>>,
{
    type Output = Result<Response<tonic::body::Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(r)) => Poll::Ready(r),
            Poll::Ready(None) => {
                drl_service::metrics::rejected(*this.api, "timeout");
                Poll::Ready(Ok(tonic::Status::deadline_exceeded(format!(
                    "the request took longer than request_timeout_ms ({} ms)",
                    this.limit.as_millis()
                ))
                .into_http()))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's future, or an answer made without calling it.
    pub struct Either<F, R> {
        #[pin]
        state: State<F, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, R> {
        Inner {
            #[pin]
            fut: F,
        },
        Ready {
            resp: Option<R>,
        },
    }
}

impl<F, R> Either<F, R> {
    fn inner(fut: F) -> Self {
        Self {
            state: State::Inner { fut },
        }
    }

    fn ready(resp: R) -> Self {
        Self {
            state: State::Ready { resp: Some(resp) },
        }
    }
}

impl<F, R> Future for Either<F, R>
where
    F: Future<Output = Result<R, Infallible>>,
{
    type Output = Result<R, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { fut } => fut.poll(cx),
            StateProj::Ready { resp } => match resp.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => Poll::Pending,
            },
        }
    }
}
