//! `scope: redis` over TLS, end to end: the real `drl serve` with a
//! `rediss://` config (this used to make `serve` exit) against a real
//! `redis-server` whose plain port is off and that requires client
//! certificates, as an ACL user whose password comes from a file. Checks
//! are exact; a wrong password is one clear log line, never the password;
//! `drl config check` names a missing certificate file.

#[allow(dead_code)]
#[path = "common/certs.rs"]
mod certs;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use certs::{Ca, Pair};
use common::{Drl, post_json};
use serde_json::json;

/// A TLS-only `redis-server` (`--port 0`) that requires client
/// certificates signed by the test CA; killed on drop.
struct TlsRedis {
    child: Child,
    port: u16,
}

/// The test PKI: a CA, Redis's certificate, drl's client certificate.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    server: Pair,
    client: Pair,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("drl redis test CA");
        let ca_file = ca.write(&dir.path().join("ca.pem"));
        let server = ca.server(dir.path(), "redis", "redis");
        let client = ca.client(dir.path(), "drl", "drl");
        Pki {
            ca: ca_file,
            server,
            client,
            dir,
        }
    }

    /// `redis-cli` TLS arguments with drl's client certificate.
    fn cli(&self, port: u16) -> Command {
        let mut c = Command::new("redis-cli");
        c.args(["--tls", "-p", &port.to_string()])
            .arg("--cacert")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.client.cert)
            .arg("--key")
            .arg(&self.client.key);
        c
    }
}

