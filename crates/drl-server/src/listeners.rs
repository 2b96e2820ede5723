//! The HTTP and gRPC listeners, and moving them when a reload changes
//! `listen:`.
//!
//! A reload is two steps around [`drl_service::engine::Engine::apply`]:
//! [`Listeners::prepare`] binds every new address first (if one cannot be
//! bound, the whole reload is refused and nothing changes), then
//! [`Listeners::commit`] serves on the new sockets and stops the old
//! listeners gracefully: they stop accepting at once, and their in-flight
//! requests finish (up to `server.shutdown_grace_ms`). Addresses given on
//! the command line (`--http`, `--grpc`) override the file at every load.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::PrometheusHandle;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::auth::Auth;
use crate::conn::{ConnLimits, Registry};
use crate::grpc::native::NativeService;
use crate::grpc::rls::RlsService;
use crate::guard::{GrpcGuard, HttpGuard};
use crate::http::{AppState, router};
use crate::tls::{self, TlsSlot};
use drl_api::pb::rate_limiter_server::RateLimiterServer;
use drl_config::{Config, ServerConfig};
use drl_service::engine::Engine;

/// Which API a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// HTTP/JSON, forward-auth, health, metrics.
    Http,
    /// gRPC: native API and Envoy RLS v3.
    Grpc,
}

impl Kind {
    /// `http` or `grpc`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Grpc => "grpc",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Http => "HTTP",
            Kind::Grpc => "gRPC",
        }
    }

    /// The ALPN protocols offered over TLS.
    fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Kind::Http => &[b"h2", b"http/1.1"],
            Kind::Grpc => &[b"h2"],
        }
    }
}

struct Running {
    /// The address asked for (port 0 stays 0 here).
    requested: SocketAddr,
    /// The address bound.
    local: SocketAddr,
    stop: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    http: Option<Running>,
    grpc: Option<Running>,
    /// Every server task, current and draining.
    tasks: Vec<JoinHandle<()>>,
}

impl State {
    fn slot(&mut self, kind: Kind) -> &mut Option<Running> {
        match kind {
            Kind::Http => &mut self.http,
            Kind::Grpc => &mut self.grpc,
        }
    }
}

/// What one listener must do for a new config.
enum Change {
    Keep,
    Stop,
    Start(SocketAddr, TcpListener),
}

/// Sockets bound and TLS material and tokens loaded for a new config, not
/// serving yet; dropping it closes the sockets.
pub struct Pending {
    http: Change,
    grpc: Change,
    http_tls: tls::Prepared,
    grpc_tls: tls::Prepared,
    auth: crate::auth::PreparedAuth,
}

/// The live listeners.
pub struct Listeners {
    engine: Arc<Engine>,
    metrics: PrometheusHandle,
    flag_http: Option<SocketAddr>,
    flag_grpc: Option<SocketAddr>,
    state: Mutex<State>,
    /// Errors of listeners that stopped without being asked to.
    failed: mpsc::UnboundedSender<anyhow::Error>,
    http_tls: TlsSlot,
    grpc_tls: TlsSlot,
    auth: Auth,
    http_conns: Arc<Registry>,
    grpc_conns: Arc<Registry>,
    /// Connections each listener may hold within the fd limit.
    fd_cap: usize,
    /// Stops the certificate watchers (started with the first listener).
    watchers: Mutex<Option<watch::Sender<bool>>>,
    /// What the gRPC health service (`grpc.health.v1.Health`) says.
    health: tonic_health::server::HealthReporter,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.bound())
    }
}

impl Listeners {
    /// No listeners yet; `http`/`grpc` are the command-line overrides. The
    /// receiver reports listeners that failed.
    pub fn new(
        engine: Arc<Engine>,
        metrics: PrometheusHandle,
        http: Option<SocketAddr>,
        grpc: Option<SocketAddr>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<anyhow::Error>) {
        let (failed, rx) = mpsc::unbounded_channel();
        let l = Arc::new(Self {
            engine,
            metrics,
            flag_http: http,
            flag_grpc: grpc,
            state: Mutex::new(State::default()),
            failed,
            http_tls: TlsSlot::default(),
            grpc_tls: TlsSlot::default(),
            auth: Auth::default(),
            http_conns: Registry::new("http"),
            grpc_conns: Registry::new("grpc"),
            fd_cap: crate::conn::fd_cap(2),
            watchers: Mutex::new(None),
            health: tonic_health::server::HealthReporter::new(),
        });
        (l, rx)
    }

    fn tls(&self, kind: Kind) -> &TlsSlot {
        match kind {
            Kind::Http => &self.http_tls,
            Kind::Grpc => &self.grpc_tls,
        }
    }

