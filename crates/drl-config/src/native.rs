//! drl's native configuration format.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;

use drl_core::{Algorithm, Quota};
use serde::Deserialize;

use crate::ConfigError;
use crate::envoy::EnvoyDomain;

/// The default bound on keys held per limit.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default byte budget of a limit per key of `max_keys`: a limit's
/// `max_bytes` defaults to `max_keys` x this (see
/// [`drl_core::keyed::DEFAULT_BYTES_PER_KEY`]).
pub const DEFAULT_BYTES_PER_KEY: usize = drl_core::keyed::DEFAULT_BYTES_PER_KEY;

/// The default longest key, in bytes (`server.max_key_bytes`).
pub const DEFAULT_MAX_KEY_BYTES: usize = 1024;

/// A whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listener addresses (flags override them).
    #[serde(default)]
    pub listen: ListenConfig,
    /// Request bounds and timeouts.
    #[serde(default)]
    pub server: ServerConfig,
    /// Named limits.
    #[serde(default)]
    pub limits: Vec<LimitConfig>,
    /// envoyproxy/ratelimit domains, inline (same format as their files).
    #[serde(default)]
    pub envoy: Vec<EnvoyDomain>,
    /// limitador limits files, read unchanged (see docs/limitador.md).
    #[serde(default)]
    pub limitador: Vec<crate::limitador::LimitadorSource>,
    /// The Redis server or cluster of `scope: redis` limits.
    #[serde(default)]
    pub redis: Option<drl_store::RedisConfig>,
    /// Failure policy of `scope: redis` limits (timeouts, circuit breaker,
    /// fail open/closed/local).
    #[serde(default)]
    pub redis_resilience: drl_store::ResilienceConfig,
    /// The Orbit ring of `scope: orbit` limits (see docs/orbit-runtime.md).
    #[serde(default)]
    pub orbit: Option<drl_cluster_net::orbit::OrbitConfig>,
    /// The gossip cluster of `scope: gossip` limits (see docs/gossip.md).
    #[serde(default)]
    pub cluster: Option<drl_cluster_net::GossipConfig>,
    /// Who may ask: bearer tokens for the APIs and for `/metrics`.
    #[serde(default)]
    pub auth: crate::sections::AuthConfig,
    /// The status page at `/` and `GET /v1/status`.
    #[serde(default)]
    pub status: crate::sections::StatusConfig,
}

impl Config {
    /// A configuration with no limits and default settings.
    pub fn empty() -> Self {
        Self {
            listen: ListenConfig::default(),
            server: ServerConfig::default(),
            limits: Vec::new(),
            envoy: Vec::new(),
            limitador: Vec::new(),
            redis: None,
            redis_resilience: drl_store::ResilienceConfig::default(),
            orbit: None,
            cluster: None,
            auth: crate::sections::AuthConfig::default(),
            status: crate::sections::StatusConfig::default(),
        }
    }

    /// Cross-field checks that serde cannot do (unique names, domains).
    pub(crate) fn validate(&self, text: &str, source: &str) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        for l in &self.limits {
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
        if let Some(l) = self.limits.iter().find(|l| l.scope == Scope::Redis)
            && self.redis.is_none()
        {
            return Err(ConfigError::new(
                source,
                format!(
                    "limit {:?} has scope redis, but the config has no `redis:` section (e.g. redis: {{url: \"redis://127.0.0.1:6379\"}})",
                    l.name
                ),
            )
            .locate(text, &["scope:", "redis"]));
        }
        if let Some(r) = &self.redis {
            r.validate()
                .map_err(|e| ConfigError::new(source, e.to_string()).locate(text, &["redis:"]))?;
        }
        self.validate_orbit(text, source)?;
        for (field, zero) in [
            ("max_body_bytes:", self.server.max_body_bytes == 0),
            ("max_batch:", self.server.max_batch == 0),
            ("max_cost:", self.server.max_cost == 0),
            ("max_key_bytes:", self.server.max_key_bytes == 0),
            ("max_connections:", self.server.max_connections == 0),
            (
                "header_read_timeout_ms:",
                self.server.header_read_timeout_ms == 0,
            ),
            ("idle_timeout_ms:", self.server.idle_timeout_ms == 0),
            (
                "max_concurrent_streams:",
                self.server.max_concurrent_streams == 0,
            ),
        ] {
            if zero {
                let name = field.trim_end_matches(':');
                return Err(ConfigError::new(
                    source,
                    format!("server.{name} must be at least 1 (0 would refuse every request or connection)"),
                )
                .locate(text, &[field]));
            }
        }
        if let Some(l) = self.limits.iter().find(|l| l.scope == Scope::Gossip)
            && self.cluster.is_none()
        {
            return Err(ConfigError::new(
                source,
                format!(
                    "limit {:?} has scope gossip, but the config has no `cluster:` section (node_id, bind, seeds, key_file; see docs/gossip.md)",
                    l.name
                ),
            )
            .locate(text, &["scope:", "gossip"]));
        }
        if let Some(c) = &self.cluster {
            c.validate()
                .map_err(|e| ConfigError::new(source, e.to_string()).locate(text, &["cluster:"]))?;
        }
        let mut domains = BTreeSet::new();
        for d in &self.envoy {
            d.check(text, source)?;
            if !domains.insert(d.domain.as_str()) {
                return Err(ConfigError::new(
                    source,
                    format!("duplicate envoy domain {:?}", d.domain),
                )
                .locate_nth(text, &["domain:", &d.domain], 1));
            }
        }
        Ok(())
    }
}

