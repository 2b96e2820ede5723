//! The relay's counters (written by the packet loop, read by /metrics)
//! and their Prometheus text rendering.

use drl_http::prometheus::{Exposition, Kind};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limiter::Snapshots;
use crate::nfqueue::{KernelQueueStats, QueueStats};

/// Per-class counters.
#[derive(Debug, Default)]
pub struct ClassStats {
    /// Packets forwarded.
    pub allowed_packets: AtomicU64,
    /// Bytes forwarded.
    pub allowed_bytes: AtomicU64,
    /// Packets dropped by the limit.
    pub dropped_packets: AtomicU64,
    /// Bytes dropped by the limit.
    pub dropped_bytes: AtomicU64,
}

/// Everything /metrics shows.
#[derive(Debug)]
pub struct Stats {
    /// Class names, in config order.
    pub names: Vec<String>,
    /// Configured limits, bytes/s, in config order.
    pub limits: Vec<u64>,
    /// Per class.
    pub classes: Vec<ClassStats>,
    /// Packets no class matched (accepted).
    pub unclassified: AtomicU64,
    /// Packets that did not parse (accepted).
    pub unparsed: AtomicU64,
    /// Packets held in the delay line now.
    pub held: AtomicU64,
    /// Netlink counters (copied from the loop).
    pub received: AtomicU64,
    /// Verdicts sent.
    pub verdicts: AtomicU64,
    /// Verdict datagrams sent.
    pub verdict_batches: AtomicU64,
    /// Receive buffer overflows seen.
    pub overruns: AtomicU64,
    /// Malformed netlink messages.
    pub malformed: AtomicU64,
    /// The NFQUEUE number.
    pub queue: u16,
}

impl Stats {
    /// Counters for `names` (limits `limits`) on queue `queue`.
    pub fn new(queue: u16, names: Vec<String>, limits: Vec<u64>) -> Self {
        Self {
            classes: names.iter().map(|_| ClassStats::default()).collect(),
            names,
            limits,
            unclassified: AtomicU64::new(0),
            unparsed: AtomicU64::new(0),
            held: AtomicU64::new(0),
            received: AtomicU64::new(0),
            verdicts: AtomicU64::new(0),
            verdict_batches: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            queue,
        }
    }

