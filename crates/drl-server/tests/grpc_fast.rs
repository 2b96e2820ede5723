//! The gRPC listener on the hand-written HTTP/2 server (`h2fast`,
//! `server.grpc_engine: fast`) against the `h2` engine it replaces
//! (`grpc_engine: h2`, `grpc::direct`): two listeners started as the
//! listener starts them, each over its own engine of one config, the same
//! requests to both (through an `h2` client and through tonic's generated
//! clients), the same decoded answers for every outcome. Then the protocol
//! itself, frame by frame over a raw TCP stream: concurrency, CONTINUATION,
//! padding, PING, flow control both ways, resets, GOAWAY, the stream cap,
//! and malformed input (every read bounded by a timeout: no test can hang).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use drl_server::auth::Auth;
use drl_server::conn::{self, ConnLimits, Registry};
use drl_server::engine::Engine;
use drl_server::grpc::hot::{CHECK_PATH, HotPath, RLS_PATH};
use drl_server::grpc::native::NativeService;
use drl_server::grpc::pb::rate_limiter_client::RateLimiterClient;
use drl_server::grpc::pb::rate_limiter_server::RateLimiterServer;
use drl_server::grpc::pb::{CheckItem, CheckRequest, CheckResponse};
use drl_server::grpc::rls::RlsService;
use drl_server::guard::GrpcGuard;
use drl_server::h2fast::frame::{self, Head, flag, kind};
use drl_server::h2fast::hpack;
use drl_server::tls::TlsSlot;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::watch;

const CONFIG: &str = r#"
limits:
  - name: api
    quota: 100/s
envoy:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {unlimited: true}
      - key: tight
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: b
        value: x
        rate_limit: {unlimited: true}
        descriptors:
          - key: c
            rate_limit: {unlimited: true}
"#;

/// The largest request message both engines accept here.
const MAX: usize = 64 * 1024;
/// A token the guarded listeners accept.
const TOKEN: &str = "a-token-long-enough-for-the-check";

/// Every read of a test is bounded by this.
const WAIT: Duration = Duration::from_secs(10);

struct Pair {
    h2: SocketAddr,
    fast: SocketAddr,
    _stop: watch::Sender<bool>,
    _tokens: Option<tempfile::NamedTempFile>,
}

fn limits() -> ConnLimits {
    ConnLimits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_concurrent_streams: 100,
    }
}

struct Opts {
    timeout: Duration,
    limits: ConnLimits,
    tokens: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            timeout: Duration::ZERO,
            limits: limits(),
            tokens: false,
        }
    }
}

fn hot(timeout: Duration, auth: &Auth) -> Arc<HotPath> {
    let cfg = drl_server::config::parse(CONFIG, "<test>").unwrap();
    let engine = Arc::new(Engine::new(&cfg, None).unwrap());
    let native =
        RateLimiterServer::new(NativeService::new(engine.clone())).max_decoding_message_size(MAX);
    let rls =
        RateLimitServiceServer::new(RlsService::new(engine.clone())).max_decoding_message_size(MAX);
    let guard = GrpcGuard {
        routes: tonic::service::Routes::new(native)
            .add_service(rls)
            .prepare(),
        auth: auth.clone(),
        timeout,
    };
    Arc::new(HotPath::new(engine, guard, MAX))
}

async fn start(o: Opts) -> Pair {
    let auth = Auth::default();
    let tokens = o.tokens.then(|| {
        use std::io::Write as _;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "{TOKEN}").unwrap();
        let cfg = drl_server::auth::AuthConfig {
            tokens_file: Some(f.path().to_path_buf()),
            metrics_tokens_file: None,
        };
        auth.set(drl_server::auth::prepare(&cfg).unwrap());
        f
    });
    let (stop, rx) = watch::channel(false);
    let l1 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let l2 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (h2, fast) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
    tokio::spawn(conn::serve_grpc_direct(
        l1,
        TlsSlot::default(),
        hot(o.timeout, &auth),
        o.limits,
        Registry::new("grpc"),
        rx.clone(),
    ));
    tokio::spawn(conn::serve_grpc_fast(
        l2,
        TlsSlot::default(),
        hot(o.timeout, &auth),
        o.limits,
        Registry::new("grpc"),
        rx,
    ));
    Pair {
        h2,
        fast,
        _stop: stop,
        _tokens: tokens,
    }
}

/// One answer, as the client saw it, with the time-dependent fields of
/// the message zeroed.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
}

