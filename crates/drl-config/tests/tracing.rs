//! `tracing:` (envoyproxy/ratelimit's `TRACING_*` settings): off by
//! default, as there; the sampling rate and endpoint are checked at load.

use drl_config::sections::{OtlpProtocol, TracingConfig};

#[test]
fn off_by_default_with_the_reference_defaults() {
    let cfg = drl_config::parse("limits: []\n", "t").unwrap();
    assert_eq!(cfg.tracing, TracingConfig::default());
    assert!(!cfg.tracing.enabled);
    assert_eq!(cfg.tracing.protocol, OtlpProtocol::Http);
    assert_eq!(cfg.tracing.sampling_rate, 1.0);
    assert_eq!(cfg.tracing.service_instance_id, None);
}

#[test]
fn every_setting_is_read() {
    let cfg = drl_config::parse(
        "tracing:
  enabled: true
  protocol: grpc
  endpoint: http://127.0.0.1:4317
  service_name: edge-rl
  service_namespace: eu
  service_instance_id: pod-1
  sampling_rate: 0.25
limits: []
",
        "t",
    )
    .unwrap();
    let t = cfg.tracing;
    assert!(t.enabled);
    assert_eq!(t.protocol, OtlpProtocol::Grpc);
    assert_eq!(t.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
    assert_eq!(
        (t.service_name.as_str(), t.service_namespace.as_str()),
        ("edge-rl", "eu")
    );
    assert_eq!(t.service_instance_id.as_deref(), Some("pod-1"));
    assert_eq!(t.sampling_rate, 0.25);
}

#[test]
fn a_sampling_rate_outside_zero_to_one_is_refused_at_its_line() {
    for bad in ["1.5", "-0.1", ".nan"] {
        let text = format!("limits: []\ntracing:\n  enabled: true\n  sampling_rate: {bad}\n");
        let e = drl_config::parse(&text, "t").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("sampling_rate must be between 0.0 and 1.0"),
            "{msg}"
        );
        assert_eq!(e.line, Some(4), "{msg}");
    }
    for good in ["0", "0.0", "1", "0.5"] {
        let text = format!("limits: []\ntracing: {{sampling_rate: {good}}}\n");
        drl_config::parse(&text, "t").unwrap();
    }
}

#[test]
fn bad_protocol_endpoint_and_name_are_refused() {
    let e = drl_config::parse("tracing: {protocol: udp}\n", "t").unwrap_err();
    assert!(e.to_string().contains("udp"), "{e}");
    for bad in ["127.0.0.1:4318", "ftp://c:1", "http://"] {
        let text = format!("tracing:\n  endpoint: \"{bad}\"\n");
        let e = drl_config::parse(&text, "t").unwrap_err();
        assert!(
            e.to_string().contains("is not an http:// or https:// URL"),
            "{bad}: {e}"
        );
        assert_eq!(e.line, Some(2));
    }
    let e = drl_config::parse("tracing: {service_name: \"\"}\n", "t").unwrap_err();
    assert!(
        e.to_string().contains("service_name must not be empty"),
        "{e}"
    );
}
