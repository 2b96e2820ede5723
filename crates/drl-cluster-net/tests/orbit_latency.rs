//! Decisions do not wait on the network: a node cut off from the ring
//! still answers at once from its local allowance, and a limit configured
//! with a bounded wait waits, then answers.
//!
//! "At once" is a protocol fact, not a latency: the decision's future is
//! ready the first time it is polled (it awaits nothing). "Waited" is the
//! opposite: the first poll is pending. Times are reported, and the only
//! time asserted is a lower bound (a bounded wait lasts at least its
//! bound; tokio's timers never fire early), which load cannot break.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use drl_cluster_net::orbit::{KeySource, LimitSettings, OrbitConfig, OrbitStore, RingMember};
use drl_cluster_net::transport::fault::FaultConfig;
use drl_core::{Algorithm, Clock, Quota, SystemClock};
use drl_store::LimitSpec;

const SEC: u64 = 1_000_000_000;

fn configs(n: u32, epoch_ms: u64) -> Vec<OrbitConfig> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let ring: Vec<RingMember> = socks
        .iter()
        .enumerate()
        .map(|(i, s)| RingMember {
            id: i as u32 + 1,
            addr: SocketAddr::from(([127, 0, 0, 1], s.local_addr().expect("addr").port())),
            dns: None,
        })
        .collect();
    drop(socks);
    (1..=n)
        .map(|id| {
            let mut c = OrbitConfig::new(
                id,
                ring[id as usize - 1].addr,
                ring.clone(),
                KeySource::inline("latency-test-key-0123456789"),
            );
            c.epoch_ms = epoch_ms;
            c.heartbeat_ms = 50;
            c.suspect_after_ms = 500;
            c.fault = Some(FaultConfig::default());
            c.limits.insert(
                "waiting".into(),
                LimitSettings {
                    max_wait_ms: Some(700),
                },
            );
            c
        })
        .collect()
}

/// How long a wait on a condition may take before the test fails: a hang
/// guard, not a verdict.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Polls `f` once: `Ok` with its output if it was ready at once (it awaited
/// nothing), else `Err` with the output it gave when awaited to the end
/// (under [`HANG_GUARD`]).
async fn first_poll<T>(f: impl Future<Output = T>) -> Result<T, T> {
    let mut f = pin!(f);
    if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return Ok(v);
    }
    Err(tokio::time::timeout(HANG_GUARD, f)
        .await
        .expect("a decision hung"))
}

fn spec(name: &str, window: u64) -> LimitSpec {
    LimitSpec::new(
        name,
        Algorithm::FixedWindow,
        vec![Quota::new(3000, window).expect("quota")],
    )
}

async fn next_window(window: u64) -> u64 {
    let w = SystemClock.now() / window + 1;
    let target = w * window + 50_000_000;
    let now = SystemClock.now();
    tokio::time::sleep(Duration::from_nanos(target.saturating_sub(now))).await;
    w
}

