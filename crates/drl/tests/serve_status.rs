//! The status page at `/` and `GET /v1/status`, end to end on real
//! `drl serve` processes:
//!
//! - the JSON has every field `docs/server.md` documents, with its type,
//!   on a node with every kind of scope (local, a real Redis, a one-node
//!   gossip cluster, a one-node Orbit ring), and the page shows the same
//!   numbers without JavaScript, keys escaped;
//! - `status.enabled: false` answers 404 on both and `top_keys: false`
//!   keeps no keys; `auth.tokens_file` guards both;
//! - headless Chromium loads the page from a real three-node gossip
//!   cluster under load: the script replaced the server's rendering, the
//!   numbers are in the DOM and move between two loads, every member is
//!   up; a screenshot is saved (into `docs/img/` with
//!   `DRL_UPDATE_SCREENSHOTS=1`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::gossip::{Cluster, Opts, free_udp_port};
use common::{Drl, http_get, http_request, post_json, wait_for};
use serde_json::Value;

/// Every field of `/v1/status` and its JSON type, as `docs/server.md`
/// lists them (`[]` marks the elements of an array; `?` a value that may
/// be null).
const FIELDS: &[(&str, &str)] = &[
    ("version", "number"),
    ("keys", "string"),
    ("node", "object"),
    ("node.version", "string"),
    ("node.now_ms", "number"),
    ("node.started_ms", "number"),
    ("node.uptime_s", "number"),
    ("node.draining", "bool"),
    ("limits", "array"),
    ("limits[].name", "string"),
    ("limits[].scope", "string"),
    ("limits[].kind", "string"),
    ("limits[].algorithm", "string"),
    ("limits[].quotas", "array"),
    ("limits[].shadow", "bool"),
    ("limits[].allowed_total", "number"),
    ("limits[].denied_total", "number"),
    ("limits[].allowed_per_s", "array"),
    ("limits[].denied_per_s", "array"),
    ("limits[].latency", "object?"),
    ("limits[].latency.samples", "number"),
    ("limits[].latency.p50_us", "number"),
    ("limits[].latency.p99_us", "number"),
    ("limits[].top_keys", "object?"),
    ("limits[].top_keys.capacity", "number"),
    ("limits[].top_keys.generation_s", "number"),
    ("limits[].top_keys.sample_1_in", "number"),
    ("limits[].top_keys.by_demand", "object"),
    ("limits[].top_keys.by_demand.total", "number"),
    ("limits[].top_keys.by_demand.error_bound", "number"),
    ("limits[].top_keys.by_demand.keys", "array"),
    ("limits[].top_keys.by_demand.keys[].key", "string"),
    ("limits[].top_keys.by_demand.keys[].count", "number"),
    ("limits[].top_keys.by_demand.keys[].error", "number"),
    ("limits[].top_keys.by_denials", "object"),
    ("limits[].top_keys.by_denials.total", "number"),
    ("limits[].top_keys.by_denials.error_bound", "number"),
    ("limits[].top_keys.by_denials.keys", "array"),
    ("limits[].gossip_keys", "array?"),
    ("limits[].gossip_keys[].key", "string"),
    ("limits[].gossip_keys[].limit", "number"),
    ("limits[].gossip_keys[].effective_limit", "number"),
    ("limits[].gossip_keys[].live_nodes", "number"),
    ("limits[].gossip_keys[].estimate", "number"),
    ("limits[].gossip_keys[].published", "number"),
    ("limits[].gossip_keys[].remote", "number"),
    ("limits[].gossip_keys[].share", "number"),
    ("limits[].gossip_keys[].local_limit", "number?"),
    ("limits[].gossip_keys[].drop_probability", "number?"),
    ("limits[].gossip_keys[].admitted", "number"),
    ("limits[].gossip_keys[].denied", "number"),
    ("limits[].orbit_keys", "array?"),
    ("limits[].orbit_keys[].key", "string"),
    ("limits[].orbit_keys[].window", "number"),
    ("limits[].orbit_keys[].cap", "number"),
    ("limits[].orbit_keys[].admitted_here", "number"),
    ("limits[].orbit_keys[].capacity_here", "number"),
    ("gossip", "object?"),
    ("gossip.node_id", "number"),
    ("gossip.addr", "string"),
    ("gossip.algorithm", "string"),
    ("gossip.live_nodes", "number"),
    ("gossip.nodes", "number?"),
    ("gossip.members", "array"),
    ("gossip.members[].id", "number"),
    ("gossip.members[].addr", "string"),
    ("gossip.members[].state", "string"),
    ("gossip.members[].self", "bool"),
    ("orbit", "object?"),
    ("orbit.node_id", "number"),
    ("orbit.ring", "array"),
    ("orbit.epoch_ms", "number"),
    ("orbit.down", "array"),
    ("redis", "object?"),
    ("redis.engine", "string"),
    ("redis.breaker", "string"),
    ("redis.errors", "number"),
    ("redis.timeouts", "number"),
    ("redis.fail_overs", "number"),
    ("redis.in_flight", "number"),
    ("redis.max_in_flight", "number"),
];

