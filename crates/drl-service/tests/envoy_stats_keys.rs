//! The stats keys envoyproxy/ratelimit names by request values
//! (`server.envoy_stats_values`), against the expectations of its
//! `test/config/config_test.go` (each case names its Go test; the Go
//! tests build their configs as structs, written here as the YAML files
//! they stand for).

use drl_config as config;
use drl_service::envoy_stats_key::{override_key, reference_key};
use drl_service::limits::{Limits, match_descriptor};
use drl_service::scope::Stores;

/// The key of `entries` in the domain file `yaml`, and the rule's path.
fn key(yaml: &str, entries: &[(&str, &str)]) -> (String, String) {
    let cfg = config::parse(yaml, "<test>").unwrap();
    let domain = cfg.envoy[0].domain.clone();
    let limits = Limits::build(&cfg, &Stores::new(), "<test>").unwrap();
    let root = &limits.domains[&domain];
    let rule = match_descriptor(root, entries.iter().copied()).expect("a rule");
    (
        reference_key(&domain, root, entries.iter().copied(), rule.detailed),
        rule.path.to_string(),
    )
}

const ROUTE_METHOD_SUBJECT: &str = "domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
";

#[test]
fn value_to_metric_uses_runtime_values_in_stats() {
    // TestValueToMetric_UsesRuntimeValuesInStats
    let (k, _) = key(
        ROUTE_METHOD_SUBJECT,
        &[
            ("route", "draw"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
    );
    assert_eq!(k, "domain.route_draw.http_method_GET.subject_id");
}

#[test]
fn value_to_metric_default_key_includes_value_at_that_level() {
    // TestValueToMetric_DefaultKeyIncludesValueAtThatLevel
    let yaml = "domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
";
    assert_eq!(key(yaml, &[("k1", "A"), ("k2", "foo")]).0, "d.k1_A.k2");
}

#[test]
fn value_to_metric_mid_level_only() {
    // TestValueToMetric_MidLevelOnly
    let yaml = "domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {unit: second, requests_per_unit: 1}
";
    let (k, _) = key(yaml, &[("k1", "X"), ("k2", "Y"), ("k3", "Z")]);
    assert_eq!(k, "d.k1.k2_Y.k3");
}

#[test]
fn value_to_metric_no_flag_unchanged() {
    // TestValueToMetric_NoFlag_Unchanged: the rule's own path.
    let yaml = "domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
";
    let (k, path) = key(yaml, &[("k1", "X"), ("k2", "Y")]);
    assert_eq!(k, "d.k1.k2");
    assert_eq!(k, path);
}

#[test]
fn value_to_metric_does_not_override_detailed_metric() {
    // TestValueToMetric_DoesNotOverrideDetailedMetric
    let yaml = ROUTE_METHOD_SUBJECT.replace(
        "          - key: subject_id\n",
        "          - key: subject_id\n            detailed_metric: true\n",
    );
    let (k, _) = key(
        &yaml,
        &[
            ("route", "draw"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
    );
    assert_eq!(k, "domain.route_draw.http_method_GET.subject_id_123");
}

#[test]
fn value_to_metric_with_configured_values() {
    // TestValueToMetric_WithConfiguredValues
    let yaml = "domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 30}
";
    let get = key(
        yaml,
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "user123"),
        ],
    );
    assert_eq!(get.0, "test-domain.route_api.http_method_GET.subject_id");
    let post = key(
        yaml,
        &[
            ("route", "api"),
            ("http_method", "POST"),
            ("subject_id", "user456"),
        ],
    );
    assert_eq!(post.0, "test-domain.route_api.http_method_POST.subject_id");
}

#[test]
fn value_to_metric_with_wildcard() {
    // TestValueToMetric_WithWildcard
    let yaml = "domain: domain
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
";
    let alice = key(
        yaml,
        &[
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ],
    );
    assert_eq!(alice.0, "domain.user_alice.action_readfile.resource");
    let bob = key(
        yaml,
        &[
            ("user", "bob"),
            ("action", "readdata"),
            ("resource", "database"),
        ],
    );
    assert_eq!(bob.0, "domain.user_bob.action_readdata.resource");
}

#[test]
fn value_to_metric_with_empty_value() {
    // TestValueToMetric_WithEmptyValue
    for (entries, want) in [
        (
            [("route", ""), ("http_method", "GET"), ("subject_id", "123")],
            "domain.route.http_method_GET.subject_id",
        ),
        (
            [
                ("route", "draw"),
                ("http_method", ""),
                ("subject_id", "123"),
            ],
            "domain.route_draw.http_method.subject_id",
        ),
        (
            [("route", ""), ("http_method", ""), ("subject_id", "123")],
            "domain.route.http_method.subject_id",
        ),
    ] {
        assert_eq!(key(ROUTE_METHOD_SUBJECT, &entries).0, want);
    }
}

#[test]
fn detailed_metric_keys() {
    // TestDetailedMetric: its table of nested configs and requests.
    let nested = |d1: bool, d2: bool| {
        format!(
            "domain: nested
descriptors:
  - key: key-1
    detailed_metric: {d1}
    rate_limit: {{unit: minute, requests_per_unit: 100}}
    descriptors:
      - key: key-2
        detailed_metric: {d2}
        rate_limit: {{unit: minute, requests_per_unit: 5}}
"
        )
    };
    let one: &[(&str, &str)] = &[("key-1", "value-1")];
    let two: &[(&str, &str)] = &[("key-1", "value-1"), ("key-2", "value-2")];
    assert_eq!(key(&nested(true, false), one).0, "nested.key-1_value-1");
    assert_eq!(key(&nested(false, false), one).0, "nested.key-1");
    assert_eq!(
        key(&nested(true, true), two).0,
        "nested.key-1_value-1.key-2_value-2"
    );
    assert_eq!(key(&nested(false, false), two).0, "nested.key-1.key-2");

    let realistic = "domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
";
    assert_eq!(
        key(realistic, &[("key_1", "value-for-key-1")]).0,
        "nested.key_1_value-for-key-1"
    );
    assert_eq!(
        key(realistic, &[("key_2", "key-2-value")]).0,
        "nested.key_2_key-2-value"
    );
    assert_eq!(
        key(
            realistic,
            &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")]
        )
        .0,
        "nested.key_2_key-2-value.key_3_requested-key3-value"
    );
}

#[test]
fn an_override_is_named_by_its_keys_and_values() {
    // TestConfigLimitOverride: the override's stats key.
    let entries = [("key1", "value1"), ("subkey1", "something")];
    assert_eq!(
        override_key("test-domain", entries),
        "test-domain.key1_value1.subkey1_something"
    );
    assert_eq!(override_key("d", [("k", "")]), "d.k");
}

/// `test/config/share_threshold.yaml` of the reference, as it is.
const SHARE_THRESHOLD_YAML: &str = r#"# Configuration for testing share_threshold feature
domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 200
  # Test case for nested descriptors with same key name at different levels
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 300
  # Test case for share_threshold with value_to_metric
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
  # Test case for share_threshold with detailed_metric
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit:
          unit: minute
          requests_per_unit: 80
  # Test case for nested descriptors with multiple wildcards - mixed share_threshold
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit:
              unit: minute
              requests_per_unit: 120
  # Test case for nested descriptors with multiple wildcards - both with share_threshold
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit:
              unit: minute
              requests_per_unit: 150
  # Test case: explicit value takes precedence over wildcard with share_threshold
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  # Test case: share_threshold with middle wildcard (single *)
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  # Test case: share_threshold with multi-wildcard (multiple *)
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
  # Test case: share_threshold with middle wildcard + value_to_metric (share_threshold takes priority)
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 80
  # Test case: share_threshold with middle wildcard nested
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 60
"#;

#[test]
fn share_threshold_keys() {
    // TestShareThreshold: every subtest's stats key.
    let k = |entries: &[(&str, &str)]| key(SHARE_THRESHOLD_YAML, entries).0;
    // Basic share_threshold: every matching value, one key.
    for v in ["files/a.pdf", "files/b.csv", "files/c.txt"] {
        assert_eq!(k(&[("files", v)]), "test-domain.files_files/*");
    }
    // share_threshold over value_to_metric, and over detailed_metric.
    assert_eq!(
        k(&[("route", "api/v1"), ("method", "GET")]),
        "test-domain.route_api/*.method"
    );
    assert_eq!(
        k(&[("service", "svc/user"), ("endpoint", "get")]),
        "test-domain.service_svc/*.endpoint_get"
    );
    // Nested wildcards.
    assert_eq!(
        k(&[("nested", "parent"), ("files", "nested/file1.txt")]),
        "test-domain.nested_parent.files_nested/*"
    );
    assert_eq!(
        k(&[("files", "top/file1.txt"), ("files", "nested/file1.txt")]),
        "test-domain.files_top/*.files_nested/*"
    );
    assert_eq!(
        k(&[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")]),
        "test-domain.path_path/*.file_file/*.type"
    );
    assert_eq!(
        k(&[
            ("user", "user/alice"),
            ("resource", "res/file1"),
            ("action", "read")
        ]),
        "test-domain.user_user/*.resource_res/*.action"
    );
    // An explicit value over the wildcard; the wildcard's values shared.
    assert_eq!(k(&[("file", "test1")]), "test-domain.file_test1");
    for v in ["test2", "test123", "testabc"] {
        assert_eq!(k(&[("file", v)]), "test-domain.file_test*");
    }
    // Middle and multiple wildcards.
    for v in ["/api/v1", "/api-beta-v1"] {
        assert_eq!(k(&[("midpath", v)]), "test-domain.midpath_/api*v1");
    }
    for v in ["svcAepBrpc", "svcXepYrpc"] {
        assert_eq!(k(&[("multiroute", v)]), "test-domain.multiroute_svc*ep*rpc");
    }
    for v in ["/api/v2", "/api-beta-v2"] {
        assert_eq!(k(&[("midroute", v)]), "test-domain.midroute_/api*v2");
    }
    for (t, r) in [("t1prod", "resAv2"), ("t99prod", "resBBBv2")] {
        assert_eq!(
            k(&[("tenant", t), ("resource", r)]),
            "test-domain.tenant_t*prod.resource_res*v2"
        );
    }
}
