//! Response dynamic metadata (`server.envoy_response_dynamic_metadata`,
//! envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA`), asked of a real
//! `drl serve` over Envoy RLS v3. The three metadata tests of the
//! reference's `test/service/ratelimit_test.go` are ported (each names
//! its Go test): the reference mocks its cache's answers, here a
//! descriptor is over because its rule is `requests_per_unit: 0` and
//! under because its rule is far above the calls made. The request fields
//! follow the reference's `ratelimitToMetadata` (`src/service/ratelimit.go`).

mod common;

use common::{Drl, config_check};
use drl_test_kit::envoy::{descriptor, request};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::{Struct, value::Kind};

/// `regular`/`quota` descriptors (value `over`: 0 per hour; `under`:
/// 1,000 per hour), each rule with the `metadata` given.
fn config(server: &str, meta_regular: &str, meta_quota: &str) -> String {
    format!(
        "server:
{server}
envoy:
  - domain: quota-domain
    descriptors:
      - key: regular
        value: under
        metadata: {meta_regular}
        rate_limit: {{unit: hour, requests_per_unit: 1000}}
      - key: quota
        value: under
        metadata: {meta_quota}
        rate_limit: {{unit: hour, requests_per_unit: 1000}}
      - key: quota
        value: over
        metadata: {meta_quota}
        rate_limit: {{unit: hour, requests_per_unit: 0}}
      - key: open
        metadata: {{name: unlimited}}
        rate_limit: {{unlimited: true}}
"
    )
}

const ON: &str = "  envoy_quota_mode: true\n  envoy_response_dynamic_metadata: true";

async fn ask(drl: &Drl, descriptors: &[(&str, &str)]) -> RateLimitResponse {
    let mut client = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let descs: Vec<[(&str, &str); 1]> = descriptors.iter().map(|d| [*d]).collect();
    let refs: Vec<&[(&str, &str)]> = descs.iter().map(|d| &d[..]).collect();
    client
        .should_rate_limit(request("quota-domain", &refs, 1))
        .await
        .unwrap()
        .into_inner()
}

fn field<'a>(s: &'a Struct, k: &str) -> Option<&'a Kind> {
    s.fields.get(k)?.kind.as_ref()
}

fn string<'a>(s: &'a Struct, k: &str) -> Option<&'a str> {
    match field(s, k)? {
        Kind::StringValue(v) => Some(v),
        _ => None,
    }
}

/// The merged `metadata` of the answer.
fn passed(a: &RateLimitResponse) -> Option<&Struct> {
    match field(a.dynamic_metadata.as_ref()?, "metadata")? {
        Kind::StructValue(s) => Some(s),
        _ => None,
    }
}

/// TestMetadataReturnedForPassedDescriptors: under the global quota mode,
/// the regular descriptor passes and the quota one is over; the answer is
/// OK and carries only the passing descriptor's metadata.
#[tokio::test]
async fn metadata_of_the_passed_descriptors_only() {
    let drl = Drl::start(&config(ON, "{name: service_1}", "{name: service_2}"));
    let a = ask(&drl, &[("regular", "under"), ("quota", "over")]).await;
    assert_eq!(a.overall_code, Code::Ok as i32);
    let codes: Vec<i32> = a.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::Ok as i32, Code::OverLimit as i32]);
    let m = passed(&a).expect("metadata of the passed descriptors");
    assert_eq!(string(m, "name"), Some("service_1"));
}

/// TestMetadataReturnedForAllPassedDescriptors: both pass; the metadata
/// holds the keys of both.
#[tokio::test]
async fn metadata_of_every_passed_descriptor_merged() {
    let drl = Drl::start(&config(
        ON,
        "{name: service_1}",
        "{some_other_name: service_2}",
    ));
    let a = ask(&drl, &[("regular", "under"), ("quota", "under")]).await;
    assert_eq!(a.overall_code, Code::Ok as i32);
    let m = passed(&a).expect("metadata");
    assert_eq!(string(m, "name"), Some("service_1"));
    assert_eq!(string(m, "some_other_name"), Some("service_2"));
}

