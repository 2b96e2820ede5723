//! The authenticated wire frame every drl cluster datagram is wrapped in.
//!
//! ```text
//! offset size field
//!      0    2 magic   b"dR"
//!      2    1 version 1
//!      3    1 channel which protocol the payload belongs to
//!      4    4 sender  node id of the sender (u32, big endian)
//!      8    8 seq     per-sender sequence number (u64, big endian)
//!     16    2 len     payload length (u16, big endian), <= MAX_PAYLOAD
//!     18  len payload
//! 18+len   16 tag     HMAC-SHA256(key, bytes 0..18+len), first 16 bytes
//! ```
//!
//! A frame is valid only if its total length is exactly `34 + len`, at most
//! [`MAX_DATAGRAM`] bytes, and its tag verifies (constant-time comparison).
//! Decoding never panics and never allocates more than the datagram.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Largest datagram drl sends or accepts, bytes (fits any sane path MTU).
pub const MAX_DATAGRAM: usize = 1_200;
/// Bytes of header before the payload.
pub const HEADER_LEN: usize = 18;
/// Bytes of authentication tag (HMAC-SHA256 truncated to 128 bits).
pub const TAG_LEN: usize = 16;
/// Framing overhead per datagram.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = MAX_DATAGRAM - OVERHEAD;
/// The magic bytes.
pub const MAGIC: [u8; 2] = *b"dR";
/// The wire version this build speaks.
pub const VERSION: u8 = 1;

type HmacSha256 = Hmac<Sha256>;

/// The shared cluster key (at least 16 bytes). Its bytes are never printed.
#[derive(Clone)]
pub struct ClusterKey(Vec<u8>);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKey({} bytes)", self.0.len())
    }
}

/// Minimum key length, bytes.
pub const MIN_KEY_LEN: usize = 16;

impl ClusterKey {
    /// A key from raw bytes (surrounding ASCII whitespace is trimmed).
    pub fn new(bytes: &[u8]) -> Result<Self, KeyError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort(trimmed.len()));
        }
        Ok(Self(trimmed.to_vec()))
    }

    /// Reads the key from a file (its whole content, trimmed).
    pub fn from_file(path: &std::path::Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|e| KeyError::Read {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Self::new(&bytes)
    }

    /// Reads the key from the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self, KeyError> {
        let v = std::env::var_os(var).ok_or_else(|| KeyError::MissingEnv(var.to_string()))?;
        Self::new(v.as_encoded_bytes())
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length; this cannot fail.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        }
    }
}

/// The cluster key could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Fewer than [`MIN_KEY_LEN`] bytes.
    #[error(
        "cluster key too short: {0} bytes, need at least 16 (e.g. `head -c 32 /dev/urandom | base64`)"
    )]
    TooShort(usize),
    /// The key file could not be read.
    #[error("cannot read cluster key file {path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        why: String,
    },
    /// The environment variable is not set.
    #[error("cluster key environment variable {0} is not set")]
    MissingEnv(String),
}

/// The fields of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Which protocol the payload belongs to.
    pub channel: u8,
    /// Sender node id.
    pub sender: u32,
    /// Sender's sequence number.
    pub seq: u64,
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Reject {
    /// Shorter than a header plus tag, or shorter than its length field says.
    #[error("truncated")]
    Truncated,
    /// Longer than [`MAX_DATAGRAM`], a length field above [`MAX_PAYLOAD`],
    /// or trailing bytes after the tag.
    #[error("oversized")]
    Oversized,
    /// Wrong magic or an unknown version.
    #[error("bad version")]
    BadVersion,
    /// The tag does not verify.
    #[error("forged")]
    Forged,
    /// Sequence number already seen or too old.
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
            Reject::Forged => "forged",
            Reject::Replayed => "replayed",
            Reject::TooManySenders => "too_many_senders",
        }
    }
}

/// A payload too large for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payload of {0} bytes exceeds the {MAX_PAYLOAD}-byte frame limit")]
pub struct PayloadTooLarge(pub usize);

/// Encodes and authenticates a frame into `out` (cleared first).
pub fn encode(
    key: &ClusterKey,
    header: Header,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), PayloadTooLarge> {
    if payload.len() > MAX_PAYLOAD {
        return Err(PayloadTooLarge(payload.len()));
    }
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(header.channel);
    out.extend_from_slice(&header.sender.to_be_bytes());
    out.extend_from_slice(&header.seq.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    let mut mac = key.mac();
    mac.update(out);
    let tag = mac.finalize().into_bytes();
    out.extend_from_slice(&tag[..TAG_LEN]);
    Ok(())
}

/// Checks a datagram's structure and tag; returns its header and payload.
/// (Replay is checked separately, after authentication, by
/// [`ReplayWindow`].)
pub fn decode<'a>(key: &ClusterKey, datagram: &'a [u8]) -> Result<(Header, &'a [u8]), Reject> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(Reject::Oversized);
    }
    if datagram.len() < OVERHEAD {
        return Err(Reject::Truncated);
    }
    if datagram[0..2] != MAGIC || datagram[2] != VERSION {
        return Err(Reject::BadVersion);
    }
    let len = u16::from_be_bytes([datagram[16], datagram[17]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(Reject::Oversized);
    }
    let total = OVERHEAD + len;
    if datagram.len() < total {
        return Err(Reject::Truncated);
    }
    if datagram.len() > total {
        return Err(Reject::Oversized);
    }
    let body = &datagram[..HEADER_LEN + len];
    let tag = &datagram[HEADER_LEN + len..];
    let mut mac = key.mac();
    mac.update(body);
    mac.verify_truncated_left(tag).map_err(|_| Reject::Forged)?;
    let mut sender = [0u8; 4];
    sender.copy_from_slice(&datagram[4..8]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&datagram[8..16]);
    Ok((
        Header {
            channel: datagram[3],
            sender: u32::from_be_bytes(sender),
            seq: u64::from_be_bytes(seq),
        },
        &datagram[HEADER_LEN..HEADER_LEN + len],
    ))
}

