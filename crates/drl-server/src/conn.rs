//! Connection hygiene: the accept loop of both listeners (HTTP/1.1 and
//! HTTP/2 through hyper-util; gRPC on the `h2` crate directly,
//! [`crate::grpc::direct`]; plain or TLS), with every connection bounded.
//!
//! - **Cap** (`server.max_connections`, per listener): at the cap, a new
//!   connection closes the connection that has been idle longest (no
//!   request in flight); if none is idle, the new one is closed at once.
//!   Either way it is counted. So idle connections, however many, never
//!   keep a well-behaved client out.
//! - **Header-read timeout** (`server.header_read_timeout_ms`): a new
//!   connection must finish its TLS handshake and send a whole request head
//!   within it (slow-loris); a later request head that never completes
//!   leaves the connection idle, so the idle timeout closes it.
//! - **Idle timeout** (`server.idle_timeout_ms`): a connection with no
//!   request in flight for this long is closed gracefully (HTTP/2 GOAWAY).
//! - **Streams** (`server.max_concurrent_streams`): HTTP/2 streams per
//!   connection.
//!
//! Each connection is a tokio task of its own, under tokio's cooperative
//! budget like any other task: one busy connection cannot starve the
//! listener or the other connections.
//!
//! Counted in `drl_connections_total{listener, event}` (`accepted`,
//! `refused`, `evicted_idle`, `idle_timeout`, `header_timeout`,
//! `tls_failed`) and `drl_connections_open{listener}`.

mod hand_back;

use std::collections::HashMap;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;

use hand_back::HandBack;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::race::Either;
use crate::tls::TlsSlot;

/// The bounds of one listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most open connections.
    pub max_connections: usize,
    /// Handshake and first request head, and later HTTP/1 heads.
    pub header_read_timeout: Duration,
    /// No request in flight for this long: closed.
    pub idle_timeout: Duration,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
}

impl ConnLimits {
    /// The limits of `s`, with the connection cap lowered to `fd_cap`.
    pub fn from_server(s: &drl_config::ServerConfig, fd_cap: usize) -> Self {
        Self {
            max_connections: s.max_connections.min(fd_cap).max(1),
            header_read_timeout: Duration::from_millis(s.header_read_timeout_ms),
            idle_timeout: Duration::from_millis(s.idle_timeout_ms),
            max_concurrent_streams: s.max_concurrent_streams,
        }
    }
}

/// What a connection is doing, shared with the registry.
#[derive(Debug)]
struct ConnState {
    /// Requests in flight.
    inflight: AtomicU32,
    /// Milliseconds since the registry's epoch of the last request end
    /// (or of the accept), on the coarse clock
    /// ([`drl_core::time::coarse_monotonic_nanos`]): read on every
    /// request, so not the precise one.
    last_active: AtomicU64,
    /// A request has been seen (the header-read bound no longer applies to
    /// idleness).
    served: AtomicBool,
    /// Asked to close (eviction).
    close: Notify,
    /// Already chosen for eviction (not chosen twice).
    evicting: AtomicBool,
    /// hyper answered a request before reading it whole (413, 408): what
    /// the client still sends is read out before the socket closes
    /// ([`crate::linger`]), or the client sees a reset instead of
    /// the answer.
    linger: AtomicBool,
}

