//! End-to-end: the real `drl serve` over HTTP — decisions, headers, 429
//! bodies, metrics, and bad input.

mod common;

use common::{Drl, header, http_get, http_request, metric, post_json};
use serde_json::json;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
limits:
  - name: hourly
    algorithm: fixed-window
    quota: 3/h
  - name: api
    algorithm: gcra
    quota: 100/s
    burst: 20
  - name: multi
    algorithm: token-bucket
    quotas: [5/h, 2/h]
  - name: edge
    algorithm: sliding-window
    quota: 2/h
    key:
      headers: [x-tenant]
  - name: soft
    algorithm: fixed-window
    quota: 1/h
    shadow: true
"#;

fn check(drl: &Drl, body: serde_json::Value) -> (u16, serde_json::Value) {
    let (s, _, v) = post_json(&drl.url("/v1/check"), &body.to_string());
    (s, v)
}

#[test]
fn check_decides_in_order_and_counts_metrics() {
    let drl = Drl::start(CONFIG);
    // The issue's example, on a gcra 100/s limit: remaining 99 is the
    // burst (20) minus one... unless burst is the capacity: it is.
    let (s, v) = check(
        &drl,
        json!({"requests":[{"limit":"api","key":"tenant-7","cost":1}]}),
    );
    assert_eq!(s, 200, "{v}");
    let r = &v["results"][0];
    assert_eq!(r["allowed"], true);
    assert_eq!(r["limit"], 100);
    assert_eq!(r["remaining"], 19);
    assert_eq!(r["retry_after_ms"], serde_json::Value::Null);
    assert_eq!(r["reset_after_ms"], 10);

    // Three admitted, the fourth denied, in one batch, answered in order;
    // another key is independent.
    let reqs: Vec<_> = (0..4)
        .map(|_| json!({"limit":"hourly","key":"k1"}))
        .chain([json!({"limit":"hourly","key":"k2","cost":3})])
        .collect();
    let (s, v) = check(&drl, json!({ "requests": reqs }));
    assert_eq!(s, 200, "{v}");
    let res = v["results"].as_array().unwrap();
    assert_eq!(res.len(), 5);
    let allowed: Vec<bool> = res
        .iter()
        .map(|r| r["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, true, true, false, true]);
    let remaining: Vec<u64> = res
        .iter()
        .map(|r| r["remaining"].as_u64().unwrap())
        .collect();
    assert_eq!(remaining, [2, 1, 0, 0, 0]);
    let retry = res[3]["retry_after_ms"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 3_600_000, "{retry}");
    assert_eq!(res[3]["reason"], "over_limit");

    // Cost beyond capacity: denied, no wait admits it.
    let (_, v) = check(
        &drl,
        json!({"requests":[{"limit":"hourly","key":"k9","cost":4}]}),
    );
    assert_eq!(v["results"][0]["allowed"], false);
    assert_eq!(v["results"][0]["retry_after_ms"], serde_json::Value::Null);
    assert_eq!(v["results"][0]["reason"], "cost_exceeds_capacity");

    // Multi-quota limit: all-or-nothing, the tighter quota (2/h) decides.
    let reqs: Vec<_> = (0..3).map(|_| json!({"limit":"multi","key":"m"})).collect();
    let (_, v) = check(&drl, json!({ "requests": reqs }));
    let allowed: Vec<bool> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, true, false]);

    // Shadow mode: the second request would be denied but is allowed.
    let reqs: Vec<_> = (0..2).map(|_| json!({"limit":"soft","key":"s"})).collect();
    let (_, v) = check(&drl, json!({ "requests": reqs }));
    assert_eq!(v["results"][1]["allowed"], true);

    let (s, text) = http_get(&drl.url("/metrics")).unwrap();
    assert_eq!(s, 200);
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="hourly",result="allowed"}"#
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="hourly",result="denied"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="multi",result="denied"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="soft",result="denied"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, r#"drl_shadow_allowed_total{limit="soft"}"#),
        Some(1.0)
    );
    assert!(
        text.contains("drl_request_duration_seconds_bucket{api=\"http_check\""),
        "{text}"
    );
    // The whole page (the hand-written families and the `metrics`
    // exporter's) as Prometheus's own parser reads it: it parses, and the
    // counters it reads are the ones above.
    let families = drl_test_kit::prometheus::parse(&text);
    let decisions = |limit, result| {
        drl_test_kit::prometheus::value(
            &families,
            "drl_decisions_total",
            &[("limit", limit), ("result", result)],
        )
    };
    assert_eq!(decisions("hourly", "allowed"), Some(4.0));
    assert_eq!(decisions("hourly", "denied"), Some(2.0));
    let histogram = families
        .iter()
        .find(|f| f.name == "drl_request_duration_seconds")
        .expect("the latency histogram");
    assert_eq!(histogram.kind, "histogram");
    // Label cardinality: keys never appear.
    for key in ["tenant-7", "k1", "k2", "k9"] {
        assert!(!text.contains(key), "key {key} leaked into metrics");
    }
}

