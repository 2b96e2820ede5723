//! [`GossipStore`]: `scope: gossip` as a `drl_store::Store`.
//!
//! `start` binds the authenticated socket, joins the cluster (foca) and
//! spawns the node loop on the current tokio runtime:
//!
//! * a receive task hands authenticated datagrams to the loop;
//! * every estimate interval the loop closes every active key's estimate,
//!   reallocates (GRD/FPS, with the 1/N rule for lost peers), and sends the
//!   published values, batched and prefix-compressed, to `branching` random
//!   live peers;
//! * membership datagrams and timers drive foca; its up/down events update
//!   the peer table.
//!
//! `decide` never waits on the network: it locks the key's state, asks the
//! allocator, and returns.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drl_cluster::alloc::{AlgorithmKind, FlowId};
use drl_core::{Decision, DenyReason, Nanos};
use drl_store::{Check, LimitSpec, Store, StoreError};
use foca::Timer;
use parking_lot::{Mutex, RwLock};
use rand::SeedableRng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, GossipConfig};
use crate::gossip::state::{KeyParams, KeySnapshot, KeyState, Peers};
use crate::gossip::wire::{self, Entry};
use crate::membership::{Event, Membership, NodeIdent, Output};
use crate::transport::fault::{FaultHandle, FaultyTransport};
use crate::transport::{
    Datagram, MAX_PAYLOAD, Transport, TransportError, TransportStats, UdpTransport, channel,
};

/// The node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Bad configuration (or key).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The socket could not be bound.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// The wire code of an allocator (receivers ignore other algorithms).
fn algorithm_code(k: AlgorithmKind) -> u8 {
    AlgorithmKind::ALL
        .iter()
        .position(|a| *a == k)
        .map_or(0, |i| i as u8 + 1)
}

/// Stable 64-bit FNV-1a hash (flow ids must not depend on process seeds).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One active key: its names, its gossip key (built once), its state.
#[derive(Debug)]
struct KeyEntry {
    gossip_key: Vec<u8>,
    limit: String,
    aggregate: String,
    state: KeyState,
}

/// Active keys: limit name -> aggregate -> state. Two levels so that the
/// request path looks a key up by `&str` without building a string.
#[derive(Debug, Default)]
struct KeyTable {
    by_limit: FastMap<String, FastMap<String, Arc<KeyEntry>>>,
    len: usize,
}

impl KeyTable {
    fn get(&self, limit: &str, aggregate: &str) -> Option<&Arc<KeyEntry>> {
        self.by_limit.get(limit)?.get(aggregate)
    }

    fn insert(&mut self, e: Arc<KeyEntry>) {
        let m = self.by_limit.entry(e.limit.clone()).or_default();
        if m.insert(e.aggregate.clone(), e).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, limit: &str, aggregate: &str) {
        if let Some(m) = self.by_limit.get_mut(limit) {
            if m.remove(aggregate).is_some() {
                self.len -= 1;
            }
            if m.is_empty() {
                self.by_limit.remove(limit);
            }
        }
    }

    /// Every key (reference-counted: no copying under the lock).
    fn all(&self) -> Vec<Arc<KeyEntry>> {
        self.by_limit
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }
}

/// Everything the request path and the node loop share.
#[derive(Debug)]
struct Shared {
    cfg: GossipConfig,
    params: KeyParams,
    nodes: u32,
    stale: Nanos,
    idle: Nanos,
    origin: Instant,
    keys: RwLock<KeyTable>,
    peers: Mutex<Peers>,
    /// Nodes counted live (this one included), updated by membership
    /// events: read by the request path without the peers lock.
    live: AtomicU32,
    members: Mutex<Vec<NodeIdent>>,
    gossip_rejected: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }
}

/// The per-limit rate (units/s) and local bucket depth of a spec: the
/// tightest quota, as a rate; its burst split over the `nodes`.
fn spec_rate(spec: &LimitSpec, nodes: u32) -> (u64, u64) {
    let mut best: Option<(u128, u64)> = None;
    for q in &spec.quotas {
        let rate = (q.limit() as u128 * 1_000_000_000) / q.window().max(1) as u128;
        if best.is_none_or(|(r, _)| rate < r) {
            best = Some((rate, q.burst()));
        }
    }
    let (rate, burst) = best.unwrap_or((1, 1));
    let rate = rate.clamp(1, i64::MAX as u128 / 2) as u64;
    (rate, (burst / nodes.max(1) as u64).max(1))
}

