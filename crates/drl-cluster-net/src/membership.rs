//! Membership and failure detection: SWIM, by the `foca` crate.
//!
//! [`Membership`] keeps foca sans-IO: the node loop feeds it datagrams and
//! timer events and drains what foca wants sent, scheduled and reported
//! ([`Membership::drain`]). Identities carry the node id, the UDP address
//! and a generation (bumped when a node rejoins after being declared down,
//! so it wins against its old self). foca's messages travel on the
//! authenticated transport's membership channel, with the compact binary
//! codec below (every length and tag checked).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use bytes::{Buf, BufMut};
use foca::{
    AccumulatingRuntime, Codec, Foca, Header, Identity, Member, Message, NoCustomBroadcast,
    OwnedNotification, PeriodicParams, State, Timer,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::config::MembershipConfig;
use crate::transport::MAX_PAYLOAD;

/// A cluster member's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeIdent {
    /// Node id (the transport's sender id).
    pub id: u32,
    /// UDP address.
    pub addr: SocketAddr,
    /// Generation: bumped to rejoin after being declared down.
    pub generation: u16,
}

impl Identity for NodeIdent {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Self {
            generation: self.generation.wrapping_add(1),
            ..*self
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        // Wrapping comparison: the newer generation wins.
        (self.generation.wrapping_sub(adversary.generation) as i16) > 0
    }
}

/// A malformed membership message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Not enough bytes.
    #[error("truncated membership message")]
    Truncated,
    /// An unknown tag.
    #[error("bad tag {0}")]
    Tag(u8),
    /// The buffer has no room for the item (foca then sends fewer
    /// members; the buffer is left as it was).
    #[error("no room in the membership message")]
    NoRoom,
}

/// foca's wire codec: fixed-width big-endian fields, one tag byte per enum.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdentCodec;

fn need(buf: &impl Buf, n: usize) -> Result<(), CodecError> {
    if buf.remaining() < n {
        Err(CodecError::Truncated)
    } else {
        Ok(())
    }
}

/// The encoded length of `id` (what [`put_ident`] writes).
fn ident_len(id: &NodeIdent) -> usize {
    let ip = match id.addr.ip() {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 16,
    };
    4 + 2 + 1 + ip + 2
}

/// `Err(NoRoom)` unless `buf` can take `n` more bytes: foca fills a
/// message with members until one does not fit, and `BufMut` panics on a
/// write past its end.
fn room(buf: &impl BufMut, n: usize) -> Result<(), CodecError> {
    if buf.remaining_mut() < n {
        Err(CodecError::NoRoom)
    } else {
        Ok(())
    }
}

fn put_ident(id: &NodeIdent, buf: &mut impl BufMut) {
    buf.put_u32(id.id);
    buf.put_u16(id.generation);
    match id.addr.ip() {
        IpAddr::V4(ip) => {
            buf.put_u8(4);
            buf.put_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            buf.put_u8(6);
            buf.put_slice(&ip.octets());
        }
    }
    buf.put_u16(id.addr.port());
}

