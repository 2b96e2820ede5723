//! [`FaultyTransport`]: a transport wrapper that loses, delays and
//! partitions datagrams, for tests (compiled only with the cargo feature
//! `fault-injection`; shipped builds have `fault_off.rs` instead). Off by default ([`FaultConfig::default`]
//! injects nothing); the random stream is seeded, so a given seed drops the
//! same sequence of sends.
//!
//! The faults can be changed while the transport runs, through its
//! [`FaultHandle`]: one setting at a time ([`FaultHandle::isolate`],
//! [`FaultHandle::block`], ...) or a whole new [`FaultConfig`] at once
//! ([`FaultHandle::apply`], what `drl serve` does when a reload changes
//! `cluster.faults`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use super::{Counters, Datagram, KeyRing, Transport, TransportError, TransportStats};

/// Faults to inject (all off by default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Probability that an outgoing datagram is silently dropped, `[0, 1]`.
    pub drop_rate: f64,
    /// Fixed delay added to every outgoing datagram, milliseconds.
    pub delay_ms: u64,
    /// Extra uniformly random delay `[0, jitter_ms]`, milliseconds
    /// (reorders datagrams).
    pub jitter_ms: u64,
    /// Seed of the fault random stream.
    pub seed: u64,
    /// Cut all traffic of this node, both directions: a full partition.
    pub isolate: bool,
    /// Cut traffic with these peer addresses, both directions at this node
    /// (a partition by peer).
    pub block: Vec<SocketAddr>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop_rate: 0.0,
            delay_ms: 0,
            jitter_ms: 0,
            seed: 1,
            isolate: false,
            block: Vec::new(),
        }
    }
}

impl FaultConfig {
    /// True if this injects nothing.
    pub fn is_off(&self) -> bool {
        self.drop_rate <= 0.0
            && self.delay_ms == 0
            && self.jitter_ms == 0
            && !self.isolate
            && self.block.is_empty()
    }

    /// The drop rate clamped to `[0, 1]` (a non-finite rate injects no loss).
    fn clamped_drop_rate(&self) -> f64 {
        if self.drop_rate.is_finite() {
            self.drop_rate.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// The loss and delay settings in force (partitions live in [`State`]).
#[derive(Debug, Clone, Copy)]
struct Rates {
    drop_rate: f64,
    delay_ms: u64,
    jitter_ms: u64,
    seed: u64,
}

#[derive(Debug)]
struct State {
    cfg: Rates,
    rng: ChaCha8Rng,
    blocked: BTreeSet<SocketAddr>,
    isolated: bool,
}

impl State {
    fn new(cfg: &FaultConfig) -> Self {
        Self {
            cfg: Rates {
                drop_rate: cfg.clamped_drop_rate(),
                delay_ms: cfg.delay_ms,
                jitter_ms: cfg.jitter_ms,
                seed: cfg.seed,
            },
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            blocked: cfg.block.iter().copied().collect(),
            isolated: cfg.isolate,
        }
    }
}

/// Controls a [`FaultyTransport`] while it runs (cheap to clone).
#[derive(Debug, Clone)]
pub struct FaultHandle {
    state: Arc<Mutex<State>>,
}

impl FaultHandle {
    /// Cuts traffic to and from `peer` (both directions at this node).
    pub fn block(&self, peer: SocketAddr) {
        self.state.lock().blocked.insert(peer);
    }

    /// Restores traffic with `peer`.
    pub fn unblock(&self, peer: SocketAddr) {
        self.state.lock().blocked.remove(&peer);
    }

    /// Cuts (or restores) all traffic of this node: a full partition.
    pub fn isolate(&self, on: bool) {
        self.state.lock().isolated = on;
    }

    /// Changes the drop rate.
    pub fn set_drop_rate(&self, p: f64) {
        self.state.lock().cfg.drop_rate = p.clamp(0.0, 1.0);
    }

    /// Replaces every setting with `cfg`: loss, delay, jitter, isolation
    /// and the blocked peers (peers blocked before and not in `cfg.block`
    /// are unblocked). The random stream is reseeded only if `cfg.seed`
    /// changed, so re-applying the same config changes nothing.
    pub fn apply(&self, cfg: &FaultConfig) {
        let mut s = self.state.lock();
        let reseed = s.cfg.seed != cfg.seed;
        let rng = std::mem::replace(&mut s.rng, ChaCha8Rng::seed_from_u64(0));
        *s = State::new(cfg);
        if !reseed {
            s.rng = rng;
        }
    }

    /// True if this node is cut off from everyone.
    pub fn is_isolated(&self) -> bool {
        self.state.lock().isolated
    }

    fn cut(&self, peer: &SocketAddr) -> bool {
        let s = self.state.lock();
        s.isolated || s.blocked.contains(peer)
    }
}

/// Wraps a transport with seeded loss, delay and partitions.
#[derive(Debug)]
pub struct FaultyTransport<T> {
    inner: Arc<T>,
    handle: FaultHandle,
    counters: Counters,
}

impl<T: Transport> FaultyTransport<T> {
    /// Wraps `inner` with the faults of `cfg`.
    pub fn new(inner: T, cfg: FaultConfig) -> Self {
        Self {
            inner: Arc::new(inner),
            handle: FaultHandle {
                state: Arc::new(Mutex::new(State::new(&cfg))),
            },
            counters: Counters::default(),
        }
    }

    /// The control handle.
    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

#[async_trait]
impl<T: Transport> Transport for FaultyTransport<T> {
    async fn send(
        &self,
        to: SocketAddr,
        channel: u8,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        let delay = {
            let mut s = self.handle.state.lock();
            if s.isolated || s.blocked.contains(&to) {
                drop(s);
                self.counters.on_injected_drop("out");
                return Ok(());
            }
            let p = s.cfg.drop_rate;
            if p > 0.0 && s.rng.random::<f64>() < p {
                drop(s);
                self.counters.on_injected_drop("out");
                return Ok(());
            }
            let jitter_ms = s.cfg.jitter_ms;
            let jitter = if jitter_ms > 0 {
                s.rng.random_range(0..=jitter_ms)
            } else {
                0
            };
            s.cfg.delay_ms + jitter
        };
        if delay == 0 {
            return self.inner.send(to, channel, payload).await;
        }
        let inner = self.inner.clone();
        let payload = payload.to_vec();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let _ = inner.send(to, channel, &payload).await;
        });
        Ok(())
    }

    async fn recv(&self) -> Result<Datagram, TransportError> {
        loop {
            let d = self.inner.recv().await?;
            if self.handle.cut(&d.from) {
                self.counters.on_injected_drop("in");
                continue;
            }
            return Ok(d);
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn node_id(&self) -> u32 {
        self.inner.node_id()
    }

    fn stats(&self) -> TransportStats {
        let mut s = self.inner.stats();
        s.injected_drops += self.counters.snapshot().injected_drops;
        s
    }

    fn set_keys(&self, keys: KeyRing) {
        self.inner.set_keys(keys);
    }

    fn learn_peer(&self, addr: SocketAddr, id: u32) {
        self.inner.learn_peer(addr, id);
    }
}
