//! drl-store: where per-key rate-limit state lives, behind one async
//! [`Store`] trait. The server's `local` scope uses [`MemoryStore`]; the
//! `redis` scope uses the Redis implementation (Lua scripts, Redis Cluster).

pub mod memory;
pub mod redis_store;
pub mod resilient;
pub mod spec;
pub mod store;

pub use memory::MemoryStore;
pub use redis_store::{Engine, RedisConfig, RedisStore, RedisTls, TimeSource, coalesce};
pub use resilient::{
    BreakerConfig, BreakerState, FailurePolicy, OnStoreError, ResilienceConfig, Resilient,
    ResilientStats,
};
pub use spec::LimitSpec;
pub use store::{Check, Store, StoreError};
