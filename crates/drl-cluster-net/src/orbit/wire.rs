//! The Orbit runtime's payloads on the transport's [`ORBIT`] channel:
//! heartbeats (failure detection) and table fragments.
//!
//! ```text
//! heartbeat: kind u8 = 1 | incarnation u64 BE
//! fragment:  kind u8 = 2 | incarnation u64 BE | limit u64 BE | msg u32 BE
//!            | index u16 BE | count u16 BE | bytes
//! ```
//!
//! A table (the `drl_cluster::orbit::codec` frame) larger than one datagram
//! is split into `count` fragments; the receiver reassembles it from the
//! same authenticated sender and incarnation (so fragments of a message
//! sent before a restart never mix with a new one that reuses its number),
//! within bounds (message size, messages in flight, age). A lost fragment loses the table: safe (`docs/orbit.md`:
//! a lost table only costs utilization).
//!
//! [`ORBIT`]: crate::transport::channel::ORBIT

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::transport::MAX_PAYLOAD;

/// Kind byte of a heartbeat.
pub const KIND_HEARTBEAT: u8 = 1;
/// Kind byte of a table fragment.
pub const KIND_FRAGMENT: u8 = 2;
/// Bytes of a fragment header.
pub const FRAGMENT_HEADER: usize = 1 + 8 + 8 + 4 + 2 + 2;
/// Table bytes per fragment.
pub const CHUNK: usize = MAX_PAYLOAD - FRAGMENT_HEADER;
/// Most partially received tables kept at once (oldest evicted first).
pub const MAX_PARTIAL: usize = 64;
/// A partially received table older than this is dropped.
pub const PARTIAL_TTL: Duration = Duration::from_secs(10);

/// One decoded payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload<'a> {
    /// I am alive; `incarnation` identifies this run of the node (its start
    /// time, ns since the Unix epoch): a larger one means it restarted.
    Heartbeat {
        /// The sender's incarnation.
        incarnation: u64,
    },
    /// Part `index` of `count` of table message `msg` for limit `limit`.
    Fragment {
        /// The sender's incarnation.
        incarnation: u64,
        /// Limit fingerprint ([`super::limit_id`]).
        limit: u64,
        /// Sender-local message number.
        msg: u32,
        /// Fragment index, `< count`.
        index: u16,
        /// Fragments in the message, `>= 1`.
        count: u16,
        /// The bytes of this fragment.
        bytes: &'a [u8],
    },
}

/// Encodes a heartbeat.
pub fn heartbeat(incarnation: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(9);
    v.push(KIND_HEARTBEAT);
    v.extend_from_slice(&incarnation.to_be_bytes());
    v
}

/// Splits an encoded table into fragment payloads; `None` if it would need
/// more than `u16::MAX` fragments.
pub fn fragments(incarnation: u64, limit: u64, msg: u32, table: &[u8]) -> Option<Vec<Vec<u8>>> {
    let chunks: Vec<&[u8]> = if table.is_empty() {
        vec![&[][..]]
    } else {
        table.chunks(CHUNK).collect()
    };
    let count = u16::try_from(chunks.len()).ok()?;
    Some(
        chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut v = Vec::with_capacity(FRAGMENT_HEADER + c.len());
                v.push(KIND_FRAGMENT);
                v.extend_from_slice(&incarnation.to_be_bytes());
                v.extend_from_slice(&limit.to_be_bytes());
                v.extend_from_slice(&msg.to_be_bytes());
                v.extend_from_slice(&(i as u16).to_be_bytes());
                v.extend_from_slice(&count.to_be_bytes());
                v.extend_from_slice(c);
                v
            })
            .collect(),
    )
}

/// Decodes a payload; `None` if malformed.
pub fn decode(p: &[u8]) -> Option<Payload<'_>> {
    match *p.first()? {
        KIND_HEARTBEAT if p.len() == 9 => Some(Payload::Heartbeat {
            incarnation: u64::from_be_bytes(p[1..9].try_into().ok()?),
        }),
        KIND_FRAGMENT if p.len() >= FRAGMENT_HEADER => {
            let incarnation = u64::from_be_bytes(p[1..9].try_into().ok()?);
            let limit = u64::from_be_bytes(p[9..17].try_into().ok()?);
            let msg = u32::from_be_bytes(p[17..21].try_into().ok()?);
            let index = u16::from_be_bytes(p[21..23].try_into().ok()?);
            let count = u16::from_be_bytes(p[23..25].try_into().ok()?);
            let bytes = &p[FRAGMENT_HEADER..];
            if count == 0 || index >= count || bytes.len() > CHUNK {
                return None;
            }
            // Every fragment but the last is full.
            if index + 1 < count && bytes.len() != CHUNK {
                return None;
            }
            Some(Payload::Fragment {
                incarnation,
                limit,
                msg,
                index,
                count,
                bytes,
            })
        }
        _ => None,
    }
}

#[derive(Debug)]
struct Partial {
    parts: Vec<Option<Vec<u8>>>,
    have: usize,
    started: Instant,
}

/// Reassembles fragmented tables, bounded in memory.
#[derive(Debug)]
pub struct Reassembler {
    max_message: usize,
    partial: BTreeMap<(u32, u64, u64, u32), Partial>,
}

