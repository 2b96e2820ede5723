//! limitador limits files decide as the equivalent native config does.
//!
//! Each case is a limitador limits file (written from limitador's
//! documented format: its README, `doc/how-it-works.md`, the sandbox and
//! example files) and the equivalent native drl config, with the
//! conditions of the file written out by hand in Rust as the request ->
//! (limit, key) mapping. The native side applies limitador's documented
//! rule with native checks only: query every applying limit (cost 0),
//! and only if all have room count the hits on each. Random request
//! sequences go through both, request by request, and every decision
//! must agree.

use drl_api::rls_request::DescriptorView;
use drl_config as config;
use drl_service::engine::{CheckRequest, Engine};
use drl_test_kit::envoy::descriptor as desc;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use proptest::prelude::*;

type Descs = Vec<RateLimitDescriptor>;
/// A request -> the (native limit, key) pairs that apply.
type Mapping = fn(&Descs) -> Vec<(&'static str, String)>;

fn get<'a>(d: &'a Descs, i: usize, k: &str) -> Option<&'a str> {
    d.get(i)?
        .entries
        .iter()
        .rev()
        .find(|e| e.key == k)
        .map(|e| e.value.as_str())
}

fn any<'a>(d: &'a Descs, k: &str) -> Option<&'a str> {
    d.iter()
        .rev()
        .flat_map(|d| d.entries.iter().rev())
        .find(|e| e.key == k)
        .map(|e| e.value.as_str())
}

/// The sandbox shape (current CEL form): GET/POST limits that exclude
/// one path, one for that path, and one per `varA` when `keyA` matches.
const SANDBOX: &str = r#"---
- namespace: test_namespace
  max_value: 4
  seconds: 3600
  conditions:
    - "descriptors[0]['req.method'] == 'GET'"
    - "descriptors[0]['req.path'] != '/json'"
  variables: []
- namespace: test_namespace
  max_value: 3
  seconds: 3600
  conditions:
    - "descriptors[0]['req.method'] == 'POST'"
    - "descriptors[0]['req.path'] != '/json'"
  variables: []
- namespace: test_namespace
  max_value: 6
  seconds: 3600
  conditions:
    - "descriptors[0]['req.method'] == 'GET'"
    - "descriptors[0]['req.path'] == '/json'"
  variables: []
- namespace: test_namespace
  max_value: 2
  seconds: 3600
  conditions:
    - "descriptors[0]['keyA'] == 'valueA'"
  variables:
    - descriptors[0]['varA']
"#;

const SANDBOX_NATIVE: &str = "limits:
  - {name: get, algorithm: fixed-window, quota: 4/3600s}
  - {name: post, algorithm: fixed-window, quota: 3/3600s}
  - {name: json, algorithm: fixed-window, quota: 6/3600s}
  - {name: vara, algorithm: fixed-window, quota: 2/3600s}
";

fn sandbox_map(d: &Descs) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let (m, p) = (get(d, 0, "req.method"), get(d, 0, "req.path"));
    if m == Some("GET") && p.is_some_and(|p| p != "/json") {
        out.push(("get", String::new()));
    }
    if m == Some("POST") && p.is_some_and(|p| p != "/json") {
        out.push(("post", String::new()));
    }
    if m == Some("GET") && p == Some("/json") {
        out.push(("json", String::new()));
    }
    if get(d, 0, "keyA") == Some("valueA")
        && let Some(v) = get(d, 0, "varA")
    {
        out.push(("vara", v.to_string()));
    }
    out
}

/// The older form of limitador's example file: a namespace-wide limit,
/// and POSTs per user (bare keys, read from any descriptor, the last one
/// winning; the oldest unquoted value), plus two variables and a literal
/// on the left.
const OLDER: &str = r#"---
-
  namespace: test_namespace
  max_value: 12
  seconds: 3600
  conditions:
  variables:
-
  namespace: test_namespace
  name: posts-per-user
  max_value: 3
  seconds: 3600
  conditions:
    - "req.method == POST"
  variables:
    - user_id
-
  namespace: test_namespace
  max_value: 2
  seconds: 3600
  conditions:
    - "'GET' == req.method"
    - "app != \"internal\""
  variables:
    - user_id
    - app
"#;

const OLDER_NATIVE: &str = "limits:
  - {name: all, algorithm: fixed-window, quota: 12/3600s}
  - {name: posts, algorithm: fixed-window, quota: 3/3600s}
  - {name: gets, algorithm: fixed-window, quota: 2/3600s}
";

fn older_map(d: &Descs) -> Vec<(&'static str, String)> {
    let mut out = vec![("all", String::new())];
    let (m, u) = (any(d, "req.method"), any(d, "user_id"));
    if m == Some("POST")
        && let Some(u) = u
    {
        out.push(("posts", u.to_string()));
    }
    let app = any(d, "app");
    if m == Some("GET")
        && app.is_some_and(|a| a != "internal")
        && let (Some(u), Some(a)) = (u, app)
    {
        out.push(("gets", format!("{u}\u{1f}{a}")));
    }
    out
}

