//! The load: one open-loop client per `drl serve` node, a request every
//! [`PERIOD`] (HTTP `POST /v1/check`; every [`GRPC_EVERY`]th request over
//! native gRPC; every [`BAD_EVERY`]th a bad input), each a batch of checks
//! on the node's hot key plus [`FLOOD_PER_REQUEST`] distinct keys (a key
//! flood against the `flood` limit). Every answer is counted here, by the
//! client, in a [`Recorder`]: the checks (checks.rs) use nothing else.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drl_api::pb::rate_limiter_client::RateLimiterClient;
use drl_api::pb::{CheckItem, CheckRequest};
use parking_lot_free::Mutex;
use tonic::transport::{Channel, Endpoint};

use crate::processes::Group;
use crate::topology::{LOCAL_WINDOW_MS, ORBIT_WINDOW_MS, REDIS_WINDOW_MS};

/// `std::sync::Mutex` that ignores poisoning (a panicked load task must
/// not hide the counts of the others).
mod parking_lot_free {
    /// See the module doc.
    pub struct Mutex<T>(std::sync::Mutex<T>);
    impl<T> Mutex<T> {
        /// Wraps `t`.
        pub fn new(t: T) -> Self {
            Mutex(std::sync::Mutex::new(t))
        }
        /// Locks, ignoring poison.
        pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

/// Pause between two requests to one node (40 requests/s per node).
pub const PERIOD: Duration = Duration::from_millis(25);
/// Every this many requests goes over gRPC.
pub const GRPC_EVERY: u64 = 4;
/// Every this many requests is a bad input.
pub const BAD_EVERY: u64 = 50;
/// Distinct keys per request against the `flood` limit.
pub const FLOOD_PER_REQUEST: usize = 2;
/// A request without an answer after this long is a timeout.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Wall-clock time in ns since the Unix epoch (the clock drl's windows
/// are aligned to).
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The hot limit of a group, its checks per request, and its window (ms;
/// 0: counted per second by send time only).
pub fn hot(group: Group) -> (&'static str, usize, u64) {
    match group {
        Group::Gossip => ("g", 8, 0),
        Group::Orbit => ("o", 8, ORBIT_WINDOW_MS),
        Group::Redis => ("r", 5, REDIS_WINDOW_MS),
        Group::Local => ("l", 5, LOCAL_WINDOW_MS),
        Group::RedisServer => ("", 0, 0),
    }
}

/// The bad inputs tried, in rotation: (name, what is sent).
pub const BAD_INPUTS: [&str; 9] = [
    "malformed-json",
    "unknown-limit",
    "negative-cost",
    "fractional-cost",
    "key-5000-bytes",
    "empty-batch",
    "unknown-field",
    "body-over-1MiB",
    "grpc-unknown-limit",
];

fn bad_body(kind: &str) -> String {
    match kind {
        "malformed-json" => r#"{"requests":[{"limit":"#.into(),
        "unknown-limit" => r#"{"requests":[{"limit":"nope","key":"k","cost":1}]}"#.into(),
        "negative-cost" => r#"{"requests":[{"limit":"flood","key":"k","cost":-1}]}"#.into(),
        "fractional-cost" => r#"{"requests":[{"limit":"flood","key":"k","cost":1.5}]}"#.into(),
        "key-5000-bytes" => format!(
            r#"{{"requests":[{{"limit":"flood","key":"{}","cost":1}}]}}"#,
            "k".repeat(5000)
        ),
        "empty-batch" => r#"{"requests":[]}"#.into(),
        "unknown-field" => r#"{"requests":[{"limit":"flood","key":"k","cots":1}]}"#.into(),
        _ => format!(
            r#"{{"requests":[{{"limit":"flood","key":"{}","cost":1}}]}}"#,
            "x".repeat(1_100_000)
        ),
    }
}

/// A request that got no answer, or not the answer it should have.
#[derive(Debug, Clone)]
pub struct Unanswered {
    /// When it was sent (unix ns).
    pub sent_ns: u64,
    /// When the client gave up or got the answer (unix ns).
    pub done_ns: u64,
    /// Process index of the node.
    pub node: usize,
    /// `timeout`, `connect`, `http 503`, `grpc Unavailable`, ...
    pub kind: String,
    /// An HTTP error with an `application/problem+json` body, or a gRPC
    /// status: the client was told what went wrong.
    pub clear: bool,
    /// The connection failed or timed out (no HTTP/gRPC answer at all).
    pub transport: bool,
    /// A bad input (expected to be refused with a clear 4xx).
    pub bad: bool,
}

/// Counts of one limit in one second (by send time) or one window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Slot {
    /// Checks offered.
    pub offered: u64,
    /// Checks admitted.
    pub admitted: u64,
    /// Checks admitted and answered within the second they were sent in:
    /// surely decided in that second (per-second slots only).
    pub admitted_within: u64,
    /// Checks whose outcome the client does not know (error, timeout).
    pub unknown: u64,
}

/// Everything the clients saw.
#[derive(Default)]
pub struct Counts {
    /// Requests sent, by transport (`http`, `grpc`, `bad`).
    pub requests: BTreeMap<&'static str, u64>,
    /// Requests answered with decisions.
    pub answered: u64,
    /// Requests not answered with decisions, by kind.
    pub errors: BTreeMap<String, u64>,
    /// Per (limit, second since the start by send time).
    pub seconds: BTreeMap<(&'static str, u64), Slot>,
    /// Per (limit, node) and second: admitted (gossip split per node).
    pub node_seconds: BTreeMap<(usize, u64), u64>,
    /// Per (limit, window index): admissions attributed to the window the
    /// server charged them to (from `reset_after_ms`).
    pub windows: BTreeMap<(&'static str, u64), Slot>,
    /// Per (limit, window index, node): admissions attributed as in
    /// [`Counts::windows`].
    pub node_windows: BTreeMap<(&'static str, u64, usize), u64>,
    /// Per (limit, window index of the send time): offered and unknown.
    pub sent_windows: BTreeMap<(&'static str, u64), Slot>,
    /// Admissions whose window could not be told (took longer than a
    /// window), per limit.
    pub unattributed: BTreeMap<&'static str, u64>,
    /// Every request not answered with decisions.
    pub unanswered: Vec<Unanswered>,
    /// Bad inputs: (kind, status or error) -> count.
    pub bad: BTreeMap<(&'static str, String), u64>,
    /// Checks sent, by limit.
    pub checks: BTreeMap<&'static str, u64>,
}

/// The clients' shared record.
pub struct Recorder {
    /// Start of the run (unix ns); second 0 starts here.
    pub t0_ns: u64,
    counts: Mutex<Counts>,
    /// Requests in flight.
    pub in_flight: AtomicU64,
}

impl Recorder {
    /// An empty record starting now.
    pub fn new() -> Recorder {
        Recorder {
            t0_ns: unix_ns(),
            counts: Mutex::new(Counts::default()),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Second of the run at `ns`.
    pub fn second(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0_ns) / 1_000_000_000
    }

    /// Runs `f` on the counts.
    pub fn with<R>(&self, f: impl FnOnce(&mut Counts) -> R) -> R {
        f(&mut self.counts.lock())
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

/// One decision as the client saw it.
struct Seen {
    allowed: bool,
    reset_after_ms: u64,
}

/// A node the load is sent to.
#[derive(Clone)]
pub struct Target {
    /// Process index.
    pub node: usize,
    /// Its group (which limit is hot).
    pub group: Group,
    /// HTTP address.
    pub http: SocketAddr,
    /// gRPC address.
    pub grpc: SocketAddr,
}

/// Sends load to `t` every [`PERIOD`] until `stop` is set; `seed` varies
/// the flood keys between runs.
pub async fn drive(
    t: Target,
    rec: Arc<Recorder>,
    http: reqwest::Client,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let channel: Channel = Endpoint::from_shared(format!("http://{}", t.grpc))
        .expect("grpc url")
        .connect_timeout(Duration::from_secs(1))
        .timeout(TIMEOUT)
        .connect_lazy();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut seq: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        seq += 1;
        let (t, rec, http, channel) = (t.clone(), rec.clone(), http.clone(), channel.clone());
        rec.in_flight.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            one(&t, &rec, &http, channel, seq, seed).await;
            rec.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn one(
    t: &Target,
    rec: &Recorder,
    http: &reqwest::Client,
    channel: Channel,
    seq: u64,
    seed: u64,
) {
    if seq % BAD_EVERY == 0 {
        let kind = BAD_INPUTS[((seq / BAD_EVERY) as usize + t.node) % BAD_INPUTS.len()];
        return bad(t, rec, http, channel, kind).await;
    }
    let (limit, k, window_ms) = hot(t.group);
    let mut items: Vec<(&'static str, String)> =
        (0..k).map(|_| (limit, "hot".to_string())).collect();
    for j in 0..FLOOD_PER_REQUEST {
        items.push(("flood", format!("f{seed:x}-{}-{seq}-{j}", t.node)));
    }
    let grpc = seq % GRPC_EVERY == 0;
    let sent_ns = unix_ns();
    let res = if grpc {
        send_grpc(channel, &items).await
    } else {
        send_http(t, http, &items).await
    };
    let done_ns = unix_ns();
    let s = rec.second(sent_ns);
    rec.with(|c| {
        *c.requests
            .entry(if grpc { "grpc" } else { "http" })
            .or_default() += 1;
        *c.checks.entry(limit).or_default() += k as u64;
        *c.checks.entry("flood").or_default() += FLOOD_PER_REQUEST as u64;
        let sw = if window_ms > 0 {
            sent_ns / (window_ms * 1_000_000)
        } else {
            0
        };
        match res {
            Ok(seen) if seen.len() == items.len() => {
                c.answered += 1;
                let admitted = seen[..k].iter().filter(|d| d.allowed).count() as u64;
                let slot = c.seconds.entry((limit, s)).or_default();
                slot.offered += k as u64;
                slot.admitted += admitted;
                if rec.second(done_ns) == s {
                    slot.admitted_within += admitted;
                }
                *c.node_seconds.entry((t.node, s)).or_default() += admitted;
                if window_ms > 0 {
                    c.sent_windows.entry((limit, sw)).or_default().offered += k as u64;
                    let w = window_ms * 1_000_000;
                    for d in seen[..k].iter().filter(|d| d.allowed) {
                        let reset = d.reset_after_ms * 1_000_000;
                        // The window's end E lies in (sent + reset - 1 ms,
                        // done + reset]; one multiple of W in there names it.
                        let end = (done_ns + reset) / w * w;
                        if end + 1_000_000 > sent_ns + reset {
                            c.windows.entry((limit, end / w - 1)).or_default().admitted += 1;
                            *c.node_windows
                                .entry((limit, end / w - 1, t.node))
                                .or_default() += 1;
                        } else {
                            *c.unattributed.entry(limit).or_default() += 1;
                            c.sent_windows.entry((limit, sw)).or_default().unknown += 1;
                        }
                    }
                }
            }
            other => {
                let (kind, clear) = match other {
                    Ok(seen) => (
                        format!("{} results for {} checks", seen.len(), items.len()),
                        false,
                    ),
                    Err(e) => e,
                };
                let transport = is_transport(&kind);
                *c.errors.entry(kind.clone()).or_default() += 1;
                let slot = c.seconds.entry((limit, s)).or_default();
                slot.offered += k as u64;
                slot.unknown += k as u64;
                if window_ms > 0 {
                    let sl = c.sent_windows.entry((limit, sw)).or_default();
                    sl.offered += k as u64;
                    sl.unknown += k as u64;
                }
                c.unanswered.push(Unanswered {
                    sent_ns,
                    done_ns,
                    node: t.node,
                    kind,
                    clear,
                    transport,
                    bad: false,
                });
            }
        }
    });
}

/// Whether an error kind is the connection's (no answer at all).
pub fn is_transport(kind: &str) -> bool {
    matches!(kind, "timeout" | "connect" | "connection closed")
}

/// An error: (kind, clear).
type Failed = (String, bool);

fn transport_kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        // Rare outside faults, and its cause is in the source chain (a
        // reset, a close before the answer, a malformed answer): kept for
        // whoever reads driver.log.
        eprintln!("drl-soak: http request failed: {e:?}");
        "connection closed".into()
    }
}

async fn send_http(
    t: &Target,
    http: &reqwest::Client,
    items: &[(&str, String)],
) -> Result<Vec<Seen>, Failed> {
    let reqs: Vec<serde_json::Value> = items
        .iter()
        .map(|(l, k)| serde_json::json!({"limit": l, "key": k, "cost": 1}))
        .collect();
    let body = serde_json::json!({ "requests": reqs }).to_string();
    let resp = http
        .post(format!("http://{}/v1/check", t.http))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| (transport_kind(&e), false))?;
    let status = resp.status().as_u16();
    let problem = is_problem(&resp);
    let text = resp.text().await.map_err(|e| (transport_kind(&e), false))?;
    if status != 200 {
        return Err((format!("http {status}"), problem));
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|_| ("http 200 not JSON".to_string(), false))?;
    let results = v["results"]
        .as_array()
        .ok_or(("http 200 without results".to_string(), false))?;
    Ok(results
        .iter()
        .map(|r| Seen {
            allowed: r["allowed"].as_bool() == Some(true),
            reset_after_ms: r["reset_after_ms"].as_u64().unwrap_or(0),
        })
        .collect())
}

fn is_problem(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/problem+json"))
}

async fn send_grpc(channel: Channel, items: &[(&str, String)]) -> Result<Vec<Seen>, Failed> {
    let mut c = RateLimiterClient::new(channel);
    let requests = items
        .iter()
        .map(|(l, k)| CheckItem {
            limit: l.to_string(),
            key: k.clone(),
            cost: Some(1),
            ..Default::default()
        })
        .collect();
    match c.check(CheckRequest { requests }).await {
        Ok(r) => Ok(r
            .into_inner()
            .results
            .into_iter()
            .map(|r| Seen {
                allowed: r.allowed,
                reset_after_ms: r.reset_after_ms,
            })
            .collect()),
        Err(s) => {
            // A status the server sent carries a message; a transport
            // failure (refused, reset, deadline) is the client's own.
            let code = s.code();
            let transport = matches!(
                code,
                tonic::Code::Unavailable
                    | tonic::Code::Cancelled
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unknown
            );
            let kind = match code {
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => "timeout".to_string(),
                tonic::Code::Unavailable | tonic::Code::Unknown => "connect".to_string(),
                _ => format!("grpc {code:?}"),
            };
            Err((kind, !transport))
        }
    }
}

async fn bad(
    t: &Target,
    rec: &Recorder,
    http: &reqwest::Client,
    channel: Channel,
    kind: &'static str,
) {
    let sent_ns = unix_ns();
    let outcome: Result<u16, Failed> = if kind == "grpc-unknown-limit" {
        let mut c = RateLimiterClient::new(channel);
        let req = CheckRequest {
            requests: vec![CheckItem {
                limit: "nope".into(),
                key: "k".into(),
                cost: Some(1),
                ..Default::default()
            }],
        };
        match c.check(req).await {
            Ok(_) => Ok(200),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(404),
            Err(s) if matches!(s.code(), tonic::Code::InvalidArgument) => Ok(400),
            Err(s) => Err((
                match s.code() {
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => "timeout".into(),
                    tonic::Code::Unavailable | tonic::Code::Unknown => "connect".into(),
                    c => format!("grpc {c:?}"),
                },
                false,
            )),
        }
    } else {
        match http
            .post(format!("http://{}/v1/check", t.http))
            .header("content-type", "application/json")
            .body(bad_body(kind))
            .send()
            .await
        {
            Ok(r) => {
                let status = r.status().as_u16();
                let problem = is_problem(&r);
                let _ = r.bytes().await;
                if (400..500).contains(&status) && problem {
                    Ok(status)
                } else {
                    Err((
                        format!(
                            "http {status}{}",
                            if problem { "" } else { " without problem+json" }
                        ),
                        false,
                    ))
                }
            }
            Err(e) => Err((transport_kind(&e), false)),
        }
    };
    let done_ns = unix_ns();
    rec.with(|c| {
        *c.requests.entry("bad").or_default() += 1;
        let label = match &outcome {
            Ok(s) => s.to_string(),
            Err((k, _)) => k.clone(),
        };
        *c.bad.entry((kind, label)).or_default() += 1;
        match outcome {
            Ok(s) if (400..500).contains(&s) => c.answered += 1,
            Ok(s) => c.unanswered.push(Unanswered {
                sent_ns,
                done_ns,
                node: t.node,
                kind: format!("bad input {kind} answered {s}"),
                clear: false,
                transport: false,
                bad: true,
            }),
            Err((k, _)) => {
                *c.errors.entry(k.clone()).or_default() += 1;
                c.unanswered.push(Unanswered {
                    sent_ns,
                    done_ns,
                    node: t.node,
                    kind: format!("bad input {kind}: {k}"),
                    clear: false,
                    transport: is_transport(&k),
                    bad: true,
                })
            }
        }
    });
}