impl Reassembler {
    /// A reassembler accepting tables of at most `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self {
            max_message,
            partial: BTreeMap::new(),
        }
    }

    /// Partially received tables held.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Adds a fragment from `sender`; returns `(limit, table bytes)` when a
    /// table is complete. Oversized, inconsistent or duplicate fragments are
    /// ignored.
    pub fn push(&mut self, sender: u32, p: &Payload<'_>, now: Instant) -> Option<(u64, Vec<u8>)> {
        let Payload::Fragment {
            incarnation,
            limit,
            msg,
            index,
            count,
            bytes,
        } = *p
        else {
            return None;
        };
        if count == 1 {
            return Some((limit, bytes.to_vec()));
        }
        if (count as usize).saturating_mul(CHUNK) > self.max_message.saturating_add(CHUNK) {
            return None;
        }
        self.partial
            .retain(|_, v| now.saturating_duration_since(v.started) < PARTIAL_TTL);
        let key = (sender, incarnation, limit, msg);
        if !self.partial.contains_key(&key) && self.partial.len() >= MAX_PARTIAL {
            let oldest = self
                .partial
                .iter()
                .min_by_key(|(_, v)| v.started)
                .map(|(k, _)| *k)?;
            self.partial.remove(&oldest);
        }
        let e = self.partial.entry(key).or_insert_with(|| Partial {
            parts: vec![None; count as usize],
            have: 0,
            started: now,
        });
        if e.parts.len() != count as usize {
            return None;
        }
        let slot = e.parts.get_mut(index as usize)?;
        if slot.is_none() {
            *slot = Some(bytes.to_vec());
            e.have += 1;
        }
        if e.have < e.parts.len() {
            return None;
        }
        let done = self.partial.remove(&key)?;
        let mut out = Vec::with_capacity(done.parts.len() * CHUNK);
        for part in done.parts.into_iter().flatten() {
            out.extend_from_slice(&part);
        }
        Some((limit, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_round_trip() {
        let b = heartbeat(42);
        assert_eq!(decode(&b), Some(Payload::Heartbeat { incarnation: 42 }));
        assert_eq!(decode(&b[..8]), None);
    }

    #[test]
    fn fragments_reassemble_in_any_order_once() {
        let table: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i * 7) as u8).collect();
        let frags = fragments(77, 9, 3, &table).unwrap();
        assert_eq!(frags.len(), 4);
        let mut r = Reassembler::new(1 << 20);
        let now = Instant::now();
        let order = [2, 0, 0, 3];
        for &i in &order {
            assert_eq!(r.push(5, &decode(&frags[i]).unwrap(), now), None);
        }
        let (limit, got) = r.push(5, &decode(&frags[1]).unwrap(), now).unwrap();
        assert_eq!((limit, got), (9, table));
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn fragments_of_two_incarnations_never_mix() {
        let old = vec![1u8; 2 * CHUNK];
        let new = vec![2u8; 2 * CHUNK];
        let a = fragments(1, 5, 0, &old).unwrap();
        let b = fragments(2, 5, 0, &new).unwrap();
        let mut r = Reassembler::new(1 << 20);
        let now = Instant::now();
        assert_eq!(r.push(3, &decode(&a[0]).unwrap(), now), None);
        assert_eq!(r.push(3, &decode(&b[1]).unwrap(), now), None);
        let (_, got) = r.push(3, &decode(&b[0]).unwrap(), now).unwrap();
        assert_eq!(got, new);
    }

    #[test]
    fn oversized_and_malformed_fragments_are_refused() {
        let table = vec![1u8; 4 * CHUNK];
        let frags = fragments(1, 1, 1, &table).unwrap();
        let mut r = Reassembler::new(CHUNK);
        assert_eq!(r.push(1, &decode(&frags[0]).unwrap(), Instant::now()), None);
        assert_eq!(r.pending(), 0);
        let mut bad = frags[0].clone();
        bad[21..23].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[7, 1, 2]), None);
    }

    proptest::proptest! {
        /// Hostile payloads never panic the decoder or the reassembler, and
        /// nothing larger than the bound is ever reassembled.
        #[test]
        fn hostile_fragments_are_bounded(
            payloads in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), 0..64),
            headers in proptest::collection::vec((0u64..3, 0u32..3, 0u16..4, 1u16..5), 0..64),
        ) {
            let mut r = Reassembler::new(2 * CHUNK);
            let now = Instant::now();
            for p in &payloads {
                if let Some(p) = decode(p) {
                    if let Some((_, t)) = r.push(1, &p, now) {
                        proptest::prop_assert!(t.len() <= 3 * CHUNK);
                    }
                }
            }
            for &(inc, msg, index, count) in &headers {
                let mut f = vec![KIND_FRAGMENT];
                f.extend_from_slice(&inc.to_be_bytes());
                f.extend_from_slice(&1u64.to_be_bytes());
                f.extend_from_slice(&msg.to_be_bytes());
                f.extend_from_slice(&index.to_be_bytes());
                f.extend_from_slice(&count.to_be_bytes());
                let full = index + 1 < count;
                f.extend(std::iter::repeat_n(7u8, if full { CHUNK } else { 3 }));
                if let Some(p) = decode(&f) {
                    if let Some((_, t)) = r.push(2, &p, now) {
                        proptest::prop_assert!(t.len() <= 3 * CHUNK);
                        proptest::prop_assert!(t.iter().all(|&b| b == 7));
                    }
                }
                proptest::prop_assert!(r.pending() <= MAX_PARTIAL);
            }
        }
    }
}
