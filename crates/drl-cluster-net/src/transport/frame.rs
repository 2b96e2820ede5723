//! The encrypted, authenticated wire frame every drl cluster datagram is
//! wrapped in (version 2: XChaCha20-Poly1305; version 1 was HMAC-only and
//! carried payloads in clear).
//!
//! ```text
//! offset size field
//!      0    2 magic     b"dR"
//!      2    1 version   2
//!      3    1 channel   which protocol the payload belongs to
//!      4    4 key id    which cluster key sealed it (see keys.rs)
//!      8    4 sender    node id of the sender (u32, big endian)
//!     12    8 instance  the sender process's random boot instance (u64, != 0)
//!     20    8 seq       the sender's sequence number (u64, big endian)
//!     28    2 len       payload length (u16, big endian), <= MAX_PAYLOAD
//!     30    1 to kind   receiver binding: 1 node id, 4 IPv4 address, 6 IPv6 address
//!     31    n to        receiver node id (n = 4), or IP and port (n = 6 or 18)
//!   31+n  len payload   encrypted
//! 31+n+len 16 tag       Poly1305 tag over header (associated data) and payload
//! ```
//!
//! **Sealing.** The payload is encrypted with XChaCha20-Poly1305 under the
//! frame key derived from the cluster key ([`super::keys`]); the whole
//! header (bytes `0..31+n`) is the associated data, so no header field can
//! be changed without the tag failing.
//!
//! **Nonce.** 24 bytes: `sender (4) || instance (8) || seq (8) || 0 (4)`.
//! It never repeats under one key: within one process, `seq` is an atomic
//! counter that only increases; across processes with the same node id
//! (restarts, or a misconfigured twin), `instance` is 64 bits from the
//! operating system's random generator, drawn at every start, so two lives
//! of a node share a nonce only if they draw the same instance (and, as
//! `seq` starts at the wall clock in ns, overlap their sequence numbers too);
//! senders with different ids never share one. XChaCha20's 192-bit nonce is
//! what lets the nonce carry all three fields instead of a counter alone.
//!
//! **Receiver binding.** A frame names who it is for: the receiver's node
//! id once the sender has heard from it, else the socket address it was
//! sent to (first contact, e.g. with a seed). A receiver refuses an
//! authentic frame meant for someone else as *misdirected*, so a frame
//! captured on the way to node B and replayed to node C is dropped.
//!
//! A frame is valid only if its total length is exactly what its header
//! says, at most [`MAX_DATAGRAM`] bytes, its key id is one the receiver
//! holds and its tag verifies. Decoding never panics, checks every length
//! before use, and decrypts in place (it allocates nothing).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{Tag, XNonce};

use super::keys::{KeyId, KeyRing};

/// Largest datagram drl sends or accepts, bytes: IPv6's minimum MTU (1,280)
/// less the IPv6 and UDP headers (48), so it is never fragmented.
pub const MAX_DATAGRAM: usize = 1_232;
/// Bytes of header before the receiver binding (its kind byte included).
pub const FIXED_LEN: usize = 31;
/// Bytes of authentication tag (Poly1305).
pub const TAG_LEN: usize = 16;
/// Framing overhead of a frame bound to a node id (the usual case).
pub const OVERHEAD: usize = FIXED_LEN + 4 + TAG_LEN;
/// Largest framing overhead (a frame bound to an IPv6 address).
pub const MAX_OVERHEAD: usize = FIXED_LEN + 18 + TAG_LEN;
/// Largest payload of one frame (whatever its binding).
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - MAX_OVERHEAD;
/// The magic bytes.
pub const MAGIC: [u8; 2] = *b"dR";
/// The wire version this build speaks.
pub const VERSION: u8 = 2;

const KIND_NODE: u8 = 1;
const KIND_V4: u8 = 4;
const KIND_V6: u8 = 6;

// Gossip payloads are sized by drl-cluster; they must fit a frame.
const _: () = assert!(MAX_PAYLOAD >= drl_cluster::cloud_control::MAX_PAYLOAD);

/// Who a frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Receiver {
    /// The receiver's node id (known once the sender heard from it).
    Node(u32),
    /// The socket address the frame was sent to (first contact).
    Addr(SocketAddr),
}

