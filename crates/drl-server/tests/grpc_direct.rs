//! The gRPC listener on h2 directly (`grpc::direct` + `grpc::hot`) answers
//! as the tonic stack it replaced, byte for byte: both are started on real
//! loopback sockets over one engine (the old one is `conn::serve` with
//! `GrpcGuard` over hyper, exactly as the listener was wired before), the
//! same request bytes go to both through an h2 client, and the answers
//! (status, headers but `date`, body bytes, trailers) must be equal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use drl_api::pb::rate_limiter_server::RateLimiterServer;
use drl_api::pb::{CheckItem, CheckRequest};
use drl_server::auth::Auth;
use drl_server::conn::{self, ConnLimits, Registry};
use drl_server::grpc::hot::{CHECK_PATH, HotPath, RLS_PATH};
use drl_server::grpc::native::NativeService;
use drl_server::grpc::rls::RlsService;
use drl_server::guard::GrpcGuard;
use drl_server::tls::TlsSlot;
use drl_service::engine::Engine;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use proptest::prelude::*;
use prost::Message as _;
use tokio::sync::watch;

/// Deterministic answers whatever the clock: `unlimited` rules, paths
/// without a rule, and errors (the reset time of a limited rule moves).
const CONFIG: &str = r#"
limits:
  - name: api
    quota: 100/s
envoy:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {unlimited: true}
      - key: b
        value: x
        rate_limit: {unlimited: true}
        descriptors:
          - key: c
            rate_limit: {unlimited: true}
"#;

/// The largest request message both stacks accept here.
const MAX: usize = 64 * 1024;

struct Pair {
    tonic: SocketAddr,
    direct: SocketAddr,
    _stop: watch::Sender<bool>,
}

fn limits() -> ConnLimits {
    ConnLimits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_concurrent_streams: 100,
    }
}

async fn start(timeout: Duration) -> Pair {
    start_with(timeout, limits()).await
}

async fn start_with(timeout: Duration, limits: ConnLimits) -> Pair {
    let cfg = drl_config::parse(CONFIG, "<test>").unwrap();
    let engine = Arc::new(Engine::new(&cfg, None).unwrap());
    let guard = {
        let native = RateLimiterServer::new(NativeService::new(engine.clone()))
            .max_decoding_message_size(MAX);
        let rls = RateLimitServiceServer::new(RlsService::new(engine.clone()))
            .max_decoding_message_size(MAX);
        GrpcGuard {
            routes: tonic::service::Routes::new(native)
                .add_service(rls)
                .prepare(),
            auth: Auth::default(),
            timeout,
        }
    };
    let (stop, rx) = watch::channel(false);
    let l1 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l2 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tonic, direct) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
    let hot = Arc::new(HotPath::new(engine, guard.clone(), MAX));
    tokio::spawn(conn::serve(
        l1,
        TlsSlot::default(),
        guard,
        limits,
        true,
        Registry::new("grpc"),
        rx.clone(),
    ));
    tokio::spawn(conn::serve_grpc_direct(
        l2,
        TlsSlot::default(),
        hot,
        limits,
        Registry::new("grpc"),
        rx,
    ));
    Pair {
        tonic,
        direct,
        _stop: stop,
    }
}

/// One answer, as the client saw it.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
}

impl Answer {
    /// `grpc-status`, from the trailers or a trailers-only head.
    fn grpc_status(&self) -> Option<&str> {
        self.trailers
            .iter()
            .chain(&self.headers)
            .find(|(k, _)| k == "grpc-status")
            .map(|(_, v)| v.as_str())
    }
}

