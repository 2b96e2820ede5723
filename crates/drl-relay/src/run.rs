//! Running a relay: the checks, the queue, the rules, the packet loop,
//! the listener, and the cleanup on SIGTERM/SIGINT.
//!
//! Order matters: the queue is bound before the rules go in (so a
//! fail-closed rule never meets an unbound queue), and on stop the rules
//! go first, then held packets are released, then the queue is unbound
//! and the gossip node leaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drl_core::Nanos;

use crate::classify::Classifier;
use crate::config::{RelayConfig, Scope};
use crate::delay::DelayLine;
use crate::http::{self, HttpState};
use crate::iptables::Rules;
use crate::limiter::Limiter;
use crate::nfqueue::{Queue, QueueOptions};
use crate::packet;
use crate::stats::Stats;

/// Packets handled per batch (one verdict datagram).
pub const BATCH: usize = 256;

/// The relay could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A precondition is missing (interface, privilege, tool).
    #[error("{0}")]
    Setup(String),
    /// The queue failed while running.
    #[error("NFQUEUE: {0}")]
    Queue(#[from] std::io::Error),
}

/// Checks that `name` is an interface of this network namespace.
pub fn check_interface(name: &str) -> Result<(), RunError> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )
    .map_err(|e| RunError::Setup(format!("cannot open a socket to look up interfaces: {e}")))?;
    if rustix::net::netdevice::name_to_index(&sock, name).is_ok() {
        return Ok(());
    }
    let have: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    Err(RunError::Setup(format!(
        "interface {name:?} (config `interface:`) does not exist in this network namespace \
         (interfaces here: {})",
        if have.is_empty() {
            "unknown".to_string()
        } else {
            have.join(", ")
        }
    )))
}

/// Checks the privilege the relay needs, naming what is missing.
pub fn check_privilege() -> Result<(), RunError> {
    if rustix::process::geteuid().is_root() {
        return Ok(());
    }
    // Not root: CAP_NET_ADMIN may still be granted (file capabilities);
    // the queue bind is the real test, this only explains it early.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 1 << 12;
    if eff & CAP_NET_ADMIN == 0 {
        return Err(RunError::Setup(
            "drl relay needs CAP_NET_ADMIN (to bind an NFQUEUE and change iptables rules): run \
             it as root, or grant it with `setcap cap_net_admin,cap_net_raw+ep $(which drl)`"
                .into(),
        ));
    }
    Ok(())
}

/// Runs the relay of `cfg` until SIGTERM/SIGINT (or `stop` is set).
/// `on_ready` is called once the queue is bound, the rules are in and the
/// listener is up, with the listener's address.
pub fn run(
    cfg: RelayConfig,
    stop: Arc<AtomicBool>,
    on_ready: impl FnOnce(Option<std::net::SocketAddr>),
) -> Result<(), RunError> {
    check_privilege()?;
    if let Some(i) = &cfg.interface {
        check_interface(i)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("drl-relay-rt")
        .build()
        .map_err(|e| RunError::Setup(format!("tokio runtime: {e}")))?;
    // Signals first: a SIGTERM during start-up still cleans up.
    {
        let stop = stop.clone();
        rt.spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    let mut limiter = match cfg.scope {
        Scope::Local => Limiter::local(&cfg).map_err(RunError::Setup)?,
        Scope::Gossip => rt
            .block_on(Limiter::gossip(&cfg))
            .map_err(|e| RunError::Setup(format!("gossip node: {e}")))?,
    };
    let mut queue = Queue::open(
        cfg.queue,
        QueueOptions {
            max_len: cfg.queue_max_len,
            fail_open: cfg.accept_when_full,
        },
    )?;
    let mut rules = Rules::plan(&cfg);
    if cfg.install_rules {
        rules
            .install(&cfg)
            .map_err(|e| RunError::Setup(e.to_string()))?;
    }
    let stats = Arc::new(Stats::new(
        cfg.queue,
        cfg.classes.iter().map(|c| c.name.clone()).collect(),
        cfg.classes.iter().map(|c| c.rate).collect(),
    ));
    let ready = Arc::new(AtomicBool::new(false));
    let listen = match cfg.listen {
        Some(addr) => Some(
            rt.block_on(http::serve(
                addr,
                HttpState {
                    stats: stats.clone(),
                    snaps: limiter.snapshots(),
                    ready: ready.clone(),
                },
            ))
            .map_err(|e| RunError::Setup(e.to_string()))?,
        ),
        None => None,
    };
    ready.store(true, Ordering::Relaxed);
    tracing::info!(
        queue = cfg.queue,
        chain = rules.chain(),
        algorithm = %cfg.algorithm,
        scope = ?cfg.scope,
        "relay running"
    );
    on_ready(listen);
    let result = packet_loop(&cfg, &mut queue, &mut limiter, &stats, &stop);
    ready.store(false, Ordering::Relaxed);
    // Stop capturing first, then let the held packets go.
    rules.remove();
    let mut delay_rest = Vec::new();
    let _ = queue.recv_batch(None, usize::MAX, |p| delay_rest.push(p.id));
    for id in delay_rest {
        queue.verdict(id, true);
    }
    let _ = queue.flush();
    let _ = queue.unbind();
    if let Limiter::Gossip { store, .. } = &limiter {
        rt.block_on(store.leave());
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// A classified packet: class index, IP length, flow (5-tuple hash).
type Decided = (usize, u32, u64);

fn packet_loop(
    cfg: &RelayConfig,
    queue: &mut Queue,
    limiter: &mut Limiter,
    stats: &Stats,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let classifier = Classifier::new(cfg.classes.iter().map(|c| c.matches.clone()).collect());
    let mut delay = DelayLine::new(cfg.delay_ms.saturating_mul(1_000_000));
    let origin = Instant::now();
    let now = || origin.elapsed().as_nanos() as Nanos;
    let mut batch: Vec<(u32, Option<Decided>)> = Vec::with_capacity(BATCH);
    let mut last_stats = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut wait: Nanos = 50_000_000;
        if let Some(next) = limiter.tick() {
            wait = wait.min(next.max(100_000));
        }
        if let Some(due) = delay.next_due() {
            wait = wait.min(due.saturating_sub(now()).max(50_000));
        }
        batch.clear();
        let accept_all = cfg.accept_all;
        queue.recv_batch(Some(Duration::from_nanos(wait)), BATCH, |p| {
            if accept_all {
                batch.push((p.id, None));
                return;
            }
            let decided = match packet::parse(p.payload) {
                Ok(pk) => match classifier.classify(&pk, p.mark) {
                    Some(c) => Some((c, pk.len, pk.flow())),
                    None => {
                        stats.unclassified.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                },
                Err(_) => {
                    stats.unparsed.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
            batch.push((p.id, decided));
        })?;
        let t = now();
        for &(id, decided) in &batch {
            let accept = match decided {
                Some((class, len, flow)) => {
                    let ok = limiter.decide(class, len as u64, flow);
                    stats.count(class, len as u64, ok);
                    ok
                }
                None => true,
            };
            if accept && delay.is_active() {
                delay.push(t, id);
            } else {
                queue.verdict(id, accept);
            }
        }
        delay.release(now(), |id| queue.verdict(id, true));
        queue.flush()?;
        if last_stats.elapsed() >= Duration::from_millis(100) || batch.is_empty() {
            stats.set_queue(queue.stats(), delay.len());
            last_stats = Instant::now();
        }
    }
    delay.release_all(|id| queue.verdict(id, true));
    queue.flush()?;
    stats.set_queue(queue.stats(), 0);
    Ok(())
}
