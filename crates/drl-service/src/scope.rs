//! Scopes: where a limit's state lives, and the one place a new backend
//! plugs in.
//!
//! A limit is compiled to a [`Backend`]. `local` resolves, once per config
//! load, to the [`KeyedLimiter`] that `drl_store::MemoryStore` holds for the
//! limit's spec, so a decision is a direct, synchronous call with no lookup
//! by name. Any other scope is a `drl_store::Store` trait object, awaited.
//!
//! `redis` is a `drl_store::RedisStore` wrapped in `drl_store::Resilient`
//! (deadline, circuit breaker, fail open/closed/local), connected once at
//! start ([`Stores::connect_redis`]).
//!
//! `gossip` is a `drl_cluster_net::GossipStore` (Cloud Control GRD/FPS over
//! authenticated UDP gossip), started once at start
//! ([`Stores::start_gossip`]).
//!
//! `orbit` is a `drl_cluster_net::orbit::OrbitStore` (strict global caps on a
//! ring), started once at start ([`Stores::start_orbit`]); every orbit
//! limit is registered with it when a config is loaded.
//!
//! To add a scope: make [`check_supported`] accept it,
//! hold its `Store` implementation in [`Stores`] (connected at start like
//! Redis), and return it as [`Backend::Store`] from [`Stores::backend`].
//! Reload calls [`Store::retain`] on every store.

use std::collections::BTreeMap;
use std::sync::Arc;

use drl_cluster_net::orbit::{OrbitConfig, OrbitStore};
use drl_cluster_net::{GossipConfig, GossipStore};
use drl_core::{Decision, KeyedConfig, KeyedLimiter, Nanos};
use drl_store::{
    Check, LimitSpec, MemoryStore, RedisConfig, RedisStore, ResilienceConfig, Resilient, Store,
    StoreError,
};
use parking_lot::Mutex;

use drl_config::Scope;

/// `Ok` if this build can serve `scope`; otherwise why not.
pub fn check_supported(scope: Scope) -> Result<(), String> {
    match scope {
        Scope::Local | Scope::Redis | Scope::Orbit | Scope::Gossip => Ok(()),
    }
}

/// The memory bounds of a limit's keyed table: keys and bytes held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyBounds {
    /// Most keys held.
    pub max_keys: usize,
    /// Most bytes held (entries plus key bytes).
    pub max_bytes: usize,
}

impl KeyBounds {
    /// `max_keys` with the default byte budget (`max_keys` x
    /// [`drl_config::DEFAULT_BYTES_PER_KEY`]).
    pub fn keys(max_keys: usize) -> Self {
        Self {
            max_keys,
            max_bytes: max_keys.saturating_mul(drl_config::DEFAULT_BYTES_PER_KEY),
        }
    }

    /// The keyed-table configuration with these bounds.
    pub fn keyed_config(self) -> KeyedConfig {
        KeyedConfig {
            max_keys: self.max_keys,
            max_bytes: self.max_bytes,
            ..KeyedConfig::default()
        }
    }
}

/// How one limit decides.
#[derive(Clone)]
pub enum Backend {
    /// In memory, this node: a pre-resolved keyed limiter.
    Local(Arc<KeyedLimiter<String>>),
    /// Any `Store` (remote or cluster-wide state).
    Store(Arc<dyn Store>),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Local(_) => f.write_str("Backend::Local"),
            Backend::Store(_) => f.write_str("Backend::Store"),
        }
    }
}