/// Bits of history a replay window keeps.
pub const REPLAY_WINDOW: u64 = 128;

/// Sliding anti-replay window of one sender (as IPsec's): accepts each
/// sequence number at most once, and nothing older than
/// [`REPLAY_WINDOW`] below the highest seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    top: u64,
    seen: u128,
}

impl ReplayWindow {
    /// Accepts `seq` (and records it) if it is new.
    pub fn accept(&mut self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            let shift = seq - self.top;
            self.seen = if shift >= REPLAY_WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.top = seq;
            return true;
        }
        let back = self.top - seq;
        if back >= REPLAY_WINDOW {
            return false;
        }
        let bit = 1u128 << back;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        true
    }

    /// Highest sequence number accepted.
    pub fn top(&self) -> u64 {
        self.top
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> ClusterKey {
        ClusterKey::new(b"0123456789abcdef0123456789abcdef").unwrap()
    }

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(
            &key(),
            Header {
                channel: 1,
                sender: 7,
                seq: 42,
            },
            payload,
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn round_trips_and_binds_every_byte() {
        let f = frame(b"hello");
        assert_eq!(f.len(), OVERHEAD + 5);
        let (h, p) = decode(&key(), &f).unwrap();
        assert_eq!((h.channel, h.sender, h.seq, p), (1, 7, 42, &b"hello"[..]));
        // Flipping any single bit anywhere makes the frame invalid.
        for i in 0..f.len() {
            for b in 0..8 {
                let mut g = f.clone();
                g[i] ^= 1 << b;
                assert!(decode(&key(), &g).is_err(), "byte {i} bit {b}");
            }
        }
        let other = ClusterKey::new(b"another key of enough length!!").unwrap();
        assert_eq!(decode(&other, &f), Err(Reject::Forged));
    }

    #[test]
    fn bounds_are_enforced() {
        let f = frame(&[9u8; MAX_PAYLOAD]);
        assert_eq!(f.len(), MAX_DATAGRAM);
        assert!(decode(&key(), &f).is_ok());
        let mut out = Vec::new();
        let h = Header {
            channel: 0,
            sender: 0,
            seq: 1,
        };
        assert_eq!(
            encode(&key(), h, &[0; MAX_PAYLOAD + 1], &mut out),
            Err(PayloadTooLarge(MAX_PAYLOAD + 1))
        );
        let f = frame(b"abc");
        assert_eq!(decode(&key(), &f[..f.len() - 1]), Err(Reject::Truncated));
        assert_eq!(decode(&key(), &f[..10]), Err(Reject::Truncated));
        let mut long = f.clone();
        long.push(0);
        assert_eq!(decode(&key(), &long), Err(Reject::Oversized));
        assert_eq!(decode(&key(), &[0u8; 1300]), Err(Reject::Oversized));
        let mut bad_len = f.clone();
        bad_len[16] = 0xff;
        assert_eq!(decode(&key(), &bad_len), Err(Reject::Oversized));
        let mut v2 = f;
        v2[2] = 2;
        assert_eq!(decode(&key(), &v2), Err(Reject::BadVersion));
    }

    #[test]
    fn keys_are_checked() {
        assert!(matches!(
            ClusterKey::new(b"  short \n"),
            Err(KeyError::TooShort(5))
        ));
        assert!(ClusterKey::new(b"sixteen bytes!!!\n").is_ok());
        assert!(matches!(
            ClusterKey::from_env("DRL_NODE_TEST_SURELY_UNSET"),
            Err(KeyError::MissingEnv(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, "a file key of 32 bytes.........\n").unwrap();
        assert!(ClusterKey::from_file(&p).is_ok());
        assert!(format!("{:?}", ClusterKey::from_file(&p).unwrap()).contains("31 bytes"));
    }

    #[test]
    fn replay_window_accepts_each_number_once() {
        let mut w = ReplayWindow::default();
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(3));
        assert!(!w.accept(3));
        assert!(w.accept(200));
        assert!(!w.accept(5), "older than the window");
        assert!(w.accept(199));
        assert!(w.accept(200 - 127));
        assert!(!w.accept(200 - 128));
        assert!(w.accept(u64::MAX));
        assert!(!w.accept(u64::MAX));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Arbitrary bytes never panic the decoder and never authenticate.
        #[test]
        fn arbitrary_bytes_never_authenticate(bytes in proptest::collection::vec(any::<u8>(), 0..1_400)) {
            prop_assert!(decode(&key(), &bytes).is_err());
        }

        /// Arbitrary bytes behind a valid-looking header never authenticate.
        #[test]
        fn well_formed_headers_with_random_tags_never_authenticate(
            channel in any::<u8>(), sender in any::<u32>(), seq in any::<u64>(),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            tag in any::<[u8; 16]>(),
        ) {
            let mut f = MAGIC.to_vec();
            f.push(VERSION);
            f.push(channel);
            f.extend_from_slice(&sender.to_be_bytes());
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            f.extend_from_slice(&payload);
            f.extend_from_slice(&tag);
            prop_assert_eq!(decode(&key(), &f), Err(Reject::Forged));
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
            prop_assert!(decode(&key(), &f).is_err());
        }
    }
}
