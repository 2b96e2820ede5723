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

#[test]
fn a_token_budget_replays_reservations_settlements_and_debt() {
    // 100 tokens per hour, fixed window (docs/semantics.md, "Costs known
    // afterwards"): reserve 30 and use 12 (18 refunded), reserve 10 and use
    // 50 (40 charged), then a charge of 60 past the limit: 122 of 100, in
    // debt, so takes, reserves, checks and queries are denied until the
    // window ends; a settle of a denied reservation settles nothing; a
    // release refunds the whole estimate; the next window starts fresh.
    let input = "\
timestamp_ns,key,cost,kind,id
0,t,30,reserve,r1
1,t,12,settle,r1
2,t,10,reserve,r2
3,t,50,settle,r2
4,t,60,charge
5,t,1,take
6,t,1,reserve,r3
7,t,0,check
8,t,5,settle,r3
9,u,100,reserve,r4
10,u,,release,r4
3600000000000,t,1
";
    let (code, out, err) = replay(&["-a", "fixed-window", "-q", "100/h", "-"], input);
    assert_eq!(code, 0, "{err}");
    let h = 3_600_000_000_000u64;
    let expected = format!(
        "\
timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns,kind,charged,refunded
0,t,true,70,0,{h},0,reserve,0,0
1,t,true,88,0,{},0,settle,0,18
2,t,true,78,0,{},0,reserve,0,0
3,t,true,38,0,{},0,settle,40,0
4,t,false,0,{},{},0,charge,0,0
5,t,false,0,{},{},0,take,0,0
6,t,false,0,{},{},0,reserve,0,0
7,t,false,0,{},{},0,check,0,0
8,t,false,0,{},{},0,settle,0,0
9,u,true,0,0,{},0,reserve,0,0
10,u,true,100,0,0,0,release,0,100
{h},t,true,99,0,{h},0,take,0,0
",
        h - 1,
        h - 2,
        h - 3,
        h - 4,
        h - 4,
        h - 5,
        h - 5,
        h - 6,
        h - 6,
        h - 7,
        h - 7,
        h - 8,
        h - 8,
        h - 9,
    );
    assert_eq!(out, expected);

    // The summary counts takes and reserves as requests, and the consumed
    // cost: 30 - 18 + 10 + 40 + 60 + 1 for t; 100 - 100 for u.
    let (code, out, _) = replay(
        &["-a", "fixed-window", "-q", "100/h", "--summary", "-"],
        input,
    );
    assert_eq!(code, 0);
    let t: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("t "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!((t[1], t[2], t[4], t[5]), ("3", "2", "123", "2"), "{out}");
}

#[test]
fn a_reservation_settled_after_its_expiry_refunds_nothing() {
    // TTL 1 ms: settled at 1 ms, the estimate of 5 stays consumed; a
    // settlement above the estimate still charges the difference.
    let input =
        "0,k,5,reserve,a\n1000000,k,1,settle,a\n1000000,k,2,reserve,b\n3000000,k,4,settle,b\n";
    let (code, out, err) = replay(
        &[
            "-a",
            "fixed-window",
            "-q",
            "10/h",
            "--reservation-ttl-ms",
            "1",
            "-",
        ],
        input,
    );
    assert_eq!(code, 0, "{err}");
    let cols: Vec<(String, String, String)> = out
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[3].to_string(), f[8].to_string(), f[9].to_string())
        })
        .collect();
    let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        cols,
        [
            s("5", "0", "0"),
            s("5", "0", "0"),
            s("3", "0", "0"),
            s("1", "2", "0")
        ]
    );
}

#[test]
fn old_traces_read_as_before_and_bad_reservations_are_clear_errors() {
    // No kind column on the first line: the old seven output columns.
    let (code, out, _) = replay(
        &["-a", "fixed-window", "-q", "2/m", "-"],
        "0,a\n0,a,2,charge\n1,a\n",
    );
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "timestamp_ns,key,allowed,remaining,retry_after_ns,reset_after_ns,delay_ns\n\
         0,a,true,1,0,60000000000,0\n\
         0,a,false,0,60000000000,60000000000,0\n\
         1,a,false,0,59999999999,59999999999,0\n"
    );
    for (input, msg) in [
        ("0,a,1,settle,x\n", "which no reserve row opened"),
        ("0,a,1,reserve,x\n1,a,1,reserve,x\n", "which is still open"),
        (
            "0,a,1,reserve,x\n1,b,1,settle,x\n",
            "it was reserved for key \"a\"",
        ),
        (
            "0,a,1,reserve,x\n1,a,1,release,x\n2,a,1,settle,x\n",
            "which no reserve row opened",
        ),
        (
            "0,a,1,reserve\n",
            "line 1: a reserve row needs a reservation id",
        ),
    ] {
        let (code, _, err) = replay(&["-a", "gcra", "-q", "5/s", "-"], input);
        assert_eq!(code, 2, "{input}");
        assert!(err.contains(msg), "{input}: {err}");
    }
}