impl Backend {
    /// Decides `cost` for `key` at `now` under `spec`.
    #[inline]
    pub async fn decide(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, StoreError> {
        match self {
            Backend::Local(l) => Ok(l.decide(key, now, cost)),
            Backend::Store(s) => {
                s.decide(Check {
                    spec,
                    key,
                    cost,
                    now,
                })
                .await
            }
        }
    }

    /// Charges `cost` for `key` at `now` under `spec`, even past the limit
    /// (docs/semantics.md, "Costs known afterwards"): a query right after.
    /// A store that cannot charge answers an error, never a take.
    pub async fn charge(
        &self,
        spec: &LimitSpec,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, StoreError> {
        match self {
            Backend::Local(l) => Ok(l.charge(key, now, cost)),
            Backend::Store(s) => {
                s.charge(Check {
                    spec,
                    key,
                    cost,
                    now,
                })
                .await
            }
        }
    }

    /// The in-memory limiter, for a local backend.
    #[inline]
    pub fn local(&self) -> Option<&KeyedLimiter<String>> {
        match self {
            Backend::Local(l) => Some(l),
            Backend::Store(_) => None,
        }
    }

    /// The synchronous decision, when this backend has one (local).
    #[inline]
    pub fn decide_now(&self, key: &str, cost: u64, now: Nanos) -> Option<Decision> {
        self.local().map(|l| l.decide(key, now, cost))
    }
}

/// Every store the service uses, kept across reloads so that unchanged
/// limits keep their counters.
#[derive(Default)]
pub struct Stores {
    /// One memory store per distinct pair of bounds.
    memory: Mutex<BTreeMap<KeyBounds, Arc<MemoryStore>>>,
    /// The Redis store (with its failure policy), once connected, and the
    /// config it was connected with.
    redis: Mutex<Option<(RedisSettings, Arc<dyn Store>)>>,
    /// The second Redis of limits whose windows are all at most a second
    /// (`redis_per_second:`), once connected.
    redis_per_second: Mutex<Option<(RedisSettings, Arc<dyn Store>)>>,
    /// The Orbit runtime, once started, and the `orbit:` section it was
    /// started with.
    orbit: Mutex<Option<(OrbitConfig, Arc<OrbitStore>)>>,
    /// The gossip node, once started, and the `cluster:` section it was
    /// started with.
    gossip: Mutex<Option<(GossipConfig, Arc<GossipStore>)>>,
    /// The Redis store's engine and failure wrapper, for the status page.
    redis_status: Mutex<Option<(drl_store::Engine, Arc<Resilient<RedisStore>>)>>,
}

/// True if two `cluster:` sections differ at most in `faults`.
fn same_but_faults(a: &GossipConfig, b: &GossipConfig) -> bool {
    let mut b = b.clone();
    b.faults = a.faults.clone();
    b.key_file = a.key_file.clone();
    b.key_env = a.key_env.clone();
    b.previous_key_files = a.previous_key_files.clone();
    *a == b
}

fn same_but_key(a: &OrbitConfig, b: &OrbitConfig) -> bool {
    let mut b = b.clone();
    b.key = a.key.clone();
    *a == b
}

/// Cluster keys read for a reload, not installed yet.
#[derive(Debug)]
pub struct PendingKeys {
    orbit: Option<drl_cluster_net::transport::KeyRing>,
    gossip: Option<drl_cluster_net::transport::KeyRing>,
}

/// What a Redis connection was made from; a reload that changes it needs
/// a restart.
pub type RedisSettings = (RedisConfig, ResilienceConfig);

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("memory", &self.memory.lock().len())
            .field("redis", &self.redis.lock().is_some())
            .field("redis_per_second", &self.redis_per_second.lock().is_some())
            .field("orbit", &self.orbit.lock().is_some())
            .field("gossip", &self.gossip.lock().is_some())
            .finish()
    }
}

impl Stores {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// Connects to Redis (once; a later call with the same settings is a
    /// no-op, with other settings an error: changing the Redis connection
    /// needs a restart).
    pub async fn connect_redis(&self, settings: &RedisSettings) -> Result<(), String> {
        if let Some((current, _)) = &*self.redis.lock() {
            return if current == settings {
                Ok(())
            } else {
                Err(
                    "the `redis` / `redis_resilience` sections changed; restart drl to apply that"
                        .into(),
                )
            };
        }
        let resilient = connect(settings, "Redis").await?;
        *self.redis_status.lock() = Some((settings.0.engine, resilient.clone()));
        let store: Arc<dyn Store> = resilient;
        *self.redis.lock() = Some((settings.clone(), store));
        Ok(())
    }

    /// Connects the per-second Redis (`redis_per_second:`), as
    /// [`Stores::connect_redis`] does the main one.
    pub async fn connect_redis_per_second(&self, settings: &RedisSettings) -> Result<(), String> {
        if let Some((current, _)) = &*self.redis_per_second.lock() {
            return if current == settings {
                Ok(())
            } else {
                Err("the `redis_per_second` section changed; restart drl to apply that".into())
            };
        }
        let store: Arc<dyn Store> = connect(settings, "the per-second Redis").await?;
        *self.redis_per_second.lock() = Some((settings.clone(), store));
        Ok(())
    }