/// Node 1 is isolated from the start: it never sees a table, yet answers
/// every request at once, admitting exactly its local allowance
/// (10% of 3000 over 3 nodes = 100) and denying the rest (in a window
/// where it is not the origin of the table). With a bounded
/// wait configured, a denial takes the configured wait, not more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_isolated_node_answers_without_waiting() {
    let window = 3 * SEC;
    let mut cfgs = configs(3, 50);
    // One lane, so that node 1 is the origin of no table in most windows.
    for c in &mut cfgs {
        c.lanes = 1;
    }
    let proto = cfgs[0].protocol(3000, window);
    let (capped, waiting) = (spec("capped", window), spec("waiting", window));
    let mut stores = Vec::new();
    for c in cfgs {
        let s = OrbitStore::start(c).await.expect("start");
        s.register(&capped).expect("register");
        s.register(&waiting).expect("register");
        stores.push(s);
    }
    stores[0].fault().expect("fault handle").isolate(true);
    let node = &stores[0];
    // 300 decisions in one window where node 1 is not the origin; a window
    // that ends before they are through (a slow machine) is not one, and
    // the next such window is taken.
    let t0 = Instant::now();
    let (w, allowed) = loop {
        let mut w = next_window(window).await;
        while proto.lane_origin(w, 0, 3) == 0 {
            w = next_window(window).await;
        }
        let mut allowed = 0;
        let mut windows = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let d = first_poll(node.decide_charged(&capped, "k", 1))
                .await
                .expect("a decision waited (on the network)")
                .expect("decide");
            windows.insert(d.window);
            if d.window == w {
                allowed += u64::from(d.decision.allowed);
            }
        }
        if windows.len() == 1 && windows.contains(&w) {
            break (w, allowed);
        }
        eprintln!("window {w}: decisions charged to {windows:?}; taking the next");
        assert!(
            t0.elapsed() < HANG_GUARD,
            "300 decisions never fit in one window"
        );
    };
    let st = node.limit_stats("capped").expect("stats");
    eprintln!("isolated: window {w}, {allowed} of 300 allowed, {st:?}");
    assert_eq!(st.tables_received, 0, "isolated node received a table");
    assert_eq!(allowed, 100, "isolated node admits exactly its allowance");

    // Bounded wait, in another window where node 1 is not the origin: use
    // up the allowance, then one more request waits about 700 ms (nothing
    // can arrive) and is denied. A window that ends before the requests
    // are through is not one; the next such window is taken.
    let t0 = Instant::now();
    loop {
        let mut w = next_window(window).await;
        while proto.lane_origin(w, 0, 3) == 0 {
            w = next_window(window).await;
        }
        let mut windows = std::collections::BTreeSet::new();
        let mut allowed = 0;
        for _ in 0..100 {
            let d = node.decide_charged(&waiting, "k", 1).await.expect("decide");
            windows.insert(d.window);
            allowed += u64::from(d.decision.allowed);
        }
        let t = Instant::now();
        let (waited, d) = match first_poll(node.decide_charged(&waiting, "k", 1)).await {
            Ok(d) => (false, d.expect("decide")),
            Err(d) => (true, d.expect("decide")),
        };
        let took = t.elapsed();
        windows.insert(d.window);
        if windows.len() != 1 || !windows.contains(&w) {
            eprintln!("window {w}: decisions charged to {windows:?}; taking the next");
            assert!(
                t0.elapsed() < HANG_GUARD,
                "101 decisions never fit in one window"
            );
            continue;
        }
        eprintln!("bounded wait: {took:?}, {d:?}");
        assert_eq!(allowed, 100, "the allowance is admitted");
        assert!(waited, "the request over the allowance did not wait");
        assert!(!d.decision.allowed, "admitted beyond the allowance");
        assert!(took >= Duration::from_millis(650), "did not wait: {took:?}");
        break;
    }
}

/// On a healthy ring, a hot node whose holding runs out waits (bounded) for
/// the table and is then admitted: waiting pays off. The node reaches a
/// window where it admitted at least half the cap, some of it after
/// waiting (the first poll of the decision was pending); no window ever
/// admits more than the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_bounded_wait_is_admitted_when_the_table_comes() {
    let window = 3 * SEC;
    let cfgs = configs(3, 50);
    let waiting = spec("waiting", window);
    let mut stores = Vec::new();
    for c in cfgs {
        let s = OrbitStore::start(c).await.expect("start");
        s.register(&waiting).expect("register");
        stores.push(s);
    }
    let node = &stores[1];
    let t0 = Instant::now();
    // Admitted per window; admitted after a wait per window.
    let mut admitted = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    let mut slowest = Duration::ZERO;
    let first = next_window(window).await;
    loop {
        let t = Instant::now();
        let (d, waited) = match first_poll(node.decide_charged(&waiting, "k", 10)).await {
            Ok(d) => (d.expect("decide"), false),
            Err(d) => (d.expect("decide"), true),
        };
        slowest = slowest.max(t.elapsed());
        if d.decision.allowed && d.window >= first {
            let e = admitted.entry(d.window).or_default();
            e.0 += 10;
            e.1 += u64::from(waited);
        }
        // A window is complete once a decision is charged to a later one.
        let done = admitted
            .range(..d.window)
            .any(|(_, &(a, w))| a >= 1500 && w >= 1);
        if done {
            break;
        }
        assert!(
            t0.elapsed() < HANG_GUARD,
            "no window with half the cap admitted and an admission after a wait: {admitted:?}"
        );
    }
    eprintln!(
        "hot waiting node, per window (admitted, after a wait): {admitted:?}, slowest {slowest:?}"
    );
    for (w, (a, _)) in &admitted {
        assert!(*a <= 3000, "window {w}: {a} admitted");
    }
}
