//! [`RedisStore`]: exact global limits on Redis or Redis Cluster.
//!
//! Decisions are made by `EVALSHA` of a decision script; one call decides
//! a batch of requests in order, each atomically and all-or-nothing over
//! its quotas (the whole call is atomic). The script is loaded once and
//! called by its SHA1; a server that lost it (restart, failover, new
//! cluster node) answers `NOSCRIPT`, and the call is repeated once as
//! `EVAL`, which also caches the script there again.
//!
//! Concurrent [`Store::decide`] calls are coalesced (see `batch.rs`): they
//! queue to one task per store that sends whatever is queued as one call
//! while at most `batch_in_flight` calls are in flight, never waiting for
//! a batch to fill. [`Store::decide_many`] sends its checks directly, one
//! call per script kind (and, on a cluster, per hash slot) and per
//! `batch_max` decisions.
//!
//! With `engine: module` every call is a `DRL.DECIDE` of drl's native
//! Redis module instead (see `module.rs`): same keys, batching, coalescing,
//! slot grouping, timeouts and reply; no `NOSCRIPT` path.
//!
//! [`Store::charge`] is one call too (a script call, always the general
//! script, or a `DRL.DECIDE` record with the charge bit): every quota of
//! the limit is charged atomically, whatever it holds, into debt if need
//! be. A fast script that meets a debt state (a stored field above the
//! capacity, which only a charge writes) leaves that decision, and every
//! later decision of the call on the same keys, undecided and writes
//! nothing for them; the store then decides them again, in order, with
//! the general script, which reads debts exactly.
//!
//! See `docs/redis.md` for the configuration and the arithmetic.

pub(crate) mod batch;
pub use batch::coalesce;
mod config;
pub(crate) mod conn;
pub(crate) mod credentials;
pub(crate) mod errors;
mod eviction;
pub(crate) mod module;
pub(crate) mod script;
pub mod tls;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use async_trait::async_trait;
use drl_core::{Decision, Mark};
use drl_redis_wire::decide_spec::Op;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_routing::Slot;
use redis::{Cmd, IntoConnectionInfo, RedisError};

use crate::{Check, LimitSpec, Store, StoreError};
pub use config::{Engine, RedisConfig, TimeSource};
use conn::{Conn, backend};
pub use tls::RedisTls;

