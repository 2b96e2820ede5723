//! Connection loops: a listener's connections polled by one task per
//! runtime worker, not by one task each, and kept on one of those tasks
//! until it is busy.
//!
//! tokio's multi-thread scheduler wakes a sleeping worker whenever one poll
//! of its I/O driver readies two or more tasks. With one task per
//! connection that happens on a large share of requests below the peak,
//! and each such wakeup (a futex wake, a search for work that finds
//! nothing, a futex wait) costs about a microsecond of system time: with
//! two workers a request cost 5-10 % more CPU than with one at the same
//! rate (BENCHMARKS.md, issue 17).
//!
//! Here each listener has as many *loops* as the runtime has workers. A
//! loop is one tokio task that polls its connections itself (a
//! `FuturesUnordered`): however many of its connections one I/O poll
//! readies, tokio sees one task. New connections go to loop 0, so below
//! the peak one loop holds them all and the other workers sleep. Each loop
//! measures the share of wall time it spends polling over windows of
//! [`WINDOW`]:
//!
//! - **Spread**: a loop that is busy at least [`HIGH`] of two windows in a
//!   row hands enough of its connections to the least busy loop to even
//!   the two out (the connections that get polled first: the active ones).
//! - **Gather**: a loop other than loop 0 whose load plus loop 0's stays
//!   under [`LOW`] for [`GATHER_WINDOWS`] windows hands all of its
//!   connections back to loop 0.
//!
//! A connection moves between two of its polls: it is a boxed future, so
//! moving it moves a pointer, and its next poll (on the new loop, at once)
//! registers the new loop's wakers with whatever it waits on. A connection
//! that panics is dropped alone (the panic is caught around its poll), as
//! a task of its own would be. With one worker there is nothing to spread
//! and [`Loops`] spawns one task per connection as before.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// A connection: what a listener would otherwise spawn as a task.
pub type Conn = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long a loop measures its load over before acting on it.
pub const WINDOW: Duration = Duration::from_millis(20);
/// A loop busy this share of two windows in a row spreads its connections.
pub const HIGH: f64 = 0.85;
/// Loops whose loads sum below this share of one worker gather onto loop 0.
pub const LOW: f64 = 0.55;
/// Windows in a row under [`LOW`] before a loop gathers onto loop 0.
pub const GATHER_WINDOWS: u32 = 5;
/// Windows in a row at or above [`HIGH`] before a loop spreads.
const SPREAD_WINDOWS: u32 = 2;
/// A load this much under the busy loop's: worth moving connections to.
const MARGIN: f64 = 0.15;

/// What the loops of one listener share.
struct Inner {
    loops: Box<[Shared]>,
    /// Connections not yet finished (or dropped), on any loop.
    live: AtomicUsize,
    /// `live` reached zero.
    drained: Notify,
    /// The listener let go of its [`Loops`]: the loops drop what they hold
    /// and end.
    closed: AtomicBool,
    /// Load timestamps count from here.
    epoch: Instant,
}

/// One loop's mailbox and published load.
struct Shared {
    /// Connections handed to this loop, not yet taken in.
    inbox: Mutex<Vec<Conn>>,
    /// `inbox` is not empty (checked before taking the lock).
    mail: AtomicBool,
    /// The loop's task.
    waker: AtomicWaker,
    /// Load of the last window, in millionths of wall time.
    load: AtomicU32,
    /// When that window ended, microseconds since [`Inner::epoch`].
    load_at: AtomicU64,
    /// Connections still to hand over at their next poll, and to which loop.
    shed: AtomicUsize,
    shed_to: AtomicUsize,
    /// Connections on this loop.
    conns: AtomicUsize,
}

impl Shared {
    fn new() -> Self {
        Self {
            inbox: Mutex::new(Vec::new()),
            mail: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            load: AtomicU32::new(0),
            load_at: AtomicU64::new(0),
            shed: AtomicUsize::new(0),
            shed_to: AtomicUsize::new(0),
            conns: AtomicUsize::new(0),
        }
    }