/// A running gossip node behind the `Store` trait.
#[derive(Debug)]
pub struct GossipStore {
    shared: Arc<Shared>,
    transport: Arc<FaultyTransport<UdpTransport>>,
    tasks: Vec<JoinHandle<()>>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

enum Input {
    Datagram(Datagram),
    Timer(Timer<NodeIdent>),
}

impl GossipStore {
    /// Validates `cfg`, loads the key, binds the socket, joins the cluster
    /// and starts the node loop on the current tokio runtime.
    pub async fn start(cfg: GossipConfig) -> Result<Self, StartError> {
        cfg.validate()?;
        let key = cfg.load_key().map_err(ConfigError::from)?;
        let udp = UdpTransport::bind(cfg.bind, cfg.node_id, key).await?;
        let local = udp.local_addr();
        let transport = Arc::new(FaultyTransport::new(udp, cfg.faults.clone()));
        let interval = cfg.estimate_interval_ms * 1_000_000;
        let shared = Arc::new(Shared {
            params: KeyParams {
                algorithm: cfg.algorithm,
                interval,
                ewma: cfg.ewma,
            },
            nodes: cfg.cluster_size(),
            stale: cfg.stale_after() * 1_000_000,
            idle: cfg.idle_expiry_ms * 1_000_000,
            origin: Instant::now(),
            keys: RwLock::new(KeyTable::default()),
            peers: Mutex::new(Peers::new(cfg.max_keys)),
            live: AtomicU32::new(1),
            members: Mutex::new(Vec::new()),
            gossip_rejected: Default::default(),
            cfg,
        });
        let (tx, rx) = mpsc::channel::<Input>(4_096);
        let recv_task = {
            let t = transport.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    match t.recv().await {
                        Ok(d) => {
                            if tx.send(Input::Datagram(d)).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "gossip receive failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            })
        };
        let seed = shared.cfg.seed.unwrap_or(shared.cfg.node_id as u64);
        let generation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u16)
            .unwrap_or(0);
        let me = NodeIdent {
            id: shared.cfg.node_id,
            addr: local,
            generation,
        };
        let membership = Membership::new(me, shared.nodes, &shared.cfg.membership, seed);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let node = NodeLoop {
            shared: shared.clone(),
            transport: transport.clone(),
            membership,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
            tx,
        };
        let loop_task = tokio::spawn(node.run(rx, stop_rx));
        Ok(Self {
            shared,
            transport,
            tasks: vec![recv_task, loop_task],
            stop: Mutex::new(Some(stop_tx)),
        })
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.transport.local_addr()
    }

    /// Transport counters (datagrams, bytes, drops by reason).
    pub fn transport_stats(&self) -> TransportStats {
        self.transport.stats()
    }

    /// Gossip payloads that authenticated but did not decode (or carried
    /// another algorithm).
    pub fn gossip_rejected(&self) -> u64 {
        self.shared
            .gossip_rejected
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Controls the fault injector (partitions, loss) at run time.
    pub fn faults(&self) -> FaultHandle {
        self.transport.handle()
    }

    /// Nodes counted live (this one included).
    pub fn live_nodes(&self) -> u32 {
        self.shared.live()
    }

    /// The peers membership reports active.
    pub fn members(&self) -> Vec<NodeIdent> {
        self.shared.members.lock().clone()
    }

    /// The state of limit `limit`'s aggregate `aggregate`, if active.
    pub fn snapshot(&self, limit: &str, aggregate: &str) -> Option<KeySnapshot> {
        let e = self.shared.keys.read().get(limit, aggregate)?.clone();
        Some(e.state.snapshot())
    }

    /// Stops the node abruptly, as a crash would: no leave message.
    pub fn kill(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Leaves the cluster gracefully (foca's leave: the peers see this
    /// node down at once instead of after failure detection) and stops the
    /// node's tasks. Waits at most 2 s for the leave to be sent. After this,
    /// keys no longer tick: call it when the service stops deciding
    /// (`drl serve` does, at the end of its drain). Calling it again does
    /// nothing.
    pub async fn leave(&self) {
        let Some(stop) = self.stop.lock().take() else {
            return;
        };
        let _ = stop.send(());
        if let Some(node_loop) = self.tasks.last() {
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while !node_loop.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
        }
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Leaves the cluster gracefully and stops ([`GossipStore::leave`]).
    pub async fn shutdown(self) {
        self.leave().await;
    }

    /// Splits a limit key into (aggregate, flow).
    fn split<'a>(&self, key: &'a str) -> (&'a str, FlowId) {
        match &self.shared.cfg.flow_separator {
            Some(sep) => match key.rfind(sep.as_str()) {
                Some(i) => (&key[..i], fnv1a(&key.as_bytes()[i + sep.len()..])),
                None => (key, 0),
            },
            None => (key, 0),
        }
    }

    /// Decides synchronously (what `decide` does, without an await point).
    pub fn decide_now(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let (aggregate, flow) = self.split(check.key);
        let name = check.spec.name.as_str();
        {
            let keys = self.shared.keys.read();
            if let Some(e) = keys.get(name, aggregate) {
                return Ok(self.decide_key(&e.state, check, flow));
            }
        }
        let mut keys = self.shared.keys.write();
        if keys.get(name, aggregate).is_none() {
            if keys.len >= self.shared.cfg.max_keys {
                return Err(StoreError::Backend(format!(
                    "gossip: more than {} active keys",
                    self.shared.cfg.max_keys
                )));
            }
            let (rate, depth) = spec_rate(check.spec, self.shared.nodes);
            let live = self.shared.live();
            let seed = fnv1a(&gossip_key(name, aggregate)) ^ self.shared.cfg.node_id as u64;
            let st = KeyState::new(
                self.shared.params,
                rate,
                depth,
                live,
                self.shared.nodes,
                seed,
                self.shared.now(),
            );
            keys.insert(Arc::new(KeyEntry {
                gossip_key: gossip_key(name, aggregate),
                limit: name.to_string(),
                aggregate: aggregate.to_string(),
                state: st,
            }));
        }
        match keys.get(name, aggregate) {
            Some(e) => Ok(self.decide_key(&e.state, check, flow)),
            None => Err(StoreError::Backend("gossip: key table".into())),
        }
    }

    fn decide_key(&self, s: &KeyState, check: Check<'_>, flow: FlowId) -> Decision {
        let now = self.shared.now();
        let limit = check.spec.quotas.first().map_or(0, |q| q.limit());
        let interval = self.shared.params.interval;
        let a = s.decide(now, flow, check.cost);
        if a.allowed {
            Decision {
                allowed: true,
                remaining: a.headroom,
                limit,
                retry_after: Some(0),
                reset_after: interval,
                delay: 0,
                reason: None,
            }
        } else {
            Decision {
                allowed: false,
                remaining: 0,
                limit,
                retry_after: Some(interval),
                reset_after: interval,
                delay: 0,
                reason: Some(DenyReason::OverLimit),
            }
        }
    }
}

/// The gossip key of (limit name, aggregate).
pub fn gossip_key(limit: &str, aggregate: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(limit.len() + 1 + aggregate.len());
    k.extend_from_slice(limit.as_bytes());
    k.push(0);
    k.extend_from_slice(aggregate.as_bytes());
    if k.len() > wire::MAX_KEY_LEN {
        // Long keys travel as limit name + hash of the aggregate.
        let h = fnv1a(aggregate.as_bytes());
        k.truncate(limit.len().min(wire::MAX_KEY_LEN - 18));
        k.push(0);
        k.push(b'#');
        k.extend_from_slice(format!("{h:016x}").as_bytes());
    }
    k
}

impl Drop for GossipStore {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[async_trait]
impl Store for GossipStore {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.decide_now(check)
    }

    fn retain(&self, specs: &[LimitSpec]) {
        let mut keys = self.shared.keys.write();
        let gone: Vec<String> = keys
            .by_limit
            .keys()
            .filter(|n| !specs.iter().any(|s| s.name == **n))
            .cloned()
            .collect();
        for n in gone {
            if let Some(m) = keys.by_limit.remove(&n) {
                keys.len -= m.len();
            }
        }
    }
}

struct NodeLoop {
    shared: Arc<Shared>,
    transport: Arc<FaultyTransport<UdpTransport>>,
    membership: Membership,
    rng: ChaCha8Rng,
    tx: mpsc::Sender<Input>,
}

impl NodeLoop {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Input>,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let seeds = self.shared.cfg.peers();
        let out = self.membership.join(&seeds);
        self.apply(out).await;
        let mut tick = tokio::time::interval(Duration::from_nanos(self.shared.params.interval));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut stop => {
                    let out = self.membership.leave();
                    self.apply(out).await;
                    return;
                }
                _ = tick.tick() => self.on_tick().await,
                Some(input) = rx.recv() => match input {
                    Input::Datagram(d) => self.on_datagram(d).await,
                    Input::Timer(t) => {
                        let out = self.membership.handle_timer(t);
                        self.apply(out).await;
                    }
                },
            }
        }
    }

    async fn on_datagram(&mut self, d: Datagram) {
        match d.channel {
            channel::MEMBERSHIP => {
                let out = self.membership.handle_data(&d.payload);
                self.apply(out).await;
            }
            channel::GOSSIP => match wire::decode(&d.payload) {
                Ok((alg, entries)) if alg == algorithm_code(self.shared.params.algorithm) => {
                    let now = self.shared.now();
                    self.shared.peers.lock().record(d.sender, now, entries);
                }
                _ => {
                    self.shared
                        .gossip_rejected
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    metrics::counter!("drl_node_gossip_rejected_total").increment(1);
                }
            },
            _ => {}
        }
    }

    async fn apply(&mut self, out: Output) {
        for (to, data) in out.send {
            let _ = self.transport.send(to, channel::MEMBERSHIP, &data).await;
        }
        for (after, t) in out.timers {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = tx.send(Input::Timer(t)).await;
            });
        }
        if !out.events.is_empty() {
            let mut peers = self.shared.peers.lock();
            for e in out.events {
                match e {
                    Event::Up(id) if id.id != self.shared.cfg.node_id => {
                        tracing::info!(peer = id.id, addr = %id.addr, "peer up");
                        peers.up(id.id, id.addr);
                    }
                    Event::Down(id) if id.id != self.shared.cfg.node_id => {
                        tracing::info!(peer = id.id, addr = %id.addr, "peer down");
                        peers.down(id.id);
                    }
                    _ => {}
                }
            }
            self.shared
                .live
                .store(1 + peers.live_count(), Ordering::Relaxed);
            drop(peers);
            *self.shared.members.lock() = self.membership.members();
            metrics::gauge!("drl_node_live_nodes").set(self.shared.live() as f64);
        }
    }

