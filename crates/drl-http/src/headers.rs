//! Rate-limit response headers of draft-ietf-httpapi-ratelimit-headers
//! (structured-field form):
//!
//! - `RateLimit-Policy: "api";q=100;w=1` — one item per quota: `q` permits
//!   per `w` seconds (a multi-quota limit lists `"api.0"`, `"api.1"`, ...).
//! - `RateLimit: "api";r=99;t=1` — `r` remaining permits, `t` seconds until
//!   the state is fresh again (rounded up).
//! - `Retry-After: 3` on denials that some wait admits (seconds, rounded up).

use drl_core::time::SECOND;
use drl_core::{Decision, Nanos, Quota};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The `RateLimit-Policy` header name.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` header name.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

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

/// The `RateLimit-Policy` value of a limit whose windows are unknown (a
/// remote limit decided without its config): `"api";q=100`, the quota of
/// the decision (`w` is optional in the draft).
pub fn policy_of_decision(name: &str, d: &Decision) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{name}\";q={}", d.limit))
        .unwrap_or_else(|_| HeaderValue::from_static("\"limit\""))
}

/// The `RateLimit` value of a decision.
pub fn ratelimit(name: &str, d: &Decision) -> HeaderValue {
    // Written with itoa into one exact-size buffer and handed to the
    // header without a copy: this runs on every answer of forward-auth and
    // of drl-client's layer (`format!` cost several hundred instructions).
    let mut r = itoa::Buffer::new();
    let mut t = itoa::Buffer::new();
    let (r, t) = (r.format(d.remaining), t.format(ceil_secs(d.reset_after)));
    let mut v = Vec::with_capacity(name.len() + r.len() + t.len() + 8);
    v.push(b'"');
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(b"\";r=");
    v.extend_from_slice(r.as_bytes());
    v.extend_from_slice(b";t=");
    v.extend_from_slice(t.as_bytes());
    HeaderValue::from_maybe_shared(bytes::Bytes::from(v))
        .unwrap_or_else(|_| HeaderValue::from_static("\"limit\""))
}

/// The `Retry-After` value of a denial, when a wait admits it.
pub fn retry_after(d: &Decision) -> Option<HeaderValue> {
    match d.retry_after {
        Some(ns) if !d.allowed => Some(HeaderValue::from(ceil_secs(ns).max(1))),
        _ => None,
    }
}

/// Adds `RateLimit-Policy` (`policy`, see [`policy`]) and `RateLimit` for
/// decision `d` of limit `name`: what forward-auth adds to every answer,
/// admission or denial.
pub fn insert_ratelimit(headers: &mut HeaderMap, name: &str, policy: HeaderValue, d: &Decision) {
    insert_ratelimit_values(headers, policy, ratelimit(name, d));
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
mod tests {
    use super::*;
    use drl_core::DenyReason;

    fn denial(retry_ms: Option<u64>) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            limit: 100,
            retry_after: retry_ms.map(|m| m * 1_000_000),
            reset_after: 1_500_000_000,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        }
    }

    #[test]
    fn policy_lists_each_quota_with_its_window() {
        let one = [Quota::parse("100/s").unwrap()];
        assert_eq!(policy("api", &one), "\"api\";q=100;w=1");
        let two = [Quota::parse("5/h").unwrap(), Quota::parse("2/m").unwrap()];
        assert_eq!(policy("m", &two), "\"m.0\";q=5;w=3600, \"m.1\";q=2;w=60");
    }

    #[test]
    fn ratelimit_and_retry_after_round_up() {
        let d = denial(Some(1_001));
        assert_eq!(ratelimit("api", &d), "\"api\";r=0;t=2");
        assert_eq!(retry_after(&d).unwrap(), "2");
        assert_eq!(retry_after(&denial(Some(0))).unwrap(), "1");
        assert!(retry_after(&denial(None)).is_none());
        let mut ok = denial(Some(0));
        ok.allowed = true;
        assert!(retry_after(&ok).is_none());
        assert_eq!(policy_of_decision("api", &d), "\"api\";q=100");
    }

    proptest::proptest! {
        /// The itoa-built `RateLimit` value is byte for byte the
        /// `format!` form, and a name no header may carry falls back.
        #[test]
        fn ratelimit_is_the_formatted_value(
            name in "[ -~\\t\\né]{0,24}",
            remaining in proptest::prelude::any::<u64>(),
            reset in proptest::prelude::any::<u64>(),
        ) {
            let mut d = denial(None);
            d.remaining = remaining;
            d.reset_after = reset;
            let want = format!("\"{name}\";r={remaining};t={}", ceil_secs(reset));
            let want = HeaderValue::from_str(&want)
                .unwrap_or_else(|_| HeaderValue::from_static("\"limit\""));
            proptest::prop_assert_eq!(ratelimit(&name, &d), want);
        }
    }
}
