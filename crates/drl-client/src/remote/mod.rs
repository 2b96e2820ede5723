//! The remote backend: a running `drl serve`, over its native gRPC API or
//! HTTP/JSON `POST /v1/check`, with one connection pool per client.
//!
//! Concurrent checks are coalesced: a driver task sends whatever checks
//! are queued as one batch as soon as a request slot is free (at most
//! `max_in_flight` requests at once); a check never waits for a batch to
//! fill. Each check has a deadline; a check the service does not answer
//! in time (down, unreachable, stopped) gets the [`FailurePolicy`]'s
//! answer. A batch the service refuses as a whole (an unknown limit, a key
//! too long) is retried check by check, so one caller's bad check fails
//! only that caller.

mod grpc;
mod http;
mod transport;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use drl_api::Outcome;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::config::ClientConfig;
use crate::policy::{FailurePolicy, Fallback};
use crate::{CacheConfig, Error};
pub(crate) use transport::{Item, SendError, Transport};

/// The wire protocol of a [`RemoteBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// drl's native gRPC API (`drl.v1.RateLimiter/Check`), HTTP/2.
    Grpc,
    /// HTTP/JSON `POST /v1/check`.
    Http,
}

/// Settings of a remote client; [`RemoteBuilder::build`] makes the
/// [`crate::Client`].
#[derive(Debug, Clone)]
pub struct RemoteBuilder {
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) deadline: Duration,
    pub(crate) policy: FailurePolicy,
    pub(crate) max_batch: usize,
    pub(crate) max_in_flight: usize,
    pub(crate) token: Option<String>,
    pub(crate) config: Option<ClientConfig>,
    pub(crate) cache: Option<CacheConfig>,
}

impl RemoteBuilder {
    /// A client of `drl serve`'s gRPC listener, e.g. `http://127.0.0.1:8081`.
    pub fn grpc(endpoint: impl Into<String>) -> Self {
        Self::new(endpoint.into(), Protocol::Grpc)
    }

    /// A client of `drl serve`'s HTTP listener, e.g. `http://127.0.0.1:8080`.
    pub fn http(endpoint: impl Into<String>) -> Self {
        Self::new(endpoint.into(), Protocol::Http)
    }

    fn new(endpoint: String, protocol: Protocol) -> Self {
        Self {
            endpoint,
            protocol,
            deadline: Duration::from_millis(100),
            policy: FailurePolicy::Allow,
            max_batch: 1000,
            max_in_flight: 2,
            token: None,
            config: None,
            cache: Some(CacheConfig::default()),
        }
    }

    /// The longest a check waits for the service, queueing included
    /// (default 100 ms); then the failure policy answers.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }

    /// What a check the service did not decide in time answers (default
    /// [`FailurePolicy::Allow`], fail open, as Envoy does).
    pub fn on_failure(mut self, p: FailurePolicy) -> Self {
        self.policy = p;
        self
    }

    /// Most checks in one request (default 1,000; at most the server's
    /// `server.max_batch`). 1 sends one request per check.
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// Most requests in flight at once (default 2). Checks arriving while
    /// every slot is busy are sent together in the next free one.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// A bearer token for a server with `auth.tokens_file`.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The server's config file: gives the exact `RateLimit-Policy` header
    /// (quotas and windows) and the quotas `FailurePolicy::Local` scales.
    pub fn config_file(mut self, path: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        self.config = Some(ClientConfig::load(path)?);
        Ok(self)
    }

    /// Like [`RemoteBuilder::config_file`], from a text.
    pub fn config_text(mut self, text: &str, source_name: &str) -> Result<Self, Error> {
        self.config = Some(ClientConfig::parse(text, source_name)?);
        Ok(self)
    }

    /// The denial cache's bounds; `None` turns it off (default on,
    /// 100,000 entries).
    pub fn denial_cache(mut self, c: Option<CacheConfig>) -> Self {
        self.cache = c;
        self
    }

    /// Connects (lazily: the first check opens the connection) and starts
    /// the coalescing task. Must be called within a Tokio runtime.
    pub fn build(self) -> Result<crate::Client, Error> {
        crate::Client::from_remote(self)
    }
}

/// Counters of a remote client.
#[derive(Debug, Default)]
pub(crate) struct RemoteCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) checks_sent: AtomicU64,
}

/// A check waiting for its batch.
struct Pending {
    item: Item,
    tx: oneshot::Sender<Result<Outcome, SendError>>,
}

