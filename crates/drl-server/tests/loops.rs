//! The connection loop at work (`drl_server::loops`), in a test binary of
//! its own: connections gather onto the loop when the *process* is quiet,
//! so no other test's CPU time may run beside these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drl_server::loops::Loops;
use tokio::sync::{mpsc, oneshot};

/// Waits (up to 20 s) until `cond` holds; panics with `what` if it never does.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_peak_every_connection_is_on_loop_0_and_all_finish() {
    let loops = Loops::for_runtime("test");
    assert!(!loops.pooled());
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
    until("50 connections on the loop", || loops.on_loop() == 50).await;
    for g in gates {
        g.send(()).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
    assert_eq!(done.load(Ordering::Relaxed), 50);
    assert_eq!(loops.open(), 0);
    // (The loop counts a connection off after its last poll returns.)
    until("the loop empty", || loops.on_loop() == 0).await;
    assert!(!loops.pooled(), "never busy, never pooled");
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

/// One test, so that no two sets of spinners run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_loop_pools_and_a_quiet_process_gathers_back() {
    let loops = Loops::for_runtime("test");
    let s = Spinners::spawn(&loops, 8);
    // The loop is busy all its windows: its connections become tasks.
    until("the connections pooled", || {
        loops.pooled() && loops.on_loop() == 0
    })
    .await;
    assert_eq!(loops.open(), 8);
    // Quiet: each waits on its channel (and a timer) wherever it is now,
    // and every one answers, moved or not.
    s.busy.store(false, Ordering::Relaxed);
    s.all_answer().await;
    // The process is quiet: every connection returns to the loop.
    until("all connections back on the loop", || {
        !loops.pooled() && loops.on_loop() == 8
    })
    .await;
    // Moved twice, every connection still gets its wakeups.
    s.all_answer().await;
    // Busy again: pooled again.
    s.busy.store(true, Ordering::Relaxed);
    until("pooled again", || loops.pooled() && loops.on_loop() == 0).await;
    s.stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
    assert_eq!(loops.open(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_connection_is_dropped_alone() {
    let loops = Loops::for_runtime("test");
    let (tx, rx) = oneshot::channel::<()>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    loops.spawn(async move {
        let _ = rx.await;
        let _ = done_tx.send(());
    });
    loops.spawn(async { panic!("a connection's bug") });
    until("the panicking connection dropped", || loops.open() == 1).await;
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

/// Spawns `n` connections that never finish; counts their drops.
fn spawn_forever(loops: &Loops, n: usize) -> Arc<AtomicUsize> {
    let dropped = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let d = DropCount(dropped.clone());
        loops.spawn(async move {
            let _d = d;
            std::future::pending::<()>().await;
        });
    }
    dropped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_loops_drops_their_connections() {
    let loops = Loops::for_runtime("test");
    let dropped = spawn_forever(&loops, 10);
    until("10 connections on the loop", || loops.on_loop() == 10).await;
    assert_eq!(dropped.load(Ordering::Relaxed), 0);
    drop(loops);
    until("all 10 dropped", || dropped.load(Ordering::Relaxed) == 10).await;
}

#[tokio::test(flavor = "current_thread")]
async fn one_worker_spawns_a_task_per_connection() {
    let loops = Loops::for_runtime("test");
    assert!(loops.pooled(), "one worker: every connection a task");
    let (tx, rx) = oneshot::channel::<()>();
    loops.spawn(async move {
        let _ = rx.await;
    });
    assert_eq!((loops.open(), loops.on_loop()), (1, 0));
    tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), loops.drained())
        .await
        .expect("drained");
    assert_eq!(loops.open(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_loops_aborts_pooled_connections() {
    let loops = Loops::for_runtime("test");
    assert!(loops.pooled());
    let dropped = spawn_forever(&loops, 10);
    tokio::task::yield_now().await;
    assert_eq!((loops.open(), dropped.load(Ordering::Relaxed)), (10, 0));
    drop(loops);
    until("all 10 dropped", || dropped.load(Ordering::Relaxed) == 10).await;
}