/// Milliseconds from `epoch` to now on the coarse clock (both in its
/// nanoseconds).
#[inline]
fn coarse_ms_since(epoch: u64) -> u64 {
    drl_core::time::coarse_monotonic_nanos().saturating_sub(epoch) / 1_000_000
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct Registry {
    /// The registry's start on the precise clock (deadlines are
    /// `Instant`s)...
    epoch: Instant,
    /// ...and on the coarse one (activity is recorded on it).
    epoch_coarse: u64,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    listener: &'static str,
}

impl Registry {
    /// An empty registry; `listener` labels its metrics.
    pub fn new(listener: &'static str) -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            epoch_coarse: drl_core::time::coarse_monotonic_nanos(),
            next: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            listener,
        })
    }

    fn now_ms(&self) -> u64 {
        coarse_ms_since(self.epoch_coarse)
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.conns.lock().len()
    }

    fn count(&self, event: &'static str) {
        metrics::counter!("drl_connections_total", "listener" => self.listener, "event" => event)
            .increment(1);
    }

    /// Makes room for one more connection: true if there is room (maybe
    /// after asking the longest-idle connection to close).
    fn admit(&self, max: usize) -> bool {
        let conns = self.conns.lock();
        if conns.len() < max {
            return true;
        }
        let victim = conns
            .values()
            .filter(|c| {
                c.inflight.load(Ordering::Acquire) == 0 && !c.evicting.load(Ordering::Relaxed)
            })
            .min_by_key(|c| c.last_active.load(Ordering::Relaxed));
        match victim {
            Some(v) => {
                v.evicting.store(true, Ordering::Relaxed);
                v.close.notify_one();
                self.count("evicted_idle");
                true
            }
            None => false,
        }
    }

    fn insert(self: &Arc<Self>) -> (Arc<ConnState>, Entry) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let st = Arc::new(ConnState {
            inflight: AtomicU32::new(0),
            last_active: AtomicU64::new(self.now_ms()),
            served: AtomicBool::new(false),
            close: Notify::new(),
            evicting: AtomicBool::new(false),
            linger: AtomicBool::new(false),
        });
        let n = {
            let mut c = self.conns.lock();
            c.insert(id, st.clone());
            c.len()
        };
        metrics::gauge!("drl_connections_open", "listener" => self.listener).set(n as f64);
        (
            st,
            Entry {
                registry: self.clone(),
                id,
            },
        )
    }
}

/// Removes a connection from its registry when dropped.
struct Entry {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let n = {
            let mut c = self.registry.conns.lock();
            c.remove(&self.id);
            c.len()
        };
        metrics::gauge!("drl_connections_open", "listener" => self.registry.listener).set(n as f64);
    }
}

/// A service that keeps its connection's [`ConnState`] up to date.
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    state: Arc<ConnState>,
    registry: Arc<Registry>,
}

impl<S, B> tower::Service<Request<Incoming>> for Tracked<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let guard = Inflight::begin(self.state.clone(), &self.registry);
        TrackedFuture {
            fut: self.inner.call(req),
            guard,
        }
    }
}

/// Ends a request (also when its future is dropped unfinished). `S` is
/// how it holds the connection's state: borrowed (`&ConnState`) where the
/// connection's own future holds the guard, owned (`Arc<ConnState>`) where
/// hyper's service future does.
struct Inflight<S: Deref<Target = ConnState>> {
    state: S,
    // The registry's coarse epoch, copied: cloning the registry's `Arc`
    // per request would move its shared counter between the cores.
    epoch_coarse: u64,
}

impl<S: Deref<Target = ConnState>> Inflight<S> {
    /// Counts a request in flight on the connection (which has now served
    /// one); the guard ends it.
    #[inline]
    fn begin(state: S, registry: &Registry) -> Self {
        state.inflight.fetch_add(1, Ordering::AcqRel);
        state.served.store(true, Ordering::Relaxed);
        Self {
            state,
            epoch_coarse: registry.epoch_coarse,
        }
    }
}