/// Several descriptors (CEL form, indices 0 and 1, `.key` access) and a
/// `max_value: 0` limit that blocks what it matches.
const MULTI: &str = r#"- namespace: api
  max_value: 5
  seconds: 3600
  conditions: ["descriptors[0].x == '1'"]
  variables: ["descriptors[0].z"]
- namespace: api
  name: blocked
  max_value: 0
  seconds: 60
  conditions:
    - "descriptors[0].x == '1'"
    - "descriptors[1]['y'] == '2'"
  variables: []
- namespace: api
  max_value: 3
  seconds: 3600
  conditions: ["descriptors[1]['y'] != '2'"]
  variables: ["descriptors[1]['z']"]
"#;

const MULTI_NATIVE: &str = "limits:
  - {name: x, algorithm: fixed-window, quota: 5/3600s}
  - {name: y, algorithm: fixed-window, quota: 3/3600s}
";

fn multi_map(d: &Descs) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if get(d, 0, "x") == Some("1")
        && let Some(z) = get(d, 0, "z")
    {
        out.push(("x", z.to_string()));
    }
    if get(d, 0, "x") == Some("1") && get(d, 1, "y") == Some("2") {
        out.push(("BLOCK", String::new()));
    }
    if get(d, 1, "y").is_some_and(|y| y != "2")
        && let Some(z) = get(d, 1, "z")
    {
        out.push(("y", z.to_string()));
    }
    out
}

struct Pair {
    limitador: Engine,
    native: Engine,
    namespace: &'static str,
    map: Mapping,
}

impl Pair {
    fn new(file: &str, native: &str, namespace: &'static str, map: Mapping) -> Pair {
        let l = config::parse(file, "limits.yaml").unwrap();
        assert_eq!(
            config::detect(file),
            config::Format::Limitador,
            "read as a limitador file"
        );
        let n = config::parse(native, "native.yaml").unwrap();
        Pair {
            limitador: Engine::new(&l, None).unwrap(),
            native: Engine::new(&n, None).unwrap(),
            namespace,
            map,
        }
    }

    /// limitador's decision for `d`.
    async fn limitador(&self, d: &Descs, hits: u64) -> bool {
        let limits = self.limitador.limits();
        let rules = limits.limitador.get(self.namespace).expect("namespace");
        let views: Vec<DescriptorView<'_>> = d.iter().map(DescriptorView::of).collect();
        let (allowed, _) =
            drl_service::limitador::decide::decide(&self.limitador, &limits, rules, &views, hits)
                .await
                .unwrap();
        allowed
    }

    /// The native config's decision for `d`, by limitador's documented rule.
    async fn native(&self, d: &Descs, hits: u64) -> bool {
        let applying = (self.map)(d);
        if applying.iter().any(|(l, _)| *l == "BLOCK") {
            return false;
        }
        if applying.is_empty() {
            return true;
        }
        let limits = self.native.limits();
        let query: Vec<CheckRequest<'_>> = applying
            .iter()
            .map(|(l, k)| CheckRequest {
                limit: l,
                key: k,
                cost: 0,
                op: Default::default(),
            })
            .collect();
        let room = self.native.check(&limits, &query).await.unwrap();
        if room.iter().any(|d| d.remaining < hits) {
            return false;
        }
        let count: Vec<CheckRequest<'_>> = query
            .iter()
            .map(|r| CheckRequest { cost: hits, ..*r })
            .collect();
        let counted = self.native.check(&limits, &count).await.unwrap();
        counted.iter().all(|d| d.allowed)
    }
}

/// One random request: 1-2 descriptors over a small alphabet.
fn request() -> impl Strategy<Value = (Descs, u64)> {
    let entry = prop_oneof![
        prop::sample::select(vec!["GET", "POST", "PUT"]).prop_map(|v| ("req.method", v)),
        prop::sample::select(vec!["/json", "/a"]).prop_map(|v| ("req.path", v)),
        prop::sample::select(vec!["valueA", "other"]).prop_map(|v| ("keyA", v)),
        prop::sample::select(vec!["p", "q"]).prop_map(|v| ("varA", v)),
        prop::sample::select(vec!["u1", "u2", "u3"]).prop_map(|v| ("user_id", v)),
        prop::sample::select(vec!["internal", "web"]).prop_map(|v| ("app", v)),
        prop::sample::select(vec!["1", "2"]).prop_map(|v| ("x", v)),
        prop::sample::select(vec!["1", "2"]).prop_map(|v| ("y", v)),
        prop::sample::select(vec!["a", "b"]).prop_map(|v| ("z", v)),
    ];
    let descriptor = prop::collection::vec(entry, 0..5);
    (
        prop::collection::vec(descriptor, 1..3),
        prop::sample::select(vec![1u64, 1, 1, 2]),
    )
        .prop_map(|(ds, hits)| {
            let ds = ds.iter().map(|d| desc(d)).collect();
            (ds, hits)
        })
}

