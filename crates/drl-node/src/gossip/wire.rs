//! The gossip payload: many limit keys per datagram, prefix-compressed.
//!
//! ```text
//! u8   version (1)
//! u8   algorithm (1 = grd, 2 = fps): receivers ignore other algorithms
//! u16  entry count (big endian)
//! per entry, keys in ascending byte order:
//!   u8   shared   bytes shared with the previous key (0 for the first)
//!   u8   suffix   length of the rest of the key
//!   [suffix] bytes
//!   f32  value    published rate (grd) or weight (fps), big endian
//! ```
//!
//! Keys share long prefixes (`<limit name>\0<tenant>|...`), so the delta
//! against the previous key usually costs 2 bytes plus the differing tail.
//! Every length is checked against the remaining bytes; a key is at most
//! [`MAX_KEY_LEN`] bytes; values must be finite and non-negative.

/// Largest key carried on the wire, bytes.
pub const MAX_KEY_LEN: usize = 255;
/// Payload version.
pub const VERSION: u8 = 1;
/// Fixed bytes before the entries.
pub const HEAD_LEN: usize = 4;

/// One (key, value) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The gossip key (limit name, NUL, limit key).
    pub key: Vec<u8>,
    /// The published value.
    pub value: f32,
}

/// A malformed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than a field needs.
    #[error("truncated gossip payload")]
    Truncated,
    /// Unknown payload version.
    #[error("unknown gossip payload version {0}")]
    Version(u8),
    /// A shared-prefix length longer than the previous key.
    #[error("bad key delta")]
    BadDelta,
    /// A key above [`MAX_KEY_LEN`] bytes.
    #[error("key too long")]
    KeyTooLong,
    /// Keys not in strictly ascending order.
    #[error("keys out of order")]
    Order,
    /// A negative or non-finite value.
    #[error("bad value")]
    BadValue,
    /// Bytes after the last entry.
    #[error("trailing bytes")]
    Trailing,
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count().min(255)
}

/// Encodes `entries` (sorted by key, each key at most [`MAX_KEY_LEN`]
/// bytes) into as many payloads as needed, each at most `max_payload`
/// bytes. Entries with longer keys are skipped.
pub fn encode_batches(algorithm: u8, entries: &[Entry], max_payload: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    let mut prev: &[u8] = &[];
    let start = |buf: &mut Vec<u8>| {
        buf.clear();
        buf.extend_from_slice(&[VERSION, algorithm, 0, 0]);
    };
    start(&mut cur);
    for e in entries {
        if e.key.len() > MAX_KEY_LEN {
            continue;
        }
        let mut shared = shared_prefix(prev, &e.key);
        let mut need = 2 + e.key.len() - shared + 4;
        if cur.len() + need > max_payload || count == u16::MAX {
            if count > 0 {
                cur[2..4].copy_from_slice(&count.to_be_bytes());
                out.push(std::mem::take(&mut cur));
            }
            start(&mut cur);
            count = 0;
            shared = 0;
            need = 2 + e.key.len() + 4;
            if cur.len() + need > max_payload {
                continue;
            }
        }
        cur.push(shared as u8);
        cur.push((e.key.len() - shared) as u8);
        cur.extend_from_slice(&e.key[shared..]);
        cur.extend_from_slice(&e.value.to_be_bytes());
        count += 1;
        prev = &e.key;
    }
    if count > 0 {
        cur[2..4].copy_from_slice(&count.to_be_bytes());
        out.push(cur);
    }
    out
}

