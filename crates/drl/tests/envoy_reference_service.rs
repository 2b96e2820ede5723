//! envoyproxy/ratelimit's service tests for quota and shadow modes
//! (`test/service/ratelimit_test.go`), ported to a real `drl serve` over
//! Envoy RLS v3. The reference mocks its cache's per-descriptor answers;
//! here a descriptor is over its limit because its rule is
//! `requests_per_unit: 0` and under it because its rule is far above the
//! calls made, so no verdict depends on the clock. Each test names the
//! reference test whose expectations it keeps.

mod common;

use common::Drl;
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// One domain: `rate`/`quota` descriptors, each `over` (0 per hour) or
/// `under` (1,000 per hour), quotas with `quota_mode: true`; `free` has no
/// limit and `open` is unlimited.
fn config(server: &str) -> String {
    format!(
        "server:
{server}
envoy:
  - domain: quota-domain
    descriptors:
      - key: rate
        value: over
        rate_limit: {{unit: hour, requests_per_unit: 0}}
      - key: rate
        value: under
        rate_limit: {{unit: hour, requests_per_unit: 1000}}
      - key: quota
        value: over
        quota_mode: true
        rate_limit: {{unit: hour, requests_per_unit: 0}}
      - key: quota
        value: under
        quota_mode: true
        rate_limit: {{unit: hour, requests_per_unit: 1000}}
      - key: open
        rate_limit: {{unlimited: true}}
"
    )
}

/// The overall code and the per-descriptor codes of one request.
async fn ask(server: &str, descriptors: &[(&str, &str)]) -> (i32, Vec<i32>) {
    let drl = Drl::start(&config(server));
    let mut client = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let descs: Vec<[(&str, &str); 1]> = descriptors.iter().map(|d| [*d]).collect();
    let refs: Vec<&[(&str, &str)]> = descs.iter().map(|d| &d[..]).collect();
    let answer = client
        .should_rate_limit(request("quota-domain", &refs, 1))
        .await
        .unwrap()
        .into_inner();
    let codes = answer.statuses.iter().map(|s| s.code).collect();
    (answer.overall_code, codes)
}

const DEFAULTS: &str = "  envoy_quota_mode: false";

/// TestServicePerDescriptorQuotaMode: an ordinary descriptor over, a quota
/// under: over overall.
#[tokio::test]
async fn an_ordinary_descriptor_over_is_over_whatever_the_quotas() {
    let got = ask(DEFAULTS, &[("rate", "over"), ("quota", "under")]).await;
    assert_eq!(got, (OVER, vec![OVER, OK]));
}

/// TestServiceMixedPerDescriptorModes: the ordinary one under, the only
/// quota over: every quota is over, so over overall.
#[tokio::test]
async fn every_quota_over_is_over() {
    let got = ask(DEFAULTS, &[("rate", "under"), ("quota", "over")]).await;
    assert_eq!(got, (OVER, vec![OK, OVER]));
}

/// TestServiceMixedPerDescriptorModesUnderLimit: both under: OK.
#[tokio::test]
async fn all_under_is_ok() {
    let got = ask(DEFAULTS, &[("rate", "under"), ("quota", "under")]).await;
    assert_eq!(got, (OK, vec![OK, OK]));
}

/// TestServiceQuotaModeOnlyAllOverTheLimit: two quotas, both over.
#[tokio::test]
async fn two_quotas_both_over_is_over() {
    let got = ask(DEFAULTS, &[("quota", "over"), ("quota", "over")]).await;
    assert_eq!(got, (OVER, vec![OVER, OVER]));
}

/// TestServiceQuotaModeOnlySomeOverTheLimit: two quotas, one over: OK
/// overall, the over one still says so.
#[tokio::test]
async fn one_quota_of_two_over_is_ok_overall() {
    let got = ask(DEFAULTS, &[("quota", "over"), ("quota", "under")]).await;
    assert_eq!(got, (OK, vec![OVER, OK]));
}

/// TestServiceGlobalShadowMode: an ordinary descriptor over, the global
/// shadow mode on: OK overall, the descriptor still OVER_LIMIT.
#[tokio::test]
async fn the_global_shadow_mode_answers_ok_overall() {
    let got = ask(
        "  envoy_shadow_mode: true",
        &[("rate", "over"), ("rate", "under")],
    )
    .await;
    assert_eq!(got, (OK, vec![OVER, OK]));
}

/// TestServiceQuotaModeWithShadowMode: every quota over and the global
/// shadow mode on: OK overall.
#[tokio::test]
async fn the_global_shadow_mode_covers_quotas_too() {
    let got = ask(
        "  envoy_shadow_mode: true",
        &[("quota", "over"), ("quota", "over")],
    )
    .await;
    assert_eq!(got, (OK, vec![OVER, OVER]));
}

