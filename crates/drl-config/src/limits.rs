//! The limit schema: one entry of the `limits:` list (name, algorithm,
//! quotas or `quota`/`burst`, `scope`, `max_keys`, `max_bytes`, `shadow`,
//! `key`, `top_keys`) with the checks of one limit, the defaults of
//! `server.max_key_bytes` and `server.max_cost`, and the one cross-limit
//! check (unique names). `drl serve`'s reader (`native.rs`) and
//! drl-client's in-process reader both read limits with it.

use std::fmt;

use drl_core::{Algorithm, Quota};
use serde::Deserialize;

use crate::error::ConfigError;

/// The default bound on keys held per limit.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default byte budget of a limit per key of `max_keys`: a limit's
/// `max_bytes` defaults to `max_keys` x this (see
/// [`drl_core::keyed::DEFAULT_BYTES_PER_KEY`]).
pub const DEFAULT_BYTES_PER_KEY: usize = drl_core::keyed::DEFAULT_BYTES_PER_KEY;

/// The default longest key, in bytes (`server.max_key_bytes`).
pub const DEFAULT_MAX_KEY_BYTES: usize = 1024;

/// The most stats keys `server.envoy_stats_values` names by request values
/// in one process (beyond, a key counts under its rule's path).
pub const ENVOY_STATS_MAX_KEYS: usize = 10_000;

/// The default largest cost of one check (`server.max_cost`).
pub const DEFAULT_MAX_COST: u64 = 1_000_000_000;

/// Where a limit's state lives (the consistency level, see DESIGN.md).
///
/// Every scope is served; `redis`, `gossip` and `orbit` need their section
/// (`redis:`, `cluster:`, `orbit:`). Each plugs in at
/// [`crate::scope::Stores::backend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This node only, in memory (`drl_store::MemoryStore`).
    #[default]
    Local,
    /// Atomic Lua scripts on Redis / Redis Cluster.
    Redis,
    /// Cloud Control GRD/FPS over gossip.
    Gossip,
    /// Orbit ring.
    Orbit,
}

impl Scope {
    /// The name used in configs.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Local => "local",
            Scope::Redis => "redis",
            Scope::Gossip => "gossip",
            Scope::Orbit => "orbit",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How forward-auth derives a limit key from request headers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Header names (case-insensitive); the key is their values joined by `|`.
    pub headers: Vec<String>,
    /// Used for a missing header; without it a missing header is a 400.
    #[serde(default)]
    pub default: Option<String>,
}

impl Default for KeyConfig {
    fn default() -> Self {
        Self {
            headers: vec!["x-api-key".to_string()],
            default: None,
        }
    }
}

/// One quota of a limit: `100/s`, or `{quota: 100/s, burst: 20}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaEntry(pub Quota);

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

/// An algorithm name from docs/semantics.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AlgorithmName(Algorithm);

impl<'de> Deserialize<'de> for AlgorithmName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = AlgorithmName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an algorithm name (gcra, token-bucket, ...)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AlgorithmName, E> {
                v.parse::<Algorithm>().map(AlgorithmName).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
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
    key: Option<KeyConfig>,
    #[serde(default = "yes")]
    top_keys: bool,
}

fn yes() -> bool {
    true
}

/// One named limit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawLimit")]
pub struct LimitConfig {
    /// Unique name, used by clients (`"limit": "api"`) and in metrics.
    pub name: String,
    /// The algorithm (default `gcra`).
    pub algorithm: Algorithm,
    /// One or more quotas, checked all-or-nothing.
    pub quotas: Vec<Quota>,
    /// Where state lives.
    pub scope: Scope,
    /// Most keys held for this limit (default [`DEFAULT_MAX_KEYS`]).
    pub max_keys: usize,
    /// Most bytes held for this limit: entries plus key bytes (default
    /// `max_keys` x [`DEFAULT_BYTES_PER_KEY`]).
    pub max_bytes: usize,
    /// Decide and count, but always allow (soft launch).
    pub shadow: bool,
    /// How forward-auth derives the key.
    pub key: KeyConfig,
    /// Keep a top-keys sketch for the status page (default true; the
    /// keys are only shown by `/` and `/v1/status`).
    pub top_keys: bool,
}

impl TryFrom<RawLimit> for LimitConfig {
    type Error = String;
    fn try_from(r: RawLimit) -> Result<Self, String> {
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
        let max_bytes = r
            .max_bytes
            .unwrap_or_else(|| max_keys.saturating_mul(DEFAULT_BYTES_PER_KEY));
        if max_bytes < 1024 {
            return Err(format!(
                "limit {name:?}: max_bytes must be at least 1024 (it bounds the bytes of keys and state held; the default is max_keys x {DEFAULT_BYTES_PER_KEY})"
            ));
        }
        let key = r.key.unwrap_or_default();
        if key.headers.is_empty() {
            return Err(format!(
                "limit {name:?}: key.headers must name at least one header"
            ));
        }
        for h in &key.headers {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return Err(format!("limit {name:?}: {h:?} is not a valid header name"));
            }
        }
        Ok(LimitConfig {
            name,
            algorithm,
            quotas,
            scope: r.scope,
            max_keys,
            max_bytes,
            shadow: r.shadow,
            key,
            top_keys: r.top_keys,
        })
    }
}

/// Refuses two limits of one name, at the line of the second.
pub fn check_unique_names(
    limits: &[LimitConfig],
    text: &str,
    source: &str,
) -> Result<(), ConfigError> {
    let mut names = std::collections::BTreeSet::new();
    for l in limits {
        if !names.insert(l.name.as_str()) {
            return Err(ConfigError::new(
                source,
                format!(
                    "duplicate limit name {:?}: limit names must be unique",
                    l.name
                ),
            )
            .locate_nth(text, &["name:", &l.name], 1));
        }
    }
    Ok(())
}
