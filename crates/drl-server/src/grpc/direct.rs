//! Unary gRPC served on the `h2` crate directly: no hyper, tower or tonic
//! between a request stream and the method that answers it.
//!
//! Each connection is one task: it accepts request streams and polls them
//! together with the connection (no task per request). A stream whose path
//! the service [routes](Unary::route) is read whole
//! ([`drl_api::frame::UnaryDecoder`]), answered by [`Unary::call`] and sent as
//! HEADERS (`:status 200`, `content-type: application/grpc`), one DATA
//! frame and trailers (`grpc-status: 0`); a failed call as a trailers-only
//! response, built by tonic's own [`Status::into_http`], so errors look
//! exactly as tonic's. Any other path goes to [`Unary::fallback`].

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::Status;

use drl_api::frame::UnaryDecoder;

/// The unary gRPC methods a connection answers.
pub trait Unary: Send + Sync {
    /// Which method a path names.
    type Method: Copy + Send;

    /// The method `path` names, or `None` to hand the stream to
    /// [`fallback`](Self::fallback).
    fn route(&self, path: &str) -> Option<Self::Method>;

    /// The largest request message accepted, in bytes.
    fn max_message(&self) -> usize {
        drl_api::frame::DEFAULT_MAX_MESSAGE
    }

    /// Checks a call's head before its body is read (e.g. its token): an
    /// error is answered at once.
    fn admit(&self, method: Self::Method, head: &http::request::Parts) -> Result<(), Status> {
        let _ = (method, head);
        Ok(())
    }

    /// How long reading and answering one admitted call may take
    /// (`Duration::ZERO`: no bound).
    fn timeout(&self) -> Duration {
        Duration::ZERO
    }

    /// The status answered when a call outlives [`timeout`](Self::timeout).
    fn timed_out(&self, method: Self::Method) -> Status {
        let _ = method;
        Status::deadline_exceeded("")
    }

    /// Answers one call: the response message framed by
    /// [`drl_api::frame::encode`], or the status to answer.
    fn call(
        &self,
        method: Self::Method,
        head: &http::request::Parts,
        msg: Bytes,
    ) -> impl Future<Output = Result<Bytes, Status>> + Send;

    /// Answers a stream no method is routed for. By default `UNIMPLEMENTED`
    /// with no message, as tonic's router.
    fn fallback(
        &self,
        req: Request<RecvStream>,
        respond: SendResponse<Bytes>,
    ) -> impl Future<Output = ()> + Send {
        let _ = req;
        async move { send_status(respond, Status::unimplemented("")) }
    }
}

/// The HTTP/2 settings of a direct gRPC connection: hyper's server defaults
/// (1 MiB stream and connection windows, 16 KiB of request head, 200
/// concurrent streams unless `max_concurrent_streams` says otherwise).
pub fn builder(max_concurrent_streams: Option<u32>) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(1024 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .max_concurrent_streams(max_concurrent_streams.unwrap_or(200))
        .max_header_list_size(16 * 1024);
    b
}

