//! [`GossipStore`]: `scope: gossip` as a `drl_store::Store`.
//!
//! `start` binds the authenticated socket, joins the cluster (foca) and
//! spawns the node loop on the current tokio runtime. The loop is a thin
//! shell around the sans-IO [`Driver`] (drl-cluster's Cloud Control
//! `Node` plus the peer address map), which it owns:
//!
//! * a receive task hands authenticated datagrams to the loop: membership
//!   ones go to foca, gossip ones to [`Driver::on_datagram`];
//! * a timer at the node's `poll_timeout` (tokio `sleep_until`) calls
//!   [`Driver::on_timer`] (the interval step: estimates, aggregation, the
//!   1/N rule, reallocation);
//! * foca's timers and up/down events drive membership, and its events go
//!   to [`Driver::on_membership`];
//! * after every input the loop drains the node's payloads
//!   ([`Driver::drain`]) and sends them.
//!
//! `decide` never waits on the network or on the loop: it calls
//! [`Keys::admit`] on the node's key table, shared through an `Arc`;
//! `charge`, `check`, `reserve` and `refund` likewise call the table's
//! (docs/gossip.md, "Costs known afterwards").

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drl_cluster::alloc::FlowId;
use drl_cluster::cloud_control::{Admission, Hold, KeyLimit, KeyRef, Keys, Node, fnv1a};
use drl_core::{Decision, DenyReason, Mark, Nanos};
use drl_store::{Check, LimitSpec, Store, StoreError};
use foca::Timer;
use parking_lot::Mutex;
use strength_reduce::StrengthReducedU64;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use drl_cluster::cloud_control::KeySnapshot;

