//! Three `GossipStore` nodes on real loopback UDP sockets in one process,
//! offered 3,000 req/s split 1:2:6 against a 1,000 req/s global limit.
//! Load is generated at the target rate from tokio intervals; offered and
//! admitted counts are measured over windows of the test's own clock.
//!
//! No verdict depends on how fast this machine is: "the cluster gets
//! there" is a wait on the condition (consecutive windows until one holds,
//! under [`HANG_GUARD`]); "never above the limit + 10%" is an upper bound
//! over windows whose length the test measures, which a stall can only
//! loosen, plus what the window before left unused (the exact limiter
//! admits it too when starved clients catch up); detection and leave are
//! waited for, and a leave is told from failure detection by a suspicion
//! timeout longer than the hang guard, not by how fast it was seen.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{KeyLimit, KeyRef, Node, wire};
use drl_cluster_net::transport::frame::{self, Header, Receiver};
use drl_cluster_net::transport::{ClusterKey, KeyRing, channel};
use drl_cluster_net::{GossipConfig, GossipStore};
use drl_core::{Algorithm, Quota};
use drl_store::{Check, LimitSpec};

const KEY: &[u8] = b"gossip cluster test key, 32 byte";
const LIMIT: u64 = 1_000;
const PER_CLIENT: f64 = 1_000.0 / 3.0;

fn spec() -> LimitSpec {
    LimitSpec::new(
        "global",
        Algorithm::Gcra,
        vec![Quota::new(LIMIT, 1_000_000_000).unwrap()],
    )
}

/// One cluster under load at a time in this test binary. The accuracy
/// tests measure admitted rates against real time; run side by side on a
/// 2-core machine, CPU starvation delayed gossip and ticks enough for
/// SWIM to suspect live peers (a CI run saw FPS under 10% loss admit 1,111
/// against 1,000). They are about the algorithms and the network, not
/// about starving the process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cluster {
    nodes: Vec<Arc<parking_lot::Mutex<GossipStore>>>,
    addrs: Vec<SocketAddr>,
    _dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn cluster(net: u8, n: usize, tweak: impl Fn(&mut GossipConfig)) -> Cluster {
    let serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, KEY).unwrap();
    let addrs: Vec<SocketAddr> = (1..=n)
        .map(|i| format!("127.0.{net}.{i}:7946").parse().unwrap())
        .collect();
    let mut nodes = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let mut c = GossipConfig::new(i as u32 + 1, *a, addrs.clone());
        c.key_file = Some(key_file.clone());
        c.flow_separator = Some("|".into());
        tweak(&mut c);
        nodes.push(Arc::new(parking_lot::Mutex::new(
            GossipStore::start(c).await.unwrap(),
        )));
    }
    let c = Cluster {
        nodes,
        addrs,
        _dir: dir,
        _serial: serial,
    };
    wait_until("all nodes see each other", HANG_GUARD, || {
        c.nodes.iter().all(|s| s.lock().live_nodes() == n as u32)
    })
    .await;
    c
}

/// How long a wait on a condition may take before the test fails: a hang
/// guard, not a verdict.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// Offers `clients` requests/s per client (`all|cN` keys) to `node` until
/// `stop`, counting admitted requests.
fn offer(
    node: Arc<parking_lot::Mutex<GossipStore>>,
    clients: usize,
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let spec = spec();
        let keys: Vec<String> = (0..clients).map(|c| format!("all|c{c}")).collect();
        let t0 = Instant::now();
        let mut issued = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let due = (t0.elapsed().as_secs_f64() * PER_CLIENT * clients as f64) as u64;
            let store = node.lock();
            while issued < due {
                let key = &keys[(issued % clients as u64) as usize];
                let d = store
                    .decide_now(Check {
                        spec: &spec,
                        key,
                        cost: 1,
                        now: 0,
                    })
                    .unwrap();
                if d.allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
                issued += 1;
            }
        }
    })
}

struct Load {
    stop: Arc<AtomicBool>,
    admitted: Vec<Arc<AtomicU64>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(c: &Cluster, clients: &[usize]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let admitted: Vec<Arc<AtomicU64>> = clients
            .iter()
            .map(|_| Arc::new(AtomicU64::new(0)))
            .collect();
        let tasks = clients
            .iter()
            .zip(&c.nodes)
            .zip(&admitted)
            .map(|((k, n), a)| offer(n.clone(), *k, stop.clone(), a.clone()))
            .collect();
        Self {
            stop,
            admitted,
            tasks,
        }
    }

