//! The seeded fault schedule: one fault at a time, a seeded pause between
//! two, each of a kind drawn with [`WEIGHTS`]:
//!
//! - `kill-restart`: SIGKILL a `drl serve` node, restart it 2 s later on
//!   the same addresses and config;
//! - `stop-cont`: SIGSTOP a node for 1.5 s, then SIGCONT;
//! - `redis-restart`: SIGKILL the `redis-server`, restart it 2 s later
//!   (empty: no persistence);
//! - `gossip-partition`: one gossip node's `cluster.faults.isolate: true`
//!   for 8 s (config rewritten, SIGHUP), then removed;
//! - `gossip-loss`: `cluster.faults.drop_rate: 0.2` on all gossip nodes for
//!   10 s, then removed;
//! - `reload-spare`: a node's config with limit `spare`'s quota changed,
//!   SIGHUP (limits are never removed: a reload that drops limits may be
//!   refused by design);
//! - `reload-same`: the same file written again, SIGHUP.
//!
//! Every fault is recorded with its start and end (the end of a restart is
//! when the process answers again) for the checks' exclusions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::load::unix_ns;
use crate::processes::{Group, wait_ready};
use crate::topology::Topology;

/// Fault kinds and their weights in the draw.
pub const WEIGHTS: [(&str, u32); 7] = [
    ("kill-restart", 3),
    ("stop-cont", 2),
    ("redis-restart", 1),
    ("gossip-partition", 1),
    ("gossip-loss", 1),
    ("reload-spare", 2),
    ("reload-same", 1),
];

/// Pause between two faults, s (uniform).
pub const GAP_S: (u64, u64) = (4, 10);
/// The longest fault, s (no fault starts later than this before the end).
pub const LONGEST_S: u64 = 12;

/// One fault injected.
#[derive(Debug, Clone)]
pub struct Injected {
    /// Its kind (a name of [`WEIGHTS`]).
    pub kind: &'static str,
    /// The processes it acted on (indices).
    pub nodes: Vec<usize>,
    /// Started (unix ns).
    pub start_ns: u64,
    /// Over: the process answers again, or the config is back (unix ns).
    pub end_ns: u64,
}

/// What the fault task shares with the rest of the run.
pub struct Shared {
    /// The processes.
    pub topo: Mutex<Topology>,
    /// The `drl` binary.
    pub drl: PathBuf,
    /// Faults injected so far.
    pub injected: Mutex<Vec<Injected>>,
    /// Faults that did not go as they should (a restart that never came
    /// up, a refused reload): each a failure of the soak.
    pub failures: Mutex<Vec<String>>,
    /// Run start (unix ns), for messages.
    pub t0_ns: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn fail(&self, msg: String) {
        eprintln!("FAIL {msg}");
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(msg);
    }

    fn set_nodes(&self, slot: usize, nodes: &[usize]) {
        self.injected.lock().unwrap_or_else(|e| e.into_inner())[slot].nodes = nodes.to_vec();
    }

    fn sec(&self) -> u64 {
        unix_ns().saturating_sub(self.t0_ns.load(Ordering::Relaxed)) / 1_000_000_000
    }

    fn topo(&self) -> std::sync::MutexGuard<'_, Topology> {
        self.topo.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Draws a kind from [`WEIGHTS`].
pub fn draw(rng: &mut ChaCha8Rng) -> &'static str {
    let total: u32 = WEIGHTS.iter().map(|w| w.1).sum();
    let mut x = rng.random_range(0..total);
    for (k, w) in WEIGHTS {
        if x < w {
            return k;
        }
        x -= w;
    }
    WEIGHTS[0].0
}