#[test]
fn forward_auth_answers_200_then_429_with_headers_and_problem() {
    let drl = Drl::start(CONFIG);
    let url = drl.url("/v1/auth/edge");
    let get = |tenant: &str| http_request("GET", &url, &[("x-tenant", tenant)], b"").unwrap();
    for expected_remaining in [1, 0] {
        let (s, h, _) = get("acme");
        assert_eq!(s, 200);
        assert_eq!(header(&h, "ratelimit-policy"), Some("\"edge\";q=2;w=3600"));
        let rl = header(&h, "ratelimit").unwrap();
        assert!(
            rl.starts_with(&format!("\"edge\";r={expected_remaining};t=")),
            "{rl}"
        );
    }
    let (s, h, body) = get("acme");
    assert_eq!(s, 429);
    assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
    let retry: u64 = header(&h, "retry-after").unwrap().parse().unwrap();
    assert!((1..=7200).contains(&retry), "{retry}");
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["status"], 429);
    assert_eq!(p["title"], "Too Many Requests");
    assert_eq!(p["limit"], "edge");
    assert!(p["retry_after_ms"].as_u64().unwrap() > 0);
    // Another tenant is independent; nginx-style deny status is honoured.
    assert_eq!(get("other").0, 200);
    let (s, _, _) = http_request(
        "GET",
        &format!("{url}?deny_status=403"),
        &[("x-tenant", "acme")],
        b"",
    )
    .unwrap();
    assert_eq!(s, 403);
    // Missing key header: a clear 400, never an allow.
    let (s, _, body) = http_request("GET", &url, &[], b"").unwrap();
    assert_eq!(s, 400);
    assert!(body.contains("x-tenant"), "{body}");
    // A non-ASCII key is the client's own key (2/h: two allowed, then 429),
    // not a missing header and not someone else's.
    for want in [200, 200, 429] {
        assert_eq!(get("café").0, want);
    }
    // Bytes that are not UTF-8: a clear 400, never the default key.
    let raw = {
        use std::io::{Read, Write};
        let host = url
            .strip_prefix("http://")
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        let mut c = std::net::TcpStream::connect(host).unwrap();
        c.write_all(b"GET /v1/auth/edge HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-tenant: \xff\xfe\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(raw.starts_with("HTTP/1.1 400"), "{raw}");
    assert!(raw.contains("not valid UTF-8"), "{raw}");
    // Unknown limit: 404 naming the configured ones.
    let (s, _, body) =
        http_request("GET", &drl.url("/v1/auth/nope"), &[("x-tenant", "a")], b"").unwrap();
    assert_eq!(s, 404);
    assert!(
        body.contains("unknown limit") && body.contains("edge"),
        "{body}"
    );
}

#[test]
fn bad_requests_get_clear_errors_and_decide_nothing() {
    let drl = Drl::start(CONFIG);
    let url = drl.url("/v1/check");
    let expect = |body: &str, status: u16, needle: &str| {
        let (s, h, v) = post_json(&url, body);
        assert_eq!(s, status, "{body} -> {v}");
        assert_eq!(
            header(&h, "content-type"),
            Some("application/problem+json"),
            "{body}"
        );
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(needle),
            "{body}: {detail:?} lacks {needle:?}"
        );
    };
    expect("{not json", 400, "invalid request body");
    // A body that is not UTF-8 (a key with a stray 0xff byte).
    let (s, _, b) = common::http_request(
        "POST",
        &url,
        &[("content-type", "application/json")],
        b"{\"requests\":[{\"limit\":\"hourly\",\"key\":\"\xff\"}]}",
    )
    .unwrap();
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("not UTF-8"), "{b}");
    expect(
        r#"{"requests":[{"limit":"hourly"}]}"#,
        400,
        "missing field `key`",
    );
    expect(r#"{"requests":[]}"#, 400, "empty");
    expect(
        r#"{"requests":[{"limit":"nope","key":"a"}]}"#,
        404,
        "unknown limit \"nope\"",
    );
    expect(
        r#"{"requests":[{"limit":"hourly","key":"a","cost":-1}]}"#,
        400,
        "negative",
    );
    expect(
        r#"{"requests":[{"limit":"hourly","key":"a","cost":1.5}]}"#,
        400,
        "whole number",
    );
    // A whole number written with a fraction or an exponent is a cost.
    let (s, _, v) = post_json(
        &url,
        r#"{"requests":[{"limit":"hourly","key":"w","cost":1.0},{"limit":"hourly","key":"w","cost":2e0}]}"#,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"][0]["allowed"], true, "{v}");
    // 3/h: cost 1.0 leaves 2, then cost 2e0 leaves 0.
    assert_eq!(v["results"][0]["remaining"], 2, "{v}");
    assert_eq!(v["results"][1]["allowed"], true, "{v}");
    assert_eq!(v["results"][1]["remaining"], 0, "{v}");
    expect(
        r#"{"requests":[{"limit":"hourly","key":"a","cost":1e30}]}"#,
        400,
        "too large",
    );
    expect(
        r#"{"requests":[{"limit":"hourly","key":"a","cost":99999999999999999999999}]}"#,
        400,
        "too large",
    );
    expect(
        r#"{"requests":[{"limit":"hourly","key":"a","cost":18446744073709551615}]}"#,
        400,
        "exceeds the maximum",
    );
    // A valid item before an unknown limit is not decided either.
    expect(
        r#"{"requests":[{"limit":"hourly","key":"z"},{"limit":"nope","key":"z"}]}"#,
        404,
        "requests[1]",
    );
    let (_, _, v) = post_json(
        &url,
        r#"{"requests":[{"limit":"hourly","key":"z","cost":0}]}"#,
    );
    assert_eq!(
        v["results"][0]["remaining"], 3,
        "the refused batch consumed nothing"
    );
    // A huge body is refused with 413 before parsing.
    let huge = format!(
        r#"{{"requests":[{{"limit":"hourly","key":"{}"}}]}}"#,
        "x".repeat(2 << 20)
    );
    let (s, _, _) = http_request(
        "POST",
        &url,
        &[("content-type", "application/json")],
        huge.as_bytes(),
    )
    .unwrap();
    assert_eq!(s, 413);
    // Health endpoints.
    assert_eq!(http_get(&drl.url("/healthz")).unwrap().0, 200);
    assert_eq!(http_get(&drl.url("/readyz")).unwrap().0, 200);
    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    assert!(
        metric(
            &text,
            r#"drl_requests_rejected_total{api="http_check",reason="unknown_limit"}"#
        )
        .unwrap()
            >= 2.0,
        "{text}"
    );
}

/// Sends `head` and `body` on a raw connection and reads the whole answer.
fn raw_exchange(
    drl: &Drl,
    head: &str,
    body: &[u8],
) -> (u16, Vec<(String, String)>, String, Duration) {
    use std::io::{Read, Write};
    let addr = drl
        .url("/")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = Instant::now();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let (status, headers, body) = common::parse_response(&raw).expect("an HTTP response");
    (status, headers, body, t.elapsed())
}

#[test]
fn slow_bodies_time_out_and_large_bodies_are_refused_as_problems() {
    let drl = Drl::start(
        r#"
server:
  request_timeout_ms: 300
  max_body_bytes: 1000
limits:
  - name: api
    algorithm: gcra
    quota: 100/s
"#,
    );
    // A body that never completes: 408 at the deadline, nothing decided.
    let (status, headers, body, took) = raw_exchange(
        &drl,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
        br#"{"requests":"#,
    );
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("request_timeout_ms (300 ms)"), "{body}");
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/problem+json")
    );
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );
    // Over max_body_bytes without a Content-Length (chunked): 413.
    let chunk = format!("{:x}\r\n{}\r\n", 800, "x".repeat(800));
    let (status, _, body, _) = raw_exchange(
        &drl,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
        format!("{chunk}{chunk}0\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("max_body_bytes (1000 bytes)"), "{body}");
    // A body just under the bound is read and decided.
    let (s, v) = check(&drl, json!({"requests": [{"limit": "api", "key": "k"}]}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"][0]["allowed"], true);
    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    for reason in ["timeout", "body_too_large"] {
        let name = format!(r#"drl_requests_rejected_total{{api="http_check",reason="{reason}"}}"#);
        assert_eq!(metric(&text, &name), Some(1.0), "{name}\n{text}");
    }
}
