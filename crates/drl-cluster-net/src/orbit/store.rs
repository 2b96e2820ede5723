//! [`OrbitStore`]: the runtime that drives one `OrbitNode` per Orbit limit.

mod apply;
mod costs;
mod tasks;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drl_cluster::orbit::{DenyReason as OrbitDeny, NodeId, OrbitNode, OrbitStats, Outgoing, codec};
use drl_core::{Clock, Decision, Mark, Nanos, SystemClock};
use drl_store::{Check, LimitSpec, Store, StoreError};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::config::OrbitConfig;
use super::error::OrbitError;
use super::ring_id::limit_id;
use super::wire::{self, Payload, Reassembler};
use crate::transport::fault::FaultHandle;
#[cfg(feature = "fault-injection")]
use crate::transport::fault::FaultyTransport;
use crate::transport::{Datagram, Transport, TransportStats, UdpTransport, channel};

/// One decision with the window it was charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrbitDecision {
    /// The decision as the `Store` trait reports it.
    pub decision: Decision,
    /// Index of the window (`now / window`, `now` in ns since the Unix
    /// epoch) the admission was charged to.
    pub window: u64,
    /// The protocol's reason for a denial.
    pub reason: Option<OrbitDeny>,
}

/// What a charge did at this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrbitCharge {
    /// A query right after (denied while the key is in debt here), and the
    /// window the charge was counted in.
    pub decision: OrbitDecision,
    /// Taken from what this node held for the key.
    pub consumed: u64,
    /// Recorded as the key's debt at this node.
    pub debt: u64,
}

/// One key's window at this node ([`OrbitStore::key_window`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyWindow {
    /// The window index (`now / window`) the node is in.
    pub window: u64,
    /// The global cap per window.
    pub cap: u64,
    /// What this node admitted for the key in that window.
    pub admitted_here: u64,
    /// What it could still admit without a message: its holding plus, if
    /// it holds the table, the table's free capacity.
    pub capacity_here: u64,
}

/// Counters of the runtime (beyond the transport's and each node's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// The transport's counters (authentication, replay, injected drops).
    pub transport: TransportStats,
    /// Table messages sent (each may be several datagrams).
    pub tables_sent: u64,
    /// Encoded size of the largest table sent, bytes.
    pub largest_table_sent: u64,
    /// Table messages received whole and decoded.
    pub tables_received: u64,
    /// Payloads or tables that did not decode, or came from outside the ring.
    pub malformed: u64,
    /// Tables for a limit this node does not serve.
    pub unknown_limit: u64,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Ring members the failure detector currently believes down.
    pub down: Vec<NodeId>,
    /// Restarts of peers seen (a larger incarnation).
    pub restarts_seen: u64,
}

#[derive(Debug, Default)]
struct Counters {
    tables_sent: AtomicU64,
    largest_table_sent: AtomicU64,
    tables_received: AtomicU64,
    malformed: AtomicU64,
    unknown_limit: AtomicU64,
    heartbeats: AtomicU64,
    restarts_seen: AtomicU64,
}

struct Limit {
    node: OrbitNode,
    notify: Arc<Notify>,
    max_wait: Nanos,
    window_len: Nanos,
    cap: u64,
    seen_window: u64,
}

#[derive(Debug)]
struct Peer {
    last_heard: Instant,
    incarnation: Option<u64>,
    down: bool,
}

struct State {
    limits: BTreeMap<u64, Limit>,
    names: BTreeMap<String, u64>,
    peers: BTreeMap<NodeId, Peer>,
    reassembler: Reassembler,
}

struct Inner {
    cfg: OrbitConfig,
    ring: Vec<NodeId>,
    /// Where each ring member is reached (a `dns:` member only once
    /// resolved, and not while its name has no record).
    addrs: parking_lot::RwLock<BTreeMap<NodeId, SocketAddr>>,
    transport: Arc<dyn Transport>,
    incarnation: u64,
    last_now: AtomicU64,
    state: Mutex<State>,
    wake: Notify,
    msg_seq: AtomicU32,
    closed: AtomicBool,
    counters: Counters,
}

