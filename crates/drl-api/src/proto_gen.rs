//! Hand-built protobuf messages for the decoders' tests: fields in any
//! order, repeated, unknown, of the wrong wire type, or with bad bytes
//! (what a client other than prost may send).

use proptest::prelude::*;
use prost::encoding::encode_varint;

use crate::wire::{FIXED32, FIXED64, LEN, VARINT};

/// A varint.
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    encode_varint(v, out);
}

/// A length-delimited field `field` holding `b`.
pub fn put_len(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_varint(out, field << 3 | LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// One field of a hand-built message.
#[derive(Debug, Clone)]
pub enum Field {
    /// Length-delimited: number, bytes.
    Str(u64, Vec<u8>),
    /// Varint: number, value.
    Varint(u64, u64),
    /// Fixed 64-bit: number.
    Fixed64(u64),
    /// Fixed 32-bit: number.
    Fixed32(u64),
}

/// Writes `fields` in order.
pub fn put_fields(out: &mut Vec<u8>, fields: &[Field]) {
    for f in fields {
        match f {
            Field::Str(n, b) => put_len(out, *n, b),
            Field::Varint(n, v) => {
                put_varint(out, n << 3 | VARINT);
                put_varint(out, *v);
            }
            Field::Fixed64(n) => {
                put_varint(out, n << 3 | FIXED64);
                out.extend_from_slice(&[7; 8]);
            }
            Field::Fixed32(n) => {
                put_varint(out, n << 3 | FIXED32);
                out.extend_from_slice(&[7; 4]);
            }
        }
    }
}

/// Any field: numbers 1-3 (the messages' own), unknown ones, the largest;
/// text, any UTF-8, or any bytes.
pub fn field() -> impl Strategy<Value = Field> {
    let text = prop_oneof![
        "[a-z]{0,6}".prop_map(String::into_bytes),
        ".{0,4}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..4),
    ];
    let n = prop_oneof![Just(1u64), Just(2), Just(3), 4u64..40, Just(536_870_911)];
    prop_oneof![
        (n.clone(), text).prop_map(|(n, b)| Field::Str(n, b)),
        (n.clone(), any::<u64>()).prop_map(|(n, v)| Field::Varint(n, v)),
        n.clone().prop_map(Field::Fixed64),
        n.prop_map(Field::Fixed32),
    ]
}
