//! `drl replay` through the real binary.

use std::io::Write;
use std::process::{Command, Stdio};

fn drl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_drl"))
}

fn replay(args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = drl()
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("drl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn decides_a_keyed_trace_in_the_documented_format() {
    // 2 per 10 ns: T = 5. Key b has its own bucket.
    let input = "timestamp_ns,key,cost\n0,a\n0,a\n0,a\n0,b,2\n5,a\n3,a\n100,a,3\n";
    let (code, out, err) = replay(&["--algorithm", "gcra", "--quota", "2/10ns", "-"], input);
    assert_eq!(code, 0, "{err}");
    let expected = "\
timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns
0,a,true,1,0,5,0
0,a,true,0,0,10,0
0,a,false,0,5,10,0
0,b,true,0,0,10,0
5,a,true,0,0,10,0
3,a,false,0,5,10,0
100,a,false,2,,0,0
";
    assert_eq!(out, expected);
}

#[test]
fn shaper_rows_carry_the_delay() {
    let (code, out, _) = replay(
        &["-a", "leaky-queue", "-q", "2/10ns", "-"],
        "0,k\n0,k\n0,k\n",
    );
    assert_eq!(code, 0);
    let delays: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap())
        .collect();
    assert_eq!(delays, ["0", "5", "0"]);
    assert!(out.lines().nth(3).unwrap().contains(",false,"));
}

#[test]
fn every_algorithm_name_is_accepted_and_burst_applies() {
    for a in [
        "token-bucket",
        "leaky-bucket",
        "gcra",
        "leaky-queue",
        "fixed-window",
        "sliding-log",
        "sliding-window",
    ] {
        let (code, out, err) = replay(&["-a", a, "-q", "1/s", "--burst", "1", "-"], "1,x\n2,x\n");
        assert_eq!(code, 0, "{a}: {err}");
        let allowed: Vec<&str> = out
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap())
            .collect();
        assert_eq!(allowed, ["true", "false"], "{a}");
    }
}

#[test]
fn summary_counts_per_key() {
    let (code, out, _) = replay(
        &["-a", "fixed-window", "-q", "2/s", "--summary", "-"],
        "1,alice\n2,alice\n3,alice\n4,bob\n",
    );
    assert_eq!(code, 0);
    let alice = out.lines().find(|l| l.starts_with("alice")).unwrap();
    let fields: Vec<&str> = alice.split_whitespace().collect();
    assert_eq!(&fields[..3], ["alice", "2", "1"]);
    let all = out.lines().find(|l| l.starts_with("(all)")).unwrap();
    assert_eq!(all.split_whitespace().nth(1), Some("3"));
    assert!(!out.contains("timestamp_ns"), "summary replaces the rows");
}

#[test]
fn multi_limit_replay_is_all_or_nothing() {
    // 2/s and 3/min: the minute quota stops the third second's requests.
    let s = 1_000_000_000u64;
    let input: String = [0, 1, s, s + 1, 2 * s]
        .iter()
        .map(|t| format!("{t},k\n"))
        .collect();
    let (code, out, _) = replay(
        &["-a", "fixed-window", "-q", "2/s", "-q", "3/min", "-"],
        &input,
    );
    assert_eq!(code, 0);
    let allowed: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap())
        .collect();
    assert_eq!(allowed, ["true", "true", "true", "false", "false"]);
}

#[test]
fn bad_input_is_a_clear_error_naming_the_line() {
    let (code, _, err) = replay(&["-a", "gcra", "-q", "1/s", "-"], "1,a\n2,b\nnope,c\n");
    assert_eq!(code, 2);
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("timestamp_ns \"nope\""), "{err}");

    let (code, _, err) = replay(&["-a", "bucket", "-q", "1/s", "-"], "");
    assert_ne!(code, 0);
    assert!(err.contains("unknown algorithm"), "{err}");

    let (code, _, err) = replay(&["-a", "gcra", "-q", "0/s", "-"], "");
    assert_ne!(code, 0);
    assert!(err.contains("limit must be at least 1"), "{err}");

    let (code, _, err) = replay(
        &["-a", "gcra", "-q", "1/s", "-q", "2/s", "--burst", "3", "-"],
        "",
    );
    assert_eq!(code, 2);
    assert!(err.contains("--burst applies to a single --quota"), "{err}");

    let out = drl()
        .args([
            "replay",
            "-a",
            "gcra",
            "-q",
            "1/s",
            "/nonexistent/trace.csv",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open /nonexistent/trace.csv"));
}