/// TestOverlappingMetadataReturnsTheFirstValue: both pass and both set
/// `name`: the first descriptor's value is kept.
#[tokio::test]
async fn the_first_descriptors_value_wins() {
    let drl = Drl::start(&config(ON, "{name: service_1}", "{name: service_2}"));
    let a = ask(&drl, &[("regular", "under"), ("quota", "under")]).await;
    assert_eq!(
        string(passed(&a).expect("metadata"), "name"),
        Some("service_1")
    );
}

/// The request's own fields (`ratelimitToMetadata`): domain, each
/// descriptor's entries as `key=value`, its override and hits addend, the
/// request's hits addend; an unlimited descriptor's metadata is not
/// merged; without the setting no metadata is sent.
#[tokio::test]
async fn the_request_is_described_and_the_setting_is_off_by_default() {
    let drl = Drl::start(&config(ON, "{team: {a: 1}}", "{team: {b: 2}}"));
    let mut client = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let mut first = descriptor(&[("regular", "under"), ("extra", "x")]);
    first.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 3 });
    let mut second = descriptor(&[("quota", "under")]);
    second.limit = Some(RateLimitOverride {
        requests_per_unit: 42,
        unit: 3, // HOUR
    });
    let mut req = request("quota-domain", &[], 2);
    req.descriptors = vec![first, second, descriptor(&[("open", "y")])];
    let a = client.should_rate_limit(req).await.unwrap().into_inner();
    let meta = a.dynamic_metadata.expect("dynamic metadata");
    assert_eq!(string(&meta, "domain"), Some("quota-domain"));
    assert_eq!(field(&meta, "hitsAddend"), Some(&Kind::NumberValue(2.0)));
    let Some(Kind::ListValue(ds)) = field(&meta, "descriptors") else {
        panic!("descriptors: {meta:?}")
    };
    let ds: Vec<&Struct> = ds
        .values
        .iter()
        .map(|v| match &v.kind {
            Some(Kind::StructValue(s)) => s,
            other => panic!("a descriptor: {other:?}"),
        })
        .collect();
    assert_eq!(ds.len(), 3);
    let entries = |s: &Struct| -> Vec<String> {
        match field(s, "entries") {
            Some(Kind::ListValue(l)) => l
                .values
                .iter()
                .map(|v| match &v.kind {
                    Some(Kind::StringValue(s)) => s.clone(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("entries: {other:?}"),
        }
    };
    assert_eq!(entries(ds[0]), ["regular=under", "extra=x"]);
    assert_eq!(field(ds[0], "hitsAddend"), Some(&Kind::NumberValue(3.0)));
    assert_eq!(field(ds[0], "limit"), None);
    assert_eq!(
        string(ds[1], "limit"),
        Some("requests_per_unit:42 unit:HOUR")
    );
    assert_eq!(field(ds[1], "hitsAddend"), None);
    assert_eq!(entries(ds[2]), ["open=y"]);
    // The first descriptor matches no rule with metadata (two entries:
    // `regular=under` has no `extra` child), the second is an override
    // (no metadata), the third is unlimited: nothing merged.
    assert_eq!(field(&meta, "metadata"), None);

    let off = Drl::start(&config(
        "  envoy_quota_mode: true",
        "{name: a}",
        "{name: b}",
    ));
    let a = ask(&off, &[("regular", "under")]).await;
    assert_eq!(a.dynamic_metadata, None);
}

/// Nested maps merge key by key, as the reference's `mergeMetadata`.
#[tokio::test]
async fn nested_maps_merge() {
    let drl = Drl::start(&config(ON, "{team: {a: 1}}", "{team: {a: 9, b: 2}}"));
    let a = ask(&drl, &[("regular", "under"), ("quota", "under")]).await;
    let Some(Kind::StructValue(team)) = field(passed(&a).expect("metadata"), "team") else {
        panic!("team: {a:?}")
    };
    assert_eq!(field(team, "a"), Some(&Kind::NumberValue(1.0)));
    assert_eq!(field(team, "b"), Some(&Kind::NumberValue(2.0)));
}

/// A `metadata` that is not a map is refused, naming the descriptor (the
/// reference's YAML reader refuses it too).
#[test]
fn metadata_must_be_a_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drl.yaml");
    std::fs::write(&path, config(ON, "[1, 2]", "{name: b}")).unwrap();
    let (ok, out) = config_check(&path);
    assert!(!ok, "{out}");
    assert!(
        out.contains("metadata of descriptor \"regular_under\" must be a map"),
        "{out}"
    );
}
