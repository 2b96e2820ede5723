//! The `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers-11, and `Retry-After`.
//!
//! - `RateLimit-Policy: "api";q=100;w=1` (draft §3): a List of one String
//!   item per quota, `q` permits (Integer) per `w` seconds (Integer,
//!   omitted when the window is not whole seconds: the draft has no
//!   sub-second window). A multi-quota limit lists `"api.0"`, `"api.1"`,
//!   ... in the config's order; `qu` and `pk` are never sent (the unit is
//!   the draft's default `requests`, a cost of n counting n; keys stay
//!   private).
//! - `RateLimit: "api";r=99;t=1` (draft §4): one item naming the listed
//!   policy that binds the decision ([`binding`]), `r` the whole permits
//!   remaining (floor), `t` seconds (rounded up) until the state is fresh
//!   again; on a denial a wait admits, `t` is the `Retry-After` value
//!   instead (§6: `Retry-After` must not end before the effective window).
//! - `Retry-After: 3` (seconds, rounded up, at least 1) on denials some
//!   wait admits.
//!
//! Integers are capped at 999,999,999,999,999, the largest structured-field
//! Integer (RFC 9651 §3.3.1); names become structured-field Strings
//! ([`push_sf_string`]).

use drl_core::time::SECOND;
use drl_core::{Decision, Nanos, Quota};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The `RateLimit-Policy` header name.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` header name.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The largest structured-field Integer (15 digits, RFC 9651 §3.3.1).
pub const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Whole seconds, rounded up.
#[inline]
pub fn ceil_secs(ns: Nanos) -> u64 {
    ns.div_ceil(SECOND)
}

/// Whole milliseconds, rounded up.
#[inline]
pub fn ceil_ms(ns: Nanos) -> u64 {
    ns.div_ceil(1_000_000)
}

/// Writes `s` as a structured-field String (RFC 9651 §3.3.3): printable
/// ASCII as is, `"` and `\` escaped, any other byte percent-encoded
/// (`café` is `"caf%C3%A9"`), so every name gives a valid field.
pub fn push_sf_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]),
        }
    }
    out.push(b'"');
}

fn push_int(out: &mut Vec<u8>, key: &[u8], n: u64) {
    out.push(b';');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(itoa::Buffer::new().format(n.min(SF_INTEGER_MAX)).as_bytes());
}

/// Bytes written by this module: always visible ASCII, a valid value.
fn value(v: Vec<u8>) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(v)).expect("visible ASCII")
}

/// The `RateLimit-Policy` value of a limit: one item per quota (`name`
/// alone, `name.0`, `name.1`, ... when there are several).
pub fn policy(name: &str, quotas: &[Quota]) -> HeaderValue {
    let mut out = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        if quotas.len() == 1 {
            push_sf_string(&mut out, name);
        } else {
            push_sf_string(&mut out, &format!("{name}.{i}"));
        }
        push_int(&mut out, b"q", q.limit());
        if q.window() % SECOND == 0 {
            push_int(&mut out, b"w", q.window() / SECOND);
        }
    }
    if quotas.is_empty() {
        // Never for a configured limit (it has a quota); still a non-empty
        // list naming the limit.
        push_sf_string(&mut out, name);
        push_int(&mut out, b"q", 0);
    }
    value(out)
}

/// The `RateLimit-Policy` value of a limit whose windows are unknown (a
/// remote limit decided without its config): `"api";q=100`, the quota of
/// the decision (`w` is optional in the draft).
pub fn policy_of_decision(name: &str, d: &Decision) -> HeaderValue {
    let mut out = Vec::with_capacity(name.len() + 24);
    push_sf_string(&mut out, name);
    push_int(&mut out, b"q", d.limit);
    value(out)
}

/// One item of a `RateLimit-Policy` value written by [`policy`] or
/// [`policy_of_decision`].
struct PolicyItem<'a> {
    /// The String, quotes and escapes included.
    name: &'a [u8],
    q: Option<u64>,
    w: Option<u64>,
}

/// The end (past the closing quote) of the String `v` starts with.
fn string_end(v: &[u8]) -> Option<usize> {
    if v.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    loop {
        match v.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// The items of a `RateLimit-Policy` value this module wrote. Stops at
/// anything else (a value from elsewhere yields what precedes it).
fn items(policy: &[u8]) -> impl Iterator<Item = PolicyItem<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while policy.get(at) == Some(&b',') || policy.get(at) == Some(&b' ') {
            at += 1;
        }
        let start = at;
        at += string_end(&policy[at..])?;
        let mut item = PolicyItem {
            name: &policy[start..at],
            q: None,
            w: None,
        };
        while policy.get(at) == Some(&b';') {
            let key = at + 1;
            let eq = key + policy[key..].iter().position(|&b| b == b'=')?;
            let end = policy[eq + 1..]
                .iter()
                .position(|&b| b == b';' || b == b',')
                .map_or(policy.len(), |p| eq + 1 + p);
            let n = std::str::from_utf8(&policy[eq + 1..end])
                .ok()
                .and_then(|s| s.parse().ok());
            match &policy[key..eq] {
                b"q" => item.q = n,
                b"w" => item.w = n,
                _ => {}
            }
            at = end;
        }
        Some(item)
    })
}

