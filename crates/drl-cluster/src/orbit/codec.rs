//! The usage-table codec: compact, versioned, bounded binary frames.
//!
//! Layout (version 1), all integers LEB128 varints unless noted:
//!
//! ```text
//! "OB" | version u8 = 1 | flags u8 (bit 0: delta; other bits must be 0)
//! window | lane (< MAX_LANES) | hop | base_hop (0 iff not delta) | from | pool
//! n_visits (<= MAX_RING), then n_visits hops
//! n_entries (<= MAX_TABLE_KEYS), then for each entry, keys strictly increasing:
//!   shared (<= previous key length) | suffix_len (shared + suffix_len <= MAX_KEY_LEN)
//!   suffix bytes | zigzag(free - pool) as an unsigned varint (u128)
//!   age = hop - modified (<= hop)
//! ```
//!
//! Keys are prefix-compressed against the previous key; values are signed
//! offsets from the pool (most are small). Between epochs a node sends only
//! the entries changed since the receiver's last forward (`base_hop`, see
//! `docs/orbit.md`). Every length is checked against the bytes left and the
//! bounds before anything is allocated: truncated, forged or oversized input
//! is a [`DecodeError`], never a panic.
//!
//! Authentication is not here: the transport wraps the frame (sequence
//! number before it, HMAC over sequence number and frame after it) and calls
//! [`decode`] only on frames whose MAC verified.

use super::config::{MAX_KEY_LEN, MAX_LANES, MAX_RING, MAX_TABLE_KEYS};
use super::table::TableMsg;

/// Frame magic.
pub const MAGIC: [u8; 2] = *b"OB";
/// Codec version written by [`encode`] and accepted by [`decode`].
pub const VERSION: u8 = 1;
/// Largest frame [`encode`] writes and [`decode`] accepts (64 MiB).
pub const MAX_FRAME_LEN: usize = 64 << 20;

const FLAG_DELTA: u8 = 1;

/// Why a frame could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// More than [`MAX_RING`] visits.
    #[error("orbit codec: {0} visits exceed the ring bound")]
    TooManyVisits(usize),
    /// More than [`MAX_TABLE_KEYS`] entries.
    #[error("orbit codec: {0} entries exceed the table bound")]
    TooManyEntries(usize),
    /// A key longer than [`MAX_KEY_LEN`].
    #[error("orbit codec: key of {0} bytes is too long")]
    KeyTooLong(usize),
    /// Keys not strictly increasing.
    #[error("orbit codec: keys not strictly increasing at entry {0}")]
    Unsorted(usize),
    /// `base_hop` must be 0 exactly when the message is full... and below `hop`.
    #[error("orbit codec: base_hop {base_hop} invalid for hop {hop}")]
    BadBase {
        /// base_hop.
        base_hop: u32,
        /// hop.
        hop: u32,
    },
    /// The frame would exceed [`MAX_FRAME_LEN`].
    #[error("orbit codec: frame larger than {MAX_FRAME_LEN} bytes")]
    FrameTooLarge,
    /// Lane out of range.
    #[error("orbit codec: lane {0} out of range")]
    BadLane(u32),
    /// An entry's `modified` hop is after the message's hop.
    #[error("orbit codec: entry {0} modified after the message's hop")]
    ModifiedAfterHop(usize),
}

/// Why a frame was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Input ended inside a field.
    #[error("orbit codec: truncated frame")]
    Truncated,
    /// Not an Orbit frame.
    #[error("orbit codec: bad magic")]
    BadMagic,
    /// Unknown version.
    #[error("orbit codec: unsupported version {0}")]
    Version(u8),
    /// Unknown flag bits.
    #[error("orbit codec: unknown flags {0:#x}")]
    Flags(u8),
    /// A varint is overlong or out of range for its field.
    #[error("orbit codec: bad integer in field {0}")]
    BadInt(&'static str),
    /// A length exceeds its bound or the bytes left.
    #[error("orbit codec: {field} length {len} out of bounds")]
    Length {
        /// Field name.
        field: &'static str,
        /// Length read.
        len: u64,
    },
    /// Keys not strictly increasing.
    #[error("orbit codec: keys not strictly increasing at entry {0}")]
    Unsorted(usize),
    /// `base_hop` inconsistent with the delta flag or the hop.
    #[error("orbit codec: base_hop inconsistent with flags or hop")]
    BadBase,
    /// Bytes after the last entry.
    #[error("orbit codec: {0} trailing bytes")]
    Trailing(usize),
    /// Frame longer than [`MAX_FRAME_LEN`].
    #[error("orbit codec: frame larger than {MAX_FRAME_LEN} bytes")]
    FrameTooLarge,
}