    fn registry(&self, kind: Kind) -> &Arc<Registry> {
        match kind {
            Kind::Http => &self.http_conns,
            Kind::Grpc => &self.grpc_conns,
        }
    }

    /// Open connections of the `kind` listener.
    pub fn open_connections(&self, kind: Kind) -> usize {
        self.registry(kind).open()
    }

    /// The connection cap of `server` after the fd limit.
    pub fn conn_limits(&self, server: &ServerConfig) -> ConnLimits {
        ConnLimits::from_server(server, self.fd_cap)
    }

    /// The addresses `cfg` asks for, flags first.
    fn wanted(&self, cfg: &Config) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (
            self.flag_http.or(cfg.listen.http),
            self.flag_grpc.or(cfg.listen.grpc),
        )
    }

    /// Binds the addresses of `cfg` that differ from the live ones, and
    /// loads its TLS certificates and token files. Nothing changes if any
    /// of it fails (the error says which and why). Must be called within
    /// a Tokio runtime.
    pub fn prepare(&self, cfg: &Config) -> anyhow::Result<Pending> {
        let (http, grpc) = self.wanted(cfg);
        anyhow::ensure!(
            http.is_some() || grpc.is_some(),
            "nothing to serve: no HTTP or gRPC listener configured"
        );
        let http_tls = tls::prepare(cfg.listen.http_tls.as_ref(), Kind::Http.alpn())
            .context("listen.http_tls")?;
        let grpc_tls = tls::prepare(cfg.listen.grpc_tls.as_ref(), Kind::Grpc.alpn())
            .context("listen.grpc_tls")?;
        let auth = crate::auth::prepare(&cfg.auth).map_err(|e| anyhow::anyhow!(e))?;
        let state = self.state.lock();
        let change = |kind: Kind, want: Option<SocketAddr>, cur: &Option<Running>| match (want, cur)
        {
            (None, None) => Ok(Change::Keep),
            (None, Some(_)) => Ok(Change::Stop),
            (Some(w), Some(r)) if r.requested == w => Ok(Change::Keep),
            (Some(w), _) => bind(kind, w).map(|l| Change::Start(w, l)),
        };
        Ok(Pending {
            http: change(Kind::Http, http, &state.http)?,
            grpc: change(Kind::Grpc, grpc, &state.grpc)?,
            http_tls,
            grpc_tls,
            auth,
        })
    }

    /// Serves on the sockets of `pending` and stops the listeners they
    /// replace (gracefully, for up to `server.shutdown_grace_ms`). Returns
    /// one line per listener that changed. Must be called within a Tokio
    /// runtime.
    pub fn commit(&self, pending: Pending, server: ServerConfig) -> Vec<String> {
        self.http_tls.set(pending.http_tls);
        self.grpc_tls.set(pending.grpc_tls);
        self.auth.set(pending.auth);
        self.start_watchers();
        let mut state = self.state.lock();
        state.tasks.retain(|t| !t.is_finished());
        let mut changes = Vec::new();
        for (kind, change) in [(Kind::Http, pending.http), (Kind::Grpc, pending.grpc)] {
            let old = match change {
                Change::Keep => continue,
                Change::Stop => state.slot(kind).take(),
                Change::Start(requested, listener) => {
                    let (running, task) = self.spawn(kind, requested, listener, &server);
                    state.tasks.push(task);
                    let local = running.local;
                    self.warn_if_exposed(kind, local);
                    let old = state.slot(kind).replace(running);
                    changes.push(match &old {
                        Some(o) => {
                            format!("{} listener moved from {} to {local}", kind.name(), o.local)
                        }
                        None => format!("{} listener started on {local}", kind.name()),
                    });
                    old
                }
            };
            if let Some(o) = old {
                if state.slot(kind).is_none() {
                    changes.push(format!("{} listener on {} stopped", kind.name(), o.local));
                }
                let _ = o.stop.send(true);
            }
        }
        changes
    }

    fn spawn(
        &self,
        kind: Kind,
        requested: SocketAddr,
        listener: TcpListener,
        s: &ServerConfig,
    ) -> (Running, JoinHandle<()>) {
        let local = listener.local_addr().unwrap_or(requested);
        let (stop, rx) = watch::channel(false);
        let grace = Duration::from_millis(s.shutdown_grace_ms);
        let limits = self.conn_limits(s);
        let tls = self.tls(kind).clone();
        let registry = self.registry(kind).clone();
        let auth = self.auth.clone();
        let serve: futures::future::BoxFuture<'static, anyhow::Result<()>> = match kind {
            Kind::Http => {
                let router = router(AppState {
                    engine: self.engine.clone(),
                    metrics: self.metrics.clone(),
                });
                let svc = HttpGuard { router, auth };
                let rx = rx.clone();
                Box::pin(async move {
                    crate::conn::serve(listener, tls, svc, limits, false, registry, rx)
                        .await
                        .context("HTTP server failed")
                })
            }
            Kind::Grpc => {
                let native = RateLimiterServer::new(NativeService::new(self.engine.clone()))
                    .max_decoding_message_size(s.max_body_bytes);
                let rls = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer::new(
                    RlsService::new(self.engine.clone()),
                )
                .max_decoding_message_size(s.max_body_bytes);
                let kuadrant =
                    drl_api::kuadrant::rate_limit_service_server::RateLimitServiceServer::new(
                        crate::grpc::kuadrant::KuadrantService::new(self.engine.clone()),
                    )
                    .max_decoding_message_size(s.max_body_bytes);
                let routes = tonic::service::Routes::new(native)
                    .add_service(rls)
                    .add_service(kuadrant)
                    .add_service(tonic_health::pb::health_server::HealthServer::new(
                        tonic_health::server::HealthService::from_health_reporter(
                            self.health.clone(),
                        ),
                    ))
                    .prepare();
                let svc = GrpcGuard {
                    routes,
                    auth,
                    timeout: Duration::from_millis(s.request_timeout_ms),
                };
                // The hot-path methods on the h2 crate directly; the rest
                // through tonic's routes behind the same guard (grpc::hot).
                let hot = Arc::new(crate::grpc::hot::HotPath::new(
                    self.engine.clone(),
                    svc,
                    s.max_body_bytes,
                ));
                let rx = rx.clone();
                Box::pin(async move {
                    crate::conn::serve_grpc_direct(listener, tls, hot, limits, registry, rx)
                        .await
                        .context("gRPC server failed")
                })
            }
        };
        let failed = self.failed.clone();
        let task = tokio::spawn(async move {
            let mut serve = serve;
            let drain_deadline = async {
                stopped(rx.clone()).await;
                tokio::time::sleep(grace).await;
            };
            let res = tokio::select! {
                r = &mut serve => r,
                () = drain_deadline => {
                    tracing::warn!(listener = kind.name(), %local, "drain timed out; closing");
                    Ok(())
                }
            };
            let asked = *rx.borrow();
            match res {
                Ok(()) if asked => {
                    tracing::info!(listener = kind.name(), %local, "listener drained and closed");
                }
                Ok(()) => {
                    let _ = failed.send(anyhow::anyhow!(
                        "the {} listener on {local} stopped unexpectedly",
                        kind.label()
                    ));
                }
                Err(e) => {
                    let _ = failed.send(e);
                }
            }
        });
        (
            Running {
                requested,
                local,
                stop,
            },
            task,
        )
    }

    /// Starts the certificate watchers once (they poll the TLS files of
    /// both listeners until [`Listeners::shutdown`]).
    fn start_watchers(&self) {
        let mut w = self.watchers.lock();
        if w.is_some() {
            return;
        }
        let (tx, rx) = watch::channel(false);
        for kind in [Kind::Http, Kind::Grpc] {
            tokio::spawn(tls::watch(
                self.tls(kind).clone(),
                kind.alpn(),
                kind.name(),
                Duration::from_secs(1),
                rx.clone(),
            ));
        }
        *w = Some(tx);
    }

    /// Warns when a listener is reachable beyond loopback without TLS or
    /// without tokens.
    fn warn_if_exposed(&self, kind: Kind, local: SocketAddr) {
        if local.ip().is_loopback() {
            return;
        }
        if !self.tls(kind).is_tls() {
            tracing::warn!(listener = kind.name(), %local, "listening beyond loopback without TLS: requests, limit keys and tokens travel in clear (set listen.{}_tls)", kind.name());
            eprintln!(
                "drl serve: warning: the {} listener on {local} is reachable beyond loopback without TLS (set listen.{}_tls)",
                kind.name(),
                kind.name()
            );
        }
        if !self.auth.guards_api() {
            tracing::warn!(listener = kind.name(), %local, "listening beyond loopback without bearer tokens: anyone who can reach it can spend any tenant's quota (set auth.tokens_file)");
            eprintln!(
                "drl serve: warning: the {} listener on {local} is reachable beyond loopback without bearer tokens (set auth.tokens_file)",
                kind.name()
            );
        }
    }

    /// `http=ADDR grpc=ADDR` of the live listeners.
    pub fn bound(&self) -> String {
        let state = self.state.lock();
        let mut out = Vec::new();
        if let Some(r) = &state.http {
            out.push(format!("http={}", r.local));
        }
        if let Some(r) = &state.grpc {
            out.push(format!("grpc={}", r.local));
        }
        out.join(" ")
    }

    /// The bound address of the `kind` listener, if it runs.
    pub fn local(&self, kind: Kind) -> Option<SocketAddr> {
        self.state.lock().slot(kind).as_ref().map(|r| r.local)
    }

    /// Sets what the gRPC health service answers: for the server (`""`),
    /// the rate-limit services and `ratelimit` (the name
    /// envoyproxy/ratelimit's health checker registers, so its probes work
    /// unchanged), `SERVING` or `NOT_SERVING` (draining).
    pub async fn set_serving(&self, serving: bool) {
        use tonic_health::ServingStatus;
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in [
            "",
            "drl.v1.RateLimiter",
            "envoy.service.ratelimit.v3.RateLimitService",
            "kuadrant.service.ratelimit.v1.RateLimitService",
            "ratelimit",
        ] {
            self.health.set_service_status(name, status).await;
        }
    }

    /// Stops every listener and waits (up to `grace`) for in-flight
    /// requests, including those of listeners a reload replaced. Returns
    /// false if the wait timed out.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        if let Some(w) = self.watchers.lock().take() {
            let _ = w.send(true);
        }
        let tasks = {
            let mut state = self.state.lock();
            for r in [state.http.take(), state.grpc.take()].into_iter().flatten() {
                let _ = r.stop.send(true);
            }
            std::mem::take(&mut state.tasks)
        };
        tokio::time::timeout(grace, futures::future::join_all(tasks))
            .await
            .is_ok()
    }
}

