//! Orbit runtime on real UDP sockets: five `OrbitStore`s in one process on
//! 127.0.0.1, authenticated transport, fault injection.
//!
//! The strict invariant (sum of admissions over nodes per window <= cap) is
//! asserted exactly; utilization assertions have generous margins because
//! CI machines are small and loaded.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drl_cluster_net::orbit::{KeySource, OrbitConfig, OrbitStore, RingMember};
use drl_cluster_net::transport::fault::FaultConfig;
use drl_core::{Algorithm, Clock, Quota, SystemClock};
use drl_store::LimitSpec;
use parking_lot::Mutex;

const KEY: &str = "orbit-test-key-0123456789abcdef";
const SEC: u64 = 1_000_000_000;

fn free_ports(n: usize) -> Vec<u16> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    socks
        .iter()
        .map(|s| s.local_addr().expect("local addr").port())
        .collect()
}

fn ring(ports: &[u16]) -> Vec<RingMember> {
    ports
        .iter()
        .enumerate()
        .map(|(i, &p)| RingMember {
            id: i as u32 + 1,
            addr: SocketAddr::from(([127, 0, 0, 1], p)),
            dns: None,
        })
        .collect()
}

fn config(id: u32, ports: &[u16], epoch_ms: u64) -> OrbitConfig {
    let members = ring(ports);
    let bind = members[id as usize - 1].addr;
    let mut c = OrbitConfig::new(id, bind, members, KeySource::inline(KEY));
    c.epoch_ms = epoch_ms;
    c.heartbeat_ms = 50;
    c.suspect_after_ms = 500;
    // No random faults; the handle is used for partitions.
    c.fault = Some(FaultConfig::default());
    c
}

fn capped(window: u64) -> LimitSpec {
    LimitSpec::new(
        "capped",
        Algorithm::FixedWindow,
        vec![Quota::new(3000, window).expect("quota")],
    )
}

/// Starts a store, retrying while the port is still held by a stopped one.
async fn start(cfg: OrbitConfig, spec: &LimitSpec) -> Arc<OrbitStore> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match OrbitStore::start(cfg.clone()).await {
            Ok(s) => {
                s.register(spec).expect("register");
                return Arc::new(s);
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("start node {} failed ({e}), retrying", cfg.node_id);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("node {} cannot start: {e}", cfg.node_id),
        }
    }
}

