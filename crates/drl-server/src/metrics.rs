//! Prometheus metrics. Handles are registered once per limit at config
//! load, so a decision only bumps an atomic. Labels are bounded: the limit
//! name (from the config) and the result, never the key.
//!
//! - `drl_decisions_total{limit,result}`: result is `allowed` or `denied`
//!   (a shadow-mode limit counts what it would have decided).
//! - `drl_shadow_allowed_total{limit}`: denials a shadow-mode limit let through.
//! - `drl_request_duration_seconds{api}`: time to decide one request (a
//!   batch counts once), api in `http_check|forward_auth|grpc_check|envoy_rls`.
//! - `drl_requests_rejected_total{api,reason}`: requests refused before
//!   deciding (bad JSON, unknown limit, bad cost, ...).
//! - `drl_config_reloads_total{result}`: `ok` or `error`.

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Per-limit counter handles.
#[derive(Debug, Clone)]
pub struct LimitMetrics {
    /// `result="allowed"`.
    pub allowed: Counter,
    /// `result="denied"`.
    pub denied: Counter,
    /// Shadow-mode overrides.
    pub shadow: Counter,
}

impl LimitMetrics {
    /// Registers the handles of limit `name`.
    pub fn new(name: &str) -> Self {
        let n = name.to_string();
        Self {
            allowed: metrics::counter!("drl_decisions_total", "limit" => n.clone(), "result" => "allowed"),
            denied: metrics::counter!("drl_decisions_total", "limit" => n.clone(), "result" => "denied"),
            shadow: metrics::counter!("drl_shadow_allowed_total", "limit" => n),
        }
    }

    /// Counts one decision.
    #[inline]
    pub fn record(&self, allowed: bool) {
        if allowed {
            self.allowed.increment(1);
        } else {
            self.denied.increment(1);
        }
    }
}

/// The APIs that decide, as metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/check`.
    HttpCheck,
    /// The forward-auth endpoint.
    ForwardAuth,
    /// The native gRPC API.
    GrpcCheck,
    /// Envoy RLS v3.
    EnvoyRls,
}

impl Api {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Api::HttpCheck => "http_check",
            Api::ForwardAuth => "forward_auth",
            Api::GrpcCheck => "grpc_check",
            Api::EnvoyRls => "envoy_rls",
        }
    }
}

/// Latency histograms per API, registered once.
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    hist: [Histogram; 4],
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiMetrics {
    /// Registers the histograms.
    pub fn new() -> Self {
        let h =
            |api: Api| metrics::histogram!("drl_request_duration_seconds", "api" => api.label());
        Self {
            hist: [
                h(Api::HttpCheck),
                h(Api::ForwardAuth),
                h(Api::GrpcCheck),
                h(Api::EnvoyRls),
            ],
        }
    }

    /// Records one request's decision time.
    #[inline]
    pub fn observe(&self, api: Api, since: std::time::Instant) {
        self.hist[api as usize].record(since.elapsed().as_secs_f64());
    }
}

/// Counts a request refused before deciding.
pub fn rejected(api: Api, reason: &'static str) {
    metrics::counter!("drl_requests_rejected_total", "api" => api.label(), "reason" => reason)
        .increment(1);
}

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn install() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("drl_request_duration_seconds".to_string()),
                    &[
                        0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5,
                        0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                    ],
                )
                .expect("non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first (tests);
            // then this handle renders an empty registry, which is fine.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