    /// Checks that `cfg` names the stores these were started with (a
    /// change to the `redis`, `redis_per_second`, `orbit` or `cluster`
    /// sections needs a restart; their keys and `cluster.faults` reload).
    pub fn started_with(&self, cfg: &drl_config::Config) -> Result<(), &'static str> {
        if let Some(r) = &cfg.redis
            && !self.redis_matches(&(r.clone(), cfg.redis_resilience.clone()))
        {
            return Err(
                "the `redis` / `redis_resilience` sections changed (or were added); restart drl to apply that",
            );
        }
        let per_second_same = match &cfg.redis_per_second {
            Some(r) => self.redis_per_second_matches(&(r.clone(), cfg.redis_resilience.clone())),
            None => !self.has_redis_per_second(),
        };
        if !per_second_same {
            return Err(
                "the `redis_per_second` section changed (or was added or removed); restart drl to apply that",
            );
        }
        if let Some(o) = &cfg.orbit
            && !self.orbit_matches(o)
        {
            return Err(
                "the `orbit` section changed (or was added); restart drl to apply that (only `orbit.key` reloads)",
            );
        }
        if let Some(c) = &cfg.cluster
            && !self.gossip_matches(c)
        {
            return Err(
                "the `cluster` section changed (or was added); restart drl to apply that (only `cluster.faults` and the keys reload)",
            );
        }
        Ok(())
    }

    /// True if a per-second Redis is connected.
    pub fn has_redis_per_second(&self) -> bool {
        self.redis_per_second.lock().is_some()
    }

    /// True if a per-second Redis connection exists for exactly
    /// `settings`.
    pub fn redis_per_second_matches(&self, settings: &RedisSettings) -> bool {
        self.redis_per_second
            .lock()
            .as_ref()
            .is_some_and(|(s, _)| s == settings)
    }

    /// True if a Redis connection exists for exactly `settings`.
    pub fn redis_matches(&self, settings: &RedisSettings) -> bool {
        self.redis
            .lock()
            .as_ref()
            .is_some_and(|(s, _)| s == settings)
    }

    /// Starts the Orbit runtime (once; a later call with the same section is
    /// a no-op, with another section an error: changing the `orbit:`
    /// section needs a restart).
    pub async fn start_orbit(&self, cfg: &OrbitConfig) -> Result<(), String> {
        if let Some((current, _)) = &*self.orbit.lock() {
            return if current == cfg {
                Ok(())
            } else {
                Err("the `orbit` section changed; restart drl to apply that".into())
            };
        }
        let store = OrbitStore::start(cfg.clone())
            .await
            .map_err(|e| format!("cannot start the Orbit runtime: {e}"))?;
        *self.orbit.lock() = Some((cfg.clone(), Arc::new(store)));
        Ok(())
    }

    /// True if the Orbit runtime runs with exactly `cfg`.
    pub fn orbit_matches(&self, cfg: &OrbitConfig) -> bool {
        self.orbit
            .lock()
            .as_ref()
            .is_some_and(|(c, _)| same_but_key(c, cfg))
    }

    /// Loads the cluster keys of the `orbit:` and `cluster:` sections of a
    /// new config (key rotation: the files are re-read at every reload,
    /// also when their names did not change). Nothing is applied: call
    /// [`Stores::apply_keys`] once the whole reload is accepted.
    pub fn load_keys(
        &self,
        orbit: Option<&OrbitConfig>,
        cluster: Option<&GossipConfig>,
    ) -> Result<PendingKeys, String> {
        let orbit = match (orbit, self.orbit.lock().is_some()) {
            (Some(o), true) => Some(o.key.load_ring().map_err(|e| format!("orbit.key: {e}"))?),
            _ => None,
        };
        let gossip = match (cluster, self.gossip.lock().is_some()) {
            (Some(c), true) => Some(c.load_keys().map_err(|e| format!("cluster: {e}"))?),
            _ => None,
        };
        Ok(PendingKeys { orbit, gossip })
    }

    /// Installs keys loaded by [`Stores::load_keys`]: frames are sealed
    /// with the new send key, and the new set is accepted, from the next
    /// datagram on.
    pub fn apply_keys(
        &self,
        keys: PendingKeys,
        orbit: Option<&OrbitConfig>,
        cluster: Option<&GossipConfig>,
    ) {
        if let (Some(ring), Some(cfg)) = (keys.orbit, orbit)
            && let Some((current, store)) = self.orbit.lock().as_mut()
        {
            store.set_keys(ring);
            if current.key != cfg.key {
                tracing::info!("orbit cluster keys changed: new datagrams use them");
            }
            current.key = cfg.key.clone();
        }
        if let (Some(ring), Some(cfg)) = (keys.gossip, cluster)
            && let Some((current, store)) = self.gossip.lock().as_mut()
        {
            store.set_keys(ring);
            if (
                &current.key_file,
                &current.key_env,
                &current.previous_key_files,
            ) != (&cfg.key_file, &cfg.key_env, &cfg.previous_key_files)
            {
                tracing::info!("gossip cluster keys changed: new datagrams use them");
            }
            current.key_file = cfg.key_file.clone();
            current.key_env = cfg.key_env.clone();
            current.previous_key_files = cfg.previous_key_files.clone();
        }
    }

    /// The Redis store's engine and its failure wrapper (breaker, counters),
    /// if connected.
    pub fn redis_status(&self) -> Option<(drl_store::Engine, Arc<Resilient<RedisStore>>)> {
        self.redis_status.lock().clone()
    }

    /// The running gossip node and the `cluster:` section it runs with, if
    /// any.
    pub fn gossip(&self) -> Option<(GossipConfig, Arc<GossipStore>)> {
        self.gossip.lock().clone()
    }

    /// The running Orbit runtime, if any.
    pub fn orbit(&self) -> Option<Arc<OrbitStore>> {
        self.orbit.lock().as_ref().map(|(_, s)| s.clone())
    }

    /// Starts the gossip node (once; a later call with the same section is
    /// a no-op, with another section an error: changing the `cluster:`
    /// section needs a restart, except `cluster.faults`, see
    /// [`Stores::apply_gossip_faults`]).
    pub async fn start_gossip(&self, cfg: &GossipConfig) -> Result<(), String> {
        if let Some((current, _)) = &*self.gossip.lock() {
            return if same_but_faults(current, cfg) {
                Ok(())
            } else {
                Err("the `cluster` section changed; restart drl to apply that".into())
            };
        }
        let store = GossipStore::start(cfg.clone())
            .await
            .map_err(|e| format!("cannot start the gossip node: {e}"))?;
        *self.gossip.lock() = Some((cfg.clone(), Arc::new(store)));
        Ok(())
    }

    /// True if the gossip node runs with `cfg`, apart from `cfg.faults`
    /// (the one part of the `cluster:` section a reload can change).
    pub fn gossip_matches(&self, cfg: &GossipConfig) -> bool {
        self.gossip
            .lock()
            .as_ref()
            .is_some_and(|(c, _)| same_but_faults(c, cfg))
    }

    /// Applies `cfg.faults` (test-only loss, delay, isolation, blocked
    /// peers) to the running gossip node without restarting it; returns
    /// true if they changed. Call only after [`Stores::gossip_matches`]
    /// accepted `cfg`.
    pub fn apply_gossip_faults(&self, cfg: &GossipConfig) -> bool {
        let mut g = self.gossip.lock();
        let Some((current, store)) = g.as_mut() else {
            return false;
        };
        if current.faults == cfg.faults {
            return false;
        }
        store.faults().apply(&cfg.faults);
        current.faults = cfg.faults.clone();
        tracing::warn!(faults = ?cfg.faults, "cluster.faults changed: fault injection applied to the running gossip node");
        true
    }

    /// Leaves the gossip cluster gracefully, if this service is in one
    /// (peers see the node go at once instead of after failure detection).
    /// Called once the drain is over, before the process exits.
    pub async fn leave_clusters(&self) {
        let gossip = self.gossip.lock().as_ref().map(|(_, s)| s.clone());
        if let Some(store) = gossip {
            store.leave().await;
            tracing::info!("left the gossip cluster");
        }
    }

    /// The backend for a limit of `scope` with `spec`, holding at most
    /// `bounds` (keys and bytes). This is the extension point for new scopes.
    pub fn backend(
        &self,
        scope: Scope,
        spec: &LimitSpec,
        bounds: KeyBounds,
    ) -> Result<Backend, String> {
        check_supported(scope)?;
        match scope {
            Scope::Local => {
                let store = self
                    .memory
                    .lock()
                    .entry(bounds)
                    .or_insert_with(|| Arc::new(MemoryStore::new(bounds.keyed_config())))
                    .clone();
                Ok(Backend::Local(store.limiter(spec)))
            }
            Scope::Redis => match &*self.redis.lock() {
                Some((_, store)) => {
                    let fast = self.redis_per_second.lock();
                    Ok(Backend::Store(match &*fast {
                        Some((_, s)) if per_second(spec) => s.clone(),
                        _ => store.clone(),
                    }))
                }
                None => Err(
                    "scope `redis` needs a Redis connection (a `redis:` section, applied at start)"
                        .into(),
                ),
            },
            Scope::Orbit => match &*self.orbit.lock() {
                Some((_, store)) => {
                    store.register(spec).map_err(|e| e.to_string())?;
                    Ok(Backend::Store(store.clone()))
                }
                None => Err(
                    "scope `orbit` needs the Orbit runtime (an `orbit:` section, applied at start)"
                        .into(),
                ),
            },
            Scope::Gossip => match &*self.gossip.lock() {
                Some((_, store)) => Ok(Backend::Store(store.clone())),
                None => Err(
                    "scope `gossip` needs the gossip node (a `cluster:` section, applied at start)"
                        .into(),
                ),
            },
        }
    }

    /// After a reload: keep state of the limits in `live` (scope, spec,
    /// bounds), drop everything else.
    pub fn retain(&self, live: &[(Scope, LimitSpec, KeyBounds)]) {
        if let Some((_, store)) = &*self.redis.lock() {
            let specs: Vec<LimitSpec> = live
                .iter()
                .filter(|(s, _, _)| *s == Scope::Redis)
                .map(|(_, spec, _)| spec.clone())
                .collect();
            store.retain(&specs);
        }
        if let Some((_, store)) = &*self.gossip.lock() {
            let specs: Vec<LimitSpec> = live
                .iter()
                .filter(|(s, _, _)| *s == Scope::Gossip)
                .map(|(_, spec, _)| spec.clone())
                .collect();
            store.retain(&specs);
        }
        if let Some((_, store)) = &*self.orbit.lock() {
            let specs: Vec<LimitSpec> = live
                .iter()
                .filter(|(s, _, _)| *s == Scope::Orbit)
                .map(|(_, spec, _)| spec.clone())
                .collect();
            store.retain(&specs);
        }
        let mut memory = self.memory.lock();
        memory.retain(|bounds, store| {
            let specs: Vec<LimitSpec> = live
                .iter()
                .filter(|(s, _, b)| *s == Scope::Local && b == bounds)
                .map(|(_, spec, _)| spec.clone())
                .collect();
            store.retain(&specs);
            !specs.is_empty()
        });
    }
}