impl Answer {
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

/// The message of a response body with its clock-dependent fields zeroed.
fn normalize(path: &str, body: &[u8]) -> Vec<u8> {
    if body.len() < 5 {
        return body.to_vec();
    }
    let msg = &body[5..];
    let mut out = body[..5].to_vec();
    if path == RLS_PATH {
        let Ok(mut r) = RateLimitResponse::decode(msg) else {
            return body.to_vec();
        };
        for s in &mut r.statuses {
            s.duration_until_reset = None;
        }
        out.extend_from_slice(&r.encode_to_vec());
    } else {
        let Ok(mut r) = CheckResponse::decode(msg) else {
            return body.to_vec();
        };
        for s in &mut r.results {
            s.retry_after_ms = s.retry_after_ms.map(|_| 0);
            s.reset_after_ms = 0;
            s.delay_ms = 0;
        }
        out.extend_from_slice(&r.encode_to_vec());
    }
    out
}

/// Sends `body` to `path` on `addr` through an h2 client, with `extra`
/// headers (ending the stream unless `open`).
async fn call(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    extra: &[(&str, &str)],
    open: bool,
) -> Answer {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let (resp, mut send) = client.send_request(req.body(()).unwrap(), false).unwrap();
    // An early answer (a refused token) may end the stream first.
    let _ = send.send_data(Bytes::copy_from_slice(body), !open);
    let resp = tokio::time::timeout(WAIT, resp)
        .await
        .expect("an answer in time")
        .unwrap();
    let (head, mut rbody) = resp.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = tokio::time::timeout(WAIT, rbody.data()).await.unwrap() {
        let chunk = chunk.unwrap();
        let _ = rbody.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = tokio::time::timeout(WAIT, rbody.trailers())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default();
    drop(send);
    Answer {
        status: head.status.as_u16(),
        headers: pairs(&head.headers),
        body: normalize(path, &data),
        trailers: pairs(&trailers),
    }
}

fn framed(msg: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

fn rls_req(domain: &str, descs: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descs
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: hits,
    }
}

fn rls(domain: &str, descs: &[&[(&str, &str)]], hits: u32) -> Vec<u8> {
    rls_req(domain, descs, hits).encode_to_vec()
}

fn check_req(items: &[(&str, &str, u64)]) -> CheckRequest {
    CheckRequest {
        requests: items
            .iter()
            .map(|(l, k, c)| CheckItem {
                limit: l.to_string(),
                key: k.to_string(),
                cost: Some(*c),
            })
            .collect(),
    }
}

fn check(items: &[(&str, &str, u64)]) -> Vec<u8> {
    check_req(items).encode_to_vec()
}

/// Asks both engines; they must agree; returns the answer.
async fn both(p: &Pair, path: &str, body: &[u8], extra: &[(&str, &str)]) -> Answer {
    let h = call(p.h2, path, body, extra, false).await;
    let f = call(p.fast, path, body, extra, false).await;
    assert_eq!(f, h, "fast (left) and h2 (right) differ on {path} {body:?}");
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_answers_as_the_h2_engine() {
    let p = start(Opts::default()).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let a = both(&p, RLS_PATH, &ok, &[]).await;
    assert_eq!(a.grpc_status(), Some("0"), "{a:?}");
    assert!(a.body.len() > 5, "{a:?}");
    // Admitted and denied, both APIs.
    let denied = framed(&rls("d", &[&[("tight", "k")]], 5));
    let d = both(&p, RLS_PATH, &denied, &[]).await;
    let r = RateLimitResponse::decode(&d.body[5..]).unwrap();
    assert_eq!(r.overall_code, 2, "OVER_LIMIT: {r:?}");
    let c = both(&p, CHECK_PATH, &framed(&check(&[("api", "k", 1)])), &[]).await;
    let r = CheckResponse::decode(&c.body[5..]).unwrap();
    assert!(r.results[0].allowed, "{r:?}");
    let c = both(
        &p,
        CHECK_PATH,
        &framed(&check(&[("api", "deny", 1000)])),
        &[],
    )
    .await;
    let r = CheckResponse::decode(&c.body[5..]).unwrap();
    assert!(!r.results[0].allowed, "{r:?}");
    // Unknown fields (a varint and a string) around the items: skipped,
    // on the path that answers without a future as on the other.
    let mut odd = check(&[("api", "k", 1), ("api", "j", 2)]);
    odd.extend_from_slice(&[0x10, 0x05, 0x1a, 0x01, b'x']);
    let c = both(&p, CHECK_PATH, &framed(&odd), &[]).await;
    let r = CheckResponse::decode(&c.body[5..]).unwrap();
    assert_eq!(r.results.len(), 2, "{r:?}");
    assert!(r.results.iter().all(|x| x.allowed), "{r:?}");
    // Malformed messages.
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
        ("not protobuf", &garbage, "13"),
    ];
    for (what, body, code) in cases {
        let a = both(&p, RLS_PATH, body, &[]).await;
        assert_eq!(a.grpc_status(), Some(code), "{what}: {a:?}");
        let c = both(&p, CHECK_PATH, body, &[]).await;
        assert_eq!(c.grpc_status(), Some(code), "{what} (Check): {c:?}");
    }
    // Unknown limit and domain, bad requests.
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (RLS_PATH, rls("", &[&[("a", "1")]], 1), "3"),
        (RLS_PATH, rls("d", &[], 1), "3"),
        (RLS_PATH, rls("nope", &[&[("a", "1")]], 1), "5"),
        (CHECK_PATH, check(&[("nope", "k", 1)]), "5"),
        (
            CHECK_PATH,
            check(
                &(0..600)
                    .map(|i| (if i == 599 { "nope" } else { "api" }, "k", 1))
                    .collect::<Vec<_>>(),
            ),
            "5",
        ),
    ];
    for (path, msg, code) in cases {
        let a = both(&p, path, &framed(&msg), &[]).await;
        assert_eq!(a.grpc_status(), Some(code), "{a:?}");
        assert!(a.trailers.is_empty(), "an error is trailers-only: {a:?}");
    }
    // A compressed request: UNIMPLEMENTED, with tonic's message.
    let a = both(&p, RLS_PATH, &ok, &[("grpc-encoding", "gzip")]).await;
    assert_eq!(a.grpc_status(), Some("12"), "{a:?}");
    assert_eq!(
        both(&p, RLS_PATH, &ok, &[("grpc-encoding", "identity")])
            .await
            .grpc_status(),
        Some("0")
    );
    // Unknown paths go to tonic's routes.
    for path in [
        "/nope",
        "/drl.v1.RateLimiter/Nope",
        "/grpc.health.v1.Health/Check",
    ] {
        let a = both(&p, path, &ok, &[]).await;
        assert_eq!(a.grpc_status(), Some("12"), "{path}: {a:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_as_the_h2_engine_checks_them() {
    let p = start(Opts {
        tokens: true,
        ..Opts::default()
    })
    .await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let good = format!("Bearer {TOKEN}");
    for (path, body) in [
        (RLS_PATH, ok.clone()),
        (CHECK_PATH, framed(&check(&[("api", "k", 1)]))),
    ] {
        let none = both(&p, path, &body, &[]).await;
        assert_eq!(none.grpc_status(), Some("16"), "{none:?}");
        let wrong = both(
            &p,
            path,
            &body,
            &[("authorization", "Bearer nope-nope-nope-nope")],
        )
        .await;
        assert_eq!(wrong.grpc_status(), Some("16"), "{wrong:?}");
        let right = both(&p, path, &body, &[("authorization", &good)]).await;
        assert_eq!(right.grpc_status(), Some("0"), "{right:?}");
    }
    // The fallback checks the token too.
    let a = both(&p, "/nope", &ok, &[]).await;
    assert_eq!(a.grpc_status(), Some("16"), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_ends_meets_the_request_deadline() {
    let p = start(Opts {
        timeout: Duration::from_millis(200),
        ..Opts::default()
    })
    .await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let h = call(p.h2, RLS_PATH, &ok, &[], true).await;
    let f = call(p.fast, RLS_PATH, &ok, &[], true).await;
    assert_eq!(f, h);
    assert_eq!(f.grpc_status(), Some("4"), "{f:?}");
}

/// A call answered at once is decided at the stamp of the read that
/// completed it, converted to wall-clock time (`drl_server::wall`): a
/// one-second fixed window's reset lands on a whole second of the system
/// clock, at a request time between the client's readings before and after
/// the call. (A decision on any other time scale, or a wrong offset, would
/// put the window's end at a random phase.) The `h2` engine, which reads
/// the clock itself, is held to the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_calls_are_decided_at_wall_clock_time() {
    let p = start(Opts::default()).await;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    const SECOND: u64 = 1_000_000_000;
    // Timing slack: a millisecond either side.
    const SLACK: u64 = 1_000_000;
    for (name, addr) in [("fast", p.fast), ("h2", p.h2)] {
        let ch = tonic::transport::Endpoint::new(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = RateLimitServiceClient::new(ch);
        for i in 0..5 {
            let value = format!("{name}-{i}");
            let before = wall();
            let r = client
                .should_rate_limit(rls_req("d", &[&[("tight", &value)]], 1))
                .await
                .unwrap()
                .into_inner();
            let after = wall();
            let d = r.statuses[0].duration_until_reset.unwrap();
            let reset = d.seconds as u64 * SECOND + d.nanos as u64;
            assert!(reset > 0 && reset <= SECOND, "{name}: reset {reset}");
            // The request's time t is in [before, after] and t + reset is
            // the end of t's window, a whole second.
            let end = (before - SLACK + reset).div_ceil(SECOND) * SECOND;
            assert!(
                end <= after + SLACK + reset,
                "{name}: window end {end} - reset {reset} = {} is not in [{before}, {after}]",
                end - reset
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_clients_see_the_same_answers() {
    let p = start(Opts::default()).await;
    let mut answers = Vec::new();
    for addr in [p.h2, p.fast] {
        let ch = tonic::transport::Endpoint::new(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut rls_client = RateLimitServiceClient::new(ch.clone());
        let mut native = RateLimiterClient::new(ch);
        let mut got = Vec::new();
        for req in [
            rls_req("d", &[&[("a", "1")]], 1),
            rls_req("d", &[&[("tight", "t")]], 3),
            rls_req("nope", &[&[("a", "1")]], 1),
            rls_req("", &[], 1),
        ] {
            let r = rls_client.should_rate_limit(req).await;
            got.push(match r {
                Ok(r) => {
                    let mut m = r.into_inner();
                    for s in &mut m.statuses {
                        s.duration_until_reset = None;
                    }
                    format!("ok {m:?}")
                }
                Err(s) => format!("err {:?} {}", s.code(), s.message()),
            });
        }
        for req in [
            check_req(&[("api", "k", 1)]),
            check_req(&[("api", "deny", 1000), ("api", "j", 2)]),
            check_req(&[("nope", "k", 1)]),
        ] {
            let r = native.check(req).await;
            got.push(match r {
                Ok(r) => {
                    let mut m = r.into_inner();
                    for s in &mut m.results {
                        s.retry_after_ms = s.retry_after_ms.map(|_| 0);
                        s.reset_after_ms = 0;
                    }
                    format!("ok {m:?}")
                }
                Err(s) => format!("err {:?} {}", s.code(), s.message()),
            });
        }
        answers.push(got);
    }
    assert!(answers[0][0].starts_with("ok"), "{:?}", answers[0]);
    assert!(
        answers[0][2].starts_with("err NotFound"),
        "{:?}",
        answers[0]
    );
    assert_eq!(answers[1], answers[0]);
}

// ---------------------------------------------------------------------
// Raw frames.

/// A raw HTTP/2 client: frames in, frames out, every read bounded.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
    hpack: hpack::Decoder,
}

/// A frame as received.
#[derive(Debug)]
struct Frame {
    head: Head,
    payload: Vec<u8>,
}

impl Raw {
    /// Connects, sends the preface and SETTINGS `settings`, and reads the
    /// server's SETTINGS.
    async fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut r = Raw {
            tcp,
            buf: Vec::new(),
            hpack: hpack::Decoder::new(4096),
        };
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, settings);
        r.send(&out).await;
        let f = r.next().await.expect("the server's SETTINGS");
        assert_eq!(f.head.kind, kind::SETTINGS);
        r
    }

    async fn send(&mut self, b: &[u8]) {
        self.tcp.write_all(b).await.unwrap();
    }

    /// The next frame, or `None` once the server closed the connection.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(h) = Head::parse(&self.buf)
                && self.buf.len() >= frame::HEADER_LEN + h.len
            {
                let payload = self.buf[frame::HEADER_LEN..frame::HEADER_LEN + h.len].to_vec();
                self.buf.drain(..frame::HEADER_LEN + h.len);
                return Some(Frame { head: h, payload });
            }
            let mut chunk = [0u8; 16384];
            let n = tokio::time::timeout(WAIT, self.tcp.read(&mut chunk))
                .await
                .expect("the server neither answered nor closed in time");
            match n {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next frame that is not SETTINGS, a SETTINGS ack or a
    /// connection WINDOW_UPDATE.
    async fn next_stream_frame(&mut self) -> Option<Frame> {
        loop {
            let f = self.next().await?;
            let conn_level =
                matches!(f.head.kind, kind::SETTINGS | kind::WINDOW_UPDATE) && f.head.stream == 0;
            if !conn_level {
                return Some(f);
            }
        }
    }

    /// Reads until the server closes; returns the GOAWAY code it sent.
    async fn goaway(&mut self) -> Option<u32> {
        let mut code = None;
        while let Some(f) = self.next().await {
            if f.head.kind == kind::GOAWAY {
                code = Some(u32::from_be_bytes(f.payload[4..8].try_into().unwrap()));
            }
        }
        code
    }

    /// Decodes a header block into (name, value) pairs.
    fn fields(&mut self, block: &[u8]) -> Vec<(String, String)> {
        let mut f = hpack::Fields::default();
        self.hpack.decode(block, &mut f, 1 << 20).unwrap();
        f.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    /// Reads one whole response of `stream`: head fields, body, trailer
    /// fields. Frames of other streams are not expected.
    async fn response(
        &mut self,
        stream: u32,
    ) -> (Vec<(String, String)>, Vec<u8>, Vec<(String, String)>) {
        let mut head = None;
        let mut body = Vec::new();
        loop {
            let f = self.next_stream_frame().await.expect("a response");
            assert_eq!(f.head.stream, stream, "{f:?}");
            match f.head.kind {
                kind::HEADERS => {
                    assert!(f.head.has(flag::END_HEADERS));
                    let fields = self.fields(&f.payload);
                    match head.take() {
                        None if f.head.has(flag::END_STREAM) => {
                            return (fields, body, Vec::new());
                        }
                        None => head = Some(fields),
                        Some(h) => {
                            assert!(f.head.has(flag::END_STREAM));
                            return (h, body, fields);
                        }
                    }
                }
                kind::DATA => body.extend_from_slice(&f.payload),
                other => panic!("unexpected frame type {other}: {f:?}"),
            }
        }
    }
}

/// A request head block for `path`.
fn head_block(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.push(0x83); // :method POST
    b.push(0x86); // :scheme http
    hpack::put_integer(&mut b, 0x00, 4, 4); // :path, literal value
    hpack::put_string(&mut b, path.as_bytes());
    hpack::put_integer(&mut b, 0x00, 4, 1); // :authority
    hpack::put_string(&mut b, addr.to_string().as_bytes());
    hpack::put_literal(&mut b, b"content-type", b"application/grpc");
    hpack::put_literal(&mut b, b"te", b"trailers");
    b
}

/// HEADERS + one DATA frame: a whole unary request.
fn request(out: &mut Vec<u8>, addr: SocketAddr, stream: u32, path: &str, body: &[u8]) {
    frame::put_headers(out, stream, &head_block(addr, path), false, 16384);
    frame::put_data(out, stream, body, true);
}

fn status_of(fields: &[(String, String)]) -> Option<&str> {
    fields
        .iter()
        .find(|(k, _)| k == "grpc-status")
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_on_one_connection() {
    let p = start(Opts::default()).await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let mut out = Vec::new();
    // All heads first, then all bodies: 50 streams open at once.
    for i in 0..50u32 {
        frame::put_headers(
            &mut out,
            2 * i + 1,
            &head_block(p.fast, RLS_PATH),
            false,
            16384,
        );
    }
    for i in 0..50u32 {
        frame::put_data(&mut out, 2 * i + 1, &ok, true);
    }
    raw.send(&out).await;
    let mut done = std::collections::BTreeMap::new();
    while done.len() < 50 {
        let f = raw.next_stream_frame().await.expect("all answers");
        if f.head.kind == kind::HEADERS && f.head.has(flag::END_STREAM) {
            let fields = raw.fields(&f.payload);
            done.insert(f.head.stream, status_of(&fields).map(str::to_string));
        } else if f.head.kind == kind::HEADERS {
            raw.fields(&f.payload);
        }
    }
    assert_eq!(
        done.keys().copied().collect::<Vec<_>>(),
        (0..50).map(|i| 2 * i + 1).collect::<Vec<_>>()
    );
    assert!(done.values().all(|s| s.as_deref() == Some("0")), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_padding_split_bodies_and_ping() {
    let p = start(Opts::default()).await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    // The head over HEADERS (padded, with a priority) and two
    // CONTINUATIONs; the body one byte per DATA frame, every other one
    // padded.
    let block = head_block(p.fast, RLS_PATH);
    let (a, rest) = block.split_at(3);
    let (b, c) = rest.split_at(rest.len() / 2);
    let mut out = Vec::new();
    let mut payload = vec![4u8]; // pad length
    payload.extend_from_slice(&[0, 0, 0, 0, 16]); // priority: no dependency
    payload.extend_from_slice(a);
    payload.extend_from_slice(&[0; 4]);
    frame::put_head(
        &mut out,
        payload.len(),
        kind::HEADERS,
        flag::PADDED | flag::PRIORITY,
        1,
    );
    out.extend_from_slice(&payload);
    frame::put_head(&mut out, b.len(), kind::CONTINUATION, 0, 1);
    out.extend_from_slice(b);
    frame::put_head(&mut out, c.len(), kind::CONTINUATION, flag::END_HEADERS, 1);
    out.extend_from_slice(c);
    for (i, byte) in ok.iter().enumerate() {
        let end = if i == ok.len() - 1 {
            flag::END_STREAM
        } else {
            0
        };
        if i % 2 == 0 {
            frame::put_head(&mut out, 4, kind::DATA, flag::PADDED | end, 1);
            out.extend_from_slice(&[2, *byte, 0, 0]);
        } else {
            frame::put_head(&mut out, 1, kind::DATA, end, 1);
            out.push(*byte);
        }
    }
    raw.send(&out).await;
    let (head, body, trailers) = raw.response(1).await;
    assert!(head.contains(&(":status".into(), "200".into())), "{head:?}");
    assert!(body.len() > 5);
    assert_eq!(status_of(&trailers), Some("0"));
    // PING: answered with the same payload.
    let mut out = Vec::new();
    frame::put_head(&mut out, 8, kind::PING, 0, 0);
    out.extend_from_slice(b"12345678");
    raw.send(&out).await;
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!((f.head.kind, f.head.flags), (kind::PING, flag::ACK));
    assert_eq!(f.payload, b"12345678");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_response_waits_for_the_window_and_the_frame_size() {
    let p = start(Opts::default()).await;
    // A stream window of 100 bytes; a batch of 3,000 (an answer of about
    // 30 KB).
    let mut raw = Raw::connect(p.fast, &[(frame::setting::INITIAL_WINDOW_SIZE, 100)]).await;
    let items: Vec<(String, u64)> = (0..3000).map(|i| (format!("key-{i}"), 1)).collect();
    let items: Vec<(&str, &str, u64)> =
        items.iter().map(|(k, c)| ("api", k.as_str(), *c)).collect();
    let msg = framed(&check(&items));
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &head_block(p.fast, CHECK_PATH), false, 16384);
    for c in msg.chunks(16384) {
        frame::put_data(&mut out, 1, c, false);
    }
    frame::put_data(&mut out, 1, &[], true);
    raw.send(&out).await;
    // HEADERS, then exactly 100 bytes of DATA, then nothing.
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!(f.head.kind, kind::HEADERS);
    raw.fields(&f.payload);
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!((f.head.kind, f.head.len), (kind::DATA, 100));
    let mut body = f.payload;
    let mut ping = Vec::new();
    frame::put_head(&mut ping, 8, kind::PING, 0, 0);
    ping.extend_from_slice(b"waiting!");
    raw.send(&ping).await;
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!(
        f.head.kind,
        kind::PING,
        "nothing but the PING answer: {f:?}"
    );
    // Open the stream window wide: the rest comes, in frames no larger
    // than 16 KiB.
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 1, 1 << 30);
    raw.send(&wu).await;
    let mut frames = 0;
    let trailers = loop {
        let f = raw.next_stream_frame().await.unwrap();
        match f.head.kind {
            kind::DATA => {
                assert!(f.head.len <= 16384);
                frames += 1;
                body.extend_from_slice(&f.payload);
            }
            kind::HEADERS => break raw.fields(&f.payload),
            _ => panic!("{f:?}"),
        }
    };
    assert_eq!(status_of(&trailers), Some("0"));
    assert!(frames >= 2, "{} bytes in {frames} frames", body.len());
    let r = CheckResponse::decode(&body[5..]).unwrap();
    assert_eq!(r.results.len(), 3000);
    // The connection window (65,535 at first) holds the next answers: four
    // more such streams, their stream windows opened at once.
    let mut left = 65_535 - body.len();
    let mut out = Vec::new();
    for id in [3, 5, 7, 9] {
        frame::put_headers(&mut out, id, &head_block(p.fast, CHECK_PATH), false, 16384);
        frame::put_window_update(&mut out, id, 1 << 30);
        for c in msg.chunks(16384) {
            frame::put_data(&mut out, id, c, false);
        }
        frame::put_data(&mut out, id, &[], true);
    }
    raw.send(&out).await;
    let mut ended = 0;
    while left > 0 {
        let f = raw.next_stream_frame().await.unwrap();
        match f.head.kind {
            kind::DATA => left = left.checked_sub(f.head.len).expect("within the window"),
            kind::HEADERS => {
                let fields = raw.fields(&f.payload);
                ended += usize::from(status_of(&fields).is_some());
            }
            _ => panic!("{f:?}"),
        }
    }
    assert!(
        ended < 4,
        "four answers fit in the connection window: test too small"
    );
    // Until the window opens: response heads (not flow-controlled) maybe,
    // no data.
    raw.send(&ping).await;
    loop {
        let f = raw.next_stream_frame().await.unwrap();
        match f.head.kind {
            kind::PING => break,
            kind::HEADERS => {
                let fields = raw.fields(&f.payload);
                assert_eq!(status_of(&fields), None, "{fields:?}");
            }
            _ => panic!("data past the connection window: {f:?}"),
        }
    }
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 0, 1 << 30);
    raw.send(&wu).await;
    while ended < 4 {
        let f = raw.next_stream_frame().await.unwrap();
        if f.head.kind == kind::HEADERS {
            let fields = raw.fields(&f.payload);
            ended += usize::from(status_of(&fields).is_some());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_goaway_and_the_stream_cap() {
    let p = start(Opts {
        limits: ConnLimits {
            max_concurrent_streams: 2,
            ..limits()
        },
        ..Opts::default()
    })
    .await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    // Two streams open (no body yet), a third is refused.
    let mut out = Vec::new();
    for id in [1, 3, 5] {
        frame::put_headers(&mut out, id, &head_block(p.fast, RLS_PATH), false, 16384);
    }
    raw.send(&out).await;
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!((f.head.kind, f.head.stream), (kind::RST_STREAM, 5));
    assert_eq!(f.payload, 7u32.to_be_bytes(), "REFUSED_STREAM");
    // Stream 1 is reset by the client: it gets no answer; stream 3 does.
    let mut out = Vec::new();
    frame::put_rst(&mut out, 1, frame::Reason::Cancel);
    frame::put_data(&mut out, 3, &ok, true);
    raw.send(&out).await;
    let (_, _, trailers) = raw.response(3).await;
    assert_eq!(status_of(&trailers), Some("0"));
    // Room again: a new stream, then the client's GOAWAY; the stream is
    // answered and then the server closes.
    let mut out = Vec::new();
    frame::put_headers(&mut out, 7, &head_block(p.fast, RLS_PATH), false, 16384);
    frame::put_goaway(&mut out, 0, frame::Reason::NoError);
    frame::put_data(&mut out, 7, &ok, true);
    raw.send(&out).await;
    let (_, _, trailers) = raw.response(7).await;
    assert_eq!(status_of(&trailers), Some("0"));
    assert_eq!(raw.goaway().await, None, "closed without an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_head_is_refused_and_hpack_stays_in_sync() {
    let p = start(Opts::default()).await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    // 17 fields of 1 KiB: over the 16 KiB list limit, split over
    // CONTINUATION; then one small field with incremental indexing, past
    // the limit (decoded, not kept, but in the table all the same).
    let mut block = head_block(p.fast, RLS_PATH);
    for i in 0..17 {
        hpack::put_literal(&mut block, format!("x-big-{i}").as_bytes(), &[b'v'; 1024]);
    }
    block.push(0x40);
    hpack::put_string(&mut block, b"x-small");
    hpack::put_string(&mut block, b"s");
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &block, true, 16384);
    raw.send(&out).await;
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!(f.head.kind, kind::HEADERS);
    assert_eq!(
        raw.fields(&f.payload),
        vec![(":status".to_string(), "431".to_string())]
    );
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!((f.head.kind, f.head.stream), (kind::RST_STREAM, 1));
    // The next request names the small field by its index (62): it
    // decodes, and the request is answered.
    let mut block = head_block(p.fast, RLS_PATH);
    block.push(0xbe);
    let mut out = Vec::new();
    frame::put_headers(&mut out, 3, &block, false, 16384);
    frame::put_data(&mut out, 3, &ok, true);
    raw.send(&out).await;
    let (_, _, trailers) = raw.response(3).await;
    assert_eq!(status_of(&trailers), Some("0"));
}
/// Sends `bytes` after the preface and SETTINGS; returns the GOAWAY code
/// the server closed with.
async fn goaway_after(addr: SocketAddr, bytes: &[u8]) -> Option<u32> {
    let mut raw = Raw::connect(addr, &[]).await;
    raw.send(bytes).await;
    raw.goaway().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_goaway_and_close() {
    let p = start(Opts::default()).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let protocol = Some(1);
    let frame_size = Some(6);
    let mut cases: Vec<(&str, Vec<u8>, Option<u32>)> = Vec::new();
    let mut v = Vec::new();
    frame::put_headers(&mut v, 2, &head_block(p.fast, RLS_PATH), true, 16384);
    cases.push(("even stream id", v, protocol));
    let mut v = Vec::new();
    request(&mut v, p.fast, 5, RLS_PATH, &ok);
    request(&mut v, p.fast, 3, RLS_PATH, &ok);
    cases.push(("decreasing stream id", v, protocol));
    let mut v = Vec::new();
    frame::put_head(&mut v, 20_000, kind::DATA, 0, 1);
    v.extend_from_slice(&[0; 20_000]);
    cases.push(("frame over the max size", v, frame_size));
    let mut v = Vec::new();
    frame::put_window_update(&mut v, 0, 0);
    cases.push(("zero window increment", v, protocol));
    let mut v = Vec::new();
    frame::put_window_update(&mut v, 0, 0x7fff_ffff);
    cases.push(("window overflow", v, Some(3)));
    let mut v = Vec::new();
    frame::put_data(&mut v, 0, b"x", false);
    cases.push(("DATA on stream 0", v, protocol));
    let mut v = Vec::new();
    frame::put_data(&mut v, 9, b"x", false);
    cases.push(("DATA on an idle stream", v, protocol));
    let mut v = Vec::new();
    frame::put_head(&mut v, 3, kind::PING, 0, 0);
    v.extend_from_slice(b"abc");
    cases.push(("short PING", v, frame_size));
    let mut v = Vec::new();
    frame::put_head(&mut v, 5, kind::SETTINGS, 0, 0);
    v.extend_from_slice(&[0; 5]);
    cases.push(("SETTINGS of 5 bytes", v, frame_size));
    let mut v = Vec::new();
    frame::put_headers(
        &mut v,
        1,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        true,
        16384,
    );
    cases.push(("bad HPACK", v, Some(9)));
    let mut v = Vec::new();
    frame::put_head(&mut v, 1, kind::HEADERS, 0, 1);
    v.push(0x83);
    frame::put_ping_ack(&mut v, b"12345678");
    cases.push(("no CONTINUATION after HEADERS", v, protocol));
    let mut v = Vec::new();
    frame::put_head(
        &mut v,
        4,
        kind::HEADERS,
        flag::PADDED | flag::END_HEADERS,
        1,
    );
    v.extend_from_slice(&[9, 0x83, 0x86, 0x84]);
    cases.push(("padding longer than the frame", v, protocol));
    cases.push(("garbage", vec![0x5a; 64], None));
    for (what, bytes, code) in cases {
        let got = tokio::time::timeout(WAIT, goaway_after(p.fast, &bytes))
            .await
            .unwrap_or_else(|_| panic!("{what}: the connection hung"));
        if code.is_some() {
            assert_eq!(got, code, "{what}");
        } else {
            assert!(got.is_some(), "{what}: closed without GOAWAY");
        }
    }
    // A bad preface, and a frame cut short by the client's close: the
    // server closes too.
    for bytes in [b"GET / HTTP/1.1\r\n\r\n".to_vec(), {
        let mut v = frame::PREFACE.to_vec();
        frame::put_settings(&mut v, &[]);
        frame::put_head(&mut v, 100, kind::DATA, 0, 1);
        v.extend_from_slice(&[0; 10]);
        v
    }] {
        let mut tcp = TcpStream::connect(p.fast).await.unwrap();
        tcp.write_all(&bytes).await.unwrap();
        tcp.shutdown().await.unwrap();
        let mut sink = Vec::new();
        let r = tokio::time::timeout(WAIT, tcp.read_to_end(&mut sink)).await;
        assert!(r.is_ok(), "the server did not close");
    }
    // The listener still answers.
    let a = call(p.fast, RLS_PATH, &ok, &[], false).await;
    assert_eq!(a.grpc_status(), Some("0"));
}

#[test]
fn the_engine_is_a_config_value_fast_by_default() {
    use drl_server::config::GrpcEngine;
    let parse = |extra: &str| drl_server::config::parse(&format!("{CONFIG}{extra}"), "<test>");
    assert_eq!(parse("").unwrap().server.grpc_engine, GrpcEngine::Fast);
    let h2 = parse("server:\n  grpc_engine: h2\n").unwrap();
    assert_eq!(h2.server.grpc_engine, GrpcEngine::H2);
    let fast = parse("server:\n  grpc_engine: fast\n").unwrap();
    assert_eq!(fast.server.grpc_engine, GrpcEngine::Fast);
    let e = parse("server:\n  grpc_engine: tonic\n").unwrap_err();
    assert!(
        e.to_string().contains("grpc_engine") || e.to_string().contains("variant"),
        "{e}"
    );
}

/// The connection bounds hold as on the h2 engine: the stream limit is
/// advertised, a connection that never sends a request is closed after the
/// header-read bound, one that goes idle after the idle bound (GOAWAY,
/// then the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_bounds_hold() {
    let p = start(Opts {
        limits: ConnLimits {
            max_connections: 64,
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(500),
            max_concurrent_streams: 3,
        },
        ..Opts::default()
    })
    .await;
    let mut silent = TcpStream::connect(p.fast).await.unwrap();
    let mut sink = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut sink)).await;
    assert!(closed.is_ok(), "a silent connection was not closed in 5 s");
    let tcp = TcpStream::connect(p.fast).await.unwrap();
    let (client, mut conn) = h2::client::handshake(tcp).await.unwrap();
    let mut client = client.ready().await.unwrap();
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{RLS_PATH}", p.fast))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::from(ok), true).unwrap();
    let (resp, ended) = tokio::join!(async { resp.await.unwrap().status() }, async {
        tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut conn).poll(cx)),
        )
        .await
        .map(|_| conn.max_concurrent_send_streams())
    });
    assert_eq!(resp, 200);
    assert_eq!(
        ended,
        Ok(3),
        "not ended in 5 s, or the stream limit was not 3"
    );
}

/// Shutting the listener down: a call in flight (its body still coming)
/// is answered, the connection gets GOAWAY and ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_close_finishes_the_calls_in_flight() {
    let p = start(Opts::default()).await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &head_block(p.fast, RLS_PATH), false, 16384);
    frame::put_data(&mut out, 1, &ok[..3], false);
    raw.send(&out).await;
    // A PING round trip: the stream is open on the server.
    let mut ping = Vec::new();
    frame::put_head(&mut ping, 8, kind::PING, 0, 0);
    ping.extend_from_slice(b"in-fligh");
    raw.send(&ping).await;
    assert_eq!(raw.next_stream_frame().await.unwrap().head.kind, kind::PING);
    p._stop.send(true).unwrap();
    let f = raw.next_stream_frame().await.unwrap();
    assert_eq!(f.head.kind, kind::GOAWAY, "{f:?}");
    assert_eq!(
        &f.payload[..8],
        &[0, 0, 0, 1, 0, 0, 0, 0],
        "last stream 1, NO_ERROR"
    );
    let mut out = Vec::new();
    frame::put_data(&mut out, 1, &ok[3..], true);
    raw.send(&out).await;
    let (_, _, trailers) = raw.response(1).await;
    assert_eq!(status_of(&trailers), Some("0"));
    assert!(raw.next().await.is_none(), "the connection ends");
}

/// The decoder against the `h2` client's own encoder (Huffman-coded
/// strings, its dynamic table): every byte a header value may hold, sent
/// twice (the second time indexed), decodes to what was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_h2_clients_header_blocks_decode() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let printable: Vec<u8> = (0x20..=0x7eu8).chain(0x80..=0xffu8).collect();
    let value = http::HeaderValue::from_bytes(&printable).unwrap();
    let client = tokio::spawn({
        let value = value.clone();
        async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(conn);
            let mut held = Vec::new();
            for _ in 0..2 {
                let req = http::Request::builder()
                    .method("POST")
                    .uri(format!("http://{addr}{RLS_PATH}"))
                    .header("x-every-byte", value.clone())
                    .header("authorization", "Bearer some-token-value")
                    .body(())
                    .unwrap();
                held.push(client.send_request(req, true).unwrap());
            }
            // Kept open until the server side has read both.
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(held);
        }
    });
    let (mut tcp, _) = tokio::time::timeout(WAIT, l.accept())
        .await
        .unwrap()
        .unwrap();
    let mut settings = Vec::new();
    frame::put_settings(&mut settings, &[]);
    tcp.write_all(&settings).await.unwrap();
    let mut raw = Raw {
        tcp,
        buf: Vec::new(),
        hpack: hpack::Decoder::new(4096),
    };
    let mut preface = [0u8; 24];
    tokio::time::timeout(WAIT, raw.tcp.read_exact(&mut preface))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&preface, frame::PREFACE);
    let mut seen = 0;
    while seen < 2 {
        let f = raw.next().await.expect("the client's requests");
        if f.head.kind != kind::HEADERS {
            continue;
        }
        assert!(f.head.has(flag::END_HEADERS));
        let fields = raw.fields(&f.payload);
        let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get(":path").as_deref(), Some(RLS_PATH), "{fields:?}");
        assert_eq!(get(":method").as_deref(), Some("POST"));
        assert_eq!(
            get("authorization").as_deref(),
            Some("Bearer some-token-value")
        );
        assert_eq!(
            get("x-every-byte").map(|v| v.into_bytes()),
            Some(
                String::from_utf8_lossy(&printable)
                    .into_owned()
                    .into_bytes()
            )
        );
        seen += 1;
    }
    client.abort();
}

/// Malformed request heads (RFC 9113, 8.2 and 8.3) reset their stream
/// with PROTOCOL_ERROR and the connection goes on. (The h2 engine agrees
/// on the code; it makes some of them connection errors, which the RFC
/// allows but does not ask for, and takes a head without `:path`: checked
/// here too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_heads_reset_the_stream() {
    let p = start(Opts::default()).await;
    let mut raw = Raw::connect(p.fast, &[]).await;
    let ok = framed(&rls("d", &[&[("a", "1")]], 1));
    let mut id = 1;
    for (what, block) in malformed_heads(p.fast) {
        let mut out = Vec::new();
        frame::put_headers(&mut out, id, &block, true, 16384);
        raw.send(&out).await;
        let f = raw.next_stream_frame().await.unwrap();
        assert_eq!(
            (f.head.kind, f.head.stream),
            (kind::RST_STREAM, id),
            "{what}: {f:?}"
        );
        assert_eq!(f.payload, 1u32.to_be_bytes(), "{what}: PROTOCOL_ERROR");
        id += 2;
    }
    let mut out = Vec::new();
    request(&mut out, p.fast, id, RLS_PATH, &ok);
    raw.send(&out).await;
    let (_, _, trailers) = raw.response(id).await;
    assert_eq!(status_of(&trailers), Some("0"));
    // The h2 engine: PROTOCOL_ERROR too, as a reset or a GOAWAY (but for
    // a head without `:path`, which it answers as a request for `/`).
    for (what, block) in malformed_heads(p.h2) {
        if what == "no :path" {
            continue;
        }
        let mut raw = Raw::connect(p.h2, &[]).await;
        let mut out = Vec::new();
        frame::put_headers(&mut out, 1, &block, true, 16384);
        raw.send(&out).await;
        let f = raw.next_stream_frame().await.unwrap();
        let code = match f.head.kind {
            kind::RST_STREAM => &f.payload[..4],
            kind::GOAWAY => &f.payload[4..8],
            _ => panic!("h2 engine, {what}: {f:?}"),
        };
        assert_eq!(code, 1u32.to_be_bytes(), "h2 engine, {what}: {f:?}");
    }
}

/// Request heads that are malformed, each with what is wrong.
fn malformed_heads(addr: SocketAddr) -> Vec<(&'static str, Vec<u8>)> {
    let base = head_block(addr, RLS_PATH);
    let with = |name: &[u8], value: &[u8]| {
        let mut b = base.clone();
        hpack::put_literal(&mut b, name, value);
        b
    };
    let mut no_path = vec![0x83, 0x86];
    hpack::put_literal(&mut no_path, b"content-type", b"application/grpc");
    let mut pseudo_late = base.clone();
    pseudo_late.push(0x84); // :path / after a regular field
    let mut unknown_pseudo = vec![0x83, 0x86];
    hpack::put_literal(&mut unknown_pseudo, b":nope", b"x");
    unknown_pseudo.extend_from_slice(&base[2..]);
    vec![
        ("uppercase name", with(b"X-Upper", b"v")),
        ("control byte in a value", with(b"x-v", b"a\x01b")),
        ("connection header", with(b"connection", b"close")),
        ("te other than trailers", with(b"te", b"gzip")),
        ("no :path", no_path),
        ("pseudo-header after a field", pseudo_late),
        ("unknown pseudo-header", unknown_pseudo),
    ]
}
