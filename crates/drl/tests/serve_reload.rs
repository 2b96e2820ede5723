//! End-to-end: hot reload (file change and SIGHUP) keeps the counters of
//! unchanged limits; a bad file is refused and the old config keeps
//! serving; SIGTERM drains in-flight requests.

mod common;

use std::io::{Read, Write};

use common::{Drl, http_get, parse_response, post_json, wait_for};
use serde_json::json;

fn remaining(drl: &Drl, limit: &str, cost: u64) -> (u16, Option<u64>, Option<bool>) {
    let body = json!({"requests":[{"limit": limit, "key": "k", "cost": cost}]});
    let (s, _, v) = post_json(&drl.url("/v1/check"), &body.to_string());
    (
        s,
        v["results"][0]["remaining"].as_u64(),
        v["results"][0]["allowed"].as_bool(),
    )
}

fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

const V1: &str = r#"
limits:
  - name: keep
    algorithm: fixed-window
    quota: 2/h
  - name: change
    algorithm: fixed-window
    quota: 2/h
"#;

const V2: &str = r#"
limits:
  - name: keep
    algorithm: fixed-window
    quota: 2/h
  - name: change
    algorithm: fixed-window
    quota: 5/h
  - name: added
    algorithm: gcra
    quota: 10/s
"#;

#[test]
fn file_change_reloads_keeping_unchanged_counters_and_refuses_bad_files() {
    let drl = Drl::start(V1);
    for limit in ["keep", "change"] {
        assert_eq!(remaining(&drl, limit, 2).2, Some(true));
        assert_eq!(remaining(&drl, limit, 1).2, Some(false));
    }
    assert_eq!(remaining(&drl, "added", 1).0, 404);

    replace_file(&drl.config, V2);
    wait_for("the new limit to serve", || {
        remaining(&drl, "added", 0).0 == 200
    });
    drl.wait_log("config reloaded");
    // Unchanged: still exhausted. Changed: fresh under the new quota.
    assert_eq!(remaining(&drl, "keep", 1).2, Some(false));
    assert_eq!(remaining(&drl, "change", 1), (200, Some(4), Some(true)));

    // A broken file is refused, with its line and column, and V2 keeps serving.
    let before = drl.count_log("config reload refused");
    replace_file(
        &drl.config,
        "limits:\n  - name: x\n    quota: 10/fortnight\n",
    );
    wait_for("the refusal", || {
        drl.count_log("config reload refused") > before
    });
    let line = drl.wait_log("config reload refused");
    assert!(line.contains("drl.yaml:3:"), "{line}");
    assert!(line.contains("fortnight"), "{line}");
    assert_eq!(remaining(&drl, "added", 1).0, 200);
    assert_eq!(remaining(&drl, "change", 0).1, Some(4));
    let (_, text) = http_get(&drl.url("/metrics")).unwrap();
    assert!(
        common::metric(&text, r#"drl_config_reloads_total{result="error"}"#).unwrap() >= 1.0,
        "{text}"
    );
}

#[test]
fn sighup_reloads() {
    let drl = Drl::start_with(V2, &["--no-watch"]);
    assert_eq!(remaining(&drl, "added", 1).0, 200);
    std::fs::write(&drl.config, V1).unwrap();
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    wait_for("the removed limit to be gone", || {
        remaining(&drl, "added", 1).0 == 404
    });
    // A bad file on SIGHUP: refused, V1 keeps serving.
    std::fs::write(&drl.config, "limits: [").unwrap();
    drl.signal("HUP");
    drl.wait_log("config reload refused (SIGHUP)");
    assert_eq!(remaining(&drl, "keep", 1).0, 200);
}

/// Reads one HTTP/1.1 response with a content-length from a keep-alive stream.
fn read_one(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if raw.len() >= end + 4 + len {
                return raw;
            }
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed early");
        raw.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn sigterm_drains_in_flight_requests() {
    let mut drl = Drl::start(V1);
    let mut s = std::net::TcpStream::connect(drl.http).unwrap();
    s.set_read_timeout(Some(common::DEADLINE)).unwrap();
    // The in-flight request: its headers with `Expect: 100-continue`; the
    // server's "100 Continue" proves the handler is reading the body.
    let body = json!({"requests":[{"limit":"keep","key":"k"}]}).to_string();
    write!(
        s,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut cont = Vec::new();
    let mut byte = [0u8; 1];
    while !cont.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed early");
        cont.push(byte[0]);
    }
    assert!(
        cont.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&cont)
    );
    let (a, b) = body.as_bytes().split_at(body.len() / 2);
    s.write_all(a).unwrap();
    s.flush().unwrap();
    drl.signal("TERM");
    drl.wait_log("shutdown requested");
    // New connections are refused while draining...
    wait_for("the listener to close", || {
        http_get(&drl.url("/healthz")).is_none()
    });
    // ...but the in-flight request completes.
    s.write_all(b).unwrap();
    let raw = read_one(&mut s);
    let (status, headers, resp) = parse_response(&raw).expect("a response");
    assert_eq!(status, 200, "{resp}");
    // An answer sent while draining tells a keep-alive client not to send
    // another request on this connection (that one would be lost).
    assert_eq!(
        common::header(&headers, "connection"),
        Some("close"),
        "{headers:?}"
    );
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(v["results"][0]["allowed"], true);
    assert_eq!(v["results"][0]["remaining"], 1);
    let exit = drl.wait_exit();
    assert!(exit.success(), "{exit:?}");
    drl.wait_log("drl serve stopped");
}

/// A Kubernetes ConfigMap volume: the config is `drl.yaml -> ..data/drl.yaml`
/// and `..data -> ..<timestamp>`; the kubelet writes a new timestamped
/// directory, points `..data_tmp` at it and renames that over `..data`.
/// No event names `drl.yaml`; the reload happens all the same.
#[test]
fn a_configmap_style_symlink_swap_reloads() {
    use std::os::unix::fs::symlink;
    let drl = Drl::start(V1);
    let dir = drl.config.parent().unwrap().to_path_buf();
    let step1 = format!("{V1}  - name: step1\n    algorithm: gcra\n    quota: 10/s\n");
    std::fs::create_dir(dir.join("..2026_01")).unwrap();
    std::fs::write(dir.join("..2026_01/drl.yaml"), &step1).unwrap();
    symlink("..2026_01", dir.join("..data")).unwrap();
    // The file itself becomes the link (a rename naming it: reloaded as any edit).
    symlink("..data/drl.yaml", dir.join("drl.yaml.link")).unwrap();
    std::fs::rename(dir.join("drl.yaml.link"), &drl.config).unwrap();
    wait_for("the first reload", || remaining(&drl, "step1", 1).0 == 200);
    assert_eq!(remaining(&drl, "added", 1).0, 404);

    // The kubelet's update.
    std::fs::create_dir(dir.join("..2026_02")).unwrap();
    // V2 keeps `step1`: a file-change reload may not remove limits.
    let step2 = format!("{V2}  - name: step1\n    algorithm: gcra\n    quota: 10/s\n");
    std::fs::write(dir.join("..2026_02/drl.yaml"), step2).unwrap();
    symlink("..2026_02", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_dir_all(dir.join("..2026_01")).unwrap();
    wait_for("the swap to be applied", || {
        remaining(&drl, "added", 1).0 == 200
    });
}
