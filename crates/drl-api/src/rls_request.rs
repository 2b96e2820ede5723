//! An Envoy RLS v3 `RateLimitRequest` as the handler reads it: borrowed
//! strings, descriptors on the stack. [`RequestView::of`] views a prost
//! message (tonic's service); [`decode`] reads the request bytes in place
//! (the hot path: no `String` per domain, key and value, no `Vec` of
//! descriptors or entries, nothing to drop), sans-IO.
//!
//! [`decode`] is exact with prost: it answers `Some` only for a message
//! prost decodes, with the same contents, and `None` for anything it does
//! not take (a malformed message, invalid UTF-8, a group, a wrong wire
//! type), which the caller then decodes with prost. As prost reads them:
//! the last `domain`, `hits_addend`, entry `key` and `value` wins; every
//! `descriptors` and `entries` field adds one; a repeated `limit` or
//! `hits_addend` message merges into the one before (its fields, when
//! present, overwrite); unknown fields are skipped; a `uint32` or enum
//! keeps the low 32 bits of its varint.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use smallvec::SmallVec;

use crate::wire::{LEN, Reader, VARINT};

/// Descriptors held on the stack (more go to the heap).
pub const INLINE_DESCRIPTORS: usize = 4;
/// Entries per descriptor held on the stack.
pub const INLINE_ENTRIES: usize = 4;

/// A request: its domain, descriptors and `hits_addend` (0 when absent).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestView<'a> {
    /// `domain`.
    pub domain: &'a str,
    /// `descriptors`.
    pub descriptors: SmallVec<[DescriptorView<'a>; INLINE_DESCRIPTORS]>,
    /// `hits_addend`.
    pub hits_addend: u32,
}

/// One `RateLimitDescriptor`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescriptorView<'a> {
    /// `entries`, in order.
    pub entries: SmallVec<[EntryView<'a>; INLINE_ENTRIES]>,
    /// `limit`: the override, when present.
    pub limit: Option<OverrideView>,
    /// `hits_addend.value`, when the message is present.
    pub hits_addend: Option<u64>,
}

/// One descriptor entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntryView<'a> {
    /// `key`.
    pub key: &'a str,
    /// `value`.
    pub value: &'a str,
}

/// A descriptor's `limit` override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverrideView {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit`, as the proto's enum number.
    pub unit: i32,
}

impl<'a> RequestView<'a> {
    /// A prost message, viewed.
    pub fn of(m: &'a RateLimitRequest) -> Self {
        Self {
            domain: &m.domain,
            descriptors: m.descriptors.iter().map(DescriptorView::of).collect(),
            hits_addend: m.hits_addend,
        }
    }
}

impl<'a> DescriptorView<'a> {
    /// A prost descriptor, viewed.
    pub fn of(d: &'a RateLimitDescriptor) -> Self {
        Self {
            entries: d
                .entries
                .iter()
                .map(|e| EntryView {
                    key: &e.key,
                    value: &e.value,
                })
                .collect(),
            limit: d.limit.as_ref().map(|o| OverrideView {
                requests_per_unit: o.requests_per_unit,
                unit: o.unit,
            }),
            hits_addend: d.hits_addend.as_ref().map(|h| h.value),
        }
    }
}

/// A `RateLimitRequest` message (without its gRPC prefix) read in place,
/// or `None` when prost should decode it instead (see the module docs).
pub fn decode(msg: &[u8]) -> Option<RequestView<'_>> {
    let mut req = RequestView::default();
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, LEN) => req.domain = text(r.bytes()?)?,
            (2, LEN) => req.descriptors.push(descriptor(r.bytes()?)?),
            (3, VARINT) => req.hits_addend = r.varint()? as u32,
            (1..=3, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(req)
}

/// One `RateLimitDescriptor`.
fn descriptor(msg: &[u8]) -> Option<DescriptorView<'_>> {
    let mut d = DescriptorView::default();
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, LEN) => d.entries.push(entry(r.bytes()?)?),
            (2, LEN) => d.limit = Some(limit(r.bytes()?, d.limit.unwrap_or_default())?),
            (3, LEN) => d.hits_addend = Some(uint64_value(r.bytes()?, d.hits_addend.unwrap_or(0))?),
            (1..=3, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(d)
}

/// One `Entry`.
fn entry(msg: &[u8]) -> Option<EntryView<'_>> {
    let mut e = EntryView::default();
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, LEN) => e.key = text(r.bytes()?)?,
            (2, LEN) => e.value = text(r.bytes()?)?,
            (1..=2, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(e)
}

/// A `RateLimitOverride`, merged into `o` (a repeated field's earlier one).
fn limit(msg: &[u8], mut o: OverrideView) -> Option<OverrideView> {
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, VARINT) => o.requests_per_unit = r.varint()? as u32,
            (2, VARINT) => o.unit = r.varint()? as i32,
            (1..=2, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(o)
}

/// A `google.protobuf.UInt64Value`, merged into `v`.
fn uint64_value(msg: &[u8], mut v: u64) -> Option<u64> {
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, VARINT) => v = r.varint()?,
            (1, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(v)
}

/// A string field's text; `None` if not UTF-8 (prost refuses it).
fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

#[cfg(test)]
mod tests;