/// A [`Store`] for `scope: orbit` limits: strict global caps on a ring.
///
/// Every node of the ring runs one `OrbitStore` with the same ring; each
/// Orbit limit (a `fixed-window` limit with one quota `cap/window`) gets its
/// own `OrbitNode`, and its tables travel on the transport's Orbit channel.
/// Decisions use the store's own clock (system time, ns since the Unix
/// epoch, never going backwards), not `Check::now`, so that all nodes agree
/// on window boundaries up to clock skew.
pub struct OrbitStore {
    inner: Arc<Inner>,
    fault: Option<FaultHandle>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for OrbitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrbitStore")
            .field("node_id", &self.inner.cfg.node_id)
            .field("local_addr", &self.inner.transport.local_addr())
            .finish()
    }
}

impl OrbitStore {
    /// Binds the UDP socket of `config.bind`, authenticated with the
    /// configured key (wrapped in the fault injector if `config.fault` is
    /// set), and starts the runtime's tasks. Must be called within a tokio
    /// runtime.
    pub async fn start(config: OrbitConfig) -> Result<Self, OrbitError> {
        config.validate()?;
        let keys = config.key.load_ring()?;
        let udp = UdpTransport::bind(config.bind, config.node_id, keys).await?;
        #[cfg(feature = "fault-injection")]
        if let Some(f) = config.fault.clone() {
            let t = FaultyTransport::new(udp, f);
            let h = t.handle();
            return Self::with_transport(config, Arc::new(t), Some(h));
        }
        Self::with_transport(config, Arc::new(udp), None)
    }

