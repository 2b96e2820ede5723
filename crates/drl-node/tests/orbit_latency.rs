//! Decisions do not wait on the network: a node cut off from the ring
//! still answers at once from its local allowance, and a limit configured
//! with a bounded wait waits at most that long.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use drl_core::{Algorithm, Clock, Quota, SystemClock};
use drl_node::orbit::{KeySource, LimitSettings, OrbitConfig, OrbitStore, RingMember};
use drl_node::transport::fault::FaultConfig;
use drl_store::{Check, LimitSpec, Store};

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
    let mut w = next_window(window).await;
    while proto.lane_origin(w, 0, 3) == 0 {
        w = next_window(window).await;
    }
    let node = &stores[0];
    let mut allowed = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..300 {
        let t = Instant::now();
        let d = tokio::time::timeout(
            Duration::from_secs(2),
            node.decide(Check {
                spec: &capped,
                key: "k",
                cost: 1,
                now: 0,
            }),
        )
        .await
        .expect("a decision waited on the network")
        .expect("decide");
        slowest = slowest.max(t.elapsed());
        allowed += u64::from(d.allowed);
    }
    assert_eq!(
        SystemClock.now() / window,
        w,
        "test too slow: window changed"
    );
    let st = node.limit_stats("capped").expect("stats");
    eprintln!("isolated: {allowed} of 300 allowed, slowest {slowest:?}, {st:?}");
    assert_eq!(st.tables_received, 0, "isolated node received a table");
    assert_eq!(allowed, 100, "isolated node admits exactly its allowance");
    assert!(
        slowest < Duration::from_millis(500),
        "slowest decision {slowest:?}"
    );

    // Bounded wait: use up the allowance, then one more request waits
    // about 700 ms (nothing can arrive) and is denied.
    for _ in 0..100 {
        let d = node.decide_charged(&waiting, "k", 1).await.expect("decide");
        assert!(d.decision.allowed);
    }
    let t = Instant::now();
    let d = node.decide_charged(&waiting, "k", 1).await.expect("decide");
    let took = t.elapsed();
    eprintln!("bounded wait: {took:?}, {d:?}");
    assert!(!d.decision.allowed, "admitted beyond the allowance");
    assert!(took >= Duration::from_millis(650), "did not wait: {took:?}");
    assert!(
        took < Duration::from_millis(2500),
        "waited too long: {took:?}"
    );
}

/// On a healthy ring, a hot node whose holding runs out waits (bounded) for
/// the table and is then admitted: waiting pays off, and no request waits
/// longer than the bound (plus scheduling slack).
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
    let w = next_window(window).await;
    let node = &stores[1];
    let (mut admitted, mut waited_then_admitted, mut slowest) = (0u64, 0u64, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_millis(2200);
    while Instant::now() < deadline {
        let t = Instant::now();
        let d = node
            .decide_charged(&waiting, "k", 10)
            .await
            .expect("decide");
        let took = t.elapsed();
        slowest = slowest.max(took);
        if d.decision.allowed && d.window == w {
            admitted += 10;
            if took >= Duration::from_millis(20) {
                waited_then_admitted += 1;
            }
        }
    }
    eprintln!(
        "hot waiting node: {admitted} admitted, {waited_then_admitted} after a wait, slowest {slowest:?}"
    );
    assert!(admitted <= 3000);
    assert!(admitted >= 1500, "only {admitted} admitted");
    assert!(
        waited_then_admitted >= 1,
        "no request was admitted after waiting"
    );
    assert!(
        slowest < Duration::from_millis(700 + 1500),
        "slowest {slowest:?}"
    );
}