/// Serves one connection until the client closes it or it fails. `track`
/// is called as each request stream starts and what it returns is dropped
/// when the stream ends (in-flight accounting). Once `close` resolves the
/// connection shuts down gracefully (GOAWAY; streams in flight finish).
pub async fn serve_connection<T, U, G>(
    io: T,
    builder: &h2::server::Builder,
    svc: &U,
    track: impl Fn() -> G,
    close: impl Future<Output = ()>,
) -> Result<(), h2::Error>
where
    T: AsyncRead + AsyncWrite + Unpin,
    U: Unary,
{
    let mut close = pin!(close);
    let mut closing = false;
    let mut conn = {
        let hs = builder.handshake::<T, Bytes>(io);
        tokio::select! {
            c = hs => c?,
            () = close.as_mut() => return Ok(()),
        }
    };
    let mut streams = FuturesUnordered::new();
    let r = poll_fn(|cx| {
        if !closing && close.as_mut().poll(cx).is_ready() {
            closing = true;
            conn.graceful_shutdown();
        }
        loop {
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
            match conn.poll_accept(cx) {
                Poll::Ready(Some(Ok((req, respond)))) => {
                    let guard = track();
                    streams.push(async move {
                        stream(svc, req, respond).await;
                        drop(guard);
                    })
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    // Streams still running cannot answer on a closed connection; let
    // them end (they see the connection's error).
    while streams.next().await.is_some() {}
    r
}

/// One request stream.
async fn stream<U: Unary>(svc: &U, req: Request<RecvStream>, respond: SendResponse<Bytes>) {
    let Some(method) = svc.route(req.uri().path()) else {
        return svc.fallback(req, respond).await;
    };
    let (head, body) = req.into_parts();
    if let Err(s) = svc.admit(method, &head) {
        return send_status(respond, s);
    }
    let answer = crate::deadline::bounded(
        Instant::now(),
        svc.timeout(),
        answer(svc, method, &head, body),
    )
    .await;
    match answer {
        Some(Ok(framed)) => send_message(respond, framed),
        Some(Err(s)) => send_status(respond, s),
        None => send_status(respond, svc.timed_out(method)),
    }
}

/// Reads an admitted call's message and answers it.
async fn answer<U: Unary>(
    svc: &U,
    method: U::Method,
    head: &http::request::Parts,
    mut body: RecvStream,
) -> Result<Bytes, Status> {
    if let Some(enc) = head.headers.get("grpc-encoding")
        && enc.as_bytes() != b"identity"
    {
        return Err(unsupported_encoding(enc));
    }
    let mut dec = UnaryDecoder::new(svc.max_message());
    while let Some(chunk) = poll_fn(|cx| body.poll_data(cx)).await {
        // A reset stream: the answer goes nowhere.
        let chunk = chunk.map_err(|e| Status::cancelled(e.to_string()))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        dec.push(chunk)?;
    }
    let msg = dec.finish()?;
    svc.call(method, head, msg).await
}

/// Answers `framed` (one message with its prefix) and `grpc-status: 0`.
pub fn send_message(mut respond: SendResponse<Bytes>, framed: Bytes) {
    let Ok(mut send) = respond.send_response(ok_head(), false) else {
        return;
    };
    if send.send_data(framed, false).is_ok() {
        let _ = send.send_trailers(ok_trailers());
    }
}

fn ok_head() -> Response<()> {
    let mut r = Response::new(());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    r
}

fn ok_trailers() -> HeaderMap {
    let mut t = HeaderMap::with_capacity(1);
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t
}

/// tonic's answer to a request compressed with an encoding it does not
/// accept (this transport accepts none).
fn unsupported_encoding(enc: &HeaderValue) -> Status {
    let name = match std::str::from_utf8(enc.as_bytes()) {
        Ok(s) => s.to_string(),
        Err(_) => format!("{:?}", enc.as_bytes()),
    };
    let mut s = Status::unimplemented(format!(
        "Content is compressed with `{name}` which isn't supported"
    ));
    s.metadata_mut().insert(
        "grpc-accept-encoding",
        tonic::metadata::MetadataValue::from_static("identity"),
    );
    s
}

/// Answers `status` as a trailers-only response (tonic's form).
pub fn send_status(mut respond: SendResponse<Bytes>, status: Status) {
    let (parts, ()) = status.into_http::<()>().into_parts();
    let _ = respond.send_response(Response::from_parts(parts, ()), true);
}

/// A request stream's body as an [`http_body::Body`], for handing a stream
/// to a tower service (flow-control capacity is released as data is read).
#[derive(Debug)]
pub struct RecvBody {
    inner: RecvStream,
    data_done: bool,
}

impl RecvBody {
    /// Wraps `inner`.
    pub fn new(inner: RecvStream) -> Self {
        Self {
            inner,
            data_done: false,
        }
    }
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if !this.data_done {
            match std::task::ready!(this.inner.poll_data(cx)) {
                Some(Ok(b)) => {
                    let _ = this.inner.flow_control().release_capacity(b.len());
                    return Poll::Ready(Some(Ok(http_body::Frame::data(b))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match std::task::ready!(this.inner.poll_trailers(cx)) {
            Ok(Some(t)) => Poll::Ready(Some(Ok(http_body::Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// Sends a tower service's response on `respond`: its head, its data as
/// the peer's flow control allows, and its trailers.
pub async fn send_http<B>(mut respond: SendResponse<Bytes>, resp: Response<B>)
where
    B: http_body::Body<Data = Bytes>,
{
    use http_body_util::BodyExt as _;
    let (parts, body) = resp.into_parts();
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(Response::from_parts(parts, ()), end) else {
        return;
    };
    if end {
        return;
    }
    let mut body = pin!(body);
    loop {
        let frame = match body.as_mut().frame().await {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(f)) => f,
        };
        let mut data = match frame.into_data() {
            Ok(d) => d,
            Err(f) => {
                if let Ok(t) = f.into_trailers() {
                    let _ = send.send_trailers(t);
                    return;
                }
                continue;
            }
        };
        while !data.is_empty() {
            send.reserve_capacity(data.len());
            let cap = match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(c)) if c > 0 => c,
                Some(Ok(_)) => continue,
                _ => return,
            };
            let chunk = data.split_to(cap.min(data.len()));
            if send.send_data(chunk, false).is_err() {
                return;
            }
        }
    }
}

/// Asks a connection to close gracefully, from outside its task: cheap to
/// poll (an atomic load) on every wakeup of the connection.
#[derive(Debug, Clone, Default)]
pub struct CloseSignal(std::sync::Arc<CloseInner>);

#[derive(Debug, Default)]
struct CloseInner {
    set: std::sync::atomic::AtomicBool,
    waker: futures::task::AtomicWaker,
}

impl CloseSignal {
    /// Asks for the close.
    pub fn close(&self) {
        self.0.set.store(true, std::sync::atomic::Ordering::Release);
        self.0.waker.wake();
    }

    /// True once [`close`](Self::close) was called (one load: no waker
    /// registered).
    pub fn is_set(&self) -> bool {
        self.0.set.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Ready once [`close`](Self::close) was called. Otherwise registers
    /// the task's waker, unless `last` (the waker this poll registered
    /// before) already wakes the same task: a loop that waits on the
    /// signal again and again then pays one load and one comparison per
    /// wait. Only [`close`](Self::close) takes a registered waker, and it
    /// sets the flag first, so a waker still registered is never a stale
    /// one.
    pub fn poll_closed(
        &self,
        cx: &mut std::task::Context<'_>,
        last: &mut Option<std::task::Waker>,
    ) -> Poll<()> {
        if self.is_set() {
            return Poll::Ready(());
        }
        if !last.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.0.waker.register(cx.waker());
            *last = Some(cx.waker().clone());
            if self.is_set() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }

    /// Resolves once [`close`](Self::close) was called.
    pub async fn wait(&self) {
        let mut last = None;
        poll_fn(|cx| self.poll_closed(cx, &mut last)).await
    }
}

#[cfg(test)]
mod tests {
    use std::task::Context;

    use super::*;
    use crate::race::tests::Count;

    #[test]
    fn poll_closed_wakes_the_last_task_that_waited() {
        let signal = CloseSignal::default();
        let ((a, wa), (b, wb)) = (Count::waker(), Count::waker());
        let mut last = None;
        let mut wait = |w| signal.poll_closed(&mut Context::from_waker(w), &mut last);
        for _ in 0..3 {
            assert!(wait(&wa).is_pending());
        }
        // Another task waits now: it is the one woken.
        assert!(wait(&wb).is_pending());
        assert!(!signal.is_set());
        signal.close();
        assert_eq!((a.wakes(), b.wakes()), (0, 1));
        let mut last = None;
        assert!(
            signal
                .poll_closed(&mut Context::from_waker(&wa), &mut last)
                .is_ready()
        );
    }

    #[test]
    fn poll_closed_is_ready_at_once_after_close() {
        let signal = CloseSignal::default();
        signal.close();
        let (_, w) = Count::waker();
        let mut last = None;
        assert!(
            signal
                .poll_closed(&mut Context::from_waker(&w), &mut last)
                .is_ready()
        );
        assert!(last.is_none(), "nothing registered");
    }
}
