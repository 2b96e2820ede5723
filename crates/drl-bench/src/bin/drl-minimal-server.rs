//! `drl-minimal-server`: the benchmark baseline. It serves the same HTTP
//! (`POST /v1/check`) and gRPC (`drl.v1.RateLimiter/Check`) requests as
//! `drl serve`, parsing them the same way and answering a response of the
//! same shape, but without deciding anything. `drl serve`'s throughput
//! divided by this one's is drl's overhead.
//!
//! Its gRPC listener also answers Envoy RLS v3
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`): it
//! decodes the request and answers `OK` with one status per descriptor, of
//! the shape `drl serve` answers (current limit, remaining, reset), again
//! without deciding: the baseline of `scripts/bench-peers`' RLS rows.
//!
//! Also: `drl-minimal-server encode-grpc N [LIMIT [FIRST]]` writes a
//! framed gRPC `CheckRequest` of N items (keys `tenant-FIRST`, ...) to
//! stdout (the body h2load sends), and
//! `drl-minimal-server encode-rls DOMAIN KEY=VALUE[,KEY=VALUE...]` a framed
//! Envoy RLS request with one descriptor of those entries.
//!
//! With `--tls-cert FILE --tls-key FILE` both listeners speak TLS through
//! the same stack as `drl serve` (rustls with ring, tokio-rustls,
//! hyper-util), in the plainest accept loop: the baseline of the TLS rows.
//!
//! `--grpc-engine h2` serves the same gRPC answers on the `h2` crate
//! directly (`drl_server::grpc::direct`, the transport of `drl serve`'s
//! gRPC listener) instead of tonic: the floor of `scripts/bench-peers`'
//! gRPC rows.

use std::io::Write as _;
use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use drl_api::frame;
use drl_api::pb::rate_limiter_server::{RateLimiter, RateLimiterServer};
use drl_api::pb::{CheckItem, CheckRequest, CheckResponse, CheckResult};
use drl_server::grpc::direct;
use drl_server::http::Answer;
use drl_service::check_body;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use prost::Message as _;
use tonic::{Request, Status};

async fn check(body: Bytes) -> Response {
    let a = check_answer(&body);
    (
        a.status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(a.content_type),
        )],
        a.body,
    )
        .into_response()
}

/// The check's answer: parsed as `drl serve` parses it (the common shape
/// by drl's scanner, the rest by serde_json), never decided.
fn check_answer(body: &[u8]) -> Answer {
    let refused = |e: String| Answer {
        status: StatusCode::BAD_REQUEST,
        content_type: "text/plain; charset=utf-8",
        body: e,
    };
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(e) => return refused(e.to_string()),
    };
    let mut parsed = None;
    let items = match check_body::read(text, &mut parsed) {
        Ok(items) => items.len(),
        Err(check_body::Refused::Json(e) | check_body::Refused::Cost(e)) => return refused(e),
    };
    let mut out = String::with_capacity(16 + items * 100);
    out.push_str("{\"results\":[");
    for i in 0..items {
        if i > 0 {
            out.push(',');
        }
        out.push_str(
            "{\"allowed\":true,\"limit\":100,\"remaining\":99,\"retry_after_ms\":null,\"reset_after_ms\":10}",
        );
    }
    out.push_str("]}");
    Answer {
        status: StatusCode::OK,
        content_type: "application/json",
        body: out,
    }
}

#[derive(Debug, Default)]
struct Minimal;

#[tonic::async_trait]
impl RateLimiter for Minimal {
    async fn check(
        &self,
        req: Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, Status> {
        Ok(tonic::Response::new(check_response(
            req.into_inner().requests.len(),
        )))
    }
}

/// The Envoy RLS baseline: decodes the request, answers OK per descriptor.
#[derive(Debug, Default)]
struct MinimalRls;

#[tonic::async_trait]
impl RateLimitService for MinimalRls {
    async fn should_rate_limit(
        &self,
        req: Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, Status> {
        Ok(tonic::Response::new(rls_response(
            req.into_inner().descriptors.len(),
        )))
    }
}

fn check_response(n: usize) -> CheckResponse {
    let results = (0..n)
        .map(|_| CheckResult {
            allowed: true,
            limit: 100,
            remaining: 99,
            retry_after_ms: None,
            reset_after_ms: 10,
            delay_ms: 0,
            reason: String::new(),
            ..Default::default()
        })
        .collect();
    CheckResponse { results }
}

fn rls_response(n: usize) -> RateLimitResponse {
    let statuses = (0..n)
        .map(|_| DescriptorStatus {
            code: Code::Ok.into(),
            current_limit: Some(PbRateLimit {
                name: String::new(),
                requests_per_unit: 1_000_000,
                unit: Unit::Second.into(),
            }),
            limit_remaining: 999_999,
            duration_until_reset: Some(PbDuration {
                seconds: 1,
                nanos: 0,
            }),
            quota: None,
        })
        .collect();
    RateLimitResponse {
        overall_code: Code::Ok.into(),
        statuses,
        ..Default::default()
    }
}

/// The same two methods on the direct h2 transport.
#[derive(Debug, Clone, Copy)]
enum DirectMethod {
    Check,
    Rls,
}

struct MinimalDirect;

impl direct::Unary for MinimalDirect {
    type Method = DirectMethod;

    fn route(&self, path: &str) -> Option<DirectMethod> {
        match path {
            "/drl.v1.RateLimiter/Check" => Some(DirectMethod::Check),
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" => {
                Some(DirectMethod::Rls)
            }
            _ => None,
        }
    }

    async fn call(
        &self,
        method: DirectMethod,
        _head: &axum::http::request::Parts,
        msg: Bytes,
    ) -> Result<Bytes, Status> {
        answer(method, &msg)
    }
}

/// The transport of the gRPC listener (`--grpc-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GrpcEngine {
    /// tonic (the default).
    Tonic,
    /// The h2 crate directly (`drl_server::grpc::direct`).
    H2,
}

