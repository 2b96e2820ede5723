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
        (
            "--aggregation",
            "gossip",
            "peer-table, push-sum or flow-updating",
        ),
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

/// The figure commands of §5.2-5.7: each writes its five files, prints its
/// table, and the same seed gives the same bytes; bad flags are one clear
/// error.
#[test]
fn sim_figure_commands_write_their_outputs() {
    let dir = tempfile::tempdir().unwrap();
    for fig in ["fig6", "fig7", "fig9", "table1", "table2"] {
        let run = |out: &std::path::Path| {
            let o = drl()
                .args(["sim", fig, "--quiet", "--runs", "1", "--duration", "8"])
                .args(["--seed", "3", "--out"])
                .arg(out)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{fig} stderr: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8(o.stdout).unwrap()
        };
        let (a, b) = (
            dir.path().join(fig).join("a"),
            dir.path().join(fig).join("b"),
        );
        let stdout = run(&a);
        assert!(stdout.contains("wrote 5 files to"), "{fig}: {stdout}");
        run(&b);
        let svg = format!("{fig}.svg");
        for f in [
            "rates.csv",
            "flows.csv",
            "limiters.csv",
            "summary.json",
            svg.as_str(),
        ] {
            let x = std::fs::read(a.join(f)).unwrap();
            assert!(!x.is_empty(), "{fig}: {f} is empty");
            assert!(x == std::fs::read(b.join(f)).unwrap(), "{fig}: {f} differs");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(a.join("summary.json")).unwrap()).unwrap();
        assert_eq!(v["figure"], fig);
        assert!(
            v["results"].as_object().is_some_and(|r| r.len() >= 2),
            "{v}"
        );
    }
    for (args, needle) in [
        (vec!["sim", "table2", "--runs", "0"], "--runs"),
        (vec!["sim", "fig6", "--duration=0"], "--duration"),
        (vec!["sim", "fig7", "--series-ms", "0"], "--series-ms"),
    ] {
        let o = drl().args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    let o = drl().args(["sim", "--help"]).output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    for w in ["fig6", "fig7", "fig9", "table1", "table2"] {
        assert!(s.contains(w), "{s}");
    }
}
