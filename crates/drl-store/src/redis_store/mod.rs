//! [`RedisStore`]: exact global limits on Redis or Redis Cluster.
//!
//! One decision is one atomic `EVALSHA` of the decision script (all quotas
//! of the limit, all-or-nothing). The script is loaded once and called by
//! its SHA1; a server that lost it (restart, failover, new cluster node)
//! answers `NOSCRIPT`, and the call is repeated once as `EVAL`, which also
//! caches the script there again. Concurrent decisions share one multiplexed
//! connection per Redis node, so they are pipelined on the wire;
//! [`Store::decide_many`] sends a whole batch as one pipeline.
//!
//! See `docs/redis.md` for the configuration and the arithmetic.

pub(crate) mod script;

use std::time::Duration;

use async_trait::async_trait;
use drl_core::Decision;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::{Check, LimitSpec, Store, StoreError};

/// Where `now` comes from for decisions made in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeSource {
    /// The Redis server's clock (`TIME`), read inside the script: one clock
    /// for every drl node, whatever their own clocks say. The default.
    #[default]
    Redis,
    /// The caller's `now` ([`Check::now`]): for replaying traces and tests.
    Caller,
}

/// How to reach Redis, as written under `scope: redis` in the config.
///
/// Exactly one of `url` and `cluster` must be given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// A single Redis server: `redis://[user:pass@]host:port[/db]`.
    pub url: Option<String>,
    /// Redis Cluster: some of its nodes (`redis://host:port`); the rest of
    /// the topology is discovered, and MOVED/ASK and failovers are followed.
    pub cluster: Vec<String>,
    /// Where `now` comes from (default `redis`).
    pub time: TimeSource,
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
    /// Use the double-precision fast script for bucket algorithms whose
    /// capacity is below 2^53 ns (default true). Both scripts decide alike;
    /// turning this off is for tests and comparisons.
    pub fast_path: bool,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: None,
            cluster: Vec::new(),
            time: TimeSource::Redis,
            key_prefix: "drl:".to_string(),
            connect_timeout_ms: 1000,
            response_timeout_ms: 1000,
            expiry_grace_ms: 1000,
            fast_path: true,
        }
    }
}

impl RedisConfig {
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

    /// Checks the config without connecting.
    pub fn validate(&self) -> Result<(), StoreError> {
        let invalid = |s: &str| Err(StoreError::Invalid(format!("redis config: {s}")));
        match (&self.url, self.cluster.is_empty()) {
            (Some(_), false) => return invalid("give either `url` or `cluster`, not both"),
            (None, true) => return invalid("missing `url` (one server) or `cluster` (node list)"),
            _ => {}
        }
        if self.key_prefix.contains(['{', '}']) {
            return invalid(
                "`key_prefix` must not contain `{` or `}` (they would break the hash tag)",
            );
        }
        if self.connect_timeout_ms == 0 || self.response_timeout_ms == 0 {
            return invalid("timeouts must be at least 1 ms");
        }
        Ok(())
    }
}

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn query(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }
}

/// Rate-limit state in Redis or Redis Cluster (see the module docs).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    /// SHA1s of [`script::SCRIPTS`].
    shas: [String; 3],
    config: RedisConfig,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .field("shas", &self.shas)
            .finish_non_exhaustive()
    }
}