fn get_ident(buf: &mut impl Buf) -> Result<NodeIdent, CodecError> {
    need(buf, 7)?;
    let id = buf.get_u32();
    let generation = buf.get_u16();
    let ip = match buf.get_u8() {
        4 => {
            need(buf, 4)?;
            let mut o = [0u8; 4];
            buf.copy_to_slice(&mut o);
            IpAddr::V4(Ipv4Addr::from(o))
        }
        6 => {
            need(buf, 16)?;
            let mut o = [0u8; 16];
            buf.copy_to_slice(&mut o);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        t => return Err(CodecError::Tag(t)),
    };
    need(buf, 2)?;
    let port = buf.get_u16();
    Ok(NodeIdent {
        id,
        addr: SocketAddr::new(ip, port),
        generation,
    })
}

impl Codec<NodeIdent> for IdentCodec {
    type Error = CodecError;

    fn encode_header(
        &mut self,
        h: &Header<NodeIdent>,
        mut buf: impl BufMut,
    ) -> Result<(), CodecError> {
        let message = match &h.message {
            Message::PingReq { target: who, .. }
            | Message::IndirectPing { origin: who, .. }
            | Message::IndirectAck { target: who, .. }
            | Message::ForwardedAck { origin: who, .. } => 1 + ident_len(who) + 1,
            Message::Ping(_) | Message::Ack(_) => 2,
            _ => 1,
        };
        room(&buf, ident_len(&h.src) + 2 + ident_len(&h.dst) + message)?;
        put_ident(&h.src, &mut buf);
        buf.put_u16(h.src_incarnation);
        put_ident(&h.dst, &mut buf);
        match &h.message {
            Message::Ping(n) => {
                buf.put_u8(1);
                buf.put_u8(*n);
            }
            Message::Ack(n) => {
                buf.put_u8(2);
                buf.put_u8(*n);
            }
            Message::PingReq {
                target,
                probe_number,
            } => {
                buf.put_u8(3);
                put_ident(target, &mut buf);
                buf.put_u8(*probe_number);
            }
            Message::IndirectPing {
                origin,
                probe_number,
            } => {
                buf.put_u8(4);
                put_ident(origin, &mut buf);
                buf.put_u8(*probe_number);
            }
            Message::IndirectAck {
                target,
                probe_number,
            } => {
                buf.put_u8(5);
                put_ident(target, &mut buf);
                buf.put_u8(*probe_number);
            }
            Message::ForwardedAck {
                origin,
                probe_number,
            } => {
                buf.put_u8(6);
                put_ident(origin, &mut buf);
                buf.put_u8(*probe_number);
            }
            Message::Announce => buf.put_u8(7),
            Message::Feed => buf.put_u8(8),
            Message::Gossip => buf.put_u8(9),
            Message::Broadcast => buf.put_u8(10),
            Message::TurnUndead => buf.put_u8(11),
        }
        Ok(())
    }

    fn decode_header(&mut self, mut buf: impl Buf) -> Result<Header<NodeIdent>, CodecError> {
        let src = get_ident(&mut buf)?;
        need(&buf, 2)?;
        let src_incarnation = buf.get_u16();
        let dst = get_ident(&mut buf)?;
        need(&buf, 1)?;
        let tag = buf.get_u8();
        let num = |buf: &mut dyn Buf| -> Result<u8, CodecError> {
            if buf.remaining() < 1 {
                return Err(CodecError::Truncated);
            }
            Ok(buf.get_u8())
        };
        let message = match tag {
            1 => Message::Ping(num(&mut buf)?),
            2 => Message::Ack(num(&mut buf)?),
            3..=6 => {
                let who = get_ident(&mut buf)?;
                let probe_number = num(&mut buf)?;
                match tag {
                    3 => Message::PingReq {
                        target: who,
                        probe_number,
                    },
                    4 => Message::IndirectPing {
                        origin: who,
                        probe_number,
                    },
                    5 => Message::IndirectAck {
                        target: who,
                        probe_number,
                    },
                    _ => Message::ForwardedAck {
                        origin: who,
                        probe_number,
                    },
                }
            }
            7 => Message::Announce,
            8 => Message::Feed,
            9 => Message::Gossip,
            10 => Message::Broadcast,
            11 => Message::TurnUndead,
            t => return Err(CodecError::Tag(t)),
        };
        Ok(Header {
            src,
            src_incarnation,
            dst,
            message,
        })
    }

    fn encode_member(
        &mut self,
        m: &Member<NodeIdent>,
        mut buf: impl BufMut,
    ) -> Result<(), CodecError> {
        room(&buf, ident_len(m.id()) + 3)?;
        put_ident(m.id(), &mut buf);
        buf.put_u16(m.incarnation());
        buf.put_u8(match m.state() {
            State::Alive => 0,
            State::Suspect => 1,
            State::Down => 2,
        });
        Ok(())
    }

    fn decode_member(&mut self, mut buf: impl Buf) -> Result<Member<NodeIdent>, CodecError> {
        let id = get_ident(&mut buf)?;
        need(&buf, 3)?;
        let inc = buf.get_u16();
        let state = match buf.get_u8() {
            0 => State::Alive,
            1 => State::Suspect,
            2 => State::Down,
            t => return Err(CodecError::Tag(t)),
        };
        Ok(Member::new(id, inc, state))
    }
}

/// A change of membership the node acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A peer is up (joined, or came back).
    Up(NodeIdent),
    /// A peer is down (failed, partitioned away, or left).
    Down(NodeIdent),
}

/// What foca asked for after one input.
#[derive(Debug, Default)]
pub struct Output {
    /// Datagrams to send on the membership channel.
    pub send: Vec<(SocketAddr, Vec<u8>)>,
    /// Timer events to feed back after the delay.
    pub timers: Vec<(Duration, Timer<NodeIdent>)>,
    /// Membership changes.
    pub events: Vec<Event>,
}