impl Receiver {
    fn wire_len(&self) -> usize {
        match self {
            Receiver::Node(_) => 4,
            Receiver::Addr(SocketAddr::V4(_)) => 6,
            Receiver::Addr(SocketAddr::V6(_)) => 18,
        }
    }
}

/// The fields of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Which protocol the payload belongs to.
    pub channel: u8,
    /// Sender node id.
    pub sender: u32,
    /// Sender's random boot instance (never 0).
    pub instance: u64,
    /// Sender's sequence number (never 0).
    pub seq: u64,
    /// Who the frame is for.
    pub to: Receiver,
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Reject {
    /// Shorter than its header and tag, or than its length field says.
    #[error("truncated")]
    Truncated,
    /// Longer than [`MAX_DATAGRAM`], a length field above [`MAX_PAYLOAD`],
    /// or trailing bytes after the tag.
    #[error("oversized")]
    Oversized,
    /// Wrong magic, an unknown version or an unknown receiver kind.
    #[error("bad version")]
    BadVersion,
    /// Sealed with a key id this node does not hold (another cluster, or a
    /// key rotated out).
    #[error("unknown key")]
    UnknownKey,
    /// The tag does not verify.
    #[error("forged")]
    Forged,
    /// Authentic, but addressed to another node.
    #[error("misdirected")]
    Misdirected,
    /// Sequence number already seen or too old, or an instance of the
    /// sender that was superseded.
    #[error("replayed")]
    Replayed,
    /// A new sender while the bounded table of senders is full.
    #[error("too many senders")]
    TooManySenders,
}

impl Reject {
    /// The label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::Truncated => "truncated",
            Reject::Oversized => "oversized",
            Reject::BadVersion => "bad_version",
            Reject::UnknownKey => "unknown_key",
            Reject::Forged => "forged",
            Reject::Misdirected => "misdirected",
            Reject::Replayed => "replayed",
            Reject::TooManySenders => "too_many_senders",
        }
    }
}

/// A payload too large for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payload of {0} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")]
pub struct PayloadTooLarge(pub usize);

fn nonce(sender: u32, instance: u64, seq: u64) -> XNonce {
    let mut n = [0u8; 24];
    n[0..4].copy_from_slice(&sender.to_be_bytes());
    n[4..12].copy_from_slice(&instance.to_be_bytes());
    n[12..20].copy_from_slice(&seq.to_be_bytes());
    n.into()
}