/// Decodes a request of `method` and answers it, deciding nothing.
fn answer(method: DirectMethod, msg: &[u8]) -> Result<Bytes, Status> {
    let bad = |e: prost::DecodeError| Status::internal(e.to_string());
    Ok(match method {
        DirectMethod::Check => {
            let req = CheckRequest::decode(msg).map_err(bad)?;
            frame::encode(&check_response(req.requests.len()))
        }
        DirectMethod::Rls => {
            let req = RateLimitRequest::decode(msg).map_err(bad)?;
            frame::encode(&rls_response(req.descriptors.len()))
        }
    })
}

/// The direct h2 accept loop.
async fn serve_direct(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let builder = std::sync::Arc::new(direct::builder(None));
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let builder = builder.clone();
        tokio::spawn(async move {
            let _ = direct::serve_connection(
                tcp,
                &builder,
                &MinimalDirect,
                || (),
                std::future::pending(),
            )
            .await;
        });
    }
}

/// A framed Envoy RLS request: `domain`, one descriptor of `entries`
/// (`k=v,k=v`).
fn encode_rls(domain: &str, entries: &str) -> Vec<u8> {
    let req = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .split(',')
                .map(|kv| {
                    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
                    Entry {
                        key: key.to_string(),
                        value: value.to_string(),
                    }
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: 1,
    };
    frame(req.encode_to_vec())
}

fn frame(msg: Vec<u8>) -> Vec<u8> {
    let mut framed = Vec::with_capacity(msg.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed
}

fn encode_grpc(n: usize, limit: &str, first: usize) -> Vec<u8> {
    let req = CheckRequest {
        requests: (first..first + n)
            .map(|i| CheckItem {
                limit: limit.to_string(),
                key: format!("tenant-{}", i % 1000),
                cost: Some(1),
                ..Default::default()
            })
            .collect(),
    };
    frame(req.encode_to_vec())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("encode-grpc") {
        let n: usize = args.get(1).map_or(Ok(1), |s| s.parse())?;
        let limit = args.get(2).map_or("bench", String::as_str);
        let first: usize = args.get(3).map_or(Ok(0), |s| s.parse())?;
        std::io::stdout().write_all(&encode_grpc(n, limit, first))?;
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("encode-rls") {
        let (Some(domain), Some(entries)) = (args.get(1), args.get(2)) else {
            anyhow::bail!("usage: drl-minimal-server encode-rls DOMAIN KEY=VALUE[,KEY=VALUE...]");
        };
        std::io::stdout().write_all(&encode_rls(domain, entries))?;
        return Ok(());
    }
    // The same tracing setup as `drl serve`: without a subscriber, the
    // spans of h2/tonic take tracing's slower `log` fallback, which cost
    // this server ~10k instructions per gRPC call that drl does not pay.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let mut http: SocketAddr = "127.0.0.1:18080".parse()?;
    let mut grpc: SocketAddr = "127.0.0.1:18081".parse()?;
    let mut threads = None;
    let mut tls_cert = None;
    let mut tls_key = None;
    let mut grpc_engine = GrpcEngine::Tonic;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--http" => {
                http = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--http ADDR"))?
                    .parse()?
            }
            "--grpc" => {
                grpc = it
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--grpc ADDR"))?
                    .parse()?
            }
            "--tls-cert" => {
                tls_cert = Some(
                    it.next()
                        .ok_or_else(|| anyhow::anyhow!("--tls-cert FILE"))?
                        .clone(),
                )
            }
            "--tls-key" => {
                tls_key = Some(
                    it.next()
                        .ok_or_else(|| anyhow::anyhow!("--tls-key FILE"))?
                        .clone(),
                )
            }
            "--grpc-engine" => match it.next().map(String::as_str) {
                Some("tonic") => grpc_engine = GrpcEngine::Tonic,
                Some("h2") => grpc_engine = GrpcEngine::H2,
                other => anyhow::bail!("--grpc-engine tonic|h2 (got {other:?})"),
            },
            "--threads" => {
                threads = Some(
                    it.next()
                        .ok_or_else(|| anyhow::anyhow!("--threads N"))?
                        .parse()?,
                )
            }
            other => anyhow::bail!(
                "usage: drl-minimal-server [--http ADDR] [--grpc ADDR] [--threads N] [--grpc-engine tonic|h2] [--tls-cert FILE --tls-key FILE] | encode-grpc N [LIMIT [FIRST]] | encode-rls DOMAIN K=V[,K=V...] (got {other:?})"
            ),
        }
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = threads {
        rt.worker_threads(n);
    }
    rt.build()?.block_on(async move {
        let app = Router::new().route("/v1/check", post(check));
        let http_l = tokio::net::TcpListener::bind(http).await?;
        let grpc_l = tokio::net::TcpListener::bind(grpc).await?;
        eprintln!(
            "drl-minimal-server: listening http={} grpc={}",
            http_l.local_addr()?,
            grpc_l.local_addr()?
        );
        if let (Some(cert), Some(key)) = (&tls_cert, &tls_key) {
            anyhow::ensure!(
                grpc_engine == GrpcEngine::Tonic,
                "--grpc-engine {} does not speak TLS here",
                format!("{grpc_engine:?}").to_lowercase()
            );
            let tls = |alpn: &[&[u8]]| {
                drl_server::tls::server_config(
                    &drl_server::tls::TlsConfig {
                        cert_file: cert.into(),
                        key_file: key.into(),
                        client_ca_file: None,
                    },
                    alpn,
                )
                .map(tokio_rustls::TlsAcceptor::from)
            };
            let routes = tonic::service::Routes::new(RateLimiterServer::new(Minimal))
                .add_service(RateLimitServiceServer::new(MinimalRls))
                .prepare();
            let h = serve_tls(http_l, tls(&[b"h2", b"http/1.1"])?, app, false);
            let g = serve_tls(grpc_l, tls(&[b"h2"])?, routes, true);
            tokio::select! {
                r = g => r?,
                r = h => r?,
            }
            return anyhow::Ok(());
        }
        let h = async move { anyhow::Ok(axum::serve(http_l, app).await?) };
        if grpc_engine == GrpcEngine::H2 {
            let g = serve_direct(grpc_l);
            tokio::select! {
                r = g => r?,
                r = h => r?,
            }
            return anyhow::Ok(());
        }
        let incoming = tonic::transport::server::TcpIncoming::from(grpc_l).with_nodelay(Some(true));
        let g = tonic::transport::Server::builder()
            .add_service(RateLimiterServer::new(Minimal))
            .add_service(RateLimitServiceServer::new(MinimalRls))
            .serve_with_incoming(incoming);
        tokio::select! {
            r = g => r?,
            r = h => r?,
        }
        anyhow::Ok(())
    })
}

/// The plainest TLS accept loop: handshake, then hyper-util's auto
/// HTTP/1.1 + HTTP/2 (HTTP/2 only for gRPC).
async fn serve_tls<S, B>(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    service: S,
    http2_only: bool,
) -> anyhow::Result<()>
where
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::http::Response<B>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    if http2_only {
        builder = builder.http2_only();
    }
    let builder = std::sync::Arc::new(builder);
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let (acceptor, builder, service) = (acceptor.clone(), builder.clone(), service.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper_util::service::TowerToHyperService::new(service);
            let _ = builder
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    }
}
