//! An Envoy RLS v3 answer as fields, sans-IO, and its two renderings: the
//! prost `RateLimitResponse` (tonic's service) and the framed response
//! bytes written directly (the hot path: no `Vec` of statuses, no
//! `String` per header, nothing to drop).
//!
//! [`Answer::encode`] writes exactly the bytes [`crate::frame::encode`]
//! writes for [`Answer::message`]: fields in number order, proto3 defaults
//! (0, "") left out, a present message (`current_limit`,
//! `duration_until_reset`) written even when empty.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::google::protobuf::{Duration, Struct};
use prost::Message as _;
use prost::encoding::encoded_len_varint;
use smallvec::SmallVec;

use crate::frame::PREFIX;
use crate::wire::{put_raw, put_varint};

/// Statuses held on the stack (more go to the heap).
pub const INLINE_STATUSES: usize = 4;

/// A `RateLimit` (a status's `current_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitFields<'a> {
    /// `name` (the rule's, or "").
    pub name: &'a str,
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit`, as the proto's enum number.
    pub unit: i32,
}

/// One `DescriptorStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusFields<'a> {
    /// `code`, as the proto's enum number.
    pub code: i32,
    /// `current_limit`.
    pub current_limit: Option<LimitFields<'a>>,
    /// `limit_remaining`.
    pub limit_remaining: u32,
    /// `duration_until_reset`, in nanoseconds.
    pub duration_until_reset: Option<u64>,
}

/// The `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
/// response headers (of the most restrictive limited status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFields {
    /// The rule's requests per unit.
    pub requests_per_unit: u64,
    /// The rule's window, in whole seconds.
    pub window_secs: u64,
    /// Requests left in the window.
    pub remaining: u64,
    /// Seconds until the window resets (rounded up).
    pub reset_secs: u64,
}