impl Config {
    /// `scope: orbit` needs an `orbit:` section; the section must be valid
    /// and every orbit limit servable by the ring (fixed-window, one quota,
    /// a window of at least one lap, `max_keys` within `orbit.max_keys`).
    fn validate_orbit(&self, text: &str, source: &str) -> Result<(), ConfigError> {
        let Some(orbit) = &self.orbit else {
            if let Some(l) = self.limits.iter().find(|l| l.scope == Scope::Orbit) {
                return Err(ConfigError::new(
                    source,
                    format!(
                        "limit {:?} has scope orbit, but the config has no `orbit:` section (node_id, bind, key, ring; see docs/orbit-runtime.md)",
                        l.name
                    ),
                )
                .locate(text, &["scope:", "orbit"]));
            }
            return Ok(());
        };
        orbit
            .validate()
            .map_err(|e| ConfigError::new(source, e.to_string()).locate(text, &["orbit:"]))?;
        for l in self.limits.iter().filter(|l| l.scope == Scope::Orbit) {
            let at = |e: String| ConfigError::new(source, e).locate(text, &["name:", &l.name]);
            let spec = drl_store::LimitSpec::new(l.name.clone(), l.algorithm, l.quotas.clone());
            orbit.protocol_for(&spec).map_err(|e| at(e.to_string()))?;
            if l.max_keys > orbit.max_keys {
                return Err(at(format!(
                    "limit {:?}: max_keys {} exceeds orbit.max_keys {} (the ring's bound on keys per window; the default max_keys is {DEFAULT_MAX_KEYS}): lower the limit's max_keys or raise orbit.max_keys",
                    l.name, l.max_keys, orbit.max_keys
                )));
            }
        }
        Ok(())
    }
}

/// Where the service listens.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// HTTP/JSON, forward-auth, health and metrics.
    #[serde(default = "default_http")]
    pub http: Option<SocketAddr>,
    /// gRPC: the native API and Envoy RLS v3.
    #[serde(default = "default_grpc")]
    pub grpc: Option<SocketAddr>,
    /// TLS of the HTTP listener (none: plain HTTP).
    #[serde(default)]
    pub http_tls: Option<crate::sections::TlsConfig>,
    /// TLS of the gRPC listener (none: plain HTTP/2).
    #[serde(default)]
    pub grpc_tls: Option<crate::sections::TlsConfig>,
}

fn default_http() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 8080)))
}

fn default_grpc() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 8081)))
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            http: default_http(),
            grpc: default_grpc(),
            http_tls: None,
            grpc_tls: None,
        }
    }
}

