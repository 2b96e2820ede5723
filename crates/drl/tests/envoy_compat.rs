//! envoyproxy/ratelimit config compatibility: the example configurations
//! of their README (written here from their documented format), loaded
//! unchanged by `drl serve --config FILE`, decide as their README says,
//! through Envoy RLS v3.

mod common;

use common::{Drl, http_get, metric};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const DAY: i32 = 4;

struct Rls {
    drl: Drl,
    client: RateLimitServiceClient<tonic::transport::Channel>,
    domain: String,
}

impl Rls {
    async fn start(yaml: &str) -> Rls {
        let drl = Drl::start(yaml);
        let client = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .unwrap();
        let domain = yaml
            .lines()
            .find_map(|l| l.strip_prefix("domain: "))
            .unwrap()
            .trim()
            .to_string();
        Rls {
            drl,
            client,
            domain,
        }
    }

    async fn ask(&mut self, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitResponse {
        let descriptors = descriptors
            .iter()
            .map(|d| drl_test_kit::envoy::descriptor(d))
            .collect();
        self.client
            .should_rate_limit(RateLimitRequest {
                domain: self.domain.clone(),
                descriptors,
                hits_addend: hits,
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn one(&mut self, d: &[(&str, &str)]) -> DescriptorStatus {
        self.ask(&[d], 1).await.statuses.remove(0)
    }
}

fn limit_of(s: &DescriptorStatus) -> Option<(u32, i32)> {
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit))
}

#[tokio::test]
async fn example_1_simple_keys_and_values() {
    let mut r = Rls::start(
        r#"domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
"#,
    )
    .await;
    let s = r.one(&[("database", "users")]).await;
    assert_eq!(
        (s.code, limit_of(&s), s.limit_remaining),
        (OK, Some((500, SECOND)), 499)
    );
    let s = r.one(&[("database", "default")]).await;
    assert_eq!(limit_of(&s), Some((500, SECOND)));
    // No rule for another value: OK, no limit.
    let s = r.one(&[("database", "orders")]).await;
    assert_eq!((s.code, limit_of(&s)), (OK, None));
}

#[tokio::test]
async fn example_2_nested_descriptors_and_per_value_limits() {
    let mut r = Rls::start(
        r#"domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#,
    )
    .await;
    let marketing = |n: &'static str| [("message_type", "marketing"), ("to_number", n)];
    for left in (0..5).rev() {
        let s = r.one(&marketing("2061111111")).await;
        assert_eq!((s.code, s.limit_remaining), (OK, left));
        assert_eq!(limit_of(&s), Some((5, DAY)));
    }
    assert_eq!(r.one(&marketing("2061111111")).await.code, OVER);
    // Each number gets its own 5.
    assert_eq!(r.one(&marketing("2062222222")).await.limit_remaining, 4);
    // The per-number rule is a different rule with its own counter.
    let s = r.one(&[("to_number", "2061111111")]).await;
    assert_eq!(
        (s.code, limit_of(&s), s.limit_remaining),
        (OK, Some((100, DAY)), 99)
    );
    // Both descriptors in one call: the overall answer is over if any is.
    let resp = r
        .ask(
            &[&marketing("2061111111"), &[("to_number", "2061111111")]],
            1,
        )
        .await;
    assert_eq!(resp.overall_code, OVER);
    assert_eq!((resp.statuses[0].code, resp.statuses[1].code), (OVER, OK));
    assert_eq!(resp.statuses[1].limit_remaining, 98);
}

#[tokio::test]
async fn example_3_most_specific_match_wins() {
    let mut r = Rls::start(
        r#"domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
"#,
    )
    .await;
    let s = r.one(&[("remote_address", "50.0.0.1")]).await;
    assert_eq!(
        (s.code, limit_of(&s), s.limit_remaining),
        (OK, Some((10, SECOND)), 9)
    );
    for _ in 0..3 {
        let s = r.one(&[("remote_address", "50.0.0.5")]).await;
        assert_eq!(
            (s.code, limit_of(&s), s.limit_remaining),
            (OVER, Some((0, SECOND)), 0)
        );
    }
}

#[tokio::test]
async fn example_4_levels_must_match_the_descriptor_length() {
    let request: &[(&str, &str)] = &[("key", "value"), ("subkey", "subvalue")];
    let mut flat = Rls::start(
        r#"domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
"#,
    )
    .await;
    let s = flat.one(request).await;
    assert_eq!(
        (s.code, limit_of(&s)),
        (OK, None),
        "two tuples do not match one level"
    );
    let mut nested = Rls::start(
        r#"domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"#,
    )
    .await;
    let s = nested.one(request).await;
    assert_eq!(
        (s.code, limit_of(&s), s.limit_remaining),
        (OK, Some((300, SECOND)), 299)
    );
    // One tuple stops at a node without a rule: no limit.
    assert_eq!(limit_of(&nested.one(&[("key", "value")]).await), None);
}

#[tokio::test]
async fn example_5_unlimited() {
    let mut r = Rls::start(
        r#"domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#,
    )
    .await;
    for _ in 0..3 {
        let s = r.one(&[("ldap", "anything")]).await;
        assert_eq!((s.code, s.limit_remaining), (OK, u32::MAX));
    }
    let s = r.one(&[("azure", "x")]).await;
    assert_eq!(
        (s.code, limit_of(&s), s.limit_remaining),
        (OK, Some((100, MINUTE)), 99)
    );
}

#[tokio::test]
async fn example_6_shadow_mode_always_answers_ok() {
    let mut r = Rls::start(
        r#"domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
"#,
    )
    .await;
    // Eleven hits in one call exceed 10/s: shadow mode answers OK anyway...
    let resp = r
        .ask(&[&[("service", "auth-service"), ("user", "user-a")]], 11)
        .await;
    assert_eq!((resp.overall_code, resp.statuses[0].code), (OK, OK));
    // ...while user-b is limited.
    let resp = r
        .ask(&[&[("service", "auth-service"), ("user", "user-b")]], 21)
        .await;
    assert_eq!((resp.overall_code, resp.statuses[0].code), (OVER, OVER));
    // The breach is counted.
    let (_, text) = http_get(&r.drl.url("/metrics")).unwrap();
    assert_eq!(
        metric(
            &text,
            r#"drl_shadow_allowed_total{limit="example6.service.user_user-a"}"#
        ),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn example_7_replaces() {
    let mut r = Rls::start(
        r#"domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"#,
    )
    .await;
    let d1: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let d2: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    // Both match: only the replacing 10/s rule applies; the 5/s one is
    // dropped from evaluation and its counter is not touched.
    let resp = r.ask(&[d1, d2], 1).await;
    assert_eq!(resp.overall_code, OK);
    assert_eq!(limit_of(&resp.statuses[0]), None);
    assert_eq!(limit_of(&resp.statuses[1]), Some((10, SECOND)));
    assert_eq!(resp.statuses[1].limit_remaining, 9);
    let resp = r.ask(&[d1, d2], 10).await;
    assert_eq!(resp.statuses[0].code, OK, "replaced: never over");
    // Alone, each rule applies; the replaced one still has all of its 5.
    let s = r.one(d1).await;
    assert_eq!((limit_of(&s), s.limit_remaining), (Some((5, SECOND)), 4));
}

#[tokio::test]
async fn example_8_detailed_metric_is_accepted() {
    // Minute windows, aligned to the epoch: the two checks of one value
    // below must fall in one minute (else the second sees a fresh 9).
    common::clear_of_window_end(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(15),
    );
    let mut r = Rls::start(
        r#"domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#,
    )
    .await;
    assert_eq!(
        limit_of(&r.one(&[("key1", "unspecified_value")]).await),
        Some((10, MINUTE))
    );
    assert_eq!(
        limit_of(&r.one(&[("key1", "unspecified_value2")]).await),
        Some((10, MINUTE))
    );
    assert_eq!(
        limit_of(&r.one(&[("key1", "value1")]).await),
        Some((20, MINUTE))
    );
    // Each unspecified value has its own counter.
    assert_eq!(
        r.one(&[("key1", "unspecified_value")])
            .await
            .limit_remaining,
        8
    );
    assert_eq!(
        r.one(&[("key1", "unspecified_value2")])
            .await
            .limit_remaining,
        8
    );
    // drl never labels metrics by request values (bounded cardinality).
    let (_, text) = http_get(&r.drl.url("/metrics")).unwrap();
    assert!(!text.contains("unspecified_value"));
}

#[tokio::test]
async fn example_9_wildcard_values() {
    let mut r = Rls::start(
        r#"domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#,
    )
    .await;
    let s = r.one(&[("key1", "value_1")]).await;
    assert_eq!((limit_of(&s), s.limit_remaining), (Some((20, MINUTE)), 19));
    // Each matching value counts separately.
    assert_eq!(r.one(&[("key1", "value_2")]).await.limit_remaining, 19);
    assert_eq!(limit_of(&r.one(&[("key1", "other")]).await), None);
}
