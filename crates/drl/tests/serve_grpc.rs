//! End-to-end: the real `drl serve` over gRPC — the native batched API and
//! Envoy RLS v3, including response headers and metrics.

mod common;

use common::{Drl, http_get, metric};
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest};
use drl_test_kit::envoy::descriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const CONFIG: &str = r#"
limits:
  - name: hourly
    algorithm: fixed-window
    quota: 3/h
  - name: api
    algorithm: gcra
    quota: 100/h
    burst: 20
envoy:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit:
          unit: hour
          requests_per_unit: 2
      - key: path
        value: /health
        rate_limit:
          unlimited: true
"#;

fn item(limit: &str, key: &str, cost: Option<u64>) -> CheckItem {
    CheckItem {
        limit: limit.into(),
        key: key.into(),
        cost,
        ..Default::default()
    }
}

#[tokio::test]
async fn native_grpc_batches_decide_in_order() {
    let drl = Drl::start(CONFIG);
    let mut c = RateLimiterClient::connect(drl.grpc_url()).await.unwrap();
    let reqs = vec![
        item("hourly", "a", None),
        item("hourly", "a", Some(2)),
        item("hourly", "a", None),
        item("api", "t", Some(1)),
        item("hourly", "b", Some(0)),
    ];
    let r = c
        .check(CheckRequest { requests: reqs })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(r.len(), 5);
    assert_eq!(
        r.iter().map(|x| x.allowed).collect::<Vec<_>>(),
        [true, true, false, true, true]
    );
    assert_eq!(r[1].remaining, 0);
    assert!(r[2].retry_after_ms.unwrap() > 0);
    assert_eq!(r[2].reason, "over_limit");
    assert_eq!(r[0].retry_after_ms, None);
    // 100/h: a token every 36 s, so none comes back between the two
    // checks of `t` however slow the machine (at 100/s one did after
    // 10 ms, and the second check saw 19, not 18).
    assert_eq!(
        (r[3].limit, r[3].remaining, r[3].reset_after_ms),
        (100, 19, 36_000)
    );
    assert_eq!(r[4].remaining, 3, "cost 0 is a query");
    // A single check (the path that collects nothing).
    let one = c
        .check(CheckRequest {
            requests: vec![item("api", "t", None)],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!((one.len(), one[0].allowed, one[0].remaining), (1, true, 18));

    let e = c
        .check(CheckRequest {
            requests: vec![item("hourly", "z", None), item("nope", "z", None)],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(
        e.message().contains("unknown limit \"nope\""),
        "{}",
        e.message()
    );
    let e = c
        .check(CheckRequest {
            requests: vec![item("hourly", "z", Some(u64::MAX))],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = c
        .check(CheckRequest { requests: vec![] })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="hourly",result="denied"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(text.contains("drl_request_duration_seconds_bucket{api=\"grpc_check\""));
    // Two answered calls timed (the refused ones are counted as rejected).
    assert_eq!(
        metric(
            &text,
            r#"drl_request_duration_seconds_count{api="grpc_check"}"#
        ),
        Some(2.0),
        "{text}"
    );
    // Decision latency: one sample per run of checks on a limit (the batch
    // ran hourly, api, hourly; then api alone).
    let (code, body) = http_get(&drl.url("/v1/status")).unwrap();
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let samples = |name: &str| {
        status["limits"]
            .as_array()
            .and_then(|a| a.iter().find(|l| l["name"] == name))
            .unwrap_or_else(|| panic!("no {name} in {status}"))["latency"]["samples"]
            .as_u64()
    };
    assert_eq!((samples("hourly"), samples("api")), (Some(2), Some(2)));
}

#[tokio::test]
async fn envoy_rls_decides_with_statuses_and_headers() {
    let drl = Drl::start(CONFIG);
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let ask = |descs: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: "edge".into(),
        descriptors: descs,
        hits_addend: 0,
    };
    for remaining in [1u32, 0] {
        let r = c
            .should_rate_limit(ask(vec![descriptor(&[("remote_address", "10.0.0.1")])]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, remaining);
        let cl = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!((cl.requests_per_unit, cl.unit), (2, 3));
        let h: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert!(h.contains(&("RateLimit-Limit", "2")), "{h:?}");
        assert!(
            h.contains(&("RateLimit-Remaining", &*remaining.to_string())),
            "{h:?}"
        );
    }
    // Over the limit; a second, unmatched descriptor stays OK; the
    // unlimited one answers u32::MAX remaining.
    let r = c
        .should_rate_limit(ask(vec![
            descriptor(&[("remote_address", "10.0.0.1")]),
            descriptor(&[("unknown_key", "x")]),
            descriptor(&[("path", "/health")]),
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    // Whole seconds, as envoyproxy/ratelimit sends (`unit - now % unit`).
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap();
    assert!(
        (1..=3600).contains(&reset.seconds) && reset.nanos == 0,
        "{reset:?}"
    );
    assert_eq!(r.statuses[1].code, Code::Ok as i32);
    assert!(r.statuses[1].current_limit.is_none());
    assert_eq!(r.statuses[2].code, Code::Ok as i32);
    assert_eq!(r.statuses[2].limit_remaining, u32::MAX);
    // Another address has its own counter; hits_addend is the cost.
    let mut req = ask(vec![descriptor(&[("remote_address", "10.0.0.2")])]);
    req.hits_addend = 2;
    let r = c.should_rate_limit(req).await.unwrap().into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // Unknown domain: OK for every descriptor, with no limit, as
    // envoyproxy/ratelimit answers (`server.envoy_unknown_domain: ok`).
    let unknown = RateLimitRequest {
        domain: "nope".into(),
        descriptors: vec![descriptor(&[("a", "b")]), descriptor(&[("c", "d")])],
        hits_addend: 0,
    };
    let r = c
        .should_rate_limit(unknown.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses.len(), 2);
    for s in &r.statuses {
        assert_eq!(s.code, Code::Ok as i32);
        assert_eq!((s.current_limit.as_ref(), s.limit_remaining), (None, 0));
    }
    // One setting away: NOT_FOUND, naming the configured domains.
    let strict = Drl::start(&format!(
        "server:\n  envoy_unknown_domain: not_found\n{CONFIG}"
    ));
    let mut s = RateLimitServiceClient::connect(strict.grpc_url())
        .await
        .unwrap();
    let e = s.should_rate_limit(unknown).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("edge"));

    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="edge.remote_address",result="denied"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="edge.remote_address",result="allowed"}"#
        ),
        Some(3.0),
    );
    // Each answered call timed once (the unknown domain's too).
    assert_eq!(
        metric(
            &text,
            r#"drl_request_duration_seconds_count{api="envoy_rls"}"#
        ),
        Some(5.0),
        "{text}"
    );
    assert!(!text.contains("10.0.0.1"));
}

/// A request message that does not decode is the client's fault:
/// `INVALID_ARGUMENT` (3) with prost's error, on both hot methods.
#[tokio::test]
async fn undecodable_messages_are_invalid_argument() {
    let drl = Drl::start(
        "limits:\n  - name: api\n    quota: 10/s\nenvoy:\n  - domain: d\n    descriptors:\n      - key: k\n        rate_limit: {unit: second, requests_per_unit: 10}\n",
    );
    let tcp = tokio::net::TcpStream::connect(drl.grpc).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    for path in [
        "/drl.v1.RateLimiter/Check",
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    ] {
        let req = http::Request::post(format!("http://{}{path}", drl.grpc))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).unwrap();
        // Field 1, length-delimited, 100 bytes announced, 1 sent.
        let msg = [0x0a, 100, 0];
        let mut framed = vec![0, 0, 0, 0, msg.len() as u8];
        framed.extend_from_slice(&msg);
        send.send_data(bytes::Bytes::from(framed), true).unwrap();
        let resp = resp.await.unwrap();
        let (head, mut body) = resp.into_parts();
        let status = match head.headers.get("grpc-status") {
            Some(s) => s.to_str().unwrap().to_string(),
            None => {
                while body.data().await.is_some() {}
                let t = body.trailers().await.unwrap().expect("trailers");
                t.get("grpc-status").unwrap().to_str().unwrap().to_string()
            }
        };
        assert_eq!(status, "3", "{path}: {head:?}");
    }
}

/// The gRPC health service (`grpc.health.v1`) on the gRPC port, open to
/// probes without a token even when the APIs need one: the server, the
/// rate-limit services and `ratelimit` (envoyproxy/ratelimit's name:
/// its test/service/ratelimit_test.go TestServiceHealthStatus expects it
/// SERVING at start) are SERVING; an unknown service is NOT_FOUND.
#[tokio::test]
async fn the_grpc_health_service_answers_probes_without_a_token() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "a-token-of-at-least-16-bytes\n").unwrap();
    let drl = Drl::start(&format!(
        "auth:\n  tokens_file: {}\n{CONFIG}",
        tokens.display()
    ));
    let channel = tonic::transport::Endpoint::from_shared(drl.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    for service in [
        "",
        "drl.v1.RateLimiter",
        "envoy.service.ratelimit.v3.RateLimitService",
        "kuadrant.service.ratelimit.v1.RateLimitService",
        "ratelimit",
    ] {
        let r = h
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let e = h
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // The APIs still need the token.
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let e = c
        .should_rate_limit(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("a", "b")])],
            hits_addend: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
}
