use super::*;
use crate::frame;
use crate::pb::{CheckItem, CheckRequest as PbRequest, CheckResponse};
use crate::proto_gen::{Field, field, put_fields, put_len, put_varint};
use drl_core::DenyReason;
use proptest::prelude::*;
use prost::Message as _;

/// prost's reading of `msg`, as the items the handler would decide.
fn prost_items(msg: &[u8]) -> Result<Vec<(String, String, u64)>, prost::DecodeError> {
    PbRequest::decode(msg).map(|r| {
        r.requests
            .into_iter()
            .map(|i| (i.limit, i.key, i.cost.unwrap_or(1)))
            .collect()
    })
}

fn ours(msg: &[u8]) -> Option<Vec<(String, String, u64)>> {
    decode_check(msg).map(|items| {
        items
            .iter()
            .map(|i| (i.limit.to_string(), i.key.to_string(), i.cost))
            .collect()
    })
}

fn result_fields() -> impl Strategy<Value = ResultFields> {
    let v = prop_oneof![Just(0u64), Just(1), Just(127), Just(128), any::<u64>()];
    (
        any::<bool>(),
        v.clone(),
        v.clone(),
        prop::option::of(v.clone()),
        v.clone(),
        v.clone(),
        prop_oneof![
            Just(""),
            Just(DenyReason::OverLimit.as_str()),
            Just(DenyReason::CostExceedsCapacity.as_str())
        ],
        (v.clone(), v.clone(), v, any::<bool>()),
    )
        .prop_map(
            |(
                allowed,
                limit,
                remaining,
                retry_after_ms,
                reset_after_ms,
                delay_ms,
                reason,
                (reservation_id, charged, refunded, expired),
            )| {
                ResultFields {
                    allowed,
                    limit,
                    remaining,
                    retry_after_ms,
                    reset_after_ms,
                    delay_ms,
                    reason,
                    reservation_id,
                    charged,
                    refunded,
                    expired,
                }
            },
        )
}

#[test]
fn a_usual_request_is_read_in_place() {
    let msg = PbRequest {
        requests: vec![
            CheckItem {
                limit: "api".into(),
                key: "tenant-1".into(),
                cost: None,
                ..Default::default()
            },
            CheckItem {
                limit: "bytes".into(),
                key: "ünïcode".into(),
                cost: Some(0),
                ..Default::default()
            },
        ],
    }
    .encode_to_vec();
    let items = decode_check(&msg).unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        (items[0].limit, items[0].key, items[0].cost),
        ("api", "tenant-1", 1)
    );
    assert_eq!(
        (items[1].limit, items[1].key, items[1].cost),
        ("bytes", "ünïcode", 0)
    );
    // The strings are the request's own bytes, not copies.
    let range = msg.as_ptr_range();
    assert!(range.contains(&items[0].key.as_ptr()));
    assert_eq!(decode_check(&[]).unwrap().len(), 0, "an empty request");
}

#[test]
fn what_it_does_not_take_is_left_to_prost() {
    // Invalid UTF-8: prost refuses it too.
    let mut bad = Vec::new();
    let mut item = Vec::new();
    put_len(&mut item, 1, &[0xff, 0xfe]);
    put_len(&mut bad, 1, &item);
    assert_eq!(ours(&bad), None);
    assert!(prost_items(&bad).is_err());
    // A group (wire types 3 and 4) as an unknown field: prost skips it,
    // this decoder leaves it to prost.
    let group = [0x0a, 0x00, 0x23, 0x08, 0x01, 0x24];
    assert_eq!(ours(&group), None);
    assert_eq!(
        prost_items(&group).unwrap(),
        vec![(String::new(), String::new(), 1)]
    );
    // A known field with the wrong wire type, a truncated length, field 0,
    // a varint of 11 bytes, a tenth varint byte over 1.
    for msg in [
        &[0x08, 0x01][..],
        &[0x0a, 0x05, 0x00],
        &[0x02, 0x00],
        &[
            0x0a, 0x02, 0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
        ],
        &[
            0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ],
    ] {
        assert_eq!(ours(msg), None, "{msg:?}");
        assert!(prost_items(msg).is_err(), "{msg:?}");
    }
    // The largest varint prost takes (a tenth byte of 1) is taken.
    let max = [
        0x0a, 0x0b, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    assert_eq!(
        ours(&max).unwrap(),
        vec![(String::new(), String::new(), u64::MAX)]
    );
    assert_eq!(prost_items(&max).unwrap(), ours(&max).unwrap());
}

#[test]
fn results_map_decisions_as_the_api_says() {
    let admitted = Decision {
        allowed: true,
        remaining: 9,
        limit: 10,
        retry_after: Some(0),
        reset_after: 1_500_000,
        delay: 1,
        reason: None,
    };
    let r = ResultFields::of(&admitted);
    assert_eq!(r.retry_after_ms, None, "admitted: no retry_after_ms");
    assert_eq!((r.reset_after_ms, r.delay_ms, r.reason), (2, 1, ""));
    let denied = Decision {
        allowed: false,
        retry_after: Some(2_000_001),
        reason: Some(DenyReason::OverLimit),
        ..admitted
    };
    let r = ResultFields::of(&denied);
    assert_eq!((r.retry_after_ms, r.reason), (Some(3), "over_limit"));
    let never = Decision {
        retry_after: None,
        reason: Some(DenyReason::CostExceedsCapacity),
        ..denied
    };
    assert_eq!(ResultFields::of(&never).retry_after_ms, None);
}

#[test]
fn varint_lengths_at_their_edges() {
    for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX >> 1, u64::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        assert_eq!(encoded_len_varint(v), out.len(), "{v}");
        assert_eq!(Reader(&out).varint(), Some(v));
    }
}

