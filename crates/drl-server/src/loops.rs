//! The connection loop: below the peak, a listener's connections are
//! polled by one task, not by one task each; at the peak they run as tasks
//! of their own again.
//!
//! tokio's multi-thread scheduler wakes a sleeping worker whenever one poll
//! of its I/O driver readies two or more tasks. With one task per
//! connection that happens on a large share of requests below the peak,
//! and each such wakeup (a futex wake, a search for work that finds
//! nothing, a futex wait) costs about a microsecond of system time: with
//! two workers a request cost 5-15 % more CPU than with one at the same
//! rate (BENCHMARKS.md, issue 17).
//!
//! So each listener has a *loop*: one tokio task that polls its
//! connections itself (a `FuturesUnordered`). However many of them one
//! I/O poll readies, tokio sees one task, and the other workers sleep.
//! One task runs on one worker at a time, though, so at the peak the
//! connections must run as tasks of their own (*pooled*): then every
//! worker takes a share, and when a worker is preempted (the load
//! generator or another process shares the cores) the others steal its
//! waiting connections instead of leaving them all stalled behind it. The
//! listener switches between the two:
//!
//! - **Pool** when the loop spent at least [`HIGH`] of the wall time
//!   polling, in [`POOL_WINDOWS`] windows of [`WINDOW`] in a row (a
//!   loop that is hardly ever idle cannot take more), *and* the machine
//!   had CPU to spare for more threads over the loop's current stretch
//!   of load (windows at least [`WARM`] busy in a row), judged once
//!   that stretch is `room::ROOM_SPAN` (200 ms) long: half a core idle,
//!   or threads already waiting for a CPU. When every core is busy and
//!   nobody waits, a second worker would only take CPU from whatever
//!   else runs there while every request costs more, so the loop keeps
//!   its connections (on two cores shared with a load generator it then
//!   served 1.12-1.19x the throughput of a server that decides nothing,
//!   where pooled connections served 0.92-0.96x: BENCHMARKS.md, session
//!   20). Each connection leaves the loop at its next poll and is
//!   spawned as a task.
//! - **Gather** when the whole process used less than [`LOW`] cores of CPU
//!   time in [`GATHER_WINDOWS`] windows in a row: one loop has room for
//!   the whole load again. Each pooled connection hands itself back to the
//!   loop at its next poll.
//!
//! The two signals differ on purpose. Time spent polling says when the
//! loop is full, but it understates the load of tasks that are not full:
//! a task that waits pays for its wakeups outside its polls. The
//! process's CPU time counts everything.
//!
//! A connection moves between two of its polls: it is a boxed future, so
//! moving it moves a pointer, and its next poll (at once, where it went)
//! registers the new task's wakers with whatever it waits on. A connection
//! that panics on the loop is dropped alone (the panic is caught around
//! its poll), as a task of its own would be. With one worker there is
//! nothing to gain and every connection is a task of its own.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

mod room;
use room::{Mark, Spare};

/// A connection: what a listener would otherwise spawn as a task.
pub type Conn = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long the loop measures the load over before acting on it.
pub const WINDOW: Duration = Duration::from_millis(20);
/// The loop busy this share of the wall time, [`POOL_WINDOWS`] windows in
/// a row: pool.
pub const HIGH: f64 = 0.85;
/// Windows in a row at or above [`HIGH`] before pooling.
pub const POOL_WINDOWS: u32 = 2;
/// The process using less CPU than this many cores, [`GATHER_WINDOWS`]
/// windows in a row: gather (where there is no process CPU clock, the
/// loop's own polling share stands in).
pub const LOW: f64 = 0.6;
/// A window at least this busy continues the stretch of load over which
/// the machine's room for more threads is judged; a quieter one ends it.
pub const WARM: f64 = 0.5;
/// Windows in a row under [`LOW`] before gathering.
pub const GATHER_WINDOWS: u32 = 5;

/// What a listener's loop and its pooled connections share.
struct Inner {
    /// Connections handed to the loop, not yet taken in.
    inbox: Mutex<Vec<Conn>>,
    /// `inbox` is not empty (checked before taking the lock).
    mail: AtomicBool,
    /// The loop's task.
    waker: AtomicWaker,
    /// Connections run as tasks of their own.
    pooled: AtomicBool,
    /// Connections on the loop.
    on_loop: AtomicUsize,
    /// Connections not yet finished (or dropped), anywhere.
    live: AtomicUsize,
    /// `live` reached zero.
    drained: Notify,
    /// The listener let go of its [`Loops`]: the loop drops what it holds
    /// and ends, and pooled connections' tasks are aborted.
    closed: AtomicBool,
    /// Labels the `drl_connections_pooled` gauge.
    listener: &'static str,
    /// Pooled connections' tasks, aborted when the listener lets go
    /// (finished ones are reaped at each spawn).
    tasks: Mutex<tokio::task::JoinSet<()>>,
}

