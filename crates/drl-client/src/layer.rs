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

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::extract::RequestView;
use crate::{Client, Error};

/// What to check for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The configured limit's name.
    pub limit: Cow<'static, str>,
    /// The key within the limit.
    pub key: String,
    /// The cost.
    pub cost: u64,
}

impl Target {
    /// A check of `cost` on `limit` for `key`.
    pub fn new(limit: impl Into<Cow<'static, str>>, key: impl Into<String>, cost: u64) -> Self {
        Self {
            limit: limit.into(),
            key: key.into(),
            cost,
        }
    }
}

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
            client: self.client.clone(),
            classify: self.classify.clone(),
            deny_status: self.deny_status,
        }
    }
}

/// The service [`RateLimitLayer`] makes.
pub struct RateLimit<S, F> {
    inner: S,
    client: Client,
    classify: Arc<F>,
    deny_status: StatusCode,
}

impl<S: Clone, F> Clone for RateLimit<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            client: self.client.clone(),
            classify: self.classify.clone(),
            deny_status: self.deny_status,
        }
    }
}

impl<S, F> std::fmt::Debug for RateLimit<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The answer to a check that failed (not a denial).
fn check_failed(e: &Error) -> Response<Body> {
    let (status, kind) = match e {
        Error::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_key"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "limit_error"),
    };
    let title = status.canonical_reason().unwrap_or("Error");
    drl_http::problem::response(status, kind, title, &e.to_string()).map(Body::from)
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
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let target = (self.classify)(&RequestView::of(&req));
        // The readied service answers this request; the clone waits for
        // the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(t) = target else {
            let fut = inner.call(req);
            return Box::pin(async move { Ok(fut.await?.map(Body::new)) });
        };
        let client = self.client.clone();
        let deny_status = self.deny_status;
        Box::pin(async move {
            let d = match client.check(&t.limit, &t.key, t.cost).await {
                Ok(d) => d,
                Err(e) => return Ok(check_failed(&e)),
            };
            let policy = client.policy_header(&t.limit, &d);
            let mut resp = if d.allowed {
                inner.call(req).await?.map(Body::new)
            } else {
                drl_http::problem::rate_limited(&t.limit, t.cost, deny_status, &d).map(Body::from)
            };
            drl_http::headers::insert_ratelimit(resp.headers_mut(), &t.limit, policy, &d);
            Ok(resp)
        })
    }
}
