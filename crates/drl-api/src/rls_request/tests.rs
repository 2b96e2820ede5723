use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use prost::Message as _;

use super::*;
use crate::proto_gen::{Field, field, put_fields, put_len};

/// A view as owned values, to compare.
type Owned = (String, Vec<OwnedDescriptor>, u32);
type OwnedDescriptor = (Vec<(String, String)>, Option<(u32, i32)>, Option<u64>);

fn owned(v: &RequestView<'_>) -> Owned {
    (
        v.domain.to_string(),
        v.descriptors
            .iter()
            .map(|d| {
                (
                    d.entries
                        .iter()
                        .map(|e| (e.key.to_string(), e.value.to_string()))
                        .collect(),
                    d.limit.map(|o| (o.requests_per_unit, o.unit)),
                    d.hits_addend,
                )
            })
            .collect(),
        v.hits_addend,
    )
}

/// prost's reading of `msg`.
fn theirs(msg: &[u8]) -> Result<Owned, prost::DecodeError> {
    RateLimitRequest::decode(msg).map(|m| owned(&RequestView::of(&m)))
}

fn ours(msg: &[u8]) -> Option<Owned> {
    decode(msg).map(|v| owned(&v))
}

#[test]
fn a_usual_request_is_read_in_place() {
    let m = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "api_key".into(),
                value: "k-1".into(),
            }],
            limit: Some(RateLimitOverride {
                requests_per_unit: 7,
                unit: 2,
            }),
            hits_addend: Some(UInt64Value { value: 3 }),
        }],
        hits_addend: 2,
    };
    let bytes = m.encode_to_vec();
    let v = decode(&bytes).expect("taken");
    assert_eq!(v.domain, "edge");
    assert_eq!(v.hits_addend, 2);
    let d = &v.descriptors[0];
    assert_eq!((d.entries[0].key, d.entries[0].value), ("api_key", "k-1"));
    assert_eq!(
        d.limit,
        Some(OverrideView {
            requests_per_unit: 7,
            unit: 2
        })
    );
    assert_eq!(d.hits_addend, Some(3));
    // Borrowed from the request bytes, not copied.
    let inside = |s: &str| bytes.as_ptr_range().contains(&s.as_ptr());
    assert!(inside(v.domain) && inside(d.entries[0].value));
    assert_eq!(v, RequestView::of(&m));
}

