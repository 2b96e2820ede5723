//! [`ReserveLayer`]: a tower layer for costs known afterwards
//! (docs/semantics.md, "Costs known afterwards"). The classifier gives
//! each request a [`Target`] whose `cost` is the *estimate*; the layer
//! reserves it ([`Client::reserve`]), calls the service, then settles the
//! reservation at the actual cost an [`Actual`] reads from the response.
//!
//! - A denied reservation answers exactly as [`RateLimitLayer`](super::RateLimitLayer)
//!   denies (429 problem, `Retry-After`, `RateLimit-Policy`, `RateLimit`);
//!   a reserve that fails answers the same problem as a failed check.
//! - The settlement happens when the service's response head is ready,
//!   before the response is returned (the body is not waited for). In
//!   process it costs no wait; remotely it is one more round trip.
//! - No actual cost (the callback answers `None`) or a service error:
//!   the reservation is settled at its estimate (kept consumed), the safe
//!   choice: the work may have been done, and a release would refund it.
//! - A settlement that fails (service unreachable) is logged; the
//!   response is returned as is.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use super::future::{BoxError, BoxedCall};
use super::{Target, check_failed, denied};
use crate::Client;
use crate::extract::RequestView;

/// Reads the actual cost of a request from its response head; `None`
/// settles at the estimate.
pub trait Actual: Send + Sync + 'static {
    /// The actual cost, if the response tells it.
    fn actual(&self, resp: &Response<Body>) -> Option<u64>;
}

impl<A> Actual for A
where
    A: Fn(&Response<Body>) -> Option<u64> + Send + Sync + 'static,
{
    fn actual(&self, resp: &Response<Body>) -> Option<u64> {
        self(resp)
    }
}

/// Reads the actual cost from a response header holding a whole number
/// (e.g. `x-usage-tokens: 1234`); a missing or malformed header answers
/// `None` (settled at the estimate).
#[derive(Debug, Clone)]
pub struct UsageHeader {
    name: http::HeaderName,
}

impl UsageHeader {
    /// Reads the header `name`.
    ///
    /// # Panics
    /// If `name` is not a valid header name.
    pub fn new(name: &str) -> Self {
        Self {
            name: http::HeaderName::from_bytes(name.as_bytes()).expect("a valid header name"),
        }
    }
}

impl Actual for UsageHeader {
    fn actual(&self, resp: &Response<Body>) -> Option<u64> {
        resp.headers()
            .get(&self.name)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// Wraps services in [`Reserve`].
pub struct ReserveLayer<F, A> {
    shared: Arc<Shared<F, A>>,
}

/// What the layer and its services share.
struct Shared<F, A> {
    client: Client,
    classify: F,
    actual: A,
    deny_status: StatusCode,
}

impl<F, A> Clone for ReserveLayer<F, A> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<F, A> std::fmt::Debug for ReserveLayer<F, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReserveLayer")
            .field("client", &self.shared.client)
            .field("deny_status", &self.shared.deny_status)
            .finish_non_exhaustive()
    }
}

impl<F, A> ReserveLayer<F, A>
where
    F: Fn(&RequestView<'_>) -> Option<Target> + Send + Sync + 'static,
    A: Actual,
{
    /// Reserves the estimate `classify` gives each request (its `cost`;
    /// `None`: not limited) and settles at what `actual` reads from the
    /// response (a closure over `&Response<Body>`, or [`UsageHeader`]).
    pub fn new(client: Client, classify: F, actual: A) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                classify,
                actual,
                deny_status: StatusCode::TOO_MANY_REQUESTS,
            }),
        }
    }

    /// Like [`ReserveLayer::new`], denying with `status` instead of 429
    /// (must be a 4xx; another status keeps 429).
    pub fn with_deny_status(client: Client, classify: F, actual: A, status: StatusCode) -> Self {
        let layer = Self::new(client, classify, actual);
        let Ok(mut s) = Arc::try_unwrap(layer.shared) else {
            unreachable!("a layer just made is not shared")
        };
        if status.is_client_error() {
            s.deny_status = status;
        }
        Self {
            shared: Arc::new(s),
        }
    }
}

impl<S, F, A> Layer<S> for ReserveLayer<F, A> {
    type Service = Reserve<S, F, A>;
    fn layer(&self, inner: S) -> Reserve<S, F, A> {
        Reserve {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`ReserveLayer`] makes.
pub struct Reserve<S, F, A> {
    inner: S,
    shared: Arc<Shared<F, A>>,
}

impl<S: Clone, F, A> Clone for Reserve<S, F, A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, F, A> std::fmt::Debug for Reserve<S, F, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserve")
            .field("client", &self.shared.client)
            .finish_non_exhaustive()
    }
}

impl<S, F, A, ReqB, ResB> Service<Request<ReqB>> for Reserve<S, F, A>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send,
    F: Fn(&RequestView<'_>) -> Option<Target> + Send + Sync + 'static,
    A: Actual,
    ReqB: Send + 'static,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxedCall<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The readied service answers this request; the clone waits for
        // the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let target = (shared.classify)(&RequestView::of(&req));
        Box::pin(async move {
            let Some(t) = target else {
                return Ok(inner.call(req).await?.map(Body::new));
            };
            let client = &shared.client;
            let permit = match client.reserve(&t.limit, t.key.as_str(), t.cost).await {
                Ok(p) => p,
                Err(e) => return Ok(check_failed(&e)),
            };
            let d = *permit.decision();
            let policy = client.policy_header(&t.limit, &d);
            let ratelimit = drl_http::headers::ratelimit(&policy, &d);
            if !permit.allowed() {
                return Ok(denied(&t, shared.deny_status, &d, policy, ratelimit));
            }
            let resp = match inner.call(req).await {
                Ok(r) => r.map(Body::new),
                Err(e) => {
                    // The work may have been done: keep the estimate.
                    settle_logged(permit.settle(t.cost).await, &t);
                    return Err(e);
                }
            };
            let actual = shared.actual.actual(&resp).unwrap_or(t.cost);
            settle_logged(permit.settle(actual).await, &t);
            let mut resp = resp;
            drl_http::headers::insert_ratelimit_values(resp.headers_mut(), policy, ratelimit);
            Ok(resp)
        })
    }
}

/// Logs a settlement that failed (the service could not be reached).
fn settle_logged(r: Result<drl_core::Settlement, crate::Error>, t: &Target) {
    if let Err(e) = r {
        tracing::warn!(limit = %t.limit, key = t.key.as_str(), error = %e, "settlement lost");
    }
}
