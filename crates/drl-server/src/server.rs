//! Running the service: listeners, signals, hot reload, graceful drain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

use crate::config::{self, Config};
use crate::engine::Engine;
use crate::grpc::native::NativeService;
use crate::grpc::pb::rate_limiter_server::RateLimiterServer;
use crate::grpc::rls::RlsService;
use crate::http::{AppState, router};

/// What `drl serve` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The config file (none: the embedded default).
    pub config: Option<PathBuf>,
    /// Overrides `listen.http`.
    pub http: Option<SocketAddr>,
    /// Overrides `listen.grpc`.
    pub grpc: Option<SocketAddr>,
    /// Reload when the config file changes (SIGHUP always reloads).
    pub watch: bool,
}

/// Loads the config named by `opts` (or the embedded default).
pub fn load(opts: &ServeOptions) -> Result<Config, config::ConfigError> {
    match &opts.config {
        Some(p) => config::load_file(p),
        None => Ok(config::embedded()),
    }
}

/// Runs the service until SIGTERM or SIGINT, then drains in-flight
/// requests (for up to `server.shutdown_grace_ms`).
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let cfg = load(&opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = crate::metrics::install();
    let stores = crate::scope::Stores::new();
    if let Some(r) = &cfg.redis {
        stores
            .connect_redis(&(r.clone(), cfg.redis_resilience.clone()))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if let Some(o) = &cfg.orbit {
        stores
            .start_orbit(o)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if let Some(c) = &cfg.cluster {
        stores
            .start_gossip(c)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let engine = Arc::new(
        Engine::with_stores(&cfg, opts.config.clone(), stores)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let http_addr = opts.http.or(cfg.listen.http);
    let grpc_addr = opts.grpc.or(cfg.listen.grpc);
    anyhow::ensure!(
        http_addr.is_some() || grpc_addr.is_some(),
        "nothing to serve: no HTTP or gRPC listener configured"
    );
    // Register signal handlers before announcing the listeners, so that a
    // signal sent right after start is handled, not fatal.
    let shutdown = shutdown_signal()?;
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut bound = Vec::new();

    if let Some(addr) = http_addr {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for HTTP on {addr}"))?;
        let local = listener.local_addr()?;
        bound.push(format!("http={local}"));
        let app = router(AppState {
            engine: engine.clone(),
            metrics: metrics.clone(),
        });
        let rx = stop_rx.clone();
        tasks.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped(rx))
                .await
                .context("HTTP server failed")
        });
    }
    if let Some(addr) = grpc_addr {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for gRPC on {addr}"))?;
        let local = listener.local_addr()?;
        bound.push(format!("grpc={local}"));
        let s = cfg.server;
        let native = RateLimiterServer::new(NativeService::new(engine.clone()))
            .max_decoding_message_size(s.max_body_bytes);
        let rls = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer::new(
            RlsService::new(engine.clone()),
        )
        .max_decoding_message_size(s.max_body_bytes);
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let rx = stop_rx.clone();
        tasks.spawn(async move {
            let mut builder = tonic::transport::Server::builder();
            if s.request_timeout_ms > 0 {
                builder = builder.timeout(Duration::from_millis(s.request_timeout_ms));
            }
            builder
                .add_service(native)
                .add_service(rls)
                .serve_with_incoming_shutdown(incoming, stopped(rx))
                .await
                .context("gRPC server failed")
        });
    }
    // Tests and scripts wait for this line to learn the bound ports.
    eprintln!("drl serve: listening {}", bound.join(" "));
    tracing::info!(listeners = %bound.join(" "), limits = engine.limits().limits.len(), domains = engine.limits().domains.len(), "drl serve started");

    // Metrics upkeep: drains histogram buckets even if nobody scrapes.
    {
        let m = metrics.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(5));
            loop {
                t.tick().await;
                m.run_upkeep();
            }
        });
    }
    spawn_reloaders(
        &engine,
        &opts,
        #[cfg(unix)]
        hup,
    )?;

    let grace = Duration::from_millis(cfg.server.shutdown_grace_ms);
    let signal_engine = engine.clone();
    tokio::select! {
        () = shutdown => {
            tracing::info!("shutdown requested: draining in-flight requests");
            signal_engine.set_draining();
            let _ = stop_tx.send(true);
        }
        Some(res) = tasks.join_next() => {
            res.context("server task panicked")??;
            anyhow::bail!("a listener stopped unexpectedly");
        }
    }
    let drained = tokio::time::timeout(grace, async {
        while let Some(res) = tasks.join_next().await {
            res.context("server task panicked")??;
        }
        anyhow::Ok(())
    })
    .await;
    match drained {
        Ok(r) => r?,
        Err(_) => tracing::warn!(
            grace_ms = cfg.server.shutdown_grace_ms,
            "drain timed out; exiting"
        ),
    }
    tracing::info!("drl serve stopped");
    Ok(())
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A future that resolves on SIGTERM or SIGINT; the handlers are
/// registered when this returns.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// A future that resolves on Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

fn reload(engine: &Engine, why: &str) {
    match engine.reload() {
        Ok(r) => {
            metrics::counter!("drl_config_reloads_total", "result" => "ok").increment(1);
            tracing::info!(
                trigger = why,
                limits = r.limits,
                kept_state = r.kept,
                "config reloaded"
            );
            eprintln!(
                "drl serve: config reloaded ({why}): {} limits, {} kept their state",
                r.limits, r.kept
            );
        }
        Err(e) => {
            metrics::counter!("drl_config_reloads_total", "result" => "error").increment(1);
            tracing::error!(trigger = why, error = %e, "config reload refused; the previous config keeps serving");
            eprintln!(
                "drl serve: config reload refused ({why}), previous config keeps serving: {e}"
            );
        }
    }
}

fn spawn_reloaders(
    engine: &Arc<Engine>,
    opts: &ServeOptions,
    #[cfg(unix)] mut hup: tokio::signal::unix::Signal,
) -> anyhow::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<&'static str>(16);
    #[cfg(unix)]
    {
        let tx = tx.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                if tx.send("SIGHUP").await.is_err() {
                    break;
                }
            }
        });
    }
    if let (true, Some(path)) = (opts.watch, opts.config.as_ref()) {
        let watcher = watch_file(path, tx.clone())?;
        // The watcher lives as long as the process.
        std::mem::forget(watcher);
    }
    let engine = engine.clone();
    tokio::spawn(async move {
        while let Some(why) = rx.recv().await {
            if why == "file change" {
                // Let a burst of writes (editors, atomic renames) settle.
                tokio::time::sleep(Duration::from_millis(100)).await;
                while rx.try_recv().is_ok() {}
            }
            let e = engine.clone();
            let _ = tokio::task::spawn_blocking(move || reload(&e, why)).await;
        }
    });
    Ok(())
}

fn watch_file(
    path: &Path,
    tx: tokio::sync::mpsc::Sender<&'static str>,
) -> anyhow::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let abs = std::path::absolute(path).context("config path")?;
    let dir = abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = abs.file_name().map(|n| n.to_os_string());
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if matches!(ev.kind, EventKind::Access(_)) {
            return;
        }
        if ev
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            let _ = tx.try_send("file change");
        }
    })
    .context("cannot watch the config file")?;
    // Watch the directory: editors and config managers replace files by rename.
    w.watch(&dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    Ok(w)
}