/// TestServiceGlobalQuotaMode: the global quota mode makes ordinary
/// descriptors quotas: one of two over is OK overall.
#[tokio::test]
async fn the_global_quota_mode_makes_every_descriptor_a_quota() {
    let got = ask(
        "  envoy_quota_mode: true",
        &[("rate", "over"), ("rate", "under")],
    )
    .await;
    assert_eq!(got, (OK, vec![OVER, OK]));
    let got = ask(
        "  envoy_quota_mode: true",
        &[("rate", "over"), ("quota", "over")],
    )
    .await;
    assert_eq!(got, (OVER, vec![OVER, OVER]));
}

/// Unlimited descriptors count as neither kind (the reference skips them):
/// a quota over beside an unlimited one is every quota over.
#[tokio::test]
async fn an_unlimited_descriptor_counts_as_neither() {
    let got = ask(DEFAULTS, &[("quota", "over"), ("open", "x")]).await;
    assert_eq!(got.0, OVER);
    assert_eq!(got.1[0], OVER);
}

/// TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig
/// (test/redis/fixed_cache_impl_test.go): key4 at 15/hour and key5 at
/// 14/hour, hits per descriptor. With the reference's
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
/// (`server.envoy_stop_increment_when_over_limit: true`), once key5 would
/// pass its limit only key5 counts: key4 stays at 13. Without it, both
/// count.
#[tokio::test]
async fn stop_increment_when_over_limit() {
    let run = |stop: bool| async move {
        let drl = Drl::start(&format!(
            "server:
  envoy_stop_increment_when_over_limit: {stop}
envoy:
  - domain: domain
    descriptors:
      - key: key4
        value: value4
        rate_limit: {{unit: hour, requests_per_unit: 15}}
      - key: key5
        value: value5
        rate_limit: {{unit: hour, requests_per_unit: 14}}
"
        ));
        let mut client = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .unwrap();
        let mut seen = Vec::new();
        for hits in [11, 2, 2, 1] {
            let mut req = request("domain", &[&[("key4", "value4")], &[("key5", "value5")]], 0);
            for d in &mut req.descriptors {
                d.hits_addend =
                    Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
            }
            let answer = client.should_rate_limit(req).await.unwrap().into_inner();
            seen.push(
                answer
                    .statuses
                    .iter()
                    .map(|s| (s.code, s.limit_remaining))
                    .collect::<Vec<_>>(),
            );
        }
        seen
    };
    // 11, 13: both within; then 2 more: key5 would pass 14.
    assert_eq!(
        run(true).await,
        vec![
            vec![(OK, 4), (OK, 3)],
            vec![(OK, 2), (OK, 1)],
            vec![(OK, 2), (OVER, 0)],
            vec![(OK, 2), (OVER, 0)],
        ]
    );
    assert_eq!(
        run(false).await,
        vec![
            vec![(OK, 4), (OK, 3)],
            vec![(OK, 2), (OK, 1)],
            vec![(OK, 0), (OVER, 0)],
            vec![(OVER, 0), (OVER, 0)],
        ]
    );
}

/// TestServiceWithCustomRatelimitHeaders and
/// TestServiceWithDefaultRatelimitHeaders (test/service/ratelimit_test.go):
/// an over-limit descriptor of a 10/minute rule answers its three headers
/// under the configured names (`LIMIT_LIMIT_HEADER` and the others there,
/// `server.envoy_header_names` here), or the default names; a name that is
/// not a header name is refused.
#[tokio::test]
async fn custom_ratelimit_header_names() {
    let headers = |names: &'static str| async move {
        let drl = Drl::start(&format!(
            "server:
{names}
envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {{unit: minute, requests_per_unit: 10}}
      - key: free
"
        ));
        let mut client = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .unwrap();
        let answer = client
            .should_rate_limit(request("d", &[&[("k", "v")], &[("free", "x")]], 11))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, OVER);
        answer
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect::<Vec<_>>()
    };
    let custom = headers(
        "  envoy_header_names: {limit: A-Ratelimit-Limit, remaining: A-Ratelimit-Remaining, reset: A-Ratelimit-Reset}",
    )
    .await;
    let names: Vec<&str> = custom.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "A-Ratelimit-Limit",
            "A-Ratelimit-Remaining",
            "A-Ratelimit-Reset"
        ]
    );
    assert_eq!((custom[0].1.as_str(), custom[1].1.as_str()), ("10", "0"));
    let reset: u64 = custom[2].1.parse().unwrap();
    assert!((1..=60).contains(&reset), "{custom:?}");
    let default = headers("  envoy_response_headers: true").await;
    let names: Vec<&str> = default.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "server:\n  envoy_header_names: {limit: \"bad name\"}\nenvoy:\n  - domain: d\n    descriptors:\n      - key: k\n",
    )
    .unwrap();
    let (ok, out) = common::config_check(&path);
    assert!(!ok && out.contains("not a valid HTTP header name"), "{out}");
}
