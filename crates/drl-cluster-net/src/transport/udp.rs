//! [`UdpTransport`]: encrypted, authenticated frames over one UDP socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use chacha20poly1305::aead::OsRng;
use chacha20poly1305::aead::rand_core::RngCore;
use parking_lot::{Mutex, RwLock};
use tokio::net::UdpSocket;

use super::frame::{self, Header, Receiver, Reject};
use super::keys::KeyRing;
use super::replay::Senders;
use super::{Counters, Datagram, Transport, TransportError, TransportStats};

/// Most distinct senders whose replay windows are tracked (a bound on
/// memory; frames from further senders are dropped and counted), and most
/// peer addresses whose node id is remembered.
pub const MAX_SENDERS: usize = 4_096;

/// Encrypted, authenticated UDP transport.
///
/// Sends seal each payload with the send key of its [`KeyRing`], bound to
/// the receiver: its node id if this transport has accepted a frame from
/// that address before (or was told with [`UdpTransport::learn_peer`]),
/// else the destination address. Receives open the frame with whichever
/// key of the ring its key id names, refuse frames bound to another node
/// (or address), then check freshness per sender and sender instance
/// ([`super::replay`]).
#[derive(Debug)]
pub struct UdpTransport {
    socket: UdpSocket,
    keys: RwLock<KeyRing>,
    node_id: u32,
    instance: u64,
    seq: AtomicU64,
    senders: Mutex<Senders>,
    peers: RwLock<HashMap<SocketAddr, u32>>,
    counters: Counters,
    local: SocketAddr,
    origin: Instant,
}

/// A random boot instance from the operating system (never 0).
fn boot_instance() -> u64 {
    loop {
        let x = OsRng.next_u64();
        if x != 0 {
            return x;
        }
    }
}

impl UdpTransport {
    /// Binds `addr` as node `node_id`, sealing with `keys` (a
    /// [`super::ClusterKey`] or a [`KeyRing`]).
    ///
    /// The boot instance is 64 random bits from the OS, and sequence
    /// numbers start at the wall-clock time in nanoseconds: a restarted node
    /// never reuses a nonce, and its peers follow its new instance (see
    /// [`super::replay`]).
    pub async fn bind(
        addr: SocketAddr,
        node_id: u32,
        keys: impl Into<KeyRing>,
    ) -> Result<Self, TransportError> {
        let socket = UdpSocket::bind(addr).await?;
        let local = socket.local_addr()?;
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            .max(1);
        Ok(Self {
            socket,
            keys: RwLock::new(keys.into()),
            node_id,
            instance: boot_instance(),
            seq: AtomicU64::new(start),
            senders: Mutex::new(Senders::new(MAX_SENDERS)),
            peers: RwLock::new(HashMap::new()),
            counters: Counters::default(),
            local,
            origin: Instant::now(),
        })
    }

    /// The raw counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// This process's boot instance (in every frame it sends).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The keys in force.
    pub fn keys(&self) -> KeyRing {
        self.keys.read().clone()
    }

    /// Tells the transport that node `id` listens at `addr`, so frames to
    /// `addr` are bound to `id` from the first one on (it also learns this
    /// from every frame it accepts).
    pub fn learn_peer(&self, addr: SocketAddr, id: u32) {
        if self.peers.read().get(&addr) == Some(&id) {
            return;
        }
        let mut peers = self.peers.write();
        if peers.len() < MAX_SENDERS || peers.contains_key(&addr) {
            peers.insert(addr, id);
        }
    }

    /// Who a frame to `to` is bound to.
    fn receiver(&self, to: SocketAddr) -> Receiver {
        match self.peers.read().get(&to) {
            Some(id) => Receiver::Node(*id),
            None => Receiver::Addr(to),
        }
    }

    /// True if a frame bound to `to` is for this node. An address binding
    /// must name the bound address; on a wildcard bind (`0.0.0.0`, `::`)
    /// only its port can be checked.
    fn is_for_me(&self, to: Receiver) -> bool {
        match to {
            Receiver::Node(id) => id == self.node_id,
            Receiver::Addr(a) => {
                a == self.local
                    || (self.local.ip().is_unspecified() && a.port() == self.local.port())
            }
        }
    }

    /// Checks one received datagram: structure, key, tag, receiver binding,
    /// then freshness. Decrypts in place in `bytes`.
    pub fn accept(&self, from: SocketAddr, bytes: &mut [u8]) -> Result<Datagram, Reject> {
        let (h, payload) = frame::decode(&self.keys.read(), bytes)?;
        if !self.is_for_me(h.to) {
            return Err(Reject::Misdirected);
        }
        let now_ms = self.origin.elapsed().as_millis() as u64;
        self.senders
            .lock()
            .accept(h.sender, h.instance, h.seq, now_ms)?;
        self.learn_peer(from, h.sender);
        Ok(Datagram {
            from,
            sender: h.sender,
            channel: h.channel,
            payload: bytes[payload].to_vec(),
        })
    }
}

#[async_trait]
impl Transport for UdpTransport {
    async fn send(
        &self,
        to: SocketAddr,
        channel: u8,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut buf = Vec::new();
        frame::encode(
            &self.keys.read(),
            Header {
                channel,
                sender: self.node_id,
                instance: self.instance,
                seq,
                to: self.receiver(to),
            },
            payload,
            &mut buf,
        )?;
        match self.socket.send_to(&buf, to).await {
            Ok(_) => {
                self.counters.on_sent(buf.len());
                Ok(())
            }
            Err(e) => {
                self.counters.on_send_error();
                Err(e.into())
            }
        }
    }

    async fn recv(&self) -> Result<Datagram, TransportError> {
        // Larger than MAX_DATAGRAM so oversized datagrams are seen as such.
        let mut buf = vec![0u8; 2 * frame::MAX_DATAGRAM];
        loop {
            let (n, from) = match self.socket.recv_from(&mut buf).await {
                Ok(x) => x,
                // ICMP port unreachable from an earlier send shows up here on
                // some platforms: not fatal for a datagram socket.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => continue,
                Err(e) => return Err(e.into()),
            };
            self.counters.on_received(n);
            match self.accept(from, &mut buf[..n]) {
                Ok(d) => {
                    self.counters.on_accepted();
                    return Ok(d);
                }
                Err(why) => {
                    self.counters.on_rejected(why);
                    tracing::debug!(%from, reason = why.as_str(), "dropped datagram");
                }
            }
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn node_id(&self) -> u32 {
        self.node_id
    }

    fn stats(&self) -> TransportStats {
        self.counters.snapshot()
    }

    fn set_keys(&self, keys: KeyRing) {
        tracing::info!(send = %keys.send_id(), accept = ?keys.ids(), "cluster keys replaced");
        *self.keys.write() = keys;
    }

    fn learn_peer(&self, addr: SocketAddr, id: u32) {
        UdpTransport::learn_peer(self, addr, id);
    }
}