impl<S: Deref<Target = ConnState>> Drop for Inflight<S> {
    #[inline]
    fn drop(&mut self) {
        self.state
            .last_active
            .store(coarse_ms_since(self.epoch_coarse), Ordering::Relaxed);
        self.state.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// The inner future, with the request counted in flight until it ends.
    struct TrackedFuture<F> {
        #[pin]
        fut: F,
        guard: Inflight<Arc<ConnState>>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = this.fut.poll(cx);
        if let Poll::Ready(Ok(resp)) = &out {
            let s = resp.status();
            if s == StatusCode::PAYLOAD_TOO_LARGE || s == StatusCode::REQUEST_TIMEOUT {
                this.guard.state.linger.store(true, Ordering::Relaxed);
            }
        }
        out
    }
}

/// What hyper serves a connection with: `service` tracked on the
/// connection's state, and the socket wrapped so that it comes back
/// through the receiver when hyper drops it ([`HandBack`]).
fn hyper_parts<S, I>(
    service: S,
    state: &Arc<ConnState>,
    registry: &Arc<Registry>,
    io: I,
) -> (
    hyper_util::service::TowerToHyperService<Tracked<S>>,
    TokioIo<HandBack<I>>,
    tokio::sync::oneshot::Receiver<I>,
) {
    let service = Tracked {
        inner: service,
        state: state.clone(),
        registry: registry.clone(),
    };
    let (io, back) = HandBack::new(io);
    (
        hyper_util::service::TowerToHyperService::new(service),
        TokioIo::new(io),
        back,
    )
}

/// Once hyper has dropped the socket (`back`): lingers on it if an answer
/// went out before its request was read ([`ConnState::linger`]).
async fn linger_if_asked<I>(state: &ConnState, back: tokio::sync::oneshot::Receiver<I>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if state.linger.load(Ordering::Relaxed)
        && let Ok(mut io) = back.await
    {
        crate::linger::linger(&mut io).await;
    }
}

/// The file-descriptor budget: raises the soft `RLIMIT_NOFILE` to the hard
/// limit and returns how many connections each of `listeners` listeners
/// may hold (the rest is kept for sockets to peers, Redis, files).
pub fn fd_cap(listeners: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    const RESERVED: u64 = 512;
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), Some(max)) = (lim.current, lim.maximum)
        && cur < max
    {
        let raised = rustix::process::Rlimit {
            current: Some(max),
            maximum: Some(max),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            lim = raised;
        }
    }
    match lim.current {
        None => usize::MAX,
        Some(n) => (n.saturating_sub(RESERVED) / listeners.max(1) as u64).max(16) as usize,
    }
}

/// Serves `service` on `listener` until `stop` is set, then closes every
/// connection gracefully and returns when they are gone. `tls` is read
/// for each new connection. `http2_only` skips HTTP/1 detection (gRPC).
pub async fn serve<S, B>(
    listener: TcpListener,
    tls: TlsSlot,
    service: S,
    limits: ConnLimits,
    http2_only: bool,
    registry: Arc<Registry>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let proto = Proto::Hyper {
        builder: Arc::new(hyper_builder(limits, http2_only)),
        service,
    };
    accept_loop(listener, tls, proto, limits, registry, stop).await
}

/// hyper-util's HTTP/1.1 + HTTP/2 server settings for `limits`.
fn hyper_builder(limits: ConnLimits, http2_only: bool) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own header timer would also close kept-alive HTTP/1
    // connections after `header_read_timeout` between requests; the
    // watchdog in `drive` bounds the first head and later idleness itself.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams);
    if http2_only {
        builder = builder.http2_only();
    }
    builder
}

/// Serves gRPC on `listener` as [`serve`] does, on the direct h2
/// transport: `hot` answers the hot-path methods and hands the rest to
/// tonic's routes.
pub async fn serve_grpc_direct(
    listener: TcpListener,
    tls: TlsSlot,
    hot: Arc<crate::grpc::hot::HotPath>,
    limits: ConnLimits,
    registry: Arc<Registry>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let proto: Proto<crate::guard::GrpcGuard> = Proto::Direct {
        builder: Arc::new(crate::grpc::direct::builder(Some(
            limits.max_concurrent_streams,
        ))),
        hot,
    };
    accept_loop(listener, tls, proto, limits, registry, stop).await
}

/// How a listener speaks on its connections.
enum Proto<S> {
    /// hyper-util serving a tower service.
    Hyper {
        builder: Arc<auto::Builder<TokioExecutor>>,
        service: S,
    },
    /// gRPC on h2 directly.
    Direct {
        builder: Arc<h2::server::Builder>,
        hot: Arc<crate::grpc::hot::HotPath>,
    },
}

impl<S: Clone> Clone for Proto<S> {
    fn clone(&self) -> Self {
        match self {
            Proto::Hyper { builder, service } => Proto::Hyper {
                builder: builder.clone(),
                service: service.clone(),
            },
            Proto::Direct { builder, hot } => Proto::Direct {
                builder: builder.clone(),
                hot: hot.clone(),
            },
        }
    }
}