fn put_varint(buf: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn zigzag(free: u64, pool: u64) -> u128 {
    if free >= pool {
        u128::from(free - pool) << 1
    } else {
        (u128::from(pool - free) << 1) - 1
    }
}

fn unzigzag(z: u128, pool: u64) -> Option<u64> {
    let mag = z.div_ceil(2);
    if z & 1 == 0 {
        u64::try_from(u128::from(pool) + (z >> 1)).ok()
    } else {
        pool.checked_sub(u64::try_from(mag).ok()?)
    }
}

/// Encodes `msg` into a new frame.
pub fn encode(msg: &TableMsg) -> Result<Vec<u8>, EncodeError> {
    let mut buf = Vec::with_capacity(32 + msg.visits.len() * 2 + msg.entries.len() * 8);
    encode_into(msg, &mut buf)?;
    Ok(buf)
}

/// Appends the frame for `msg` to `buf` (on error `buf` may hold a partial
/// frame; truncate it to its old length).
pub fn encode_into(msg: &TableMsg, buf: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = buf.len();
    if msg.lane >= MAX_LANES {
        return Err(EncodeError::BadLane(msg.lane));
    }
    if msg.visits.len() > MAX_RING {
        return Err(EncodeError::TooManyVisits(msg.visits.len()));
    }
    if msg.entries.len() > MAX_TABLE_KEYS {
        return Err(EncodeError::TooManyEntries(msg.entries.len()));
    }
    if msg.base_hop != 0 && msg.base_hop >= msg.hop {
        return Err(EncodeError::BadBase {
            base_hop: msg.base_hop,
            hop: msg.hop,
        });
    }
    buf.extend_from_slice(&MAGIC);
    buf.push(VERSION);
    buf.push(if msg.is_delta() { FLAG_DELTA } else { 0 });
    put_varint(buf, msg.window.into());
    put_varint(buf, msg.lane.into());
    put_varint(buf, msg.hop.into());
    put_varint(buf, msg.base_hop.into());
    put_varint(buf, msg.from.into());
    put_varint(buf, msg.pool.into());
    put_varint(buf, msg.visits.len() as u128);
    for &v in &msg.visits {
        put_varint(buf, v.into());
    }
    put_varint(buf, msg.entries.len() as u128);
    let mut prev: &[u8] = &[];
    for (i, (key, free, modified)) in msg.entries.iter().enumerate() {
        if key.len() > MAX_KEY_LEN {
            return Err(EncodeError::KeyTooLong(key.len()));
        }
        if i > 0 && key.as_slice() <= prev {
            return Err(EncodeError::Unsorted(i));
        }
        let shared = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
        put_varint(buf, shared as u128);
        put_varint(buf, (key.len() - shared) as u128);
        buf.extend_from_slice(&key[shared..]);
        put_varint(buf, zigzag(*free, msg.pool));
        let Some(age) = msg.hop.checked_sub(*modified) else {
            return Err(EncodeError::ModifiedAfterHop(i));
        };
        put_varint(buf, age.into());
        prev = key;
        if buf.len() - start > MAX_FRAME_LEN {
            return Err(EncodeError::FrameTooLarge);
        }
    }
    Ok(())
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&x, rest) = self.b.split_first().ok_or(DecodeError::Truncated)?;
        self.b = rest;
        Ok(x)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.b.len() {
            return Err(DecodeError::Truncated);
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(x)
    }

    /// A varint of at most `bits` (< 128) significant bits, minimal encoding.
    fn varint(&mut self, bits: u32, field: &'static str) -> Result<u128, DecodeError> {
        let mut v: u128 = 0;
        for i in 0..bits.div_ceil(7) {
            let x = self.byte()?;
            v |= u128::from(x & 0x7f) << (7 * i);
            if x & 0x80 == 0 {
                if (x == 0 && i > 0) || v >> bits != 0 {
                    return Err(DecodeError::BadInt(field));
                }
                return Ok(v);
            }
        }
        Err(DecodeError::BadInt(field))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(self.varint(64, field)? as u64)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(self.varint(32, field)? as u32)
    }

    fn len(
        &mut self,
        field: &'static str,
        max: usize,
        min_item: usize,
    ) -> Result<usize, DecodeError> {
        let n = self.u64(field)?;
        if n > max as u64 || n.saturating_mul(min_item as u64) > self.b.len() as u64 {
            return Err(DecodeError::Length { field, len: n });
        }
        Ok(n as usize)
    }
}

