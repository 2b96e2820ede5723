//! [`FaultyTransport`]: a transport wrapper that loses, delays and
//! partitions datagrams, for tests. Off by default ([`FaultConfig::default`]
//! injects nothing); the random stream is seeded, so a given seed drops the
//! same sequence of sends.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use super::{Counters, Datagram, Transport, TransportError, TransportStats};

/// Faults to inject (all off by default).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
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
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop_rate: 0.0,
            delay_ms: 0,
            jitter_ms: 0,
            seed: 1,
        }
    }
}

impl FaultConfig {
    /// True if this injects nothing.
    pub fn is_off(&self) -> bool {
        self.drop_rate <= 0.0 && self.delay_ms == 0 && self.jitter_ms == 0
    }
}

#[derive(Debug)]
struct State {
    cfg: FaultConfig,
    rng: ChaCha8Rng,
    blocked: BTreeSet<SocketAddr>,
    isolated: bool,
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
        let cfg = FaultConfig {
            drop_rate: if cfg.drop_rate.is_finite() {
                cfg.drop_rate.clamp(0.0, 1.0)
            } else {
                0.0
            },
            ..cfg
        };
        Self {
            inner: Arc::new(inner),
            handle: FaultHandle {
                state: Arc::new(Mutex::new(State {
                    rng: ChaCha8Rng::seed_from_u64(cfg.seed),
                    cfg,
                    blocked: BTreeSet::new(),
                    isolated: false,
                })),
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
                self.counters.on_injected_drop();
                return Ok(());
            }
            let p = s.cfg.drop_rate;
            if p > 0.0 && s.rng.random::<f64>() < p {
                drop(s);
                self.counters.on_injected_drop();
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
                self.counters.on_injected_drop();
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
}
