//! Shared helpers for the end-to-end tests: start the real `drl` binary
//! (drl-test-kit's launcher, given this package's binary), learn its
//! ports, wait on conditions with deadlines.

#![allow(dead_code)]

pub mod gossip;
pub mod h2raw;

use std::path::Path;
use std::process::Command;

use drl_test_kit::drl as kit;
#[allow(unused_imports)]
pub use drl_test_kit::drl::{
    DEADLINE, HOUR_MARGIN, HttpResponse, clear_of_window_end, http_get, http_request,
    parse_response, wait_for, wait_for_or,
};

/// drl's binary, as cargo built it for these tests (with drl-cluster-net's
/// fault injector: the `fault-injection` feature of the dev-dependency).
pub const BIN: &str = env!("CARGO_BIN_EXE_drl");

/// A running `drl serve` of [`BIN`], killed on drop (drl-test-kit's
/// launcher; its fields and methods through `Deref`).
pub struct Drl(pub drl_test_kit::drl::Drl);

impl std::ops::Deref for Drl {
    type Target = drl_test_kit::drl::Drl;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Drl {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drl {
    /// Writes `yaml` to a temp file and starts `drl serve` on free loopback ports.
    pub fn start(yaml: &str) -> Drl {
        Drl(kit::Drl::start(Path::new(BIN), yaml))
    }

    /// Like [`Drl::start`] with extra arguments.
    pub fn start_with(yaml: &str, extra: &[&str]) -> Drl {
        Drl(kit::Drl::start_with(Path::new(BIN), yaml, extra))
    }

    /// Starts `drl serve --config FILE ARGS...` (no address flags added:
    /// the file's `listen:` applies unless `args` override it).
    pub fn start_args(yaml: &str, args: &[&str]) -> Drl {
        Drl(kit::Drl::start_args(Path::new(BIN), yaml, args))
    }

    /// Starts `drl serve --config FILE ARGS...` and waits for its
    /// "listening" line only (not for `/readyz`: for listeners that need
    /// TLS or tokens).
    pub fn spawn(yaml: &str, args: &[&str]) -> Drl {
        Drl(kit::Drl::spawn(Path::new(BIN), yaml, args))
    }

    /// Starts `drl serve --config DIR` on free loopback ports, `DIR` holding
    /// `files` (name, text), and waits until it is ready.
    pub fn start_dir(files: &[(&str, &str)]) -> Drl {
        Drl(kit::Drl::start_dir(Path::new(BIN), files))
    }
}

/// POST JSON: status, headers, parsed body (Null if not JSON).
pub fn post_json(url: &str, body: &str) -> (u16, Vec<(String, String)>, serde_json::Value) {
    let (s, h, b) = http_request(
        "POST",
        url,
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .expect("request failed");
    let v = serde_json::from_str(&b).unwrap_or(serde_json::Value::Null);
    (s, h, v)
}

/// One request through `POST /v1/check` (which must answer 200): its
/// result.
pub fn check_one(drl: &Drl, item: serde_json::Value) -> serde_json::Value {
    let (s, _, v) = post_json(
        &drl.url("/v1/check"),
        &serde_json::json!({ "requests": [item] }).to_string(),
    );
    assert_eq!(s, 200, "{v}");
    v["results"][0].clone()
}

/// What remains of `key` under `limit`: a check of cost 0.
pub fn remaining_of(drl: &Drl, limit: &str, key: &str) -> u64 {
    let r = check_one(
        drl,
        serde_json::json!({"limit": limit, "key": key, "mode": "check", "cost": 0}),
    );
    r["remaining"].as_u64().expect("a remaining count")
}

/// The value of header `name` (lowercase).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The value of a Prometheus sample `name{labels}` in a `/metrics` text.
pub fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A free loopback port (bound then released; callers retry on a clash).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `drl config check PATH`: whether it passed, and its stdout+stderr.
pub fn config_check(path: &std::path::Path) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(path)
        .output()
        .expect("run drl config check");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A real `redis-server` on a free loopback port, killed on drop, and
/// drl's Redis module (drl-test-kit's launcher).
#[allow(unused_imports)]
pub use drl_test_kit::redis::{RedisServer as Redis, module_path};
