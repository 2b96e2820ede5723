//! The sections of the native config that configure the server around
//! the limits: API tokens (`auth:`), the status page (`status:`) and a
//! listener's TLS (`server.http_tls`, `server.grpc_tls`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The `auth:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Tokens accepted by the APIs (HTTP checks, forward-auth, gRPC).
    #[serde(default)]
    pub tokens_file: Option<PathBuf>,
    /// Tokens accepted by `/metrics` (unset: those of `tokens_file`).
    #[serde(default)]
    pub metrics_tokens_file: Option<PathBuf>,
    /// Leave `/metrics` open when only `tokens_file` is set (default false).
    #[serde(default)]
    pub metrics_open: bool,
}

/// The `status:` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusConfig {
    /// Serve the status page at `/` and `GET /v1/status`, and record what
    /// they show (latency and top keys per limit). Default true.
    pub enabled: bool,
    /// How client keys (API keys, user ids) appear on the page and in
    /// `/v1/status`. Default `hash`.
    pub keys: KeyDisplay,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            keys: KeyDisplay::Hash,
        }
    }
}

/// How the status page shows client keys (`status.keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KeyDisplay {
    /// As they are.
    Show,
    /// As `sha256:` and the first 16 hex digits of the key's SHA-256 (an
    /// operator finds a known key by hashing it; the page never shows it).
    #[default]
    Hash,
    /// Not at all: every key list is empty (counts and totals stay).
    Hide,
}

impl KeyDisplay {
    /// `key` as this mode shows it (`None`: hidden).
    pub fn show(self, key: &str) -> Option<String> {
        use sha2::Digest as _;
        match self {
            KeyDisplay::Show => Some(key.to_string()),
            KeyDisplay::Hash => {
                let d = sha2::Sha256::digest(key.as_bytes());
                let mut out = String::with_capacity(23);
                out.push_str("sha256:");
                for b in &d[..8] {
                    out.push_str(&format!("{b:02x}"));
                }
                Some(out)
            }
            KeyDisplay::Hide => None,
        }
    }

    /// The mode as a small integer (for an atomic).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The mode [`KeyDisplay::code`] gave (unknown codes: `Hash`).
    pub fn from_code(c: u8) -> Self {
        match c {
            0 => KeyDisplay::Show,
            2 => KeyDisplay::Hide,
            _ => KeyDisplay::Hash,
        }
    }
}

/// The TLS settings of one listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the server certificate, then its intermediates.
    pub cert_file: PathBuf,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM file of CA certificates: when set, every client must present a
    /// certificate that chains to one of them (mutual TLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

impl TlsConfig {
    /// The files this config reads.
    pub fn files(&self) -> Vec<&Path> {
        let mut v = vec![self.cert_file.as_path(), self.key_file.as_path()];
        if let Some(ca) = &self.client_ca_file {
            v.push(ca);
        }
        v
    }
}

/// The `tracing:` section: OpenTelemetry spans of Envoy RLS calls
/// (`ShouldRateLimit Execution`, and `Redis Pipeline Execution` for each
/// store round trip), exported over OTLP in batches off the request path.
/// envoyproxy/ratelimit's `TRACING_*` settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Record and export spans (default false: no span is made).
    pub enabled: bool,
    /// How spans reach the collector: `http` (OTLP http/protobuf, the
    /// default) or `grpc`.
    pub protocol: OtlpProtocol,
    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` (`http`
    /// posts to its `/v1/traces`), e.g. `http://127.0.0.1:4318`. Unset:
    /// the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` variables, else `localhost` on 4318
    /// (`http`) or 4317 (`grpc`).
    pub endpoint: Option<String>,
    /// The resource's `service.name` (default `drl`).
    pub service_name: String,
    /// The resource's `service.namespace` (default empty: none).
    pub service_namespace: String,
    /// The resource's `service.instance.id` (default: a random version-4
    /// UUID per process).
    pub service_instance_id: Option<String>,
    /// The share of new traces recorded, 0.0 to 1.0 (default 1.0); a call
    /// carrying a parent trace context follows the parent's decision.
    pub sampling_rate: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            protocol: OtlpProtocol::Http,
            endpoint: None,
            service_name: "drl".into(),
            service_namespace: String::new(),
            service_instance_id: None,
            sampling_rate: 1.0,
        }
    }
}

/// The OTLP transport (`tracing.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP over HTTP with protobuf bodies.
    #[default]
    Http,
    /// OTLP over gRPC.
    Grpc,
}

impl TracingConfig {
    /// The first setting that cannot work, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, String)> {
        let rate = self.sampling_rate;
        if !(0.0..=1.0).contains(&rate) {
            return Some((
                "sampling_rate:",
                format!("tracing.sampling_rate must be between 0.0 and 1.0, not {rate}"),
            ));
        }
        if self.service_name.is_empty() {
            return Some((
                "service_name:",
                "tracing.service_name must not be empty".into(),
            ));
        }
        if let Some(e) = &self.endpoint {
            let uri = e.parse::<http::Uri>().ok();
            let scheme = uri.as_ref().and_then(|u| u.scheme_str());
            if !matches!(scheme, Some("http" | "https"))
                || uri.as_ref().and_then(|u| u.host()).is_none()
            {
                return Some((
                    "endpoint:",
                    format!(
                        "tracing.endpoint {e:?} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:4318)"
                    ),
                ));
            }
        }
        None
    }
}