/// Request bounds and timeouts. Every bound has a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Largest accepted request body, HTTP and gRPC (default 1 MiB).
    pub max_body_bytes: usize,
    /// Most checks in one batch (default 10,000).
    pub max_batch: usize,
    /// Largest accepted cost of one check (default 1,000,000,000).
    pub max_cost: u64,
    /// Longest time one request may take (default 5,000 ms; 0: no limit).
    pub request_timeout_ms: u64,
    /// How long SIGTERM waits for in-flight requests (default 10,000 ms).
    pub shutdown_grace_ms: u64,
    /// Add `RateLimit-*` headers to Envoy RLS responses (default true).
    pub envoy_response_headers: bool,
    /// Most open connections per listener (default 10,000; lowered at
    /// startup to fit the process's file-descriptor limit). At the cap, a
    /// new connection closes the longest-idle one, or is refused when none
    /// is idle.
    pub max_connections: usize,
    /// Time a connection has to complete its TLS handshake and send a
    /// whole request head (default 10,000 ms): slow-loris bound.
    pub header_read_timeout_ms: u64,
    /// A connection with no request in flight for this long is closed
    /// (default 60,000 ms).
    pub idle_timeout_ms: u64,
    /// Most concurrent HTTP/2 streams per connection (default 256).
    pub max_concurrent_streams: u32,
    /// Longest accepted key, in bytes, on every API (default 1,024). A
    /// longer key is refused (HTTP 400, gRPC INVALID_ARGUMENT, Envoy RLS
    /// OVER_LIMIT for that descriptor).
    pub max_key_bytes: usize,
    /// A changed config file is reloaded once its size, mtime and content
    /// stayed the same for this long (default 500 ms).
    pub reload_settle_ms: u64,
    /// Let a reload triggered by a file change remove limits or domains
    /// (default false: such a reload is refused; SIGHUP may always remove).
    pub allow_limit_removal: bool,
    /// What Envoy RLS answers for a domain with no config: `ok` (the
    /// default, as envoyproxy/ratelimit: every descriptor OK, no limit) or
    /// `not_found` (gRPC `NOT_FOUND`; with Envoy's `failure_mode_deny:
    /// true` that denies the route's traffic).
    pub envoy_unknown_domain: UnknownDomain,
    /// What an Envoy RLS hit (`hits_addend` > 0) does: `charge` (the
    /// default, as envoyproxy/ratelimit: counted even past the limit, so a
    /// response-path count denies the next request) or `take` (admitted
    /// and counted, or denied and not counted). A `hits_addend` of 0
    /// checks only, either way.
    pub envoy_hits: EnvoyHits,
    /// With `--config DIR`: merge the descriptors of files that name the
    /// same domain (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`; default
    /// false: such files are refused).
    pub envoy_merge_domains: bool,
    /// Answer every Envoy RLS request OK overall, whatever its descriptors
    /// say (envoyproxy/ratelimit's `SHADOW_MODE`; default false).
    pub envoy_shadow_mode: bool,
    /// Treat every Envoy descriptor as `quota_mode: true`
    /// (envoyproxy/ratelimit's `QUOTA_MODE`; default false).
    pub envoy_quota_mode: bool,
    /// How long a reservation of the HTTP and native APIs stays open
    /// before it is closed at its estimate (default 300,000 ms).
    pub reservation_ttl_ms: u64,
    /// Most open reservations per limit (default 100,000); at the cap a
    /// new one closes the one expiring first, at its estimate.
    pub max_reservations: usize,
    /// How the HTTP listener serves HTTP/1.1 and HTTP/2: `hyper`, the only
    /// engine (the key stays so that existing files keep loading).
    pub http_engine: HttpEngine,
    /// How the gRPC listener serves HTTP/2: `h2`, the only engine (the
    /// key stays so that existing files keep loading).
    pub grpc_engine: GrpcEngine,
}

/// What an Envoy RLS hit does (`server.envoy_hits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EnvoyHits {
    /// Counted whatever the state (envoyproxy/ratelimit): the key may go
    /// over its limit, and is denied until its window rolls over.
    #[default]
    Charge,
    /// Admitted and counted, or denied and not counted.
    Take,
}

/// What Envoy RLS answers for an unknown domain
/// (`server.envoy_unknown_domain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UnknownDomain {
    /// OK for every descriptor, with no current limit (envoyproxy/ratelimit).
    #[default]
    Ok,
    /// gRPC `NOT_FOUND`, naming the configured domains.
    NotFound,
}

/// Why an engine other than the libraries is refused.
const ENGINE_REMOVED: &str = "the hand-written engine `fast` was removed: it lacked the abuse \
     limits of the h2 crate and hyper (docs/security.md); remove the key or set";

/// How the gRPC listener serves HTTP/2 (`server.grpc_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(try_from = "String")]
pub enum GrpcEngine {
    /// The `h2` crate ([`crate::grpc::direct`]).
    #[default]
    H2,
}

impl TryFrom<String> for GrpcEngine {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "h2" => Ok(Self::H2),
            "fast" => Err(format!("{ENGINE_REMOVED} `grpc_engine: h2`")),
            other => Err(format!("unknown grpc_engine `{other}`, expected `h2`")),
        }
    }
}

/// How the HTTP listener serves HTTP (`server.http_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(try_from = "String")]
pub enum HttpEngine {
    /// Every request through hyper and axum.
    #[default]
    Hyper,
}

impl TryFrom<String> for HttpEngine {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "hyper" => Ok(Self::Hyper),
            "fast" => Err(format!("{ENGINE_REMOVED} `http_engine: hyper`")),
            other => Err(format!("unknown http_engine `{other}`, expected `hyper`")),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            max_batch: 10_000,
            max_cost: 1_000_000_000,
            request_timeout_ms: 5_000,
            shutdown_grace_ms: 10_000,
            envoy_response_headers: true,
            max_connections: 10_000,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_concurrent_streams: 256,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            reload_settle_ms: 500,
            allow_limit_removal: false,
            envoy_unknown_domain: UnknownDomain::Ok,
            envoy_hits: EnvoyHits::Charge,
            envoy_merge_domains: false,
            envoy_shadow_mode: false,
            envoy_quota_mode: false,
            reservation_ttl_ms: 300_000,
            max_reservations: 100_000,
            http_engine: HttpEngine::Hyper,
            grpc_engine: GrpcEngine::H2,
        }
    }
}

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