/// The listen backlog asked of the kernel (which caps it at
/// `net.core.somaxconn`). std's 128 overflows when a fleet of clients
/// (re)connects at once: the kernel then drops SYNs and each dropped
/// client waits a whole SYN retransmission (1 s, then 3 s) to connect.
pub const LISTEN_BACKLOG: u32 = 4096;

fn bind(kind: Kind, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let what = || format!("cannot listen for {} on {addr}", kind.label());
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .with_context(what)?;
    // As std's bind does on Unix: a restart may bind while the previous
    // process's connections are in TIME_WAIT.
    socket.set_reuseaddr(true).with_context(what)?;
    socket.bind(addr).with_context(what)?;
    socket.listen(LISTEN_BACKLOG).with_context(what)
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(http: Option<SocketAddr>, grpc: Option<SocketAddr>) -> Config {
        let mut c = drl_config::parse("limits:\n  - name: a\n    quota: 1/s\n", "<test>").unwrap();
        c.listen.http = http;
        c.listen.grpc = grpc;
        c
    }

    fn listeners(flags: (Option<SocketAddr>, Option<SocketAddr>)) -> Arc<Listeners> {
        let c = cfg(None, None);
        let engine = Arc::new(Engine::new(&c, None).unwrap());
        Listeners::new(engine, drl_service::metrics::install(), flags.0, flags.1).0
    }

    fn any_port() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[tokio::test]
    async fn a_config_without_any_listener_is_refused() {
        let l = listeners((None, None));
        let e = l.prepare(&cfg(None, None)).err().unwrap();
        assert!(e.to_string().contains("nothing to serve"), "{e}");
        // A flag counts as a listener.
        let l = listeners((Some(any_port()), None));
        assert!(l.prepare(&cfg(None, None)).is_ok());
    }

    #[tokio::test]
    async fn unchanged_addresses_keep_their_listener_and_null_stops_one() {
        let l = listeners((None, None));
        let c = cfg(Some(any_port()), Some(any_port()));
        let p = l.prepare(&c).unwrap();
        l.commit(p, c.server.clone());
        let (http, grpc) = (l.local(Kind::Http).unwrap(), l.local(Kind::Grpc).unwrap());
        // Same requested addresses: nothing moves (port 0 is not re-bound).
        let p = l.prepare(&c).unwrap();
        assert!(l.commit(p, c.server).is_empty());
        assert_eq!(l.local(Kind::Http), Some(http));
        // `http: null` stops the HTTP listener.
        let c2 = cfg(None, Some(any_port()));
        let p = l.prepare(&c2).unwrap();
        let changes = l.commit(p, c2.server);
        assert_eq!(changes, [format!("http listener on {http} stopped")]);
        assert_eq!(l.local(Kind::Http), None);
        assert_eq!(l.local(Kind::Grpc), Some(grpc));
        assert!(l.shutdown(Duration::from_secs(30)).await);
    }
}
