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