    /// Takes consecutive windows of `window` until `check` accepts one's
    /// admitted rates per node (returned), under [`HANG_GUARD`]. Every
    /// window goes into `seen` (for a safety bound over all of them).
    async fn eventually(
        &self,
        what: &str,
        window: Duration,
        seen: &mut Vec<Window>,
        mut check: impl FnMut(&[f64]) -> Result<(), String>,
    ) -> Vec<f64> {
        let t0 = Instant::now();
        let mut why = Vec::new();
        loop {
            let w = self.window(window).await;
            let r = w.rates.clone();
            seen.push(w);
            match check(&r) {
                Ok(()) => {
                    eprintln!("{what}: held after {:?}: {r:.1?}", t0.elapsed());
                    return r;
                }
                Err(e) => {
                    eprintln!("{what}: {e}");
                    why.push(e);
                }
            }
            assert!(
                t0.elapsed() < HANG_GUARD,
                "{what}: no window held within {HANG_GUARD:?}: {why:#?}"
            );
        }
    }

    fn counts(&self) -> Vec<u64> {
        self.admitted
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// Admitted per node per second over `window` (measured).
    async fn window(&self, window: Duration) -> Window {
        let a = self.counts();
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let secs = t0.elapsed().as_secs_f64();
        let rates = self
            .counts()
            .iter()
            .zip(a)
            .map(|(b, a)| (b - a) as f64 / secs)
            .collect();
        Window { rates, secs }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// One measured window: admitted per node per second, and its length.
#[derive(Debug)]
struct Window {
    rates: Vec<f64>,
    secs: f64,
}

/// The safety bound over consecutive windows, each given as its admitted
/// rate (of the nodes counted) and its length in seconds: none admits more
/// than the limit + 10% over its length, plus what the window before left
/// unused, at most the bucket's depth (`LIMIT`). The exact limiter admits
/// that carry too: when the clients were starved of CPU in one window,
/// the bucket refilled, and they catch up in the next. Over windows of
/// demand above the limit the carry is zero.
fn assert_never_over(what: &str, windows: &[(f64, f64)]) {
    let limit = LIMIT as f64;
    let mut carry = 0.0;
    for (i, &(rate, secs)) in windows.iter().enumerate() {
        let admitted = rate * secs;
        assert!(
            admitted <= 1.1 * limit * secs + carry,
            "{what}: window {i} admitted {rate:.0}/s over {secs:.2} s, above the limit + 10% \
             + {carry:.0} unused before it (per second: {:.0?})",
            windows.iter().map(|w| w.0).collect::<Vec<_>>()
        );
        carry = (limit * secs - admitted).clamp(0.0, limit);
    }
}

/// `Err` unless `got` is within `tol` (a fraction) of `want`.
fn near(what: &str, got: f64, want: f64, tol: f64) -> Result<(), String> {
    if (got - want).abs() <= tol * want {
        Ok(())
    } else {
        Err(format!(
            "{what}: got {got:.1}, want {want:.1} ± {:.0}%",
            tol * 100.0
        ))
    }
}

async fn steady_state(net: u8, algorithm: AlgorithmKind, drop_rate: f64) {
    let c = cluster(net, 3, |cfg| {
        cfg.algorithm = algorithm;
        cfg.faults.drop_rate = drop_rate;
        cfg.faults.seed = cfg.node_id as u64 * 7;
    })
    .await;
    let load = Load::start(&c, &[1, 2, 6]);
    // The EWMA estimators (1-second parameter 0.1) settle: a 5 s window
    // within 10% of the limit, each node's share of the admissions within
    // 5 points of its share of the demand.
    let what = format!("{algorithm} loss {drop_rate}");
    let r = load
        .eventually(&what, Duration::from_secs(5), &mut Vec::new(), |r| {
            let total: f64 = r.iter().sum();
            near("global admitted rate", total, LIMIT as f64, 0.10)?;
            for (i, want) in [1.0 / 9.0, 2.0 / 9.0, 6.0 / 9.0].iter().enumerate() {
                let share = r[i] / total;
                if (share - want).abs() >= 0.05 {
                    return Err(format!(
                        "node {} share {share:.3}, demand share {want:.3}",
                        i + 1
                    ));
                }
            }
            Ok(())
        })
        .await;
    load.stop().await;
    eprintln!("{what}: per node {r:?}");
    if drop_rate > 0.0 {
        let s = c.nodes[0].lock().transport_stats();
        assert!(s.injected_drops > 0, "loss was injected: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grd_holds_the_global_limit_and_shares_follow_demand() {
    steady_state(211, AlgorithmKind::Grd, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fps_holds_the_global_limit_and_shares_follow_demand() {
    steady_state(212, AlgorithmKind::Fps, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grd_with_ten_percent_gossip_loss_stays_within_ten_percent() {
    steady_state(213, AlgorithmKind::Grd, 0.10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fps_with_ten_percent_gossip_loss_stays_within_ten_percent() {
    steady_state(218, AlgorithmKind::Fps, 0.10).await;
}

/// Node 3 (two thirds of the demand) crashes: nodes 1 and 2 detect it and
/// take the limit minus its 1/N share, instead of their old 1/3 together,
/// and no window from the crash on admits more than the limit + 10%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_share_is_reclaimed_after_detection() {
    let c = cluster(214, 3, |_| {}).await;
    let load = Load::start(&c, &[1, 2, 6]);
    let before = load
        .eventually("before", Duration::from_secs(2), &mut Vec::new(), |r| {
            near("before", r.iter().sum(), LIMIT as f64, 0.10)
        })
        .await;
    let (t_kill, at_kill) = (Instant::now(), load.counts());
    c.nodes[2].lock().kill();
    let took = wait_until("nodes 1 and 2 see node 3 down", HANG_GUARD, || {
        c.nodes[..2].iter().all(|n| n.lock().live_nodes() == 2)
    })
    .await;
    // From the crash to the detection, nodes 1 and 2 admitted at most the
    // limit + 10% over the time the test measured.
    let dt = t_kill.elapsed().as_secs_f64();
    let during: u64 = load.counts()[..2]
        .iter()
        .zip(&at_kill)
        .map(|(b, a)| b - a)
        .sum();
    // (Node 3's store still decides locally for its load after the kill;
    // only the survivors count.)
    let mut seen = vec![Window {
        rates: vec![during as f64 / dt, 0.0],
        secs: dt,
    }];
    eprintln!("detected in {took:?}; admitted {during} in {dt:.3} s meanwhile");
    // The survivors converge on 2/3 of the limit, each reclaiming capacity.
    let last = load
        .eventually("survivors", Duration::from_secs(1), &mut seen, |r| {
            near(
                "survivors",
                r[..2].iter().sum(),
                LIMIT as f64 * 2.0 / 3.0,
                0.10,
            )?;
            if r[0] > 1.5 * before[0] && r[1] > 1.5 * before[1] {
                Ok(())
            } else {
                Err(format!(
                    "survivors reclaimed too little: {before:?} -> {r:?}"
                ))
            }
        })
        .await;
    load.stop().await;
    let two: Vec<(f64, f64)> = seen
        .iter()
        .map(|w| (w.rates[..2].iter().sum(), w.secs))
        .collect();
    eprintln!("before {before:?}, after {last:?}, survivors per window {two:.2?}");
    assert_never_over("survivors", &two);
}

/// Node 3 is cut off: it falls back to a 1/N share, the others to (N-1)/N,
/// so the cluster as a whole still admits about the limit, and no window
/// from the cut on admits more than the limit + 10%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_node_falls_back_to_one_nth() {
    let c = cluster(215, 3, |_| {}).await;
    let load = Load::start(&c, &[1, 2, 6]);
    load.eventually("before", Duration::from_secs(2), &mut Vec::new(), |r| {
        near("before", r.iter().sum(), LIMIT as f64, 0.10)
    })
    .await;
    c.nodes[2].lock().faults().isolate(true);
    wait_until("both sides see the partition", HANG_GUARD, || {
        c.nodes[2].lock().live_nodes() == 1
            && c.nodes[..2].iter().all(|n| n.lock().live_nodes() == 2)
    })
    .await;
    // The partitioned node zeroes the stale estimates and falls back to 1/N.
    wait_until("the partitioned node to fall back", HANG_GUARD, || {
        c.nodes[2]
            .lock()
            .snapshot("global", "all")
            .is_some_and(|s| s.effective_limit == LIMIT / 3 && s.remote == 0.0)
    })
    .await;
    let mut seen = Vec::new();
    let r = load
        .eventually("partitioned", Duration::from_secs(3), &mut seen, |r| {
            near("partitioned node", r[2], LIMIT as f64 / 3.0, 0.10)?;
            near("majority side", r[0] + r[1], LIMIT as f64 * 2.0 / 3.0, 0.10)
        })
        .await;
    load.stop().await;
    let seen: Vec<(f64, f64)> = seen
        .iter()
        .map(|w| (w.rates.iter().sum(), w.secs))
        .collect();
    eprintln!("partitioned: {r:?}; totals per window {seen:.2?}");
    let snap = c.nodes[2].lock().snapshot("global", "all").unwrap();
    assert_eq!(snap.effective_limit, LIMIT / 3);
    assert_eq!(snap.remote, 0.0, "stale estimates are zeroed");
    assert_never_over("partitioned", &seen);
}

/// Foreign-key, forged, truncated, oversized, replayed and misdirected
/// gossip claiming a huge demand from node 2 never reaches node 1's
/// estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_packets_never_change_an_estimate() {
    let c = cluster(216, 2, |_| {}).await;
    let load = Load::start(&c, &[1, 3]);
    // Node 2's real demand (1,000 req/s) reaches node 1's estimate.
    wait_until("node 2's real demand is seen", HANG_GUARD, || {
        c.nodes[0]
            .lock()
            .snapshot("global", "all")
            .is_some_and(|s| s.remote > 500.0)
    })
    .await;
    let target = c.addrs[0];
    let raw = tokio::net::UdpSocket::bind("127.0.216.9:0").await.unwrap();
    // A well-formed payload from "node 2" claiming a huge demand, made by a
    // sans-IO node with node 2's id and settings.
    let payload = {
        let mut cfg = GossipConfig::new(2, c.addrs[1], c.addrs.clone());
        cfg.flow_separator = Some("|".into());
        let mut node = Node::new(2, cfg.settings(), 2, 0).unwrap();
        node.peer_up(0, 1);
        let key = KeyRef {
            limit: "global",
            aggregate: "all",
        };
        let limit = KeyLimit {
            rate: LIMIT,
            depth: LIMIT,
        };
        node.keys().admit(0, key, limit, 1_000_000_000, 0).unwrap();
        let due = node.poll_timeout().unwrap();
        node.handle_timeout(due);
        let mut buf = Vec::new();
        assert_eq!(node.poll_transmit(due, &mut buf), Some(1));
        // What node 2 claims: its published value (peer table) or its
        // estimate of the mean (Flow Updating, the default).
        let mut claimed = 0.0f32;
        wire::decode(&buf, &mut Vec::new(), |_, v| match v {
            wire::Value::Published(x) => claimed = x,
            wire::Value::Flow(m) => claimed = m.estimate as f32,
            wire::Value::Mass(_) => {}
        })
        .unwrap();
        assert!(claimed > 1.0e6, "the forged payload claims {claimed}");
        buf
    };
    let good_key: KeyRing = ClusterKey::new(KEY).unwrap().into();
    let bad_key: KeyRing = ClusterKey::new(b"an attacker's guess at the key!!")
        .unwrap()
        .into();
    let mut frames = Vec::new();
    for seq in 1..50u64 {
        let h = Header {
            channel: channel::GOSSIP,
            sender: 2,
            instance: 0x5eed,
            seq: u64::MAX - seq,
            to: Receiver::Node(1),
        };
        // Sealed with a key the cluster does not hold.
        let mut foreign = Vec::new();
        frame::encode(&bad_key, h, &payload, &mut foreign).unwrap();
        frames.push(foreign.clone());
        // The cluster's key id, but a tampered ciphertext.
        let mut forged = Vec::new();
        frame::encode(&good_key, h, &payload, &mut forged).unwrap();
        forged[frame::OVERHEAD] ^= 0x40;
        frames.push(forged.clone());
        frames.push(forged[..forged.len() - 5].to_vec());
        let mut long = forged.clone();
        long.extend_from_slice(&[0; 1_200]);
        frames.push(long);
        // Correct key, but a sequence number long behind node 2's window.
        let mut old = Vec::new();
        let h = Header { seq, ..h };
        frame::encode(&good_key, h, &payload, &mut old).unwrap();
        frames.push(old);
        // Correct key and fresh, but bound to node 2: misdirected.
        let mut elsewhere = Vec::new();
        let h = Header {
            seq: u64::MAX - seq,
            to: Receiver::Node(2),
            ..h
        };
        frame::encode(&good_key, h, &payload, &mut elsewhere).unwrap();
        frames.push(elsewhere);
    }
    let before = c.nodes[0].lock().transport_stats();
    let mut max_remote = 0.0f64;
    // Six bad frames per round, one of each kind; the next round goes once
    // node 1 has counted this one (so the kernel's receive buffer never
    // overflows, however slowly the node is scheduled), the estimate
    // watched all along.
    let counted = |after: &drl_cluster_net::transport::TransportStats, n: u64| {
        [
            after.unknown_key - before.unknown_key,
            after.forged - before.forged,
            after.misdirected - before.misdirected,
            after.truncated - before.truncated,
            after.oversized - before.oversized,
            after.replayed - before.replayed,
        ]
        .iter()
        .all(|&k| k >= n)
    };
    let mut after = before;
    for (round, six) in frames.chunks(6).enumerate() {
        for f in six {
            raw.send_to(f, target).await.unwrap();
        }
        let t0 = Instant::now();
        loop {
            if let Some(s) = c.nodes[0].lock().snapshot("global", "all") {
                max_remote = max_remote.max(s.remote);
            }
            after = c.nodes[0].lock().transport_stats();
            if counted(&after, round as u64 + 1) {
                break;
            }
            assert!(
                t0.elapsed() < HANG_GUARD,
                "round {round} of bad frames not counted: {before:?} -> {after:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // A few more samples after the last frame was handled.
    for _ in 0..20 {
        if let Some(s) = c.nodes[0].lock().snapshot("global", "all") {
            max_remote = max_remote.max(s.remote);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    load.stop().await;
    // The forged payload claims over 1e6 req/s; node 2's real 1,000 req/s
    // can swing its estimate after a stall of the load generator (it
    // catches up in a burst), never by a factor of a hundred.
    assert!(max_remote < 1.0e5, "remote estimate reached {max_remote}");
    assert_eq!(after.unknown_key - before.unknown_key, 49);
    assert_eq!(after.forged - before.forged, 49);
    assert_eq!(after.misdirected - before.misdirected, 49);
    assert_eq!(after.truncated - before.truncated, 49);
    assert_eq!(after.oversized - before.oversized, 49);
    assert_eq!(after.replayed - before.replayed, 49);
}

/// The paper's Figure 9 scenario, shortened: all demand (3,000 req/s) moves
/// from node 1 to node 3 and back; the loaded node is not starved in its
/// first decisions after the move, then gets (nearly) the whole limit,
/// and no window after the first convergence exceeds the limit by 10%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_follow_moving_demand() {
    let c = cluster(217, 3, |_| {}).await;
    let target = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let admitted: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let offered: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let generator = {
        let (nodes, target, stop, admitted, offered) = (
            c.nodes.clone(),
            target.clone(),
            stop.clone(),
            admitted.clone(),
            offered.clone(),
        );
        tokio::spawn(async move {
            let spec = spec();
            let t0 = Instant::now();
            let mut issued = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let due = (t0.elapsed().as_secs_f64() * 3.0 * LIMIT as f64) as u64;
                let t = target.load(Ordering::Relaxed);
                let store = nodes[t].lock();
                while issued < due {
                    let key = format!("all|c{}", issued % 9);
                    let d = store
                        .decide_now(Check {
                            spec: &spec,
                            key: &key,
                            cost: 1,
                            now: 0,
                        })
                        .unwrap();
                    if d.allowed {
                        admitted[t].fetch_add(1, Ordering::Relaxed);
                    }
                    offered[t].fetch_add(1, Ordering::Relaxed);
                    issued += 1;
                }
            }
        })
    };
    let counts = || -> Vec<u64> { admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect() };
    let offers = || -> Vec<u64> { offered.iter().map(|a| a.load(Ordering::Relaxed)).collect() };
    let limit = LIMIT as f64;
    // Consecutive 1 s windows (measured) until `check` holds, under the
    // hang guard; every window's total and length go into `seen`.
    let mut seen: Vec<(f64, f64)> = Vec::new();
    async fn windows(
        what: &str,
        counts: &dyn Fn() -> Vec<u64>,
        seen: &mut Vec<(f64, f64)>,
        check: &dyn Fn(&[f64]) -> Result<(), String>,
    ) -> Vec<f64> {
        let t0 = Instant::now();
        loop {
            let (a, t1) = (counts(), Instant::now());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let dt = t1.elapsed().as_secs_f64();
            let r: Vec<f64> = counts()
                .iter()
                .zip(a)
                .map(|(b, a)| (b - a) as f64 / dt)
                .collect();
            seen.push((r.iter().sum(), dt));
            match check(&r) {
                Ok(()) => return r,
                Err(e) => eprintln!("{what}: {e}"),
            }
            assert!(
                t0.elapsed() < HANG_GUARD,
                "{what}: never held within {HANG_GUARD:?}"
            );
        }
    }
    // Converged at node 1 first; safety counts from here on.
    windows("at node 1", &counts, &mut Vec::new(), &|r| {
        near("node 1", r[0], limit, 0.10)
    })
    .await;
    for to in [2usize, 0] {
        let (a0, o0) = (counts()[to], offers()[to]);
        target.store(to, Ordering::Relaxed);
        // The loaded node's first 300 decisions after the move (however
        // long the generator took to make them): GRD's drop probability
        // is the cluster's, so it admits from the start.
        wait_until("300 decisions at the loaded node", HANG_GUARD, || {
            offers()[to] - o0 >= 300
        })
        .await;
        let (a1, o1) = (counts()[to], offers()[to]);
        let first = (a1 - a0) as f64 / (o1 - o0) as f64;
        eprintln!(
            "demand at node {}: {} of the first {} decisions admitted",
            to + 1,
            a1 - a0,
            o1 - o0
        );
        assert!(first > 0.1, "the new node is starved: {first:.3} admitted");
        let r = windows(&format!("node {}", to + 1), &counts, &mut seen, &|r| {
            let got = r[to];
            if got >= 0.85 * limit && got <= 1.1 * limit {
                Ok(())
            } else {
                Err(format!("the loaded node got {r:.0?}"))
            }
        })
        .await;
        eprintln!("demand at node {}: {r:.0?}", to + 1);
    }
    stop.store(true, Ordering::Relaxed);
    let _ = generator.await;
    eprintln!("totals per window {seen:.2?}");
    assert_never_over("moving demand", &seen);
}

/// Join and leave: two of three configured nodes enforce 2/3 of the limit;
/// when the third joins they go back to the full limit, and when it leaves
/// gracefully they see it go by its leave, not by failure detection: the
/// nodes' suspicion timeout is longer than the test's hang guard, so a
/// peer can only be counted gone within it by its leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_restores_the_limit_and_leave_is_seen_at_once() {
    let _serial = SERIAL.lock().await;
    const SUSPICION: Duration = Duration::from_secs(600);
    assert!(SUSPICION > HANG_GUARD * 2);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, KEY).unwrap();
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|i| format!("127.0.219.{i}:7946").parse().unwrap())
        .collect();
    let start = |i: usize| {
        let mut c = GossipConfig::new(i as u32 + 1, addrs[i], addrs.clone());
        c.key_file = Some(key_file.clone());
        c.membership.suspect_to_down_ms = SUSPICION.as_millis() as u64;
        GossipStore::start(c)
    };
    let a = start(0).await.unwrap();
    let b = start(1).await.unwrap();
    wait_until("two nodes meet", HANG_GUARD, || {
        a.live_nodes() == 2 && b.live_nodes() == 2
    })
    .await;
    let spec = spec();
    let check = |s: &GossipStore| {
        s.decide_now(Check {
            spec: &spec,
            key: "all",
            cost: 1,
            now: 0,
        })
        .unwrap()
    };
    check(&a);
    wait_until(
        "2/3 of the limit while node 3 is missing",
        HANG_GUARD,
        || {
            check(&a);
            a.snapshot("global", "all").unwrap().effective_limit == 666
        },
    )
    .await;
    let c = start(2).await.unwrap();
    wait_until("node 3 joins", HANG_GUARD, || {
        [&a, &b, &c].iter().all(|n| n.live_nodes() == 3)
    })
    .await;
    wait_until("full limit again", HANG_GUARD, || {
        check(&a);
        a.snapshot("global", "all").unwrap().effective_limit == LIMIT
    })
    .await;
    let t0 = Instant::now();
    c.shutdown().await;
    let took = wait_until("the leave is seen", HANG_GUARD, || {
        a.live_nodes() == 2 && b.live_nodes() == 2
    })
    .await;
    eprintln!(
        "leave seen after {took:?} ({:?} since shutdown; suspicion {SUSPICION:?})",
        t0.elapsed()
    );
    assert!(
        t0.elapsed() < SUSPICION,
        "only failure detection could have told"
    );
}

/// Twelve nodes, 20 % of every datagram lost (gossip and SWIM alike),
/// 4,000 req/s spread evenly against 1,000 req/s. Before the node was
/// drl-cluster's `cloud_control::Node`, real processes in this setting
/// admitted up to 1,146 req/s in a second with GRD and a median of 1,133
/// (up to 1,414) with FPS: SWIM flaps under loss made a node rebuild its
/// allocator (a fresh GRD admits everything until its next interval) and
/// drop the flapping peer's demand while keeping a share. No second may
/// exceed the limit + 10 % beyond what the second before left unused.
async fn twelve_nodes_under_twenty_percent_loss(net: u8, algorithm: AlgorithmKind) {
    let c = cluster(net, 12, |cfg| {
        cfg.algorithm = algorithm;
        cfg.faults.drop_rate = 0.2;
        cfg.faults.seed = cfg.node_id as u64 * 13;
    })
    .await;
    // One client of 333 req/s per node: 4,000 req/s in all. The cluster
    // first reaches a second within 20% under the limit (and not over
    // it); from then on, six seconds each at most the limit + 10%.
    let load = Load::start(&c, &[1; 12]);
    let mut seen = Vec::new();
    load.eventually(
        &format!("{algorithm}, 12 nodes"),
        Duration::from_secs(1),
        &mut seen,
        |r| {
            let total: f64 = r.iter().sum();
            if (LIMIT as f64 * 0.8..=LIMIT as f64 * 1.1).contains(&total) {
                Ok(())
            } else {
                Err(format!("admitted {total:.0}"))
            }
        },
    )
    .await;
    let mut seconds = Vec::new();
    for _ in 0..6 {
        let w = load.window(Duration::from_secs(1)).await;
        seconds.push((w.rates.iter().sum::<f64>(), w.secs));
    }
    load.stop().await;
    let live: Vec<u32> = c.nodes.iter().map(|n| n.lock().live_nodes()).collect();
    eprintln!(
        "{algorithm}, 12 nodes, 20% loss: converging {seen:.0?}, then admitted per second {seconds:.0?}; live {live:?}"
    );
    // Each second within the limit + 10% (and what the one before left
    // unused); the six together within the limit + 10%.
    assert_never_over(&format!("{algorithm}, 12 nodes"), &seconds);
    let total: f64 = seconds.iter().map(|(r, secs)| r * secs).sum();
    let secs: f64 = seconds.iter().map(|w| w.1).sum();
    assert!(
        total <= LIMIT as f64 * 1.1 * secs,
        "{algorithm}: {total:.0} admitted in {secs:.2} s > limit + 10% ({seconds:.2?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grd_twelve_nodes_under_twenty_percent_loss() {
    twelve_nodes_under_twenty_percent_loss(221, AlgorithmKind::Grd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fps_twelve_nodes_under_twenty_percent_loss() {
    twelve_nodes_under_twenty_percent_loss(222, AlgorithmKind::Fps).await;
}
