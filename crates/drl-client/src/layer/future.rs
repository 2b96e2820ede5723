//! [`ResponseFuture`]: what [`RateLimit`](super::RateLimit) answers with.
//! A concrete type, not a boxed one: with the in-process backend the
//! decision is made in `call`, so the future only waits for the service
//! (or holds the ready denial); only a remote check boxes its future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Response};
use pin_project_lite::pin_project;

/// A boxed error of the wrapped service or its body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A remote check and then the service, boxed.
pub(super) type BoxedCall<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit): the
    /// service's answer with the `RateLimit*` headers added, a denial or
    /// a failed check's problem answered without the service, or a remote
    /// check followed by the service.
    pub struct ResponseFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        Inner {
            #[pin]
            fut: F,
            // (RateLimit-Policy, RateLimit) when the request was checked.
            headers: Option<(HeaderValue, HeaderValue)>,
        },
        Ready {
            resp: Option<Response<Body>>,
        },
        Boxed {
            fut: BoxedCall<E>,
        },
    }
}

impl<F, E> ResponseFuture<F, E> {
    /// The service's answer, with `headers` (`RateLimit-Policy`,
    /// `RateLimit`) added when given.
    pub(super) fn inner(fut: F, headers: Option<(HeaderValue, HeaderValue)>) -> Self {
        Self {
            kind: Kind::Inner { fut, headers },
        }
    }

    /// An answer ready now.
    pub(super) fn ready(resp: Response<Body>) -> Self {
        Self {
            kind: Kind::Ready { resp: Some(resp) },
        }
    }

    /// A boxed remote check and call.
    pub(super) fn boxed(fut: BoxedCall<E>) -> Self {
        Self {
            kind: Kind::Boxed { fut },
        }
    }
}

impl<F, E> std::fmt::Debug for ResponseFuture<F, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Ready { .. } => "ready",
            Kind::Boxed { .. } => "boxed",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, E, B> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { fut, headers } => {
                // `Body::new` keeps an axum `Body` as it is (no re-boxing).
                let mut resp = ready!(fut.poll(cx))?.map(Body::new);
                if let Some((policy, ratelimit)) = headers.take() {
                    drl_http::headers::insert_ratelimit_values(
                        resp.headers_mut(),
                        policy,
                        ratelimit,
                    );
                }
                Poll::Ready(Ok(resp))
            }
            KindProj::Ready { resp } => Poll::Ready(Ok(resp
                .take()
                .expect("ResponseFuture polled after completion"))),
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
    }
}
