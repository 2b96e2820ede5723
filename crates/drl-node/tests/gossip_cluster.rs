//! Three `GossipStore` nodes on real loopback UDP sockets in one process,
//! offered 3,000 req/s split 1:2:6 against a 1,000 req/s global limit.
//! Load is generated at the target rate from tokio intervals; admitted
//! counts are measured over 5 s windows after the estimates settle.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{KeyLimit, KeyRef, Node, wire};
use drl_core::{Algorithm, Quota};
use drl_node::transport::frame::{self, Header, Receiver};
use drl_node::transport::{ClusterKey, KeyRing, channel};
use drl_node::{GossipConfig, GossipStore};
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
    wait_until("all nodes see each other", Duration::from_secs(10), || {
        c.nodes.iter().all(|s| s.lock().live_nodes() == n as u32)
    })
    .await;
    c
}

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

    fn counts(&self) -> Vec<u64> {
        self.admitted
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// Admitted per node per second over `window`.
    async fn rates(&self, window: Duration) -> Vec<f64> {
        let a = self.counts();
        let t0 = Instant::now();
        tokio::time::sleep(window).await;
        let dt = t0.elapsed().as_secs_f64();
        self.counts()
            .iter()
            .zip(a)
            .map(|(b, a)| (b - a) as f64 / dt)
            .collect()
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn assert_near(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * want,
        "{what}: got {got:.1}, want {want:.1} ± {:.0}%",
        tol * 100.0
    );
}

async fn steady_state(net: u8, algorithm: AlgorithmKind, drop_rate: f64) {
    let c = cluster(net, 3, |cfg| {
        cfg.algorithm = algorithm;
        cfg.faults.drop_rate = drop_rate;
        cfg.faults.seed = cfg.node_id as u64 * 7;
    })
    .await;
    let load = Load::start(&c, &[1, 2, 6]);
    // Let the EWMA estimators (1-second parameter 0.1) settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = load.rates(Duration::from_secs(5)).await;
    load.stop().await;
    let total: f64 = r.iter().sum();
    eprintln!("{algorithm} loss {drop_rate}: per node {r:?}, total {total:.1}");
    assert_near("global admitted rate", total, LIMIT as f64, 0.10);
    for (i, want) in [1.0 / 9.0, 2.0 / 9.0, 6.0 / 9.0].iter().enumerate() {
        let share = r[i] / total;
        assert!(
            (share - want).abs() < 0.05,
            "node {} share {share:.3}, demand share {want:.3}",
            i + 1
        );
    }
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
/// take the limit minus its 1/N share, instead of their old 1/3 together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_share_is_reclaimed_within_detection_time() {
    let c = cluster(214, 3, |_| {}).await;
    let load = Load::start(&c, &[1, 2, 6]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = load.rates(Duration::from_secs(2)).await;
    assert_near("before", before.iter().sum(), LIMIT as f64, 0.10);
    c.nodes[2].lock().kill();
    let detection = c.nodes[0].lock().live_nodes(); // still 3 until detected
    assert_eq!(detection, 3);
    let took = wait_until(
        "nodes 1 and 2 see node 3 down",
        Duration::from_secs(5),
        || c.nodes[..2].iter().all(|n| n.lock().live_nodes() == 2),
    )
    .await;
    let detect_ms = drl_node::MembershipConfig::default().detection_ms();
    eprintln!("detected in {took:?} (bound {detect_ms} ms)");
    assert!(took <= Duration::from_millis(detect_ms + 800));
    // Within the next second the survivors converge on 2/3 of the limit
    // and never exceed the full limit by more than 10%.
    let mut peak = 0.0f64;
    let mut last = vec![];
    for _ in 0..4 {
        let r = load.rates(Duration::from_secs(1)).await;
        let two: f64 = r[..2].iter().sum();
        peak = peak.max(two);
        last = r;
    }
    load.stop().await;
    let two: f64 = last[..2].iter().sum();
    eprintln!("before {before:?}, after {last:?}");
    assert!(peak <= 1.1 * LIMIT as f64, "peak {peak}");
    assert_near("survivors", two, LIMIT as f64 * 2.0 / 3.0, 0.10);
    assert!(
        last[0] > 1.5 * before[0] && last[1] > 1.5 * before[1],
        "survivors reclaimed capacity: {before:?} -> {last:?}"
    );
}

/// Node 3 is cut off: it falls back to a 1/N share, the others to (N-1)/N,
/// so the cluster as a whole still admits about the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_node_falls_back_to_one_nth() {
    let c = cluster(215, 3, |_| {}).await;
    let load = Load::start(&c, &[1, 2, 6]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.nodes[2].lock().faults().isolate(true);
    wait_until(
        "both sides see the partition",
        Duration::from_secs(5),
        || {
            c.nodes[2].lock().live_nodes() == 1
                && c.nodes[..2].iter().all(|n| n.lock().live_nodes() == 2)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = load.rates(Duration::from_secs(3)).await;
    load.stop().await;
    eprintln!("partitioned: {r:?}");
    let snap = c.nodes[2].lock().snapshot("global", "all").unwrap();
    assert_eq!(snap.effective_limit, LIMIT / 3);
    assert_eq!(snap.remote, 0.0, "stale estimates are zeroed");
    assert_near("partitioned node", r[2], LIMIT as f64 / 3.0, 0.10);
    assert_near("majority side", r[0] + r[1], LIMIT as f64 * 2.0 / 3.0, 0.10);
    assert!(r.iter().sum::<f64>() <= 1.1 * LIMIT as f64);
}

/// Foreign-key, forged, truncated, oversized, replayed and misdirected
/// gossip claiming a huge demand from node 2 never reaches node 1's
/// estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_packets_never_change_an_estimate() {
    let c = cluster(216, 2, |_| {}).await;
    let load = Load::start(&c, &[1, 3]);
    tokio::time::sleep(Duration::from_secs(2)).await;
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
        let mut claimed = 0.0f32;
        wire::decode(&buf, &mut Vec::new(), |_, v| {
            if let wire::Value::Published(x) = v {
                claimed = x;
            }
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
    for f in &frames {
        raw.send_to(f, target).await.unwrap();
        // Paced, so the kernel's receive buffer does not overflow.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        if let Some(s) = c.nodes[0].lock().snapshot("global", "all") {
            max_remote = max_remote.max(s.remote);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = c.nodes[0].lock().transport_stats();
    load.stop().await;
    assert!(max_remote < 2_000.0, "remote estimate reached {max_remote}");
    assert!(
        max_remote > 500.0,
        "node 2's real demand is seen: {max_remote}"
    );
    assert_eq!(after.unknown_key - before.unknown_key, 49);
    assert_eq!(after.forged - before.forged, 49);
    assert_eq!(after.misdirected - before.misdirected, 49);
    assert_eq!(after.truncated - before.truncated, 49);
    assert_eq!(after.oversized - before.oversized, 49);
    assert_eq!(after.replayed - before.replayed, 49);
}

/// The paper's Figure 9 scenario, shortened: all demand (3,000 req/s) moves
/// from node 1 to node 3 and back; within a second the loaded node gets
/// (nearly) the whole limit, and the cluster never exceeds it by 10%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_follow_moving_demand_within_a_second() {
    let c = cluster(217, 3, |_| {}).await;
    let target = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let admitted: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let generator = {
        let (nodes, target, stop, admitted) = (
            c.nodes.clone(),
            target.clone(),
            stop.clone(),
            admitted.clone(),
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
                    issued += 1;
                }
            }
        })
    };
    let counts = || -> Vec<u64> { admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect() };
    let window = |a: &[u64], b: &[u64], dt: f64| -> Vec<f64> {
        b.iter().zip(a).map(|(b, a)| (b - a) as f64 / dt).collect()
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    for to in [2usize, 0] {
        target.store(to, Ordering::Relaxed);
        let t0 = Instant::now();
        let c0 = counts();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let c1 = counts();
        let first = window(&c0, &c1, t0.elapsed().as_secs_f64());
        let t1 = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = window(&c1, &counts(), t1.elapsed().as_secs_f64());
        eprintln!(
            "demand at node {}: first second {first:?}, next {second:?}",
            to + 1
        );
        assert!(first.iter().sum::<f64>() <= 1.1 * LIMIT as f64);
        assert!(
            first[to] > 0.3 * LIMIT as f64,
            "the new node is not starved"
        );
        assert!(
            second[to] >= 0.85 * LIMIT as f64 && second[to] <= 1.1 * LIMIT as f64,
            "within a second the loaded node gets the limit: {second:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let _ = generator.await;
}

/// Join and leave: two of three configured nodes enforce 2/3 of the limit;
/// when the third joins they go back to the full limit, and when it leaves
/// gracefully they see it go at once (no failure-detection wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_restores_the_limit_and_leave_is_seen_at_once() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, KEY).unwrap();
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|i| format!("127.0.219.{i}:7946").parse().unwrap())
        .collect();
    let start = |i: usize| {
        let mut c = GossipConfig::new(i as u32 + 1, addrs[i], addrs.clone());
        c.key_file = Some(key_file.clone());
        GossipStore::start(c)
    };
    let a = start(0).await.unwrap();
    let b = start(1).await.unwrap();
    wait_until("two nodes meet", Duration::from_secs(5), || {
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
        Duration::from_secs(2),
        || {
            check(&a);
            a.snapshot("global", "all").unwrap().effective_limit == 666
        },
    )
    .await;
    let c = start(2).await.unwrap();
    wait_until("node 3 joins", Duration::from_secs(5), || {
        [&a, &b, &c].iter().all(|n| n.live_nodes() == 3)
    })
    .await;
    wait_until("full limit again", Duration::from_secs(2), || {
        check(&a);
        a.snapshot("global", "all").unwrap().effective_limit == LIMIT
    })
    .await;
    let t0 = Instant::now();
    c.shutdown().await;
    let took = wait_until("the leave is seen", Duration::from_secs(5), || {
        a.live_nodes() == 2 && b.live_nodes() == 2
    })
    .await;
    let detect = Duration::from_millis(drl_node::MembershipConfig::default().detection_ms());
    eprintln!(
        "leave seen after {took:?} ({:?} since shutdown)",
        t0.elapsed()
    );
    assert!(took < detect, "a graceful leave beats failure detection");
}

/// Twelve nodes, 20 % of every datagram lost (gossip and SWIM alike),
/// 4,000 req/s spread evenly against 1,000 req/s. Before the node was
/// drl-cluster's `cloud_control::Node`, real processes in this setting
/// admitted up to 1,146 req/s in a second with GRD and a median of 1,133
/// (up to 1,414) with FPS: SWIM flaps under loss made a node rebuild its
/// allocator (a fresh GRD admits everything until its next interval) and
/// drop the flapping peer's demand while keeping a share. No second may
/// exceed the limit + 10 %.
async fn twelve_nodes_under_twenty_percent_loss(net: u8, algorithm: AlgorithmKind) {
    let c = cluster(net, 12, |cfg| {
        cfg.algorithm = algorithm;
        cfg.faults.drop_rate = 0.2;
        cfg.faults.seed = cfg.node_id as u64 * 13;
    })
    .await;
    // One client of 333 req/s per node: 4,000 req/s in all.
    let load = Load::start(&c, &[1; 12]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut seconds = Vec::new();
    for _ in 0..6 {
        let r = load.rates(Duration::from_secs(1)).await;
        seconds.push(r.iter().sum::<f64>());
    }
    load.stop().await;
    let live: Vec<u32> = c.nodes.iter().map(|n| n.lock().live_nodes()).collect();
    eprintln!("{algorithm}, 12 nodes, 20% loss: admitted per second {seconds:.0?}; live {live:?}");
    for (i, s) in seconds.iter().enumerate() {
        assert!(
            *s <= LIMIT as f64 * 1.1,
            "{algorithm}: second {i} admitted {s:.0} > limit + 10% ({seconds:.0?})"
        );
    }
    let mean = seconds.iter().sum::<f64>() / seconds.len() as f64;
    assert!(
        mean >= LIMIT as f64 * 0.8,
        "{algorithm}: mean {mean:.0} far under the limit ({seconds:.0?})"
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