/// Decodes a payload: its algorithm byte and entries.
pub fn decode(payload: &[u8]) -> Result<(u8, Vec<Entry>), WireError> {
    if payload.len() < HEAD_LEN {
        return Err(WireError::Truncated);
    }
    if payload[0] != VERSION {
        return Err(WireError::Version(payload[0]));
    }
    let algorithm = payload[1];
    let count = u16::from_be_bytes([payload[2], payload[3]]) as usize;
    // Each entry takes at least 6 bytes: bound the allocation by the input.
    if count > (payload.len() - HEAD_LEN) / 6 {
        return Err(WireError::Truncated);
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(count);
    let mut rest = &payload[HEAD_LEN..];
    for _ in 0..count {
        if rest.len() < 2 {
            return Err(WireError::Truncated);
        }
        let shared = rest[0] as usize;
        let suffix = rest[1] as usize;
        rest = &rest[2..];
        let prev: &[u8] = entries.last().map_or(&[], |e| &e.key);
        if shared > prev.len() {
            return Err(WireError::BadDelta);
        }
        if shared + suffix > MAX_KEY_LEN {
            return Err(WireError::KeyTooLong);
        }
        if rest.len() < suffix + 4 {
            return Err(WireError::Truncated);
        }
        let mut key = Vec::with_capacity(shared + suffix);
        key.extend_from_slice(&prev[..shared]);
        key.extend_from_slice(&rest[..suffix]);
        if key.as_slice() <= prev && !entries.is_empty() {
            return Err(WireError::Order);
        }
        let value = f32::from_be_bytes([
            rest[suffix],
            rest[suffix + 1],
            rest[suffix + 2],
            rest[suffix + 3],
        ]);
        if !value.is_finite() || value < 0.0 {
            return Err(WireError::BadValue);
        }
        rest = &rest[suffix + 4..];
        entries.push(Entry { key, value });
    }
    if !rest.is_empty() {
        return Err(WireError::Trailing);
    }
    Ok((algorithm, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(k: &str, v: f32) -> Entry {
        Entry {
            key: k.as_bytes().to_vec(),
            value: v,
        }
    }

    #[test]
    fn prefix_compression_round_trips() {
        let entries = vec![
            e("api\0tenant-0001", 10.0),
            e("api\0tenant-0002", 20.5),
            e("api\0tenant-0100", 0.0),
            e("global\0all", 1e6),
        ];
        let b = encode_batches(1, &entries, 1_166);
        assert_eq!(b.len(), 1);
        // Second key costs 2 + 1 + 4 bytes.
        let full: usize = entries.iter().map(|x| 2 + x.key.len() + 4).sum();
        assert!(b[0].len() < HEAD_LEN + full - 20, "{}", b[0].len());
        assert_eq!(decode(&b[0]).unwrap(), (1, entries));
    }

    #[test]
    fn splits_into_bounded_batches() {
        let entries: Vec<Entry> = (0..1_000)
            .map(|i| e(&format!("lim\0key-{i:06}"), i as f32))
            .collect();
        let batches = encode_batches(2, &entries, 1_166);
        assert!(batches.len() > 1);
        let mut back = Vec::new();
        for b in &batches {
            assert!(b.len() <= 1_166);
            let (alg, es) = decode(b).unwrap();
            assert_eq!(alg, 2);
            back.extend(es);
        }
        assert_eq!(back, entries);
    }

    #[test]
    fn rejects_malformed_payloads() {
        let b = encode_batches(1, &[e("a", 1.0), e("b", 2.0)], 1_000).remove(0);
        assert_eq!(decode(&b[..b.len() - 1]), Err(WireError::Truncated));
        let mut t = b.clone();
        t.push(0);
        assert_eq!(decode(&t), Err(WireError::Trailing));
        let mut v = b.clone();
        v[0] = 9;
        assert_eq!(decode(&v), Err(WireError::Version(9)));
        let mut d = b.clone();
        d[4] = 1; // first key claims a shared prefix
        assert_eq!(decode(&d), Err(WireError::BadDelta));
        let nan = encode_batches(1, &[e("a", f32::NAN)], 100).remove(0);
        assert_eq!(decode(&nan), Err(WireError::BadValue));
        let mut huge = vec![VERSION, 1, 0xff, 0xff];
        huge.extend_from_slice(&[0; 20]);
        assert_eq!(decode(&huge), Err(WireError::Truncated));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1_200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn encode_decode_round_trip(
            keys in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..40), 0..200),
            max in 64usize..1_166,
        ) {
            let entries: Vec<Entry> = keys.into_iter().enumerate()
                .map(|(i, k)| Entry { key: k, value: i as f32 }).collect();
            let mut back = Vec::new();
            for b in encode_batches(1, &entries, max) {
                prop_assert!(b.len() <= max);
                back.extend(decode(&b).unwrap().1);
            }
            prop_assert_eq!(back, entries);
        }
    }
}
