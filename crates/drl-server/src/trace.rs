//! OpenTelemetry spans of Envoy RLS calls (`tracing:`, envoyproxy/ratelimit's
//! `TRACING_*`): `ShouldRateLimit Execution` around each `ShouldRateLimit`
//! decision, the child of the trace context the call carries (W3C
//! `traceparent`, B3 single or multiple headers; baggage is read too), and
//! `Redis Pipeline Execution` around each store round trip it makes.
//!
//! Spans leave in batches on the SDK's own thread (OTLP over http/protobuf
//! or gRPC): a request only queues its finished span, and a full queue
//! drops spans, so a slow or dead collector never delays nor fails a
//! decision. Off (the default), nothing is installed: every function here
//! returns at one atomic load, making no span and allocating nothing.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{
    Extractor, Injector, TextMapCompositePropagator, TextMapPropagator,
};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator, Sampler, SdkTracer};
use opentelemetry_sdk::trace::{SdkTracerProvider, Span as SdkSpan};

use drl_config::sections::{OtlpProtocol, TracingConfig};

/// The span around one `ShouldRateLimit` decision (the reference's name).
pub const RLS_SPAN: &str = "ShouldRateLimit Execution";
/// The span around one store round trip of an RLS decision.
pub const REDIS_SPAN: &str = "Redis Pipeline Execution";

/// What an installed tracer needs on the request path.
struct Tracing {
    tracer: SdkTracer,
    propagator: TextMapCompositePropagator,
}

/// Set once, by [`install`]; unset, tracing is off.
static TRACING: OnceLock<Tracing> = OnceLock::new();

/// The exporting provider, flushed by [`Installed::shutdown`].
#[derive(Debug)]
pub struct Installed {
    provider: SdkTracerProvider,
}

/// Installs the tracer `cfg` describes, or nothing when it is off. Must run
/// inside the tokio runtime (the gRPC exporter's channel lives there); a
/// process installs at most one.
pub fn install(cfg: &TracingConfig) -> anyhow::Result<Option<Installed>> {
    if !cfg.enabled {
        return Ok(None);
    }
    let exporter = match cfg.protocol {
        OtlpProtocol::Http => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary);
            if let Some(e) = &cfg.endpoint {
                b = b.with_endpoint(format!("{}/v1/traces", e.trim_end_matches('/')));
            }
            b.build()?
        }
        OtlpProtocol::Grpc => {
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(e) = &cfg.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()?
        }
    };
    let instance = cfg.service_instance_id.clone().unwrap_or_else(random_uuid);
    let mut attributes = vec![KeyValue::new("service.instance.id", instance.clone())];
    if !cfg.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            cfg.service_namespace.clone(),
        ));
    }
    let resource = Resource::builder()
        .with_service_name(cfg.service_name.clone())
        .with_attributes(attributes)
        .build();
    // A call whose parent was sampled is recorded, one whose parent was
    // not is not; a new trace is recorded at `sampling_rate`.
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sampling_rate)));
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let propagator = TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(B3),
        Box::new(BaggagePropagator::new()),
    ]);
    let tracing = Tracing {
        tracer: provider.tracer("drl"),
        propagator,
    };
    if TRACING.set(tracing).is_err() {
        anyhow::bail!("tracing is already installed in this process");
    }
    tracing::info!(
        protocol = ?cfg.protocol,
        endpoint = cfg.endpoint.as_deref().unwrap_or("(OTEL_EXPORTER_OTLP_* or the default)"),
        service_name = %cfg.service_name,
        service_namespace = %cfg.service_namespace,
        service_instance_id = %instance,
        sampling_rate = cfg.sampling_rate,
        "tracing: exporting RLS spans over OTLP"
    );
    Ok(Some(Installed { provider }))
}

impl Installed {
    /// Exports the spans still queued (waiting for at most `timeout`) and
    /// stops the exporter.
    pub async fn shutdown(self, timeout: Duration) {
        let provider = self.provider;
        // Blocking (the batch thread's flush); off the runtime's workers,
        // which the gRPC exporter's channel needs meanwhile.
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(timeout));
        match done.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("tracing: the last spans were not exported: {e}"),
            Err(e) => tracing::warn!("tracing: shutdown failed: {e}"),
        }
    }
}

/// A random version-4 UUID (the default `service.instance.id`).
fn random_uuid() -> String {
    let mut b = RandomIdGenerator::default().new_trace_id().to_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// An RLS call's span, as the context its work runs in.
#[derive(Debug)]
pub struct RlsSpan(Context);

/// Starts the span of one `ShouldRateLimit` call whose request carried
/// `headers`; `None` (at one atomic load) when tracing is off, and when
/// the call is not sampled.
pub fn rls_span(headers: &http::HeaderMap) -> Option<RlsSpan> {
    let t = TRACING.get()?;
    let parent = t
        .propagator
        .extract_with_context(&Context::new(), &Headers(headers));
    let span = t
        .tracer
        .span_builder(RLS_SPAN)
        .with_kind(SpanKind::Server)
        .start_with_context(&t.tracer, &parent);
    // Not sampled: nothing is recorded, nor would its store round trips
    // be (their sampler follows this span), so the call runs as untraced.
    if !span.is_recording() {
        return None;
    }
    Some(RlsSpan(parent.with_span(span)))
}

/// `fut` run in `span` (its store round trips are the span's children),
/// boxed: calls without a span keep their futures as they are. A call
/// answered with an error status marks the span failed; the span ends
/// when the future finishes or is dropped.
pub fn within<T>(
    span: RlsSpan,
    fut: impl Future<Output = Result<T, tonic::Status>>,
) -> std::pin::Pin<Box<impl Future<Output = Result<T, tonic::Status>>>> {
    Box::pin(async move {
        let cx = span.0.clone();
        let out = fut.with_context(span.0).await;
        if let Err(e) = &out {
            let why = format!("{:?}: {}", e.code(), e.message());
            cx.span()
                .set_status(opentelemetry::trace::Status::error(why));
        }
        out
    })
}

/// The span of the RLS call running on this thread, to carry into a task
/// it spawns; `None` when tracing is off or no call is traced here.
pub fn current() -> Option<RlsSpan> {
    TRACING.get()?;
    let cx = Context::current();
    cx.has_active_span().then_some(RlsSpan(cx))
}

/// Notes the call's domain on its span, when it is recorded.
pub fn note_domain(domain: &str) {
    if TRACING.get().is_none() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new("domain", domain.to_owned()));
        }
    });
}

