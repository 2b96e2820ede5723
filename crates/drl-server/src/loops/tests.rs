use std::sync::atomic::AtomicBool;

use proptest::prelude::*;
use tokio::sync::{mpsc, oneshot};

use super::*;

/// Waits (up to 10 s) until `cond` holds; panics with `what` if it never does.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_peak_every_connection_is_on_loop_0_and_all_finish() {
    let loops = Loops::for_runtime();
    assert_eq!(loops.len(), 2);
    let mut gates = Vec::new();
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..50 {
        let (tx, rx) = oneshot::channel::<()>();
        gates.push(tx);
        let done = done.clone();
        loops.spawn(async move {
            let _ = rx.await;
            done.fetch_add(1, Ordering::Relaxed);
        });
    }
    until("50 connections on loop 0", || loops.spread() == [50, 0]).await;
    for g in gates {
        g.send(()).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
    assert_eq!(done.load(Ordering::Relaxed), 50);
    assert_eq!(loops.spread(), [0, 0]);
}

/// Connections that spin while `busy`, else wait; each answers pings on
/// its channel with its number.
struct Spinners {
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    pings: Vec<mpsc::UnboundedSender<oneshot::Sender<usize>>>,
}

impl Spinners {
    fn spawn(loops: &Loops, n: usize) -> Self {
        let busy = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let mut pings = Vec::new();
        for i in 0..n {
            let (tx, mut rx) = mpsc::unbounded_channel::<oneshot::Sender<usize>>();
            pings.push(tx);
            let (busy, stop) = (busy.clone(), stop.clone());
            loops.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if busy.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(200) {
                            std::hint::spin_loop();
                        }
                        tokio::task::yield_now().await;
                        continue;
                    }
                    tokio::select! {
                        Some(reply) = rx.recv() => { let _ = reply.send(i); }
                        () = tokio::time::sleep(Duration::from_millis(2)) => {}
                    }
                }
            });
        }
        Self { busy, stop, pings }
    }

    /// Every connection answers its ping.
    async fn all_answer(&self) {
        for (i, p) in self.pings.iter().enumerate() {
            let (tx, rx) = oneshot::channel();
            p.send(tx).unwrap();
            let got = tokio::time::timeout(Duration::from_secs(10), rx)
                .await
                .unwrap_or_else(|_| panic!("connection {i} never woke"))
                .unwrap();
            assert_eq!(got, i);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_loop_spreads_and_an_idle_one_gathers_back() {
    let loops = Loops::for_runtime();
    let s = Spinners::spawn(&loops, 8);
    // Loop 0 is busy all its windows: half of its connections move.
    until("connections on both loops", || {
        let sp = loops.spread();
        sp[0] > 0 && sp[1] > 0 && sp[0] + sp[1] == 8
    })
    .await;
    // Idle again: loop 1 hands everything back to loop 0.
    s.busy.store(false, Ordering::Relaxed);
    until("all connections back on loop 0", || {
        loops.spread() == [8, 0]
    })
    .await;
    // Moved twice, every connection still gets its wakeups.
    s.all_answer().await;
    s.stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_moved_while_waiting_is_woken_on_its_new_loop() {
    let loops = Loops::for_runtime();
    let s = Spinners::spawn(&loops, 6);
    until("connections on both loops", || loops.spread()[1] > 0).await;
    // Idle, each waits on its channel (and a timer), on whichever loop it
    // is on now; those on loop 1 keep moving back meanwhile.
    s.busy.store(false, Ordering::Relaxed);
    s.all_answer().await;
    s.stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_connection_is_dropped_alone() {
    let loops = Loops::for_runtime();
    let (tx, rx) = oneshot::channel::<()>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    loops.spawn(async move {
        let _ = rx.await;
        let _ = done_tx.send(());
    });
    loops.spawn(async { panic!("a connection's bug") });
    until("the panicking connection dropped", || {
        loops.inner.live.load(Ordering::Relaxed) == 1
    })
    .await;
    tx.send(()).unwrap();
    done_rx.await.expect("the other connection finished");
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
}

/// Counts its drops.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_loops_drops_their_connections() {
    let loops = Loops::for_runtime();
    let dropped = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        let d = DropCount(dropped.clone());
        loops.spawn(async move {
            let _d = d;
            std::future::pending::<()>().await;
        });
    }
    until("10 connections taken in", || loops.spread() == [10, 0]).await;
    assert_eq!(dropped.load(Ordering::Relaxed), 0);
    drop(loops);
    until("all 10 dropped", || dropped.load(Ordering::Relaxed) == 10).await;
}

#[tokio::test(flavor = "current_thread")]
async fn one_worker_spawns_a_task_per_connection() {
    let loops = Loops::for_runtime();
    assert_eq!(loops.len(), 1);
    let (tx, rx) = oneshot::channel::<()>();
    loops.spawn(async move {
        let _ = rx.await;
    });
    assert_eq!(loops.spread(), [1]);
    tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
    assert_eq!(loops.spread(), [0]);
}

#[test]
fn one_window_alone_moves_nothing() {
    let mut runs = Runs::default();
    assert_eq!(decide(0, &[1.0, 0.0], 10, &mut runs), Move::Stay);
    assert_eq!(
        decide(0, &[1.0, 0.0], 10, &mut runs),
        Move::Spread { to: 1, count: 5 }
    );
    let mut runs = Runs::default();
    for _ in 1..GATHER_WINDOWS {
        assert_eq!(decide(1, &[0.1, 0.1], 4, &mut runs), Move::Stay);
    }
    assert_eq!(
        decide(1, &[0.1, 0.1], 4, &mut runs),
        Move::Gather { count: 4 }
    );
}

proptest! {
    /// Whatever the loads, a move is one the policy allows: a spread goes
    /// from a busy loop to a less busy one, keeps a connection home and
    /// does not overshoot by more than two connections' share; a gather
    /// goes from a loop other than 0, whose load with loop 0's is low.
    #[test]
    fn moves_obey_the_policy(
        loads in prop::collection::vec(0.0f64..=1.0, 2..6),
        me_pick in 0usize..6,
        n in 0usize..200,
        high in 0u32..4,
        low in 0u32..8,
    ) {
        let me = me_pick % loads.len();
        let mut runs = Runs { high, low };
        let load = loads[me];
        match decide(me, &loads, n, &mut runs) {
            Move::Stay => {}
            Move::Spread { to, count } => {
                prop_assert_ne!(to, me);
                prop_assert!(load >= HIGH && high + 1 >= SPREAD_WINDOWS);
                prop_assert!(loads[to] + MARGIN < load);
                prop_assert!(loads.iter().enumerate().all(|(i, l)| i == me || *l >= loads[to]));
                prop_assert!(count >= 1 && count < n);
                let (n, c) = (n as f64, count as f64);
                let mine = load * (n - c) / n;
                let theirs = loads[to] + load * c / n;
                prop_assert!(theirs <= mine + 2.0 * load / n + 1e-9);
                prop_assert_eq!(runs.high, 0);
            }
            Move::Gather { count } => {
                prop_assert_ne!(me, 0);
                prop_assert_eq!(count, n);
                prop_assert!(load + loads[0] < LOW && low + 1 >= GATHER_WINDOWS);
                prop_assert_eq!(runs.low, 0);
            }
        }
    }
}
