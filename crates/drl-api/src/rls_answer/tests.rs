use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::{Value, value::Kind};
use proptest::prelude::*;
use prost::Message as _;

use super::*;
use crate::frame;

/// The message behind a framed response.
fn unframe(b: &Bytes) -> RateLimitResponse {
    assert_eq!(b[0], 0, "uncompressed");
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    assert_eq!(len, b.len() - PREFIX, "the prefix holds the message length");
    RateLimitResponse::decode(&b[PREFIX..]).unwrap()
}

#[test]
fn a_limited_answer_is_what_prost_writes() {
    let a = Answer {
        header_names: None,
        dynamic_metadata: None,
        overall_code: 2,
        statuses: [
            StatusFields {
                code: 1,
                ..Default::default()
            },
            StatusFields {
                code: 2,
                current_limit: Some(LimitFields {
                    name: "per-user",
                    requests_per_unit: 10,
                    unit: 2,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(1_500_000_000),
            },
        ]
        .into_iter()
        .collect(),
        headers: Some(HeaderFields {
            requests_per_unit: 10,
            window_secs: 60,
            remaining: 0,
            reset_secs: 2,
        }),
    };
    let bytes = a.encode();
    assert_eq!(bytes, frame::encode(&a.message()));
    let m = unframe(&bytes);
    assert_eq!(m.overall_code, 2);
    assert_eq!(m.statuses.len(), 2);
    let d = m.statuses[1].duration_until_reset.unwrap();
    assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
    assert_eq!(
        m.statuses[1].current_limit.as_ref().unwrap().name,
        "per-user"
    );
    let h: Vec<(&str, &str)> = m
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(
        h,
        [
            ("RateLimit-Limit", "10"),
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "2"),
        ]
    );
}

#[test]
fn an_empty_duration_and_limit_are_still_present() {
    // A present message is written even when all its fields are defaults.
    let a = Answer {
        header_names: None,
        dynamic_metadata: None,
        overall_code: 0,
        statuses: [StatusFields {
            code: 0,
            current_limit: Some(LimitFields {
                name: "",
                requests_per_unit: 0,
                unit: 0,
            }),
            limit_remaining: 0,
            duration_until_reset: Some(0),
        }]
        .into_iter()
        .collect(),
        headers: None,
    };
    let bytes = a.encode();
    assert_eq!(bytes, frame::encode(&a.message()));
    let m = unframe(&bytes);
    assert!(m.statuses[0].current_limit.is_some());
    assert!(m.statuses[0].duration_until_reset.is_some());
}

/// A generated status: code, current limit (name, rpu, unit), remaining,
/// reset.
type Status = (i32, Option<(String, u32, i32)>, u32, Option<u64>);

fn status() -> impl Strategy<Value = Status> {
    (
        prop_oneof![Just(0), Just(1), Just(2), any::<i32>()],
        proptest::option::of((
            "\\PC{0,12}",
            any::<u32>(),
            prop_oneof![0..8i32, any::<i32>()],
        )),
        prop_oneof![Just(0), Just(u32::MAX), any::<u32>()],
        proptest::option::of(prop_oneof![Just(0), 0..2_000_000_000u64, any::<u64>()]),
    )
}

proptest! {
    /// Any answer is written as prost writes its message.
    #[test]
    fn any_answer_is_what_prost_writes(
        overall_code in prop_oneof![Just(0), Just(1), Just(2), any::<i32>()],
        statuses in prop::collection::vec(status(), 0..7),
        headers in proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())),
        meta in proptest::option::of(prop::collection::btree_map("[a-z]{0,5}", "\\PC{0,8}", 0..3)),
    ) {
        let a = Answer {
        header_names: None,
            dynamic_metadata: meta.map(|m| Struct {
                fields: m
                    .into_iter()
                    .map(|(k, v)| (k, Value { kind: Some(Kind::StringValue(v)) }))
                    .collect(),
            }),
            overall_code,
            statuses: statuses
                .iter()
                .map(|(code, limit, remaining, reset)| StatusFields {
                    code: *code,
                    current_limit: limit.as_ref().map(|(name, rpu, unit)| LimitFields {
                        name,
                        requests_per_unit: *rpu,
                        unit: *unit,
                    }),
                    limit_remaining: *remaining,
                    duration_until_reset: *reset,
                })
                .collect(),
            headers: headers.map(|(requests_per_unit, window_secs, remaining, reset_secs)| HeaderFields {
                requests_per_unit,
                window_secs,
                remaining,
                reset_secs,
            }),
        };
        let bytes = a.encode();
        prop_assert_eq!(&bytes, &frame::encode(&a.message()));
        prop_assert_eq!(unframe(&bytes), a.message());
    }
}

proptest! {
    /// The inlined varint writer writes prost's bytes.
    #[test]
    fn varints_are_prosts(v in prop_oneof![0..300u64, any::<u64>()]) {
        let mut ours = Vec::new();
        put_raw(&mut ours, v);
        let mut theirs = Vec::new();
        prost::encoding::encode_varint(v, &mut theirs);
        prop_assert_eq!(ours.len(), encoded_len_varint(v));
        prop_assert_eq!(ours, theirs);
    }
}
