//! `drl config check` refuses exactly what `drl serve` refuses at start,
//! and both warn about secrets readable by every user and certificates
//! expired or about to expire.

#[path = "common/certs.rs"]
#[allow(dead_code)]
mod certs;
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use common::config_check;

/// `drl serve --config FILE` on free ports: (started, its log). A refused
/// file exits at once with status 1.
fn serve_outcome(file: &Path) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let started = loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap() == 0 {
            break false;
        }
        log.push_str(&line);
        if line.starts_with("drl serve: listening") {
            break true;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    (started, log)
}

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

#[test]
fn check_refuses_what_serve_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = d.join("missing");
    let ca = certs::Ca::new("test ca");
    let pair = ca.server(d, "server", "localhost");
    let cases = [
        ("empty", String::from("# nothing\n")),
        (
            "missing token file",
            format!("auth:\n  tokens_file: {}\n", missing.display()),
        ),
        (
            "missing TLS key",
            format!(
                "listen:\n  http_tls:\n    cert_file: {}\n    key_file: {}\n",
                pair.cert.display(),
                missing.display()
            ),
        ),
        (
            "ok",
            String::from("limits:\n  - name: api\n    quota: 10/s\n"),
        ),
    ];
    for (name, yaml) in cases {
        let f = write(d, &format!("{}.yaml", name.replace(' ', "_")), &yaml, 0o600);
        let (checked, out) = config_check(&f);
        let (served, log) = serve_outcome(&f);
        assert_eq!(
            checked, served,
            "{name}: check {checked} ({out}), serve {served} ({log})"
        );
        assert_eq!(checked, name == "ok", "{name}: {out}");
    }
}

#[test]
fn world_readable_secrets_and_expired_certificates_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tokens = write(d, "tokens", "a-token-of-at-least-16-bytes\n", 0o644);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = p.self_signed(&key).unwrap();
    let crt = write(d, "old.crt", &cert.pem(), 0o644);
    let k = write(d, "old.key", &key.serialize_pem(), 0o600);
    let yaml = format!(
        "auth:\n  tokens_file: {}\nlisten:\n  http_tls:\n    cert_file: {}\n    key_file: {}\n",
        tokens.display(),
        crt.display(),
        k.display()
    );
    let f = write(d, "drl.yaml", &yaml, 0o600);
    let (ok, out) = config_check(&f);
    assert!(ok, "warnings do not refuse: {out}");
    assert!(
        out.contains("warning: auth.tokens_file") && out.contains("readable by every user"),
        "{out}"
    );
    assert!(out.contains("the certificate expired"), "{out}");
    assert!(!out.contains("key_file"), "the key is 0600: {out}");
    let (started, log) = serve_outcome(&f);
    assert!(started, "{log}");
    assert!(
        log.contains("readable by every user") && log.contains("the certificate expired"),
        "{log}"
    );
    // Made private, the warning goes.
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_, out) = config_check(&f);
    assert!(!out.contains("readable by every user"), "{out}");
}

/// A gossip algorithm at a cluster size where the simulator showed it
/// does not hold its limit is warned about, naming the figure; at a size
/// where it held, nothing is said.
#[test]
fn gossip_at_a_size_it_does_not_hold_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let yaml = |nodes: u32, aggregation: &str| {
        format!(
            "limits:\n  - name: g\n    quota: 1000/s\n    scope: gossip\ncluster:\n  node_id: 1\n  bind: 127.0.0.1:1\n  seeds: [127.0.0.1:1]\n  nodes: {nodes}\n  key_file: cluster.key\n  algorithm: grd\n  aggregation: {aggregation}\n"
        )
    };
    let run = |text: String| {
        let f = write(d, "g.yaml", &text, 0o600);
        let out = Command::new(env!("CARGO_BIN_EXE_drl"))
            .args(["config", "check", "--skip-files"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(out.status.success(), "warnings do not refuse");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let big = run(yaml(60, "peer-table"));
    assert!(
        big.contains("warning: cluster: grd with aggregation peer-table is not known to hold")
            && big.contains("EXPERIMENTS.md"),
        "{big}"
    );
    assert_eq!(run(yaml(12, "peer-table")), "");
    assert_eq!(run(yaml(60, "push-sum")), "");
}