/// A whole `RateLimitResponse`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer<'a> {
    /// `overall_code`, as the proto's enum number.
    pub overall_code: i32,
    /// `statuses`, one per request descriptor.
    pub statuses: SmallVec<[StatusFields<'a>; INLINE_STATUSES]>,
    /// `response_headers_to_add`, when the config asks for them.
    pub headers: Option<HeaderFields>,
    /// Their names (limit, remaining, reset), when not the default
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    pub header_names: Option<[&'a str; 3]>,
    /// `dynamic_metadata`, when the config asks for it.
    pub dynamic_metadata: Option<Struct>,
}

/// `RateLimit-Limit: {rpu}` (the requests per unit alone, as
/// envoyproxy/ratelimit sends it) and the two others, as (name, value)
/// pairs; the values are formatted in `bufs`.
fn header_pairs<'b>(
    h: &HeaderFields,
    names: Option<[&'b str; 3]>,
    bufs: &'b mut HeaderBufs,
) -> [(&'b str, &'b str); 3] {
    let [n_limit, n_remaining, n_reset] =
        names.unwrap_or(["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]);
    let HeaderBufs {
        limit,
        remaining,
        reset,
    } = bufs;
    limit.clear();
    let mut n = itoa::Buffer::new();
    let rpu = n.format(h.requests_per_unit);
    limit.push_str(rpu);
    [
        (n_limit, limit.as_str()),
        (n_remaining, remaining.format(h.remaining)),
        (n_reset, reset.format(h.reset_secs)),
    ]
}

/// Room for the formatted header values, on the stack.
#[derive(Default)]
struct HeaderBufs {
    limit: arrayvec::ArrayString<72>,
    remaining: itoa::Buffer,
    reset: itoa::Buffer,
}

impl Answer<'_> {
    /// The prost message.
    pub fn message(&self) -> RateLimitResponse {
        let mut bufs = HeaderBufs::default();
        RateLimitResponse {
            overall_code: self.overall_code,
            statuses: self.statuses.iter().map(StatusFields::message).collect(),
            response_headers_to_add: self.headers.as_ref().map_or_else(Vec::new, |h| {
                header_pairs(h, self.header_names, &mut bufs)
                    .iter()
                    .map(|&(key, value)| HeaderValue {
                        key: key.to_string(),
                        value: value.to_string(),
                        ..Default::default()
                    })
                    .collect()
            }),
            dynamic_metadata: self.dynamic_metadata.clone(),
            ..Default::default()
        }
    }

    /// The framed response (the message behind its 5-byte prefix), in one
    /// allocation of its exact size.
    pub fn encode(&self) -> Bytes {
        let mut bufs = HeaderBufs::default();
        let headers = self
            .headers
            .as_ref()
            .map(|h| header_pairs(h, self.header_names, &mut bufs));
        let header_len = |(k, v): &(&str, &str)| string_len(1, k) + string_len(1, v);
        let lens: SmallVec<[usize; INLINE_STATUSES]> = self
            .statuses
            .iter()
            .map(StatusFields::encoded_len)
            .collect();
        let mut body = varint_len(1, self.overall_code as u64);
        body += lens.iter().map(|&n| nested_len(n)).sum::<usize>();
        for h in headers.iter().flatten() {
            body += nested_len(header_len(h));
        }
        let meta_len = self.dynamic_metadata.as_ref().map(Struct::encoded_len);
        body += meta_len.map_or(0, nested_len);
        let mut out = Vec::with_capacity(PREFIX + body);
        out.push(0);
        out.extend_from_slice(&(body as u32).to_be_bytes());
        put_varint(&mut out, 0x08, self.overall_code as u64);
        for (s, &n) in self.statuses.iter().zip(&lens) {
            out.push(0x12); // statuses = 2
            put_raw(&mut out, n as u64);
            s.encode(&mut out);
        }
        for h in headers.iter().flatten() {
            out.push(0x1a); // response_headers_to_add = 3
            put_raw(&mut out, header_len(h) as u64);
            put_string(&mut out, 0x0a, h.0);
            put_string(&mut out, 0x12, h.1);
        }
        if let (Some(m), Some(n)) = (&self.dynamic_metadata, meta_len) {
            out.push(0x32); // dynamic_metadata = 6
            put_raw(&mut out, n as u64);
            m.encode_raw(&mut out);
        }
        debug_assert_eq!(out.len(), out.capacity());
        Bytes::from(out)
    }
}

impl StatusFields<'_> {
    /// The prost message.
    pub fn message(&self) -> DescriptorStatus {
        DescriptorStatus {
            code: self.code,
            current_limit: self.current_limit.map(|l| PbRateLimit {
                name: l.name.to_string(),
                requests_per_unit: l.requests_per_unit,
                unit: l.unit,
            }),
            limit_remaining: self.limit_remaining,
            duration_until_reset: self.duration_until_reset.map(|ns| Duration {
                seconds: (ns / 1_000_000_000) as i64,
                nanos: (ns % 1_000_000_000) as i32,
            }),
            quota: None,
        }
    }

    fn encoded_len(&self) -> usize {
        varint_len(1, self.code as u64)
            + self.current_limit.map_or(0, |l| nested_len(limit_len(&l)))
            + varint_len(1, u64::from(self.limit_remaining))
            + self
                .duration_until_reset
                .map_or(0, |ns| nested_len(duration_len(ns)))
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, 0x08, self.code as u64);
        if let Some(l) = self.current_limit {
            out.push(0x12); // current_limit = 2
            put_raw(out, limit_len(&l) as u64);
            put_varint(out, 0x08, u64::from(l.requests_per_unit));
            put_varint(out, 0x10, l.unit as u64);
            put_string(out, 0x1a, l.name);
        }
        put_varint(out, 0x18, u64::from(self.limit_remaining));
        if let Some(ns) = self.duration_until_reset {
            out.push(0x22); // duration_until_reset = 4
            put_raw(out, duration_len(ns) as u64);
            put_varint(out, 0x08, ns / 1_000_000_000);
            put_varint(out, 0x10, ns % 1_000_000_000);
        }
    }
}

/// A `RateLimit`'s length: requests_per_unit = 1, unit = 2, name = 3.
fn limit_len(l: &LimitFields<'_>) -> usize {
    varint_len(1, u64::from(l.requests_per_unit))
        + varint_len(1, l.unit as u64)
        + string_len(1, l.name)
}

/// A `Duration`'s length: seconds = 1, nanos = 2.
fn duration_len(ns: u64) -> usize {
    varint_len(1, ns / 1_000_000_000) + varint_len(1, ns % 1_000_000_000)
}

/// A varint field's length with a `key`-byte key; 0 when `v` is 0.
fn varint_len(key: usize, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key + encoded_len_varint(v)
    }
}

/// A string field's length with a `key`-byte key; 0 when empty.
fn string_len(key: usize, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        key + encoded_len_varint(s.len() as u64) + s.len()
    }
}

/// A present message field's length (one-byte key) around `n` bytes.
fn nested_len(n: usize) -> usize {
    1 + encoded_len_varint(n as u64) + n
}

/// A string field, left out when empty (proto3).
#[inline]
fn put_string(out: &mut Vec<u8>, key: u8, s: &str) {
    if !s.is_empty() {
        out.push(key);
        put_raw(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests;