impl Inner {
    fn set_gauge(&self, pooled: bool) {
        metrics::gauge!("drl_connections_pooled", "listener" => self.listener).set(if pooled {
            1.0
        } else {
            0.0
        });
    }

    fn deliver(&self, conn: Conn) {
        self.inbox.lock().push(conn);
        self.mail.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// A listener's connection loop (see the module docs). Dropping it drops
/// every connection still open: wait for [`Loops::drained`] first to let
/// them finish.
pub struct Loops {
    inner: Arc<Inner>,
}

impl Loops {
    /// The loop of `listener` for the current runtime (none with one
    /// worker thread).
    pub fn for_runtime(listener: &'static str) -> Self {
        Self::new(
            listener,
            tokio::runtime::Handle::current().metrics().num_workers() > 1,
        )
    }

    /// A loop spawned on the current runtime if `looping`; otherwise every
    /// connection is spawned as a task of its own. `listener` labels the
    /// `drl_connections_pooled` gauge (1 while the connections run as
    /// tasks of their own).
    pub fn new(listener: &'static str, looping: bool) -> Self {
        let inner = Arc::new(Inner {
            inbox: Mutex::new(Vec::new()),
            mail: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            pooled: AtomicBool::new(!looping),
            on_loop: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            listener,
            tasks: Mutex::new(tokio::task::JoinSet::new()),
        });
        inner.set_gauge(!looping);
        if looping {
            tokio::spawn(tokio::task::unconstrained(Loop::new(inner.clone())));
        }
        Self { inner }
    }

    /// Connections not yet finished.
    pub fn open(&self) -> usize {
        self.inner.live.load(Ordering::Acquire)
    }

    /// Connections polled by the loop (the rest of [`Loops::open`] run as
    /// tasks of their own, or are on their way between the two).
    pub fn on_loop(&self) -> usize {
        self.inner.on_loop.load(Ordering::Relaxed)
    }

    /// Whether new and waking connections run as tasks of their own.
    pub fn pooled(&self) -> bool {
        self.inner.pooled.load(Ordering::Relaxed)
    }

    /// Runs `conn`: on the loop, or as a task of its own when pooled.
    pub fn spawn<F>(&self, conn: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.live.fetch_add(1, Ordering::AcqRel);
        let live = Live(self.inner.clone());
        let conn = Box::pin(async move {
            let _live = live;
            conn.await;
        });
        if self.pooled() {
            spawn_pooled(self.inner.clone(), conn);
        } else {
            self.inner.deliver(conn);
        }
    }

    /// Resolves once every connection has finished.
    pub async fn drained(&self) {
        loop {
            let notified = self.inner.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.live.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.waker.wake();
        // Dropping the set aborts its tasks.
        drop(std::mem::take(&mut *self.inner.tasks.lock()));
    }
}

/// Counts a connection live until it is dropped.
struct Live(Arc<Inner>);

impl Drop for Live {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Spawns `conn` as a task of its own, back to the loop when gathered.
fn spawn_pooled(inner: Arc<Inner>, conn: Conn) {
    let mut tasks = inner.tasks.lock();
    if inner.closed.load(Ordering::Acquire) {
        return;
    }
    while tasks.try_join_next().is_some() {}
    tasks.spawn(Pooled {
        conn: Some(conn),
        inner: inner.clone(),
    });
}

/// A pooled connection's task.
struct Pooled {
    conn: Option<Conn>,
    inner: Arc<Inner>,
}

impl Future for Pooled {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.inner.pooled.load(Ordering::Relaxed) {
            if let Some(conn) = self.conn.take() {
                self.inner.deliver(conn);
            }
            return Poll::Ready(());
        }
        match self.conn.as_mut() {
            Some(conn) => conn.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

/// A connection on the loop: polled there until it finishes or leaves.
struct Slot {
    conn: Option<Conn>,
    inner: Arc<Inner>,
}

impl Future for Slot {
    /// The connection, if it is to leave the loop.
    type Output = Option<Conn>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Conn>> {
        if self.inner.pooled.load(Ordering::Relaxed) {
            return Poll::Ready(self.conn.take());
        }
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| conn.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                self.conn = None;
                Poll::Ready(None)
            }
            Err(_) => {
                tracing::error!("a connection panicked; it is closed");
                self.conn = None;
                Poll::Ready(None)
            }
        }
    }
}

/// What the listener does at the end of a window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Switch {
    /// Nothing.
    Stay,
    /// Run the connections as tasks of their own.
    Pool,
    /// Poll the connections on the loop.
    Gather,
}

/// Windows in a row over [`HIGH`] (while on the loop) or under [`LOW`]
/// (while pooled).
#[derive(Debug, Default, Clone, Copy)]
struct Runs {
    high: u32,
    low: u32,
}

/// The policy (see the module docs), at the end of a window: `pooled`,
/// the loop's polling share `load` of that window, the process's CPU use
/// over it in cores (`cpu`, if known) and what the machine had to spare
/// over the loop's stretch of load (`spare`); `runs` counts windows in a
/// row.
fn decide(pooled: bool, load: f64, cpu: Option<f64>, spare: Spare, runs: &mut Runs) -> Switch {
    if pooled {
        runs.high = 0;
        runs.low = if cpu.unwrap_or(load) < LOW {
            runs.low + 1
        } else {
            0
        };
        if runs.low >= GATHER_WINDOWS {
            runs.low = 0;
            return Switch::Gather;
        }
    } else {
        runs.low = 0;
        runs.high = if load >= HIGH { runs.high + 1 } else { 0 };
        if runs.high >= POOL_WINDOWS && spare != Spare::No {
            runs.high = 0;
            return Switch::Pool;
        }
    }
    Switch::Stay
}

/// The loop's task.
struct Loop {
    inner: Arc<Inner>,
    set: FuturesUnordered<Slot>,
    window_start: Instant,
    busy: Duration,
    /// The process's CPU time at `window_start`.
    cpu_start: Option<u64>,
    runs: Runs,
    /// The machine's counters at the end of the first window of the
    /// loop's current stretch of load (windows at least [`WARM`] busy in
    /// a row; none outside one, or while pooled).
    streak: Option<Mark>,
    /// While pooled: the end of the window (the loop has nothing else to
    /// wake it then).
    tick: Pin<Box<tokio::time::Sleep>>,
}

impl Loop {
    fn new(inner: Arc<Inner>) -> Self {
        let now = Instant::now();
        Self {
            inner,
            set: FuturesUnordered::new(),
            window_start: now,
            busy: Duration::ZERO,
            cpu_start: drl_core::time::process_cpu_nanos(),
            runs: Runs::default(),
            streak: None,
            tick: Box::pin(tokio::time::sleep_until((now + WINDOW).into())),
        }
    }

    /// Ends a window at `now`: measures it and switches if due.
    fn end_window(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_start);
        let load = (self.busy.as_secs_f64() / elapsed.as_secs_f64()).min(1.0);
        let cpu_now = drl_core::time::process_cpu_nanos();
        let cpu = match (self.cpu_start, cpu_now) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9 / elapsed.as_secs_f64()),
            _ => None,
        };
        self.cpu_start = cpu_now;
        self.window_start = now;
        self.busy = Duration::ZERO;
        let pooled = self.inner.pooled.load(Ordering::Relaxed);
        // The machine's room for more threads, read only over stretches
        // of load (two small files at the end of each of their windows).
        let spare = if !pooled && load >= WARM {
            let mark = Mark::now();
            let first = *self.streak.get_or_insert(mark);
            mark.since(&first)
        } else {
            self.streak = None;
            Spare::No
        };
        tracing::trace!(pooled, load, ?cpu, ?spare, "connection loop window");
        match decide(pooled, load, cpu, spare, &mut self.runs) {
            Switch::Stay => {}
            Switch::Pool => {
                tracing::debug!(load, ?cpu, ?spare, "connections pooled");
                self.inner.pooled.store(true, Ordering::Relaxed);
                self.inner.set_gauge(true);
            }
            Switch::Gather => {
                tracing::debug!(load, ?cpu, "connections gathered onto the loop");
                self.inner.pooled.store(false, Ordering::Relaxed);
                self.inner.set_gauge(false);
            }
        }
    }

