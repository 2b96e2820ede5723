//! End-to-end: the default `drl serve` against one hostile, unauthenticated
//! client (docs/security.md, "Attacks on the listeners"). Each test is one
//! attack class (D1-D5), written as raw frames (tests/common/h2raw.rs) or
//! raw HTTP/1.1, with a legitimate client calling alongside or after; each
//! asserts what the server does to the attacker (closes it with
//! `ENHANCE_YOUR_CALM`, answers at once, bounds its memory) and that the
//! legitimate calls are all answered. No verdict reads a clock: waits are
//! on conditions, with the tests' common deadline as the hang guard.

mod common;

use std::io::{Read, Write};

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::h2raw::{self, ENHANCE_YOUR_CALM, Raw, flag, kind};
use common::{Drl, post_json, wait_for};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

/// The default config: one native limit and one Envoy domain, both far
/// above the load (a denial would be a test failure, not the attack's).
const YAML: &str = "\
limits:
  - name: api
    algorithm: fixed-window
    quota: 1000000000/m
envoy:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 1000000000}
";

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `n` legitimate HTTP checks, each on a fresh connection: all answered 200.
fn legit_http(drl: &Drl, n: usize) {
    for i in 0..n {
        let (s, _, v) = post_json(
            &drl.url("/v1/check"),
            &format!(r#"{{"requests":[{{"limit":"api","key":"legit-{i}"}}]}}"#),
        );
        assert_eq!(s, 200, "legit HTTP check {i}: {v}");
        assert_eq!(v["results"][0]["allowed"], true);
    }
}

/// `n` legitimate Envoy RLS calls on one fresh gRPC connection: all OK.
fn legit_rls(drl: &Drl, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = RateLimitServiceClient::connect(drl.grpc_url())
            .await
            .expect("connect");
        for i in 0..n {
            let req = RateLimitRequest {
                domain: "d".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "k".into(),
                        value: format!("legit-{i}"),
                    }],
                    limit: None,
                    hits_addend: None,
                }],
                hits_addend: 1,
            };
            let r = tokio::time::timeout(common::DEADLINE, c.should_rate_limit(req))
                .await
                .expect("legit RLS call hung")
                .expect("legit RLS call failed");
            assert_eq!(r.into_inner().overall_code, 1, "OK");
        }
    });
}

/// D5: rapid reset (CVE-2023-44487): HEADERS then RST_STREAM, stream after
/// stream. The connection is closed with ENHANCE_YOUR_CALM long before the
/// 100,000th stream (a hand-written engine took 14.9 M in 10 s).
#[test]
fn rapid_reset_is_closed_with_enhance_your_calm() {
    let drl = Drl::start(YAML);
    let mut raw = Raw::connect(drl.grpc);
    let head = h2raw::grpc_head(RLS);
    let mut sent = 0u32;
    'attack: for _ in 0..100 {
        let mut burst = Vec::new();
        for _ in 0..1000 {
            let id = 2 * sent + 1;
            h2raw::frame(&mut burst, kind::HEADERS, flag::END_HEADERS, id, &head);
            h2raw::frame(&mut burst, kind::RST_STREAM, 0, id, &8u32.to_be_bytes());
            sent += 1;
        }
        if !raw.send(&burst) || raw.seen().goaway.is_some() {
            break 'attack;
        }
    }
    let seen = raw.wait("GOAWAY and close", |s| s.goaway.is_some() && s.closed);
    assert_eq!(seen.goaway, Some(ENHANCE_YOUR_CALM), "{seen:?}");
    assert!(sent < 100_000, "closed only after {sent} streams");
    legit_rls(&drl, 20);
    legit_http(&drl, 5);
}

