//! [`UdpTransport`]: authenticated frames over one UDP socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::net::UdpSocket;

use super::frame::{self, ClusterKey, Header, Reject, ReplayWindow};
use super::{Counters, Datagram, Transport, TransportError, TransportStats};

/// Most distinct senders whose replay windows are tracked (a bound on
/// memory; frames from further senders are dropped and counted).
pub const MAX_SENDERS: usize = 4_096;

/// Authenticated UDP transport.
#[derive(Debug)]
pub struct UdpTransport {
    socket: UdpSocket,
    key: ClusterKey,
    node_id: u32,
    seq: AtomicU64,
    windows: Mutex<HashMap<u32, ReplayWindow>>,
    counters: Counters,
    local: SocketAddr,
}

impl UdpTransport {
    /// Binds `addr` as node `node_id`, authenticating with `key`.
    ///
    /// Sequence numbers start at the wall-clock time in nanoseconds, so a
    /// restarted node continues above anything it sent before and its peers'
    /// replay windows accept it again.
    pub async fn bind(
        addr: SocketAddr,
        node_id: u32,
        key: ClusterKey,
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
            key,
            node_id,
            seq: AtomicU64::new(start),
            windows: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            local,
        })
    }

    /// The raw counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Checks one received datagram: structure, tag, then freshness.
    pub fn accept(&self, from: SocketAddr, bytes: &[u8]) -> Result<Datagram, Reject> {
        let (h, payload) = frame::decode(&self.key, bytes)?;
        let mut windows = self.windows.lock();
        let full = windows.len() >= MAX_SENDERS;
        let fresh = match windows.get_mut(&h.sender) {
            Some(w) => w.accept(h.seq),
            None if full => return Err(Reject::TooManySenders),
            None => {
                let mut w = ReplayWindow::default();
                let ok = w.accept(h.seq);
                windows.insert(h.sender, w);
                ok
            }
        };
        if !fresh {
            return Err(Reject::Replayed);
        }
        Ok(Datagram {
            from,
            sender: h.sender,
            channel: h.channel,
            payload: payload.to_vec(),
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
        let mut buf = Vec::with_capacity(payload.len() + frame::OVERHEAD);
        frame::encode(
            &self.key,
            Header {
                channel,
                sender: self.node_id,
                seq,
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
            match self.accept(from, &buf[..n]) {
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
}