    fn take_in(&mut self, conn: Conn) {
        self.set.push(Slot {
            conn: Some(conn),
            inner: self.inner.clone(),
        });
        self.inner.on_loop.fetch_add(1, Ordering::Relaxed);
    }
}

impl Future for Loop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let start = Instant::now();
        if start.saturating_duration_since(self.window_start) >= WINDOW {
            self.end_window(start);
        }
        self.inner.waker.register(cx.waker());
        if self.inner.closed.load(Ordering::Acquire) {
            // The listener is gone: drop everything (as aborting the
            // connections' tasks would).
            self.set.clear();
            self.inner.inbox.lock().clear();
            return Poll::Ready(());
        }
        if self.inner.mail.load(Ordering::Acquire) {
            self.inner.mail.store(false, Ordering::Release);
            let mail = std::mem::take(&mut *self.inner.inbox.lock());
            for conn in mail {
                self.take_in(conn);
            }
        }
        // Until every ready connection was polled (or the set yields).
        while let Poll::Ready(Some(left)) = self.set.poll_next_unpin(cx) {
            self.inner.on_loop.fetch_sub(1, Ordering::Relaxed);
            if let Some(conn) = left {
                spawn_pooled(self.inner.clone(), conn);
            }
        }
        self.busy += start.elapsed();
        if self.inner.pooled.load(Ordering::Relaxed) {
            // Nothing on the loop wakes it: the window's end must.
            let end = self.window_start + WINDOW;
            if self.tick.deadline() != end.into() {
                self.tick.as_mut().reset(end.into());
            }
            if self.tick.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
