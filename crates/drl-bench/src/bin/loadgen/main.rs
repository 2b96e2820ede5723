//! `loadgen`: a small HTTP/1.1 and gRPC (HTTP/2) load generator for the
//! side-by-side benchmark (`scripts/bench-peers`): drl, the minimal server
//! and limitador get the same requests from it.
//!
//! ```text
//! loadgen --url URL --body FILE [--body FILE ...] [--grpc]
//!         [-c 32] [-m 1] [--duration 8] [--warmup 1] [--rate 0]
//!         [--content-type T] [--expect TEXT | --expect-hex HEX]
//!         [--client raw|hyper]
//! ```
//!
//! What h2load and wrk do not do together:
//!
//! - **Rotating bodies**: each request sends the next of the `--body` files
//!   (round robin per worker, workers starting at different files), so 16
//!   files are 16 rotating keys, over HTTP/1.1 and over gRPC alike.
//! - **Fixed rate** (`--rate R`, requests/s in all): each of the `c x m`
//!   workers sends on its own schedule, and a request's latency is counted
//!   from the moment it was due, not from when it was sent, so a server
//!   that falls behind shows it in its p99 (no coordinated omission).
//!   `--rate 0` (the default) sends as fast as answers come back.
//! - **Every answer checked**: HTTP status 200 and, with `--expect`, a body
//!   containing that text; gRPC status 0 (trailers) and, with
//!   `--expect-hex`, a message starting with those bytes (e.g. `0801`: an
//!   Envoy RLS `overall_code: OK`). Anything else is an error; the run's
//!   errors are printed and make the exit status 1.
//!
//! - **Cheap clients** (`--client raw`, the default): HTTP/1.1 requests
//!   built once per body and answers parsed with `httparse` (`raw_h1.rs`),
//!   so that on two cores the server and not the client is the limit of a
//!   saturation run. gRPC always goes through hyper's HTTP/2 client (the
//!   `h2` crate): a load generator shares no code with the server it
//!   measures. `--client hyper` sends HTTP/1.1 through hyper too.
//! - **Precise pacing**: with `--client raw` a paced request is sent
//!   within microseconds of when it is due (`pacer.rs`: a `timerfd`, 1 ns
//!   timer slack), where tokio's 1 ms timer wheel would add up to a
//!   millisecond to every latency.
//!
//! It runs on one thread (a current-thread runtime), so it takes at most
//! one core from the servers it measures. Output, one line:
//! `RESULT requests=N errors=E secs=S rps=R p50_ms=.. p99_ms=.. p999_ms=..`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

mod pacer;
mod raw_h1;

struct Args {
    url: hyper::Uri,
    bodies: Vec<Bytes>,
    grpc: bool,
    /// gRPC over the hand-written client (true) or hyper's.
    raw: bool,
    conns: usize,
    streams: usize,
    duration: Duration,
    warmup: Duration,
    rate: f64,
    content_type: Option<String>,
    expect: Option<Vec<u8>>,
    expect_hex: Option<Vec<u8>>,
}

const USAGE: &str = "usage: loadgen --url URL --body FILE [--body FILE ...] [--grpc] [-c N] [-m N] \
[--duration SECS] [--warmup SECS] [--rate REQ_PER_S] [--content-type T] [--expect TEXT | --expect-hex HEX] \
[--client raw|hyper]";

