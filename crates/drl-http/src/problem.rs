//! RFC 9457 problem details (`application/problem+json`), and the 429 a
//! denial answers with: draft-ietf-httpapi-ratelimit-headers-11's
//! `quota-exceeded` problem type (§5.1).

use drl_core::Decision;
use http::{HeaderValue, Response, StatusCode, header};

use crate::headers::{self, ceil_ms};

/// `application/problem+json`.
pub static PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The body of a problem of type `https://drl.invalid/problems/{kind}`.
pub fn body(status: StatusCode, kind: &str, title: &str, detail: &str) -> String {
    serde_json::json!({
        "type": format!("https://drl.invalid/problems/{kind}"),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    })
    .to_string()
}

/// A problem response: `status`, `Content-Type: application/problem+json`
/// and [`body`].
pub fn response(status: StatusCode, kind: &str, title: &str, detail: &str) -> Response<String> {
    let mut r = Response::new(body(status, kind, title, detail));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, PROBLEM_JSON.clone());
    r
}

/// The problem type of a denial (draft-ietf-httpapi-ratelimit-headers-11
/// §5.1, registered in §10.2.1).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The body of the denial `d` of a check of `cost` on limit `limit` (whose
/// `RateLimit-Policy` value is `policy`), answered with `status` (429
/// unless the caller asked for another): the [`QUOTA_EXCEEDED`] type with
/// its `violated-policies` member (the policy `RateLimit` names,
/// [`headers::binding_name`]), and drl's `limit` and `retry_after_ms`.
pub fn rate_limited_body(
    limit: &str,
    cost: u64,
    status: StatusCode,
    policy: &HeaderValue,
    d: &Decision,
) -> String {
    let detail = match d.retry_after {
        Some(ns) => format!(
            "limit {limit:?} is exhausted for this client; retry in {} ms",
            ceil_ms(ns)
        ),
        None => format!("a request of cost {cost} can never fit limit {limit:?}"),
    };
    serde_json::json!({
        "type": QUOTA_EXCEEDED,
        "title": "Too Many Requests",
        "status": status.as_u16(),
        "detail": detail,
        "violated-policies": [headers::binding_name(policy, d)],
        "limit": limit,
        "retry_after_ms": d.retry_after.map(ceil_ms),
    })
    .to_string()
}

/// The answer to a denial: `status` (normally 429), problem+json body
/// ([`rate_limited_body`]) and `Retry-After` when a wait admits the
/// request. The `RateLimit*` headers are added by
/// [`headers::insert_ratelimit`], as for an admission.
pub fn rate_limited(
    limit: &str,
    cost: u64,
    status: StatusCode,
    policy: &HeaderValue,
    d: &Decision,
) -> Response<String> {
    let mut r = Response::new(rate_limited_body(limit, cost, status, policy, d));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, PROBLEM_JSON.clone());
    if let Some(ra) = headers::retry_after(d) {
        h.insert(header::RETRY_AFTER, ra);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::DenyReason;

    #[test]
    fn denial_body_names_the_limit_and_the_wait() {
        let d = Decision {
            allowed: false,
            remaining: 0,
            limit: 3,
            retry_after: Some(2_500_000_000),
            reset_after: 3_000_000_000,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        };
        let p = headers::policy("api", &[drl_core::Quota::parse("3/3s").unwrap()]);
        let r = rate_limited("api", 1, StatusCode::TOO_MANY_REQUESTS, &p, &d);
        assert_eq!(r.status(), 429);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        let v: serde_json::Value = serde_json::from_str(r.body()).unwrap();
        assert_eq!(
            v["type"],
            "https://iana.org/assignments/http-problem-types#quota-exceeded"
        );
        assert_eq!(v["violated-policies"], serde_json::json!(["api"]));
        assert_eq!(v["status"], 429);
        assert_eq!(v["limit"], "api");
        assert_eq!(v["retry_after_ms"], 2500);
        let never = Decision {
            retry_after: None,
            ..d
        };
        let r = rate_limited("api", 9, StatusCode::FORBIDDEN, &p, &never);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
        assert!(r.body().contains("cost 9 can never fit"), "{}", r.body());
    }

    #[test]
    fn problem_response_has_type_and_status() {
        let r = response(
            StatusCode::BAD_REQUEST,
            "missing_key",
            "Bad Request",
            "no key",
        );
        assert_eq!(r.status(), 400);
        assert_eq!(
            r.body(),
            r#"{"detail":"no key","status":400,"title":"Bad Request","type":"https://drl.invalid/problems/missing_key"}"#
        );
    }
}
