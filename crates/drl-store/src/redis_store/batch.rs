//! Coalescing: decisions in flight to the same Redis at the same time go as
//! one script call that decides them in order.
//!
//! A decision is encoded once, by its caller, as a [`Part`]: its keys and
//! its ARGV record. [`build_call`] concatenates parts into one `EVALSHA`
//! (KEYS = every part's keys, ARGV = grace then every part's record); the
//! reply holds [`script::reply_len`] items per part, in order.
//!
//! Concurrent [`RedisStore::decide`](super::RedisStore) calls go through a
//! [`Batcher`]: an unbounded channel to one task per store that takes
//! whatever is queued (up to `batch_max` decisions), groups it by script
//! and, on a cluster, by hash slot, and sends one call per group while no
//! more than `batch_in_flight` calls are in flight. It never waits for a
//! batch to fill: an idle store sends a lone decision at once; under load,
//! decisions queue while the in-flight calls run and the next call carries
//! all of them. A caller that gave up (its deadline passed, its future was
//! dropped) before its decision was sent is skipped, so a stalled Redis
//! does not accumulate stale work.
//!
//! Which decisions share a call would thus depend on how the submitting
//! thread and the batcher's thread interleave. [`coalesce`] removes that
//! for one caller's batch: decisions submitted while it polls its future
//! (a `join_all` over a request's checks submits them all in its first
//! poll) are held and handed to the batcher as one message when the poll
//! ends, so they share calls whatever the threads do.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::cluster_routing::Slot;
use redis::{Arg, Cmd, Value};
use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, backend, is_noscript};
use super::script::{self, Kind};
use super::{Engine, module};
use crate::StoreError;

/// Which calls a decision may share: the same script and, on a cluster,
/// the same hash slot (a script's keys must live in one slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    pub kind: Kind,
    pub slot: Option<Slot>,
}

/// One decision, encoded: `nkeys` keys, then its ARGV record.
pub(crate) struct Part {
    pub group: Group,
    pub nkeys: usize,
    pub args: Cmd,
    /// Items of the reply that belong to this decision.
    pub reply_len: usize,
}

/// The reply items of one call and where one decision's part starts.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    items: Arc<Vec<Value>>,
    start: usize,
    len: usize,
}

impl Reply {
    /// This decision's items.
    pub fn items(&self) -> &[Value] {
        &self.items[self.start..self.start + self.len]
    }
}

/// What the connection and the calls need, shared by the store's clones
/// and its batcher task.
pub(crate) struct Shared {
    pub conn: Conn,
    /// SHA1s of [`script::SCRIPTS`].
    pub shas: [String; 3],
    pub grace_ms: u64,
    /// Extra grace drawn per call (`expiry_jitter_ms`).
    pub jitter: Jitter,
    pub response_timeout_ms: u64,
    /// What decides: scripts or the module.
    pub engine: Engine,
    /// The server (or cluster) as named in errors, without passwords.
    pub server: String,
    /// `DRL.VERSION` answered the right version (module engine).
    pub module_ok: AtomicBool,
    /// A missing or mismatched module was logged already.
    pub module_warned: AtomicBool,
}

fn push_arg(cmd: &mut Cmd, a: Arg<&[u8]>) {
    if let Arg::Simple(b) = a {
        cmd.arg(b);
    }
}

/// One script call deciding `parts` in order (all of one [`Group`]):
/// `EVALSHA sha` (or `EVAL source` when `eval`).
pub(crate) fn build_call<'a>(
    shared: &Shared,
    kind: Kind,
    eval: bool,
    parts: impl Iterator<Item = &'a Part> + Clone,
) -> Cmd {
    let nkeys: usize = parts.clone().map(|p| p.nkeys).sum();
    let mut cmd = if eval {
        let mut c = redis::cmd("EVAL");
        c.arg(script::SCRIPTS[kind as usize]);
        c
    } else {
        let mut c = redis::cmd("EVALSHA");
        c.arg(&shared.shas[kind as usize]);
        c
    };
    cmd.arg(nkeys);
    for p in parts.clone() {
        for a in p.args.args_iter().take(p.nkeys) {
            push_arg(&mut cmd, a);
        }
    }
    cmd.arg(shared.grace());
    for p in parts {
        for a in p.args.args_iter().skip(p.nkeys) {
            push_arg(&mut cmd, a);
        }
    }
    cmd
}

/// Draws up to `max_ms` of extra expiry grace per call: splitmix64 over a
/// counter (spread, not secrecy, is the point).
pub(crate) struct Jitter {
    max_ms: u64,
    state: std::sync::atomic::AtomicU64,
}

