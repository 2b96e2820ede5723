//! Envoy RLS per-descriptor limit overrides (`RateLimitDescriptor.limit`)
//! through the real binary: the override replaces the configured rule (or
//! applies where none matches), is never in shadow mode, keeps a counter
//! per override value, shows in `current_limit` and the response headers;
//! an unknown unit is refused before anything is decided.

mod common;

use common::{Drl, http_get, metric};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const MINUTE: i32 = 2;
const HOUR: i32 = 3;

const CONFIG: &str = r#"domain: ovr
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 100
  - key: user
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 100
"#;

type Client = RateLimitServiceClient<tonic::transport::Channel>;

fn desc(entries: &[(&str, &str)], limit: Option<(u32, i32)>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..drl_test_kit::envoy::descriptor(entries)
    }
}

async fn ask(c: &mut Client, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    c.should_rate_limit(RateLimitRequest {
        domain: "ovr".into(),
        descriptors,
        hits_addend: 0,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn one(
    c: &mut Client,
    entries: &[(&str, &str)],
    limit: Option<(u32, i32)>,
) -> DescriptorStatus {
    ask(c, vec![desc(entries, limit)]).await.statuses.remove(0)
}

fn seen(s: &DescriptorStatus) -> (i32, Option<(u32, i32)>, u32) {
    (
        s.code,
        s.current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit)),
        s.limit_remaining,
    )
}

async fn start() -> (Drl, Client) {
    let drl = Drl::start(CONFIG);
    let c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    (drl, c)
}

#[tokio::test]
async fn an_override_replaces_the_configured_rule_with_its_own_counter() {
    let (drl, mut c) = start().await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.1")];
    for left in (0..3).rev() {
        let r = ask(&mut c, vec![desc(ip, Some((3, HOUR)))]).await;
        assert_eq!(seen(&r.statuses[0]), (OK, Some((3, HOUR)), left));
        let h: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert!(h.contains(&("RateLimit-Limit", "3")), "{h:?}");
        assert!(
            h.contains(&("RateLimit-Remaining", &*left.to_string())),
            "{h:?}"
        );
    }
    let r = ask(&mut c, vec![desc(ip, Some((3, HOUR)))]).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(seen(&r.statuses[0]), (OVER, Some((3, HOUR)), 0));
    // The configured 100/h rule was never touched.
    assert_eq!(
        seen(&one(&mut c, ip, None).await),
        (OK, Some((100, HOUR)), 99)
    );
    // A changed override value starts a fresh counter.
    assert_eq!(
        seen(&one(&mut c, ip, Some((5, HOUR))).await),
        (OK, Some((5, HOUR)), 4)
    );
    // Same values under other keys count separately.
    assert_eq!(
        seen(&one(&mut c, &[("other", "10.0.0.1")], Some((3, HOUR))).await),
        (OK, Some((3, HOUR)), 2)
    );
    // Metrics label overrides by domain, never by descriptor value.
    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    assert_eq!(
        metric(
            &text,
            r#"drl_decisions_total{limit="ovr.limit_override",result="denied"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(!text.contains("10.0.0.1"));
}

#[tokio::test]
async fn an_override_applies_where_no_rule_matches_and_ignores_shadow_mode() {
    let (_drl, mut c) = start().await;
    // No configured rule for `tenant`: without an override, no limit.
    let t: &[(&str, &str)] = &[("tenant", "t1")];
    assert_eq!(seen(&one(&mut c, t, None).await), (OK, None, 0));
    assert_eq!(
        seen(&one(&mut c, t, Some((2, MINUTE))).await),
        (OK, Some((2, MINUTE)), 1)
    );
    assert_eq!(
        seen(&one(&mut c, t, Some((2, MINUTE))).await),
        (OK, Some((2, MINUTE)), 0)
    );
    assert_eq!(seen(&one(&mut c, t, Some((2, MINUTE))).await).0, OVER);
    // The `user` rule is in shadow mode; an override of it is not.
    let u: &[(&str, &str)] = &[("user", "u1")];
    assert_eq!(one(&mut c, u, Some((1, HOUR))).await.code, OK);
    assert_eq!(one(&mut c, u, Some((1, HOUR))).await.code, OVER);
    // requests_per_unit 0 denies everything, like a configured 0.
    for _ in 0..2 {
        assert_eq!(
            seen(&one(&mut c, t, Some((0, HOUR))).await),
            (OVER, Some((0, HOUR)), 0)
        );
    }
}

#[tokio::test]
async fn an_override_with_an_unknown_unit_is_refused_and_decides_nothing() {
    let (_drl, mut c) = start().await;
    let ip: &[(&str, &str)] = &[("remote_address", "10.0.0.9")];
    for unit in [0, 42] {
        let err = c
            .should_rate_limit(RateLimitRequest {
                domain: "ovr".into(),
                descriptors: vec![desc(ip, None), desc(ip, Some((5, unit)))],
                hits_addend: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().contains("descriptors[1]") && err.message().contains("unknown unit"),
            "{}",
            err.message()
        );
    }
    // Nothing was consumed by the refused calls.
    assert_eq!(
        seen(&one(&mut c, ip, None).await),
        (OK, Some((100, HOUR)), 99)
    );
}
