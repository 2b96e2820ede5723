//! The Cloud Control gossip payload: many keys per datagram,
//! prefix-compressed.
//!
//! ```text
//! u8   version (2)
//! u8   algorithm    1 + index in AlgorithmKind::ALL; receivers ignore others
//! u8   aggregation  1 = peer-table, 2 = push-sum, 3 = flow-updating;
//!                   receivers ignore others
//! u8   flags        0 (reserved)
//! u32  instance     the sender's incarnation (random at start, BE): a new
//!                   value means the sender restarted
//! u64  view         digest of the members the sender has up (BE)
//! u16  entry count (big endian); 0 is a heartbeat
//! per entry, keys in strictly ascending byte order:
//!   u8   shared   bytes shared with the previous key (0 for the first)
//!   u8   suffix   length of the rest of the key
//!   [suffix] bytes
//!   peer-table: f32 value                      (published rate or weight)
//!   push-sum:   u64 seq, f64 value, f64 weight (one push-sum message)
//!   flow-updating: f64 flow, f64 estimate       (one Flow Updating message)
//! ```
//!
//! Keys share long prefixes (`<limit name>\0<tenant>|...`), so the delta
//! against the previous key usually costs 2 bytes plus the differing tail.
//! Every length is checked against the remaining bytes before anything is
//! handed to the caller: a malformed payload changes nothing. A key is at
//! most [`MAX_KEY_LEN`] bytes; values must be finite, and peer-table
//! values non-negative (a push-sum mass may have either sign in value and
//! weight: they are running totals, and a link taken back lowers them).

use crate::gossip::{FlowMsg, GossipMsg};

/// Largest key carried on the wire, bytes.
pub const MAX_KEY_LEN: usize = 255;
/// Payload version.
pub const VERSION: u8 = 2;
/// Fixed bytes before the entries.
pub const HEAD_LEN: usize = 18;

/// What a payload says about its sender's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Allocator code (1 + index in `AlgorithmKind::ALL`).
    pub algorithm: u8,
    /// Aggregation code (1 peer-table, 2 push-sum, 3 flow-updating).
    pub aggregation: u8,
    /// The sender's incarnation.
    pub instance: u32,
    /// Digest of the sender's membership view (itself and the peers it
    /// has up).
    pub view: u64,
}

/// One key's value in a payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Peer table: the sender's published value.
    Published(f32),
    /// Push-sum: one message of the key's push-sum on this link.
    Mass(GossipMsg),
    /// Flow Updating: the sender's flow towards the receiver and its
    /// estimate.
    Flow(FlowMsg),
}

impl Value {
    fn len(aggregation: u8) -> usize {
        match aggregation {
            2 => 24,
            3 => 16,
            _ => 4,
        }
    }
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
    /// Unknown aggregation code.
    #[error("unknown aggregation code {0}")]
    Aggregation(u8),
    /// A shared-prefix length longer than the previous key.
    #[error("bad key delta")]
    BadDelta,
    /// A key above [`MAX_KEY_LEN`] bytes.
    #[error("key too long")]
    KeyTooLong,
    /// Keys not in strictly ascending order.
    #[error("keys out of order")]
    Order,
    /// A non-finite value, or a negative peer-table value.
    #[error("bad value")]
    BadValue,
    /// Bytes after the last entry.
    #[error("trailing bytes")]
    Trailing,
}

/// Encoded payloads, in one reusable buffer (no allocation per tick once
/// it has grown).
#[derive(Debug, Default, Clone)]
pub struct Frames {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Frames {
    /// Forgets every payload (keeps the memory).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Number of payloads.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there is no payload.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Payload `i`.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count().min(255)
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Published(x) => buf.extend_from_slice(&x.to_be_bytes()),
        Value::Mass(m) => {
            buf.extend_from_slice(&m.seq.to_be_bytes());
            buf.extend_from_slice(&m.value.to_be_bytes());
            buf.extend_from_slice(&m.weight.to_be_bytes());
        }
        Value::Flow(m) => {
            buf.extend_from_slice(&m.flow.to_be_bytes());
            buf.extend_from_slice(&m.estimate.to_be_bytes());
        }
    }
}

