//! The soak's checks catch a broken build: a short soak (20 s of load)
//! passes with the cluster as configured, and fails, naming the Orbit
//! check, when one Orbit node enforces the cap on its own
//! (`--broken orbit-local`).
//!
//! Binaries: `drl-soak` is this crate's (`CARGO_BIN_EXE_drl-soak`); the
//! `drl` binary it starts is `$DRL_BIN`, or else `drl` in the same target
//! directory (`cargo test --workspace` builds it, with the fault injector
//! its tests enable; with `cargo test -p drl-soak` alone, run `cargo build
//! -p drl --features fault-injection` first). A missing binary
//! fails the test: it never skips.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// Both runs start 12 processes: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn drl_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("DRL_BIN") {
        return PathBuf::from(p);
    }
    let soak = PathBuf::from(env!("CARGO_BIN_EXE_drl-soak"));
    let drl = soak.with_file_name("drl");
    assert!(
        drl.is_file(),
        "no drl binary at {} (run `cargo build -p drl --features fault-injection` with the same target dir, or set DRL_BIN)",
        drl.display()
    );
    drl
}

/// Runs drl-soak for `secs` s with `extra` arguments: exit code, stdout
/// (the summary) and the check log.
fn soak(secs: u32, extra: &[&str]) -> (i32, String, String) {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_drl-soak"))
        .args(["--minutes", &format!("{}", secs as f64 / 60.0)])
        .arg("--out")
        .arg(out.path())
        .arg("--drl")
        .arg(drl_bin())
        .args(extra)
        .output()
        .expect("run drl-soak");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let checks = std::fs::read_to_string(out.path().join("checks.log")).unwrap_or_default();
    (
        o.status.code().unwrap_or(-1),
        format!("{stdout}\n--- stderr ---\n{stderr}"),
        checks,
    )
}

#[test]
fn a_short_soak_of_the_cluster_as_configured_passes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (code, out, checks) = soak(20, &[]);
    assert_eq!(code, 0, "the soak failed:\n{out}");
    assert!(out.contains("verdict: PASS"), "{out}");
    // It really checked: Orbit windows, Redis and local windows, gossip
    // seconds after warm-up.
    for what in [
        "orbit window=",
        "redis window=",
        "local window=",
        "gossip admitted=",
    ] {
        assert!(
            checks.contains(what),
            "no {what:?} line in the check log:\n{checks}"
        );
    }
    assert!(
        checks
            .lines()
            .any(|l| l.contains("gossip") && l.contains(" ok ")),
        "no gossip second checked:\n{checks}"
    );
}

#[test]
fn an_orbit_node_enforcing_the_cap_alone_fails_the_orbit_check() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (code, out, _) = soak(20, &["--broken", "orbit-local"]);
    assert_eq!(code, 1, "the broken soak did not fail:\n{out}");
    assert!(out.contains("verdict: FAIL"), "{out}");
    let orbit = out
        .lines()
        .filter(|l| l.contains("orbit window") && l.contains("> cap"))
        .count();
    assert!(orbit > 0, "no Orbit window over the cap:\n{out}");
}
