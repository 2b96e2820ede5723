//! The HTTP API (axum): `POST /v1/check`, forward-auth at
//! `/v1/auth/{limit}`, `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use drl_core::Decision;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::deadline::bounded;
use drl_service::check_body;
use drl_service::engine::{self, CheckError, Engine, Op, Outcome};
use drl_service::headers::ceil_ms;
use drl_service::metrics::{Api, rejected};

/// Shared state of the HTTP handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
}

/// The router. Body-size and time bounds are applied by the handlers
/// themselves, from the live config: a `DefaultBodyLimit` or timeout layer
/// would cost every request a boxed future, an extension map and a timer,
/// where [`bounded`] starts a timer only for a request that waits.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/auth/{limit}", any(forward_auth))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(crate::status::routes::page))
        .route("/v1/status", get(crate::status::routes::json))
        .with_state(state)
}

/// The answer to a request that ran out of `request_timeout_ms`.
fn timed_out(api: Api, limit_ms: u64) -> Response {
    timed_out_answer(api, limit_ms).into_response()
}

/// [`timed_out`] as an [`Answer`] (counted).
pub(crate) fn timed_out_answer(api: Api, limit_ms: u64) -> Answer {
    rejected(api, "timeout");
    Answer::problem(
        StatusCode::REQUEST_TIMEOUT,
        "timeout",
        "Request Timeout",
        &format!("the request took longer than request_timeout_ms ({limit_ms} ms)"),
    )
}

/// The answer to a body over `max_body_bytes` (counted).
pub(crate) fn too_large_answer(api: Api, max: usize) -> Answer {
    rejected(api, "body_too_large");
    Answer::problem(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        "Payload Too Large",
        &format!("the request body is larger than max_body_bytes ({max} bytes)"),
    )
}

/// A whole answer of a handler: status, content type and body. Both HTTP
/// transports (this router and the HTTP/1.1 fast path, [`crate::http1`])
/// turn the same answers into responses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The `content-type` value.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Answer {
    /// An RFC 9457 problem ([`drl_http::problem::body`]).
    pub fn problem(status: StatusCode, kind: &str, title: &str, detail: &str) -> Self {
        Self {
            status,
            content_type: "application/problem+json",
            body: drl_http::problem::body(status, kind, title, detail),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (
            self.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.content_type),
            )],
            self.body,
        )
            .into_response()
    }
}

/// Reads a whole body of at most `max` bytes: 413 above it, 400 if the
/// client's stream fails.
async fn read_body(api: Api, body: Body, max: usize) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            too_large_answer(api, max).into_response()
        } else {
            bad_request(
                api,
                "invalid_body",
                &format!("could not read the request body: {e}"),
            )
        }
    })
}

/// An RFC 9457 problem response ([`drl_http::problem::response`]).
pub fn problem(status: StatusCode, kind: &str, title: &str, detail: &str) -> Response {
    drl_http::problem::response(status, kind, title, detail).into_response()
}

fn bad_request(api: Api, kind: &'static str, detail: &str) -> Response {
    bad_request_answer(api, kind, detail).into_response()
}

fn bad_request_answer(api: Api, kind: &'static str, detail: &str) -> Answer {
    rejected(api, kind);
    Answer::problem(StatusCode::BAD_REQUEST, kind, "Bad Request", detail)
}

fn check_error(api: Api, e: &CheckError) -> Response {
    check_error_answer(api, e).into_response()
}

