//! The store's background tasks: the node's timer, the receiver and the
//! ring's name resolution.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drl_cluster::orbit::NodeId;

use super::Inner;
use crate::transport::TransportError;

/// Ticks the node and sends what it asks, heartbeats included, until the
/// store closes.
pub(super) async fn driver(inner: Arc<Inner>) {
    let hb = Duration::from_millis(inner.cfg.heartbeat_ms);
    let mut next_hb = Instant::now();
    while !inner.closed.load(Ordering::SeqCst) {
        let now = inner.now();
        let (out, next) = inner.tick(now);
        if !out.is_empty() {
            inner.send_all(out).await;
        }
        if Instant::now() >= next_hb {
            inner.heartbeat_round().await;
            next_hb = Instant::now() + hb;
        }
        let to_deadline = Duration::from_nanos(next.saturating_sub(inner.now()));
        let sleep = to_deadline.min(next_hb.saturating_duration_since(Instant::now()));
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = inner.wake.notified() => {}
        }
    }
}

/// Hands every datagram received to the node.
pub(super) async fn receiver(inner: Arc<Inner>) {
    while !inner.closed.load(Ordering::SeqCst) {
        match inner.transport.recv().await {
            Ok(d) => inner.on_datagram(d).await,
            Err(TransportError::Closed) => break,
            Err(e) => {
                tracing::warn!(error = %e, "orbit: receive failed");
                // Back off so a persistent socket error does not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Re-resolves the ring's `dns:` members every `discovery.interval_ms`: a
/// new address is learned (and frames to that member are bound to it); a
/// name with no record takes the member's address away (nothing is sent
/// to it, and the failure detector marks it down); a failed resolution
/// keeps the previous address.
/// Re-resolves the ring members' names while the store is open.
pub(super) async fn resolve_ring(inner: Arc<Inner>) {
    let names: Vec<(NodeId, String, u16)> = inner
        .cfg
        .ring
        .iter()
        .filter(|m| m.id != inner.cfg.node_id)
        .filter_map(|m| m.dns.clone().map(|(n, p)| (m.id, n, p)))
        .collect();
    let cfg = inner.cfg.discovery;
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !inner.closed.load(Ordering::SeqCst) {
        tick.tick().await;
        for (id, name, port) in &names {
            let found = match crate::discovery::resolve(name, *port, &cfg).await {
                Ok(a) => a,
                Err(e) => {
                    metrics::counter!("drl_cluster_net_discovery_errors_total").increment(1);
                    tracing::warn!(member = id, error = %e, "orbit: ring member did not resolve; keeping its address");
                    continue;
                }
            };
            if found.len() > 1 {
                tracing::warn!(member = id, name = %name, records = found.len(), "orbit: a ring member's name has several records; using the first");
            }
            let now = found.first().copied();
            let before = inner.addrs.read().get(id).copied();
            if now == before {
                continue;
            }
            match now {
                Some(a) => {
                    tracing::info!(member = id, addr = %a, "orbit: ring member resolved");
                    inner.transport.learn_peer(a, *id);
                    inner.addrs.write().insert(*id, a);
                }
                None => {
                    tracing::info!(member = id, name = %name, "orbit: ring member's record gone");
                    inner.addrs.write().remove(id);
                }
            }
        }
    }
}