/// One node's SWIM state.
pub struct Membership {
    foca: Foca<NodeIdent, IdentCodec, ChaCha8Rng, NoCustomBroadcast>,
    rt: AccumulatingRuntime<NodeIdent>,
    me: NodeIdent,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("me", &self.me)
            .field("members", &self.foca.num_members())
            .finish()
    }
}

impl Membership {
    /// SWIM for `me` in a cluster of about `cluster_size` nodes.
    pub fn new(me: NodeIdent, cluster_size: u32, cfg: &MembershipConfig, seed: u64) -> Self {
        let size = NonZeroU32::new(cluster_size.max(1)).unwrap_or(NonZeroU32::MIN);
        let mut c = foca::Config::new_lan(size);
        c.probe_period = Duration::from_millis(cfg.probe_period_ms);
        c.probe_rtt = Duration::from_millis(cfg.probe_rtt_ms);
        c.suspect_to_down_after = Duration::from_millis(cfg.suspect_to_down_ms);
        c.max_packet_size = NonZeroUsize::new(MAX_PAYLOAD).unwrap_or(NonZeroUsize::MIN);
        c.remove_down_after = Duration::from_secs(15);
        let one = NonZeroUsize::MIN;
        c.periodic_announce = Some(PeriodicParams {
            frequency: Duration::from_secs(5),
            num_members: one,
        });
        c.periodic_announce_to_down_members = Some(PeriodicParams {
            frequency: Duration::from_millis(cfg.probe_period_ms * 5),
            num_members: NonZeroUsize::new(2).unwrap_or(one),
        });
        c.periodic_gossip = Some(PeriodicParams {
            frequency: Duration::from_millis(cfg.probe_period_ms),
            num_members: NonZeroUsize::new(3).unwrap_or(one),
        });
        let foca = Foca::new(me, c, ChaCha8Rng::seed_from_u64(seed), IdentCodec);
        Self {
            foca,
            rt: AccumulatingRuntime::new(),
            me,
        }
    }

    /// This node's identity (current generation).
    pub fn me(&self) -> NodeIdent {
        self.me
    }

    /// Announces this node to every seed address.
    pub fn join(&mut self, seeds: &[SocketAddr]) -> Output {
        for s in seeds {
            let dst = NodeIdent {
                id: 0,
                addr: *s,
                generation: 0,
            };
            if let Err(e) = self.foca.announce(dst, &mut self.rt) {
                tracing::debug!(error = %e, "announce failed");
            }
        }
        self.drain()
    }

    /// Feeds a membership datagram.
    pub fn handle_data(&mut self, data: &[u8]) -> Output {
        if let Err(e) = self.foca.handle_data(data, &mut self.rt) {
            tracing::debug!(error = %e, "membership datagram refused");
        }
        self.drain()
    }

    /// Feeds a timer event that fell due.
    pub fn handle_timer(&mut self, t: Timer<NodeIdent>) -> Output {
        if let Err(e) = self.foca.handle_timer(t, &mut self.rt) {
            tracing::debug!(error = %e, "membership timer failed");
        }
        self.drain()
    }

    /// Leaves the cluster gracefully (peers see this node down at once).
    pub fn leave(&mut self) -> Output {
        let _ = self.foca.leave_cluster(&mut self.rt);
        self.drain()
    }

    /// Declares every member at `addr` down, in this node's view only
    /// (nothing is broadcast): discovery calls it when `addr`'s DNS record
    /// is gone. The node loop then ignores `addr`'s datagrams until the
    /// record is back, so the member stays gone.
    pub fn forget(&mut self, addr: SocketAddr) -> Output {
        let gone: Vec<NodeIdent> = self
            .foca
            .iter_members()
            .map(|m| *m.id())
            .filter(|id| id.addr == addr)
            .collect();
        if !gone.is_empty() {
            let updates = gone.into_iter().map(|id| Member::new(id, 0, State::Down));
            if let Err(e) = self.foca.apply_many(updates, false, &mut self.rt) {
                tracing::debug!(error = %e, "forgetting a member failed");
            }
        }
        self.drain()
    }

    /// The active members other than this node.
    pub fn members(&self) -> Vec<NodeIdent> {
        let mut v: Vec<NodeIdent> = self.foca.iter_members().map(|m| *m.id()).collect();
        v.sort();
        v
    }