    /// Counts one decided packet.
    pub fn count(&self, class: usize, bytes: u64, allowed: bool) {
        let c = &self.classes[class];
        let (p, b) = if allowed {
            (&c.allowed_packets, &c.allowed_bytes)
        } else {
            (&c.dropped_packets, &c.dropped_bytes)
        };
        p.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Copies the netlink counters.
    pub fn set_queue(&self, q: QueueStats, held: usize) {
        self.received.store(q.received, Ordering::Relaxed);
        self.verdicts.store(q.verdicts, Ordering::Relaxed);
        self.verdict_batches
            .store(q.verdict_batches, Ordering::Relaxed);
        self.overruns.store(q.overruns, Ordering::Relaxed);
        self.malformed.store(q.malformed, Ordering::Relaxed);
        self.held.store(held as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of everything.
    pub fn render(&self, snaps: &Snapshots, kernel: Option<KernelQueueStats>) -> String {
        let mut o = Exposition::new();
        self.render_classes(&mut o);
        self.render_estimates(&mut o, snaps);
        self.render_queue(&mut o, kernel);
        render_gossip(&mut o, snaps);
        o.finish()
    }

    /// Per class: packets and bytes by verdict, and the configured limit.
    fn render_classes(&self, o: &mut Exposition) {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let families = [
            (
                "drl_relay_packets_total",
                "Packets decided, by class and verdict.",
            ),
            (
                "drl_relay_bytes_total",
                "IP bytes decided, by class and verdict.",
            ),
        ];
        for (i, (name, help)) in families.into_iter().enumerate() {
            o.family(name, Kind::Counter, help);
            for (n, c) in self.names.iter().zip(&self.classes) {
                let (allowed, dropped) = if i == 0 {
                    (&c.allowed_packets, &c.dropped_packets)
                } else {
                    (&c.allowed_bytes, &c.dropped_bytes)
                };
                o.sample(name, &[("class", n), ("verdict", "allowed")], ld(allowed));
                o.sample(name, &[("class", n), ("verdict", "dropped")], ld(dropped));
            }
        }
        let name = "drl_relay_limit_bytes_per_second";
        o.family(
            name,
            Kind::Gauge,
            "Configured limit of each class (global for scope: gossip).",
        );
        for (n, l) in self.names.iter().zip(&self.limits) {
            o.sample(name, &[("class", n)], *l);
        }
    }

    /// Per class: the limit in force and the estimates behind it.
    fn render_estimates(&self, o: &mut Exposition, snaps: &Snapshots) {
        let per_class = [
            (
                "drl_relay_effective_limit_bytes_per_second",
                "The limit in force after the 1/N rule.",
            ),
            (
                "drl_relay_local_rate_bytes_per_second",
                "Smoothed local arrival (ingress) rate.",
            ),
            (
                "drl_relay_remote_estimate",
                "Sum of the other relays' published values (rates, FPS weights).",
            ),
            (
                "drl_relay_local_limit_bytes_per_second",
                "This relay's share (FPS, GTB, CTB).",
            ),
            ("drl_relay_drop_probability", "GRD's drop probability."),
        ];
        for (i, (name, help)) in per_class.iter().enumerate() {
            o.family(name, Kind::Gauge, help);
            for n in &self.names {
                let Some(s) = snaps.snapshot(n) else { continue };
                let v = match i {
                    0 => Some(s.effective_limit as f64),
                    1 => Some(s.local_rate),
                    2 => Some(s.remote),
                    3 => s.local_limit,
                    _ => s.drop_probability,
                };
                if let Some(v) = v {
                    o.sample(name, &[("class", n)], v);
                }
            }
        }
    }

    /// The relay's own counters and the kernel queue's.
    fn render_queue(&self, o: &mut Exposition, kernel: Option<KernelQueueStats>) {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let simple: [(&str, Kind, &str, u64); 8] = [
            (
                "drl_relay_unclassified_packets_total",
                Kind::Counter,
                "Packets no class matched (accepted).",
                ld(&self.unclassified),
            ),
            (
                "drl_relay_unparsed_packets_total",
                Kind::Counter,
                "Packets that did not parse as IPv4/IPv6 (accepted).",
                ld(&self.unparsed),
            ),
            (
                "drl_relay_held_packets",
                Kind::Gauge,
                "Packets held in the delay line.",
                ld(&self.held),
            ),
            (
                "drl_relay_queue_received_total",
                Kind::Counter,
                "Packets received from NFQUEUE.",
                ld(&self.received),
            ),
            (
                "drl_relay_queue_verdicts_total",
                Kind::Counter,
                "Verdicts sent.",
                ld(&self.verdicts),
            ),
            (
                "drl_relay_queue_verdict_batches_total",
                Kind::Counter,
                "Datagrams that carried verdicts.",
                ld(&self.verdict_batches),
            ),
            (
                "drl_relay_queue_overruns_total",
                Kind::Counter,
                "Times the relay's netlink receive buffer overflowed (ENOBUFS).",
                ld(&self.overruns),
            ),
            (
                "drl_relay_queue_malformed_total",
                Kind::Counter,
                "Netlink messages that did not parse.",
                ld(&self.malformed),
            ),
        ];
        for (name, kind, help, v) in simple {
            o.family(name, kind, help);
            o.sample(name, &[], v);
        }
        let k = kernel.unwrap_or_default();
        let kernel_rows = [
            (
                "drl_relay_queue_kernel_dropped_total",
                Kind::Counter,
                "Packets the kernel dropped because the queue was full (not counted with accept_when_full).",
                k.queue_dropped,
            ),
            (
                "drl_relay_queue_kernel_user_dropped_total",
                Kind::Counter,
                "Packets the kernel could not hand to the relay (socket buffer full).",
                k.user_dropped,
            ),
            (
                "drl_relay_queue_kernel_waiting",
                Kind::Gauge,
                "Packets in the kernel queue waiting for a verdict.",
                k.waiting,
            ),
            (
                "drl_relay_queue_kernel_queued_total",
                Kind::Counter,
                "Packets the kernel queued (its id sequence).",
                k.id_sequence,
            ),
        ];
        let queue = self.queue.to_string();
        for (name, kind, help, v) in kernel_rows {
            o.family(name, kind, help);
            o.sample(name, &[("queue", &queue)], v);
        }
    }
}

/// Live relays, and the gossip transport's traffic when clustered.
fn render_gossip(o: &mut Exposition, snaps: &Snapshots) {
    let live = "drl_relay_live_nodes";
    o.family(live, Kind::Gauge, "Relays counted live, this one included.");
    o.sample(live, &[], u64::from(snaps.live_nodes()));
    if let Some(store) = snaps.store() {
        let t = store.transport_stats();
        let rows = [
            ("drl_relay_gossip_datagrams_sent_total", t.sent),
            ("drl_relay_gossip_bytes_sent_total", t.sent_bytes),
            ("drl_relay_gossip_send_errors_total", t.send_errors),
            ("drl_relay_gossip_datagrams_received_total", t.accepted),
            ("drl_relay_gossip_bytes_received_total", t.received_bytes),
            ("drl_relay_gossip_rejected_total", store.gossip_rejected()),
        ];
        for (name, v) in rows {
            o.family(
                name,
                Kind::Counter,
                "Gossip and membership traffic (drl-cluster-net transport).",
            );
            o.sample(name, &[], v);
        }
        let refused = "drl_relay_gossip_refused_datagrams_total";
        o.family(
            refused,
            Kind::Counter,
            "Datagrams the transport refused, by reason.",
        );
        for (reason, v) in [
            ("truncated", t.truncated),
            ("oversized", t.oversized),
            ("bad_version", t.bad_version),
            ("forged", t.forged),
            ("unknown_key", t.unknown_key),
            ("misdirected", t.misdirected),
            ("replayed", t.replayed),
            ("unknown_sender", t.unknown_sender),
        ] {
            o.sample(refused, &[("reason", reason)], v);
        }
    }
}
