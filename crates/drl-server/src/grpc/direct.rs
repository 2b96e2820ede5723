//! Unary gRPC served on the `h2` crate directly: no hyper, tower or tonic
//! between a request stream and the method that answers it.
//!
//! Each connection is one task: it accepts request streams and polls them
//! together with the connection (no task per request). A stream whose path
//! the service [routes](Unary::route) is read whole
//! ([`super::frame::UnaryDecoder`]), answered by [`Unary::call`] and sent as
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

use super::frame::UnaryDecoder;

/// The unary gRPC methods a connection answers.
pub trait Unary: Send + Sync {
    /// Which method a path names.
    type Method: Copy + Send;

    /// The method `path` names, or `None` to hand the stream to
    /// [`fallback`](Self::fallback).
    fn route(&self, path: &str) -> Option<Self::Method>;

    /// The largest request message accepted, in bytes.
    fn max_message(&self) -> usize {
        super::frame::DEFAULT_MAX_MESSAGE
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
    /// [`super::frame::encode`], or the status to answer.
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
