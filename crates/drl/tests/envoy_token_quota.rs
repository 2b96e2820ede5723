//! Costs known afterwards over Envoy RLS v3, against a real `drl serve`:
//! envoyproxy/ratelimit's token-quota scenario
//! (`integration-test/scripts/token-quota.sh`: a check-only call on the
//! request path, the count charged on the response path, 2 per minute:
//! requests 1-3 pass, request 4 is denied) and its hits past the limit
//! (`test/redis/fixed_cache_impl_test.go`, the over-limit cases: a hit over
//! the limit is counted, so a later check-only call is OVER_LIMIT with
//! `limit_remaining` 0).

mod common;

use std::time::Duration;

use common::Drl;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// The token-quota domain: `service_1` generous, `service_2` 2 per minute
/// (the reference's integration config).
fn token_quota(hits: &str) -> String {
    format!(
        "server:
  envoy_hits: {hits}
envoy:
  - domain: tokenquota
    descriptors:
      - key: service
        value: service_1
        rate_limit: {{unit: minute, requests_per_unit: 100}}
      - key: service
        value: service_2
        rate_limit: {{unit: minute, requests_per_unit: 2}}
"
    )
}

const HOURLY: &str = "envoy:
  - domain: hourly
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 10}
";

/// A descriptor `service=value` with a per-descriptor `hits_addend`.
fn descriptor(key: &str, value: &str, hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        hits_addend: hits.map(|value| envoy_types::pb::google::protobuf::UInt64Value { value }),
        ..Default::default()
    }
}

struct Rls {
    _drl: Drl,
    client: RateLimitServiceClient<tonic::transport::Channel>,
}

impl Rls {
    async fn start(yaml: &str) -> Rls {
        let drl = Drl::start(yaml);
        let client = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .unwrap();
        Rls { _drl: drl, client }
    }

    async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits_addend: u32,
    ) -> RateLimitResponse {
        self.client
            .should_rate_limit(RateLimitRequest {
                domain: domain.into(),
                descriptors,
                hits_addend,
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// Envoy's request path for `/tokenquota`: both descriptors, check
    /// only (per-descriptor `hits_addend` 0).
    async fn request_path(&mut self) -> RateLimitResponse {
        self.ask(
            "tokenquota",
            vec![
                descriptor("service", "service_1", Some(0)),
                descriptor("service", "service_2", Some(0)),
            ],
            0,
        )
        .await
    }

    /// Envoy's response path (`apply_on_stream_done`): `service_2`
    /// charged with the count known now (1 here, as in the reference).
    async fn response_path(&mut self, count: u64) -> RateLimitResponse {
        self.ask(
            "tokenquota",
            vec![descriptor("service", "service_2", Some(count))],
            0,
        )
        .await
    }

    /// `hits` hits of the request-level `hits_addend` on `user=value`.
    async fn hit(&mut self, value: &str, hits: u32) -> DescriptorStatus {
        self.ask("hourly", vec![descriptor("user", value, None)], hits)
            .await
            .statuses
            .remove(0)
    }

    /// A check-only call on `user=value` (per-descriptor `hits_addend` 0).
    async fn check_only(&mut self, value: &str) -> DescriptorStatus {
        self.ask("hourly", vec![descriptor("user", value, Some(0))], 1)
            .await
            .statuses
            .remove(0)
    }
}

/// The scenario runs within one minute window (a condition on the clock,
/// not a verdict: it waits out the end of a minute when close to it).
fn within_one_minute() {
    common::clear_of_window_end(Duration::from_secs(60), Duration::from_secs(25));
}

/// The minute of the Unix clock now.
fn minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
}

/// Runs `scenario` on a fresh server of `yaml` inside one minute window:
/// waits clear of a window's end before starting the server (an open
/// connection left without a request would meet the server's header-read
/// timeout), and runs it again on a fresh server if a slow machine let the
/// window roll over during it (a condition on the clock, not a verdict).
async fn in_one_minute<T, F>(yaml: &str, scenario: impl Fn(Rls) -> F) -> T
where
    F: std::future::Future<Output = T>,
{
    for _ in 0..5 {
        within_one_minute();
        let at = minute();
        let out = scenario(Rls::start(yaml).await).await;
        if minute() == at {
            return out;
        }
    }
    panic!("five runs each crossed a minute boundary");
}

#[tokio::test]
async fn token_quota_denies_the_fourth_request() {
    let (codes, fourth) = in_one_minute(&token_quota("charge"), |mut rls| async move {
        let mut codes = Vec::new();
        for _ in 0..4 {
            let answer = rls.request_path().await;
            codes.push(answer.overall_code);
            if answer.overall_code == OK {
                let charged = rls.response_path(1).await;
                // The third charge takes service_2 past its limit: the
                // reference answers it OVER_LIMIT (the request was already
                // served; Envoy ignores the answer on the response path).
                assert_eq!(charged.statuses.len(), 1);
            }
        }
        (codes, rls.request_path().await)
    })
    .await;
    assert_eq!(codes, [OK, OK, OK, OVER], "OK, OK, OK, OVER_LIMIT");
    let s2 = &fourth.statuses[1];
    assert_eq!((s2.code, s2.limit_remaining), (OVER, 0));
    // service_1 was never charged: it still has its whole limit.
    assert_eq!(
        (fourth.statuses[0].code, fourth.statuses[0].limit_remaining),
        (OK, 100)
    );
}

#[tokio::test]
async fn take_semantics_are_one_setting_away() {
    // `envoy_hits: take`: the third response-path hit does not fit and is
    // not counted, so the fourth request passes (drl's own semantics).
    let codes = in_one_minute(&token_quota("take"), |mut rls| async move {
        let mut codes = Vec::new();
        for _ in 0..4 {
            let answer = rls.request_path().await;
            codes.push(answer.overall_code);
            rls.response_path(1).await;
        }
        codes
    })
    .await;
    assert_eq!(codes, [OK, OK, OK, OK]);
}

#[tokio::test]
async fn hits_past_the_limit_are_counted() {
    let mut rls = Rls::start(HOURLY).await;
    for i in 1..=10u32 {
        let s = rls.hit("a", 0).await; // request-level 0 means 1
        assert_eq!((s.code, s.limit_remaining), (OK, 10 - i), "hit {i}");
    }
    let s = rls.hit("a", 0).await;
    assert_eq!((s.code, s.limit_remaining), (OVER, 0), "hit 11");
    // The reference counts the 11th hit: a check-only call is over too.
    let s = rls.check_only("a").await;
    assert_eq!(
        (s.code, s.limit_remaining),
        (OVER, 0),
        "check after 11 hits"
    );

    // A hit of 5 with 3 left: OVER_LIMIT, counted whole.
    let s = rls.hit("b", 7).await;
    assert_eq!((s.code, s.limit_remaining), (OK, 3));
    let s = rls.hit("b", 5).await;
    assert_eq!((s.code, s.limit_remaining), (OVER, 0));
    let s = rls.check_only("b").await;
    assert_eq!((s.code, s.limit_remaining), (OVER, 0));

    // Exactly at the limit is not over: a check-only call is OK, with
    // nothing remaining.
    let s = rls.hit("c", 10).await;
    assert_eq!((s.code, s.limit_remaining), (OK, 0));
    let s = rls.check_only("c").await;
    assert_eq!((s.code, s.limit_remaining), (OK, 0));
}