/// A redis error as a store error. Connection-level timeouts (the
/// `response_timeout_ms` of the config) are reported as `Timeout(0)` when
/// the configured value is not at hand; [`RedisStore`] methods fill it in.
fn backend(e: RedisError) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout(0)
    } else {
        StoreError::Backend(e.to_string())
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl RedisStore {
    /// Connects as `config` says.
    ///
    /// A single server is connected lazily: this returns at once even if
    /// Redis is down (decisions fail, and the failure policy applies, until
    /// it is up; the connection is re-established automatically). A cluster
    /// needs one reachable node to learn the topology, so this fails if none
    /// answers within `connect_timeout_ms`.
    pub async fn connect(config: &RedisConfig) -> Result<RedisStore, StoreError> {
        config.validate()?;
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let response_timeout = Duration::from_millis(config.response_timeout_ms);
        let bad_url = |e: RedisError| StoreError::Invalid(format!("redis config: {e}"));
        let conn = if let Some(url) = &config.url {
            let client = redis::Client::open(url.as_str()).map_err(bad_url)?;
            let cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(response_timeout))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200));
            Conn::Single(ConnectionManager::new_lazy_with_config(client, cfg).map_err(bad_url)?)
        } else {
            let client = ClusterClientBuilder::new(config.cluster.iter().map(String::as_str))
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
                .retries(4)
                .min_retry_wait(5)
                .max_retry_wait(100)
                .build()
                .map_err(bad_url)?;
            let conn = tokio::time::timeout(connect_timeout, client.get_async_connection())
                .await
                .map_err(|_| StoreError::Timeout(config.connect_timeout_ms))?
                .map_err(backend)?;
            Conn::Cluster(conn)
        };
        let shas = script::SCRIPTS.map(|s| redis::Script::new(s).get_hash().to_string());
        Ok(RedisStore {
            conn,
            shas,
            config: config.clone(),
        })
    }

    /// The configuration this store was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The SHA1 of the general decision script (what `EVALSHA` is called
    /// with for windowed algorithms and very large quotas).
    pub fn script_sha(&self) -> &str {
        &self.shas[script::Kind::General as usize]
    }

    /// Which script decides `spec`: `(source, sha1)`.
    fn kind(&self, spec: &LimitSpec) -> script::Kind {
        if self.config.fast_path {
            script::kind(spec)
        } else {
            script::Kind::General
        }
    }

    /// Which script decides `spec`: `(source, sha1)`.
    fn script_for(&self, spec: &LimitSpec) -> (&'static str, &str) {
        let k = self.kind(spec) as usize;
        (script::SCRIPTS[k], &self.shas[k])
    }

    /// `PING`: is Redis answering?
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.conn
            .query(&redis::cmd("PING"))
            .await
            .map(|_| ())
            .map_err(backend)
    }

    /// Loads the decision script (`SCRIPT LOAD`; on a cluster, on every
    /// primary). Optional: a missing script is loaded on first use.
    pub async fn load_script(&self) -> Result<(), StoreError> {
        for source in script::SCRIPTS {
            self.load_one(source).await?;
        }
        Ok(())
    }

    async fn load_one(&self, source: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(source);
        match &self.conn {
            Conn::Single(_) => {
                self.conn.query(&cmd).await.map_err(backend)?;
            }
            Conn::Cluster(c) => {
                use redis::cluster_routing::{
                    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo,
                };
                c.clone()
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((
                            MultipleNodeRoutingInfo::AllMasters,
                            Some(ResponsePolicy::AllSucceeded),
                        )),
                    )
                    .await
                    .map_err(backend)?;
            }
        }
        Ok(())
    }

    /// The Redis keys that hold `key`'s state under `spec` (one per quota).
    pub fn keys(&self, spec: &LimitSpec, key: &str) -> Vec<String> {
        script::keys(&self.config.key_prefix, spec, key)
    }

    fn command(&self, name: &str, first: &str, check: &Check<'_>, time: TimeSource) -> Cmd {
        let keys = self.keys(check.spec, check.key);
        let now = match time {
            TimeSource::Redis => None,
            TimeSource::Caller => Some(check.now),
        };
        let grace = self.config.expiry_grace_ms;
        let args = match self.kind(check.spec) {
            script::Kind::FastBucket => script::fast_args(check.spec, now, check.cost, grace),
            script::Kind::FastWindow => {
                script::fast_window_args(check.spec, now, check.cost, grace)
            }
            script::Kind::General => script::args(check.spec, now, check.cost, grace),
        };
        let mut cmd = redis::cmd(name);
        cmd.arg(first).arg(keys.len()).arg(keys).arg(args);
        cmd
    }

    fn with_timeout(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Timeout(0) => StoreError::Timeout(self.config.response_timeout_ms),
            other => other,
        }
    }

    fn finish(check: &Check<'_>, v: &Value) -> Result<Decision, StoreError> {
        let answer = script::decode(check.spec, v)?;
        script::decision(check.spec, answer, check.cost)
    }

    /// Decides with an explicit time source, whatever the config says:
    /// `TimeSource::Caller` uses `check.now` (what `drl replay --store` needs).
    pub async fn decide_with(
        &self,
        check: Check<'_>,
        time: TimeSource,
    ) -> Result<Decision, StoreError> {
        validate(&check)?;
        let v = self
            .eval(&check, time)
            .await
            .map_err(|e| self.with_timeout(e))?;
        Self::finish(&check, &v)
    }

    async fn eval(&self, check: &Check<'_>, time: TimeSource) -> Result<Value, StoreError> {
        let (source, sha) = self.script_for(check.spec);
        let v = self
            .conn
            .query(&self.command("EVALSHA", sha, check, time))
            .await;
        match v {
            Err(e) if is_noscript(&e) => {
                metrics::counter!("drl_store_redis_noscript_total").increment(1);
                self.conn
                    .query(&self.command("EVAL", source, check, time))
                    .await
                    .map_err(backend)
            }
            other => other.map_err(backend),
        }
    }
}

fn validate(check: &Check<'_>) -> Result<(), StoreError> {
    if check.spec.quotas.is_empty() {
        return Err(StoreError::Invalid(format!(
            "limit {:?} has no quota",
            check.spec.name
        )));
    }
    Ok(())
}

#[async_trait]
impl Store for RedisStore {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.decide_with(check, self.config.time).await
    }

    async fn decide_many(&self, checks: &[Check<'_>]) -> Vec<Result<Decision, StoreError>> {
        let Conn::Single(conn) = &self.conn else {
            // A cluster pipeline must stay on one node; concurrent calls on
            // the multiplexed per-node connections pipeline just as well.
            return futures::future::join_all(checks.iter().map(|c| self.decide(*c))).await;
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut out: Vec<Option<Result<Decision, StoreError>>> = Vec::with_capacity(checks.len());
        for c in checks {
            match validate(c) {
                Ok(()) => {
                    let sha = self.script_for(c.spec).1;
                    pipe.add_command(self.command("EVALSHA", sha, c, self.config.time));
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        if pipe.is_empty() {
            return out.into_iter().flatten().collect();
        }
        let replies: Vec<redis::RedisResult<Value>> =
            match pipe.query_async(&mut conn.clone()).await {
                Ok(r) => r,
                Err(e) => {
                    let e = self.with_timeout(backend(e));
                    return out
                        .into_iter()
                        .map(|o| o.unwrap_or_else(|| Err(e.clone())))
                        .collect();
                }
            };
        let mut replies = replies.into_iter();
        let mut done = Vec::with_capacity(checks.len());
        for (c, o) in checks.iter().zip(out) {
            if let Some(invalid) = o {
                done.push(invalid);
                continue;
            }
            done.push(match replies.next() {
                Some(Ok(v)) => Self::finish(c, &v),
                // Not executed on a server that lost the script: run it now.
                Some(Err(e)) if is_noscript(&e) => self.decide(*c).await,
                Some(Err(e)) => Err(self.with_timeout(backend(e))),
                None => Err(StoreError::Backend(
                    "pipeline answered too few replies".into(),
                )),
            });
        }
        done
    }
}