    fn deliver(&self, conn: Conn) {
        self.inbox.lock().push(conn);
        self.mail.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Takes one connection off the shed count, if any are due.
    fn take_shed(&self) -> bool {
        self.shed.load(Ordering::Relaxed) > 0
            && self
                .shed
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }
}

impl Inner {
    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Loop `i`'s load as of `now`: its last window's, or 0 if it has not
    /// finished a window for two windows (it has been idle).
    fn load(&self, i: usize, now: u64) -> f64 {
        let s = &self.loops[i];
        let at = s.load_at.load(Ordering::Acquire);
        if now.saturating_sub(at) > 2 * WINDOW.as_micros() as u64 {
            return 0.0;
        }
        f64::from(s.load.load(Ordering::Relaxed)) / 1e6
    }
}

/// A listener's connection loops (see the module docs). Dropping it drops
/// every connection still open: wait for [`Loops::drained`] first to let
/// them finish.
pub struct Loops {
    inner: Arc<Inner>,
}

impl Loops {
    /// Loops for the current runtime: one per worker thread.
    pub fn for_runtime() -> Self {
        Self::new(tokio::runtime::Handle::current().metrics().num_workers())
    }

    /// `n` loops (at least one), spawned on the current runtime; with one,
    /// connections are spawned as tasks of their own.
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        let inner = Arc::new(Inner {
            loops: (0..n).map(|_| Shared::new()).collect(),
            live: AtomicUsize::new(0),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            epoch: Instant::now(),
        });
        if n > 1 {
            for me in 0..n {
                tokio::spawn(tokio::task::unconstrained(Loop::new(inner.clone(), me)));
            }
        }
        Self { inner }
    }

    /// Number of loops.
    pub fn len(&self) -> usize {
        self.inner.loops.len()
    }

    /// Always false: there is at least one loop.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Connections on each loop (with one loop: all open connections).
    pub fn spread(&self) -> Vec<usize> {
        if self.len() == 1 {
            return vec![self.inner.live.load(Ordering::Relaxed)];
        }
        self.inner
            .loops
            .iter()
            .map(|s| s.conns.load(Ordering::Relaxed))
            .collect()
    }