proptest! {
    /// Whatever prost encodes is read in place, to the same items.
    #[test]
    fn prost_encoded_requests_are_read_as_prost_reads_them(
        items in prop::collection::vec(
            (".{0,8}", ".{0,12}", prop::option::of(any::<u64>())),
            0..6,
        ),
    ) {
        let msg = PbRequest {
            requests: items
                .into_iter()
                .map(|(limit, key, cost)| CheckItem { limit, key, cost, ..Default::default() })
                .collect(),
        }
        .encode_to_vec();
        prop_assert_eq!(ours(&msg), Some(prost_items(&msg).unwrap()));
    }

    /// An item with a `mode` or a `reservation_id` is left to prost; one
    /// without (TAKE, the default, is not encoded) is read in place.
    #[test]
    fn costs_known_afterwards_are_left_to_prost(
        items in prop::collection::vec(
            (".{0,8}", prop::option::of(any::<u64>()), 0i32..6, prop_oneof![Just(0u64), any::<u64>()]),
            1..4,
        ),
    ) {
        let plain = items.iter().all(|(_, _, mode, id)| *mode == 0 && *id == 0);
        let msg = PbRequest {
            requests: items
                .into_iter()
                .map(|(key, cost, mode, reservation_id)| CheckItem {
                    limit: "l".into(),
                    key,
                    cost,
                    mode,
                    reservation_id,
                })
                .collect(),
        }
        .encode_to_vec();
        if plain {
            prop_assert_eq!(ours(&msg), Some(prost_items(&msg).unwrap()));
        } else {
            prop_assert_eq!(ours(&msg), None);
            prop_assert!(PbRequest::decode(&msg[..]).is_ok());
        }
    }

    /// Hand-built messages (any order, repeated and unknown fields, bad
    /// UTF-8, wrong wire types, cut anywhere): this decoder takes exactly
    /// what prost takes, and reads the same items.
    #[test]
    fn hand_built_requests_agree_with_prost(
        items in prop::collection::vec(prop::collection::vec(field(), 0..5), 0..4),
        top in prop::collection::vec(field(), 0..3),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut msg = Vec::new();
        for fields in &items {
            let mut item = Vec::new();
            put_fields(&mut item, fields);
            put_len(&mut msg, 1, &item);
        }
        // Top-level field 1 is the items above: arbitrary bytes there
        // could hold a group.
        let top: Vec<Field> = top
            .into_iter()
            .map(|f| match f {
                Field::Str(1, b) => Field::Str(2, b),
                f => f,
            })
            .collect();
        put_fields(&mut msg, &top);
        if truncate && !msg.is_empty() {
            msg.truncate(cut.index(msg.len()));
        }
        // Every message built here is one prost reads, or one it refuses;
        // none holds a group: so the two agree exactly, except that an item
        // with a field 4 or 5 (`mode`, `reservation_id`) is left to prost.
        let new_fields = items.iter().flatten().any(|f| {
            matches!(f, Field::Str(4 | 5, _) | Field::Varint(4 | 5, _) | Field::Fixed64(4 | 5) | Field::Fixed32(4 | 5))
        });
        match ours(&msg) {
            Some(got) => prop_assert_eq!(Ok(got), prost_items(&msg).map_err(drop)),
            None if new_fields => {}
            None => prop_assert!(prost_items(&msg).is_err()),
        }
    }

    /// Arbitrary bytes: this decoder never takes what prost refuses, and
    /// reads what it takes as prost does.
    #[test]
    fn arbitrary_bytes_never_read_differently(msg in prop::collection::vec(any::<u8>(), 0..48)) {
        if let Some(items) = ours(&msg) {
            prop_assert_eq!(Ok(items), prost_items(&msg).map_err(|e| e.to_string()));
        }
    }

    /// The response is prost's, byte for byte, framed as `frame::encode`
    /// frames it.
    #[test]
    fn responses_are_prost_bytes(results in prop::collection::vec(result_fields(), 0..5)) {
        let got = encode_response(&results);
        let want = frame::encode(&CheckResponse {
            results: results.iter().map(ResultFields::message).collect(),
        });
        prop_assert_eq!(got, want);
    }
}