impl Jitter {
    /// Draws in `[0, max_ms)`; 0 draws nothing.
    pub fn new(max_ms: u64) -> Self {
        Self {
            max_ms,
            state: std::sync::atomic::AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// The next extra grace, in ms.
    pub fn draw(&self) -> u64 {
        if self.max_ms == 0 {
            return 0;
        }
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % self.max_ms
    }
}

impl Shared {
    /// The grace of one call: `expiry_grace_ms` plus its jitter.
    pub fn grace(&self) -> u64 {
        self.grace_ms.saturating_add(self.jitter.draw())
    }

    fn with_timeout(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Timeout(0) => StoreError::Timeout(self.response_timeout_ms),
            other => other,
        }
    }

    /// Logs a module error once per store (it repeats on every call).
    fn module_error(&self, e: StoreError) -> StoreError {
        if !self.module_warned.swap(true, Ordering::Relaxed) {
            tracing::error!(error = %e, "the Redis store cannot decide with `engine: module`");
        }
        metrics::counter!("drl_store_redis_module_missing_total").increment(1);
        e
    }

    /// Checks `DRL.VERSION` unless it was checked already (module engine).
    pub async fn ensure_module(&self) -> Result<(), StoreError> {
        if self.module_ok.load(Ordering::Relaxed) {
            return Ok(());
        }
        match module::check_version(&self.conn, &self.server).await {
            Ok(()) => {
                self.module_ok.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e @ StoreError::Backend(_)) if e.to_string().contains("drl module") => {
                Err(self.module_error(e))
            }
            Err(e) => Err(self.with_timeout(e)),
        }
    }

    /// One `DRL.DECIDE` deciding `parts` (one slot) with the module.
    async fn call_module<'a>(
        &self,
        parts: impl Iterator<Item = &'a Part> + Clone,
    ) -> Result<Value, StoreError> {
        self.ensure_module().await?;
        let cmd = module::build_call(self.grace(), parts.map(|p| (p.nkeys, &p.args)));
        match self.conn.query(&cmd).await {
            Ok(v) => Ok(v),
            // The module went away (a restarted server, a new cluster node).
            Err(e) if module::is_unknown_command(&e) => {
                self.module_ok.store(false, Ordering::Relaxed);
                Err(self.module_error(module::missing(&self.server)))
            }
            Err(e) => Err(self.with_timeout(backend(e))),
        }
    }

    /// Sends one call deciding `parts` (one group) and splits the reply; a
    /// server that lost the script (`NOSCRIPT`: nothing ran) gets the same
    /// call once more as `EVAL`, which caches the script there again. With
    /// the module engine the call is one `DRL.DECIDE`.
    pub async fn call<'a>(
        &self,
        parts: impl Iterator<Item = &'a Part> + Clone,
    ) -> Result<Vec<Reply>, StoreError> {
        let Some(first) = parts.clone().next() else {
            return Ok(Vec::new());
        };
        if self.engine == Engine::Module {
            let v = self.call_module(parts.clone()).await?;
            return split(v, parts.map(|p| p.reply_len));
        }
        let kind = first.group.kind;
        let v = match self
            .conn
            .query(&build_call(self, kind, false, parts.clone()))
            .await
        {
            Err(e) if is_noscript(&e) => {
                metrics::counter!("drl_store_redis_noscript_total").increment(1);
                self.conn
                    .query(&build_call(self, kind, true, parts.clone()))
                    .await
            }
            other => other,
        };
        let v = v.map_err(|e| self.with_timeout(backend(e)))?;
        split(v, parts.map(|p| p.reply_len))
    }
}

/// Splits a call's reply into per-decision [`Reply`]s of the given lengths.
pub(crate) fn split(
    v: Value,
    lens: impl Iterator<Item = usize> + Clone,
) -> Result<Vec<Reply>, StoreError> {
    let total: usize = lens.clone().sum();
    let Value::Array(items) = v else {
        return Err(StoreError::Backend(format!(
            "unexpected answer from the decision script: expected an array, got {v:?}"
        )));
    };
    if items.len() != total {
        return Err(StoreError::Backend(format!(
            "unexpected answer from the decision script: {} items, expected {total}",
            items.len()
        )));
    }
    let items = Arc::new(items);
    let mut start = 0;
    Ok(lens
        .map(|len| {
            let r = Reply {
                items: items.clone(),
                start,
                len,
            };
            start += len;
            r
        })
        .collect())
}

