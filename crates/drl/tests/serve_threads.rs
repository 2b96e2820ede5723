//! End-to-end: `drl serve`'s connection threads (docs/server.md, "Runtime
//! threads"). With `--threads 2` two connection threads run, and two
//! connections opened one after the other are served by different threads
//! (a thread runs while its connection works, the other stays parked); with
//! `--scheduler shared` none run and connections are served all the same.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::Drl;

const YAML: &str = "limits:\n  - name: api\n    quota: 1000000/s\n";

/// The process's threads named `drl-conn-*`: (name, task id).
fn conn_threads(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().file_name().into_string().unwrap();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{task}/comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        if comm.starts_with("drl-conn-") {
            out.push((comm, task));
        }
    }
    out.sort();
    out
}

/// Nanoseconds task `tid` of `pid` has run on a CPU (schedstat's first field).
fn run_ns(pid: u32, tid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Sends `n` checks one after the other on the kept-alive connection `s`;
/// each must be answered 200.
fn checks(s: &mut TcpStream, n: usize) {
    let body = r#"{"requests":[{"limit":"api","key":"k"}]}"#;
    let req = format!(
        "POST /v1/check HTTP/1.1\r\nHost: drl\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..n {
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        // Read the head, then the body's content-length bytes.
        let (head_end, len) = loop {
            let k = s.read(&mut buf).unwrap();
            assert!(k > 0, "connection closed mid-answer");
            raw.extend_from_slice(&buf[..k]);
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..i]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                break (i + 4, len);
            }
        };
        while raw.len() < head_end + len {
            let k = s.read(&mut buf).unwrap();
            assert!(k > 0, "connection closed mid-body");
            raw.extend_from_slice(&buf[..k]);
        }
    }
}

#[test]
fn connections_are_handed_to_the_connection_threads_in_turn() {
    let drl = Drl::start_with(YAML, &["--threads", "2"]);
    let pid = drl.child.id();
    let threads = conn_threads(pid);
    let names: Vec<&str> = threads.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["drl-conn-0", "drl-conn-1"]);
    // Two connections opened one after the other: each on its own thread.
    let mut a = TcpStream::connect(drl.http).unwrap();
    let mut b = TcpStream::connect(drl.http).unwrap();
    checks(&mut a, 1);
    checks(&mut b, 1);
    // Now only `a` works: one thread runs for it, the other stays parked
    // (it may still finish `b`'s first answer: at least ten times less).
    let grew = |f: &mut dyn FnMut()| -> Vec<u64> {
        let before: Vec<u64> = threads.iter().map(|(_, t)| run_ns(pid, t)).collect();
        f();
        threads
            .iter()
            .zip(before)
            .map(|((_, t), b)| run_ns(pid, t) - b)
            .collect()
    };
    let on_a = grew(&mut || checks(&mut a, 300));
    let a_thread = usize::from(on_a[1] > on_a[0]);
    assert!(
        on_a[a_thread] >= 10 * on_a[1 - a_thread],
        "run time of the connection threads while a works (ns): {on_a:?}"
    );
    // And `b` runs on the other one.
    let on_b = grew(&mut || checks(&mut b, 300));
    assert!(
        on_b[1 - a_thread] >= 10 * on_b[a_thread],
        "run time of the connection threads while b works (ns): {on_b:?}; a's is {a_thread}"
    );
}

#[test]
fn the_shared_scheduler_starts_no_connection_thread() {
    let drl = Drl::start_with(YAML, &["--threads", "2", "--scheduler", "shared"]);
    assert!(conn_threads(drl.child.id()).is_empty());
    let mut a = TcpStream::connect(drl.http).unwrap();
    checks(&mut a, 50);
}
