//! Encrypted, authenticated datagram transport shared by every cluster
//! protocol (gossip, membership, and Orbit's ring messages).
//!
//! [`Transport`] sends and receives *authenticated payloads* on numbered
//! channels ([`channel`]). [`UdpTransport`] is the real thing: every datagram
//! is a [`frame`] (versioned header, payload encrypted with
//! XChaCha20-Poly1305 under a key derived from the cluster key
//! ([`keys`]), the header as associated data, bound to its receiver, with a
//! per-sender instance and sequence number checked by [`replay`]); anything
//! forged, truncated, oversized, misdirected, sealed with an unknown key or
//! replayed is dropped and counted, never handed up. The accepted keys can
//! be replaced while the transport runs ([`Transport::set_keys`]), for key
//! rotation.
//! With the cargo feature `fault-injection` (tests only), `fault::FaultyTransport`
//! wraps any transport with seeded loss, delay and partitions; without it,
//! [`fault`] is an empty stand-in and no config can turn faults on.

#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
#[path = "fault_off.rs"]
pub mod fault;
pub mod frame;
pub mod keys;
pub mod replay;
mod udp;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

pub use frame::{MAX_DATAGRAM, MAX_PAYLOAD, Reject};
pub use keys::{ClusterKey, KeyError, KeyId, KeyRing};
pub use udp::UdpTransport;

/// Channel numbers: which protocol a payload belongs to.
pub mod channel {
    /// SWIM membership (foca).
    pub const MEMBERSHIP: u8 = 1;
    /// Cloud Control demand gossip.
    pub const GOSSIP: u8 = 2;
    /// Reserved for Orbit's ring messages.
    pub const ORBIT: u8 = 3;
}

/// One authenticated payload received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// The socket address it came from.
    pub from: SocketAddr,
    /// The authenticated sender node id.
    pub sender: u32,
    /// The channel.
    pub channel: u8,
    /// The payload (at most [`MAX_PAYLOAD`] bytes).
    pub payload: Vec<u8>,
}

/// A transport failure (I/O; bad packets are not errors, they are dropped).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Socket error.
    #[error("transport I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The payload does not fit one datagram.
    #[error(transparent)]
    TooLarge(#[from] frame::PayloadTooLarge),
    /// The transport was shut down.
    #[error("transport closed")]
    Closed,
}

/// Sends and receives authenticated payloads. Implementations are cheap to
/// share (`Arc`) and safe to use from several tasks.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Sends `payload` on `channel` to `to` (best effort, like UDP).
    async fn send(&self, to: SocketAddr, channel: u8, payload: &[u8])
    -> Result<(), TransportError>;
    /// The next authenticated, fresh payload. Bad datagrams are dropped and
    /// counted inside; this only returns on a good one or an I/O error.
    async fn recv(&self) -> Result<Datagram, TransportError>;
    /// The bound address.
    fn local_addr(&self) -> SocketAddr;
    /// This node's id (the sender id in its frames).
    fn node_id(&self) -> u32;
    /// Counters of the underlying socket.
    fn stats(&self) -> TransportStats;
    /// Replaces the keys frames are sealed with and accepted under (key
    /// rotation); takes effect for the next datagram sent or received.
    fn set_keys(&self, keys: KeyRing);
    /// Tells the transport that node `id` listens at `addr`, so that frames
    /// to `addr` are bound to `id` from the first one on.
    fn learn_peer(&self, addr: SocketAddr, id: u32);
}