#[test]
fn what_it_does_not_take_is_left_to_prost() {
    // A descriptor holding a group (unknown field 5, wire types 3 .. 4):
    // prost skips it.
    let mut d = vec![0x2b, 0x2c];
    d.extend_from_slice(&[0x0a, 0x00]);
    let mut msg = vec![0x12, d.len() as u8];
    msg.extend_from_slice(&d);
    assert!(decode(&msg).is_none());
    assert!(RateLimitRequest::decode(&msg[..]).is_ok());
    // Invalid UTF-8 in a domain, a wrong wire type, a cut message: prost
    // refuses them too.
    for bad in [
        &[0x0a, 0x01, 0xff][..],
        &[0x08, 0x01][..],
        &[0x12, 0x05, 0x0a][..],
        &[0x00][..],
    ] {
        assert!(decode(bad).is_none(), "{bad:?}");
        assert!(RateLimitRequest::decode(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_repeated_override_merges_as_prost_merges_it() {
    // limit { requests_per_unit: 5 } limit { unit: 3 }: prost merges the
    // second into the first.
    let msg = [
        0x12, 0x08, // descriptors
        0x12, 0x02, 0x08, 0x05, // limit { requests_per_unit: 5 }
        0x12, 0x02, 0x10, 0x03, // limit { unit: 3 }
    ];
    let v = decode(&msg).expect("taken");
    assert_eq!(
        v.descriptors[0].limit,
        Some(OverrideView {
            requests_per_unit: 5,
            unit: 3
        })
    );
    assert_eq!(ours(&msg).ok_or(()), theirs(&msg).map_err(drop));
}

/// Fields of a message whose length-delimited fields 1 ..= `nested` hold
/// messages: arbitrary bytes there could hold a group, so they move to
/// field 4 + n.
fn plain(fields: Vec<Field>, nested: u64) -> Vec<Field> {
    fields
        .into_iter()
        .map(|f| match f {
            Field::Str(n, b) if n <= nested => Field::Str(n + 4, b),
            f => f,
        })
        .collect()
}

/// Top-level fields: the domain (1) and `hits_addend` (3) as generated;
/// a length-delimited field 2 (descriptors, built apart) moves to 6.
fn top(fields: Vec<Field>) -> Vec<Field> {
    fields
        .into_iter()
        .map(|f| match f {
            Field::Str(2, b) => Field::Str(6, b),
            f => f,
        })
        .collect()
}

/// A hand-built descriptor's parts.
#[derive(Debug, Clone)]
enum Part {
    Entry(Vec<Field>),
    Limit(Vec<Field>),
    Hits(Vec<Field>),
    Other(Field),
}

fn part() -> impl Strategy<Value = Part> {
    let fields = || prop::collection::vec(field(), 0..4);
    prop_oneof![
        fields().prop_map(Part::Entry),
        fields().prop_map(Part::Limit),
        fields().prop_map(Part::Hits),
        field().prop_map(Part::Other),
    ]
}

fn put_descriptor(out: &mut Vec<u8>, parts: &[Part]) {
    let mut d = Vec::new();
    for p in parts {
        let mut inner = Vec::new();
        match p {
            Part::Entry(f) => {
                // An entry's fields 1 and 2 are strings: any bytes will do.
                put_fields(&mut inner, f);
                put_len(&mut d, 1, &inner);
            }
            Part::Limit(f) => {
                put_fields(&mut inner, &plain(f.clone(), 0));
                put_len(&mut d, 2, &inner);
            }
            Part::Hits(f) => {
                put_fields(&mut inner, &plain(f.clone(), 0));
                put_len(&mut d, 3, &inner);
            }
            Part::Other(f) => put_fields(&mut d, &plain(vec![f.clone()], 3)),
        }
    }
    put_len(out, 2, &d);
}

fn prost_request() -> impl Strategy<Value = RateLimitRequest> {
    let entry = ("\\PC{0,6}", "\\PC{0,8}").prop_map(|(key, value)| Entry { key, value });
    let descriptor = (
        prop::collection::vec(entry, 0..4),
        proptest::option::of((any::<u32>(), prop_oneof![0..8i32, any::<i32>()])),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(entries, limit, hits)| RateLimitDescriptor {
            entries,
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| UInt64Value { value }),
        });
    (
        "\\PC{0,10}",
        prop::collection::vec(descriptor, 0..6),
        any::<u32>(),
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

proptest! {
    /// Whatever prost encodes is read in place, as prost reads it.
    #[test]
    fn prost_encoded_requests_are_read_as_prost_reads_them(m in prost_request()) {
        let bytes = m.encode_to_vec();
        prop_assert_eq!(decode(&bytes), Some(RequestView::of(&m)));
    }

    /// Hand-built requests (any order, repeats, unknown fields, wrong wire
    /// types, bad UTF-8, cut anywhere): taken exactly when prost takes
    /// them, and read the same.
    #[test]
    fn hand_built_requests_agree_with_prost(
        before in prop::collection::vec(field(), 0..3),
        descriptors in prop::collection::vec(prop::collection::vec(part(), 0..5), 0..4),
        after in prop::collection::vec(field(), 0..3),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut msg = Vec::new();
        put_fields(&mut msg, &top(before));
        for parts in &descriptors {
            put_descriptor(&mut msg, parts);
        }
        put_fields(&mut msg, &top(after));
        if truncate && !msg.is_empty() {
            msg.truncate(cut.index(msg.len()));
        }
        // No message built here holds a group (the one thing this decoder
        // leaves to prost that prost takes): the two agree exactly.
        prop_assert_eq!(ours(&msg).ok_or(()), theirs(&msg).map_err(drop));
    }

    /// Arbitrary bytes: never taken when prost refuses them, and read as
    /// prost reads them when taken.
    #[test]
    fn arbitrary_bytes_never_read_differently(msg in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Some(v) = ours(&msg) {
            prop_assert_eq!(Ok(v), theirs(&msg).map_err(|e| e.to_string()));
        }
    }
}