/// Decodes one frame. Never panics; every bound is checked.
pub fn decode(frame: &[u8]) -> Result<TableMsg, DecodeError> {
    if frame.len() > MAX_FRAME_LEN {
        return Err(DecodeError::FrameTooLarge);
    }
    let mut r = Reader { b: frame };
    if r.bytes(2)? != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = r.byte()?;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let flags = r.byte()?;
    if flags & !FLAG_DELTA != 0 {
        return Err(DecodeError::Flags(flags));
    }
    let window = r.u64("window")?;
    let lane = r.u32("lane")?;
    if lane >= MAX_LANES {
        return Err(DecodeError::BadInt("lane"));
    }
    let hop = r.u32("hop")?;
    let base_hop = r.u32("base_hop")?;
    let from = r.u32("from")?;
    let pool = r.u64("pool")?;
    let delta = flags & FLAG_DELTA != 0;
    if delta != (base_hop != 0) || (delta && base_hop >= hop) {
        return Err(DecodeError::BadBase);
    }
    let n_visits = r.len("visits", MAX_RING, 1)?;
    let mut visits = Vec::with_capacity(n_visits);
    for _ in 0..n_visits {
        visits.push(r.u32("visit")?);
    }
    // An entry takes at least 4 bytes (shared, suffix_len, value, age).
    let n = r.len("entries", MAX_TABLE_KEYS, 4)?;
    let mut entries: Vec<(Vec<u8>, u64, u32)> = Vec::with_capacity(n);
    for i in 0..n {
        let prev: &[u8] = entries.last().map_or(&[], |(k, _, _)| k.as_slice());
        let shared = r.u64("shared")?;
        if shared > prev.len() as u64 {
            return Err(DecodeError::Length {
                field: "shared",
                len: shared,
            });
        }
        let suffix = r.u64("suffix")?;
        if shared + suffix > MAX_KEY_LEN as u64 {
            return Err(DecodeError::Length {
                field: "key",
                len: shared.saturating_add(suffix),
            });
        }
        let tail = r.bytes(suffix as usize)?;
        let mut key = Vec::with_capacity((shared + suffix) as usize);
        key.extend_from_slice(&prev[..shared as usize]);
        key.extend_from_slice(tail);
        if i > 0 && key.as_slice() <= prev {
            return Err(DecodeError::Unsorted(i));
        }
        let z = r.varint(66, "value")?;
        let free = unzigzag(z, pool).ok_or(DecodeError::BadInt("value"))?;
        let age = r.u32("age")?;
        let modified = hop.checked_sub(age).ok_or(DecodeError::BadInt("age"))?;
        entries.push((key, free, modified));
    }
    if !r.b.is_empty() {
        return Err(DecodeError::Trailing(r.b.len()));
    }
    Ok(TableMsg {
        window,
        lane,
        hop,
        from,
        base_hop,
        pool,
        visits,
        entries,
    })
}
