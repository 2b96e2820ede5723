//! envoyproxy/ratelimit's multi-file configuration tests
//! (`test/config/config_test.go`: TestDomainMerge,
//! TestDuplicateKeyDomainMerge, TestDuplicateDomain), ported: the
//! fixtures (written inline, as the reference's `merge_domain_key1.yaml`,
//! `merge_domain_key2.yaml` and `duplicate_domain.yaml` hold them) are
//! files of one directory served by a real `drl serve --config DIR`, as
//! the reference serves its runtime directory; `MERGE_DOMAIN_CONFIG` is
//! `server.envoy_merge_domains`.

mod common;

use common::{Drl, config_check};
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const KEY1: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
";

const KEY2: &str = "domain: test-domain
descriptors:
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const BASIC: &str = "domain: basic
descriptors:
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
";

const MERGE: &str = "server:
  envoy_merge_domains: true
";

/// The current limit's `requests_per_unit` for one descriptor of
/// `test-domain`, `None` when no limit applies.
async fn limit_of(drl: &Drl, domain: &str, entries: &[(&str, &str)]) -> Option<u32> {
    let mut client = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let answer = client
        .should_rate_limit(request(domain, &[entries], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    answer.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// `drl config check DIR` of `files`: (accepted, output).
fn check(files: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    config_check(dir.path())
}

// TestDomainMerge: two files of test-domain, merged, each key its limit.
#[tokio::test]
async fn two_files_of_one_domain_merge() {
    let drl = Drl::start_dir(&[
        ("drl.yaml", MERGE),
        ("merge_domain_key1.yaml", KEY1),
        ("merge_domain_key2.yaml", KEY2),
    ]);
    assert_eq!(
        limit_of(&drl, "test-domain", &[("key1", "value1")]).await,
        Some(10)
    );
    assert_eq!(
        limit_of(&drl, "test-domain", &[("key2", "value2")]).await,
        Some(20)
    );
    // An empty descriptor matches no rule (the reference's nil limit).
    assert_eq!(limit_of(&drl, "test-domain", &[("other", "x")]).await, None);
}

// TestDuplicateKeyDomainMerge: merging a file with itself repeats
// key1_value1: refused, naming the file and the composite key.
#[test]
fn merging_a_key_twice_is_refused() {
    let (ok, out) = check(&[
        ("drl.yaml", MERGE),
        ("merge_domain_key1.yaml", KEY1),
        ("merge_domain_key1_again.yaml", KEY1),
    ]);
    assert!(!ok, "accepted:\n{out}");
    assert!(out.contains("merge_domain_key1_again.yaml"), "{out}");
    assert!(
        out.contains("duplicate descriptor composite key 'test-domain.key1_value1'"),
        "{out}"
    );
}

// TestDuplicateDomain: without merging, a second file of a domain is
// refused, naming it.
#[test]
fn a_domain_in_two_files_is_refused_without_merging() {
    let (ok, out) = check(&[("basic.yaml", KEY1), ("duplicate_domain.yaml", KEY2)]);
    assert!(!ok, "accepted:\n{out}");
    assert!(out.contains("duplicate_domain.yaml"), "{out}");
    assert!(out.contains("duplicate domain 'test-domain'"), "{out}");
}

/// Domains of several files are served side by side, and a file added to
/// the directory is served after the watcher's reload (no SIGHUP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_added_to_the_directory_is_served() {
    let drl = Drl::start_dir(&[("merge_domain_key1.yaml", KEY1)]);
    assert_eq!(
        limit_of(&drl, "test-domain", &[("key1", "value1")]).await,
        Some(10)
    );
    let dir = drl.config.clone();
    std::fs::write(dir.join("basic.yaml"), BASIC).unwrap();
    common::wait_for("the added file's domain to be served", || {
        let rt = tokio::runtime::Handle::current();
        tokio::task::block_in_place(|| {
            rt.block_on(async {
                let mut client = RateLimitServiceClient::connect(drl.grpc_url())
                    .await
                    .unwrap();
                let a = client
                    .should_rate_limit(request("basic", &[&[("key3", "x")]], 1))
                    .await
                    .unwrap()
                    .into_inner();
                a.statuses[0].current_limit.is_some()
            })
        })
    });
}

/// Files other than `*.yaml`/`*.yml` and hidden names (a ConfigMap's
/// `..data`) are not read; a directory without a config file is refused.
#[test]
fn only_yaml_files_are_read_and_an_empty_directory_is_refused() {
    let (ok, out) = check(&[
        ("merge_domain_key1.yaml", KEY1),
        ("notes.txt", "not yaml: ["),
    ]);
    assert!(ok, "{out}");
    let (ok, out) = check(&[(".hidden.yaml", "not yaml: [")]);
    assert!(!ok, "accepted:\n{out}");
    assert!(out.contains("no .yaml or .yml file"), "{out}");
}

/// `reload.yaml` of the reference's integration runtime directory.
const RELOAD: &str = "domain: reload
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50

  - key: block
    rate_limit:
      unit: second
      requests_per_unit: 0

  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
";

/// test/integration/integration_test.go: TestBasicReloadConfig
/// (`testConfigReload`): a file added to the watched directory is loaded
/// (`config_load_success` grows, its rule answers), and its removal is a
/// reload too. The reference removes what a removed file held; drl
/// refuses that on a file change unless `server.allow_limit_removal: true`
/// (a truncated file must not drop limits), which this directory sets.
#[tokio::test]
async fn test_basic_reload_config() {
    let drl = Drl::start_dir(&[
        ("basic.yaml", BASIC),
        ("server.yaml", "server:\n  allow_limit_removal: true\n"),
    ]);
    let loads = || {
        let text = common::http_get(&drl.url("/metrics")).unwrap().1;
        common::metric(&text, "ratelimit_service_config_load_success").unwrap_or(0.0)
    };
    let mut client = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let mut ask = async |entries: &[(&str, &str)]| {
        let a = client
            .should_rate_limit(request("reload", &[entries], 1))
            .await
            .unwrap()
            .into_inner();
        let s = &a.statuses[0];
        (
            a.overall_code,
            s.current_limit
                .as_ref()
                .map(|l| (l.requests_per_unit, l.unit)),
            s.limit_remaining,
        )
    };
    // No `reload` domain yet: OK, no limit.
    assert_eq!(ask(&[("block", "foo")]).await, (Code::Ok as i32, None, 0));
    let before = loads();
    std::fs::write(drl.config.join("reload.yaml"), RELOAD).unwrap();
    common::wait_for("the added file to be loaded", || loads() > before);
    assert_eq!(
        ask(&[("key1", "foo")]).await,
        (Code::Ok as i32, Some((50, 1)), 49)
    );
    let before = loads();
    std::fs::remove_file(drl.config.join("reload.yaml")).unwrap();
    common::wait_for("the removal to be loaded", || loads() > before);
    assert_eq!(ask(&[("key1", "foo")]).await, (Code::Ok as i32, None, 0));
}