    fn drain(&mut self) -> Output {
        let mut out = Output::default();
        while let Some((to, data)) = self.rt.to_send() {
            out.send.push((to.addr, data.to_vec()));
        }
        while let Some((after, t)) = self.rt.to_schedule() {
            out.timers.push((after, t));
        }
        while let Some(n) = self.rt.to_notify() {
            match n {
                OwnedNotification::MemberUp(id) => out.events.push(Event::Up(id)),
                OwnedNotification::MemberDown(id) => out.events.push(Event::Down(id)),
                OwnedNotification::Rename(old, new) => {
                    out.events.push(Event::Down(old));
                    out.events.push(Event::Up(new));
                }
                OwnedNotification::Rejoin(new) => self.me = new,
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ident(id: u32, port: u16) -> NodeIdent {
        NodeIdent {
            id,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            generation: 7,
        }
    }

    #[test]
    fn codec_round_trips_every_message() {
        let a = ident(1, 1000);
        let b = NodeIdent {
            addr: "[::1]:9".parse().unwrap(),
            ..ident(2, 9)
        };
        let msgs = vec![
            Message::Ping(3),
            Message::Ack(4),
            Message::PingReq {
                target: b,
                probe_number: 5,
            },
            Message::IndirectPing {
                origin: a,
                probe_number: 6,
            },
            Message::IndirectAck {
                target: b,
                probe_number: 7,
            },
            Message::ForwardedAck {
                origin: a,
                probe_number: 8,
            },
            Message::Announce,
            Message::Feed,
            Message::Gossip,
            Message::Broadcast,
            Message::TurnUndead,
        ];
        for m in msgs {
            let h = Header {
                src: a,
                src_incarnation: 11,
                dst: b,
                message: m,
            };
            let mut buf = Vec::new();
            IdentCodec.encode_header(&h, &mut buf).unwrap();
            assert_eq!(IdentCodec.decode_header(&buf[..]).unwrap(), h);
            for cut in 0..buf.len() {
                assert!(IdentCodec.decode_header(&buf[..cut]).is_err());
            }
        }
        let m = Member::new(b, 3, State::Suspect);
        let mut buf = Vec::new();
        IdentCodec.encode_member(&m, &mut buf).unwrap();
        assert_eq!(IdentCodec.decode_member(&buf[..]).unwrap(), m);
    }

    /// foca fills a message with members until one does not fit: a full
    /// buffer must answer an error and stay as it was, never panic (it
    /// did, at about 100 nodes, in `examples/scale_udp.rs`).
    #[test]
    fn a_full_buffer_refuses_an_item_and_stays_as_it_was() {
        let a = ident(1, 1000);
        let b = NodeIdent {
            addr: "[::1]:9".parse().unwrap(),
            ..ident(2, 9)
        };
        for m in [
            Member::new(a, 3, State::Alive),
            Member::new(b, 4, State::Down),
        ] {
            let mut whole = Vec::new();
            IdentCodec.encode_member(&m, &mut whole).unwrap();
            for room in 0..whole.len() {
                let mut store = [0u8; 64];
                let mut buf = &mut store[..room];
                assert_eq!(
                    IdentCodec.encode_member(&m, &mut buf),
                    Err(CodecError::NoRoom)
                );
                assert_eq!(buf.len(), room, "nothing written");
            }
            let mut store = [0u8; 64];
            let mut buf = &mut store[..whole.len()];
            IdentCodec.encode_member(&m, &mut buf).unwrap();
            assert_eq!(&store[..whole.len()], &whole[..]);
        }
        let h = Header {
            src: a,
            src_incarnation: 1,
            dst: b,
            message: Message::PingReq {
                target: b,
                probe_number: 2,
            },
        };
        let mut whole = Vec::new();
        IdentCodec.encode_header(&h, &mut whole).unwrap();
        for room in 0..whole.len() {
            let mut store = [0u8; 128];
            let mut buf = &mut store[..room];
            assert_eq!(
                IdentCodec.encode_header(&h, &mut buf),
                Err(CodecError::NoRoom)
            );
        }
        let mut store = [0u8; 128];
        IdentCodec
            .encode_header(&h, &mut &mut store[..whole.len()])
            .unwrap();
    }

    #[test]
    fn newer_generation_wins() {
        let a = ident(1, 1);
        let b = a.renew().unwrap();
        assert!(b.win_addr_conflict(&a));
        assert!(!a.win_addr_conflict(&b));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_codec(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = IdentCodec.decode_header(&bytes[..]);
            let _ = IdentCodec.decode_member(&bytes[..]);
        }
    }
}