/// Plain counters of a transport (also exported as `metrics` counters
/// `drl_cluster_net_datagrams_total{dir, result}` and `drl_cluster_net_bytes_total{dir}`).
#[derive(Debug, Default)]
pub struct Counters {
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    send_errors: AtomicU64,
    accepted: AtomicU64,
    received_bytes: AtomicU64,
    truncated: AtomicU64,
    oversized: AtomicU64,
    bad_version: AtomicU64,
    forged: AtomicU64,
    unknown_key: AtomicU64,
    misdirected: AtomicU64,
    replayed: AtomicU64,
    unknown_sender: AtomicU64,
    injected_drops: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Bytes sent (UDP payload bytes, framing included).
    pub sent_bytes: u64,
    /// Sends that failed.
    pub send_errors: u64,
    /// Datagrams accepted (authenticated, fresh).
    pub accepted: u64,
    /// Bytes received (all datagrams, good or bad).
    pub received_bytes: u64,
    /// Dropped: truncated.
    pub truncated: u64,
    /// Dropped: oversized or bad length field.
    pub oversized: u64,
    /// Dropped: wrong magic or version.
    pub bad_version: u64,
    /// Dropped: tag did not verify.
    pub forged: u64,
    /// Dropped: sealed with a key id this node does not hold.
    pub unknown_key: u64,
    /// Dropped: authentic, but bound to another receiver (a frame captured
    /// on its way to another node and replayed here).
    pub misdirected: u64,
    /// Dropped: sequence number replayed or too old, or an instance of the
    /// sender that was superseded.
    pub replayed: u64,
    /// Dropped: too many distinct senders tracked already.
    pub unknown_sender: u64,
    /// Dropped on purpose by a fault injector.
    pub injected_drops: u64,
}

impl TransportStats {
    /// All datagrams dropped as bad (not counting injected faults).
    pub fn rejected(&self) -> u64 {
        self.truncated
            + self.oversized
            + self.bad_version
            + self.forged
            + self.unknown_key
            + self.misdirected
            + self.replayed
            + self.unknown_sender
    }
}

impl Counters {
    pub(crate) fn on_sent(&self, bytes: usize) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_datagrams_total", "dir" => "out", "result" => "sent")
            .increment(1);
        metrics::counter!("drl_cluster_net_bytes_total", "dir" => "out").increment(bytes as u64);
    }

    pub(crate) fn on_send_error(&self) {
        self.send_errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_datagrams_total", "dir" => "out", "result" => "error")
            .increment(1);
    }

    pub(crate) fn on_received(&self, bytes: usize) {
        self.received_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_bytes_total", "dir" => "in").increment(bytes as u64);
    }

    pub(crate) fn on_accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_datagrams_total", "dir" => "in", "result" => "accepted")
            .increment(1);
    }

    pub(crate) fn on_rejected(&self, why: Reject) {
        let c = match why {
            Reject::Truncated => &self.truncated,
            Reject::Oversized => &self.oversized,
            Reject::BadVersion => &self.bad_version,
            Reject::Forged => &self.forged,
            Reject::UnknownKey => &self.unknown_key,
            Reject::Misdirected => &self.misdirected,
            Reject::Replayed => &self.replayed,
            Reject::TooManySenders => &self.unknown_sender,
        };
        c.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_datagrams_total", "dir" => "in", "result" => why.as_str())
            .increment(1);
    }

    /// A datagram dropped by the fault injector, `dir` `"in"` or `"out"`.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn on_injected_drop(&self, dir: &'static str) {
        self.injected_drops.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("drl_cluster_net_datagrams_total", "dir" => dir, "result" => "injected_drop")
            .increment(1);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> TransportStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStats {
            sent: g(&self.sent),
            sent_bytes: g(&self.sent_bytes),
            send_errors: g(&self.send_errors),
            accepted: g(&self.accepted),
            received_bytes: g(&self.received_bytes),
            truncated: g(&self.truncated),
            oversized: g(&self.oversized),
            bad_version: g(&self.bad_version),
            forged: g(&self.forged),
            unknown_key: g(&self.unknown_key),
            misdirected: g(&self.misdirected),
            replayed: g(&self.replayed),
            unknown_sender: g(&self.unknown_sender),
            injected_drops: g(&self.injected_drops),
        }
    }
}