/// The running remote backend.
pub(crate) struct Remote {
    queue: mpsc::UnboundedSender<Pending>,
    pub(crate) deadline: Duration,
    pub(crate) fallback: Fallback,
    pub(crate) counters: Arc<RemoteCounters>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("deadline", &self.deadline)
            .field("policy", &self.fallback.policy())
            .finish_non_exhaustive()
    }
}

impl Remote {
    pub(crate) fn start(b: &RemoteBuilder) -> Result<Self, Error> {
        let transport: Arc<dyn Transport> = match b.protocol {
            Protocol::Grpc => Arc::new(grpc::Grpc::new(&b.endpoint, b.token.as_deref())?),
            Protocol::Http => Arc::new(http::Http::new(&b.endpoint, b.token.as_deref())?),
        };
        let fallback = Fallback::new(b.policy, b.config.as_ref()).map_err(Error::Setup)?;
        let (queue, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(RemoteCounters::default());
        tokio::spawn(drive(
            rx,
            transport,
            b.max_batch,
            b.max_in_flight,
            b.deadline,
            counters.clone(),
        ));
        Ok(Self {
            queue,
            deadline: b.deadline,
            fallback,
            counters,
        })
    }

    /// Queues one check; the receiver answers when its batch returns.
    pub(crate) fn enqueue(&self, item: Item) -> oneshot::Receiver<Result<Outcome, SendError>> {
        let (tx, rx) = oneshot::channel();
        // The driver lives as long as the sender; a send cannot fail while
        // `self` exists, and a dropped `tx` reads as unavailable anyway.
        let _ = self.queue.send(Pending { item, tx });
        rx
    }
}

/// The coalescing loop: waits for a free request slot, then for the first
/// queued check, takes every check queued behind it (up to `max_batch`)
/// and sends them as one request.
async fn drive(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    transport: Arc<dyn Transport>,
    max_batch: usize,
    max_in_flight: usize,
    deadline: Duration,
    counters: Arc<RemoteCounters>,
) {
    let slots = Arc::new(Semaphore::new(max_in_flight));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = Vec::new();
        while batch.is_empty() {
            let Some(p) = rx.recv().await else { return };
            if !p.tx.is_closed() {
                batch.push(p);
            }
        }
        while batch.len() < max_batch {
            match rx.try_recv() {
                // A caller past its deadline has gone: skip its check.
                Ok(p) if p.tx.is_closed() => {}
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        counters.requests.fetch_add(1, Ordering::Relaxed);
        counters
            .checks_sent
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let transport = transport.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            let _permit = permit;
            send_batch(&*transport, batch, deadline, &counters).await;
        });
    }
}

/// Sends `batch`, answering each check; a refused batch of several checks
/// is retried check by check.
async fn send_batch(
    transport: &dyn Transport,
    batch: Vec<Pending>,
    deadline: Duration,
    counters: &RemoteCounters,
) {
    let items: Vec<Item> = batch.iter().map(|p| p.item.clone()).collect();
    match send_timed(transport, items, deadline).await {
        Ok(ds) => {
            for (p, d) in batch.into_iter().zip(ds) {
                let _ = p.tx.send(Ok(d));
            }
        }
        Err(SendError::Refused { .. }) if batch.len() > 1 => {
            counters
                .requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let each = batch.iter().map(|p| {
                let one = vec![p.item.clone()];
                send_timed(transport, one, deadline)
            });
            let answers = futures::future::join_all(each).await;
            for (p, a) in batch.into_iter().zip(answers) {
                let _ = p.tx.send(a.map(|mut v| v.remove(0)));
            }
        }
        Err(e) => {
            for p in batch {
                let _ = p.tx.send(Err(e.clone()));
            }
        }
    }
}

/// One request, bounded by `deadline`, checked for one answer per check.
async fn send_timed(
    transport: &dyn Transport,
    items: Vec<Item>,
    deadline: Duration,
) -> Result<Vec<Outcome>, SendError> {
    let n = items.len();
    match tokio::time::timeout(deadline, transport.send(items)).await {
        Ok(Ok(ds)) if ds.len() == n => Ok(ds),
        Ok(Ok(ds)) => Err(SendError::Unavailable(format!(
            "the service answered {} decisions for {n} checks",
            ds.len()
        ))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(SendError::Unavailable(format!(
            "no answer within the deadline ({} ms)",
            deadline.as_millis()
        ))),
    }
}