/// A queued decision and where its answer goes.
pub(crate) struct Job {
    pub part: Part,
    pub tx: oneshot::Sender<Result<Reply, StoreError>>,
}

type Sender = mpsc::UnboundedSender<Vec<Job>>;

tokio::task_local! {
    /// Decisions held while [`coalesce`] polls its future, with the
    /// batcher each one is for.
    static HELD: RefCell<Vec<(Sender, Job)>>;
}

/// Polls `fut` so that the store decisions it submits in one poll (to any
/// Redis store) reach each store's batcher together, as one message, when
/// that poll ends: a batch of checks then shares script calls (up to
/// `batch_max` decisions each) however the threads are scheduled.
pub async fn coalesce<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let (poll, held) = HELD.sync_scope(RefCell::new(Vec::new()), || {
            let poll = fut.as_mut().poll(cx);
            (poll, HELD.with(|h| std::mem::take(&mut *h.borrow_mut())))
        });
        release(held);
        poll
    })
    .await
}

/// Hands held decisions to their batchers, one message per batcher.
fn release(held: Vec<(Sender, Job)>) {
    let mut per: Vec<(Sender, Vec<Job>)> = Vec::new();
    for (tx, job) in held {
        match per.iter_mut().find(|(t, _)| t.same_channel(&tx)) {
            Some((_, jobs)) => jobs.push(job),
            None => per.push((tx, vec![job])),
        }
    }
    for (tx, jobs) in per {
        // A send error means the task is gone; dropping the jobs tells
        // their callers (their receivers err).
        let _ = tx.send(jobs);
    }
}

/// The sending side of a store's coalescing task.
#[derive(Clone)]
pub(crate) struct Batcher {
    tx: Sender,
}

impl Batcher {
    /// Starts the task (on the current Tokio runtime). It ends when every
    /// clone of the returned [`Batcher`] is dropped and its calls are done.
    pub fn start(shared: Arc<Shared>, max_batch: usize, max_in_flight: usize) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(shared, rx, max_batch.max(1), max_in_flight.max(1)));
        Batcher { tx }
    }

    /// Queues `part` (held until the poll ends inside [`coalesce`]); the
    /// answer arrives on the returned receiver.
    pub fn submit(&self, part: Part) -> oneshot::Receiver<Result<Reply, StoreError>> {
        let (tx, rx) = oneshot::channel();
        let mut job = Some(Job { part, tx });
        let _ = HELD.try_with(|h| {
            if let Some(j) = job.take() {
                h.borrow_mut().push((self.tx.clone(), j));
            }
        });
        if let Some(job) = job {
            // A send error means the task is gone; dropping `tx` tells the
            // caller (its receiver errs).
            let _ = self.tx.send(vec![job]);
        }
        rx
    }
}

async fn send_group(shared: Arc<Shared>, jobs: Vec<Job>) {
    match shared.call(jobs.iter().map(|j| &j.part)).await {
        Ok(replies) => {
            for (j, r) in jobs.into_iter().zip(replies) {
                let _ = j.tx.send(Ok(r));
            }
        }
        Err(e) => {
            for j in jobs {
                let _ = j.tx.send(Err(e.clone()));
            }
        }
    }
}

async fn run(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<Job>>,
    max_batch: usize,
    max_in_flight: usize,
) {
    let mut in_flight = FuturesUnordered::new();
    // Decisions received and not yet sent, in arrival order.
    let mut queued: VecDeque<Job> = VecDeque::new();
    let mut open = true;
    loop {
        if in_flight.len() < max_in_flight {
            // Whatever has arrived, without waiting.
            while queued.len() < max_batch {
                match rx.try_recv() {
                    Ok(jobs) => queued.extend(jobs),
                    Err(_) => break,
                }
            }
            if !queued.is_empty() {
                let mut groups: Vec<(Group, Vec<Job>)> = Vec::new();
                let n = queued.len().min(max_batch);
                for job in queued.drain(..n) {
                    // The caller gave up: do not send its decision.
                    if !job.tx.is_closed() {
                        match groups.iter_mut().find(|(g, _)| *g == job.part.group) {
                            Some((_, v)) => v.push(job),
                            None => groups.push((job.part.group, vec![job])),
                        }
                    }
                }
                for (_, jobs) in groups {
                    in_flight.push(send_group(shared.clone(), jobs));
                }
                continue;
            }
        }
        tokio::select! {
            biased;
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            jobs = rx.recv(), if open && queued.is_empty() && in_flight.len() < max_in_flight => {
                match jobs {
                    Some(jobs) => queued.extend(jobs),
                    None => open = false,
                }
            }
            else => break,
        }
    }
}