/// A store round trip's span; it ends when dropped.
#[derive(Debug)]
pub struct StoreSpan(#[allow(dead_code)] Box<SdkSpan>);

/// Starts the span of one store round trip of the RLS call running on this
/// thread; `None` when tracing is off or no call is traced here.
pub fn store_span() -> Option<StoreSpan> {
    let t = TRACING.get()?;
    let parent = Context::current();
    if !parent.has_active_span() {
        return None;
    }
    let span = t
        .tracer
        .span_builder(REDIS_SPAN)
        .with_kind(SpanKind::Client)
        .start_with_context(&t.tracer, &parent);
    Some(StoreSpan(Box::new(span)))
}

/// A header map as the propagators read it.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// B3 propagation, read only (drl makes no outgoing traced calls): the
/// single `b3` header (`{trace}-{span}[-{sampled}[-{parent}]]`), else the
/// `x-b3-*` headers. A 64-bit trace id is widened with leading zeros.
#[derive(Debug)]
struct B3;

const B3_FIELDS: [String; 0] = [];

impl TextMapPropagator for B3 {
    fn inject_context(&self, _cx: &Context, _injector: &mut dyn Injector) {}

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        match b3_context(extractor) {
            Some(sc) => cx.with_remote_span_context(sc),
            None => cx.clone(),
        }
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(&B3_FIELDS)
    }
}

/// The remote span a request's B3 headers name, if they name a valid one.
fn b3_context(headers: &dyn Extractor) -> Option<SpanContext> {
    let (trace, span, sampled) = match headers.get("b3") {
        Some(single) => {
            let mut parts = single.split('-');
            let trace = parts.next()?;
            let span = parts.next()?;
            (trace, span, parts.next())
        }
        None => {
            let sampled = match headers.get("x-b3-flags") {
                Some("1") => Some("d"),
                _ => headers.get("x-b3-sampled"),
            };
            (
                headers.get("x-b3-traceid")?,
                headers.get("x-b3-spanid")?,
                sampled,
            )
        }
    };
    let trace = match trace.len() {
        16 | 32 => TraceId::from_hex(trace).ok()?,
        _ => return None,
    };
    let span = (span.len() == 16)
        .then(|| SpanId::from_hex(span).ok())
        .flatten()?;
    let flags = match sampled {
        Some("1" | "d" | "true") => TraceFlags::SAMPLED,
        Some("0" | "false") => TraceFlags::default(),
        // Deferred: no flag, so the parent-based sampler records nothing
        // (as the reference's B3 propagator leaves it).
        None => TraceFlags::default(),
        Some(_) => return None,
    };
    let sc = SpanContext::new(trace, span, flags, true, TraceState::default());
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn b3(pairs: &[(&str, &str)]) -> Option<SpanContext> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        b3_context(&map)
    }

    #[test]
    fn b3_single_and_multiple_headers_name_the_remote_span() {
        let single = b3(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1")]).unwrap();
        assert_eq!(
            single.trace_id(),
            TraceId::from_hex("80f198ee56343ba864fe8b2a57d3eff7").unwrap()
        );
        assert_eq!(
            single.span_id(),
            SpanId::from_hex("e457b5a2e4d86bd1").unwrap()
        );
        assert!(single.is_sampled() && single.is_remote());
        let multi = b3(&[
            ("x-b3-traceid", "64fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-sampled", "0"),
        ])
        .unwrap();
        assert_eq!(
            multi.trace_id(),
            TraceId::from_hex("64fe8b2a57d3eff7").unwrap()
        );
        assert!(!multi.is_sampled());
        let debug = b3(&[
            ("x-b3-traceid", "64fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-flags", "1"),
        ])
        .unwrap();
        assert!(debug.is_sampled());
    }

    #[test]
    fn malformed_b3_is_ignored() {
        for bad in [
            "0",
            "80f198ee56343ba864fe8b2a57d3eff7",
            "80f198ee-e457b5a2e4d86bd1-1",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2-1",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-x",
            "00000000000000000000000000000000-e457b5a2e4d86bd1-1",
            "zz f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
        ] {
            assert_eq!(b3(&[("b3", bad)]), None, "{bad}");
        }
    }

    #[test]
    fn random_uuids_are_version_4() {
        let a = random_uuid();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a, random_uuid());
    }

    #[test]
    fn off_makes_no_span() {
        // No test in this crate installs a tracer.
        assert!(rls_span(&http::HeaderMap::new()).is_none());
        assert!(store_span().is_none());
        assert!(current().is_none());
    }
}
