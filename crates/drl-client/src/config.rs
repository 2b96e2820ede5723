//! The limits of a `drl serve` config file, read for deciding in-process.
//!
//! The same file `drl serve --config` takes: the `limits:` list is read
//! with drl-config's limit schema ([`drl_config::limits`], the one the
//! server reads), and `server.max_key_bytes` / `server.max_cost`. The
//! server's other sections (`listen`, `redis`, `cluster`, `orbit`, `auth`,
//! ...) are the server's business and are not read here. Errors carry the
//! file, line and column. `crates/drl/tests/client_config.rs` holds this
//! reader and the server's to the same answers.

use std::path::Path;

use drl_config::limits::check_unique_names;
use drl_config::{DEFAULT_MAX_COST, DEFAULT_MAX_KEY_BYTES, yaml_error};
use serde::Deserialize;

pub use drl_config::{ConfigError, LimitConfig, Scope};

/// The part of a config file the client reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The limits, in file order.
    pub limits: Vec<LimitConfig>,
    /// `server.max_key_bytes` (default 1,024).
    pub max_key_bytes: usize,
    /// `server.max_cost` (default 1,000,000,000).
    pub max_cost: u64,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    limits: Vec<LimitConfig>,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    domain: Option<serde_norway::Value>,
}

#[derive(Deserialize, Default)]
struct RawServer {
    #[serde(default)]
    max_key_bytes: Option<usize>,
    #[serde(default)]
    max_cost: Option<u64>,
}

impl ClientConfig {
    /// Parses a config text; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        let raw: RawFile = serde_norway::from_str(text).map_err(|e| yaml_error(source_name, &e))?;
        if raw.domain.is_some() {
            return Err(ConfigError::new(
                source_name,
                "an envoyproxy/ratelimit file (top-level `domain:`) has descriptors, not named limits: decide it with `drl serve` (Remote), or write it as drl `limits:`",
            )
            .locate(text, &["domain:"]));
        }
        let limits = raw.limits;
        check_unique_names(&limits, text, source_name)?;
        let max_key_bytes = raw.server.max_key_bytes.unwrap_or(DEFAULT_MAX_KEY_BYTES);
        let max_cost = raw.server.max_cost.unwrap_or(DEFAULT_MAX_COST);
        for (field, zero) in [
            ("max_key_bytes:", max_key_bytes == 0),
            ("max_cost:", max_cost == 0),
        ] {
            if zero {
                return Err(ConfigError::new(
                    source_name,
                    format!(
                        "server.{} must be at least 1 (0 would refuse every request)",
                        field.trim_end_matches(':')
                    ),
                )
                .locate(text, &[field]));
            }
        }
        Ok(Self {
            limits,
            max_key_bytes,
            max_cost,
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, format!("cannot read: {e}")))?;
        Self::parse(&text, &name)
    }

    /// The limit named `name`.
    pub fn limit(&self, name: &str) -> Option<&LimitConfig> {
        self.limits.iter().find(|l| l.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::Algorithm;

    #[test]
    fn reads_limits_and_ignores_server_sections() {
        let c = ClientConfig::parse(
            "listen: {http: 127.0.0.1:9}\nserver: {max_key_bytes: 64, max_batch: 5}\nlimits:\n  - name: api\n    quota: 10/s\n    burst: 4\n  - name: h\n    algorithm: fixed-window\n    quotas: [5/h, 2/m]\n    scope: redis\nredis: {url: \"redis://x\"}\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.max_key_bytes, 64);
        assert_eq!(c.limits.len(), 2);
        assert_eq!(c.limits[0].quotas[0].burst(), 4);
        assert_eq!(c.limits[1].algorithm, Algorithm::FixedWindow);
        assert_eq!(c.limits[1].scope, Scope::Redis);
    }

    #[test]
    fn errors_have_line_and_column() {
        let e =
            ClientConfig::parse("limits:\n  - name: a\n    quota: 10/x\n", "f.yaml").unwrap_err();
        assert_eq!(e.source_name, "f.yaml");
        assert_eq!(e.line, Some(3), "{e}");
        let e = ClientConfig::parse("limits:\n  - name: a\n    qouta: 1/s\n", "f").unwrap_err();
        assert!(e.to_string().contains("qouta"), "{e}");
        let e = ClientConfig::parse(
            "limits:\n  - name: a\n    quota: 1/s\n  - name: a\n    quota: 2/s\n",
            "f",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        let e = ClientConfig::parse("domain: x\ndescriptors: []\n", "f").unwrap_err();
        assert!(e.to_string().contains("envoyproxy"), "{e}");
    }
}
