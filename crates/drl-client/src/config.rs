//! The limits of a `drl serve` config file, read for deciding in-process.
//!
//! The same file `drl serve --config` takes: the `limits:` list is read
//! with the server's rules (names, algorithms, quotas, `burst`, `scope`,
//! `max_keys`, `max_bytes`, `shadow`, `key`), and `server.max_key_bytes` /
//! `server.max_cost`. The server's other sections (`listen`, `redis`,
//! `cluster`, `orbit`, `auth`, ...) are the server's business and are not
//! read here. Errors carry the file, line and column.
//!
//! This is the minimal piece of drl-server's loader an application needs,
//! without the server's dependencies; `crates/drl/tests/client_config.rs`
//! holds the two readers to the same answers.

use std::fmt;
use std::path::Path;

use drl_core::{Algorithm, Quota};
use serde::Deserialize;

/// Where a limit's state lives, as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This process only, in memory: what [`crate::InProcess`] decides.
    #[default]
    Local,
    /// Redis (the server's).
    Redis,
    /// A gossip cluster (the server's).
    Gossip,
    /// An Orbit ring (the server's).
    Orbit,
}

/// One named limit of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    /// The limit's name.
    pub name: String,
    /// The algorithm (default `gcra`).
    pub algorithm: Algorithm,
    /// One or more quotas, checked all-or-nothing.
    pub quotas: Vec<Quota>,
    /// Where the server keeps its state.
    pub scope: Scope,
    /// Most keys held (default 1,000,000).
    pub max_keys: usize,
    /// Most bytes held (default `max_keys` x 128).
    pub max_bytes: usize,
    /// Decide and count, but always admit.
    pub shadow: bool,
}

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

pub use drl_core::ConfigError;

const DEFAULT_MAX_KEYS: usize = 1_000_000;
const DEFAULT_MAX_KEY_BYTES: usize = 1024;
const DEFAULT_MAX_COST: u64 = 1_000_000_000;

