//! The status page's once-a-second sample of the engine ([`spawn_sampler`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::history::LATENCY_EVERY;
use super::topkeys::GENERATION_S;
use super::{SeenMember, StatusHub};
use crate::engine::Engine;

impl StatusHub {
    /// One sample, a second after the previous: per-limit counts, each
    /// limit's top-keys sampling from its decisions per second since the
    /// previous sample, latency snapshots every [`LATENCY_EVERY`] s, a new
    /// top-keys generation every [`GENERATION_S`] s, gossip members.
    pub fn tick(&self, engine: &Engine) {
        if !self.enabled() {
            return;
        }
        let limits = engine.limits();
        let mut st = self.state();
        st.ticks += 1;
        let ticks = st.ticks;
        let now = Instant::now();
        // Seconds since the previous sample (a delayed tick must not
        // read as a higher rate).
        let secs = st
            .last_tick
            .replace(now)
            .map_or(1.0, |t| now.duration_since(t).as_secs_f64().max(0.001));
        let all: Vec<_> = limits
            .limits
            .iter()
            .chain(limits.envoy_limits.iter())
            .collect();
        // The limits the last sample saw are held (so that a reload's new
        // limits cannot take their address): a reload prunes the series of
        // removed limits, and a reload or a limit's first decision re-reads
        // which limits ever decided. Otherwise nothing here touches the
        // configured limits: 10,000 idle ones cost nothing a second.
        let uses = crate::metrics::first_uses();
        let (reloaded, new_use) = match &st.active_for {
            Some((held, u)) => (
                !std::ptr::addr_eq(Arc::as_ptr(held), Arc::as_ptr(&*limits)),
                *u != uses,
            ),
            None => (true, true),
        };
        if reloaded {
            let names: std::collections::HashSet<&str> = all.iter().map(|l| &*l.name).collect();
            st.series.retain(|name, _| names.contains(name.as_str()));
        }
        if reloaded || new_use {
            let held: Arc<dyn std::any::Any + Send + Sync> =
                Arc::<crate::limits::Limits>::clone(&*limits);
            st.active_for = Some((held, uses));
            st.active = (0..all.len()).filter(|&i| all[i].metrics.used()).collect();
        }
        let active = std::mem::take(&mut st.active);
        for &i in &active {
            let l = all[i];
            let (a, d, _) = l.metrics.totals();
            let s = st.series.entry(l.name.to_string()).or_default();
            let decided = s.sample((a, d));
            if let (Some(n), Some(t)) = (decided, l.metrics.status().and_then(|s| s.top_keys())) {
                t.set_rate((n as f64 / secs) as u64);
            }
            if let Some(ls) = l.metrics.status()
                && (ticks - 1) % LATENCY_EVERY == 0
            {
                s.snapshot_latency(ls.latency_snapshot());
            }
        }
        if ticks % GENERATION_S == 0 {
            for &i in &active {
                if let Some(t) = all[i].metrics.status().and_then(|s| s.top_keys()) {
                    t.rotate();
                }
            }
        }
        st.active = active;
        if let Some((_, store)) = engine.stores().gossip() {
            let up = store.members();
            for m in st.members.values_mut() {
                m.up = false;
            }
            for m in up {
                st.members.insert(
                    m.id,
                    SeenMember {
                        addr: m.addr,
                        up: true,
                    },
                );
            }
        }
    }
}

/// Samples `engine`'s status once a second while the runtime runs.
pub fn spawn_sampler(engine: Arc<Engine>) {
    tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            engine.status.tick(&engine);
        }
    });
}
