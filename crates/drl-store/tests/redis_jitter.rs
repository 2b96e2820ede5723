//! envoyproxy/ratelimit's TestRedisWithJitter
//! (`test/redis/fixed_cache_impl_test.go`), ported to a real
//! `redis-server`: with `expiry_jitter_ms` each call adds up to that much
//! to its keys' expiry (the reference adds a random part below
//! `EXPIRATION_JITTER_MAX_SECONDS` to its `EXPIRE`), so keys written
//! together do not expire together; without it every key expires when its
//! state is fresh again (plus `expiry_grace_ms`). The decisions are the
//! same either way. Both engines.

mod common;

use common::RedisServer;
use drl_core::{Algorithm, Quota};
use drl_store::{Check, Engine, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};

const JITTER_MS: u64 = 100_000;

#[test]
fn expiry_jitter_spreads_key_lifetimes_and_changes_no_decision() {
    let server = RedisServer::start_module();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for engine in [Engine::Lua, Engine::Module] {
            for jitter in [0, JITTER_MS] {
                let mut cfg = RedisConfig::single(server.url());
                cfg.expiry_grace_ms = 0;
                cfg.expiry_jitter_ms = jitter;
                cfg.time = TimeSource::Caller;
                cfg.engine = engine;
                cfg.key_prefix = format!("jitter-{engine:?}-{jitter}:");
                let store = RedisStore::connect(&cfg).await.unwrap();
                // GCRA 2 per 200 ms: a take of 1 is fresh again after 100 ms.
                let spec =
                    LimitSpec::new("l", Algorithm::Gcra, vec![Quota::parse("2/200ms").unwrap()]);
                let now = 5_000_000_000_000u64;
                let mut ttls = Vec::new();
                for i in 0..16 {
                    let key = format!("k{i}");
                    let d = store
                        .decide(Check {
                            spec: &spec,
                            key: &key,
                            cost: 1,
                            now,
                        })
                        .await
                        .unwrap();
                    assert!(d.allowed && d.remaining == 1, "{engine:?} {jitter}: {d:?}");
                    let keys = store.keys(&spec, &key);
                    let ttl: i64 = redis::cmd("PTTL")
                        .arg(&keys[0])
                        .query(&mut server.admin())
                        .unwrap();
                    ttls.push(ttl);
                }
                let (min, max) = (*ttls.iter().min().unwrap(), *ttls.iter().max().unwrap());
                assert!(min >= 1, "{engine:?} {jitter}: {ttls:?}");
                if jitter == 0 {
                    assert!(max <= 100, "{engine:?}: fresh after 100 ms: {ttls:?}");
                } else {
                    assert!(
                        max <= 100 + JITTER_MS as i64,
                        "{engine:?}: at most the jitter more: {ttls:?}"
                    );
                    assert!(
                        max - min > 10_000,
                        "{engine:?}: lifetimes spread over the jitter: {ttls:?}"
                    );
                }
            }
        }
    });
}
