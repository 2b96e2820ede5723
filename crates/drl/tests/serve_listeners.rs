//! End-to-end: a reload that changes `listen:` moves the listeners (the new
//! address serves, the old one stops accepting while its in-flight request
//! finishes); an address that cannot be bound refuses the whole reload and
//! everything keeps serving as before; `--http`/`--grpc` keep overriding
//! the file.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use common::{Drl, free_port, parse_response, post_json, wait_for};
use drl_api::pb::CheckItem;
use drl_api::pb::CheckRequest;
use drl_api::pb::rate_limiter_client::RateLimiterClient;
use serde_json::json;

fn config(http: SocketAddr, grpc: SocketAddr, extra_limit: bool) -> String {
    let mut s = format!(
        "listen:\n  http: {http}\n  grpc: {grpc}\nlimits:\n  - name: keep\n    algorithm: fixed-window\n    quota: 10/h\n"
    );
    if extra_limit {
        s.push_str("  - name: added\n    quota: 10/s\n");
    }
    s
}

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Status and `remaining` of one check of `limit` on the HTTP listener at `at`.
fn check(at: SocketAddr, limit: &str) -> (u16, Option<u64>) {
    let body = json!({"requests":[{"limit": limit, "key": "k"}]}).to_string();
    let (s, _, v) = post_json(&format!("http://{at}/v1/check"), &body);
    (s, v["results"][0]["remaining"].as_u64())
}

fn accepts(at: SocketAddr) -> bool {
    TcpStream::connect(at).is_ok()
}

/// `remaining` of one native gRPC check of `keep` at `at`.
fn grpc_remaining(at: SocketAddr) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = RateLimiterClient::connect(format!("http://{at}"))
            .await
            .unwrap();
        let r = c
            .check(CheckRequest {
                requests: vec![CheckItem {
                    limit: "keep".into(),
                    key: "k".into(),
                    cost: None,
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner();
        r.results[0].remaining
    })
}

/// Sends the headers and half the body of a check on a new connection and
/// waits for `100 Continue`: the request is in flight.
fn start_in_flight(at: SocketAddr) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(common::DEADLINE)).unwrap();
    let body = json!({"requests":[{"limit":"keep","key":"inflight"}]}).to_string();
    write!(
        s,
        "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed early");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let (a, b) = body.as_bytes().split_at(body.len() / 2);
    s.write_all(a).unwrap();
    (s, b.to_vec())
}

#[test]
fn sighup_moves_listeners_and_drains_the_old_ones() {
    let (http1, grpc1, http2, grpc2) = (addr(), addr(), addr(), addr());
    let drl = Drl::start_args(&config(http1, grpc1, false), &["--no-watch"]);
    assert_eq!((drl.http, drl.grpc), (http1, grpc1));
    assert_eq!(check(http1, "keep"), (200, Some(9)));
    assert_eq!(grpc_remaining(grpc1), 8);
    let (mut inflight, rest) = start_in_flight(http1);

    std::fs::write(&drl.config, config(http2, grpc2, true)).unwrap();
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    let moved = drl.wait_log("http listener moved");
    assert!(
        moved.contains(&format!("from {http1} to {http2}")),
        "{moved}"
    );
    drl.wait_log(&format!("grpc listener moved from {grpc1} to {grpc2}"));

    // The new addresses serve the new config, with the kept counters.
    assert_eq!(check(http2, "keep"), (200, Some(7)));
    assert_eq!(check(http2, "added").0, 200);
    assert_eq!(grpc_remaining(grpc2), 6);
    // The old ones stop accepting...
    wait_for("the old listeners to close", || {
        !accepts(http1) && !accepts(grpc1)
    });
    // ...but the request in flight on the old HTTP listener completes.
    inflight.write_all(&rest).unwrap();
    let mut raw = Vec::new();
    inflight.read_to_end(&mut raw).unwrap();
    let (status, _, body) = parse_response(&raw).expect("a response");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["results"][0]["allowed"], true);
}

#[test]
fn an_address_that_cannot_be_bound_refuses_the_whole_reload() {
    let (http1, grpc1, grpc2) = (addr(), addr(), addr());
    let drl = Drl::start_args(&config(http1, grpc1, false), &["--no-watch"]);
    assert_eq!(check(http1, "keep"), (200, Some(9)));
    // Someone else holds the new HTTP address; the new gRPC one is free.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap();
    std::fs::write(&drl.config, config(taken, grpc2, true)).unwrap();
    drl.signal("HUP");
    let line = drl.wait_log("config reload refused (SIGHUP)");
    assert!(
        line.contains(&format!("cannot listen for HTTP on {taken}")),
        "{line}"
    );
    // Nothing changed: the old listeners serve the old config, the free
    // new gRPC address was released, the new limit is not there.
    assert_eq!(check(http1, "keep"), (200, Some(8)));
    assert_eq!(check(http1, "added").0, 404);
    assert_eq!(grpc_remaining(grpc1), 7);
    assert!(!accepts(grpc2), "the new gRPC socket must be closed");
    drop(squatter);
    // Once the address is free, the same file reloads.
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    assert_eq!(check(taken, "added").0, 200);
}

#[test]
fn command_line_addresses_keep_overriding_the_file() {
    let (grpc1, http_file, grpc2) = (addr(), addr(), addr());
    // --http given: the file's http address is ignored at start and reload.
    let drl = Drl::start_args(
        &config(http_file, grpc1, false),
        &["--no-watch", "--http", "127.0.0.1:0"],
    );
    let http = drl.http;
    assert_ne!(http, http_file);
    std::fs::write(&drl.config, config(addr(), grpc2, true)).unwrap();
    drl.signal("HUP");
    drl.wait_log("config reloaded (SIGHUP)");
    drl.wait_log(&format!("grpc listener moved from {grpc1} to {grpc2}"));
    assert_eq!(drl.count_log("http listener moved"), 0);
    assert_eq!(check(http, "added").0, 200);
    assert!(!accepts(http_file));
}