use crate::config::{ConfigError, GossipConfig};
use crate::gossip::Driver;
use crate::membership::{Membership, NodeIdent, Output};
use crate::transport::fault::FaultHandle;
#[cfg(feature = "fault-injection")]
use crate::transport::fault::FaultyTransport;
use crate::transport::{
    Datagram, Transport, TransportError, TransportStats, UdpTransport, channel,
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

/// Everything the request path and the node loop share. The node itself
/// is not here: the loop owns it.
#[derive(Debug)]
struct Shared {
    cfg: GossipConfig,
    /// The node's key table (the request path's only way in).
    keys: Arc<Keys>,
    /// `N`, as a divisor (the local bucket depth is `burst / N`).
    nodes: StrengthReducedU64,
    interval: Nanos,
    origin: Instant,
    /// Nodes counted live (this one included), as of the loop's last
    /// input.
    live: AtomicU32,
    members: Mutex<Vec<NodeIdent>>,
    gossip_rejected: AtomicU64,
    /// Peer addresses the `dns:` seeds resolved to last (this node
    /// excluded), sorted.
    discovered: Mutex<Vec<SocketAddr>>,
}

impl Shared {
    fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    fn live(&self) -> u32 {
        self.live.load(Ordering::Relaxed)
    }
}

/// A reserve's answer: the take's decision and, when admitted, the marks.
pub type Reserved = (Decision, Option<Box<[Mark]>>);

/// A quota's rate, units/s (no division for the common 1-second window).
fn quota_rate(limit: u64, window: Nanos) -> u128 {
    if window == 1_000_000_000 {
        limit as u128
    } else {
        (limit as u128 * 1_000_000_000) / window.max(1) as u128
    }
}

/// The global rate (units/s) and local bucket depth of a spec: the
/// tightest quota, as a rate; its burst split over the `nodes`. Runs on
/// every decision, so the usual case (one quota of one second) divides
/// nothing but by the strength-reduced `nodes`.
fn key_limit(spec: &LimitSpec, nodes: &StrengthReducedU64) -> KeyLimit {
    let mut best: Option<(u128, u64)> = None;
    for q in &spec.quotas {
        let rate = quota_rate(q.limit(), q.window());
        if best.is_none_or(|(r, _)| rate < r) {
            best = Some((rate, q.burst()));
        }
    }
    let (rate, burst) = best.unwrap_or((1, 1));
    KeyLimit {
        rate: rate.clamp(1, i64::MAX as u128 / 2) as u64,
        depth: (burst / *nodes).max(1),
    }
}

/// The node's transport: UDP, wrapped in the fault injector in test builds
/// (cargo feature `fault-injection`).
#[cfg(feature = "fault-injection")]
type NodeTransport = FaultyTransport<UdpTransport>;
#[cfg(not(feature = "fault-injection"))]
type NodeTransport = UdpTransport;

/// A running gossip node behind the `Store` trait.
#[derive(Debug)]
pub struct GossipStore {
    shared: Arc<Shared>,
    transport: Arc<NodeTransport>,
    tasks: Vec<JoinHandle<()>>,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

enum Input {
    Datagram(Datagram),
    Timer(Timer<NodeIdent>),
    /// What the `dns:` seeds resolve to now (every name; a name whose
    /// resolution failed keeps its previous answer).
    Resolved(Vec<SocketAddr>),
}

impl GossipStore {
    /// Validates `cfg`, loads the key, binds the socket, joins the cluster
    /// and starts the node loop on the current tokio runtime.
    pub async fn start(cfg: GossipConfig) -> Result<Self, StartError> {
        cfg.validate()?;
        let keys = cfg.load_keys().map_err(ConfigError::from)?;
        let udp = UdpTransport::bind(cfg.bind, cfg.node_id, keys).await?;
        let local = udp.local_addr();
        #[cfg(feature = "fault-injection")]
        let transport = Arc::new(FaultyTransport::new(udp, cfg.faults.clone()));
        #[cfg(not(feature = "fault-injection"))]
        let transport = Arc::new(udp);
        let settings = cfg.settings();
        let seed = cfg.seed.unwrap_or(cfg.node_id as u64);
        let origin = Instant::now();
        let node = Node::new(cfg.node_id, settings.clone(), seed, 0)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let driver = Driver::new(node);
        let shared = Arc::new(Shared {
            keys: driver.keys().clone(),
            nodes: StrengthReducedU64::new(settings.nodes.max(1) as u64),
            interval: settings.interval,
            origin,
            live: AtomicU32::new(1),
            members: Mutex::new(Vec::new()),
            gossip_rejected: AtomicU64::new(0),
            discovered: Mutex::new(Vec::new()),
            cfg,
        });
        metrics::gauge!("drl_cluster_net_live_nodes").set(1.0);
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
        let generation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u16)
            .unwrap_or(0);
        let me = NodeIdent {
            id: shared.cfg.node_id,
            addr: shared.cfg.advertised(local),
            generation,
        };
        let mut tasks = vec![recv_task];
        let dns = shared.cfg.dns_seeds();
        if !dns.is_empty() {
            tasks.push(tokio::spawn(resolve_loop(
                dns,
                shared.cfg.discovery,
                tx.clone(),
            )));
        }
        let membership = Membership::new(me, settings.nodes, &shared.cfg.membership, seed);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let node = NodeLoop {
            shared: shared.clone(),
            transport: transport.clone(),
            membership,
            driver,
            tx,
            out_bytes: Vec::new(),
            out: Vec::new(),
            dns_known: std::collections::BTreeSet::new(),
            dns_gone: std::collections::BTreeSet::new(),
        };
        let loop_task = tokio::spawn(node.run(rx, stop_rx));
        // The node loop stays last: `leave` waits on it.
        tasks.push(loop_task);
        Ok(Self {
            shared,
            transport,
            tasks,
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

    /// Gossip payloads that authenticated but were refused (did not
    /// decode, or came from a node with another algorithm or aggregation).
    pub fn gossip_rejected(&self) -> u64 {
        self.shared.gossip_rejected.load(Ordering::Relaxed)
    }

    /// Replaces the cluster keys at run time (key rotation): frames are sent
    /// with `keys`' send key and accepted under any of its keys from the
    /// next datagram on. A reload calls it with
    /// [`GossipConfig::load_keys`] of the new config.
    pub fn set_keys(&self, keys: crate::transport::KeyRing) {
        self.transport.set_keys(keys);
    }

    /// Controls the fault injector (partitions, loss) at run time (without
    /// the cargo feature `fault-injection`, a handle with nothing to
    /// control).
    pub fn faults(&self) -> FaultHandle {
        #[cfg(feature = "fault-injection")]
        return self.transport.handle();
        #[cfg(not(feature = "fault-injection"))]
        FaultHandle::default()
    }

    /// Nodes counted live (this one included): up in membership and heard
    /// from since (see `drl_cluster::cloud_control::Node`).
    pub fn live_nodes(&self) -> u32 {
        self.shared.live()
    }

    /// The peers membership reports active.
    pub fn members(&self) -> Vec<NodeIdent> {
        self.shared.members.lock().clone()
    }

    /// The peer addresses the `dns:` seeds resolved to last (this node
    /// excluded), sorted; empty without `dns:` seeds.
    pub fn discovered(&self) -> Vec<SocketAddr> {
        self.shared.discovered.lock().clone()
    }

    /// The state of limit `limit`'s aggregate `aggregate`, if active.
    pub fn snapshot(&self, limit: &str, aggregate: &str) -> Option<KeySnapshot> {
        self.shared.keys.snapshot(KeyRef { limit, aggregate })
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

    /// The key `check` names (its aggregate), its flow, and the limit the
    /// key is held to.
    fn locate<'a>(&self, check: &Check<'a>) -> (KeyRef<'a>, FlowId, KeyLimit) {
        let (aggregate, flow) = self.split(check.key);
        let key = KeyRef {
            limit: check.spec.name.as_str(),
            aggregate,
        };
        (key, flow, key_limit(check.spec, &self.shared.nodes))
    }

    /// Decides synchronously (what `decide` does, without an await point).
    pub fn decide_now(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.apply(check, false)
    }

    /// Charges synchronously (what `charge` does): the cost counts as
    /// demand and is consumed whatever the state; a query right after.
    pub fn charge_now(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.apply(check, true)
    }

    fn apply(&self, check: Check<'_>, charge: bool) -> Result<Decision, StoreError> {
        let (key, flow, limit_of_key) = self.locate(&check);
        let sh = &*self.shared;
        let a = if charge {
            sh.keys
                .charge(sh.now(), key, limit_of_key, check.cost, flow)
        } else {
            sh.keys.admit(sh.now(), key, limit_of_key, check.cost, flow)
        }
        .map_err(|e| StoreError::Backend(format!("gossip: {e}")))?;
        Ok(self.answer(check.spec, a))
    }

    /// Checks synchronously (what `check` does): what a take of the cost
    /// would surely get now, changing nothing (under random drop, admitted
    /// only while the drop probability is 0).
    pub fn check_now(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let (key, _, limit_of_key) = self.locate(&check);
        let sh = &*self.shared;
        let a = sh.keys.check(sh.now(), key, limit_of_key, check.cost);
        Ok(self.answer(check.spec, a))
    }

    /// Reserves synchronously (what `reserve` does): a take whose units
    /// count as demand; when admitted, the [`Hold`] that bounds its
    /// refund, as [`Hold::WORDS`] marks.
    pub fn reserve_now(&self, check: Check<'_>) -> Result<Reserved, StoreError> {
        let (key, flow, limit_of_key) = self.locate(&check);
        let sh = &*self.shared;
        let (a, hold) = sh
            .keys
            .reserve(sh.now(), key, limit_of_key, check.cost, flow)
            .map_err(|e| StoreError::Backend(format!("gossip: {e}")))?;
        let marks = hold.map(|h| h.to_words().map(Mark).into());
        Ok((self.answer(check.spec, a), marks))
    }

    /// Refunds synchronously (what `refund` does): gives back up to the
    /// cost into the token bucket that admitted the reservation, no more
    /// than it still holds back; nothing under random drop. A query right
    /// after, and the units given back.
    pub fn refund_now(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        let words: Vec<u64> = marks.iter().map(|m| m.0).collect();
        let hold = Hold::from_words(&words).ok_or_else(|| {
            StoreError::Invalid(format!(
                "gossip: {} marks are not a reservation of limit {:?}",
                marks.len(),
                check.spec.name
            ))
        })?;
        let (key, _, limit_of_key) = self.locate(&check);
        let sh = &*self.shared;
        let (a, back) = sh
            .keys
            .refund(sh.now(), key, limit_of_key, &hold, check.cost);
        Ok((self.answer(check.spec, a), back))
    }

    /// The answer of an admission under `spec`.
    fn answer(&self, spec: &LimitSpec, a: Admission) -> Decision {
        let limit = spec.quotas.first().map_or(0, |q| q.limit());
        let interval = self.shared.interval;
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

    /// Charges as Cloud Control can: the cost counts as demand everywhere
    /// and the local allocator consumes it (into debt for the token-bucket
    /// family: FPS, GTB, CTB). docs/gossip.md, "Costs known afterwards",
    /// states the bound.
    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.charge_now(check)
    }

    fn settles(&self) -> bool {
        true
    }

    /// What a take would surely get now, changing nothing.
    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.check_now(check)
    }

    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        self.reserve_now(check)
    }

    /// Reports the units actually given back (0 under random drop).
    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        self.refund_now(check, marks)
    }

    fn retain(&self, specs: &[LimitSpec]) {
        self.shared
            .keys
            .retain_limits(|name| specs.iter().any(|s| s.name == name));
    }
}

/// The node loop: owns membership and the [`Driver`]; the only place
/// either is touched.
struct NodeLoop {
    shared: Arc<Shared>,
    transport: Arc<NodeTransport>,
    membership: Membership,
    driver: Driver,
    tx: mpsc::Sender<Input>,
    /// The payloads of one drain, back to back, and where each goes.
    out_bytes: Vec<u8>,
    out: Vec<(SocketAddr, Range<usize>)>,
    /// Addresses the `dns:` seeds resolved to last.
    dns_known: std::collections::BTreeSet<SocketAddr>,
    /// Addresses whose record disappeared: forgotten by membership, their
    /// datagrams ignored until the record is back.
    dns_gone: std::collections::BTreeSet<SocketAddr>,
}

/// Resolves the `dns:` seeds every `cfg.interval_ms` and hands the union
/// of the answers to the node loop. A name that fails to resolve keeps its
/// previous answer (a DNS outage never empties the cluster).
async fn resolve_loop(
    names: Vec<(String, u16)>,
    cfg: crate::discovery::DiscoveryConfig,
    tx: mpsc::Sender<Input>,
) {
    let mut last: Vec<Vec<SocketAddr>> = vec![Vec::new(); names.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (i, (name, port)) in names.iter().enumerate() {
            match crate::discovery::resolve(name, *port, &cfg).await {
                Ok(addrs) => last[i] = addrs,
                Err(e) => {
                    metrics::counter!("drl_cluster_net_discovery_errors_total").increment(1);
                    tracing::warn!(name = %name, error = %e, "dns seed did not resolve; keeping its previous answer");
                }
            }
        }
        let mut all: Vec<SocketAddr> = last.iter().flatten().copied().collect();
        all.sort();
        all.dedup();
        if tx.send(Input::Resolved(all)).await.is_err() {
            return;
        }
    }
}

impl NodeLoop {
    /// The tokio instant of node time `t`.
    fn instant(&self, t: Nanos) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.shared.origin + Duration::from_nanos(t))
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Input>,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let seeds = self.shared.cfg.peers();
        let out = self.membership.join(&seeds);
        self.apply(out).await;
        loop {
            let deadline = self.driver.poll_timeout().map(|t| self.instant(t));
            let timer = async move {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut stop => {
                    let out = self.membership.leave();
                    self.apply(out).await;
                    return;
                }
                _ = timer => {
                    let now = self.shared.now();
                    self.driver.on_timer(now);
                }
                Some(input) = rx.recv() => match input {
                    Input::Resolved(addrs) => self.on_resolved(addrs).await,
                    Input::Datagram(d) => self.on_datagram(d).await,
                    Input::Timer(t) => {
                        let out = self.membership.handle_timer(t);
                        self.apply(out).await;
                    }
                },
            }
            self.flush().await;
        }
    }

    /// A new answer of the `dns:` seeds: announce to the new addresses,
    /// forget the members at addresses that are gone.
    async fn on_resolved(&mut self, addrs: Vec<SocketAddr>) {
        let me = self.membership.me().addr;
        let now: std::collections::BTreeSet<SocketAddr> =
            addrs.into_iter().filter(|a| *a != me).collect();
        let added: Vec<SocketAddr> = now.difference(&self.dns_known).copied().collect();
        let removed: Vec<SocketAddr> = self.dns_known.difference(&now).copied().collect();
        for a in &removed {
            tracing::info!(addr = %a, "dns record gone: peer forgotten");
            self.dns_gone.insert(*a);
            let out = self.membership.forget(*a);
            self.apply(out).await;
        }
        for a in &added {
            self.dns_gone.remove(a);
        }
        if !added.is_empty() {
            tracing::info!(peers = ?added, "dns seeds: new peers");
            let out = self.membership.join(&added);
            self.apply(out).await;
        }
        metrics::gauge!("drl_cluster_net_discovered_peers").set(now.len() as f64);
        *self.shared.discovered.lock() = now.iter().copied().collect();
        self.dns_known = now;
    }

    async fn on_datagram(&mut self, d: Datagram) {
        if self.dns_gone.contains(&d.from) {
            return;
        }
        match d.channel {
            channel::MEMBERSHIP => {
                let out = self.membership.handle_data(&d.payload);
                self.apply(out).await;
            }
            channel::GOSSIP => {
                let now = self.shared.now();
                if let Err(e) = self.driver.on_datagram(now, d.sender, &d.payload) {
                    tracing::debug!(peer = d.sender, error = %e, "gossip payload refused");
                    self.shared.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("drl_cluster_net_gossip_rejected_total").increment(1);
                }
            }
            _ => {}
        }
    }

    /// Sends what the node queued and publishes the live count.
    async fn flush(&mut self) {
        let now = self.shared.now();
        self.out_bytes.clear();
        self.out.clear();
        let (bytes, out) = (&mut self.out_bytes, &mut self.out);
        self.driver.drain(now, |to, payload| {
            let start = bytes.len();
            bytes.extend_from_slice(payload);
            out.push((to, start..bytes.len()));
        });
        for (to, range) in &self.out {
            let _ = self
                .transport
                .send(*to, channel::GOSSIP, &self.out_bytes[range.clone()])
                .await;
        }
        let live = self.driver.live(now);
        if self.shared.live.swap(live, Ordering::Relaxed) != live {
            metrics::gauge!("drl_cluster_net_live_nodes").set(live as f64);
        }
    }

    async fn apply(&mut self, out: Output) {
        let mut queue = vec![out];
        while let Some(out) = queue.pop() {
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
            if out.events.is_empty() {
                continue;
            }
            let now = self.shared.now();
            for e in out.events {
                match e {
                    crate::membership::Event::Up(id) if id.id != self.shared.cfg.node_id => {
                        tracing::info!(peer = id.id, addr = %id.addr, "peer up");
                        if self.dns_gone.contains(&id.addr) {
                            // Heard of through a third node while its
                            // record is gone: forget it again.
                            queue.push(self.membership.forget(id.addr));
                        }
                    }
                    crate::membership::Event::Down(id) if id.id != self.shared.cfg.node_id => {
                        tracing::info!(peer = id.id, addr = %id.addr, "peer down");
                    }
                    _ => {}
                }
                self.driver.on_membership(now, e);
            }
            *self.shared.members.lock() = self.membership.members();
        }
    }
}