fn args() -> Args {
    let mut a = Args {
        url: hyper::Uri::default(),
        bodies: Vec::new(),
        grpc: false,
        raw: true,
        conns: 32,
        streams: 1,
        duration: Duration::from_secs(8),
        warmup: Duration::from_secs(1),
        rate: 0.0,
        content_type: None,
        expect: None,
        expect_hex: None,
    };
    let mut url = None;
    let mut it = std::env::args().skip(1);
    let secs = |v: String| Duration::from_secs_f64(v.parse().expect("seconds"));
    while let Some(k) = it.next() {
        if k == "--grpc" {
            a.grpc = true;
            continue;
        }
        if k == "-h" || k == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let v = it
            .next()
            .unwrap_or_else(|| panic!("{k} needs a value\n{USAGE}"));
        match k.as_str() {
            "--url" => url = Some(v),
            "--body" => a.bodies.push(
                std::fs::read(&v)
                    .unwrap_or_else(|e| panic!("{v}: {e}"))
                    .into(),
            ),
            "-c" => a.conns = v.parse().expect("-c"),
            "-m" => a.streams = v.parse().expect("-m"),
            "--duration" => a.duration = secs(v),
            "--warmup" => a.warmup = secs(v),
            "--rate" => a.rate = v.parse().expect("--rate"),
            "--content-type" => a.content_type = Some(v),
            "--expect" => a.expect = Some(v.into_bytes()),
            "--expect-hex" => a.expect_hex = Some(hex(&v)),
            "--client" => {
                a.raw = match v.as_str() {
                    "raw" => true,
                    "hyper" => false,
                    _ => panic!("--client is raw or hyper\n{USAGE}"),
                }
            }
            _ => panic!("unknown argument {k}\n{USAGE}"),
        }
    }
    a.url = url.expect(USAGE).parse().expect("--url");
    assert!(!a.bodies.is_empty(), "at least one --body\n{USAGE}");
    assert!(a.conns > 0 && a.streams > 0, "-c and -m must be positive");
    if !a.grpc {
        // HTTP/1.1 has one request in flight per connection.
        a.streams = 1;
    }
    a
}

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "--expect-hex: an even number of digits");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("--expect-hex"))
        .collect()
}

/// Shared counters and the recorded latencies (µs) of the measured part.
struct Run {
    measuring: AtomicBool,
    stop: AtomicBool,
    requests: AtomicU64,
    errors: AtomicU64,
    first_error: parking_lot::Mutex<Option<String>>,
}

impl Run {
    /// Counts one answer of the measured part: its latency from `due`
    /// into `lat` if it passed its check, an error otherwise.
    fn record(&self, result: Result<(), String>, due: Instant, lat: &mut Vec<u32>) {
        match result {
            Ok(()) => {
                self.requests.fetch_add(1, Ordering::Relaxed);
                lat.push(due.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            Err(e) => self.error(e),
        }
    }

    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock();
        if first.is_none() {
            *first = Some(what);
        }
    }
}

/// Checks one answer; `Err` says what was wrong with it.
async fn answer(a: &Args, resp: hyper::Response<Incoming>) -> Result<(), String> {
    let status = resp.status();
    let collected = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes();
    if status != hyper::StatusCode::OK {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    }
    if a.grpc {
        let grpc_status = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.to_str().unwrap_or("?").to_string());
        check_grpc(a, grpc_status, &body)?;
    } else if let Some(want) = &a.expect {
        if !body.windows(want.len()).any(|w| w == want.as_slice()) {
            return Err(format!(
                "body lacks the expected text: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
        }
    }
    Ok(())
}

/// Checks a gRPC answer of status 200: `grpc-status` 0 and, with
/// `--expect-hex`, a message (after the 5-byte frame prefix of `body`)
/// starting with those bytes.
fn check_grpc(a: &Args, grpc_status: Option<String>, body: &[u8]) -> Result<(), String> {
    if grpc_status.as_deref() != Some("0") {
        return Err(format!("grpc-status {grpc_status:?}"));
    }
    if let Some(want) = &a.expect_hex {
        let msg = body.get(5..).unwrap_or_default();
        if !msg.starts_with(want) {
            return Err(format!("message starts {:02x?}", &msg[..msg.len().min(8)]));
        }
    }
    Ok(())
}

fn request(a: &Args, body: &Bytes) -> Request<Full<Bytes>> {
    let mut b = Request::post(a.url.clone());
    if a.grpc {
        b = b
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    } else {
        let host = a.url.authority().map_or("localhost", |h| h.as_str());
        b = b.header("host", host);
        if let Some(ct) = &a.content_type {
            b = b.header("content-type", ct.as_str());
        }
    }
    b.body(Full::new(body.clone())).expect("request")
}

/// One worker: a request in flight at a time on its sender, for as long as
/// the run lasts; paced when `every` is set.
async fn worker<S>(
    a: Arc<Args>,
    run: Arc<Run>,
    mut send: S,
    first: usize,
    mut every: Option<pacer::Schedule>,
) -> Vec<u32>
where
    S: AsyncSend,
{
    let mut lat = Vec::with_capacity(1 << 16);
    let mut i = first;
    while !run.stop.load(Ordering::Relaxed) {
        let due = match &mut every {
            Some(schedule) => {
                let due = schedule.due();
                schedule.advance();
                tokio::time::sleep_until(due.into()).await;
                due
            }
            None => Instant::now(),
        };
        let body = &a.bodies[i % a.bodies.len()];
        i += 1;
        let result = match send.send(request(&a, body)).await {
            Ok(resp) => answer(&a, resp).await,
            Err(e) => Err(format!("send: {e}")),
        };
        if run.measuring.load(Ordering::Relaxed) {
            run.record(result, due, &mut lat);
        }
    }
    lat
}

/// A connection's request sender, HTTP/1.1 or HTTP/2.
trait AsyncSend {
    fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> impl Future<Output = hyper::Result<hyper::Response<Incoming>>>;
}

impl AsyncSend for hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> hyper::Result<hyper::Response<Incoming>> {
        self.ready().await?;
        self.send_request(req).await
    }
}

impl AsyncSend for hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> hyper::Result<hyper::Response<Incoming>> {
        self.ready().await?;
        self.send_request(req).await
    }
}