/// Seals `payload` into a frame in `out` (cleared first) with `keys`' send
/// key.
pub fn encode(
    keys: &KeyRing,
    header: Header,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), PayloadTooLarge> {
    if payload.len() > MAX_PAYLOAD {
        return Err(PayloadTooLarge(payload.len()));
    }
    let key = keys.send_key();
    out.clear();
    out.reserve(FIXED_LEN + header.to.wire_len() + payload.len() + TAG_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(header.channel);
    out.extend_from_slice(&key.id().0);
    out.extend_from_slice(&header.sender.to_be_bytes());
    out.extend_from_slice(&header.instance.to_be_bytes());
    out.extend_from_slice(&header.seq.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    match header.to {
        Receiver::Node(id) => {
            out.push(KIND_NODE);
            out.extend_from_slice(&id.to_be_bytes());
        }
        Receiver::Addr(SocketAddr::V4(a)) => {
            out.push(KIND_V4);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Receiver::Addr(SocketAddr::V6(a)) => {
            out.push(KIND_V6);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
    }
    let header_len = out.len();
    out.extend_from_slice(payload);
    let (aad, body) = out.split_at_mut(header_len);
    let tag = key
        .aead
        .encrypt_in_place_detached(
            &nonce(header.sender, header.instance, header.seq),
            aad,
            body,
        )
        .map_err(|_| PayloadTooLarge(payload.len()))?;
    out.extend_from_slice(&tag);
    Ok(())
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(x)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// Checks a datagram's structure, picks the key by id and opens it in
/// place; returns its header and where the (now decrypted) payload lies in
/// `datagram`. On any error the buffer's content is unspecified.
/// (Receiver binding and replay are checked by the caller, after
/// authentication.)
pub fn decode(keys: &KeyRing, datagram: &mut [u8]) -> Result<(Header, Range<usize>), Reject> {
    let n = datagram.len();
    if n > MAX_DATAGRAM {
        return Err(Reject::Oversized);
    }
    if n < FIXED_LEN {
        return Err(Reject::Truncated);
    }
    if datagram[0..2] != MAGIC || datagram[2] != VERSION {
        return Err(Reject::BadVersion);
    }
    let bind_len = match datagram[30] {
        KIND_NODE => 4,
        KIND_V4 => 6,
        KIND_V6 => 18,
        _ => return Err(Reject::BadVersion),
    };
    let header_len = FIXED_LEN + bind_len;
    let len = u16::from_be_bytes([datagram[28], datagram[29]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(Reject::Oversized);
    }
    let total = header_len + len + TAG_LEN;
    if n < total {
        return Err(Reject::Truncated);
    }
    if n > total {
        return Err(Reject::Oversized);
    }
    let id = KeyId([datagram[4], datagram[5], datagram[6], datagram[7]]);
    let key = keys.find(id).ok_or(Reject::UnknownKey)?;
    let sender = be_u32(datagram, 8);
    let instance = be_u64(datagram, 12);
    let seq = be_u64(datagram, 20);
    let b = &datagram[FIXED_LEN..header_len];
    let to = match datagram[30] {
        KIND_NODE => Receiver::Node(be_u32(b, 0)),
        KIND_V4 => Receiver::Addr(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            u16::from_be_bytes([b[4], b[5]]),
        )),
        _ => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[..16]);
            Receiver::Addr(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(ip)),
                u16::from_be_bytes([b[16], b[17]]),
            ))
        }
    };
    let (aad, rest) = datagram.split_at_mut(header_len);
    let (body, tag) = rest.split_at_mut(len);
    key.aead
        .decrypt_in_place_detached(
            &nonce(sender, instance, seq),
            aad,
            body,
            Tag::from_slice(tag),
        )
        .map_err(|_| Reject::Forged)?;
    Ok((
        Header {
            channel: datagram[3],
            sender,
            instance,
            seq,
            to,
        },
        header_len..header_len + len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::keys::ClusterKey;
    use proptest::prelude::*;

    fn key() -> KeyRing {
        ClusterKey::new(b"0123456789abcdef0123456789abcdef")
            .unwrap()
            .into()
    }

    fn header(to: Receiver) -> Header {
        Header {
            channel: 1,
            sender: 7,
            instance: 0x0123_4567_89ab_cdef,
            seq: 42,
            to,
        }
    }

    fn frame_to(to: Receiver, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&key(), header(to), payload, &mut out).unwrap();
        out
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        frame_to(Receiver::Node(3), payload)
    }

    fn open(keys: &KeyRing, f: &[u8]) -> Result<(Header, Vec<u8>), Reject> {
        let mut buf = f.to_vec();
        let (h, r) = decode(keys, &mut buf)?;
        Ok((h, buf[r].to_vec()))
    }

    #[test]
    fn round_trips_every_binding_and_binds_every_byte() {
        for to in [
            Receiver::Node(3),
            Receiver::Addr("127.0.0.9:7946".parse().unwrap()),
            Receiver::Addr("[fe80::1]:7946".parse().unwrap()),
        ] {
            let f = frame_to(to, b"hello");
            assert_eq!(f.len(), FIXED_LEN + to.wire_len() + 5 + TAG_LEN);
            let (h, p) = open(&key(), &f).unwrap();
            assert_eq!(h, header(to));
            assert_eq!(p, b"hello");
            // Flipping any single bit anywhere makes the frame invalid.
            for i in 0..f.len() {
                for b in 0..8 {
                    let mut g = f.clone();
                    g[i] ^= 1 << b;
                    assert!(open(&key(), &g).is_err(), "byte {i} bit {b}");
                }
            }
        }
        assert_eq!(frame(b"").len(), OVERHEAD);
        let other: KeyRing = ClusterKey::new(b"another key of enough length!!")
            .unwrap()
            .into();
        assert_eq!(open(&other, &frame(b"x")), Err(Reject::UnknownKey));
    }

    #[test]
    fn the_payload_is_not_in_clear() {
        let secret = b"api-key-of-a-tenant-0123456789";
        let f = frame(secret);
        assert!(!f.windows(8).any(|w| secret.windows(8).any(|s| s == w)));
        // The same payload in two frames (next seq) encrypts differently.
        let mut g = Vec::new();
        let h = Header {
            seq: 43,
            ..header(Receiver::Node(3))
        };
        encode(&key(), h, secret, &mut g).unwrap();
        assert_ne!(f[OVERHEAD - TAG_LEN..], g[OVERHEAD - TAG_LEN..]);
    }

    #[test]
    fn bounds_are_enforced() {
        for to in [
            Receiver::Node(1),
            Receiver::Addr("[::1]:1".parse().unwrap()),
        ] {
            let f = frame_to(to, &[9u8; MAX_PAYLOAD]);
            assert!(f.len() <= MAX_DATAGRAM);
            assert!(open(&key(), &f).is_ok());
        }
        assert_eq!(
            frame_to(
                Receiver::Addr("[::1]:1".parse().unwrap()),
                &[0; MAX_PAYLOAD]
            )
            .len(),
            MAX_DATAGRAM
        );
        let mut out = Vec::new();
        assert_eq!(
            encode(
                &key(),
                header(Receiver::Node(1)),
                &[0; MAX_PAYLOAD + 1],
                &mut out
            ),
            Err(PayloadTooLarge(MAX_PAYLOAD + 1))
        );
        let f = frame(b"abc");
        assert_eq!(open(&key(), &f[..f.len() - 1]), Err(Reject::Truncated));
        assert_eq!(open(&key(), &f[..10]), Err(Reject::Truncated));
        assert_eq!(open(&key(), &f[..FIXED_LEN + 2]), Err(Reject::Truncated));
        let mut long = f.clone();
        long.push(0);
        assert_eq!(open(&key(), &long), Err(Reject::Oversized));
        assert_eq!(open(&key(), &[0u8; 1300]), Err(Reject::Oversized));
        let mut bad_len = f.clone();
        bad_len[28] = 0xff;
        assert_eq!(open(&key(), &bad_len), Err(Reject::Oversized));
        let mut v1 = f.clone();
        v1[2] = 1;
        assert_eq!(open(&key(), &v1), Err(Reject::BadVersion));
        let mut kind = f;
        kind[30] = 9;
        assert_eq!(open(&key(), &kind), Err(Reject::BadVersion));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Arbitrary bytes never panic the decoder and never open.
        #[test]
        fn arbitrary_bytes_never_open(bytes in proptest::collection::vec(any::<u8>(), 0..1_400)) {
            prop_assert!(open(&key(), &bytes).is_err());
        }

        /// Arbitrary bytes behind a well-formed header with the right key id
        /// never open.
        #[test]
        fn well_formed_headers_with_random_bodies_never_open(
            channel in any::<u8>(), sender in any::<u32>(), instance in any::<u64>(),
            seq in any::<u64>(), to in any::<u32>(),
            body in proptest::collection::vec(any::<u8>(), 0..300),
            tag in any::<[u8; 16]>(),
        ) {
            let mut f = MAGIC.to_vec();
            f.push(VERSION);
            f.push(channel);
            f.extend_from_slice(&key().send_id().0);
            f.extend_from_slice(&sender.to_be_bytes());
            f.extend_from_slice(&instance.to_be_bytes());
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&(body.len() as u16).to_be_bytes());
            f.push(KIND_NODE);
            f.extend_from_slice(&to.to_be_bytes());
            f.extend_from_slice(&body);
            f.extend_from_slice(&tag);
            prop_assert_eq!(open(&key(), &f), Err(Reject::Forged));
        }

        /// Any mutation of a valid frame is refused.
        #[test]
        fn mutated_frames_are_refused(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<prop::sample::Index>(), xor in 1u8..=255,
        ) {
            let mut f = frame(&payload);
            let i = at.index(f.len());
            f[i] ^= xor;
            prop_assert!(open(&key(), &f).is_err());
        }

        /// Any strict prefix, and any extension, of a valid frame is refused.
        #[test]
        fn cut_or_padded_frames_are_refused(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            cut in any::<prop::sample::Index>(),
            pad in proptest::collection::vec(any::<u8>(), 1..40),
        ) {
            let f = frame(&payload);
            prop_assert!(open(&key(), &f[..cut.index(f.len())]).is_err());
            let mut g = f.clone();
            g.extend_from_slice(&pad);
            prop_assert!(open(&key(), &g).is_err());
        }
    }
}
