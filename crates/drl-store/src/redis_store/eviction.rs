//! Whether the Redis drl talks to may evict drl's keys
//! ([`RedisStore::eviction_risk`]); docs/redis.md, "Memory".

use super::RedisStore;
use crate::StoreError;

impl RedisStore {
    /// Whether Redis may evict drl's keys to make room: with `maxmemory`
    /// set and any `maxmemory-policy` but `noeviction` it drops keys that
    /// hold limits' state (they all carry an expiry, so the `volatile-*`
    /// policies drop them too), and an evicted key starts over fresh: more
    /// admitted than its limit says. Answers the warning to log, `None`
    /// when Redis cannot evict them (or refuses `CONFIG GET`, as managed
    /// services may: then nothing is known). On a cluster, one node is
    /// asked.
    pub async fn eviction_risk(&self) -> Result<Option<String>, StoreError> {
        let get = |name: &str| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(name);
            cmd
        };
        // `[name, value]` (RESP2) or `{name: value}` (RESP3).
        let read = |v: redis::Value| -> Option<String> {
            let value = match v {
                redis::Value::Array(items) => items.into_iter().nth(1)?,
                redis::Value::Map(pairs) => pairs.into_iter().next()?.1,
                _ => return None,
            };
            match value {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                redis::Value::SimpleString(s) => Some(s),
                _ => None,
            }
        };
        let Ok(policy) = self.shared.conn.query(&get("maxmemory-policy")).await else {
            return Ok(None);
        };
        let Ok(max) = self.shared.conn.query(&get("maxmemory")).await else {
            return Ok(None);
        };
        let (Some(policy), Some(max)) = (read(policy), read(max)) else {
            return Ok(None);
        };
        let bounded = max.trim().parse::<u64>().is_ok_and(|m| m > 0);
        Ok((bounded && policy != "noeviction").then(|| {
            format!(
                "Redis at {} has maxmemory {max} with maxmemory-policy {policy}: when full it \
                 evicts keys that hold limits' state, and an evicted key starts over (more \
                 admitted than its limit); set maxmemory-policy noeviction (a full Redis then \
                 refuses writes, and each limit's on_store_error decides)",
                self.config.redacted()
            )
        }))
    }
}
