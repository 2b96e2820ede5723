//! The Orbit table codec: round trips, 1,000,000 keys, and hostile input.

use std::collections::BTreeMap;

use drl_cluster::orbit::TableMsg;
use drl_cluster::orbit::codec::{DecodeError, MAX_FRAME_LEN, decode, encode};
use proptest::prelude::*;

fn msg_strategy() -> impl Strategy<Value = TableMsg> {
    (
        any::<u64>(),
        1u32..u32::MAX,
        any::<u32>(),
        any::<u64>(),
        prop::collection::vec(any::<u32>(), 0..20),
        prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 0..40),
            (any::<u64>(), any::<u32>()),
            0..60,
        ),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_map(
            |(window, hop, from, pool, visits, entries, delta, b)| TableMsg {
                window,
                lane: (b % 16),
                hop,
                from,
                base_hop: if delta { (1 + b % hop).min(hop - 1) } else { 0 },
                pool,
                visits,
                entries: entries
                    .into_iter()
                    .map(|(k, (f, m))| (k, f, m % hop.saturating_add(1).max(1)))
                    .collect(),
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decode_inverts_encode(m in msg_strategy()) {
        let bytes = encode(&m).expect("valid message");
        prop_assert_eq!(decode(&bytes), Ok(m));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode(&bytes);
        // With a valid header in front, the body is parsed further.
        let mut framed = b"OB\x01\x00".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = decode(&framed);
    }

    #[test]
    fn truncated_or_corrupted_frames_are_errors_not_panics(
        m in msg_strategy(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let bytes = encode(&m).expect("valid message");
        let n = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..n]).is_err(), "a strict prefix decoded");
        let mut bad = bytes.clone();
        let i = flip.index(bad.len());
        bad[i] ^= 1 << bit;
        // Either rejected or decoded into some message: never a panic.
        let _ = decode(&bad);
    }
}

#[test]
fn forged_lengths_are_rejected_before_allocating() {
    // Header, no visits, then a claim of 2 million entries with no bytes.
    let mut f = b"OB\x01\x00".to_vec();
    f.extend_from_slice(&[0, 0, 1, 0, 0, 0, 0]);
    f.extend_from_slice(&[0x80, 0x80, 0x80, 0x01]); // n_entries = 2^21
    assert!(matches!(
        decode(&f),
        Err(DecodeError::Length {
            field: "entries",
            ..
        })
    ));
    // Overlong varint.
    let mut g = b"OB\x01\x00".to_vec();
    g.extend_from_slice(&[0x80, 0x00]);
    assert!(matches!(decode(&g), Err(DecodeError::BadInt("window"))));
    assert_eq!(decode(b"XX\x01\x00"), Err(DecodeError::BadMagic));
    assert_eq!(decode(b"OB\x02\x00"), Err(DecodeError::Version(2)));
    assert_eq!(decode(b"OB\x01\x04"), Err(DecodeError::Flags(4)));
    assert_eq!(
        decode(&vec![0; MAX_FRAME_LEN + 1]),
        Err(DecodeError::FrameTooLarge)
    );
}

#[test]
fn unsorted_keys_are_rejected_both_ways() {
    let m = TableMsg {
        hop: 1,
        entries: vec![(b"b".to_vec(), 1, 0), (b"a".to_vec(), 2, 0)],
        ..TableMsg::default()
    };
    assert!(encode(&m).is_err());
}

#[test]
fn carries_one_million_keys() {
    let pool = 3000;
    let entries: BTreeMap<Vec<u8>, u64> = (0..1_000_000u64)
        .map(|i| (format!("user:{i:08}").into_bytes(), pool - i % 200))
        .collect();
    let m = TableMsg {
        window: 42,
        lane: 1,
        hop: 17,
        from: 3,
        base_hop: 0,
        pool,
        visits: vec![12, 13, 14, 15, 16],
        entries: entries
            .into_iter()
            .enumerate()
            .map(|(i, (k, f))| (k, f, 12 + (i % 6) as u32))
            .collect(),
    };
    let bytes = encode(&m).expect("fits");
    let per_key = bytes.len() as f64 / 1e6;
    assert!(per_key < 8.0, "{per_key} bytes per key");
    assert_eq!(decode(&bytes).expect("decodes"), m);
}
