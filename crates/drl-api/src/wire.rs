//! The native `Check`'s messages on the wire without prost's message
//! types, sans-IO: [`decode_check`] borrows a `CheckRequest`'s items from
//! the request bytes (no `String` per limit and key, no `Vec` of items),
//! and [`encode_response`] writes the `CheckResult`s straight into the
//! framed response (no `Vec` of prost messages, no `reason` strings).
//!
//! Both are exact to the byte with prost:
//!
//! - [`decode_check`] answers `Some` only for a message prost decodes, with
//!   the same items (the last of a repeated `limit`, `key` or `cost` wins,
//!   unknown fields are skipped). An item with a `mode` or a
//!   `reservation_id` (costs known afterwards) is left to prost. Anything it does not take (a malformed
//!   message, invalid UTF-8, a group) is `None`, and the caller decodes
//!   with prost, which then answers the error it always did.
//! - [`encode_response`] writes the bytes [`crate::frame::encode`] writes for the
//!   same `CheckResponse`: fields in number order, proto3 defaults (false,
//!   0, "") left out, `retry_after_ms` present whenever it is set.
//!
//! The proto: `proto/drl/v1/ratelimit.proto`.

use bytes::Bytes;
use prost::encoding::{decode_varint, encoded_len_varint};
use smallvec::SmallVec;

use crate::frame::PREFIX;
use crate::pb::CheckResult;
use crate::{CheckRequest, INLINE_BATCH};
use drl_core::Decision;
use drl_http::headers::ceil_ms;

/// A decoded request's checks, borrowed from its bytes (small batches on
/// the stack).
pub type Items<'a> = SmallVec<[CheckRequest<'a>; INLINE_BATCH]>;

/// Wire types (the low 3 bits of a field's key).
pub(super) const VARINT: u64 = 0;
pub(super) const FIXED64: u64 = 1;
pub(super) const LEN: u64 = 2;
pub(super) const FIXED32: u64 = 5;

/// A `CheckRequest` message (without its gRPC prefix) as its checks, or
/// `None` when prost should decode it instead (see the module docs). An
/// item's `cost` is 1 when absent, as the handler reads it.
pub fn decode_check(msg: &[u8]) -> Option<Items<'_>> {
    let mut items = Items::new();
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        let (field, wire) = r.key()?;
        if field == 1 {
            if wire != LEN {
                return None;
            }
            items.push(item(r.bytes()?)?);
        } else {
            r.skip(wire)?;
        }
    }
    Some(items)
}

/// One `CheckItem` message.
fn item(msg: &[u8]) -> Option<CheckRequest<'_>> {
    let mut limit = "";
    let mut key = "";
    let mut cost = None;
    let mut r = Reader(msg);
    while !r.0.is_empty() {
        match r.key()? {
            (1, LEN) => limit = std::str::from_utf8(r.bytes()?).ok()?,
            (2, LEN) => key = std::str::from_utf8(r.bytes()?).ok()?,
            (3, VARINT) => cost = Some(r.varint()?),
            (1..=5, _) => return None,
            (_, wire) => r.skip(wire)?,
        }
    }
    Some(CheckRequest {
        limit,
        key,
        cost: cost.unwrap_or(1),
        op: crate::Op::Take,
    })
}

/// The unread rest of a message.
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    /// A varint: one byte (a field key, a short length) read here,
    /// longer ones by prost's own reader (so the two agree on every
    /// overlong or overflowing encoding).
    #[inline]
    pub(super) fn varint(&mut self) -> Option<u64> {
        match self.0 {
            [b, rest @ ..] if *b < 0x80 => {
                self.0 = rest;
                Some(u64::from(*b))
            }
            _ => decode_varint(&mut self.0).ok(),
        }
    }

    /// A field's key: its number (at least 1, at most `u32::MAX >> 3`)
    /// and wire type.
    #[inline]
    pub(super) fn key(&mut self) -> Option<(u64, u64)> {
        let key = self.varint()?;
        if key > u64::from(u32::MAX) || key >> 3 == 0 {
            return None;
        }
        Some((key >> 3, key & 7))
    }

    /// A length-delimited field's bytes.
    #[inline]
    pub(super) fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.0.len() {
            return None;
        }
        let (b, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(b)
    }

    /// Skips an unknown field's value (groups are left to prost).
    pub(super) fn skip(&mut self, wire: u64) -> Option<()> {
        let n = match wire {
            VARINT => return self.varint().map(drop),
            LEN => return self.bytes().map(drop),
            FIXED64 => 8,
            FIXED32 => 4,
            _ => return None,
        };
        self.0 = self.0.get(n..)?;
        Some(())
    }
}