fn check_error_answer(api: Api, e: &CheckError) -> Answer {
    rejected(api, e.kind());
    let status = match e {
        // The store refused the request itself (a store that cannot
        // charge): the client's error, not an outage.
        CheckError::Store {
            error: drl_store::StoreError::Invalid(_),
            ..
        } => StatusCode::BAD_REQUEST,
        CheckError::Store { .. } | CheckError::NotLoaded => StatusCode::SERVICE_UNAVAILABLE,
        CheckError::UnknownLimit { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    let title = status.canonical_reason().unwrap_or("Error");
    Answer::problem(status, e.kind(), title, &e.to_string())
}

/// Appends `v` in decimal (itoa: no formatting machinery per decision).
#[inline]
pub(crate) fn push_u64(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

fn write_decision(out: &mut String, d: &Decision) {
    out.push_str(if d.allowed {
        "{\"allowed\":true,\"limit\":"
    } else {
        "{\"allowed\":false,\"limit\":"
    });
    push_u64(out, d.limit);
    out.push_str(",\"remaining\":");
    push_u64(out, d.remaining);
    out.push_str(",\"retry_after_ms\":");
    match d.retry_after {
        Some(ns) if !d.allowed => push_u64(out, ceil_ms(ns)),
        _ => out.push_str("null"),
    }
    out.push_str(",\"reset_after_ms\":");
    push_u64(out, ceil_ms(d.reset_after));
    if d.delay > 0 {
        out.push_str(",\"delay_ms\":");
        push_u64(out, ceil_ms(d.delay));
    }
    if let Some(r) = d.reason {
        out.push_str(",\"reason\":\"");
        out.push_str(r.as_str());
        out.push('"');
    }
    out.push('}');
}

/// [`write_decision`] for the outcome of a check of `op`: a reserve adds
/// its `reservation` id (a decimal string), a settle or release what it
/// `charged`, `refunded`, and whether it had `expired`.
fn write_outcome(out: &mut String, o: &Outcome, op: Op) {
    write_decision(out, &o.decision);
    match op {
        Op::Reserve if o.reservation != 0 => {
            out.pop();
            out.push_str(",\"reservation\":\"");
            push_u64(out, o.reservation);
            out.push_str("\"}");
        }
        Op::Settle(_) | Op::Release(_) => {
            out.pop();
            out.push_str(",\"charged\":");
            push_u64(out, o.charged);
            out.push_str(",\"refunded\":");
            push_u64(out, o.refunded);
            out.push_str(if o.expired {
                ",\"expired\":true}"
            } else {
                ",\"expired\":false}"
            });
        }
        _ => {}
    }
}

async fn check(State(app): State<AppState>, body: Body) -> Response {
    let started = Instant::now();
    let limits = app.engine.limits();
    let limit_ms = limits.server.request_timeout_ms;
    bounded(
        started,
        Duration::from_millis(limit_ms),
        check_bounded(&app, &limits, body, started),
    )
    .await
    .unwrap_or_else(|| timed_out(Api::HttpCheck, limit_ms))
}

async fn check_bounded(
    app: &AppState,
    limits: &drl_service::limits::Limits,
    body: Body,
    started: Instant,
) -> Response {
    let body = match read_body(Api::HttpCheck, body, limits.server.max_body_bytes).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    check_answer(&app.engine, limits, &body, started)
        .await
        .into_response()
}

/// `POST /v1/check` on a whole body (at most `max_body_bytes`, read by the
/// transport): the items parsed, decided and answered, errors as problems,
/// every outcome counted. Both HTTP transports call it.
pub async fn check_answer(
    engine: &Engine,
    limits: &drl_service::limits::Limits,
    body: &[u8],
    started: Instant,
) -> Answer {
    // Validating UTF-8 once for the whole body is cheaper than serde_json
    // checking each string of each item (`from_slice`).
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(e) => {
            return bad_request_answer(
                Api::HttpCheck,
                "invalid_json",
                &format!("invalid request body: not UTF-8 ({e})"),
            );
        }
    };
    // The common shape without serde (check_body); anything else, and
    // every error, through serde_json.
    let mut parsed = None;
    let reqs = match check_body::read(text, &mut parsed) {
        Ok(items) => items,
        Err(check_body::Refused::Json(e)) => {
            return bad_request_answer(Api::HttpCheck, "invalid_json", &e);
        }
        Err(check_body::Refused::Cost(e)) => {
            return bad_request_answer(Api::HttpCheck, "invalid_cost", &e);
        }
    };
    // The response is written while deciding (no vector of decisions).
    let mut out = String::with_capacity(16 + reqs.len() * 100);
    out.push_str("{\"results\":[");
    let mut i = 0;
    // Decided at `started` (when the transport had the request), in
    // wall-clock time (crate::wall): no clock reading of its own; the
    // decisions' end reading also ends the request's latency.
    let at = crate::wall::unix_nanos(started);
    let decided = engine
        .check_each(limits, &reqs, at, |o| {
            if i > 0 {
                out.push(',');
            }
            write_outcome(&mut out, &o, reqs[i].op);
            i += 1;
        })
        .await;
    let end = match decided {
        Ok(end) => end,
        Err(e) => return check_error_answer(Api::HttpCheck, &e),
    };
    out.push_str("]}");
    engine
        .api_metrics
        .observe_ns(Api::HttpCheck, end.saturating_sub(at));
    Answer {
        status: StatusCode::OK,
        content_type: "application/json",
        body: out,
    }
}

fn query_param<'q>(q: Option<&'q str>, name: &str) -> Option<&'q str> {
    q?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// Forward-auth (nginx `auth_request`, Traefik ForwardAuth): the key comes
/// from the limit's configured headers. Answers 200, or 429 (or the status
/// given as `?deny_status=403`, since nginx's `auth_request` passes only
/// 401 and 403 through) with a problem+json body. `?cost=N` sets the cost.
async fn forward_auth(
    State(app): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let limits = app.engine.limits();
    let limit_ms = limits.server.request_timeout_ms;
    bounded(
        started,
        Duration::from_millis(limit_ms),
        forward_auth_bounded(&app, &limits, name, query, &headers, started),
    )
    .await
    .unwrap_or_else(|| timed_out(Api::ForwardAuth, limit_ms))
}

async fn forward_auth_bounded(
    app: &AppState,
    limits: &drl_service::limits::Limits,
    name: String,
    query: Option<String>,
    headers: &HeaderMap,
    started: Instant,
) -> Response {
    let api = Api::ForwardAuth;
    if !limits.loaded {
        return check_error(api, &CheckError::NotLoaded);
    }
    let Some(limit) = limits.get(&name) else {
        return check_error(
            api,
            &CheckError::UnknownLimit {
                index: 0,
                name,
                known: limits.names().join(", "),
            },
        );
    };
    let deny_status = match query_param(query.as_deref(), "deny_status") {
        None => StatusCode::TOO_MANY_REQUESTS,
        Some(s) => match s
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
        {
            Some(c) if c.is_client_error() => c,
            _ => {
                return bad_request(
                    api,
                    "invalid_deny_status",
                    &format!("deny_status {s:?} must be a 4xx status code"),
                );
            }
        },
    };
    let cost = match query_param(query.as_deref(), "cost") {
        None => 1,
        Some(c) => match c.parse::<u64>() {
            Ok(c) if c <= limits.server.max_cost => c,
            _ => {
                return bad_request(
                    api,
                    "invalid_cost",
                    &format!(
                        "cost {c:?} must be a whole number from 0 to {}",
                        limits.server.max_cost
                    ),
                );
            }
        },
    };
    let mut key = String::new();
    for (i, h) in limit.key.headers.iter().enumerate() {
        if i > 0 {
            key.push('|');
        }
        // A value with bytes outside visible ASCII is still the client's
        // key when it is UTF-8 (`x-tenant: café`); any other bytes are a
        // clear error, never the default key.
        match headers.get(h).map(|v| std::str::from_utf8(v.as_bytes())) {
            Some(Ok(v)) => key.push_str(v.trim()),
            Some(Err(_)) => {
                return bad_request(
                    api,
                    "invalid_key",
                    &format!(
                        "header {h} (the key of limit {:?}) is not valid UTF-8",
                        limit.name
                    ),
                );
            }
            None => match &limit.key.default {
                Some(d) => key.push_str(d),
                None => {
                    return bad_request(
                        api,
                        "missing_key",
                        &format!(
                            "limit {:?} takes its key from header {h}, which the request lacks",
                            limit.name
                        ),
                    );
                }
            },
        }
    }
    if key.len() > limits.server.max_key_bytes {
        let (len, max) = (key.len(), limits.server.max_key_bytes);
        let detail = format!("the key is {len} bytes; at most {max} (server.max_key_bytes)");
        return bad_request(api, "key_too_long", &detail);
    }
    let d = match engine::decide(limit, &key, cost, app.engine.now()).await {
        Ok(d) => d,
        Err(e) => return check_error(api, &e),
    };
    app.engine.api_metrics.observe(api, started);
    // The same answer as drl-client's tower layer (drl-http).
    let mut resp = if d.allowed {
        StatusCode::OK.into_response()
    } else {
        drl_http::problem::rate_limited(&limit.name, cost, deny_status, &limit.policy, &d)
            .into_response()
    };
    drl_http::headers::insert_ratelimit(resp.headers_mut(), limit.policy.clone(), &d);
    resp
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(app): State<AppState>) -> Response {
    if app.engine.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    } else if !app.engine.is_loaded() {
        let body = format!("{}\n", engine::NOT_LOADED);
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

async fn metrics(State(app): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        drl_service::metrics::render(&app.metrics),
    )
        .into_response()
}
