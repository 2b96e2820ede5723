//! `drl sim` end to end: the real binary, short runs, outputs on disk.

use std::process::Command;

fn drl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_drl"))
}

#[test]
fn sim_baseline_writes_all_outputs_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    let run = |out: &std::path::Path| {
        let o = drl()
            .args([
                "sim",
                "baseline",
                "--algorithms",
                "ctb,grd,fps",
                "--duration",
                "6",
                "--warmup",
                "2",
                "--seed",
                "9",
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let stdout = run(&a);
    assert!(stdout.contains("fps"), "{stdout}");
    run(&b);
    for f in [
        "rates.csv",
        "flows.csv",
        "limiters.csv",
        "histograms.csv",
        "summary.json",
        "fig3.svg",
        "fig4.svg",
        "fig5.svg",
    ] {
        let x = std::fs::read(a.join(f)).unwrap();
        let y = std::fs::read(b.join(f)).unwrap();
        assert!(!x.is_empty(), "{f} is empty");
        assert!(x == y, "{f} differs between two runs with the same seed");
    }
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("summary.json")).unwrap()).unwrap();
    for alg in ["ctb", "grd", "fps"] {
        let s = &v["algorithms"][alg];
        assert!(s["aggregate_mbps"].as_f64().unwrap() > 5.0, "{alg}: {s}");
        assert_eq!(s["limiter_mbps"].as_array().unwrap().len(), 2);
        assert!(s["jain"].as_f64().unwrap() <= 1.0);
    }
    let rates = std::fs::read_to_string(a.join("rates.csv")).unwrap();
    assert!(
        rates.starts_with(
            "algorithm,run,seed,time_s,limiter_1_mbps,limiter_2_mbps,aggregate_mbps\n"
        )
    );
}

#[test]
fn sim_rejects_bad_flags_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = drl()
        .args(["sim", "baseline", "--algorithms", "tokenbucket", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown allocator"));
    let o = drl()
        .args([
            "sim",
            "baseline",
            "--gossip-loss",
            "1.5",
            "--duration",
            "3",
            "--warmup",
            "1",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("gossip loss"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Fault flags: malformed, or naming a limiter that does not exist.
    for (flag, value, expect) in [
        ("--kill", "2", "expected NODE@TIME"),
        ("--kill", "9@1s", "node 9 out of range"),
        ("--restart", "1@soon", "unknown time unit"),
        ("--restart", "1@5.5.5s", "is not a number"),
        ("--partition", "0,1@1s-2s", "at least two groups"),
        ("--partition", "0/1@3s-2s", "ends"),
        ("--aggregation", "gossip", "peer-table or push-sum"),
    ] {
        let o = drl()
            .args(["sim", "baseline", "--duration", "3", "--warmup", "1"])
            .args([flag, value, "--out"])
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{flag} {value} accepted");
        assert!(stderr.contains(expect), "{flag} {value}: {stderr}");
    }
}

#[test]
fn sim_runs_kills_restarts_and_partitions_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for agg in ["peer-table", "push-sum"] {
        let o = drl()
            .args([
                "sim",
                "baseline",
                "--algorithms",
                "grd",
                "--flows",
                "2,2,2",
                "--duration",
                "6",
                "--warmup",
                "1",
                "--aggregation",
                agg,
                "--kill",
                "2@2s",
                "--restart",
                "2@4s",
                "--partition",
                "0/1,2@1s-3s",
                "--quiet",
                "--out",
            ])
            .arg(dir.path().join(agg))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{agg}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(stdout.contains("grd"), "{stdout}");
    }
}

#[test]
fn sim_help_lists_the_experiments_and_flags() {
    let o = drl().args(["sim", "--help"]).output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    for w in ["baseline", "fig3", "fig4", "fig5"] {
        assert!(s.contains(w), "{s}");
    }
    let o = drl().args(["sim", "baseline", "--help"]).output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    for w in [
        "--flows",
        "--limit-mbps",
        "--flow-rtt-ms",
        "--limiter-rtt-ms",
        "--interval-ms",
        "--ewma",
        "--depth-bytes",
        "--branching",
        "--gossip-loss",
        "--runs",
        "--seed",
        "--duration",
        "--out",
    ] {
        assert!(s.contains(w), "missing {w}");
    }
}
