//! Rate-limit response headers of draft-ietf-httpapi-ratelimit-headers
//! (structured-field form):
//!
//! - `RateLimit-Policy: "api";q=100;w=1` — one item per quota: `q` permits
//!   per `w` seconds (a multi-quota limit lists `"api.0"`, `"api.1"`, ...).
//! - `RateLimit: "api";r=99;t=1` — `r` remaining permits, `t` seconds until
//!   the state is fresh again (rounded up).
//! - `Retry-After: 3` on denials that some wait admits (seconds, rounded up).

use axum::http::HeaderValue;
use drl_core::time::SECOND;
use drl_core::{Decision, Nanos, Quota};

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

/// The `RateLimit-Policy` value of a limit.
pub fn policy(name: &str, quotas: &[Quota]) -> HeaderValue {
    let mut out = String::new();
    for (i, q) in quotas.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let w = ceil_secs(q.window()).max(1);
        if quotas.len() == 1 {
            out.push_str(&format!("\"{name}\";q={};w={w}", q.limit()));
        } else {
            out.push_str(&format!("\"{name}.{i}\";q={};w={w}", q.limit()));
        }
    }
    HeaderValue::from_str(&out).unwrap_or_else(|_| HeaderValue::from_static("\"limit\""))
}

/// The `RateLimit` value of a decision.
pub fn ratelimit(name: &str, d: &Decision) -> HeaderValue {
    let v = format!(
        "\"{name}\";r={};t={}",
        d.remaining,
        ceil_secs(d.reset_after)
    );
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static("\"limit\""))
}

/// The `Retry-After` value of a denial, when a wait admits it.
pub fn retry_after(d: &Decision) -> Option<HeaderValue> {
    match d.retry_after {
        Some(ns) if !d.allowed => Some(HeaderValue::from(ceil_secs(ns).max(1))),
        _ => None,
    }
}