    /// Starts the runtime on an existing transport, which it then owns: it
    /// is the only reader of `transport.recv()`. `fault` is returned by
    /// [`Self::fault`].
    pub fn with_transport(
        config: OrbitConfig,
        transport: Arc<dyn Transport>,
        fault: Option<FaultHandle>,
    ) -> Result<Self, OrbitError> {
        config.validate()?;
        if transport.node_id() != config.node_id {
            return Err(OrbitError::Config(format!(
                "transport speaks as node {}, orbit.node_id is {}",
                transport.node_id(),
                config.node_id
            )));
        }
        // Frames to ring members are bound to their ids from the first one.
        for m in config.ring.iter().filter(|m| m.dns.is_none()) {
            transport.learn_peer(m.addr, m.id);
        }
        let now_i = Instant::now();
        let incarnation = SystemClock.now();
        let peers = config
            .ring
            .iter()
            .filter(|m| m.id != config.node_id)
            .map(|m| {
                (
                    m.id,
                    Peer {
                        last_heard: now_i,
                        incarnation: None,
                        down: false,
                    },
                )
            })
            .collect();
        let inner = Arc::new(Inner {
            ring: config.ring_ids(),
            addrs: parking_lot::RwLock::new(
                config
                    .ring
                    .iter()
                    .filter(|m| m.dns.is_none())
                    .map(|m| (m.id, m.addr))
                    .collect(),
            ),
            state: Mutex::new(State {
                limits: BTreeMap::new(),
                names: BTreeMap::new(),
                peers,
                reassembler: Reassembler::new(config.max_message_bytes),
            }),
            cfg: config,
            transport,
            incarnation,
            last_now: AtomicU64::new(incarnation),
            wake: Notify::new(),
            msg_seq: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let mut tasks = vec![
            tokio::spawn(tasks::driver(inner.clone())),
            tokio::spawn(tasks::receiver(inner.clone())),
        ];
        if inner.cfg.ring.iter().any(|m| m.dns.is_some()) {
            tasks.push(tokio::spawn(tasks::resolve_ring(inner.clone())));
        }
        Ok(Self {
            inner,
            fault,
            tasks: Mutex::new(tasks),
        })
    }

    /// Where each ring member is reached now (`dns:` members once
    /// resolved).
    pub fn ring_addrs(&self) -> BTreeMap<NodeId, SocketAddr> {
        self.inner.addrs.read().clone()
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.inner.cfg.node_id
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.transport.local_addr()
    }

    /// The fault injector's handle, if `config.fault` was set.
    pub fn fault(&self) -> Option<&FaultHandle> {
        self.fault.as_ref()
    }

    /// Replaces the cluster keys at run time (key rotation): frames are sent
    /// with `keys`' send key and accepted under any of its keys from the
    /// next datagram on. A reload calls it with
    /// [`crate::orbit::KeySource::load_ring`] of the new `orbit.key`.
    pub fn set_keys(&self, keys: crate::transport::KeyRing) {
        self.inner.transport.set_keys(keys);
    }

    /// The configuration.
    pub fn config(&self) -> &OrbitConfig {
        &self.inner.cfg
    }

    /// Starts serving `spec` (idempotent). Call it for every `scope: orbit`
    /// limit when the configuration is loaded: a limit's node takes part
    /// only from the window after the one it was registered in (the
    /// restart rule), so registering lazily at the first request costs that
    /// limit the rest of a window. A spec with the same name but another
    /// definition replaces the old one (fresh state).
    pub fn register(&self, spec: &LimitSpec) -> Result<(), OrbitError> {
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        self.inner.register_locked(&mut st, spec, now)?;
        drop(st);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Decides `cost` for `key` under `spec` now, without waiting: the
    /// decision and the window it was charged to. Registers `spec` if
    /// needed (see [`Self::register`]).
    pub fn admit(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<OrbitDecision, StoreError> {
        self.admit_inner(spec, key, cost).map(|(d, _, _)| d)
    }

    fn admit_inner(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<(OrbitDecision, Arc<Notify>, Nanos), StoreError> {
        self.apply(spec, key, |n, now| (n.admit(now, key.as_bytes(), cost), ()))
            .map(|(d, (), notify, wait)| (d, notify, wait))
    }

    /// Decides like [`Store::decide`], also reporting the window charged.
    /// If the node has used up its share and its local allowance and the
    /// limit has a bounded wait, waits (at most `max_wait`) for a table to
    /// bring capacity, retrying whenever one arrives or the window changes.
    pub async fn decide_charged(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
    ) -> Result<OrbitDecision, StoreError> {
        self.waiting(spec, key, |n, now| (n.admit(now, key.as_bytes(), cost), ()))
            .await
            .map(|(d, ())| d)
    }

    /// This node's view of `key` of limit `name` in the current window (for
    /// status pages), if the limit is served here.
    pub fn key_window(&self, name: &str, key: &str) -> Option<KeyWindow> {
        let st = self.inner.state.lock();
        let l = st.limits.get(st.names.get(name)?)?;
        let window = l.node.current_window();
        Some(KeyWindow {
            window,
            cap: l.cap,
            admitted_here: l.node.admitted(key.as_bytes()),
            capacity_here: l.node.live_capacity(key.as_bytes(), window),
        })
    }

    /// The protocol counters of limit `name`, if served.
    pub fn limit_stats(&self, name: &str) -> Option<OrbitStats> {
        let st = self.inner.state.lock();
        let id = st.names.get(name)?;
        st.limits.get(id).map(|l| l.node.stats())
    }

    /// The runtime's counters.
    pub fn stats(&self) -> RuntimeStats {
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let down = self
            .inner
            .state
            .lock()
            .peers
            .iter()
            .filter(|(_, p)| p.down)
            .map(|(id, _)| *id)
            .collect();
        RuntimeStats {
            transport: self.inner.transport.stats(),
            tables_sent: g(&c.tables_sent),
            largest_table_sent: g(&c.largest_table_sent),
            tables_received: g(&c.tables_received),
            malformed: g(&c.malformed),
            unknown_limit: g(&c.unknown_limit),
            heartbeats: g(&c.heartbeats),
            down,
            restarts_seen: g(&c.restarts_seen),
        }
    }

    /// Stops the runtime and waits until its tasks are gone, so that the
    /// socket is closed when the store is dropped (a new runtime can then
    /// bind the same address). Decisions after this still answer from the
    /// node's state, but nothing is sent or received any more.
    pub async fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for OrbitStore {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        for t in self.tasks.lock().iter() {
            t.abort();
        }
    }
}

#[async_trait]
impl Store for OrbitStore {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.decide_charged(check.spec, check.key, check.cost)
            .await
            .map(|d| d.decision)
    }

    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.charge_at(check.spec, check.key, check.cost)
            .map(|c| c.decision.decision)
    }

    fn settles(&self) -> bool {
        true
    }

    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.check_at(check.spec, check.key, check.cost)
            .await
            .map(|d| d.decision)
    }

    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        let (d, mark) = self.reserve_at(check.spec, check.key, check.cost).await?;
        Ok((d.decision, mark.map(|w| vec![Mark(w)].into_boxed_slice())))
    }

    /// Gives back what the node credits (`refund_at`), and reports it.
    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        let [Mark(w)] = marks else {
            return Err(StoreError::Invalid(format!(
                "orbit: {} marks for the one quota of limit {:?}",
                marks.len(),
                check.spec.name
            )));
        };
        self.refund_at(check.spec, check.key, check.cost, *w)
            .map(|(d, credited)| (d.decision, credited))
    }