/// Injects faults from `first` (after the start) until `until` (both
/// measured from now) or `stop`.
pub async fn run(
    sh: Arc<Shared>,
    client: reqwest::Client,
    seed: u64,
    first: Duration,
    until: Duration,
    stop: Arc<AtomicBool>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17);
    let start = Instant::now();
    tokio::time::sleep(first).await;
    while !stop.load(Ordering::Relaxed) && start.elapsed() + Duration::from_secs(LONGEST_S) < until
    {
        let kind = draw(&mut rng);
        let drl_cluster_nets: Vec<usize> = {
            let t = sh.topo();
            (0..t.procs.len())
                .filter(|&i| t.procs[i].group != Group::RedisServer)
                .collect()
        };
        let gossip = sh.topo().of(Group::Gossip);
        let start_ns = unix_ns();
        // Recorded at once (end unknown yet): the checks see a fault in
        // progress.
        let slot = {
            let mut inj = sh.injected.lock().unwrap_or_else(|e| e.into_inner());
            inj.push(Injected {
                kind,
                nodes: Vec::new(),
                start_ns,
                end_ns: u64::MAX,
            });
            inj.len() - 1
        };
        let nodes = match kind {
            "kill-restart" => {
                let n = drl_cluster_nets[rng.random_range(0..drl_cluster_nets.len())];
                sh.set_nodes(slot, &[n]);
                kill_restart(&sh, &client, n, Duration::from_secs(2)).await;
                vec![n]
            }
            "stop-cont" => {
                let n = drl_cluster_nets[rng.random_range(0..drl_cluster_nets.len())];
                sh.set_nodes(slot, &[n]);
                stop_cont(&sh, n, Duration::from_millis(1500)).await;
                vec![n]
            }
            "redis-restart" => {
                let n = sh.topo().redis_server();
                sh.set_nodes(slot, &[n]);
                kill_restart(&sh, &client, n, Duration::from_secs(2)).await;
                vec![n]
            }
            "gossip-partition" => {
                let n = gossip[rng.random_range(0..gossip.len())];
                sh.set_nodes(slot, &[n]);
                sh.topo().state[n].isolate = true;
                reload(&sh, n, kind).await;
                tokio::time::sleep(Duration::from_secs(8)).await;
                sh.topo().state[n].isolate = false;
                reload(&sh, n, kind).await;
                vec![n]
            }
            "gossip-loss" => {
                sh.set_nodes(slot, &gossip);
                for &n in &gossip {
                    sh.topo().state[n].drop_rate = 0.2;
                    reload(&sh, n, kind).await;
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
                for &n in &gossip {
                    sh.topo().state[n].drop_rate = 0.0;
                    reload(&sh, n, kind).await;
                }
                gossip.clone()
            }
            "reload-spare" => {
                let n = drl_cluster_nets[rng.random_range(0..drl_cluster_nets.len())];
                {
                    let mut t = sh.topo();
                    t.state[n].spare = if t.state[n].spare == 50 { 60 } else { 50 };
                }
                reload(&sh, n, kind).await;
                vec![n]
            }
            _ => {
                let n = drl_cluster_nets[rng.random_range(0..drl_cluster_nets.len())];
                reload(&sh, n, kind).await;
                vec![n]
            }
        };
        let end_ns = unix_ns();
        {
            let t = sh.topo();
            let names: Vec<&str> = nodes.iter().map(|&n| t.procs[n].name.as_str()).collect();
            eprintln!(
                "fault  s={:>5} {kind} on {} ({} ms)",
                start_ns.saturating_sub(sh.t0_ns.load(Ordering::Relaxed)) / 1_000_000_000,
                names.join(","),
                (end_ns - start_ns) / 1_000_000
            );
        }
        {
            let mut inj = sh.injected.lock().unwrap_or_else(|e| e.into_inner());
            inj[slot].nodes = nodes;
            inj[slot].end_ns = end_ns;
        }
        let gap = rng.random_range(GAP_S.0 * 1000..=GAP_S.1 * 1000);
        tokio::time::sleep(Duration::from_millis(gap)).await;
    }
}

/// SIGKILL process `n`, wait `down`, start it again and wait until it
/// answers.
pub async fn kill_restart(sh: &Shared, client: &reqwest::Client, n: usize, down: Duration) {
    let (group, addr) = {
        let mut t = sh.topo();
        if let Err(e) = t.procs[n].kill() {
            sh.fail(format!("s={} kill {}: {e:#}", sh.sec(), t.procs[n].name));
        }
        (t.procs[n].group, t.procs[n].http)
    };
    tokio::time::sleep(down).await;
    let spawned = {
        let mut t = sh.topo();
        let r = t.procs[n].spawn(&sh.drl);
        r.map_err(|e| format!("s={} restart {}: {e:#}", sh.sec(), t.procs[n].name))
    };
    if let Err(e) = spawned {
        return sh.fail(e);
    }
    if let Err(e) = wait_ready(client, group, addr).await {
        let name = sh.topo().procs[n].name.clone();
        sh.fail(format!(
            "s={} {name} restarted but never ready: {e:#}",
            sh.sec()
        ));
    }
}

/// SIGSTOP process `n` for `pause`, then SIGCONT.
pub async fn stop_cont(sh: &Shared, n: usize, pause: Duration) {
    if let Err(e) = sh.topo().procs[n].signal("STOP") {
        return sh.fail(format!("s={} {e:#}", sh.sec()));
    }
    tokio::time::sleep(pause).await;
    if let Err(e) = sh.topo().procs[n].signal("CONT") {
        sh.fail(format!("s={} {e:#}", sh.sec()));
    }
}

/// The service's own log lines for a reload's outcome.
pub const RELOADED: &str = "drl serve: config reloaded";
/// See [`RELOADED`].
pub const REFUSED: &str = "drl serve: config reload refused";

/// Writes process `n`'s config as its state says, sends SIGHUP, and
/// waits (10 s at most) for the node to log the reload; a refusal or no
/// answer is a failure.
pub async fn reload(sh: &Shared, n: usize, why: &str) {
    let (ok0, bad0, name) = {
        let t = sh.topo();
        let p = &t.procs[n];
        (p.count_log(RELOADED), p.count_log(REFUSED), p.name.clone())
    };
    {
        let mut t = sh.topo();
        let text = t.config(n);
        let p = &mut t.procs[n];
        if let Err(e) = p.write_config(&text).and_then(|_| p.signal("HUP")) {
            drop(t);
            return sh.fail(format!("s={} {why}: reload {name}: {e:#}", sh.sec()));
        }
    }
    let start = Instant::now();
    loop {
        let (ok, bad) = {
            let t = sh.topo();
            (
                t.procs[n].count_log(RELOADED),
                t.procs[n].count_log(REFUSED),
            )
        };
        if bad > bad0 {
            return sh.fail(format!(
                "s={} {why}: {name} refused the reload (see its log)",
                sh.sec()
            ));
        }
        if ok > ok0 {
            return;
        }
        if start.elapsed() > Duration::from_secs(10) {
            return sh.fail(format!(
                "s={} {why}: {name} did not log a reload within 10 s",
                sh.sec()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