/// Waits until the wall clock enters window `w` (plus `offset_ms`).
async fn until_window(w: u64, window: u64, offset_ms: u64) {
    let target = w * window + offset_ms * 1_000_000;
    let now = SystemClock.now();
    if target > now {
        tokio::time::sleep(Duration::from_nanos(target - now)).await;
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
async fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type Slot = Arc<Mutex<Option<Arc<OrbitStore>>>>;
/// Admitted per (window, node).
type Ledger = Arc<Mutex<BTreeMap<(u64, u32), u64>>>;

/// Demand on one node: `batch` requests of cost 1 every 5 ms (pacing),
/// recording every admission under the window the node charged it to.
fn demand(
    node: u32,
    slot: Slot,
    spec: LimitSpec,
    ledger: Ledger,
    stop: Arc<AtomicBool>,
    batch: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            let store = slot.lock().clone();
            if let Some(store) = store {
                for _ in 0..batch {
                    let d = store.admit(&spec, "tenant-a", 1).expect("admit");
                    if d.decision.allowed {
                        *ledger.lock().entry((d.window, node)).or_default() += 1;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

fn per_window(ledger: &Ledger) -> BTreeMap<u64, (u64, BTreeMap<u32, u64>)> {
    let mut out: BTreeMap<u64, (u64, BTreeMap<u32, u64>)> = BTreeMap::new();
    for (&(w, n), &c) in ledger.lock().iter() {
        let e = out.entry(w).or_default();
        e.0 += c;
        e.1.insert(n, c);
    }
    out
}

/// Five nodes, cap 3000 per 3 s window, demand about 4x the cap spread over
/// all nodes. Node 3 is stopped, node 1 is partitioned (all its traffic cut
/// by the fault injector), the partition heals, node 3 restarts. The sum of
/// admissions per window never exceeds the cap; windows with no fault get
/// a reasonable share of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_five_nodes_stop_one_partition_one_keep_cap() {
    let window = 3 * SEC;
    let spec = capped(window);
    let ports = free_ports(5);
    let slots: Vec<Slot> = (0..5).map(|_| Slot::default()).collect();
    for id in 1..=5u32 {
        let s = start(config(id, &ports, 40), &spec).await;
        *slots[id as usize - 1].lock() = Some(s);
    }
    let ledger = Ledger::default();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (1..=5u32)
        .map(|id| {
            demand(
                id,
                slots[id as usize - 1].clone(),
                spec.clone(),
                ledger.clone(),
                stop.clone(),
                4,
            )
        })
        .collect();
    let w0 = SystemClock.now() / window;
    let store = |id: u32| slots[id as usize - 1].lock().clone().expect("running");

    // w0: everyone sits out its start window. w0+1, w0+2: healthy.
    until_window(w0 + 3, window, 500).await;
    // Stop node 3.
    let three = slots[2].lock().take().expect("node 3");
    three.shutdown().await;
    drop(three);
    assert!(
        wait_for(Duration::from_secs(5), || store(2)
            .stats()
            .down
            .contains(&3))
        .await,
        "node 2 never suspected the stopped node 3"
    );
    // Partition node 1 (every datagram to and from it is dropped).
    until_window(w0 + 4, window, 300).await;
    store(1).fault().expect("fault handle").isolate(true);
    assert!(
        wait_for(Duration::from_secs(5), || store(5)
            .stats()
            .down
            .contains(&1)
            && store(1).stats().down.len() == 4)
        .await,
        "the partition of node 1 was not detected"
    );
    // Heal at w0+6, restart node 3 at w0+7.
    until_window(w0 + 6, window, 300).await;
    store(1).fault().expect("fault handle").isolate(false);
    until_window(w0 + 7, window, 300).await;
    let restarted = start(config(3, &ports, 40), &spec).await;
    *slots[2].lock() = Some(restarted);
    assert!(
        wait_for(Duration::from_secs(5), || {
            let s = store(4).stats();
            !s.down.contains(&3) && !s.down.contains(&1) && s.restarts_seen >= 1
        })
        .await,
        "node 4 never saw nodes 1 and 3 back (node 3 as a new incarnation)"
    );
    until_window(w0 + 10, window, 0).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("demand task");
    }

    let table = per_window(&ledger);
    for (w, (sum, nodes)) in &table {
        eprintln!("window w0+{}: admitted {sum} {nodes:?}", w - w0);
    }
    for id in 1..=5u32 {
        if let Some(s) = slots[id as usize - 1].lock().clone() {
            eprintln!("node {id}: {:?} {:?}", s.limit_stats("capped"), s.stats());
        }
    }
    // The invariant, exactly, for every window.
    for (w, (sum, nodes)) in &table {
        assert!(
            *sum <= 3000,
            "window w0+{}: {sum} admitted > cap 3000 ({nodes:?})",
            w - w0
        );
    }
    // Start window: every node sits it out.
    assert_eq!(
        table.get(&w0).map_or(0, |e| e.0),
        0,
        "admitted in the start window"
    );
    // Healthy windows: demand is ~4x the cap; expect most of the cap.
    for w in [w0 + 2, w0 + 9] {
        let got = table.get(&w).map_or(0, |e| e.0);
        assert!(
            got >= 1800,
            "healthy window w0+{}: only {got} of 3000 admitted",
            w - w0
        );
    }
    // Faulty windows: the live part of the ring still admits a good part.
    for w in [w0 + 4, w0 + 5] {
        let got = table.get(&w).map_or(0, |e| e.0);
        // (Tables in flight to the stopped or cut node are lost for the
        // window, so this depends on timing: a loose bound, 10% of the cap.)
        assert!(got >= 300, "window w0+{}: only {got} admitted", w - w0);
        // The partitioned node lives on what it holds: it admits something.
        let n1 = table
            .get(&w)
            .and_then(|e| e.1.get(&1))
            .copied()
            .unwrap_or(0);
        assert!(
            n1 > 0,
            "partitioned node 1 admitted nothing in w0+{}",
            w - w0
        );
    }
    // The restarted node sits out its start window, then takes part.
    let n3 = |w: u64| {
        table
            .get(&w)
            .and_then(|e| e.1.get(&3))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        n3(w0 + 7),
        0,
        "restarted node 3 admitted in its start window"
    );
    assert!(n3(w0 + 9) > 0, "restarted node 3 never admitted again");
}

/// Demand on one node only (about twice the cap): the ring moves most of
/// the cap to it (other nodes give their allowances back to the table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_hot_node_gets_most_of_the_cap() {
    let window = 2 * SEC;
    let spec = capped(window);
    let ports = free_ports(5);
    let mut stores = Vec::new();
    for id in 1..=5u32 {
        stores.push(start(config(id, &ports, 40), &spec).await);
    }
    let ledger = Ledger::default();
    let stop = Arc::new(AtomicBool::new(false));
    let slot: Slot = Arc::new(Mutex::new(Some(stores[1].clone())));
    // ~32 requests per 5 ms: about 12,800 per window when scheduled well.
    let task = demand(2, slot, spec.clone(), ledger.clone(), stop.clone(), 32);
    let w0 = SystemClock.now() / window;
    until_window(w0 + 5, window, 0).await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("demand task");
    let table = per_window(&ledger);
    for (w, (sum, _)) in &table {
        eprintln!("hot node, window w0+{}: admitted {sum}", w - w0);
        assert!(*sum <= 3000, "window w0+{}: {sum} > cap", w - w0);
    }
    for w in [w0 + 2, w0 + 3, w0 + 4] {
        let got = table.get(&w).map_or(0, |e| e.0);
        assert!(
            got >= 1500,
            "hot node got only {got} of 3000 in w0+{}",
            w - w0
        );
    }
}