/// Encodes `entries` (keys strictly ascending, each at most
/// [`MAX_KEY_LEN`] bytes; longer keys are skipped) into `out` as payloads
/// of at most `max_payload` bytes. With no entry, one heartbeat payload
/// (count 0) is written, so that a node with nothing to say still tells
/// its peers it is there.
pub fn encode<'a>(
    header: Header,
    entries: impl IntoIterator<Item = (&'a [u8], Value)>,
    max_payload: usize,
    out: &mut Frames,
) {
    let vlen = Value::len(header.aggregation);
    let mut start = out.buf.len();
    let mut count: u16 = 0;
    let mut prev: &[u8] = &[];
    let head = |buf: &mut Vec<u8>| {
        buf.extend_from_slice(&[VERSION, header.algorithm, header.aggregation, 0]);
        buf.extend_from_slice(&header.instance.to_be_bytes());
        buf.extend_from_slice(&header.view.to_be_bytes());
        buf.extend_from_slice(&[0, 0]);
    };
    let close = |out: &mut Frames, start: usize, count: u16| {
        out.buf[start + 16..start + 18].copy_from_slice(&count.to_be_bytes());
        out.ends.push(out.buf.len());
    };
    head(&mut out.buf);
    for (key, value) in entries {
        if key.len() > MAX_KEY_LEN || HEAD_LEN + 2 + key.len() + vlen > max_payload {
            continue;
        }
        let mut shared = shared_prefix(prev, key);
        if out.buf.len() - start + 2 + key.len() - shared + vlen > max_payload || count == u16::MAX
        {
            close(out, start, count);
            start = out.buf.len();
            head(&mut out.buf);
            count = 0;
            shared = 0;
        }
        out.buf.push(shared as u8);
        out.buf.push((key.len() - shared) as u8);
        out.buf.extend_from_slice(&key[shared..]);
        put_value(&mut out.buf, &value);
        count += 1;
        prev = key;
    }
    close(out, start, count);
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn read_value(aggregation: u8, b: &[u8]) -> Result<Value, WireError> {
    if aggregation == 2 {
        let m = GossipMsg {
            seq: be_u64(b),
            value: f64::from_bits(be_u64(&b[8..])),
            weight: f64::from_bits(be_u64(&b[16..])),
        };
        // Either sign: a push-sum mass may be negative in value and, once
        // a node has taken back a link to a peer that restarted or went
        // down, in weight too (the running totals of a link then fall).
        if !m.value.is_finite() || !m.weight.is_finite() {
            return Err(WireError::BadValue);
        }
        Ok(Value::Mass(m))
    } else if aggregation == 3 {
        let m = FlowMsg {
            flow: f64::from_bits(be_u64(b)),
            estimate: f64::from_bits(be_u64(&b[8..])),
        };
        // A flow has either sign; so may an estimate while flows settle.
        if !m.flow.is_finite() || !m.estimate.is_finite() {
            return Err(WireError::BadValue);
        }
        Ok(Value::Flow(m))
    } else {
        let v = f32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if !v.is_finite() || v < 0.0 {
            return Err(WireError::BadValue);
        }
        Ok(Value::Published(v))
    }
}

/// One pass over the entries; `visit` sees each (key, value).
fn walk(
    payload: &[u8],
    key: &mut Vec<u8>,
    mut visit: impl FnMut(&[u8], Value),
) -> Result<Header, WireError> {
    if payload.len() < HEAD_LEN {
        return Err(WireError::Truncated);
    }
    if payload[0] != VERSION {
        return Err(WireError::Version(payload[0]));
    }
    let header = Header {
        algorithm: payload[1],
        aggregation: payload[2],
        instance: u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
        view: be_u64(&payload[8..]),
    };
    if !matches!(header.aggregation, 1..=3) {
        return Err(WireError::Aggregation(header.aggregation));
    }
    let vlen = Value::len(header.aggregation);
    let count = u16::from_be_bytes([payload[16], payload[17]]) as usize;
    let mut rest = &payload[HEAD_LEN..];
    key.clear();
    for i in 0..count {
        if rest.len() < 2 {
            return Err(WireError::Truncated);
        }
        let shared = rest[0] as usize;
        let suffix = rest[1] as usize;
        rest = &rest[2..];
        if shared > key.len() || (i == 0 && shared > 0) {
            return Err(WireError::BadDelta);
        }
        if shared + suffix > MAX_KEY_LEN {
            return Err(WireError::KeyTooLong);
        }
        if rest.len() < suffix + vlen {
            return Err(WireError::Truncated);
        }
        // Strictly ascending: the new key differs from the previous one
        // first inside the suffix, and is greater there (or extends it).
        let tail = &rest[..suffix];
        if i > 0 {
            let old_tail = &key[shared..];
            if tail <= old_tail {
                return Err(WireError::Order);
            }
        }
        key.truncate(shared);
        key.extend_from_slice(tail);
        let value = read_value(header.aggregation, &rest[suffix..])?;
        rest = &rest[suffix + vlen..];
        visit(key, value);
    }
    if !rest.is_empty() {
        return Err(WireError::Trailing);
    }
    Ok(header)
}

/// Decodes `payload`: checks all of it first, then hands each (key, value)
/// to `visit` in order and returns the header. On error `visit` is never
/// called. `scratch` is a reusable key buffer.
pub fn decode(
    payload: &[u8],
    scratch: &mut Vec<u8>,
    visit: impl FnMut(&[u8], Value),
) -> Result<Header, WireError> {
    walk(payload, scratch, |_, _| {})?;
    walk(payload, scratch, visit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: Header = Header {
        algorithm: 4,
        aggregation: 1,
        instance: 7,
        view: 9,
    };

    fn entries(keys: &[&str]) -> Vec<(Vec<u8>, Value)> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.as_bytes().to_vec(), Value::Published(i as f32)))
            .collect()
    }

    fn all(frames: &Frames) -> Vec<(Vec<u8>, Value)> {
        let mut back = Vec::new();
        let mut scratch = Vec::new();
        for i in 0..frames.len() {
            decode(frames.get(i), &mut scratch, |k, v| {
                back.push((k.to_vec(), v))
            })
            .unwrap();
        }
        back
    }

    #[test]
    fn prefix_compression_round_trips() {
        let es = entries(&[
            "api\0tenant-0001",
            "api\0tenant-0002",
            "api\0tenant-0100",
            "g\0all",
        ]);
        let mut f = Frames::default();
        encode(H, es.iter().map(|(k, v)| (k.as_slice(), *v)), 1_166, &mut f);
        assert_eq!(f.len(), 1);
        let full: usize = es.iter().map(|(k, _)| 2 + k.len() + 4).sum();
        assert!(f.get(0).len() < HEAD_LEN + full - 20, "{}", f.get(0).len());
        assert_eq!(all(&f), es);
    }

    #[test]
    fn no_entry_is_one_heartbeat() {
        let mut f = Frames::default();
        encode(H, std::iter::empty(), 1_166, &mut f);
        assert_eq!(f.len(), 1);
        assert_eq!(f.get(0).len(), HEAD_LEN);
        let mut n = 0;
        assert_eq!(decode(f.get(0), &mut Vec::new(), |_, _| n += 1), Ok(H));
        assert_eq!(n, 0);
    }

    #[test]
    fn splits_into_bounded_batches_and_carries_push_sum_mass() {
        let keys: Vec<String> = (0..1_000).map(|i| format!("lim\0key-{i:06}")).collect();
        let h = Header {
            algorithm: 6,
            aggregation: 2,
            instance: u32::MAX,
            view: u64::MAX,
        };
        let es: Vec<(Vec<u8>, Value)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let m = GossipMsg {
                    seq: i as u64,
                    value: -(i as f64),
                    weight: if i % 2 == 0 { 0.5 } else { -0.25 },
                };
                (k.as_bytes().to_vec(), Value::Mass(m))
            })
            .collect();
        let mut f = Frames::default();
        encode(h, es.iter().map(|(k, v)| (k.as_slice(), *v)), 1_166, &mut f);
        assert!(f.len() > 1);
        for i in 0..f.len() {
            assert!(f.get(i).len() <= 1_166);
        }
        assert_eq!(all(&f), es);
    }

    #[test]
    fn rejects_malformed_payloads_without_visiting() {
        let es = entries(&["a", "b"]);
        let mut f = Frames::default();
        encode(H, es.iter().map(|(k, v)| (k.as_slice(), *v)), 1_000, &mut f);
        let b = f.get(0).to_vec();
        let mut seen = 0;
        let mut d = |p: &[u8]| decode(p, &mut Vec::new(), |_, _| seen += 1);
        assert_eq!(d(&b[..b.len() - 1]), Err(WireError::Truncated));
        let mut t = b.clone();
        t.push(0);
        assert_eq!(d(&t), Err(WireError::Trailing));
        let mut v = b.clone();
        v[0] = 9;
        assert_eq!(d(&v), Err(WireError::Version(9)));
        let mut a = b.clone();
        a[2] = 7;
        assert_eq!(d(&a), Err(WireError::Aggregation(7)));
        let mut x = b.clone();
        x[HEAD_LEN] = 1; // first key claims a shared prefix
        assert_eq!(d(&x), Err(WireError::BadDelta));
        let mut o = b.clone();
        let second = HEAD_LEN + 2 + 1 + 4;
        o[second + 2] = b'a'; // "a" again: not ascending
        assert_eq!(d(&o), Err(WireError::Order));
        let mut nan = b.clone();
        nan[HEAD_LEN + 3..HEAD_LEN + 7].copy_from_slice(&f32::NAN.to_be_bytes());
        assert_eq!(d(&nan), Err(WireError::BadValue));
        // A valid first entry followed by a broken second: nothing visited.
        let mut late = b.clone();
        late[second + 1] = 200;
        assert_eq!(d(&late), Err(WireError::Truncated));
        assert_eq!(seen, 0);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1_200)) {
            let mut n = 0;
            let r = decode(&bytes, &mut Vec::new(), |_, _| n += 1);
            if r.is_err() {
                prop_assert_eq!(n, 0);
            }
        }

        #[test]
        fn encode_decode_round_trip(
            keys in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..40), 0..200),
            max in 64usize..1_166,
        ) {
            let es: Vec<(Vec<u8>, Value)> = keys.into_iter().enumerate()
                .map(|(i, k)| (k, Value::Published(i as f32))).collect();
            let mut f = Frames::default();
            encode(H, es.iter().map(|(k, v)| (k.as_slice(), *v)), max, &mut f);
            for i in 0..f.len() {
                prop_assert!(f.get(i).len() <= max);
            }
            prop_assert_eq!(all(&f), es);
        }
    }
}
