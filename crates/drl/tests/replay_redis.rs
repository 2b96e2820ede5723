//! `drl replay --store redis://…` decides through the Redis scripts (and,
//! with `--redis-engine module`, through drl's Redis module) with the
//! trace's timestamps: its CSV must equal the in-memory CSV byte for byte,
//! for every algorithm. Needs `redis-server` (scripts/test installs it).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::free_port;

/// Every algorithm, by its command-line name.
const ALGORITHMS: [&str; 7] = [
    "token-bucket",
    "leaky-bucket",
    "gcra",
    "leaky-queue",
    "fixed-window",
    "sliding-log",
    "sliding-window",
];

fn replay(args: &[&str], input: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_drl"))
        .arg("replay")
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A reproducible trace: 4 keys, Unix-epoch nanosecond stamps, steps of a
/// few ms, some going backwards, costs 0..=4 (some above the burst).
fn trace(seed: u64, rows: usize) -> String {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t: u64 = 1_763_700_000_000_000_000;
    let mut out = String::from("timestamp_ns,key,cost\n");
    for _ in 0..rows {
        let r = next();
        let step = (r % 9_000_000) as i64 - 1_000_000;
        t = (t as i64 + step) as u64;
        out += &format!("{t},k{},{}\n", (r >> 20) % 4, (r >> 30) % 5);
    }
    out
}

#[test]
fn redis_replay_equals_memory_replay_for_every_algorithm() {
    let redis = common::Redis::start_module();
    let url = redis.url();
    for (i, alg) in ALGORITHMS.into_iter().enumerate() {
        let input = trace(0xD1 + i as u64, 1500);
        for quota in [&["-q", "3/50ms"][..], &["-q", "3/50ms", "-q", "20/s"][..]] {
            let mut base = vec!["-a", alg];
            base.extend_from_slice(quota);
            let memory = replay(&base, &input);
            assert_eq!(memory.lines().count(), 1501);
            assert!(
                memory.contains(",true,") && memory.contains(",false,"),
                "{alg}: trace exercises both"
            );
            for engine in ["lua", "module"] {
                let mut with_store = base.clone();
                with_store.extend_from_slice(&["--store", &url, "--redis-engine", engine]);
                let redis = replay(&with_store, &input);
                if memory != redis {
                    let (n, (m, r)) = memory
                        .lines()
                        .zip(redis.lines())
                        .enumerate()
                        .find(|(_, (m, r))| m != r)
                        .expect("same length");
                    panic!(
                        "{alg} {quota:?} {engine}: first difference at row {n}:\n memory {m}\n redis  {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn unreachable_store_is_a_clear_error() {
    let port = free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args([
            "replay",
            "-a",
            "gcra",
            "-q",
            "1/s",
            "--store",
            &format!("redis://127.0.0.1:{port}"),
            "-",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach Redis at redis://127.0.0.1:"),
        "{err}"
    );
}

#[test]
fn module_engine_without_the_module_is_a_clear_error() {
    let redis = common::Redis::start();
    let out = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args(["replay", "-a", "gcra", "-q", "1/s", "--store", &redis.url()])
        .args(["--redis-engine", "module", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&redis.url()) && err.contains("--loadmodule") && err.contains("engine: lua"),
        "{err}"
    );
}

/// `trace`, with every third row or so a charge (costs up to 9: past
/// the limit, into debt).
fn trace_with_charges(seed: u64, rows: usize) -> String {
    let mut out = String::from("timestamp_ns,key,cost,kind\n");
    for (i, line) in trace(seed, rows).lines().skip(1).enumerate() {
        let (rest, cost) = line.rsplit_once(',').unwrap();
        if (i * 7 + seed as usize) % 3 == 0 {
            let cost: u64 = cost.parse::<u64>().unwrap() * 2 + 1;
            out += &format!("{rest},{cost},charge\n");
        } else {
            out += &format!("{line},take\n");
        }
    }
    out
}

/// Where `input` replayed through Redis at `url` with each engine
/// differs from `memory`, its in-memory replay under `base`: the first
/// differing row per engine.
fn store_differences(
    url: &str,
    alg: &str,
    base: &[&str],
    input: &str,
    memory: &str,
) -> Vec<String> {
    let mut diffs = vec![];
    for engine in ["lua", "module"] {
        let mut with_store = base.to_vec();
        with_store.extend_from_slice(&["--store", url, "--redis-engine", engine]);
        let redis = replay(&with_store, input);
        if memory != redis {
            let (n, (m, r)) = memory
                .lines()
                .zip(redis.lines())
                .enumerate()
                .find(|(_, (m, r))| m != r)
                .expect("same length");
            diffs.push(format!(
                "{alg} {engine}: first difference at row {n}:\n memory {m}\n redis  {r}"
            ));
        }
    }
    diffs
}

#[test]
fn redis_replay_of_takes_and_charges_equals_memory_for_every_algorithm() {
    let redis = common::Redis::start_module();
    let url = redis.url();
    let mut diffs = vec![];
    for (i, alg) in ALGORITHMS.into_iter().enumerate() {
        let input = trace_with_charges(0xC4 + i as u64, 600);
        let base = ["-a", alg, "-q", "3/50ms", "-q", "20/s"];
        let memory = replay(&base, &input);
        assert_eq!(memory.lines().count(), 601);
        assert!(memory.contains(",charge,") && memory.contains(",take,"));
        assert!(
            memory.contains(",true,") && memory.contains(",false,"),
            "{alg}: trace exercises both"
        );
        diffs.extend(store_differences(&url, alg, &base, &input, &memory));
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// A trace of every kind of row: takes, checks, charges, and
/// reservations (estimates up to 6) settled above or below their estimate
/// or released, some after `--reservation-ttl-ms` has passed.
fn trace_with_reservations(seed: u64, rows: usize) -> String {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t: u64 = 1_763_700_000_000_000_000;
    let mut open: Vec<(String, String)> = vec![];
    let mut out = String::from("timestamp_ns,key,cost,kind,id\n");
    for n in 0..rows {
        let r = next();
        t += r % 9_000_000;
        let key = format!("k{}", (r >> 20) % 3);
        let cost = (r >> 30) % 7;
        let line = match (r >> 40) % 6 {
            0 | 1 => format!("{t},{key},{cost},take,"),
            2 => format!("{t},{key},{cost},check,"),
            3 => format!("{t},{key},{},charge,", cost / 2),
            4 => {
                let id = format!("r{n}");
                open.push((id.clone(), key.clone()));
                format!("{t},{key},{cost},reserve,{id}")
            }
            _ if !open.is_empty() => {
                let (id, key) = open.remove((r >> 50) as usize % open.len());
                if (r >> 45) % 3 == 0 {
                    format!("{t},{key},0,release,{id}")
                } else {
                    format!("{t},{key},{},settle,{id}", (r >> 33) % 9)
                }
            }
            _ => format!("{t},{key},{cost},take,"),
        };
        out += &line;
        out += "\n";
    }
    out
}

#[test]
fn redis_replay_of_every_kind_of_row_equals_memory_for_every_algorithm() {
    let redis = common::Redis::start_module();
    let url = redis.url();
    let mut diffs = vec![];
    for (i, alg) in ALGORITHMS.into_iter().enumerate() {
        let input = trace_with_reservations(0x5E77 + i as u64, 500);
        let base = [
            "-a",
            alg,
            "-q",
            "4/50ms",
            "-q",
            "30/s",
            "--reservation-ttl-ms",
            "40",
        ];
        let memory = replay(&base, &input);
        assert_eq!(memory.lines().count(), 501);
        for kind in [",check,", ",charge,", ",reserve,", ",settle,", ",release,"] {
            assert!(memory.contains(kind), "{alg}: the trace has {kind} rows");
        }
        // Refunds and charges beyond the estimate both happen.
        assert!(
            memory
                .lines()
                .any(|l| l.contains(",settle,") && !l.ends_with(",0,0")),
            "{alg}: some settle moves the balance"
        );
        diffs.extend(store_differences(&url, alg, &base, &input, &memory));
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn a_settle_without_its_reserve_through_redis_is_a_clear_error() {
    let redis = common::Redis::start();
    let out = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args([
            "replay",
            "-a",
            "gcra",
            "-q",
            "1/s",
            "--store",
            &redis.url(),
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .unwrap()
                .write_all(b"0,a\n1,a,1,settle,r\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("settles id \"r\", which no reserve row opened"),
        "{err}"
    );
}