/// One `CheckResult`'s fields, as both the prost message and
/// [`encode_response`] carry them: the one mapping from a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultFields {
    /// `allowed`.
    pub allowed: bool,
    /// `limit`.
    pub limit: u64,
    /// `remaining`.
    pub remaining: u64,
    /// `retry_after_ms`: denied only, and only when a wait admits it.
    pub retry_after_ms: Option<u64>,
    /// `reset_after_ms`.
    pub reset_after_ms: u64,
    /// `delay_ms`.
    pub delay_ms: u64,
    /// `reason` ("" when admitted).
    pub reason: &'static str,
    /// `reservation_id` (0: none).
    pub reservation_id: u64,
    /// `charged`.
    pub charged: u64,
    /// `refunded`.
    pub refunded: u64,
    /// `expired`.
    pub expired: bool,
}

impl ResultFields {
    /// The fields answering `d`.
    pub fn of(d: &Decision) -> Self {
        Self {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ms: if d.allowed {
                None
            } else {
                d.retry_after.map(ceil_ms)
            },
            reset_after_ms: ceil_ms(d.reset_after),
            delay_ms: ceil_ms(d.delay),
            reason: d.reason.map_or("", |r| r.as_str()),
            reservation_id: 0,
            charged: 0,
            refunded: 0,
            expired: false,
        }
    }

    /// The fields answering `o`: its decision and what its reservation
    /// call did.
    pub fn of_outcome(o: &crate::Outcome) -> Self {
        Self {
            reservation_id: o.reservation,
            charged: o.charged,
            refunded: o.refunded,
            expired: o.expired,
            ..Self::of(&o.decision)
        }
    }

    /// The prost message.
    pub fn message(&self) -> CheckResult {
        CheckResult {
            allowed: self.allowed,
            limit: self.limit,
            remaining: self.remaining,
            retry_after_ms: self.retry_after_ms,
            reset_after_ms: self.reset_after_ms,
            delay_ms: self.delay_ms,
            reason: self.reason.to_string(),
            reservation_id: self.reservation_id,
            charged: self.charged,
            refunded: self.refunded,
            expired: self.expired,
        }
    }

    /// The encoded message's length.
    #[inline]
    fn encoded_len(&self) -> usize {
        let opt = |v: u64| if v == 0 { 0 } else { 1 + encoded_len_varint(v) };
        usize::from(self.allowed) * 2
            + opt(self.limit)
            + opt(self.remaining)
            + self.retry_after_ms.map_or(0, |v| 1 + encoded_len_varint(v))
            + opt(self.reset_after_ms)
            + opt(self.delay_ms)
            + if self.reason.is_empty() {
                0
            } else {
                1 + encoded_len_varint(self.reason.len() as u64) + self.reason.len()
            }
            + opt(self.reservation_id)
            + opt(self.charged)
            + opt(self.refunded)
            + usize::from(self.expired) * 2
    }
}

/// A varint, 7 bits a byte, low first (prost's `encode_varint`, written
/// here so that it inlines: an answer holds several).
#[inline]
pub(super) fn put_raw(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A `CheckResponse`'s results (one call's, small batches on the stack).
pub type Results = SmallVec<[ResultFields; INLINE_BATCH]>;

/// The framed `CheckResponse` of `results`, in one allocation of its
/// exact size (a `Vec` with spare capacity would cost `Bytes` a second
/// allocation).
pub fn encode_response(results: &[ResultFields]) -> Bytes {
    let framed = |n: usize| 1 + encoded_len_varint(n as u64) + n;
    let body: usize = results.iter().map(|r| framed(r.encoded_len())).sum();
    let mut out = Vec::with_capacity(PREFIX + body);
    out.push(0);
    out.extend_from_slice(&(body as u32).to_be_bytes());
    for r in results {
        out.push(0x0a); // results = 1, length-delimited
        put_raw(&mut out, r.encoded_len() as u64);
        put_varint(&mut out, 0x08, u64::from(r.allowed));
        put_varint(&mut out, 0x10, r.limit);
        put_varint(&mut out, 0x18, r.remaining);
        if let Some(v) = r.retry_after_ms {
            out.push(0x20);
            put_raw(&mut out, v);
        }
        put_varint(&mut out, 0x28, r.reset_after_ms);
        put_varint(&mut out, 0x30, r.delay_ms);
        if !r.reason.is_empty() {
            out.push(0x3a);
            put_raw(&mut out, r.reason.len() as u64);
            out.extend_from_slice(r.reason.as_bytes());
        }
        put_varint(&mut out, 0x40, r.reservation_id);
        put_varint(&mut out, 0x48, r.charged);
        put_varint(&mut out, 0x50, r.refunded);
        put_varint(&mut out, 0x58, u64::from(r.expired));
    }
    debug_assert_eq!(out.len(), out.capacity());
    Bytes::from(out)
}

/// A varint field with its one-byte key, left out when 0 (proto3).
#[inline]
pub(super) fn put_varint(out: &mut Vec<u8>, key: u8, v: u64) {
    if v != 0 {
        out.push(key);
        put_raw(out, v);
    }
}

#[cfg(test)]
mod tests;