fn pairs(h: &http::HeaderMap) -> Vec<(String, String)> {
    let mut v: Vec<_> = h
        .iter()
        .filter(|(k, _)| *k != "date")
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Sends `body` to `path` on `addr` (ending the stream unless `open`).
async fn call(addr: SocketAddr, path: &str, body: &[u8], open: bool) -> Answer {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    // A server that answers from the headers alone (an unknown path) may
    // have ended the stream before the body goes out: a race, not a
    // verdict (InactiveStreamId). The answer below is the verdict.
    let _ = send.send_data(Bytes::copy_from_slice(body), !open);
    let resp = tokio::time::timeout(Duration::from_secs(30), resp)
        .await
        .expect("an answer within 30 s (a hang guard)")
        .unwrap();
    let (head, mut rbody) = resp.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = rbody.data().await {
        let chunk = chunk.unwrap();
        let _ = rbody.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = rbody.trailers().await.unwrap().unwrap_or_default();
    drop(send);
    Answer {
        status: head.status.as_u16(),
        headers: pairs(&head.headers),
        body: data,
        trailers: pairs(&trailers),
    }
}

fn framed(msg: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

fn rls(domain: &str, descs: &[&[(&str, &str)]], hits: u32) -> Vec<u8> {
    drl_test_kit::envoy::request(domain, descs, hits).encode_to_vec()
}

/// Asks both stacks; they must agree; returns the answer. One deliberate
/// difference: a message that does not decode is `INVALID_ARGUMENT` (3)
/// on the direct stack, where tonic-prost answers `INTERNAL` (13).
async fn both(p: &Pair, path: &str, body: &[u8]) -> Answer {
    let mut t = call(p.tonic, path, body, false).await;
    let d = call(p.direct, path, body, false).await;
    let decode_error = t
        .headers
        .iter()
        .any(|(k, v)| k == "grpc-message" && v.starts_with("failed%20to%20decode"));
    if decode_error {
        for (k, v) in &mut t.headers {
            if k == "grpc-status" && v == "13" {
                *v = "3".into();
            }
        }
    }
    assert_eq!(d, t, "direct (left) and tonic (right) differ for {body:?}");
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_answer_as_tonic_does() {
    let p = start(Duration::ZERO).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    // A well-formed call first: the comparison is not of two failures.
    let a = both(&p, RLS_PATH, &ok).await;
    assert_eq!(a.grpc_status(), Some("0"), "{a:?}");
    assert!(a.body.len() > 5, "{a:?}");
    let mut compressed = ok.clone();
    compressed[0] = 1;
    let mut bad_flag = ok.clone();
    bad_flag[0] = 7;
    let mut over = vec![0];
    over.extend_from_slice(&(MAX as u32 + 1).to_be_bytes());
    over.extend_from_slice(&[0; 16]);
    let truncated = &ok[..ok.len() - 2];
    let garbage = framed(&[0xff, 0xff, 0xff]);
    let cases: [(&str, &[u8], &str); 7] = [
        ("short prefix", &ok[..3], "13"),
        ("empty body", &[], "13"),
        ("compressed flag", &compressed, "13"),
        ("invalid flag", &bad_flag, "13"),
        ("over the max message size", &over, "11"),
        ("truncated body", truncated, "13"),
        // The client's fault: INVALID_ARGUMENT (tonic-prost: INTERNAL).
        ("not protobuf", &garbage, "3"),
    ];
    for (what, body, code) in cases {
        let a = both(&p, RLS_PATH, body).await;
        assert_eq!(a.grpc_status(), Some(code), "{what}: {a:?}");
        let c = both(&p, CHECK_PATH, body).await;
        assert_eq!(c.grpc_status(), Some(code), "{what} (Check): {c:?}");
    }
    // Two messages in a unary call: the first one is the request.
    let mut two = ok.clone();
    two.extend_from_slice(&ok);
    assert_eq!(both(&p, RLS_PATH, &two).await.grpc_status(), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_unimplemented_and_errors_keep_their_codes() {
    let p = start(Duration::ZERO).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    for path in [
        "/nope",
        "/drl.v1.RateLimiter/Nope",
        "/grpc.health.v1.Health/Check",
    ] {
        let a = both(&p, path, &ok).await;
        assert_eq!(a.grpc_status(), Some("12"), "{path}: {a:?}");
    }
    // Handler errors: the same status codes and messages.
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (RLS_PATH, rls("", &[&[("a", "1")]], 1), "3"),
        (RLS_PATH, rls("d", &[], 1), "3"),
        // An unknown domain limits nothing (envoyproxy/ratelimit's answer).
        (RLS_PATH, rls("nope", &[&[("a", "1")]], 1), "0"),
        (
            CHECK_PATH,
            CheckRequest {
                requests: vec![CheckItem {
                    limit: "nope".into(),
                    key: "k".into(),
                    cost: Some(1),
                    ..Default::default()
                }],
            }
            .encode_to_vec(),
            "5",
        ),
    ];
    // A batch large enough to be decided on its own task.
    let big = CheckRequest {
        requests: (0..600)
            .map(|i| CheckItem {
                limit: if i == 599 { "nope" } else { "api" }.into(),
                key: format!("key-{i}"),
                cost: Some(1),
                ..Default::default()
            })
            .collect(),
    }
    .encode_to_vec();
    assert!(big.len() > 8 * 1024);
    for (path, msg, code) in cases.into_iter().chain([(CHECK_PATH, big, "5")]) {
        let a = both(&p, path, &framed(&msg)).await;
        assert_eq!(a.grpc_status(), Some(code), "{a:?}");
        if code != "0" {
            assert!(a.trailers.is_empty(), "an error is trailers-only: {a:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_ends_meets_the_request_deadline() {
    let p = start(Duration::from_millis(200)).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let t = call(p.tonic, RLS_PATH, &ok, true).await;
    let d = call(p.direct, RLS_PATH, &ok, true).await;
    assert_eq!(d, t);
    assert_eq!(d.grpc_status(), Some("4"), "{d:?}");
}

/// The connection bounds hold on the direct listener: the stream limit is
/// advertised, a connection that never sends a request is closed after the
/// header-read bound, and one that goes idle after the idle bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_bounds_hold_on_the_direct_listener() {
    let p = start_with(
        Duration::ZERO,
        ConnLimits {
            max_connections: 64,
            // Long enough that a loaded machine's client sends its first
            // request within it (at 300 ms one sometimes did not).
            header_read_timeout: Duration::from_millis(2_000),
            idle_timeout: Duration::from_millis(500),
            max_concurrent_streams: 3,
        },
    )
    .await;
    // Silent TCP: closed once the header-read bound passes.
    let mut silent = tokio::net::TcpStream::connect(p.direct).await.unwrap();
    let mut buf = [0u8; 256];
    // The bounds are the server's; 30 s here is a hang guard.
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        use tokio::io::AsyncReadExt as _;
        loop {
            match silent.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a silent connection was not closed in 30 s");
    // An h2 client: the stream limit is advertised; after one call and
    // then nothing, the server ends the connection.
    let tcp = tokio::net::TcpStream::connect(p.direct).await.unwrap();
    let (client, mut conn) = h2::client::handshake(tcp).await.unwrap();
    let mut client = client.ready().await.unwrap();
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{RLS_PATH}", p.direct))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::from(ok), true).unwrap();
    let (resp, ended) = tokio::join!(
        async {
            let r = resp.await.unwrap();
            r.status()
        },
        async {
            tokio::time::timeout(
                Duration::from_secs(30),
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut conn).poll(cx)),
            )
            .await
            .map(|_| conn.max_concurrent_send_streams())
        }
    );
    assert_eq!(resp, 200);
    assert_eq!(
        ended,
        Ok(3),
        "the idle connection was not ended in 30 s, or the stream limit was not 3"
    );
}

fn descriptor() -> impl Strategy<Value = Vec<(String, String)>> {
    let key = prop_oneof![Just("a"), Just("b"), Just("c"), Just("z"), Just("")];
    let value = prop_oneof![
        Just("x".to_string()),
        Just("1".to_string()),
        Just(String::new()),
        "[a-z]{0,3}"
    ];
    prop::collection::vec((key.prop_map(String::from), value), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Arbitrary RLS requests: the direct answer's bytes are tonic's.
    #[test]
    fn rls_answers_equal_tonics(
        domain in prop_oneof![Just("d".to_string()), Just(String::new()), "[a-z]{1,3}"],
        descs in prop::collection::vec(descriptor(), 0..4),
        hits in 0u32..5,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let p = start(Duration::ZERO).await;
            let descs: Vec<Vec<(&str, &str)>> = descs
                .iter()
                .map(|d| d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
                .collect();
            let refs: Vec<&[(&str, &str)]> = descs.iter().map(Vec::as_slice).collect();
            let a = both(&p, RLS_PATH, &framed(&rls(&domain, &refs, hits))).await;
            assert!(a.grpc_status().is_some(), "{a:?}");
        });
    }
}

/// A `Check` answer with the fields that move between two calls on one
/// engine zeroed (the quota is shared; `allowed` and `reason` do not move
/// at these costs).
fn check_answer(a: &Answer) -> (u16, Vec<(String, String)>, String, String) {
    let body = if a.body.len() > 5 {
        let mut r = drl_api::pb::CheckResponse::decode(&a.body[5..]).unwrap();
        for x in &mut r.results {
            x.remaining = 0;
            x.reset_after_ms = 0;
            x.retry_after_ms = x.retry_after_ms.map(|_| 0);
        }
        format!("{r:?}")
    } else {
        String::new()
    };
    (
        a.status,
        a.headers.clone(),
        body,
        format!("{:?}", a.trailers),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Arbitrary `Check` requests, as prost encodes them or with unknown
    /// fields and repeated fields around (read in place by `grpc::wire`),
    /// answer as tonic answers them.
    #[test]
    fn check_answers_equal_tonics(
        items in prop::collection::vec(
            (
                prop_oneof![Just("api"), Just("nope"), Just("")],
                "[a-z]{0,3}",
                prop::option::of(prop_oneof![Just(0u64), Just(1), Just(5), Just(1_000)]),
            ),
            0..4,
        ),
        extra in prop_oneof![
            Just(Vec::new()),
            // An unknown varint field and an unknown string field.
            Just(vec![0x10, 0x05, 0x1a, 0x01, b'x']),
            // A second item whose `limit` repeats (the last one wins).
            Just(vec![0x0a, 0x0a, 0x0a, 0x03, b'x', b'y', b'z', 0x0a, 0x03, b'a', b'p', b'i']),
        ],
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let p = start(Duration::ZERO).await;
            let mut msg = CheckRequest {
                requests: items
                    .iter()
                    .map(|(l, k, c)| CheckItem { limit: l.to_string(), key: k.clone(), cost: *c, ..Default::default() })
                    .collect(),
            }
            .encode_to_vec();
            msg.extend_from_slice(&extra);
            let body = framed(&msg);
            let t = call(p.tonic, CHECK_PATH, &body, false).await;
            let d = call(p.direct, CHECK_PATH, &body, false).await;
            assert!(t.grpc_status().is_some(), "{t:?}");
            assert_eq!(check_answer(&d), check_answer(&t), "{msg:?}");
        });
    }
}