/// The item of `policy` (a [`policy`] or [`policy_of_decision`] value)
/// that binds decision `d`, as written in the field (a String, quoted).
///
/// A combined decision carries the `limit` of the quota with the least
/// remaining (drl-core's `Decision::combine`; on a denial, the quota that
/// denied), so the binding item is the one whose `q` is `d.limit`. When
/// several quotas share that `q`, the one with the longest window (ties:
/// the first): with equal quotas consumed together, the longest window
/// refills slowest and holds the least. Its `r` is the least of all the
/// quotas' remaining, never more than what any listed policy holds. A
/// decision no item matches (a failure-policy answer) names the first.
pub fn binding<'a>(policy: &'a HeaderValue, d: &Decision) -> &'a [u8] {
    let bytes = policy.as_bytes();
    // One item (a single-quota limit, the common case): its name, without
    // reading the parameters.
    if let Some(end) = string_end(bytes) {
        if !bytes[end..].contains(&b',') {
            return &bytes[..end];
        }
    }
    let q = d.limit.min(SF_INTEGER_MAX);
    let mut first = None;
    let mut best: Option<PolicyItem<'_>> = None;
    for it in items(bytes) {
        first.get_or_insert(it.name);
        if it.q == Some(q)
            && best
                .as_ref()
                .is_none_or(|b| it.w.unwrap_or(0) > b.w.unwrap_or(0))
        {
            best = Some(it);
        }
    }
    match (best, first) {
        (Some(b), _) => b.name,
        (None, Some(f)) => f,
        (None, None) => b"\"limit\"",
    }
}

/// [`binding`] as the policy's name (the String's content, unescaped):
/// the `violated-policies` member of a denial's problem body.
pub fn binding_name(policy: &HeaderValue, d: &Decision) -> String {
    let quoted = binding(policy, d);
    let inner = &quoted[1..quoted.len() - 1];
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => out.extend(bytes.next()),
            _ => out.push(b),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `t` of decision `d`: seconds (rounded up) until the state is fresh;
/// on a denial a wait admits, the [`retry_after`] seconds (the draft's §6:
/// `Retry-After` must not point before the end of the effective window).
#[inline]
pub fn effective_window(d: &Decision) -> u64 {
    match d.retry_after {
        Some(ns) if !d.allowed => ceil_secs(ns).max(1),
        _ => ceil_secs(d.reset_after),
    }
}

/// The `RateLimit` value of decision `d` under `policy` (the limit's
/// `RateLimit-Policy` value): `"api";r=99;t=1`, the item [`binding`] names.
pub fn ratelimit(policy: &HeaderValue, d: &Decision) -> HeaderValue {
    // Written with itoa into one exact-size buffer and handed to the
    // header without a copy: this runs on every answer of forward-auth and
    // of drl-client's layer.
    let name = binding(policy, d);
    let mut v = Vec::with_capacity(name.len() + 40);
    v.extend_from_slice(name);
    push_int(&mut v, b"r", d.remaining);
    push_int(&mut v, b"t", effective_window(d));
    value(v)
}

/// The `Retry-After` value of a denial, when a wait admits it.
pub fn retry_after(d: &Decision) -> Option<HeaderValue> {
    match d.retry_after {
        Some(ns) if !d.allowed => Some(HeaderValue::from(ceil_secs(ns).max(1))),
        _ => None,
    }
}

/// Adds `RateLimit-Policy: policy` (see [`policy`]) and `RateLimit` for
/// decision `d`: what forward-auth adds to every answer, admission or
/// denial.
pub fn insert_ratelimit(headers: &mut HeaderMap, policy: HeaderValue, d: &Decision) {
    let rl = ratelimit(&policy, d);
    insert_ratelimit_values(headers, policy, rl);
}

/// Adds `RateLimit-Policy: policy` and `RateLimit: ratelimit` (see
/// [`ratelimit`]): [`insert_ratelimit`] with the `RateLimit` value built
/// beforehand (drl-client's layer builds it when it decides, and adds it
/// when the service has answered).
#[inline]
pub fn insert_ratelimit_values(
    headers: &mut HeaderMap,
    policy: HeaderValue,
    ratelimit: HeaderValue,
) {
    headers.insert(RATELIMIT_POLICY.clone(), policy);
    headers.insert(RATELIMIT.clone(), ratelimit);
}

#[cfg(test)]
mod tests;