/// D5: HPACK bomb: one 4 KB entry put in the dynamic table, then referenced
/// 12,000 times in one header block (48 MB decoded from 16 KB). Each is
/// refused over `max_header_list_size`, and a stream of them closes the
/// connection with ENHANCE_YOUR_CALM.
#[test]
fn hpack_bombs_are_refused_and_their_sender_closed() {
    let drl = Drl::start(YAML);
    let mut raw = Raw::connect(drl.grpc);
    let mut sent = 0u32;
    for round in 0..5000u32 {
        let mut block = h2raw::grpc_head(RLS);
        if round == 0 {
            // Literal with incremental indexing, new name: dynamic index 62.
            block.push(0x40);
            h2raw::hpack_str(&mut block, b"x-bomb");
            h2raw::hpack_str(&mut block, &[b'a'; 4000]);
        }
        block.extend(std::iter::repeat_n(0xbe, 12_000));
        let mut out = Vec::new();
        h2raw::frame(
            &mut out,
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            2 * round + 1,
            &block,
        );
        sent += 1;
        if !raw.send(&out) || raw.seen().closed {
            break;
        }
    }
    let seen = raw.wait("the bomber closed", |s| s.closed);
    assert!(
        seen.goaway.is_some(),
        "closed without GOAWAY after {sent} bombs: {seen:?}"
    );
    assert!(sent < 5000, "never closed in {sent} bombs: {seen:?}");
    legit_rls(&drl, 20);
}

/// D1: streams to a path the hot path does not serve, left open (no
/// END_STREAM) with data buffered: each is answered at once (a
/// trailers-only UNIMPLEMENTED), not left waiting for the rest.
#[test]
fn unknown_grpc_paths_are_answered_without_waiting_for_the_body() {
    let drl = Drl::start(YAML);
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut raw = Raw::connect(drl.grpc);
        let head = h2raw::grpc_head("/x.Y/Z");
        let mut out = Vec::new();
        for s in 0..100u32 {
            let id = 2 * s + 1;
            h2raw::frame(&mut out, kind::HEADERS, flag::END_HEADERS, id, &head);
            // 100 x 512 bytes: within the connection's first window.
            h2raw::frame(&mut out, kind::DATA, 0, id, &[0u8; 512]);
        }
        assert!(raw.send(&out));
        conns.push(raw);
    }
    for raw in &conns {
        let seen = raw.wait("100 answers", |s| {
            s.headers.iter().filter(|(_, end)| *end).count() >= 100 || s.closed
        });
        let answered = seen.headers.iter().filter(|(_, end)| *end).count();
        assert_eq!(answered, 100, "{seen:?}");
    }
    legit_rls(&drl, 20);
}

/// D2: SETTINGS frames of 2,730 entries each while 200 streams are open:
/// every frame is acknowledged and the server keeps answering.
#[test]
fn large_settings_frames_with_open_streams_are_applied_and_acknowledged() {
    let drl = Drl::start(YAML);
    let mut raw = Raw::connect(drl.grpc);
    let head = h2raw::grpc_head(RLS);
    let mut out = Vec::new();
    for s in 0..200u32 {
        h2raw::frame(&mut out, kind::HEADERS, flag::END_HEADERS, 2 * s + 1, &head);
    }
    assert!(raw.send(&out));
    let mut settings = Vec::new();
    for i in 0..2730u32 {
        settings.extend_from_slice(&4u16.to_be_bytes()); // INITIAL_WINDOW_SIZE
        settings.extend_from_slice(&(65_535 + i % 2).to_be_bytes());
    }
    const FRAMES: usize = 300;
    for _ in 0..FRAMES {
        let mut f = Vec::new();
        h2raw::frame(&mut f, kind::SETTINGS, 0, 0, &settings);
        assert!(raw.send(&f), "the server closed the connection");
    }
    let mut ping = Vec::new();
    h2raw::frame(&mut ping, kind::PING, 0, 0, &[7u8; 8]);
    assert!(raw.send(&ping));
    let seen = raw.wait("the PING answered", |s| s.ping_acks >= 1 || s.closed);
    // The first ack is for the preface's SETTINGS.
    assert_eq!(seen.settings_acks, FRAMES + 1, "{seen:?}");
    legit_rls(&drl, 20);
}

