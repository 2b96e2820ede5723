//! drl's native configuration format.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::envoy::EnvoyDomain;
use crate::error::ConfigError;
use crate::limits::{
    DEFAULT_MAX_COST, DEFAULT_MAX_KEY_BYTES, DEFAULT_MAX_KEYS, LimitConfig, Scope,
    check_unique_names,
};

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
    /// A second Redis for `scope: redis` limits whose every window is at
    /// most one second (envoyproxy/ratelimit's `REDIS_PERSECOND`); the
    /// others stay in `redis`. Same failure policy.
    #[serde(default)]
    pub redis_per_second: Option<drl_store::RedisConfig>,
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
    /// OpenTelemetry spans of Envoy RLS calls (off by default).
    #[serde(default)]
    pub tracing: crate::sections::TracingConfig,
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
            redis_per_second: None,
            redis_resilience: drl_store::ResilienceConfig::default(),
            orbit: None,
            cluster: None,
            auth: crate::sections::AuthConfig::default(),
            status: crate::sections::StatusConfig::default(),
            tracing: crate::sections::TracingConfig::default(),
        }
    }

    /// Cross-field checks that serde cannot do (unique names, domains).
    pub(crate) fn validate(&self, text: &str, source: &str) -> Result<(), ConfigError> {
        check_unique_names(&self.limits, text, source)?;
        for name in self.server.envoy_stats_tags.keys() {
            let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with("__");
            let taken = ["domain", "key1", "key2", "err_type", "grpc_method", "le"];
            if !valid || taken.contains(&name.as_str()) {
                return Err(ConfigError::new(
                    source,
                    format!(
                        "server.envoy_stats_tags: {name:?} is not a Prometheus label name drl can add (letters, digits and _, not starting with a digit or __; not one of {})",
                        taken.join(", ")
                    ),
                )
                .locate(text, &["envoy_stats_tags:"]));
            }
        }
        if self.redis_per_second.is_some() && self.redis.is_none() {
            return Err(ConfigError::new(
                source,
                "redis_per_second: a second Redis for per-second limits needs the `redis:` section too (the other limits and the overrides stay there)",
            )
            .locate(text, &["redis_per_second:"]));
        }
        match self.server.envoy_scope {
            Scope::Local => {}
            Scope::Redis if self.redis.is_some() => {}
            Scope::Redis => {
                return Err(ConfigError::new(
                    source,
                    "server.envoy_scope is redis, but the config has no `redis:` section (e.g. redis: {url: \"redis://127.0.0.1:6379\"})",
                )
                .locate(text, &["envoy_scope:"]));
            }
            other => {
                return Err(ConfigError::new(
                    source,
                    format!(
                        "server.envoy_scope: {} is not supported: Envoy rules count exact fixed windows, as envoyproxy/ratelimit does; use local or redis",
                        other.name()
                    ),
                )
                .locate(text, &["envoy_scope:"]));
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
        if let Some((key, why)) = self.tracing.invalid() {
            return Err(ConfigError::new(source, why).locate(text, &[key]));
        }
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
        if let Some(bad) = self.server.envoy_header_names.invalid() {
            return Err(ConfigError::new(
                source,
                format!("server.envoy_header_names: {bad:?} is not a valid HTTP header name"),
            )
            .locate(text, &["envoy_header_names:"]));
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
            self.validate_gossip_quotas(c.cluster_size(), text, source)?;
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
    /// Cloud Control allocates whole units per second and splits a quota's
    /// burst over the `nodes`: a gossip quota slower than 1 unit/s, or with
    /// a burst smaller than the cluster, would be served above its limit
    /// (each node rounds up to 1), so it is refused with the scopes that
    /// serve it exactly.
    fn validate_gossip_quotas(
        &self,
        nodes: u32,
        text: &str,
        source: &str,
    ) -> Result<(), ConfigError> {
        for l in self.limits.iter().filter(|l| l.scope == Scope::Gossip) {
            for q in &l.quotas {
                let per_s = q.limit() as u128 * 1_000_000_000 / q.window().max(1) as u128;
                let why = if per_s == 0 {
                    "is below 1 unit per second, the least Cloud Control allocates (it would admit 1 per second)".to_string()
                } else if q.burst() < nodes as u64 {
                    format!(
                        "has a burst of {} for {nodes} nodes: each node holds at least 1, so the cluster would admit {nodes} at once",
                        q.burst()
                    )
                } else {
                    continue;
                };
                return Err(ConfigError::new(
                    source,
                    format!(
                        "limit {:?}: quota {q} on scope gossip {why}; use scope: orbit or redis, which serve it exactly",
                        l.name
                    ),
                )
                .locate(text, &["name:", &l.name]));
            }
        }
        Ok(())
    }

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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
    /// When some limited descriptor of an Envoy RLS request would pass its
    /// limit with this request's hits, count only those descriptors and
    /// check the others without counting (envoyproxy/ratelimit's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`; default false: every
    /// descriptor counts).
    pub envoy_stop_increment_when_over_limit: bool,
    /// Bytes for remembering, until its window ends, each Envoy RLS
    /// descriptor that a store (`envoy_scope: redis`) found over its limit,
    /// so that later requests for it are answered OVER_LIMIT without a
    /// store round trip (envoyproxy/ratelimit's `LOCAL_CACHE_SIZE_IN_BYTES`;
    /// default 0: off). Only what the store already denied in the same
    /// window is denied from it; when full, the entries closest to their
    /// end are dropped first. Unused for rules counted in memory.
    pub envoy_local_cache_bytes: u64,
    /// Return, in each Envoy RLS answer's `dynamic_metadata`, the request
    /// (domain, descriptors, hits) and the merged `metadata` of the
    /// descriptors that passed (envoyproxy/ratelimit's
    /// `RESPONSE_DYNAMIC_METADATA`; default false).
    pub envoy_response_dynamic_metadata: bool,
    /// Where the counters of Envoy descriptor rules and overrides live:
    /// `local` (this process; the default) or `redis` (shared by every drl
    /// process on the same Redis, as envoyproxy/ratelimit's replicas share
    /// theirs; needs a `redis:` section).
    pub envoy_scope: Scope,
    /// Labels added to every `ratelimit_service_*` series
    /// (envoyproxy/ratelimit's `EXTRA_TAGS`), e.g. `{cluster: eu-1}`.
    pub envoy_stats_tags: std::collections::BTreeMap<String, String>,
    /// Name `ratelimit_service_*` series by request values where the
    /// reference does (`detailed_metric`, `value_to_metric`, overrides), at
    /// most [`crate::ENVOY_STATS_MAX_KEYS`] keys (beyond, a key counts
    /// under its rule's path); default false: rules' paths only.
    pub envoy_stats_values: bool,
    /// The names of the three headers `envoy_response_headers` adds
    /// (envoyproxy/ratelimit's `LIMIT_LIMIT_HEADER`,
    /// `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
    pub envoy_header_names: EnvoyHeaderNames,
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

/// `server.envoy_header_names`: each a valid HTTP header name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvoyHeaderNames {
    /// Default `RateLimit-Limit`.
    pub limit: String,
    /// Default `RateLimit-Remaining`.
    pub remaining: String,
    /// Default `RateLimit-Reset`.
    pub reset: String,
}

impl Default for EnvoyHeaderNames {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

impl EnvoyHeaderNames {
    /// The names, as (limit, remaining, reset).
    pub fn as_array(&self) -> [&str; 3] {
        [&self.limit, &self.remaining, &self.reset]
    }

    /// The first name that is not a valid HTTP header name, if any.
    pub fn invalid(&self) -> Option<&str> {
        [&self.limit, &self.remaining, &self.reset]
            .into_iter()
            .find(|n| http::HeaderName::from_bytes(n.as_bytes()).is_err())
            .map(String::as_str)
    }
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
            max_cost: DEFAULT_MAX_COST,
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
            envoy_stop_increment_when_over_limit: false,
            envoy_local_cache_bytes: 0,
            envoy_response_dynamic_metadata: false,
            envoy_scope: Scope::Local,
            envoy_stats_tags: Default::default(),
            envoy_stats_values: false,
            envoy_header_names: EnvoyHeaderNames::default(),
            reservation_ttl_ms: 300_000,
            max_reservations: 100_000,
            http_engine: HttpEngine::Hyper,
            grpc_engine: GrpcEngine::H2,
        }
    }
}
