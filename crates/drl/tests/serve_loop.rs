//! End-to-end: the connection loop of the real `drl serve`
//! (`drl_server::loops`). With two runtime threads its connections are
//! polled by one task at rest, run as tasks of their own under a load
//! that keeps that task busy, and gather back once the load stops; with
//! one thread they are always tasks of their own.
//! `drl_connections_pooled{listener}` shows which.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{Drl, http_request, metric, wait_for};

const YAML: &str = "limits:\n  - name: api\n    algorithm: fixed-window\n    quota: 1000000000/m\n";

fn pooled(drl: &Drl) -> Option<f64> {
    let (s, _, m) = http_request("GET", &drl.url("/metrics"), &[], b"").expect("metrics");
    assert_eq!(s, 200);
    metric(&m, "drl_connections_pooled{listener=\"http\"}")
}

/// Sends checks on one keep-alive connection, `DEPTH` pipelined at a
/// time, until `stop`; counts the answers in `done`.
fn hammer(drl: &Drl, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    const DEPTH: usize = 32;
    let addr = drl.http;
    std::thread::spawn(move || {
        let body = r#"{"requests":[{"limit":"api","key":"k"}]}"#;
        let one = format!(
            "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let batch = one.repeat(DEPTH);
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut buf = vec![0u8; 64 * 1024];
        let mut carry = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            s.write_all(batch.as_bytes()).expect("write");
            let mut seen = 0;
            while seen < DEPTH {
                let n = s.read(&mut buf).expect("read");
                assert!(n > 0, "the server closed the connection");
                carry.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&carry).into_owned();
                let answers = text.matches("HTTP/1.1 200 ").count();
                assert!(
                    !text.contains("HTTP/1.1 4") && !text.contains("HTTP/1.1 5"),
                    "{text}"
                );
                seen += answers;
                // Keep the unfinished tail (a status line cut in two).
                let keep = text.rfind("HTTP/1.1 200 ").map_or(0, |i| i + 1);
                carry.drain(..keep.min(carry.len()));
            }
            done.fetch_add(DEPTH as u64, Ordering::Relaxed);
        }
    })
}

#[test]
fn two_threads_pool_under_load_and_gather_back_at_rest() {
    let drl = Drl::start_with(YAML, &["--threads", "2"]);
    assert_eq!(pooled(&drl), Some(0.0), "at rest: on the loop");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| hammer(&drl, stop.clone(), done.clone()))
        .collect();
    wait_for("the connections pooled under load", || {
        pooled(&drl) == Some(1.0)
    });
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    assert!(done.load(Ordering::Relaxed) > 0);
    wait_for("the connections gathered back at rest", || {
        pooled(&drl) == Some(0.0)
    });
    // And it still answers, on the loop.
    let (s, _, body) = http_request(
        "POST",
        &drl.url("/v1/check"),
        &[("content-type", "application/json")],
        br#"{"requests":[{"limit":"api","key":"k"}]}"#,
    )
    .expect("check");
    assert_eq!(s, 200, "{body}");
}

#[test]
fn one_thread_always_pools() {
    let drl = Drl::start_with(YAML, &["--threads", "1"]);
    assert_eq!(pooled(&drl), Some(1.0));
}
