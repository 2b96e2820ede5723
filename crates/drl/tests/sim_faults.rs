//! `drl sim faults` end to end: the real binary runs the Orbit fault harness
//! over a few dozen seeds; bad flags fail with a clear error.

use std::process::{Command, Output};

fn drl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drl"))
        .args(args)
        .output()
        .unwrap()
}

/// The number after `label` in `line` (`"admitted 120,"` -> 120).
fn number_after(line: &str, label: &str) -> u64 {
    let rest = line
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in {line:?}"))
}

#[test]
fn orbit_seeds_pass_and_the_summary_adds_them_up() {
    let args = [
        "sim",
        "faults",
        "--protocol",
        "orbit",
        "--seeds",
        "40",
        "--first-seed",
        "100",
        "--quiet",
    ];
    let o = drl(&args);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one summary line: {stdout}");
    let line = lines[0];
    assert!(
        line.starts_with("orbit: 40 seeds (100..=139) passed: "),
        "{line}"
    );
    // 40 random scenarios admit requests and inject faults.
    assert!(number_after(line, "admitted") > 0, "{line}");
    assert!(line.contains(" crashes, ") && line.contains(" partitions, "));
    assert!(line.contains(" simulated in "), "{line}");
    // Same seeds, same run: everything but the wall time is identical.
    let again = drl(&args);
    let strip = |s: &str| s.split(" simulated in ").next().unwrap().to_owned();
    assert_eq!(
        strip(line),
        strip(String::from_utf8_lossy(&again.stdout).trim())
    );
}

#[test]
fn one_seed_is_the_reproduce_command() {
    let o = drl(&[
        "sim",
        "faults",
        "--protocol",
        "orbit",
        "--first-seed",
        "7",
        "--seeds",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}");
    assert!(
        stdout.starts_with("orbit: 1 seeds (7..=7) passed: "),
        "{stdout}"
    );
}

#[test]
fn an_unknown_protocol_is_a_clear_error() {
    let o = drl(&["sim", "faults", "--protocol", "raft", "--seeds", "3"]);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("invalid value 'raft' for '--protocol")
            && stderr.contains("possible values: orbit, gossip"),
        "{stderr}"
    );
    // Missing --protocol, and an empty seed range, are refused too.
    let o = drl(&["sim", "faults", "--seeds", "3"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--protocol"));
    let o = drl(&["sim", "faults", "--protocol", "orbit", "--seeds", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--seeds must be at least 1"));
}

#[test]
fn help_explains_the_harness() {
    let o = drl(&["sim", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("faults"));
    let o = drl(&["sim", "faults", "--help"]);
    let s = String::from_utf8_lossy(&o.stdout);
    for w in [
        "--protocol",
        "--seeds",
        "--first-seed",
        "--quiet",
        "orbit",
        "invariant",
        "reproduce",
    ] {
        assert!(s.contains(w), "missing {w}: {s}");
    }
}