async fn accept_loop<S, B>(
    listener: TcpListener,
    tls: TlsSlot,
    proto: Proto<S>,
    limits: ConnLimits,
    registry: Arc<Registry>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Each connection is a task of its own (tokio's cooperative budget
    // applies to it); the set is only for the drain at shutdown.
    let mut conns = tokio::task::JoinSet::new();
    let mut last_accept_error = None::<Instant>;
    loop {
        let (tcp, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (or a transient error): make
                    // room by closing the longest-idle connection and
                    // retry shortly; log at most once a second.
                    if last_accept_error.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                        tracing::warn!(listener = registry.listener, error = %e, open = registry.open(), "accept failed");
                        last_accept_error = Some(Instant::now());
                    }
                    registry.admit(0);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = stopping(&mut stop) => break,
            // Reap ended connections (their results are nothing).
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        if !registry.admit(limits.max_connections) {
            registry.count("refused");
            drop(tcp);
            continue;
        }
        registry.count("accepted");
        let _ = tcp.set_nodelay(true);
        let (state, entry) = registry.insert();
        let ctx = ConnCtx {
            proto: proto.clone(),
            tls: tls.acceptor(),
            limits,
            registry: registry.clone(),
            state,
            stop: stop.clone(),
        };
        match crate::conn_threads::next() {
            None => {
                conns.spawn(async move {
                    let _entry = entry;
                    ctx.run(tcp).await;
                });
            }
            // Registered anew with the connection thread's I/O driver,
            // inside its runtime (`from_std` needs that runtime's context).
            Some(thread) => match tcp.into_std() {
                Ok(std_tcp) => {
                    conns.spawn_on(
                        async move {
                            let _entry = entry;
                            if let Ok(tcp) = TcpStream::from_std(std_tcp) {
                                ctx.run(tcp).await;
                            }
                        },
                        thread,
                    );
                }
                Err(_) => drop(entry),
            },
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
    Ok(())
}

struct ConnCtx<S> {
    proto: Proto<S>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnLimits,
    registry: Arc<Registry>,
    state: Arc<ConnState>,
    stop: watch::Receiver<bool>,
}

/// How long a connection asked to close may take to finish what it has.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

impl<S, B> ConnCtx<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    async fn run(self, tcp: TcpStream) {
        match self.tls.clone() {
            None => self.drive(tcp).await,
            // Boxed, handshake and all: the handshake's future (a rustls
            // connection inside it) and a TLS stream would otherwise make
            // every plain connection's future larger.
            Some(acceptor) => Box::pin(self.run_tls(acceptor, tcp)).await,
        }
    }

    /// [`run`](Self::run) over TLS: the handshake (bounded by the header
    /// timeout, abandoned on eviction), then the connection.
    async fn run_tls(self, acceptor: tokio_rustls::TlsAcceptor, tcp: TcpStream) {
        let hs = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(tcp));
        let stream = tokio::select! {
            r = hs => r,
            () = self.state.close.notified() => return,
        };
        match stream {
            Ok(Ok(s)) => self.drive(s).await,
            Ok(Err(e)) => {
                self.registry.count("tls_failed");
                tracing::debug!(listener = self.registry.listener, error = %e, "TLS handshake failed");
            }
            Err(_) => self.registry.count("header_timeout"),
        }
    }

    /// Serves `io` under [`supervise`]. hyper's and the `h2` crate's
    /// connection futures are large: they are boxed, so that the task's
    /// own future stays small.
    async fn drive<I>(self, io: I)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let ConnCtx {
            proto,
            limits,
            registry,
            state,
            stop,
            ..
        } = self;
        match proto {
            Proto::Hyper { builder, service } => {
                Box::pin(async move {
                    let (svc, io, back) = hyper_parts(service, &state, &registry, io);
                    {
                        let conn = builder.serve_connection(io, svc);
                        tokio::pin!(conn);
                        let shutdown = |c: Pin<&mut _>| {
                            auto::Connection::graceful_shutdown(c);
                        };
                        supervise(conn, shutdown, limits, registry, state.clone(), stop).await;
                    }
                    linger_if_asked(&state, back).await;
                })
                .await
            }
            Proto::Direct { builder, hot } => {
                let signal = crate::grpc::direct::CloseSignal::default();
                let track = || Inflight::begin(&*state, &registry);
                // Boxed: the h2 crate's connection future is large.
                let mut fut = Box::pin(crate::grpc::direct::serve_connection(
                    io,
                    &builder,
                    &*hot,
                    track,
                    signal.wait(),
                ));
                let shutdown = |_: Pin<&mut _>| signal.close();
                supervise(
                    fut.as_mut(),
                    shutdown,
                    limits,
                    registry.clone(),
                    state.clone(),
                    stop,
                )
                .await;
            }
        }
    }
}

