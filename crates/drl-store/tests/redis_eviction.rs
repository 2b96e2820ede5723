//! A Redis that may evict drl's keys (`maxmemory` with any policy but
//! `noeviction`) can reset a limit: `RedisStore::eviction_risk` names it,
//! and `drl serve` logs it at start. Real redis-server processes, one per
//! configuration.

mod common;

use common::RedisServer;
use drl_store::{RedisConfig, RedisStore};

async fn risk(extra: &[&str]) -> Option<String> {
    let redis = RedisServer::start_with_free_port(extra);
    let store = RedisStore::connect(&RedisConfig::single(redis.url()))
        .await
        .unwrap();
    store.eviction_risk().await.unwrap()
}

#[tokio::test]
async fn an_evicting_redis_is_named_and_a_safe_one_is_not() {
    // Every policy that can drop drl's keys (they all carry an expiry).
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        let w = risk(&["--maxmemory", "64mb", "--maxmemory-policy", policy])
            .await
            .unwrap_or_else(|| panic!("{policy} not named"));
        assert!(w.contains(policy) && w.contains("noeviction"), "{w}");
    }
    // noeviction: a full Redis refuses writes instead.
    assert_eq!(
        risk(&["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]).await,
        None
    );
    // No maxmemory: nothing is evicted whatever the policy.
    assert_eq!(risk(&["--maxmemory-policy", "allkeys-lru"]).await, None);
}