impl TlsRedis {
    fn start(pki: &Pki) -> TlsRedis {
        for _ in 0..5 {
            let port = common::free_port();
            let mut child = Command::new("redis-server")
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--tls-cert-file")
                .arg(&pki.server.cert)
                .arg("--tls-key-file")
                .arg(&pki.server.key)
                .arg("--tls-ca-cert-file")
                .arg(&pki.ca)
                .args(["--tls-auth-clients", "yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is not installed (apt-get install -y redis-server)");
            let mut up = false;
            common::wait_for("redis-server (TLS) to answer PING or exit", || {
                if child.try_wait().unwrap().is_some() {
                    return true;
                }
                up = pki
                    .cli(port)
                    .arg("PING")
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG"));
                up
            });
            if up {
                return TlsRedis { child, port };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server with TLS did not start");
    }

    /// Runs a command through `redis-cli --tls`; its stdout.
    fn cli(&self, pki: &Pki, args: &[&str]) -> String {
        let out = pki.cli(self.port).args(args).output().expect("redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// drl's config: one redis-scoped limit (5 per hour), over `rediss://` as
/// ACL user `drl` with the password in `password_file`; deny on store
/// errors so that a failing store shows.
fn config(pki: &Pki, port: u16, password_file: &Path) -> String {
    format!(
        "redis:\n  url: rediss://127.0.0.1:{port}\n  username: drl\n  password_file: {}\n  \
         connect_timeout_ms: 30000\n  response_timeout_ms: 30000\n  \
         tls:\n    ca_file: {}\n    cert_file: {}\n    key_file: {}\n\
         server:\n  request_timeout_ms: 60000\n\
         redis_resilience:\n  default_policy: {{timeout_ms: 30000, on_store_error: deny}}\n\
         limits:\n  - name: global\n    algorithm: gcra\n    quota: 5/h\n    scope: redis\n",
        password_file.display(),
        pki.ca.display(),
        pki.client.cert.display(),
        pki.client.key.display()
    )
}

fn ask(d: &Drl, key: &str) -> (u16, serde_json::Value) {
    let body = json!({"requests":[{"limit": "global", "key": key}]}).to_string();
    let (s, _, v) = post_json(&d.url("/v1/check"), &body);
    (s, v)
}

const PASSWORD: &str = "e2e-Redis-Pa55word";

/// The ACL of docs/redis.md for `drl`.
fn create_user(redis: &TlsRedis, pki: &Pki) {
    let pass = format!(">{PASSWORD}");
    let mut args = vec!["ACL", "SETUSER", "drl", "reset", "on", &pass, "~drl:*"];
    args.extend([
        "+ping",
        "+evalsha",
        "+eval",
        "+script|load",
        "+get",
        "+mget",
        "+set",
        "+time",
    ]);
    assert_eq!(redis.cli(pki, &args), "OK");
}

#[test]
fn serve_over_rediss_answers_checks_exactly() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki);
    create_user(&redis, &pki);
    let pw = pki.dir.path().join("redis.password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let cfg = config(&pki, redis.port, &pw);
    // Two nodes share the limit through the one Redis, over TLS.
    let a = Drl::start(&cfg);
    let b = Drl::start(&cfg);
    let mut allowed = 0;
    for i in 0..12 {
        let node = if i % 2 == 0 { &a } else { &b };
        let (s, v) = ask(node, "tenant");
        assert_eq!(s, 200, "{v}");
        allowed += usize::from(v["results"][0]["allowed"].as_bool().unwrap());
    }
    assert_eq!(allowed, 5, "the rediss:// limit is exact across both nodes");
    // The state is in Redis, under drl's prefix.
    let keys = redis.cli(&pki, &["KEYS", "drl:*"]);
    assert!(keys.contains("tenant"), "{keys:?}");
    // One line says Redis answers; the password is in no log line.
    a.wait_log("Redis answers");
    for d in [&a, &b] {
        let log = d.log.lock().unwrap().join("\n");
        assert!(!log.contains(PASSWORD), "password logged:\n{log}");
    }
}

#[test]
fn a_wrong_password_is_one_clear_line_and_never_shown() {
    let pki = Pki::new();
    let redis = TlsRedis::start(&pki);
    create_user(&redis, &pki);
    let pw = pki.dir.path().join("wrong.password");
    std::fs::write(&pw, "Not-The-Pa55word\n").unwrap();
    // A single server is connected lazily: drl starts, says what is wrong
    // once, and denies by the failure policy.
    let d = Drl::start(&config(&pki, redis.port, &pw));
    let line = d.wait_log("Redis refused the credentials");
    assert!(line.contains("password_file"), "{line}");
    assert!(
        line.contains(&format!("rediss://127.0.0.1:{}", redis.port)),
        "{line}"
    );
    let (s, v) = ask(&d, "tenant");
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["results"][0]["allowed"], false,
        "deny on store errors: {v}"
    );
    let log = d.log.lock().unwrap().join("\n");
    assert!(!log.contains("Not-The-Pa55word"), "password logged:\n{log}");
    assert_eq!(
        d.count_log("cannot use Redis at"),
        1,
        "one startup line:\n{log}"
    );
}

#[test]
fn config_check_names_a_missing_certificate_file() {
    let pki = Pki::new();
    let pw = pki.dir.path().join("pw");
    std::fs::write(&pw, "x\n").unwrap();
    let good = config(&pki, 6390, &pw);
    let path = pki.dir.path().join("drl.yaml");
    std::fs::write(&path, &good).unwrap();
    let (ok, out) = common::config_check(&path);
    assert!(ok, "{out}");
    let missing = pki.dir.path().join("missing-ca.pem");
    std::fs::write(
        &path,
        good.replace(pki.ca.to_str().unwrap(), missing.to_str().unwrap()),
    )
    .unwrap();
    let (ok, out) = common::config_check(&path);
    assert!(!ok, "{out}");
    assert!(
        out.contains("tls.ca_file") && out.contains("missing-ca.pem"),
        "{out}"
    );
    // `tls:` on a plain redis:// URL.
    std::fs::write(&path, good.replace("rediss://", "redis://")).unwrap();
    let (ok, out) = common::config_check(&path);
    assert!(!ok && out.contains("`tls:` needs rediss://"), "{out}");
}