/// Rate-limit state in Redis or Redis Cluster (see the module docs).
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<batch::Shared>,
    batcher: batch::Batcher,
    config: RedisConfig,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .field("shas", &self.shared.shas)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects as `config` says, and starts the store's coalescing task
    /// on the current Tokio runtime (it ends when the last clone is
    /// dropped).
    ///
    /// A single server is connected lazily: this returns at once even if
    /// Redis is down (decisions fail, and the failure policy applies, until
    /// it is up; the connection is re-established automatically). A first
    /// connection is tried at once in the background, and its outcome
    /// logged in one line: an error naming the fix for a TLS or credential
    /// problem (wrong CA, missing client certificate, wrong password), a
    /// warning for an unreachable server. A cluster needs one reachable
    /// node to learn the topology, so this fails if none answers within
    /// `connect_timeout_ms` (with the same explanations).
    ///
    /// The config's files (`tls.*`, `password_file`) are read here; with
    /// `rediss://` URLs rustls's ring provider is installed as the process
    /// default if none is (see [`tls::install_crypto_provider`]).
    pub async fn connect(config: &RedisConfig) -> Result<RedisStore, StoreError> {
        config.validate()?;
        let creds = config.credentials()?;
        if let Some(path) = &config.password_file
            && credentials::world_readable(path)
        {
            tracing::warn!(
                file = %path.display(),
                "the Redis password file is readable by every user: chmod 600 (or 640 for a \
                 group) it"
            );
        }
        let certs = match (&config.tls, config.uses_tls()) {
            (Some(t), true) => Some(t.certificates()?),
            _ => None,
        };
        if config.uses_tls() {
            tls::install_crypto_provider();
        }
        let connect_timeout = Duration::from_millis(config.connect_timeout_ms);
        let response_timeout = Duration::from_millis(config.response_timeout_ms);
        let server = config.redacted();
        let bad_url = |e: RedisError| {
            StoreError::Invalid(format!("redis config: {server}: {}", errors::describe(&e)))
        };
        let conn = if let Some(url) = &config.url {
            let mut info = url.as_str().into_connection_info().map_err(bad_url)?;
            if !creds.is_empty() {
                let mut settings = info.redis_settings().clone();
                if let Some(u) = &creds.username {
                    settings = settings.set_username(u);
                }
                if let Some(p) = &creds.password {
                    settings = settings.set_password(p);
                }
                info = info.set_redis_settings(settings);
            }
            let client = match certs {
                Some(certs) => redis::Client::build_with_tls(info, certs),
                None => redis::Client::open(info),
            }
            .map_err(bad_url)?;
            let cfg = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(response_timeout))
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_millis(200));
            Conn::Single(ConnectionManager::new_lazy_with_config(client, cfg).map_err(bad_url)?)
        } else {
            let mut builder = ClusterClientBuilder::new(config.cluster.iter().map(String::as_str))
                .connection_timeout(connect_timeout)
                .response_timeout(response_timeout)
                .retries(4)
                .min_retry_wait(5)
                .max_retry_wait(100);
            if let Some(u) = &creds.username {
                builder = builder.username(u);
            }
            if let Some(p) = &creds.password {
                builder = builder.password(p);
            }
            if let Some(certs) = certs {
                builder = builder.certs(certs);
            }
            let client = builder.build().map_err(bad_url)?;
            let conn = tokio::time::timeout(connect_timeout, client.get_async_connection())
                .await
                .map_err(|_| {
                    StoreError::Backend(format!(
                        "{server}: no node answered within {} ms (connect_timeout_ms)",
                        config.connect_timeout_ms
                    ))
                })?
                .map_err(|e| StoreError::Backend(format!("{server}: {}", errors::describe(&e))))?;
            Conn::Cluster(conn)
        };
        let shas = script::SCRIPTS.map(|s| redis::Script::new(s).get_hash().to_string());
        let shared = Arc::new(batch::Shared {
            conn,
            shas,
            grace_ms: config.expiry_grace_ms,
            jitter: batch::Jitter::new(config.expiry_jitter_ms),
            response_timeout_ms: config.response_timeout_ms,
            engine: config.engine,
            server,
            module_ok: AtomicBool::new(false),
            module_warned: AtomicBool::new(false),
        });
        // A cluster is connected now, so its module is checked now (on every
        // primary); a lazily connected single server is checked before its
        // first decision.
        if config.engine == Engine::Module && matches!(shared.conn, Conn::Cluster(_)) {
            shared.ensure_module().await?;
        }
        if let Conn::Single(_) = shared.conn {
            probe(
                shared.conn.clone(),
                shared.server.clone(),
                config.uses_tls(),
            );
        }
        let batcher = batch::Batcher::start(shared.clone(), config.batch_max, config.in_flight());
        Ok(RedisStore {
            shared,
            batcher,
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
        &self.shared.shas[script::Kind::General as usize]
    }

    /// Which script decides `spec`.
    fn kind(&self, spec: &LimitSpec) -> script::Kind {
        if self.config.fast_path {
            script::kind(spec)
        } else {
            script::Kind::General
        }
    }

    /// `PING`: is Redis answering?
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.shared
            .conn
            .query(&redis::cmd("PING"))
            .await
            .map(|_| ())
            .map_err(|e| match backend(e) {
                StoreError::Timeout(_) => StoreError::Timeout(self.config.response_timeout_ms),
                other => other,
            })
    }

    /// Loads the decision script (`SCRIPT LOAD`; on a cluster, on every
    /// primary). Optional: a missing script is loaded on first use. With
    /// `engine: module` this checks the module (`DRL.VERSION`) instead.
    pub async fn load_script(&self) -> Result<(), StoreError> {
        if self.config.engine == Engine::Module {
            return self.shared.ensure_module().await;
        }
        for source in script::SCRIPTS {
            self.load_one(source).await?;
        }
        Ok(())
    }

    async fn load_one(&self, source: &str) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(source);
        match &self.shared.conn {
            Conn::Single(_) => {
                self.shared.conn.query(&cmd).await.map_err(backend)?;
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

    /// One decision, encoded for a script (or module) call: a take (also
    /// what a check and a reserve send) with the fastest script for the
    /// spec unless `general`, or a charge or a refund (always the general
    /// script).
    fn part(
        &self,
        check: &Check<'_>,
        time: TimeSource,
        ask: script::Ask<'_>,
        general: bool,
    ) -> batch::Part {
        let op = ask.op();
        let cost = ask.wire_cost(check.cost);
        // The module decides every algorithm in one call: one group per slot.
        let kind = match self.config.engine {
            Engine::Lua if op == Op::Take && !general => self.kind(check.spec),
            _ => script::Kind::General,
        };
        let mut args = Cmd::new();
        let mut buf = Vec::with_capacity(64);
        script::push_keys(
            &mut args,
            &mut buf,
            &self.config.key_prefix,
            check.spec,
            check.key,
        );
        // Every key of one decision shares the hash tag, so the last one
        // (still in `buf`) gives the slot.
        let slot = match self.shared.conn {
            Conn::Single(_) => None,
            Conn::Cluster(_) => Some(Slot::for_key(&buf)),
        };
        let now = match time {
            TimeSource::Redis => None,
            TimeSource::Caller => Some(check.now),
        };
        match self.config.engine {
            Engine::Lua => {
                script::push_args(&mut args, kind, check.spec, now, op, cost, ask.marks())
            }
            Engine::Module => {
                args.arg(module::record(check.spec, now, op, cost, ask.marks()));
            }
        }
        batch::Part {
            group: batch::Group { kind, slot },
            nkeys: check.spec.quotas.len(),
            args,
            reply_len: script::reply_len(check.spec),
        }
    }

    /// Sends one take or charge through the batcher and decodes it (see
    /// [`RedisStore::ask`]).
    async fn one(
        &self,
        check: Check<'_>,
        time: TimeSource,
        op: Op,
    ) -> Result<Decision, StoreError> {
        let ask = match op {
            Op::Take => script::Ask::Take,
            Op::Charge => script::Ask::Charge,
            Op::Refund => return Err(StoreError::Invalid("a refund needs its marks".into())),
        };
        Ok(self.ask(check, time, ask).await?.0)
    }

    /// Sends one call of any kind through the batcher and answers it; a
    /// take (or check, or reserve) a fast script left undecided is sent
    /// once more, to the general script.
    async fn ask(
        &self,
        check: Check<'_>,
        time: TimeSource,
        ask: script::Ask<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        validate(&check)?;
        if let script::Ask::Refund(marks) = ask
            && marks.len() != check.spec.quotas.len()
        {
            return Err(StoreError::Invalid(format!(
                "{} marks for the {} quotas of limit {:?}",
                marks.len(),
                check.spec.quotas.len(),
                check.spec.name
            )));
        }
        let mut general = false;
        loop {
            let reply = self
                .batcher
                .submit(self.part(&check, time, ask, general))
                .await
                .map_err(|_| StoreError::Backend("the Redis batching task has stopped".into()))??;
            match script::answer(check.spec, reply.items(), ask, check.cost)? {
                Some(d) => return Ok(d),
                None if !general => general = true,
                None => {
                    return Err(StoreError::Backend(
                        "the general decision script left a decision undecided".into(),
                    ));
                }
            }
        }
    }

    /// Decides with an explicit time source, whatever the config says:
    /// `TimeSource::Caller` uses `check.now` (what `drl replay --store` needs).
    /// Concurrent calls are coalesced into shared script calls.
    pub async fn decide_with(
        &self,
        check: Check<'_>,
        time: TimeSource,
    ) -> Result<Decision, StoreError> {
        self.one(check, time, Op::Take).await
    }

    /// A take decided by the general script (after a fast script left it
    /// undecided).
    async fn decide_with_general(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        let reply = self
            .batcher
            .submit(self.part(&check, self.config.time, script::Ask::Take, true))
            .await
            .map_err(|_| StoreError::Backend("the Redis batching task has stopped".into()))??;
        script::finish(check.spec, reply.items(), Op::Take, check.cost)?.ok_or_else(|| {
            StoreError::Backend("the general decision script left a decision undecided".into())
        })
    }

    /// Charges with an explicit time source (see [`RedisStore::decide_with`]
    /// and [`Store::charge`]): one atomic call charges every quota of the
    /// limit; the answer is the query right after.
    pub async fn charge_with(
        &self,
        check: Check<'_>,
        time: TimeSource,
    ) -> Result<Decision, StoreError> {
        self.one(check, time, Op::Charge).await
    }

    /// Checks with an explicit time source (see [`RedisStore::decide_with`]
    /// and [`Store::check`]): one read-only call (a query) returns every
    /// quota's state, and drl-core decides the cost on them.
    pub async fn check_with(
        &self,
        check: Check<'_>,
        time: TimeSource,
    ) -> Result<Decision, StoreError> {
        Ok(self.ask(check, time, script::Ask::Check).await?.0)
    }

    /// Reserves with an explicit time source (see [`Store::reserve`]): a
    /// take, whose marks drl-core computes from the states the call
    /// returns.
    pub async fn reserve_with(
        &self,
        check: Check<'_>,
        time: TimeSource,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        self.ask(check, time, script::Ask::Reserve).await
    }

    /// Refunds with an explicit time source (see [`Store::refund`]): one
    /// atomic call refunds every quota of the limit.
    pub async fn refund_with(
        &self,
        check: Check<'_>,
        marks: &[Mark],
        time: TimeSource,
    ) -> Result<Decision, StoreError> {
        Ok(self.ask(check, time, script::Ask::Refund(marks)).await?.0)
    }
}

/// Tries the lazily connected server once (`PING`) and logs the outcome
/// in one line (see [`RedisStore::connect`]).
fn probe(conn: Conn, server: String, tls: bool) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        match conn.query(&redis::cmd("PING")).await {
            Ok(_) => tracing::info!(server = %server, tls, "Redis answers"),
            Err(e) if e.is_timeout() => tracing::warn!(
                "Redis at {server} does not answer within the configured timeouts{} \
                 (decisions follow the failure policy until it does)",
                if tls {
                    "; a rediss:// URL needs Redis's `tls-port` (a plain port never completes \
                     the TLS handshake)"
                } else {
                    ""
                }
            ),
            Err(e) => {
                let text = errors::describe(&e);
                if errors::cause(&e).is_some() {
                    tracing::error!(
                        "cannot use Redis at {server}: {text} (decisions follow the failure \
                         policy until this is fixed)"
                    );
                } else {
                    tracing::warn!(
                        "Redis at {server} does not answer yet: {text} (decisions follow the \
                         failure policy until it does)"
                    );
                }
            }
        }
    });
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

    /// One atomic call (script or `DRL.DECIDE`) charges every quota of the
    /// limit, in Redis Cluster too (one limit's keys share a slot).
    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.charge_with(check, self.config.time).await
    }

    fn settles(&self) -> bool {
        true
    }

    /// One read-only call (a query of every quota); drl-core decides the
    /// cost on the states it returns.
    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        self.check_with(check, self.config.time).await
    }

    /// A take (one atomic call); the marks are drl-core's, computed on the
    /// states the call returns.
    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        self.reserve_with(check, self.config.time).await
    }

    /// One atomic call (the general script, or a `DRL.DECIDE` refund
    /// record) refunds every quota of the limit.
    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        let d = self.refund_with(check, marks, self.config.time).await?;
        Ok((d, check.cost))
    }

    /// Sends the checks as script calls: one per script kind (and, on a
    /// cluster, per hash slot), cut into calls of at most `batch_max`
    /// decisions. The calls of one group go one after another (so repeated
    /// keys are decided in order); different groups go concurrently. A
    /// check a fast script left undecided (one of its keys holds a debt) is
    /// decided by the general script after the calls, in order; the fast
    /// script leaves every later check on the same keys undecided as well,
    /// so each key's checks are still decided in the order given.
    async fn decide_many(&self, checks: &[Check<'_>]) -> Vec<Result<Decision, StoreError>> {
        let mut out: Vec<Option<Result<Decision, StoreError>>> = Vec::with_capacity(checks.len());
        let mut groups: Vec<(batch::Group, Vec<(usize, batch::Part)>)> = Vec::new();
        for (i, c) in checks.iter().enumerate() {
            match validate(c) {
                Ok(()) => {
                    let part = self.part(c, self.config.time, script::Ask::Take, false);
                    match groups.iter_mut().find(|(g, _)| *g == part.group) {
                        Some((_, v)) => v.push((i, part)),
                        None => groups.push((part.group, vec![(i, part)])),
                    }
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let max = self.config.batch_max.max(1);
        let answers = futures::future::join_all(groups.iter().map(|(_, parts)| async move {
            let mut answers = Vec::with_capacity(parts.len());
            for chunk in parts.chunks(max) {
                match self.shared.call(chunk.iter().map(|(_, p)| p)).await {
                    Ok(replies) => {
                        answers.extend(chunk.iter().zip(replies).map(|((i, _), r)| (*i, Ok(r))))
                    }
                    Err(e) => answers.extend(chunk.iter().map(|(i, _)| (*i, Err(e.clone())))),
                }
            }
            answers
        }))
        .await;
        let mut undecided = Vec::new();
        for (i, r) in answers.into_iter().flatten() {
            let c = &checks[i];
            match r.and_then(|r| script::finish(c.spec, r.items(), Op::Take, c.cost)) {
                Ok(Some(d)) => out[i] = Some(Ok(d)),
                Ok(None) => undecided.push(i),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        // Decisions a fast script left undecided (debt states) go to the
        // general script, in order, after the rest.
        undecided.sort_unstable();
        for i in undecided {
            out[i] = Some(self.decide_with_general(checks[i]).await);
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(StoreError::Backend("no answer".into()))))
            .collect()
    }
}
