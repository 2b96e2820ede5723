//! `drl config check`: errors with line and column; valid files pass.

use std::process::Command;

fn check(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success(),
        text.replace(&*path.display().to_string(), "FILE"),
    )
}

#[test]
fn the_issue_minimal_form_is_valid() {
    let (ok, out) = check(
        "limits:\n  - name: api\n    algorithm: gcra        # any name from docs/semantics.md\n    quota: 100/s\n    burst: 20\n",
    );
    assert!(ok, "{out}");
    assert!(out.contains("ok (1 limits"), "{out}");
}

#[test]
fn errors_name_line_and_column() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "limits:\n  - name: api\n    algorithm: gcra\n    quota: 100/fortnight\n",
            "FILE:4:12:",
            "unknown window unit",
        ),
        (
            "limits:\n  - name: api\n    algorithm: token_bucket\n    quota: 1/s\n",
            "FILE:3:16:",
            "unknown algorithm",
        ),
        (
            "limits:\n  - name: api\n    quota: 1/s\n    brust: 2\n",
            "FILE:4:",
            "unknown field `brust`",
        ),
        (
            "limits:\n  - name: a\n    quota: 1/s\n  - name: a\n    quota: 2/s\n",
            "FILE:4:",
            "duplicate limit name",
        ),
        (
            "limits:\n  - name: a\n    quota: 1/s\n    scope: gossip\n",
            "FILE:4:5:",
            "no `cluster:` section",
        ),
        (
            "limits:\n  - name: a\n    algorithm: fixed-window\n    quota: 1/s\n    burst: 5\n",
            "FILE:",
            "no effect",
        ),
        (
            "limits:\n  - name: a\n    quota: 0/s\n",
            "FILE:3:",
            "at least 1",
        ),
        ("limits: [\n", "FILE:2:", ""),
        (
            "server:\n  max_batch: 0\nlimits:\n  - name: a\n    quota: 1/s\n",
            "FILE:2:3:",
            "server.max_batch must be at least 1",
        ),
        (
            "server:\n  max_body_bytes: 0\nlimits:\n  - name: a\n    quota: 1/s\n",
            "FILE:2:3:",
            "server.max_body_bytes must be at least 1",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
            "FILE:5:",
            "invalid rate limit unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
            "FILE:4:",
            "duplicate descriptor",
        ),
    ];
    for (yaml, place, msg) in cases {
        let (ok, out) = check(yaml);
        assert!(!ok, "{yaml:?} should be refused");
        assert!(out.contains(place), "{yaml:?}: {out:?} lacks {place:?}");
        assert!(out.contains(msg), "{yaml:?}: {out:?} lacks {msg:?}");
    }
}

#[test]
fn the_embedded_default_is_valid_and_printed() {
    let out = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args(["config", "default"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let (ok, msg) = check(&text);
    assert!(ok, "{msg}");
}
