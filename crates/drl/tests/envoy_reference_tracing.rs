//! envoyproxy/ratelimit's tracing (`TRACING_*`, drl's `tracing:`), ported to
//! a real `drl serve` exporting over OTLP to a collector this test runs on
//! loopback (OTLP http/protobuf on axum, OTLP gRPC on tonic, both decoding
//! opentelemetry-proto's `ExportTraceServiceRequest`):
//! - `TestServiceTracer` (`test/service/ratelimit_test.go`): one
//!   `ShouldRateLimit` call records exactly one span, `ShouldRateLimit
//!   Execution`, over either protocol.
//! - `TestRedisTracer` (`test/redis/fixed_cache_impl_test.go`): one call on
//!   a rule counted in a real redis-server records exactly one `Redis
//!   Pipeline Execution` span, here the child of the call's span.
//!
//! And what the reference's settings promise: the span continues the
//! trace a call carries (W3C `traceparent`, B3); a sampling rate of 0
//! records only calls whose parent was sampled; tracing off exports
//! nothing; a collector that never answers neither delays nor fails a
//! decision. Verdicts on "nothing more" are taken after SIGTERM, once drl
//! has exited: its shutdown flushes every queued span, so the collector
//! then holds all it will ever get.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::{Drl, Redis, wait_for};
use drl_test_kit::envoy::request;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message as _;

const RLS_SPAN: &str = "ShouldRateLimit Execution";
const REDIS_SPAN: &str = "Redis Pipeline Execution";

/// One exported span, as the collector received it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    /// The resource's attributes and the span's, as strings.
    resource: Vec<(String, String)>,
    attributes: Vec<(String, String)>,
    /// The status: code (0 unset, 2 error) and message.
    status: (i32, String),
}

fn strings(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn get<'a>(kvs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    kvs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

type Received = Arc<Mutex<Vec<Span>>>;

fn record(req: ExportTraceServiceRequest, into: &Received) {
    let mut spans = into.lock().unwrap();
    for rs in req.resource_spans {
        let resource = strings(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            for s in ss.spans {
                spans.push(Span {
                    name: s.name,
                    trace_id: s.trace_id,
                    span_id: s.span_id,
                    parent_span_id: s.parent_span_id,
                    resource: resource.clone(),
                    attributes: strings(&s.attributes),
                    status: s
                        .status
                        .map_or((0, String::new()), |st| (st.code, st.message)),
                });
            }
        }
    }
}

/// An OTLP collector on 127.0.0.1, on its own thread and runtime.
struct Collector {
    addr: SocketAddr,
    spans: Received,
}

#[derive(Clone)]
struct GrpcCollector(Received);

#[tonic::async_trait]
impl TraceService for GrpcCollector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        record(req.into_inner(), &self.0);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// OTLP over HTTP: `POST /v1/traces` with a protobuf body.
    fn http() -> Self {
        Self::start(|listener, spans| {
            Box::pin(async move {
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |body: bytes::Bytes| async move {
                        let req = ExportTraceServiceRequest::decode(body)
                            .expect("an ExportTraceServiceRequest");
                        record(req, &spans);
                        (
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }),
                );
                axum::serve(listener, app).await.unwrap();
            })
        })
    }

    /// OTLP over gRPC: `TraceService/Export`.
    fn grpc() -> Self {
        Self::start(|listener, spans| {
            Box::pin(async move {
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(GrpcCollector(spans)))
                    .serve_with_incoming(incoming)
                    .await
                    .unwrap();
            })
        })
    }

    fn start(
        serve: impl FnOnce(
            tokio::net::TcpListener,
            Received,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + 'static,
    ) -> Self {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let spans: Received = Arc::default();
        let theirs = spans.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                serve(listener, theirs).await;
            });
        });
        Collector { addr, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    fn named(&self, name: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }
}

/// drl's config: `tracing` settings (YAML flow map entries), one domain
/// `test-domain` whose `hello: world` allows 10 an hour, counted in
/// `redis` when given.
fn config(tracing: &str, redis: Option<&Redis>) -> String {
    let store = redis.map_or(String::new(), |r| {
        format!(
            "server: {{envoy_scope: redis}}
redis: {{url: {}}}
redis_resilience:
  default_policy: {{timeout_ms: 30000, on_store_error: deny}}
",
            r.url()
        )
    });
    format!(
        "tracing: {{{tracing}}}
{store}envoy:
  - domain: test-domain
    descriptors:
      - key: hello
        value: world
        rate_limit: {{unit: hour, requests_per_unit: 10}}
"
    )
}