fn run(pair: &Pair, seq: &[(Descs, u64)]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut allowed = 0;
        for (i, (d, hits)) in seq.iter().enumerate() {
            let a = pair.limitador(d, *hits).await;
            let b = pair.native(d, *hits).await;
            prop_assert_eq!(a, b, "request {} {:?} hits {}", i, d, hits);
            allowed += usize::from(a);
        }
        // Not vacuous: some requests were allowed (and, with limits this
        // small and 120 requests, some denied).
        prop_assert!(allowed > 0);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn sandbox_file_decides_as_native(seq in prop::collection::vec(request(), 120)) {
        run(&Pair::new(SANDBOX, SANDBOX_NATIVE, "test_namespace", sandbox_map), &seq)?;
    }

    #[test]
    fn older_form_file_decides_as_native(seq in prop::collection::vec(request(), 120)) {
        run(&Pair::new(OLDER, OLDER_NATIVE, "test_namespace", older_map), &seq)?;
    }

    #[test]
    fn multi_descriptor_file_decides_as_native(seq in prop::collection::vec(request(), 120)) {
        run(&Pair::new(MULTI, MULTI_NATIVE, "api", multi_map), &seq)?;
    }
}

/// Hand-computed: the documented examples of limitador's how-it-works
/// page, and all-or-nothing over two limits.
#[tokio::test]
async fn documented_examples_decide_as_documented() {
    let p = Pair::new(SANDBOX, SANDBOX_NATIVE, "test_namespace", sandbox_map);
    let get_a = vec![desc(&[("req.method", "GET"), ("req.path", "/a")])];
    for _ in 0..4 {
        assert!(p.limitador(&get_a, 1).await);
    }
    assert!(!p.limitador(&get_a, 1).await, "the 5th GET is over 4");
    // Same entries plus keyA/varA: both the GET limit (full) and the varA
    // limit apply; denied, and the varA counter is untouched.
    let both = vec![desc(&[
        ("req.method", "GET"),
        ("req.path", "/a"),
        ("keyA", "valueA"),
        ("varA", "p"),
    ])];
    assert!(!p.limitador(&both, 1).await);
    let vara_only = vec![desc(&[("keyA", "valueA"), ("varA", "p")])];
    assert!(p.limitador(&vara_only, 1).await, "nothing was counted");
    assert!(p.limitador(&vara_only, 1).await);
    assert!(!p.limitador(&vara_only, 1).await, "2 per varA");
    let other_var = vec![desc(&[("keyA", "valueA"), ("varA", "q")])];
    assert!(p.limitador(&other_var, 2).await, "one counter per value");
    // A variable absent: the limit does not apply.
    let no_var = vec![desc(&[("keyA", "valueA")])];
    for _ in 0..5 {
        assert!(p.limitador(&no_var, 1).await);
    }
    // A condition on an absent entry does not hold, `!=` included.
    let post_no_path = vec![desc(&[("req.method", "POST")])];
    for _ in 0..5 {
        assert!(p.limitador(&post_no_path, 1).await);
    }
    // Hits beyond the room are denied whole.
    let post = vec![desc(&[("req.method", "POST"), ("req.path", "/b")])];
    assert!(!p.limitador(&post, 4).await);
    assert!(p.limitador(&post, 3).await);
}

#[test]
fn config_check_errors_name_the_line() {
    let bad = SANDBOX.replace(
        "\"descriptors[0]['req.path'] == '/json'\"",
        "\"descriptors[0]['req.path'].startsWith('/json')\"",
    );
    let e = config::parse(&bad, "limits.yaml").unwrap_err();
    assert_eq!(e.line, Some(21), "{e}");
    assert_eq!(e.column, Some(45), "{e}");
    assert!(e.message.contains("function calls"), "{e}");
    // A native config naming the file reads it; a missing file is an error
    // at the `file:` line.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("limits.yaml");
    std::fs::write(&f, SANDBOX).unwrap();
    let native = format!("limitador:\n  - file: {}\n", f.display());
    let c = config::parse(&native, "drl.yaml").unwrap();
    assert_eq!(c.limitador[0].limits.len(), 4);
    let missing = "limitador:\n  - file: /nonexistent/limits.yaml\n";
    let e = config::parse(missing, "drl.yaml").unwrap_err();
    assert_eq!(e.line, Some(2), "{e}");
    let redis = format!("limitador:\n  - file: {}\n    scope: redis\n", f.display());
    let e = config::parse(&redis, "drl.yaml").unwrap_err();
    assert!(e.message.contains("`redis:`"), "{e}");
}