    async fn on_tick(&mut self) {
        let now = self.shared.now();
        let sh = &self.shared;
        let mut keys = sh.keys.read().all();
        keys.sort_unstable_by(|a, b| a.gossip_key.cmp(&b.gossip_key));
        // One pass over the peer table for every key (the request path
        // never takes this lock).
        let (live, targets, remotes) = {
            let mut peers = sh.peers.lock();
            peers.expire(now, sh.stale);
            let remotes: Vec<f64> = keys
                .iter()
                .map(|e| peers.remote(&e.gossip_key, now, sh.stale))
                .collect();
            (1 + peers.live_count(), peers.live(), remotes)
        };
        let mut entries = Vec::new();
        let mut idle = Vec::new();
        for (e, remote) in keys.iter().zip(remotes) {
            if let Some(v) = e.state.tick(now, remote, live, sh.nodes) {
                entries.push(Entry {
                    key: e.gossip_key.clone(),
                    value: v as f32,
                });
            } else if e.state.is_idle(now, sh.idle) {
                idle.push((e.limit.clone(), e.aggregate.clone()));
            }
        }
        if !idle.is_empty() {
            let mut keys = sh.keys.write();
            for (l, a) in idle {
                keys.remove(&l, &a);
            }
        }
        if entries.is_empty() {
            return;
        }
        let batches =
            wire::encode_batches(algorithm_code(sh.params.algorithm), &entries, MAX_PAYLOAD);
        let mut to: Vec<SocketAddr> = if targets.is_empty() {
            sh.cfg.peers()
        } else {
            let b = (sh.cfg.branching as usize).min(targets.len());
            targets
                .choose_multiple(&mut self.rng, b)
                .map(|(_, a)| *a)
                .collect()
        };
        to.sort();
        for addr in to {
            for b in &batches {
                let _ = self.transport.send(addr, channel::GOSSIP, b).await;
            }
        }
    }
}
