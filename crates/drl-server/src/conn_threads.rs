//! Connection threads: each a single-threaded tokio runtime with its own
//! I/O driver and timer, serving the connections handed to it.
//!
//! A listener accepts on the main runtime and hands each connection to
//! the next connection thread in turn; the connection, its streams and
//! its timers then stay on that thread. No request crosses threads, and
//! no worker wakes another to steal work: on a multi-threaded runtime
//! those wakeups cost more per request than a check does
//! (docs/performance.md, "Connection threads"). Everything else (reload,
//! gossip, Orbit, Redis connections) stays on the main runtime.
//!
//! Tokio's cooperative budget applies on every connection thread as on
//! the main runtime: a busy connection yields to the others on its thread.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::Handle;

/// The process's connection threads, when started.
struct Pool {
    handles: Vec<Handle>,
    next: AtomicUsize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// Starts `n` connection threads for this process (`n` of 0 starts none:
/// connections then run on the runtime that accepts them). Returns an
/// error if a thread or runtime cannot be made, or if they were started
/// already.
pub fn start(n: usize) -> std::io::Result<()> {
    if n == 0 {
        return Ok(());
    }
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        handles.push(rt.handle().clone());
        std::thread::Builder::new()
            .name(format!("drl-conn-{i}"))
            // Runs for the life of the process: the tasks handed to it
            // are the connections, drained by their listeners at shutdown.
            .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    }
    POOL.set(Pool {
        handles,
        next: AtomicUsize::new(0),
    })
    .map_err(|_| std::io::Error::other("connection threads already started"))
}

/// The connection thread for the next connection, round robin; `None`
/// when none were started.
pub(crate) fn next() -> Option<&'static Handle> {
    let pool = POOL.get()?;
    let i = pool.next.fetch_add(1, Ordering::Relaxed) % pool.handles.len();
    Some(&pool.handles[i])
}