#[derive(Deserialize)]
struct RawFile {
    #[serde(default)]
    limits: Vec<RawLimit>,
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

/// One quota: `100/s`, or `{quota: 100/s, burst: 20}`.
struct QuotaEntry(Quota);

impl<'de> Deserialize<'de> for QuotaEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = QuotaEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quota such as 100/s, or {quota: 100/s, burst: 20}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<QuotaEntry, E> {
                Quota::parse(v).map(QuotaEntry).map_err(E::custom)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<QuotaEntry, A::Error> {
                let mut quota: Option<QuotaEntry> = None;
                let mut burst: Option<u64> = None;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "quota" => quota = Some(m.next_value()?),
                        "burst" => burst = Some(m.next_value()?),
                        other => {
                            return Err(serde::de::Error::unknown_field(
                                other,
                                &["quota", "burst"],
                            ));
                        }
                    }
                }
                let q = quota
                    .ok_or_else(|| serde::de::Error::missing_field("quota"))?
                    .0;
                match burst {
                    Some(b) => q
                        .burst_of(b)
                        .map(QuotaEntry)
                        .map_err(serde::de::Error::custom),
                    None => Ok(QuotaEntry(q)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct AlgorithmName(#[serde(deserialize_with = "algorithm")] Algorithm);

fn algorithm<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Algorithm, D::Error> {
    let s = String::deserialize(d)?;
    s.parse::<Algorithm>().map_err(serde::de::Error::custom)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    headers: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    default: Option<String>,
}

#[derive(Deserialize)]
#[serde(try_from = "RawLimitFields")]
struct RawLimit(LimitConfig);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimitFields {
    name: String,
    #[serde(default)]
    algorithm: Option<AlgorithmName>,
    #[serde(default)]
    quota: Option<QuotaEntry>,
    #[serde(default)]
    quotas: Option<Vec<QuotaEntry>>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    scope: Scope,
    #[serde(default)]
    max_keys: Option<usize>,
    #[serde(default)]
    max_bytes: Option<usize>,
    #[serde(default)]
    shadow: bool,
    #[serde(default)]
    key: Option<RawKey>,
}

impl TryFrom<RawLimitFields> for RawLimit {
    type Error = String;
    fn try_from(r: RawLimitFields) -> Result<Self, String> {
        let name = r.name.trim().to_string();
        if name.is_empty() {
            return Err("a limit name must not be empty".into());
        }
        if name.len() > 200
            || name
                .chars()
                .any(|c| c.is_control() || c == '"' || c == '\\')
        {
            return Err(format!(
                "limit name {name:?} must be at most 200 characters, without quotes, backslashes or control characters"
            ));
        }
        let algorithm = r.algorithm.map_or(Algorithm::Gcra, |a| a.0);
        let mut quotas: Vec<Quota> = match (r.quota, r.quotas) {
            (Some(q), None) => vec![q.0],
            (None, Some(qs)) if !qs.is_empty() => qs.into_iter().map(|q| q.0).collect(),
            (None, Some(_)) => return Err(format!("limit {name:?}: `quotas` must not be empty")),
            (Some(_), Some(_)) => {
                return Err(format!(
                    "limit {name:?}: give either `quota` or `quotas`, not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "limit {name:?} needs a `quota` (e.g. quota: 100/s) or a list of `quotas`"
                ));
            }
        };
        if let Some(b) = r.burst {
            if quotas.len() != 1 {
                return Err(format!(
                    "limit {name:?}: `burst` applies to a single `quota`; with several `quotas` write each as {{quota: 10/s, burst: 5}}"
                ));
            }
            quotas[0] = quotas[0]
                .burst_of(b)
                .map_err(|e| format!("limit {name:?}: burst: {e}"))?;
        }
        if algorithm.is_windowed() && quotas.iter().any(|q| q.burst() != q.limit()) {
            return Err(format!(
                "limit {name:?}: `burst` has no effect on {algorithm} (a window's capacity is its limit); remove it or pick token-bucket, leaky-bucket, gcra or leaky-queue"
            ));
        }
        if quotas.len() > 8 {
            return Err(format!("limit {name:?}: at most 8 quotas per limit"));
        }
        let max_keys = r.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
        if max_keys == 0 {
            return Err(format!("limit {name:?}: max_keys must be at least 1"));
        }
        let per_key = drl_core::keyed::DEFAULT_BYTES_PER_KEY;
        let max_bytes = r
            .max_bytes
            .unwrap_or_else(|| max_keys.saturating_mul(per_key));
        if max_bytes < 1024 {
            return Err(format!(
                "limit {name:?}: max_bytes must be at least 1024 (it bounds the bytes of keys and state held; the default is max_keys x {per_key})"
            ));
        }
        if let Some(k) = &r.key {
            if k.headers.is_empty() {
                return Err(format!(
                    "limit {name:?}: key.headers must name at least one header"
                ));
            }
            for h in &k.headers {
                if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    return Err(format!("limit {name:?}: {h:?} is not a valid header name"));
                }
            }
        }
        Ok(RawLimit(LimitConfig {
            name,
            algorithm,
            quotas,
            scope: r.scope,
            max_keys,
            max_bytes,
            shadow: r.shadow,
        }))
    }
}

fn yaml_error(source: &str, e: &serde_norway::Error) -> ConfigError {
    ConfigError::from_parser(
        source,
        e.to_string(),
        e.location().map(|l| (l.line(), l.column())),
    )
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
        let limits: Vec<LimitConfig> = raw.limits.into_iter().map(|l| l.0).collect();
        for (i, l) in limits.iter().enumerate() {
            if limits[..i].iter().any(|o| o.name == l.name) {
                let mut seen = 0;
                let mut e = ConfigError::new(
                    source_name,
                    format!(
                        "duplicate limit name {:?}: limit names must be unique",
                        l.name
                    ),
                );
                for (n, line) in text.lines().enumerate() {
                    if line.contains("name:") && line.contains(l.name.as_str()) {
                        if seen == 1 {
                            e.line = Some(n + 1);
                            e.column = line.find("name:").map(|c| c + 1);
                            break;
                        }
                        seen += 1;
                    }
                }
                return Err(e);
            }
        }
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
