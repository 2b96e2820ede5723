//! The gRPC listener's HTTP/2 server, hand-written (`server.grpc_engine:
//! fast`): no `h2`, hyper or tonic per request.
//!
//! The listener answers two unary methods ([`crate::grpc::hot`]) and hands
//! every other path to tonic's routes whole, so the server owns the whole
//! connection and needs no more of HTTP/2 (RFC 9113, RFC 7541) than unary
//! calls do:
//!
//! - [`frame`]: frame headers and the writers of the frames it sends;
//! - [`huffman`], [`hpack`]: request header blocks decoded with the
//!   dynamic table; response fields written as literals, but for the two
//!   every answer carries (indexed once, then one byte each);
//! - [`conn`]: the connection as a sans-IO state machine: bytes in, jobs
//!   (calls to decide) and bytes out; stream states, flow control both
//!   ways, SETTINGS, PING, GOAWAY, every connection and stream error;
//! - [`serve`]: the async driver: reads, runs the calls of all streams
//!   concurrently, and writes the frames of every ready answer in one
//!   write per wakeup.
//!
//! What a call answers is the [`Service`]'s: the same functions, token
//! check, deadline, message limit and errors (tonic's, to the byte) as
//! the `h2` engine ([`crate::grpc::direct`]).

pub mod conn;
pub mod frame;
pub mod hpack;
pub mod huffman;
pub mod serve;

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tonic::Status;

pub use serve::serve_connection;

/// The unary methods a connection answers, and what answers the rest.
pub trait Service: Send + Sync {
    /// Which method a path names.
    type Method: Copy + Send;

    /// The method `path` names, or `None` for [`fallback`](Self::fallback).
    fn route(&self, path: &str) -> Option<Self::Method>;

    /// The largest request message accepted, in bytes.
    fn max_message(&self) -> usize {
        crate::grpc::frame::DEFAULT_MAX_MESSAGE
    }

    /// Checks a call before its body is read, given its first
    /// `authorization` header: an error is answered at once.
    fn admit(&self, method: Self::Method, authorization: Option<&[u8]>) -> Result<(), Status> {
        let _ = (method, authorization);
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

    /// Answers one call at once, without a future, when it can: `None`
    /// sends it to [`call`](Self::call). A call answered here costs no
    /// allocation of its future (the driver boxes every call it polls);
    /// it is answered exactly as a `call` ready at its first poll.
    /// `read_at` is when the read that completed the call was made (the
    /// connection's stamp of that read: a service may take it as the
    /// call's time instead of reading the clock again).
    fn call_now(
        &self,
        method: Self::Method,
        msg: &Bytes,
        read_at: Instant,
    ) -> Option<Result<Bytes, Status>> {
        let _ = (method, msg, read_at);
        None
    }

    /// Answers one call: the response message framed by
    /// [`crate::grpc::frame::encode`], or the status to answer.
    fn call(
        &self,
        method: Self::Method,
        msg: Bytes,
    ) -> impl Future<Output = Result<Bytes, Status>> + Send;

    /// Answers a request no method is routed for, given whole. By default
    /// `UNIMPLEMENTED` with no message, as tonic's router.
    fn fallback(&self, req: http::Request<Bytes>) -> impl Future<Output = Whole> + Send {
        let _ = req;
        async { Whole::status(Status::unimplemented("")) }
    }
}

/// A whole response: head, body and trailers.
#[derive(Debug)]
pub struct Whole {
    /// Status and headers.
    pub head: http::response::Parts,
    /// The body.
    pub body: Bytes,
    /// The trailers, if any.
    pub trailers: Option<http::HeaderMap>,
}

impl Whole {
    /// `status` as tonic sends it (a trailers-only response).
    pub fn status(status: Status) -> Self {
        let (head, ()) = status.into_http::<()>().into_parts();
        Whole {
            head,
            body: Bytes::new(),
            trailers: None,
        }
    }

    /// Reads all of `resp` (a tower service's answer); a body that fails
    /// midway ends where it failed.
    pub async fn collect<B>(resp: http::Response<B>) -> Self
    where
        B: http_body::Body<Data = Bytes>,
    {
        use http_body_util::BodyExt as _;
        let (head, body) = resp.into_parts();
        let mut body = std::pin::pin!(body);
        let mut data = bytes::BytesMut::new();
        let mut trailers = None;
        while let Some(Ok(f)) = body.as_mut().frame().await {
            match f.into_data() {
                Ok(d) => data.extend_from_slice(&d),
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        trailers = Some(t);
                    }
                }
            }
        }
        Whole {
            head,
            body: data.freeze(),
            trailers,
        }
    }
}

/// The connection settings of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`: more open streams are refused.
    pub max_concurrent_streams: u32,
    /// The receive window of the connection and of each stream.
    pub window: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`: a larger request head is refused.
    pub max_header_list: u32,
}

impl Settings {
    /// `grpc::direct::builder`'s values: 1 MiB windows, 16 KiB of request
    /// head, 200 streams unless `max_concurrent_streams` says otherwise.
    pub fn new(max_concurrent_streams: Option<u32>) -> Self {
        Self {
            max_concurrent_streams: max_concurrent_streams.unwrap_or(200),
            window: 1024 * 1024,
            max_header_list: 16 * 1024,
        }
    }
}