/// Connects to the Redis of `settings` (`what` names it in errors) behind
/// its failure policy; warns at start of a missing module or of eviction.
async fn connect(
    settings: &RedisSettings,
    what: &str,
) -> Result<Arc<Resilient<RedisStore>>, String> {
    let store = RedisStore::connect(&settings.0)
        .await
        .map_err(|e| format!("cannot connect to {what}: {e}"))?;
    if settings.0.engine == drl_store::Engine::Module {
        // A single server is connected lazily: check its module now, so
        // a missing one is logged at startup rather than at the first
        // request (decisions then fail over by the failure policy).
        let probe = store.clone();
        tokio::spawn(async move {
            let _ = probe.load_script().await;
        });
    }
    // A Redis that may evict drl's keys can reset limits: say so at
    // start (not a refusal: `maxmemory` can change at run time, and
    // managed services may hide their settings).
    let probe = store.clone();
    tokio::spawn(async move {
        if let Ok(Some(warning)) = probe.eviction_risk().await {
            tracing::warn!("{warning}");
        }
    });
    Ok(Arc::new(Resilient::new(store, settings.1.clone())))
}

/// True if every window of `spec` is at most one second: the limits
/// `redis_per_second:` holds.
fn per_second(spec: &LimitSpec) -> bool {
    spec.quotas
        .iter()
        .all(|q| q.window() <= drl_core::time::SECOND)
}
