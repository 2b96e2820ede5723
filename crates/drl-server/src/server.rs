//! Running the service: listeners, signals, hot reload, graceful drain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::listeners::Listeners;
use drl_config::{self as config, Config};
use drl_service::engine::{Engine, ReloadReport, Trigger};

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
    /// Start even when `config` cannot be loaded (`--wait-for-config`):
    /// every decision is refused and health reports not serving until a
    /// reload loads it ([`serve`]).
    pub wait_for_config: bool,
}

/// Loads the config named by `opts` (or the embedded default). An empty
/// file is refused.
pub fn load(opts: &ServeOptions) -> Result<Config, config::ConfigError> {
    match &opts.config {
        Some(p) => drl_service::engine::load_config_file(p),
        None => Ok(config::embedded()),
    }
}

/// Loads the config named by `opts` and makes the checks `drl config
/// check` makes (warnings logged): what [`serve`] starts with, and what
/// the first load after `--wait-for-config` must pass.
fn load_checked(opts: &ServeOptions) -> anyhow::Result<Config> {
    let cfg = load(opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let warnings = crate::preflight::check(
        &cfg,
        std::time::SystemTime::now(),
        crate::preflight::Files::Read,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    Ok(cfg)
}

/// Connects the stores `cfg` names (Redis, the per-second Redis) and
/// starts its Orbit ring and gossip cluster; a store already started with
/// the same section is kept.
async fn start_stores(cfg: &Config, stores: &drl_service::scope::Stores) -> anyhow::Result<()> {
    let e = |e: String| anyhow::anyhow!("{e}");
    if let Some(r) = &cfg.redis {
        stores
            .connect_redis(&(r.clone(), cfg.redis_resilience.clone()))
            .await
            .map_err(e)?;
    }
    if let Some(r) = &cfg.redis_per_second {
        stores
            .connect_redis_per_second(&(r.clone(), cfg.redis_resilience.clone()))
            .await
            .map_err(e)?;
    }
    if let Some(o) = &cfg.orbit {
        stores.start_orbit(o).await.map_err(e)?;
    }
    if let Some(c) = &cfg.cluster {
        stores.start_gossip(c).await.map_err(e)?;
    }
    Ok(())
}

/// The OpenTelemetry exporter in use, if any: installed at start, or at
/// the first load after `--wait-for-config`; shut down at exit.
type Spans = Arc<parking_lot::Mutex<Option<crate::trace::Installed>>>;

/// Runs the service until SIGTERM or SIGINT, then drains in-flight
/// requests (for up to `server.shutdown_grace_ms`).
///
/// A config that cannot be loaded (unreadable, invalid, or refused by the
/// checks `drl config check` makes) stops the start, unless
/// `opts.wait_for_config`: then the service starts without one, on the
/// addresses of `--http` / `--grpc` or drl's defaults and with every other
/// section at its default (no tokens, no TLS), refuses every decision
/// ([`drl_service::engine::NOT_LOADED`]) and reports not serving (gRPC
/// health, `/readyz`) until a reload (file change or SIGHUP) loads the
/// config; from then on it serves as if it had started with it.
pub async fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    let loaded = match load_checked(&opts) {
        Ok(cfg) => Some(cfg),
        Err(e) if opts.wait_for_config => {
            tracing::error!(
                error = format!("{e:#}"),
                "config not loaded; serving errors until a reload loads it (--wait-for-config)"
            );
            eprintln!(
                "drl serve: config not loaded, every decision answers an error until a reload loads it: {e:#}"
            );
            None
        }
        Err(e) => return Err(e),
    };
    let metrics = drl_service::metrics::install();
    drl_service::envoy_stats::config_loaded(loaded.is_some());
    // Spans of Envoy RLS calls (`tracing:`; read at the first load only).
    let spans: Spans = Arc::new(parking_lot::Mutex::new(match &loaded {
        Some(cfg) => crate::trace::install(&cfg.tracing)?,
        None => None,
    }));
    let stores = drl_service::scope::Stores::new();
    let engine = Arc::new(match &loaded {
        Some(cfg) => {
            start_stores(cfg, &stores).await?;
            Engine::with_stores(cfg, opts.config.clone(), stores)
                .map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => Engine::not_loaded(
            opts.config
                .clone()
                .context("--wait-for-config needs --config")?,
            stores,
        ),
    });
    let cfg = loaded.unwrap_or_else(Config::empty);
    // Register signal handlers before announcing the listeners, so that a
    // signal sent right after start is handled, not fatal.
    let shutdown = shutdown_signal()?;
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let (listeners, mut failed) =
        Listeners::new(engine.clone(), metrics.clone(), opts.http, opts.grpc);
    let pending = listeners.prepare(&cfg)?;
    listeners.commit(pending, cfg.server);
    listeners.set_serving(engine.is_loaded()).await;

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
    // The status page's once-a-second history.
    drl_service::status::tick::spawn_sampler(engine.clone());
    // Calls decided at their read's stamp convert it to wall-clock time
    // (crate::wall): follow a step of the system clock within a second.
    tokio::spawn(async {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            crate::wall::refresh();
        }
    });
    // The file watcher is in place before the listeners are announced: a
    // change made by whoever waits for the announcement is never missed.
    spawn_reloaders(
        &engine,
        &listeners,
        &spans,
        &opts,
        #[cfg(unix)]
        hup,
    )?;
    // Tests and scripts wait for this line to learn the bound ports.
    let bound = listeners.bound();
    eprintln!("drl serve: listening {bound}");
    tracing::info!(listeners = %bound, limits = engine.limits().limits.len(), domains = engine.limits().domains.len(), loaded = engine.is_loaded(), "drl serve started");

    tokio::select! {
        () = shutdown => {
            tracing::info!("shutdown requested: draining in-flight requests");
            engine.set_draining();
            listeners.set_serving(false).await;
        }
        Some(e) = failed.recv() => {
            return Err(e.context("a listener stopped unexpectedly"));
        }
    }
    // The bound of the config serving now (a reload may have changed it).
    let grace_ms = engine.limits().server.shutdown_grace_ms;
    if !listeners.shutdown(Duration::from_millis(grace_ms)).await {
        tracing::warn!(grace_ms, "drain timed out; exiting");
    }
    // Requests are drained: leave the gossip cluster so that the peers take
    // this node's share at once, not after failure detection.
    engine.stores().leave_clusters().await;
    // The spans still queued leave now (a silent collector: 5 s at most).
    let installed = spans.lock().take();
    if let Some(t) = installed {
        t.shutdown(Duration::from_secs(5)).await;
    }
    tracing::info!("drl serve stopped");
    Ok(())
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

/// Reloads the config file: parse it, bind any new listener address,
/// apply it, then move the listeners. Any error refuses the whole reload
/// and the previous config (and listeners) keep serving.
fn reload(engine: &Engine, listeners: &Listeners, why: &str) {
    let trigger = if why == FILE_CHANGE {
        Trigger::FileChange
    } else {
        Trigger::Signal
    };
    let result = (|| -> anyhow::Result<(ReloadReport, Vec<String>)> {
        let cfg = engine.load().map_err(|e| anyhow::anyhow!("{e}"))?;
        let pending = listeners.prepare(&cfg)?;
        let report = engine
            .apply_from(&cfg, trigger)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((report, listeners.commit(pending, cfg.server)))
    })();
    announce(why, result, false);
}

/// The first load after a start without a config (`--wait-for-config`):
/// as at start, the config read and checked and its stores started, then
/// applied as a reload is; once it serves, health reports serving and the
/// `tracing:` section is installed. Any error leaves the service as it
/// was: refusing every decision, waiting for the next reload.
async fn first_load(engine: &Arc<Engine>, listeners: &Arc<Listeners>, spans: &Spans, why: &str) {
    let trigger = if why == FILE_CHANGE {
        Trigger::FileChange
    } else {
        Trigger::Signal
    };
    let result = async {
        let source = engine.source().cloned();
        let cfg = tokio::task::spawn_blocking(move || {
            load_checked(&ServeOptions {
                config: source,
                ..ServeOptions::default()
            })
        })
        .await??;
        start_stores(&cfg, engine.stores()).await?;
        let (e, l) = (engine.clone(), listeners.clone());
        let (cfg, applied) = tokio::task::spawn_blocking(move || {
            let pending = l.prepare(&cfg)?;
            let report = e
                .apply_from(&cfg, trigger)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let moved = l.commit(pending, cfg.server.clone());
            anyhow::Ok((cfg, (report, moved)))
        })
        .await??;
        if spans.lock().is_none() {
            match crate::trace::install(&cfg.tracing) {
                Ok(t) => *spans.lock() = t,
                Err(e) => tracing::error!(error = format!("{e:#}"), "tracing not started"),
            }
        }
        anyhow::Ok(applied)
    }
    .await;
    let ok = result.is_ok();
    announce(why, result, true);
    // (A drain that began meanwhile keeps health NOT_SERVING.)
    if ok && !engine.is_draining() {
        listeners.set_serving(true).await;
    }
}

/// Logs and counts the outcome of a reload (`first`: the first load after
/// a start without a config).
fn announce(why: &str, result: anyhow::Result<(ReloadReport, Vec<String>)>, first: bool) {
    match result {
        Ok((r, moved)) => {
            metrics::counter!("drl_config_reloads_total", "result" => "ok").increment(1);
            drl_service::envoy_stats::config_loaded(true);
            tracing::info!(
                trigger = why,
                limits = r.limits,
                kept_state = r.kept,
                first,
                "config reloaded"
            );
            for m in &moved {
                tracing::info!(trigger = why, "{m}");
                eprintln!("drl serve: {m}");
            }
            if first {
                eprintln!(
                    "drl serve: config loaded ({why}): {} limits; deciding from now on",
                    r.limits
                );
            } else {
                eprintln!(
                    "drl serve: config reloaded ({why}): {} limits, {} kept their state",
                    r.limits, r.kept
                );
            }
        }
        Err(e) => {
            metrics::counter!("drl_config_reloads_total", "result" => "error").increment(1);
            drl_service::envoy_stats::config_loaded(false);
            if first {
                tracing::error!(
                    trigger = why,
                    error = format!("{e:#}"),
                    "config still not loaded; every decision answers an error"
                );
                eprintln!(
                    "drl serve: config still not loaded ({why}), every decision answers an error: {e:#}"
                );
            } else {
                tracing::error!(
                    trigger = why,
                    error = format!("{e:#}"),
                    "config reload refused; the previous config keeps serving"
                );
                eprintln!(
                    "drl serve: config reload refused ({why}), previous config keeps serving: {e:#}"
                );
            }
        }
    }
}

/// The reload trigger of a file-watch event.
const FILE_CHANGE: &str = "file change";

/// What identifies one version of the config file: its size, mtime and a
/// hash of its content (`None`: unreadable, e.g. between an unlink and a
/// rename).
type Fingerprint = Option<(u64, Option<std::time::SystemTime>, u64)>;

fn fingerprint(path: &Path) -> Fingerprint {
    use std::hash::{Hash, Hasher};
    let meta = std::fs::metadata(path).ok()?;
    let bytes = std::fs::read(path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some((meta.len(), meta.modified().ok(), h.finish()))
}

/// Waits until the file at `path` stays the same (size, mtime, content)
/// for `settle` with no further change event: a file written in pieces
/// (two writes 300 ms apart, an editor's truncate-then-write) is read only
/// once complete. Returns true if a SIGHUP arrived meanwhile.
async fn settle(
    path: &Path,
    settle: Duration,
    rx: &mut tokio::sync::mpsc::Receiver<&'static str>,
) -> bool {
    let mut seen = fingerprint(path);
    let mut hup = false;
    loop {
        tokio::time::sleep(settle).await;
        let mut changed = false;
        while let Ok(why) = rx.try_recv() {
            changed |= why == FILE_CHANGE;
            hup |= why != FILE_CHANGE;
        }
        let now = fingerprint(path);
        if !changed && now == seen {
            return hup;
        }
        seen = now;
    }
}

fn spawn_reloaders(
    engine: &Arc<Engine>,
    listeners: &Arc<Listeners>,
    spans: &Spans,
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
    let listeners = listeners.clone();
    let spans = spans.clone();
    let path = opts.config.clone();
    tokio::spawn(async move {
        while let Some(mut why) = rx.recv().await {
            if why == FILE_CHANGE
                && let Some(path) = &path
            {
                // Reload a settled file only. A SIGHUP that arrives
                // meanwhile is served by this reload, as a SIGHUP.
                let ms = engine.limits().server.reload_settle_ms;
                if settle(path, Duration::from_millis(ms), &mut rx).await {
                    why = "SIGHUP";
                }
            }
            if !engine.is_loaded() {
                first_load(&engine, &listeners, &spans, why).await;
                continue;
            }
            let (e, l) = (engine.clone(), listeners.clone());
            let _ = tokio::task::spawn_blocking(move || reload(&e, &l, why)).await;
        }
    });
    Ok(())
}

/// Watches the config file's directory and signals `tx` on a change to
/// the file: an event naming it (an edit, a replacing rename), or any
/// event after which the file resolves to another target (a symlink
/// swapped further up, as the kubelet updates a ConfigMap volume: it
/// renames a new `..data` link over the old one and never touches the
/// file's own name).
fn watch_file(
    path: &Path,
    tx: tokio::sync::mpsc::Sender<&'static str>,
) -> anyhow::Result<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let abs = std::path::absolute(path).context("config path")?;
    if abs.is_dir() {
        // A config directory: any change inside it (a file written,
        // renamed, a ConfigMap's `..data` swap) reloads all of it.
        let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok_and(|ev| !matches!(ev.kind, EventKind::Access(_))) {
                let _ = tx.try_send(FILE_CHANGE);
            }
        })
        .context("cannot watch the config directory")?;
        w.watch(&abs, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch {}", abs.display()))?;
        return Ok(w);
    }
    let dir = abs
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = abs.file_name().map(|n| n.to_os_string());
    let target = std::sync::Mutex::new(std::fs::canonicalize(&abs).ok());
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if matches!(ev.kind, EventKind::Access(_)) {
            return;
        }
        let named = ev
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_os_string()) == name);
        let now = std::fs::canonicalize(&abs).ok();
        let moved = {
            let mut last = target.lock().unwrap_or_else(|e| e.into_inner());
            let moved = now.is_some() && *last != now;
            if now.is_some() {
                *last = now;
            }
            moved
        };
        if named || moved {
            let _ = tx.try_send(FILE_CHANGE);
        }
    })
    .context("cannot watch the config file")?;
    // Watch the directory: editors and config managers replace files by rename.
    w.watch(&dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    Ok(w)
}