    /// Runs `conn` on loop 0, or on the least busy loop if loop 0 is busy.
    pub fn spawn<F>(&self, conn: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.live.fetch_add(1, Ordering::AcqRel);
        let live = Live(self.inner.clone());
        let conn = async move {
            let _live = live;
            conn.await;
        };
        if self.len() == 1 {
            tokio::spawn(conn);
            return;
        }
        let now = self.inner.micros(Instant::now());
        let mut to = 0;
        if self.inner.load(0, now) >= HIGH {
            to = (0..self.len())
                .min_by(|&a, &b| self.inner.load(a, now).total_cmp(&self.inner.load(b, now)))
                .unwrap_or(0);
        }
        self.inner.loops[to].deliver(Box::pin(conn));
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
        for s in self.inner.loops.iter() {
            s.waker.wake();
        }
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

/// A connection on a loop: polled there until it finishes or is handed on.
struct Slot {
    conn: Option<Conn>,
    inner: Arc<Inner>,
    me: usize,
}

impl Future for Slot {
    /// The connection, if it is to move to another loop.
    type Output = Option<Conn>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Conn>> {
        if self.inner.loops[self.me].take_shed() {
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

/// What a loop does with its connections at the end of a window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Move {
    /// Nothing.
    Stay,
    /// Hand `count` connections to loop `to`.
    Spread { to: usize, count: usize },
    /// Hand all `count` connections to loop 0.
    Gather { count: usize },
}

/// A loop's windows in a row over [`HIGH`] and under [`LOW`].
#[derive(Debug, Default, Clone, Copy)]
struct Runs {
    high: u32,
    low: u32,
}

/// The policy (see the module docs): what loop `me`, with `n` connections,
/// does given every loop's load (`loads[me]` its own, of the window just
/// ended); `runs` counts its windows in a row.
fn decide(me: usize, loads: &[f64], n: usize, runs: &mut Runs) -> Move {
    let load = loads[me];
    runs.high = if load >= HIGH { runs.high + 1 } else { 0 };
    let gather = me != 0 && load + loads[0] < LOW;
    runs.low = if gather { runs.low + 1 } else { 0 };
    let least = (0..loads.len())
        .filter(|&i| i != me)
        .min_by(|&a, &b| loads[a].total_cmp(&loads[b]));
    if let Some(to) = least
        && runs.high >= SPREAD_WINDOWS
        && loads[to] + MARGIN < load
        && n > 1
    {
        // Even the two out: move the share of connections that carries
        // half the difference.
        let share = (load - loads[to]) / (2.0 * load);
        let count = ((n as f64 * share).ceil() as usize).clamp(1, n - 1);
        runs.high = 0;
        return Move::Spread { to, count };
    }
    if runs.low >= GATHER_WINDOWS && n > 0 {
        runs.low = 0;
        return Move::Gather { count: n };
    }
    Move::Stay
}

/// One loop's task.
struct Loop {
    inner: Arc<Inner>,
    me: usize,
    set: FuturesUnordered<Slot>,
    window_start: Instant,
    busy: Duration,
    runs: Runs,
}

impl Loop {
    fn new(inner: Arc<Inner>, me: usize) -> Self {
        Self {
            inner,
            me,
            set: FuturesUnordered::new(),
            window_start: Instant::now(),
            busy: Duration::ZERO,
            runs: Runs::default(),
        }
    }

    fn shared(&self) -> &Shared {
        &self.inner.loops[self.me]
    }

    fn take_in(&mut self, conn: Conn) {
        self.set.push(Slot {
            conn: Some(conn),
            inner: self.inner.clone(),
            me: self.me,
        });
        self.shared().conns.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends a window at `now`: publishes its load and decides what to move.
    fn end_window(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_start);
        let load = (self.busy.as_secs_f64() / elapsed.as_secs_f64()).min(1.0);
        self.window_start = now;
        self.busy = Duration::ZERO;
        let at = self.inner.micros(now);
        let sh = &self.inner.loops[self.me];
        sh.load.store((load * 1e6) as u32, Ordering::Relaxed);
        sh.load_at.store(at, Ordering::Release);
        sh.shed.store(0, Ordering::Relaxed);
        let loads: Vec<f64> = (0..self.inner.loops.len())
            .map(|i| {
                if i == self.me {
                    load
                } else {
                    self.inner.load(i, at)
                }
            })
            .collect();
        let n = sh.conns.load(Ordering::Relaxed);
        let (to, count) = match decide(self.me, &loads, n, &mut self.runs) {
            Move::Stay => return,
            Move::Spread { to, count } => (to, count),
            Move::Gather { count } => (0, count),
        };
        tracing::debug!(
            me = self.me,
            to,
            count,
            ?loads,
            "moving connections between loops"
        );
        sh.shed_to.store(to, Ordering::Relaxed);
        sh.shed.store(count, Ordering::Relaxed);
    }

    /// Hands `conn` to the loop this one sheds to.
    fn hand_on(&self, conn: Conn) {
        let sh = self.shared();
        sh.conns.fetch_sub(1, Ordering::Relaxed);
        let to = sh.shed_to.load(Ordering::Relaxed);
        self.inner.loops[to].deliver(conn);
    }
}

impl Future for Loop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let start = Instant::now();
        if start.saturating_duration_since(self.window_start) >= WINDOW {
            self.end_window(start);
        }
        self.shared().waker.register(cx.waker());
        if self.inner.closed.load(Ordering::Acquire) {
            // The listener is gone: drop everything (as aborting the
            // connections' tasks would).
            self.set.clear();
            self.shared().inbox.lock().clear();
            return Poll::Ready(());
        }
        if self.shared().mail.load(Ordering::Acquire) {
            self.shared().mail.store(false, Ordering::Release);
            let mail = std::mem::take(&mut *self.shared().inbox.lock());
            for conn in mail {
                self.take_in(conn);
            }
        }
        loop {
            match self.set.poll_next_unpin(cx) {
                Poll::Ready(Some(Some(conn))) => self.hand_on(conn),
                Poll::Ready(Some(None)) => {
                    self.shared().conns.fetch_sub(1, Ordering::Relaxed);
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        self.busy += start.elapsed();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