fn type_ok(v: &Value, ty: &str) -> bool {
    let (ty, nullable) = match ty.strip_suffix('?') {
        Some(t) => (t, true),
        None => (ty, false),
    };
    match v {
        Value::Null => nullable,
        Value::Bool(_) => ty == "bool",
        Value::Number(_) => ty == "number",
        Value::String(_) => ty == "string",
        Value::Array(_) => ty == "array",
        Value::Object(_) => ty == "object",
    }
}

/// Every value at `path` (`a.b[].c`) in `v`; `None` if a field is missing
/// somewhere it must be (a null parent or an empty array yields nothing).
fn values<'a>(v: &'a Value, path: &str) -> Result<Vec<&'a Value>, String> {
    let mut cur = vec![v];
    for part in path.split('.') {
        let (name, each) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        let mut next = Vec::new();
        for c in cur {
            if c.is_null() {
                continue;
            }
            let obj = c
                .as_object()
                .ok_or_else(|| format!("{path}: {name}'s parent is not an object: {c}"))?;
            let f = obj
                .get(name)
                .ok_or_else(|| format!("{path}: field {name} missing in {c}"))?;
            if each {
                if !f.is_null() {
                    let a = f
                        .as_array()
                        .ok_or_else(|| format!("{path}: {name} is not an array"))?;
                    next.extend(a.iter());
                }
            } else {
                next.push(f);
            }
        }
        cur = next;
    }
    Ok(cur)
}