    fn retain(&self, specs: &[LimitSpec]) {
        let keep: BTreeMap<&str, u64> = specs
            .iter()
            .map(|s| (s.name.as_str(), limit_id(s)))
            .collect();
        let mut st = self.inner.state.lock();
        let State { limits, names, .. } = &mut *st;
        names.retain(|name, id| keep.get(name.as_str()) == Some(id));
        limits.retain(|id, _| names.values().any(|v| v == id));
    }
}

impl Inner {
    /// System time in ns since the Unix epoch, never going backwards.
    fn now(&self) -> Nanos {
        let t = SystemClock.now();
        self.last_now.fetch_max(t, Ordering::SeqCst).max(t)
    }

    fn register_locked(
        &self,
        st: &mut State,
        spec: &LimitSpec,
        now: Nanos,
    ) -> Result<(), OrbitError> {
        let id = limit_id(spec);
        if st.names.get(&spec.name) == Some(&id) {
            return Ok(());
        }
        let pc = self.cfg.protocol_for(spec)?;
        let (cap, window_len) = (pc.cap, pc.window);
        let mut node = OrbitNode::new(pc, self.cfg.node_id, self.ring.clone(), now)
            .map_err(|e| OrbitError::Limit(format!("limit {:?}: {e}", spec.name)))?;
        let w = node.window_of(now);
        for (&p, peer) in &st.peers {
            if peer.down {
                node.on_peer_down(p);
            } else if peer.incarnation.is_some_and(|i| node.window_of(i) == w) {
                node.on_peer_restarted(p);
            }
        }
        if let Some(old) = st.names.insert(spec.name.clone(), id) {
            st.limits.remove(&old);
        }
        st.limits.insert(
            id,
            Limit {
                node,
                notify: Arc::new(Notify::new()),
                max_wait: self.cfg.max_wait(&spec.name),
                window_len,
                cap,
                seen_window: w,
            },
        );
        Ok(())
    }

    /// Ticks every node; returns what to send and the earliest deadline.
    fn tick(&self, now: Nanos) -> (Vec<(u64, Outgoing)>, Nanos) {
        let mut st = self.state.lock();
        let mut out = Vec::new();
        let mut next = Nanos::MAX;
        for (&id, l) in st.limits.iter_mut() {
            out.extend(l.node.on_tick(now).into_iter().map(|o| (id, o)));
            if l.node.current_window() != l.seen_window {
                l.seen_window = l.node.current_window();
                l.notify.notify_waiters();
            }
            next = next.min(l.node.next_deadline());
        }
        (out, next)
    }

