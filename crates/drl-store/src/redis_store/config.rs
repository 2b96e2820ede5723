//! [`RedisConfig`]: how to reach Redis and decide there, as written under
//! `redis:` in the config, with its validation; [`TimeSource`] and
//! [`Engine`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::credentials::{self, Credentials, redact};
use super::tls;
use super::tls::RedisTls;
use crate::StoreError;

/// Where `now` comes from for decisions made in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeSource {
    /// The Redis server's clock (`TIME`), read inside the script: one clock
    /// for every drl node, whatever their own clocks say. The default.
    #[default]
    Redis,
    /// The caller's `now` ([`crate::Check::now`]): for replaying traces and tests.
    Caller,
}

/// What decides in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// drl's Lua scripts (`EVALSHA`): works on any Redis, including managed
    /// services that refuse modules. The default.
    #[default]
    Lua,
    /// drl's native module (`DRL.DECIDE`): several times the decisions per
    /// second of the scripts, but every Redis server must run
    /// `redis-server --loadmodule libdrl_redis_module.so`. A server without
    /// it is a store error naming the server, never a silent fallback.
    Module,
}

/// How to reach Redis, as written under `scope: redis` in the config.
///
/// Exactly one of `url` and `cluster` must be given. `Debug` shows URLs
/// with their password replaced by `***` (see [`RedisConfig::redacted`]).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// A single Redis server: `redis://[user:pass@]host:port[/db]`, or
    /// `rediss://...` for TLS.
    pub url: Option<String>,
    /// Redis Cluster: some of its nodes (`redis://host:port`, or all
    /// `rediss://` for TLS); the rest of the topology is discovered, and
    /// MOVED/ASK and failovers are followed.
    pub cluster: Vec<String>,
    /// TLS settings for `rediss://` URLs: a private CA, a client
    /// certificate. Refused with `redis://` URLs.
    pub tls: Option<RedisTls>,
    /// An ACL user to authenticate as (with `password_file`), instead of a
    /// user name in the URL.
    pub username: Option<String>,
    /// A file holding the password (whole content, trimmed; must not be
    /// empty), instead of a password in the URL. Read at config load and at
    /// connect; a changed password needs a restart.
    pub password_file: Option<PathBuf>,
    /// Where `now` comes from (default `redis`).
    pub time: TimeSource,
    /// What decides: `lua` scripts (default) or the native `module`.
    pub engine: Engine,
    /// Prefix of every key drl writes (default `drl:`). Must not contain `{`
    /// or `}` (the hash tag follows it).
    pub key_prefix: String,
    /// Timeout of one connection attempt, in ms (default 1000).
    pub connect_timeout_ms: u64,
    /// Connection-level response timeout, in ms (default 1000). The
    /// per-limit decision timeout is the failure policy's (`timeout_ms`),
    /// normally much shorter.
    pub response_timeout_ms: u64,
    /// Extra time a key lives after its state would be fresh again, in ms
    /// (default 1000). Keys expire then; a fresh state decides like a
    /// missing one. The grace covers clock differences between callers and
    /// Redis in `time: caller` mode.
    pub expiry_grace_ms: u64,
    /// Up to this much more grace, in ms, drawn for each call (default 0):
    /// keys written together do not all expire together (envoyproxy/
    /// ratelimit's `EXPIRATION_JITTER_MAX_SECONDS`). A key only ever lives
    /// longer, after its state is fresh again: it never admits more.
    pub expiry_jitter_ms: u64,
    /// Use the double-precision fast script for bucket algorithms whose
    /// capacity is below 2^53 ns (default true). Both scripts decide alike;
    /// turning this off is for tests and comparisons.
    pub fast_path: bool,
    /// Most decisions one script call carries (default 64): concurrent
    /// decisions are coalesced up to this, and `decide_many` is cut into
    /// calls of at most this many.
    pub batch_max: usize,
    /// Most coalesced calls in flight per store; decisions arriving
    /// meanwhile queue and go together in the next call. Default (`None`):
    /// [`RedisConfig::DEFAULT_IN_FLIGHT_LUA`] with the Lua engine, whose
    /// calls keep Redis busy on their own, and
    /// [`RedisConfig::DEFAULT_IN_FLIGHT_MODULE`] with the module, whose
    /// calls are short enough that 2 in flight left Redis half idle
    /// (docs/performance.md, "`scope: redis`").
    pub batch_in_flight: Option<usize>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            cluster: Vec::new(),
            tls: None,
            username: None,
            password_file: None,
            time: TimeSource::Redis,
            engine: Engine::Lua,
            key_prefix: "drl:".to_string(),
            connect_timeout_ms: 1000,
            response_timeout_ms: 1000,
            expiry_grace_ms: 1000,
            expiry_jitter_ms: 0,
            fast_path: true,
            batch_max: 64,
            batch_in_flight: None,
        }
    }
}

impl RedisConfig {
    /// Calls in flight per store with the Lua engine, unless configured.
    pub const DEFAULT_IN_FLIGHT_LUA: usize = 2;
    /// Calls in flight per store with the module engine, unless configured.
    pub const DEFAULT_IN_FLIGHT_MODULE: usize = 4;

