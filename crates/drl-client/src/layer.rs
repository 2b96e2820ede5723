//! [`RateLimitLayer`]: a tower layer (and so axum middleware) that checks
//! every request against a [`Client`] before the service sees it.
//!
//! A classifier maps the request ([`RequestView`]) to a [`Target`] (limit,
//! key, cost), or to `None` to let it through unchecked. An admission
//! reaches the service and its response gets `RateLimit-Policy` and
//! `RateLimit`; a denial answers 429 `application/problem+json` with
//! `Retry-After`, exactly as `drl serve`'s forward-auth (drl-http). A check
//! that fails (unknown limit, key too long) answers a problem: 500
//! `limit_error` or 400 `invalid_key`.
//!
//! Cost per request: with the in-process backend the check is decided in
//! `call` (it never waits), so the [`ResponseFuture`] is a concrete type
//! that only waits for the service and adds the headers: no boxed future,
//! no clone of the service, and a short key ([`Key`]) stays inline. A
//! remote check is one boxed future that awaits the client.
//!
//! [`ReserveLayer`] is the variant for costs known afterwards: it reserves
//! an estimate and settles it at the cost the response reports.

mod future;
mod key;
mod reserve;
mod target;

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use drl_core::Decision;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use self::future::BoxError;
pub use self::future::ResponseFuture;
pub use self::key::Key;
pub use self::reserve::{Actual, Reserve, ReserveLayer, UsageHeader};
pub use self::target::Target;
use crate::client::Backend;
use crate::extract::RequestView;
use crate::{Client, Error};

/// Wraps services in [`RateLimit`].
pub struct RateLimitLayer<F> {
    client: Client,
    classify: Arc<F>,
    deny_status: StatusCode,
}

impl<F> Clone for RateLimitLayer<F> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            classify: self.classify.clone(),
            deny_status: self.deny_status,
        }
    }
}

impl<F> std::fmt::Debug for RateLimitLayer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("client", &self.client)
            .field("deny_status", &self.deny_status)
            .finish_non_exhaustive()
    }
}

impl<F> RateLimitLayer<F>
where
    F: Fn(&RequestView<'_>) -> Option<Target> + Send + Sync + 'static,
{
    /// Checks each request `classify` maps to a target against `client`.
    pub fn new(client: Client, classify: F) -> Self {
        Self {
            client,
            classify: Arc::new(classify),
            deny_status: StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The status of a denial (default 429; must be a 4xx).
    pub fn deny_status(mut self, status: StatusCode) -> Self {
        if status.is_client_error() {
            self.deny_status = status;
        }
        self
    }
}

impl<S, F> Layer<S> for RateLimitLayer<F> {
    type Service = RateLimit<S, F>;
    fn layer(&self, inner: S) -> RateLimit<S, F> {
        RateLimit {
            inner,
            shared: Arc::new(Shared {
                client: self.client.clone(),
                classify: self.classify.clone(),
                deny_status: self.deny_status,
            }),
        }
    }
}

/// The service [`RateLimitLayer`] makes.
pub struct RateLimit<S, F> {
    inner: S,
    // One `Arc` for all but the service: axum clones the service for
    // every request.
    shared: Arc<Shared<F>>,
}

/// What the clones of one [`RateLimit`] share.
struct Shared<F> {
    client: Client,
    classify: Arc<F>,
    deny_status: StatusCode,
}

impl<S: Clone, F> Clone for RateLimit<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, F> std::fmt::Debug for RateLimit<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("client", &self.shared.client)
            .finish_non_exhaustive()
    }
}

/// The answer to a check that failed (not a denial).
fn check_failed(e: &Error) -> Response<Body> {
    let (status, kind) = match e {
        Error::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_key"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "limit_error"),
    };
    let title = status.canonical_reason().unwrap_or("Error");
    drl_http::problem::response(status, kind, title, &e.to_string()).map(Body::from)
}

/// The denial `d` of `t`, answered with `status` and the `RateLimit*`
/// headers (`policy`, `ratelimit`).
fn denied(
    t: &Target,
    status: StatusCode,
    d: &Decision,
    policy: HeaderValue,
    ratelimit: HeaderValue,
) -> Response<Body> {
    let mut resp =
        drl_http::problem::rate_limited(&t.limit, t.cost, status, &policy, d).map(Body::from);
    drl_http::headers::insert_ratelimit_values(resp.headers_mut(), policy, ratelimit);
    resp
}

/// `t` decided in this process, with the limit's `RateLimit-Policy`; `None`
/// when the client is remote. Synchronous: the layer's future then only
/// waits for the service.
#[inline]
fn decide_now(client: &Client, t: &Target) -> Option<Result<(Decision, HeaderValue), Error>> {
    let Backend::InProcess(b) = &client.inner.backend else {
        return None;
    };
    Some(b.validate_len(&t.limit, t.key.len(), t.cost).map(|l| {
        let d = client.decide_local(b, l, &t.limit, t.key.as_str(), t.cost);
        (d, l.policy().clone())
    }))
}

impl<S, F, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    F: Fn(&RequestView<'_>) -> Option<Target> + Send + Sync + 'static,
    ReqB: Send + 'static,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = &*self.shared;
        let Some(t) = (shared.classify)(&RequestView::of(&req)) else {
            return ResponseFuture::inner(self.inner.call(req), None);
        };
        match decide_now(&shared.client, &t) {
            // In process: decided already; the readied service answers an
            // admission, nothing is boxed or cloned.
            Some(Ok((d, policy))) => {
                let ratelimit = drl_http::headers::ratelimit(&policy, &d);
                if d.allowed {
                    ResponseFuture::inner(self.inner.call(req), Some((policy, ratelimit)))
                } else {
                    ResponseFuture::ready(denied(&t, shared.deny_status, &d, policy, ratelimit))
                }
            }
            Some(Err(e)) => ResponseFuture::ready(check_failed(&e)),
            None => self.call_remote(req, t),
        }
    }
}

impl<S, F> RateLimit<S, F> {
    /// A remote check, then (when admitted) the service: one boxed future.
    fn call_remote<ReqB, ResB>(
        &mut self,
        req: Request<ReqB>,
        t: Target,
    ) -> ResponseFuture<S::Future, S::Error>
    where
        S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        ReqB: Send + 'static,
        ResB: http_body::Body<Data = Bytes> + Send + 'static,
        ResB::Error: Into<BoxError>,
    {
        // The readied service answers this request; the clone waits for
        // the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let client = self.shared.client.clone();
        let deny_status = self.shared.deny_status;
        ResponseFuture::boxed(Box::pin(async move {
            let d = match client.check(&t.limit, t.key.as_str(), t.cost).await {
                Ok(d) => d,
                Err(e) => return Ok(check_failed(&e)),
            };
            let policy = client.policy_header(&t.limit, &d);
            let ratelimit = drl_http::headers::ratelimit(&policy, &d);
            if !d.allowed {
                return Ok(denied(&t, deny_status, &d, policy, ratelimit));
            }
            let mut resp = inner.call(req).await?.map(Body::new);
            drl_http::headers::insert_ratelimit_values(resp.headers_mut(), policy, ratelimit);
            Ok(resp)
        }))
    }
}