/// D4: PINGs on connections that never read their answers: the server
/// stops reading a connection whose acknowledgements wait to be written,
/// so its memory stays bounded (a hand-written engine queued up to 1 MiB
/// per connection: +114 MB for 100 connections).
#[test]
fn ping_floods_that_never_read_stay_bounded() {
    let drl = Drl::start(YAML);
    let before = rss_kib(drl.child.id());
    let mut pings = Vec::new();
    for _ in 0..4096 {
        h2raw::frame(&mut pings, kind::PING, 0, 0, &[1u8; 8]);
    }
    let pings = Arc::new(pings);
    let writers: Vec<_> = (0..100)
        .map(|_| {
            let mut tcp = Raw::connect_deaf(drl.grpc);
            let pings = pings.clone();
            std::thread::spawn(move || {
                // 68 KB a write, up to 68 MB: until the server stops
                // reading (a write stalls) or closes the connection.
                h2raw::write_until_blocked(&mut tcp, &pings, 1000, Duration::from_secs(2));
                tcp
            })
        })
        .collect();
    let held: Vec<TcpStream> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let after = rss_kib(drl.child.id());
    let grown = after.saturating_sub(before);
    assert!(
        grown < 48 * 1024,
        "100 PING floods grew the server by {grown} KiB ({before} -> {after})"
    );
    legit_rls(&drl, 20);
    drop(held);
}

/// D3: one HTTP/1.1 connection pipelining valid 10,000-item batches
/// without pause, and one gRPC connection sending them as fast as it can:
/// every legitimate call on fresh connections is answered meanwhile.
#[test]
fn one_busy_connection_does_not_starve_the_listener() {
    let drl = Drl::start(YAML);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let hammer = {
        let (addr, stop, done) = (drl.http, stop.clone(), done.clone());
        std::thread::spawn(move || {
            let items: Vec<String> = (0..10_000)
                .map(|i| format!(r#"{{"limit":"api","key":"h{i}"}}"#))
                .collect();
            let body = format!(r#"{{"requests":[{}]}}"#, items.join(","));
            let one = format!(
                "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let batch = one.repeat(4);
            let mut s = TcpStream::connect(addr).expect("connect");
            let mut rd = s.try_clone().unwrap();
            // A reader drains the answers so that the writer never blocks
            // on a full socket: the server sees input without pause.
            let reader = std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                while let Ok(n) = rd.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
            });
            while !stop.load(Ordering::Relaxed) {
                if s.write_all(batch.as_bytes()).is_err() {
                    break;
                }
                done.fetch_add(4, Ordering::Relaxed);
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
            let _ = reader.join();
        })
    };
    wait_for("the hammer to be under way", || {
        done.load(Ordering::Relaxed) >= 8
    });
    legit_http(&drl, 30);
    legit_rls(&drl, 30);
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
}

/// The resident set of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

#[test]
fn the_removed_engines_are_refused_with_a_reason() {
    for (key, ok) in [("grpc_engine", "h2"), ("http_engine", "hyper")] {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, format!("server:\n  {key}: fast\n")).unwrap();
        let (passed, out) = common::config_check(&bad);
        assert!(!passed, "{out}");
        assert!(out.contains("was removed") && out.contains(ok), "{out}");
        let good = dir.path().join("good.yaml");
        std::fs::write(&good, format!("server:\n  {key}: {ok}\n")).unwrap();
        let (passed, out) = common::config_check(&good);
        assert!(passed, "{out}");
    }
}

/// D5: empty DATA frames on an open stream, without end (1.19 billion in
/// 10 s on a hand-written engine): the sender is closed with
/// ENHANCE_YOUR_CALM before the millionth.
#[test]
fn empty_data_frames_are_closed_with_enhance_your_calm() {
    let drl = Drl::start(YAML);
    let mut raw = Raw::connect(drl.grpc);
    let mut out = Vec::new();
    h2raw::frame(
        &mut out,
        kind::HEADERS,
        flag::END_HEADERS,
        1,
        &h2raw::grpc_head(RLS),
    );
    assert!(raw.send(&out));
    let mut empties = Vec::new();
    for _ in 0..10_000 {
        h2raw::frame(&mut empties, kind::DATA, 0, 1, &[]);
    }
    let mut rounds = 0;
    while rounds < 100 && raw.send(&empties) && !raw.seen().closed {
        rounds += 1;
    }
    let seen = raw.wait("closed", |s| s.closed);
    assert_eq!(seen.goaway, Some(ENHANCE_YOUR_CALM), "{seen:?}");
    assert!(rounds < 100, "{rounds} rounds of 10,000 empty frames");
    legit_rls(&drl, 20);
}