    async fn send_all(&self, out: Vec<(u64, Outgoing)>) {
        for (limit, o) in out {
            let Some(addr) = self.addrs.read().get(&o.to).copied() else {
                continue;
            };
            let bytes = match codec::encode(&o.msg) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "orbit: table not encodable, dropped");
                    continue;
                }
            };
            if bytes.len() > self.cfg.max_message_bytes {
                tracing::warn!(
                    bytes = bytes.len(),
                    "orbit: table larger than max_message_bytes, dropped"
                );
                continue;
            }
            let seq = self.msg_seq.fetch_add(1, Ordering::Relaxed);
            let Some(frags) = wire::fragments(self.incarnation, limit, seq, &bytes) else {
                continue;
            };
            for f in frags {
                if let Err(e) = self.transport.send(addr, channel::ORBIT, &f).await {
                    tracing::debug!(error = %e, to = o.to, "orbit: send failed");
                }
            }
            self.counters.tables_sent.fetch_add(1, Ordering::Relaxed);
            self.counters
                .largest_table_sent
                .fetch_max(bytes.len() as u64, Ordering::Relaxed);
            metrics::counter!("drl_orbit_tables_total", "dir" => "out").increment(1);
        }
    }

    /// Heartbeats every peer and marks silent ones down.
    async fn heartbeat_round(&self) {
        let hb = wire::heartbeat(self.incarnation);
        let targets: Vec<SocketAddr> = self
            .addrs
            .read()
            .iter()
            .filter(|(id, _)| **id != self.cfg.node_id)
            .map(|(_, a)| *a)
            .collect();
        for addr in targets {
            let _ = self.transport.send(addr, channel::ORBIT, &hb).await;
        }
        let suspect = Duration::from_millis(self.cfg.suspect_after_ms);
        let mut st = self.state.lock();
        let State { limits, peers, .. } = &mut *st;
        for (&p, peer) in peers.iter_mut() {
            if !peer.down && peer.last_heard.elapsed() > suspect {
                peer.down = true;
                tracing::info!(peer = p, "orbit: peer suspected down");
                for l in limits.values_mut() {
                    l.node.on_peer_down(p);
                }
            }
        }
    }

    async fn on_datagram(&self, d: Datagram) {
        let out = self.handle(d);
        if !out.is_empty() {
            self.send_all(out).await;
        }
    }

    /// Processes one datagram (failure detector, reassembly, the node);
    /// returns what to send.
    fn handle(&self, d: Datagram) -> Vec<(u64, Outgoing)> {
        let none = Vec::new;
        if d.channel != channel::ORBIT {
            return none();
        }
        let bad = || {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            Vec::new()
        };
        // A member whose DNS record is gone is not heard either: the
        // failure detector must see it down, the virtual ring skip it.
        if d.sender == self.cfg.node_id || !self.addrs.read().contains_key(&d.sender) {
            return bad();
        }
        let Some(p) = wire::decode(&d.payload) else {
            return bad();
        };
        let now = self.now();
        let mut st = self.state.lock();
        let State {
            limits,
            peers,
            reassembler,
            ..
        } = &mut *st;
        let Some(peer) = peers.get_mut(&d.sender) else {
            return bad();
        };
        peer.last_heard = Instant::now();
        let mut restarted = false;
        if let Payload::Heartbeat { incarnation } = p {
            self.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
            match peer.incarnation {
                Some(known) if incarnation < known => return none(), // an old run
                Some(known) if incarnation > known => restarted = true,
                Some(_) => {}
                None => {
                    // First contact: a peer that started in the current
                    // window sits it out (restart rule); skip it.
                    restarted = limits
                        .values()
                        .any(|l| l.node.window_of(incarnation) == l.node.window_of(now));
                }
            }
            if restarted && peer.incarnation.is_some() {
                self.counters.restarts_seen.fetch_add(1, Ordering::Relaxed);
            }
            peer.incarnation = Some(incarnation);
        }
        let was_down = std::mem::replace(&mut peer.down, false);
        for l in limits.values_mut() {
            if restarted {
                if l.node.window_of(peer.incarnation.unwrap_or(0)) == l.node.window_of(now) {
                    l.node.on_peer_restarted(d.sender);
                } else {
                    l.node.on_peer_up(d.sender);
                }
            } else if was_down {
                l.node.on_peer_up(d.sender);
            }
        }
        let Payload::Fragment { .. } = p else {
            return none();
        };
        let Some((limit, bytes)) = reassembler.push(d.sender, &p, Instant::now()) else {
            return none();
        };
        let msg = match codec::decode(&bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, from = d.sender, "orbit: table did not decode");
                return bad();
            }
        };
        self.counters
            .tables_received
            .fetch_add(1, Ordering::Relaxed);
        metrics::counter!("drl_orbit_tables_total", "dir" => "in").increment(1);
        let Some(l) = limits.get_mut(&limit) else {
            self.counters.unknown_limit.fetch_add(1, Ordering::Relaxed);
            return none();
        };
        let out: Vec<_> = l
            .node
            .on_message(now, d.sender, msg)
            .into_iter()
            .map(|o| (limit, o))
            .collect();
        l.notify.notify_waiters();
        // The node's deadline may have moved (it now holds a table).
        self.wake.notify_one();
        out
    }
}
