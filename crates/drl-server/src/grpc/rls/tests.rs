//! Tests of the RLS handler's key building, headers and readiness.

use super::*;
use crate::http::push_u64;
use drl_config::envoy::Unit;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use proptest::prelude::*;

/// Prost entries, viewed as the handler reads them.
fn view(entries: &[Entry]) -> Vec<EntryView<'_>> {
    entries
        .iter()
        .map(|e| EntryView {
            key: &e.key,
            value: &e.value,
        })
        .collect()
}

/// The key as the handler built it before `descriptor_key`: always in a
/// fresh buffer.
fn reference_key(entries: &[Entry], is_override: bool) -> String {
    let mut key = String::new();
    if is_override {
        state_key(
            &mut key,
            entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
        );
    } else {
        for (j, e) in entries.iter().enumerate() {
            if j > 0 {
                key.push('\u{1f}');
            }
            key.push_str(&e.value);
        }
    }
    key
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::vec(
        ("\\PC{0,6}", "\\PC{0,8}").prop_map(|(key, value)| Entry { key, value }),
        0..5,
    )
}

proptest! {
    /// The key equals the old construction on any descriptor, with or
    /// without an override, whatever the reused buffer held before.
    #[test]
    fn descriptor_key_matches_the_reference(
        es in entries(),
        is_override in any::<bool>(),
        stale in "\\PC{0,12}",
    ) {
        let mut buf = stale;
        let got = descriptor_key(&mut buf, &view(&es), is_override, &[]).to_string();
        prop_assert_eq!(got, reference_key(&es, is_override));
    }

    /// The decimal equals `Display`.
    #[test]
    fn push_u64_matches_display(n in any::<u64>(), prefix in "[a-z]{0,3}") {
        let mut s = prefix.clone();
        push_u64(&mut s, n);
        prop_assert_eq!(s, format!("{prefix}{n}"));
    }

    /// The headers equal the `format!`-made ones.
    #[test]
    fn ratelimit_headers_match_format(
        rpu in any::<u32>(),
        unit in 0usize..7,
        remaining in any::<u64>(),
        reset in any::<u64>(),
    ) {
        let unit = [Unit::Second, Unit::Minute, Unit::Hour, Unit::Day, Unit::Week, Unit::Month, Unit::Year][unit];
        let rule = EnvoyRule {
            path: Arc::from("p"),
            kind: RuleKind::Unlimited,
            name: None,
            replaces: Vec::new(),
            shadow: false,
            quota: false,
            share: Vec::new(),
            unit,
            requests_per_unit: rpu,
            metadata: None,
            stats: None,
            detailed: false,
        };
        let answer = Answer {
            headers: Some(header_fields(&rule, remaining, reset)),
            ..Default::default()
        };
        let got: Vec<(String, String)> = answer
            .message()
            .response_headers_to_add
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        let want = vec![
            ("RateLimit-Limit".to_string(), rpu.to_string()),
            ("RateLimit-Remaining".to_string(), remaining.to_string()),
            ("RateLimit-Reset".to_string(), ceil_secs(reset).to_string()),
        ];
        prop_assert_eq!(got, want);
    }
}

#[test]
fn one_entry_is_borrowed_not_copied() {
    let es = vec![Entry {
        key: "k".into(),
        value: "v".into(),
    }];
    let mut buf = String::new();
    let v = view(&es);
    let key = descriptor_key(&mut buf, &v, false, &[]);
    assert!(std::ptr::eq(key.as_ptr(), es[0].value.as_ptr()));
}

/// Every kind of RLS call on limits in memory is answered at the
/// first poll: what the hot path's `answer_rls_now` relies on.
#[test]
fn in_memory_calls_are_ready_at_the_first_poll() {
    use drl_api::rls_request::{DescriptorView, OverrideView};
    use drl_config as config;
    use futures::FutureExt as _;

    let envoy = Engine::new(
        &config::parse(
            "envoy:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: open
        rate_limit: {unlimited: true}
      - key: blocked
        rate_limit: {unit: second, requests_per_unit: 0}
",
            "<test>",
        )
        .unwrap(),
        None,
    )
    .unwrap();
    let limitador = Engine::new(
        &config::parse(
            "- namespace: api
  max_value: 1
  seconds: 60
  conditions: []
  variables: [\"descriptors[0].z\"]
",
            "<test>",
        )
        .unwrap(),
        None,
    )
    .unwrap();
    let one = |domain: &'static str, key: &'static str, limit: Option<OverrideView>| {
        let mut d = DescriptorView::default();
        d.entries.push(EntryView { key, value: "v" });
        d.limit = limit;
        let mut r = RequestView {
            domain,
            ..Default::default()
        };
        r.descriptors.push(d);
        r
    };
    let over = Some(OverrideView {
        requests_per_unit: 1,
        unit: 1,
    });
    let cases = [
        (&envoy, one("edge", "user", None)),
        (&envoy, one("edge", "open", None)),
        (&envoy, one("edge", "blocked", None)),
        (&envoy, one("edge", "unmatched", None)),
        (&envoy, one("edge", "user", over)),
        (&envoy, one("nowhere", "user", None)),
        (&envoy, RequestView::default()),
        (&limitador, one("api", "z", None)),
    ];
    for (engine, req) in &cases {
        let limits = engine.limits();
        assert!(limits.rls_in_memory);
        // Three times: allowed, then over the limit, then denied.
        for _ in 0..3 {
            let call = should_rate_limit_on(engine, &limits, req, engine.now(), |a| a.message());
            assert!(call.now_or_never().is_some(), "{req:?}");
        }
    }
}

/// Before a config has loaded (`--wait-for-config`), every RLS call is
/// an error with the reference's message, `UNAVAILABLE`, never an answer
/// (a domain nobody configured is OK once a config has loaded), and it
/// is ready at the first poll, as the hot path needs; a native batch is
/// refused before any lookup.
#[test]
fn before_a_config_loads_every_call_is_an_error() {
    use drl_api::rls_request::DescriptorView;
    use futures::FutureExt as _;

    let engine = Engine::not_loaded(
        std::path::PathBuf::from("missing.yaml"),
        drl_service::scope::Stores::new(),
    );
    assert!(!engine.is_loaded());
    let limits = engine.limits();
    assert!(limits.rls_in_memory);
    for domain in ["edge", "nowhere"] {
        let mut d = DescriptorView::default();
        d.entries.push(EntryView {
            key: "user",
            value: "v",
        });
        let mut req = RequestView {
            domain,
            ..Default::default()
        };
        req.descriptors.push(d);
        let call = should_rate_limit_on(&engine, &limits, &req, engine.now(), |a| a.message());
        let e = call.now_or_never().expect("ready").unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert_eq!(e.message(), "no rate limit configuration loaded");
    }
    let check = engine::CheckRequest {
        limit: "default",
        key: "k",
        cost: 1,
        op: engine::Op::Take,
    };
    let e = engine::resolve(&limits, &[check]).unwrap_err();
    assert_eq!(e, engine::CheckError::NotLoaded);
}