fn status(d: &Drl) -> Value {
    let (s, body) = http_get(&d.url("/v1/status")).expect("GET /v1/status");
    assert_eq!(s, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn limit<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["limits"]
        .as_array()
        .and_then(|a| a.iter().find(|l| l["name"] == name))
        .unwrap_or_else(|| panic!("no limit {name} in {s}"))
}

fn check(d: &Drl, limit: &str, key: &str, n: usize) {
    let one = format!(
        r#"{{"limit":"{limit}","key":{}}}"#,
        serde_json::to_string(key).unwrap()
    );
    let body = format!(r#"{{"requests":[{}]}}"#, vec![one; n].join(","));
    let (s, _, v) = post_json(&d.url("/v1/check"), &body);
    assert_eq!(s, 200, "{v}");
}

#[test]
fn status_json_has_every_documented_field_and_the_page_the_same_numbers() {
    let redis = common::Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "status-test-cluster-key-32-bytes\n").unwrap();
    let (gossip_udp, orbit_udp) = (free_udp_port(), free_udp_port());
    let yaml = format!(
        r#"status:
  keys: show
limits:
  - name: api
    quota: 5/h
  - name: quiet
    quota: 100/s
    top_keys: false
  - name: shared
    quota: 100/s
    scope: redis
  - name: g
    quota: 50/s
    scope: gossip
  - name: o
    algorithm: fixed-window
    quota: 20/s
    scope: orbit
redis:
  url: {url}
cluster:
  node_id: 1
  bind: "127.0.0.1:{gossip_udp}"
  seeds: []
  key_file: "{key}"
orbit:
  node_id: 1
  bind: "127.0.0.1:{orbit_udp}"
  key: {{file: "{key}"}}
  ring:
    - {{id: 1, addr: "127.0.0.1:{orbit_udp}"}}
"#,
        url = redis.url(),
        key = key.display(),
    );
    let d = Drl::start(&yaml);
    // Heavy and light keys, denials on `api` (5/h), a key that needs
    // escaping in HTML.
    let xss = "<b>tenant</b>&\"'";
    check(&d, "api", "heavy", 30);
    check(&d, "api", xss, 3);
    check(&d, "quiet", "q", 3);
    check(&d, "shared", "r", 4);
    check(&d, "g", "gk", 5);
    // The Orbit node sits out its first window (restart rule): ask until
    // a window admits.
    wait_for("an orbit admission", || {
        check(&d, "o", "ok", 1);
        limit(&status(&d), "o")["allowed_total"].as_u64() > Some(0)
    });
    // The sampler has taken two samples (a per-second value exists).
    wait_for("a per-second sample", || {
        limit(&status(&d), "api")["allowed_per_s"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let s = status(&d);
    for (path, ty) in FIELDS {
        let vs = values(&s, path).unwrap_or_else(|e| panic!("{e}\n{s:#}"));
        for v in &vs {
            assert!(type_ok(v, ty), "{path}: {v} is not {ty}");
        }
        // Fields under an array or a nullable parent may be absent here
        // only if that parent is empty/null; the top-level ones, always.
        if !path.contains("[]") && !path.contains('.') {
            assert_eq!(vs.len(), 1, "{path}");
        }
    }
    // Every kind of section is present and filled on this node.
    for (path, want) in [
        ("limits[].top_keys.by_demand.keys[].key", "heavy"),
        ("limits[].gossip_keys[].key", "gk"),
        ("limits[].orbit_keys[].key", "ok"),
    ] {
        let vs = values(&s, path).unwrap();
        assert!(vs.iter().any(|v| *v == want), "{path}: {vs:?}");
    }
    assert_eq!(s["redis"]["engine"], "lua");
    assert_eq!(s["redis"]["breaker"], "closed");
    assert_eq!(s["orbit"]["ring"], serde_json::json!([1]));
    assert_eq!(s["gossip"]["members"][0]["self"], true);
    // The documentation lists every field.
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/server.md"))
            .unwrap();
    for (path, _) in FIELDS {
        assert!(
            docs.contains(&format!("`{path}`")),
            "docs/server.md does not document `{path}`"
        );
    }
    // Numbers: `api` (5/h per key, nothing refills during the test
    // however slow the machine) admitted 5 of `heavy`'s 30 and all 3 of
    // the other key's; the top key is `heavy` with an exact count (fewer
    // keys than slots), and the denials sketch saw every denial.
    let api = limit(&s, "api");
    assert_eq!(
        (api["allowed_total"].as_u64(), api["denied_total"].as_u64()),
        (Some(8), Some(25)),
        "{api}"
    );
    let denied = api["denied_total"].as_u64().unwrap();
    assert_eq!(
        api["top_keys"]["by_denials"]["total"].as_u64(),
        Some(denied),
        "{api}"
    );
    let top = &api["top_keys"]["by_demand"]["keys"][0];
    assert_eq!(
        (
            top["key"].as_str(),
            top["count"].as_u64(),
            top["error"].as_u64()
        ),
        (Some("heavy"), Some(30), Some(0))
    );
    assert_eq!(
        api["top_keys"]["sample_1_in"].as_u64(),
        Some(1),
        "a few decisions a second are all recorded: exact counts"
    );
    assert!(api["latency"]["samples"].as_u64().unwrap() >= 2, "{api}");
    assert!(
        api["latency"]["p99_us"].as_f64().unwrap() >= api["latency"]["p50_us"].as_f64().unwrap()
    );
    assert!(
        limit(&s, "quiet")["top_keys"].is_null(),
        "top_keys: false keeps no keys"
    );
    assert_eq!(limit(&s, "shared")["scope"], "redis");
    // The page without JavaScript: the same limits and totals as tables,
    // keys escaped.
    let (code, page) = http_get(&d.url("/")).expect("GET /");
    assert_eq!(code, 200);
    assert!(page.contains(r#"<th scope="col">Limit</th>"#), "{page}");
    for name in ["api", "quiet", "shared", "g", "o"] {
        assert!(
            page.contains(&format!(r#"<tr data-limit="{name}">"#)),
            "{name} row"
        );
    }
    let row = page.split(r#"<tr data-limit="api">"#).nth(1).unwrap();
    let total = cell(row, "denied-total");
    assert_eq!(total, denied, "the page shows what /v1/status showed");
    assert!(
        page.contains("&lt;b&gt;tenant&lt;/b&gt;&amp;&quot;&#39;"),
        "key not escaped"
    );
    assert!(!page.contains(xss), "raw key in the page");
    assert!(page.contains(r#"<table id="members">"#) && page.contains(r#"<table id="ring">"#));
    assert!(page.contains(r#"<table class="kv" id="redis">"#));
}

/// The number in the first `data-field="{field}"` cell of `html`.
fn cell(html: &str, field: &str) -> u64 {
    let at = html
        .find(&format!(r#"data-field="{field}">"#))
        .unwrap_or_else(|| panic!("no {field} cell"));
    let rest = &html[at..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    rest[..rest.find('<').unwrap()]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{field}: {e} in {}", &rest[..40.min(rest.len())]))
}

#[test]
fn status_can_be_turned_off_and_is_guarded_by_tokens() {
    let off = Drl::start("status:\n  enabled: false\nlimits:\n  - name: a\n    quota: 5/s\n");
    for path in ["/", "/v1/status"] {
        let (code, body) = http_get(&off.url(path)).unwrap();
        assert_eq!(code, 404, "{path}: {body}");
        assert!(body.contains("status.enabled"), "{body}");
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "status-token-0123456789abcdef\n").unwrap();
    let guarded = Drl::spawn(
        &format!(
            "auth:\n  tokens_file: \"{}\"\nlimits:\n  - name: a\n    quota: 5/s\n",
            tokens.display()
        ),
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
    );
    guarded.wait_ready();
    for path in ["/", "/v1/status"] {
        let (code, _, _) = http_request("GET", &guarded.url(path), &[], b"").unwrap();
        assert_eq!(code, 401, "{path} without a token");
        let (code, _, body) = http_request(
            "GET",
            &guarded.url(path),
            &[("authorization", "Bearer status-token-0123456789abcdef")],
            b"",
        )
        .unwrap();
        assert_eq!(code, 200, "{path}: {body}");
    }
}

/// Chromium, or a loud failure saying how to get it.
fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(name).output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!("headless Chromium is needed: apt-get install -y chromium (scripts/test installs it)");
}

/// Loads `url` in headless Chromium with `virtual_ms` of (virtual) time
/// for its scripts; `extra` adds flags (`--dump-dom`, `--screenshot=`).
fn browse(bin: &Path, profile: &Path, url: &str, extra: &[String]) -> String {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn chromium_renders_live_numbers_from_a_gossip_cluster_under_load() {
    let bin = chromium();
    let c = Cluster::start(Opts::default());
    let url = c.nodes[0].url("/");
    let profile = tempfile::tempdir().unwrap();
    // Two loads, the second once the node has decided more: the script
    // must have replaced the server's rendering both times, and the
    // numbers must have moved.
    let first = browse(&bin, profile.path(), &url, &["--dump-dom".into()]);
    let limit_row = |dom: &str| -> String {
        dom.split(r#"<tr data-limit="global">"#)
            .nth(1)
            .unwrap_or_else(|| panic!("no row for limit global in\n{dom}"))
            .to_string()
    };
    let scripted = |dom: &str| dom.contains(r#"id="updated" data-source="script""#);
    assert!(
        scripted(&first),
        "the script did not refresh the page:\n{first}"
    );
    let a1 = cell(&limit_row(&first), "allowed-total");
    assert!(a1 > 0, "no admissions shown");
    // Node 1 sees the whole cluster: three members up, the aggregate `all`
    // as a hot gossip key, per-client keys in its top keys.
    let members = first
        .split(r#"<table id="members">"#)
        .nth(1)
        .expect("members table");
    let members = &members[..members.find("</table>").unwrap()];
    assert_eq!(
        members.matches(r#"class="state-up">up<"#).count(),
        3,
        "{members}"
    );
    assert!(first.contains("Hot keys of global"), "no gossip key table");
    assert!(
        first.contains("<code>all</code>"),
        "aggregate `all` not shown"
    );
    assert!(
        first.contains("<code>all|c0-"),
        "node 1's client keys not in its top keys"
    );
    // Not a fixed pause (on a loaded machine the load may have admitted
    // nothing more in it): wait until the node's own /v1/status shows
    // more admissions than the first page and a last second with some.
    wait_for("more admissions than the first page showed", || {
        let s = status(&c.nodes[0]);
        let g = limit(&s, "global");
        g["allowed_total"].as_u64().is_some_and(|a| a > a1)
            && g["allowed_per_s"]
                .as_array()
                .and_then(|a| a.last())
                .and_then(Value::as_f64)
                .is_some_and(|r| r > 0.0)
    });
    let shot = profile.path().join("status-page.png");
    let second = browse(
        &bin,
        profile.path(),
        &url,
        &["--dump-dom".into(), "--window-size=1280,960".into()],
    );
    assert!(
        scripted(&second),
        "the script did not refresh the page the second time"
    );
    let a2 = cell(&limit_row(&second), "allowed-total");
    assert!(a2 > a1, "allowed total did not move: {a1} then {a2}");
    let rate = cell(&limit_row(&second), "allowed-rate");
    assert!(rate > 0, "no admissions in the last second");
    // The screenshot the docs show.
    browse(
        &bin,
        profile.path(),
        &url,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,960".into(),
        ],
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    assert!(
        png.len() > 10_000,
        "screenshot of {} bytes: blank page?",
        png.len()
    );
    if std::env::var_os("DRL_UPDATE_SCREENSHOTS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img/status-page.png");
        std::fs::create_dir_all(docs.parent().unwrap()).unwrap();
        std::fs::copy(&shot, &docs).unwrap();
        eprintln!("saved {}", docs.display());
    }
}

/// `status.keys`: hashed by default (never the key itself), hidden on
/// request, shown only when asked; the document says which.
#[test]
fn client_keys_are_hashed_by_default_and_can_be_hidden() {
    let secret = "api-key-0123456789-very-secret";
    let shown_as = |mode: &str| -> (String, Vec<String>) {
        let yaml = format!("{mode}limits:\n  - name: api\n    quota: 1000/s\n");
        let d = Drl::start(&yaml);
        for _ in 0..20 {
            let (s, _, _) = common::post_json(
                &d.url("/v1/check"),
                &format!(r#"{{"requests":[{{"limit":"api","key":"{secret}"}}]}}"#),
            );
            assert_eq!(s, 200);
        }
        let (_, body) = http_get(&d.url("/v1/status")).unwrap();
        let (_, page) = http_get(&d.url("/")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let keys = v["limits"][0]["top_keys"]["by_demand"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["key"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            body.contains(secret) || page.contains(secret),
            mode.contains("show"),
            "{mode}: {body}"
        );
        (v["keys"].as_str().unwrap().to_string(), keys)
    };
    let (mode, keys) = shown_as("");
    assert_eq!(mode, "hash");
    assert_eq!(keys.len(), 1);
    assert!(
        keys[0].starts_with("sha256:") && keys[0].len() == 23,
        "{keys:?}"
    );
    let (mode, keys) = shown_as("status:\n  keys: hide\n");
    assert_eq!((mode.as_str(), keys.len()), ("hide", 0));
    let (mode, keys) = shown_as("status:\n  keys: show\n");
    assert_eq!((mode.as_str(), keys), ("show", vec![secret.to_string()]));
}

/// The status page costs per limit that is used, not per limit that is
/// configured: 10,000 limits with the page on hold about what they hold
/// with it off, until they decide (the rest is the memory of rendering
/// a 10,000-row document a few times; the recording per limit once
/// took 466 MB here).
#[test]
fn ten_thousand_idle_limits_cost_the_page_almost_nothing() {
    let limits: String = (0..10_000)
        .map(|i| format!("  - name: l{i}\n    quota: 100/s\n"))
        .collect();
    let rss = |status: &str| {
        let d = Drl::start(&format!("{status}limits:\n{limits}"));
        if status.is_empty() {
            // The page answers for every limit, after a few samples of
            // its once-a-second sampler.
            wait_for("three seconds of uptime", || {
                let (_, body) = http_get(&d.url("/v1/status")).unwrap();
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert!(body.contains("\"l9999\""));
                v["node"]["uptime_s"].as_u64().unwrap() >= 3
            });
        }
        let kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", d.child.id()))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        kib
    };
    let (on, off) = (rss(""), rss("status:\n  enabled: false\n"));
    assert!(
        on < off + 48 * 1024,
        "the page costs {} KiB for 10,000 idle limits ({on} on, {off} off)",
        on.saturating_sub(off)
    );
}