/// Runs `conn` under the idle and header bounds, eviction and shutdown.
async fn supervise<C: Future>(
    mut conn: Pin<&mut C>,
    mut graceful_shutdown: impl FnMut(Pin<&mut C>),
    limits: ConnLimits,
    registry: Arc<Registry>,
    state: Arc<ConnState>,
    mut stop: watch::Receiver<bool>,
) {
    /// What woke the supervisor.
    enum Event {
        Timer,
        Evicted,
        Stopping,
    }
    let mut closing: Option<Instant> = None;
    loop {
        let wake = match closing {
            Some(t) => t + CLOSE_GRACE,
            None => idle_deadline(&state, &registry, limits),
        };
        // The signals are polled only when one of them woke the task, not
        // on every request (crate::race).
        let signals = async {
            tokio::select! {
                () = tokio::time::sleep_until(wake) => Event::Timer,
                () = state.close.notified(), if closing.is_none() => Event::Evicted,
                () = stopping(&mut stop), if closing.is_none() => Event::Stopping,
            }
        };
        let event = match crate::race::race(conn.as_mut(), signals).await {
            Either::Main(_) => return,
            Either::Side(e) => e,
        };
        match event {
            Event::Timer => {
                if closing.is_some() {
                    // It did not finish in time: drop it.
                    return;
                }
                if state.inflight.load(Ordering::Acquire) == 0
                    && Instant::now() >= idle_deadline(&state, &registry, limits)
                {
                    let served = state.served.load(Ordering::Relaxed);
                    registry.count(if served {
                        "idle_timeout"
                    } else {
                        "header_timeout"
                    });
                    graceful_shutdown(conn.as_mut());
                    closing = Some(Instant::now());
                }
            }
            // Evicted: it was idle, so nothing is lost by closing now, and
            // the cap holds without a grace period.
            Event::Evicted => return,
            Event::Stopping => {
                // Shutdown: in-flight requests finish (the listener's drain
                // deadline bounds them), idle ones close now.
                graceful_shutdown(conn.as_mut());
                closing = Some(Instant::now() + Duration::from_secs(3600));
            }
        }
    }
}

/// When the connection becomes idle-closable if nothing happens: the last
/// activity plus the idle bound (the header bound before any request). A
/// connection with requests in flight is looked at again one bound later.
fn idle_deadline(state: &ConnState, registry: &Registry, limits: ConnLimits) -> Instant {
    let bound = if state.served.load(Ordering::Relaxed) {
        limits.idle_timeout
    } else {
        limits.header_read_timeout
    };
    let last = Duration::from_millis(state.last_active.load(Ordering::Relaxed));
    // `last` is on the coarse clock, which lags by a tick or two (and a
    // millisecond of rounding): four ticks of slack, so that the bound
    // holds (a connection closes at most about four ticks after it).
    let slack = drl_core::time::coarse_resolution() * 4 + Duration::from_millis(1);
    let base = registry.epoch + last + bound + slack;
    if state.inflight.load(Ordering::Acquire) > 0 {
        base.max(Instant::now() + bound)
    } else {
        base
    }
}

/// Resolves once `stop` is set (without holding its lock across awaits).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