/// One `ShouldRateLimit` for `hello: world` with the metadata `headers`;
/// the overall code.
async fn ask(drl: &Drl, headers: &[(&'static str, &str)]) -> i32 {
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let mut req = tonic::Request::new(request("test-domain", &[&[("hello", "world")]], 1));
    for (k, v) in headers {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    c.should_rate_limit(req)
        .await
        .unwrap()
        .into_inner()
        .overall_code
}

/// SIGTERM, then the exit: every span drl queued has been exported. Waited
/// for off the test's runtime, which meanwhile closes the client's
/// connections (drl's drain waits for them).
async fn stop(mut drl: Drl) -> Drl {
    tokio::task::spawn_blocking(move || {
        drl.signal("TERM");
        assert!(drl.wait_exit().success(), "drl exited with a failure");
        drl
    })
    .await
    .unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// TestServiceTracer: one call, exactly one `ShouldRateLimit Execution`
/// span, with the resource the settings name.
async fn service_tracer(collector: Collector, protocol: &str) {
    let drl = Drl::start(&config(
        &format!(
            "enabled: true, protocol: {protocol}, endpoint: \"{}\", service_namespace: edge, service_instance_id: drl-0",
            collector.endpoint()
        ),
        None,
    ));
    drl.wait_log("tracing: exporting RLS spans over OTLP");
    assert_eq!(ask(&drl, &[]).await, Code::Ok as i32);
    // Exported in a batch while drl runs (the schedule's delay), not only
    // at shutdown.
    wait_for("the call's span at the collector", || {
        !collector.spans().is_empty()
    });
    stop(drl).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let s = &spans[0];
    assert_eq!(s.name, RLS_SPAN);
    assert!(s.parent_span_id.is_empty(), "a root span: {s:?}");
    assert_eq!(s.status.0, 0, "an answered call's status is unset: {s:?}");
    assert_eq!(get(&s.attributes, "domain"), Some("test-domain"));
    // No descriptor value leaves the process in a span.
    assert!(
        s.attributes.iter().all(|(_, v)| !v.contains("world")),
        "{s:?}"
    );
    assert_eq!(get(&s.resource, "service.name"), Some("drl"));
    assert_eq!(get(&s.resource, "service.namespace"), Some("edge"));
    assert_eq!(get(&s.resource, "service.instance.id"), Some("drl-0"));
}

#[tokio::test]
async fn service_tracer_over_http() {
    service_tracer(Collector::http(), "http").await;
}

#[tokio::test]
async fn service_tracer_over_grpc() {
    service_tracer(Collector::grpc(), "grpc").await;
}

/// TestRedisTracer: one call on a rule counted in Redis, exactly one
/// `Redis Pipeline Execution` span, a child of the call's span.
#[tokio::test]
async fn redis_tracer() {
    let redis = Redis::start();
    let collector = Collector::http();
    let drl = Drl::start(&config(
        &format!("enabled: true, endpoint: \"{}\"", collector.endpoint()),
        Some(&redis),
    ));
    assert_eq!(ask(&drl, &[]).await, Code::Ok as i32);
    stop(drl).await;
    let pipeline = collector.named(REDIS_SPAN);
    assert_eq!(pipeline.len(), 1, "{:#?}", collector.spans());
    let rls = collector.named(RLS_SPAN);
    assert_eq!(rls.len(), 1, "{:#?}", collector.spans());
    assert_eq!(collector.spans().len(), 2);
    assert_eq!(pipeline[0].trace_id, rls[0].trace_id);
    assert_eq!(pipeline[0].parent_span_id, rls[0].span_id);
}

/// A call carrying a trace context is a child of it: W3C `traceparent`,
/// B3 single header, B3 multiple headers.
#[tokio::test]
async fn the_span_continues_the_callers_trace() {
    let collector = Collector::http();
    let drl = Drl::start(&config(
        &format!("enabled: true, endpoint: \"{}\"", collector.endpoint()),
        None,
    ));
    let w3c = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let b3 = ("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1");
    let b3_multi = ("463ac35c9f6413ad48485a3953bb6124", "0020000000000001");
    let traceparent = format!("00-{}-{}-01", w3c.0, w3c.1);
    ask(&drl, &[("traceparent", &traceparent)]).await;
    ask(&drl, &[("b3", &format!("{}-{}-1", b3.0, b3.1))]).await;
    ask(
        &drl,
        &[
            ("x-b3-traceid", b3_multi.0),
            ("x-b3-spanid", b3_multi.1),
            ("x-b3-sampled", "1"),
        ],
    )
    .await;
    stop(drl).await;
    let spans = collector.named(RLS_SPAN);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    for (trace, parent) in [w3c, b3, b3_multi] {
        let found = spans.iter().find(|s| s.trace_id == hex(trace));
        let s = found.unwrap_or_else(|| panic!("no span in trace {trace}: {spans:#?}"));
        assert_eq!(s.parent_span_id, hex(parent));
    }
}

/// `sampling_rate: 0`: no new trace is recorded; a call whose parent was
/// sampled still is (the parent-based sampler), and one whose parent was
/// not is not.
#[tokio::test]
async fn sampling_rate_zero_records_only_sampled_parents() {
    let collector = Collector::http();
    let drl = Drl::start(&config(
        &format!(
            "enabled: true, sampling_rate: 0, endpoint: \"{}\"",
            collector.endpoint()
        ),
        None,
    ));
    for _ in 0..5 {
        ask(&drl, &[]).await;
    }
    let sampled = "0af7651916cd43dd8448eb211c80319c";
    let unsampled = "1af7651916cd43dd8448eb211c80319c";
    ask(
        &drl,
        &[(
            "traceparent",
            &format!("00-{unsampled}-b7ad6b7169203331-00"),
        )],
    )
    .await;
    ask(
        &drl,
        &[("traceparent", &format!("00-{sampled}-b7ad6b7169203331-01"))],
    )
    .await;
    stop(drl).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].trace_id, hex(sampled));
}

/// Tracing off (the default), even with an endpoint: nothing is exported.
#[tokio::test]
async fn tracing_off_exports_nothing() {
    let collector = Collector::http();
    let drl = Drl::start(&config(
        &format!("enabled: false, endpoint: \"{}\"", collector.endpoint()),
        None,
    ));
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for _ in 0..3 {
        assert_eq!(
            ask(&drl, &[("traceparent", traceparent)]).await,
            Code::Ok as i32
        );
    }
    let drl = stop(drl).await;
    assert!(collector.spans().is_empty(), "{:#?}", collector.spans());
    let log = drl.log.lock().unwrap().join("\n");
    assert!(!log.contains("tracing: exporting"), "{log}");
}

/// A collector that accepts connections but never answers (and one that
/// refuses them): every decision is still answered, and drl still stops.
#[tokio::test]
async fn a_dead_collector_neither_blocks_nor_fails_decisions() {
    // Accepted by the kernel, never read: each export waits out its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = common::free_port();
    for (protocol, endpoint) in [
        ("http", format!("http://{}", silent.local_addr().unwrap())),
        ("grpc", format!("http://{}", silent.local_addr().unwrap())),
        ("http", format!("http://127.0.0.1:{refused}")),
    ] {
        let drl = Drl::start(&config(
            &format!("enabled: true, protocol: {protocol}, endpoint: \"{endpoint}\""),
            None,
        ));
        let mut codes = Vec::new();
        for _ in 0..12 {
            codes.push(ask(&drl, &[]).await);
        }
        // The rule allows 10 an hour (the launcher starts drl clear of
        // the hour's end): decided as without tracing.
        let mut want = vec![Code::Ok as i32; 10];
        want.extend([Code::OverLimit as i32; 2]);
        assert_eq!(codes, want, "{protocol} {endpoint}");
        stop(drl).await;
    }
    drop(silent);
}

/// Starts `drl serve` (drl-test-kit's launcher) with `env` added to its
/// environment.
fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Drl {
    Drl(drl_test_kit::drl::Drl::start_env(
        std::path::Path::new(common::BIN),
        yaml,
        env,
    ))
}

/// No `tracing.endpoint`: the standard `OTEL_EXPORTER_OTLP_ENDPOINT` names
/// the collector (as the reference takes it), and `OTEL_BSP_SCHEDULE_DELAY`
/// the batch's delay.
#[tokio::test]
async fn the_endpoint_comes_from_the_otel_variables() {
    let collector = Collector::http();
    let drl = start_with_env(
        &config("enabled: true", None),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint()),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    assert_eq!(ask(&drl, &[]).await, Code::Ok as i32);
    wait_for("the call's span at the collector", || {
        collector.named(RLS_SPAN).len() == 1
    });
    stop(drl).await;
    assert_eq!(collector.spans().len(), 1, "{:#?}", collector.spans());
}

/// A call answered with an error status (Redis gone, `on_store_error:
/// error`) marks its span failed, naming the status.
#[tokio::test]
async fn a_failed_call_marks_its_span() {
    let mut redis = Redis::start();
    let collector = Collector::http();
    let drl = Drl::start(&format!(
        "tracing: {{enabled: true, endpoint: \"{}\"}}
server: {{envoy_scope: redis}}
redis: {{url: {}}}
redis_resilience:
  default_policy: {{timeout_ms: 2000, on_store_error: error}}
envoy:
  - domain: test-domain
    descriptors:
      - key: hello
        rate_limit: {{unit: hour, requests_per_unit: 10}}
",
        collector.endpoint(),
        redis.url()
    ));
    redis.kill();
    let mut c = RateLimitServiceClient::connect(drl.grpc_url())
        .await
        .unwrap();
    let req = request("test-domain", &[&[("hello", "world")]], 1);
    let err = c.should_rate_limit(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    drop(c);
    stop(drl).await;
    let rls = collector.named(RLS_SPAN);
    assert_eq!(rls.len(), 1, "{:#?}", collector.spans());
    assert_eq!(rls[0].status.0, 2, "{:?}", rls[0]);
    assert!(rls[0].status.1.contains("Unavailable"), "{:?}", rls[0]);
}