    /// The calls in flight per store this config means: `batch_in_flight`,
    /// or the engine's default.
    pub fn in_flight(&self) -> usize {
        self.batch_in_flight.unwrap_or(match self.engine {
            Engine::Lua => Self::DEFAULT_IN_FLIGHT_LUA,
            Engine::Module => Self::DEFAULT_IN_FLIGHT_MODULE,
        })
    }

    /// A config for one server at `url`, everything else default.
    pub fn single(url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::default()
        }
    }

    /// A config for a cluster reachable through `nodes`.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            cluster: nodes.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// The server URLs: `url`, or the `cluster` nodes.
    pub(crate) fn urls(&self) -> impl Iterator<Item = &str> {
        self.url
            .iter()
            .chain(self.cluster.iter())
            .map(String::as_str)
    }

    /// True if the URLs are `rediss://` (TLS).
    pub fn uses_tls(&self) -> bool {
        self.urls().next().is_some_and(tls::is_tls_url)
    }

    /// The server (or cluster) as named in logs and errors: URLs with
    /// passwords replaced by `***`.
    pub fn redacted(&self) -> String {
        match &self.url {
            Some(url) => redact(url),
            None => format!(
                "the cluster of {}",
                self.cluster
                    .iter()
                    .map(|u| redact(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Checks the config without connecting. Reads the files it names
    /// (`tls.*`, `password_file`): a missing, unreadable or malformed one is
    /// an error naming it.
    pub fn validate(&self) -> Result<(), StoreError> {
        let invalid = |s: &str| Err(StoreError::Invalid(format!("redis config: {s}")));
        match (&self.url, self.cluster.is_empty()) {
            (Some(_), false) => return invalid("give either `url` or `cluster`, not both"),
            (None, true) => return invalid("missing `url` (one server) or `cluster` (node list)"),
            _ => {}
        }
        let tls_urls = self.urls().filter(|u| tls::is_tls_url(u)).count();
        if tls_urls != 0 && tls_urls != self.urls().count() {
            return invalid(
                "`cluster` mixes rediss:// (TLS) and redis:// (plain) nodes: use one scheme \
                 for every node",
            );
        }
        if let Some(t) = &self.tls {
            if tls_urls == 0 {
                return Err(StoreError::Invalid(format!(
                    "redis config: `tls:` needs rediss:// URLs, but {} is plain TCP: write \
                     rediss://host:port (the port of Redis's `tls-port`)",
                    redact(self.urls().next().unwrap_or_default())
                )));
            }
            t.validate()?;
        }
        self.credentials()?;
        if self.key_prefix.contains(['{', '}']) {
            return invalid(
                "`key_prefix` must not contain `{` or `}` (they would break the hash tag)",
            );
        }
        if self.connect_timeout_ms == 0 || self.response_timeout_ms == 0 {
            return invalid("timeouts must be at least 1 ms");
        }
        if self.batch_max == 0 || self.batch_in_flight == Some(0) {
            return invalid("`batch_max` and `batch_in_flight` must be at least 1");
        }
        Ok(())
    }

    /// The user name and password beyond what the URLs say, with the
    /// password file read. Refuses a password (or user name) given twice,
    /// and a user name without a password.
    pub(crate) fn credentials(&self) -> Result<Credentials, StoreError> {
        let invalid = |s: &str| Err(StoreError::Invalid(format!("redis config: {s}")));
        let in_url = |pick: fn((Option<&str>, Option<&str>)) -> bool| {
            self.urls().any(|u| pick(credentials::url_userinfo(u)))
        };
        let url_user = in_url(|(u, _)| u.is_some());
        let url_password = in_url(|(_, p)| p.is_some());
        if let Some(u) = &self.username {
            if u.is_empty() || u.contains(char::is_whitespace) {
                return invalid("`username` must be a non-empty name without spaces");
            }
            if url_user {
                return invalid(
                    "the user name is given twice: in the URL and in `username`; keep one",
                );
            }
            if self.password_file.is_none() && !url_password {
                return invalid("`username` needs a password: set `password_file`");
            }
        }
        let password = match &self.password_file {
            Some(path) => {
                if url_password {
                    return invalid(
                        "the password is given twice: in the URL and in `password_file`; keep one \
                         (the file keeps it out of the config)",
                    );
                }
                Some(credentials::read_password_file(path)?)
            }
            None => None,
        };
        Ok(Credentials {
            username: self.username.clone(),
            password,
        })
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.url.as_deref().map(redact))
            .field(
                "cluster",
                &self.cluster.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            )
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .field("time", &self.time)
            .field("engine", &self.engine)
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("response_timeout_ms", &self.response_timeout_ms)
            .field("expiry_grace_ms", &self.expiry_grace_ms)
            .field("expiry_jitter_ms", &self.expiry_jitter_ms)
            .field("fast_path", &self.fast_path)
            .field("batch_max", &self.batch_max)
            .field("batch_in_flight", &self.batch_in_flight)
            .finish()
    }
}