async fn connect(a: &Args) -> tokio::net::TcpStream {
    let auth = a.url.authority().expect("--url needs host:port");
    let port = auth.port_u16().unwrap_or(if a.grpc { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((auth.host(), port))
        .await
        .unwrap_or_else(|e| panic!("connect {auth}: {e}"));
    tcp.set_nodelay(true).expect("nodelay");
    tcp
}

fn main() {
    let a = Arc::new(args());
    pacer::tighten();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let run = Arc::new(Run {
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: parking_lot::Mutex::new(None),
        });
        let workers = a.conns * a.streams;
        let start = Instant::now() + Duration::from_millis(50);
        let pace = |w: usize| {
            (a.rate > 0.0).then(|| {
                let step = Duration::from_secs_f64(workers as f64 / a.rate);
                pacer::Schedule::new(start + step.mul_f64(w as f64 / workers as f64), step)
            })
        };
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..a.conns {
            if a.raw && !a.grpc {
                let tcp = connect(&a).await;
                tasks.spawn(raw_h1::connection(a.clone(), run.clone(), tcp, c, pace(c)));
                continue;
            }
            let io = TokioIo::new(connect(&a).await);
            if a.grpc {
                let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("HTTP/2 handshake");
                tokio::spawn(conn);
                for s in 0..a.streams {
                    let w = c * a.streams + s;
                    tasks.spawn(worker(a.clone(), run.clone(), send.clone(), w, pace(w)));
                }
            } else {
                let (send, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .expect("HTTP/1.1 handshake");
                tokio::spawn(conn);
                tasks.spawn(worker(a.clone(), run.clone(), send, c, pace(c)));
            }
        }
        tokio::time::sleep_until((start + a.warmup).into()).await;
        run.measuring.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(a.duration).await;
        run.measuring.store(false, Ordering::Relaxed);
        let secs = t0.elapsed().as_secs_f64();
        run.stop.store(true, Ordering::Relaxed);
        let mut lat = Vec::new();
        while let Some(l) = tasks.join_next().await {
            lat.extend(l.expect("worker"));
        }
        lat.sort_unstable();
        let pct = |p: f64| {
            lat.get(((lat.len().max(1) - 1) as f64 * p).round() as usize)
                .map_or(f64::NAN, |&us| us as f64 / 1000.0)
        };
        let n = run.requests.load(Ordering::Relaxed);
        let errors = run.errors.load(Ordering::Relaxed);
        println!(
            "RESULT requests={n} errors={errors} secs={secs:.3} rps={:.1} p50_ms={:.3} p99_ms={:.3} p999_ms={:.3}",
            n as f64 / secs,
            pct(0.5),
            pct(0.99),
            pct(0.999)
        );
        if let Some(e) = run.first_error.lock().take() {
            eprintln!("loadgen: {errors} errors; the first: {e}");
            std::process::exit(1);
        }
    });
}
