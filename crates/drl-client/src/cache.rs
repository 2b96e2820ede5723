//! The denial cache: a key denied with a `retry_after` is answered locally
//! until then, with no round trip.
//!
//! An entry remembers, for one `(limit, key)`, the smallest cost denied
//! (`min_cost`), until when (that denial's `retry_after`), and the largest
//! cost denied with a `retry_after` (`max_cost`). A later check of a cost
//! in `[min_cost, max_cost]` before then is denied from the cache: every
//! algorithm denies a larger cost at least as long as a smaller one,
//! admissions in between only use more of the quota, and a cost some wait
//! admitted once fits the limit's capacity (so the cache never answers
//! "retry later" to a cost that can never fit: that one goes to the
//! backend). The cached `retry_after` is the smallest cost's wait, the
//! earliest a check of any of these costs can be admitted.
//!
//! A smaller or larger cost, a check after the time, and every cost-0
//! query go to the backend; cost-0 answers are never stored. A denial no
//! wait admits (`retry_after: None`) is not stored.

use std::hash::{BuildHasher, Hash};

use drl_core::{Decision, Nanos};
use hashbrown::{Equivalent, HashMap};
use parking_lot::Mutex;

/// Bounds of the denial cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Most `(limit, key)` pairs held (default 100,000). When full, expired
    /// entries are dropped; if none is, a new denial is not cached.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 100_000,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The smallest denied cost.
    min_cost: u64,
    /// The largest cost denied with a `retry_after`.
    max_cost: u64,
    /// Denied until this time (exclusive).
    until: Nanos,
    /// The state's reset time.
    reset_at: Nanos,
    /// The denial as the backend gave it.
    decision: Decision,
}

/// `(limit, key)` borrowed, hashing like the owned pair.
#[derive(Hash)]
struct Pair<'a>(&'a str, &'a str);

impl Equivalent<(String, String)> for Pair<'_> {
    fn equivalent(&self, k: &(String, String)) -> bool {
        self.0 == k.0 && self.1 == k.1
    }
}

type Shard = HashMap<(String, String), Entry, foldhash::fast::RandomState>;

const SHARDS: usize = 16;

/// A bounded, sharded map of live denials.
#[derive(Debug)]
pub struct DenialCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: foldhash::fast::RandomState,
}

impl DenialCache {
    /// An empty cache bounded by `config`.
    pub fn new(config: CacheConfig) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: config.max_entries.div_ceil(SHARDS).max(1),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn shard(&self, limit: &str, key: &str) -> &Mutex<Shard> {
        let h = self.hasher.hash_one(Pair(limit, key));
        &self.shards[(h as usize) % SHARDS]
    }

    /// The cached denial of a check of `cost` at `now`, if one holds:
    /// `retry_after` and `reset_after` count from `now`.
    pub fn lookup(&self, limit: &str, key: &str, cost: u64, now: Nanos) -> Option<Decision> {
        if cost == 0 {
            return None;
        }
        let mut shard = self.shard(limit, key).lock();
        let e = *shard.get(&Pair(limit, key))?;
        if now >= e.until {
            shard.remove(&Pair(limit, key));
            return None;
        }
        if cost < e.min_cost || cost > e.max_cost {
            return None;
        }
        Some(Decision {
            retry_after: Some(e.until - now),
            reset_after: e.reset_at.saturating_sub(now),
            ..e.decision
        })
    }

    /// Remembers `d`, the backend's answer to a check of `cost` decided no
    /// earlier than `decided_at`, if it is a denial some wait admits.
    pub fn insert(&self, limit: &str, key: &str, cost: u64, d: &Decision, decided_at: Nanos) {
        let Some(wait) = d.retry_after else { return };
        if d.allowed || cost == 0 || wait == 0 {
            return;
        }
        let entry = Entry {
            min_cost: cost,
            max_cost: cost,
            until: decided_at.saturating_add(wait),
            reset_at: decided_at.saturating_add(d.reset_after),
            decision: *d,
        };
        let mut shard = self.shard(limit, key).lock();
        if let Some(e) = shard.get_mut(&Pair(limit, key)) {
            if e.until <= decided_at {
                *e = entry;
            } else if cost < e.min_cost {
                // A smaller cost's wait bounds every cost above it.
                *e = Entry {
                    max_cost: e.max_cost,
                    ..entry
                };
            } else {
                // The smallest cost's wait still holds; `cost` fits.
                e.max_cost = e.max_cost.max(cost);
            }
            return;
        }
        if shard.len() >= self.per_shard {
            shard.retain(|_, e| e.until > decided_at);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        shard.insert((limit.to_string(), key.to_string()), entry);
    }

    /// Entries held (expired ones included until touched).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::DenyReason;

    fn denied(wait: Nanos) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            limit: 5,
            retry_after: Some(wait),
            reset_after: wait * 2,
            delay: 0,
            reason: Some(DenyReason::OverLimit),
        }
    }

    #[test]
    fn answers_until_retry_after_for_costs_at_least_the_denied_one() {
        let c = DenialCache::new(CacheConfig::default());
        c.insert("api", "k", 2, &denied(100), 1_000);
        assert_eq!(
            c.lookup("api", "k", 2, 1_040).unwrap().retry_after,
            Some(60)
        );
        assert!(
            c.lookup("api", "k", 3, 1_099).is_none(),
            "larger, maybe never fits"
        );
        assert!(c.lookup("api", "k", 1, 1_050).is_none(), "smaller cost");
        assert!(c.lookup("api", "k", 0, 1_050).is_none(), "a query");
        assert!(c.lookup("api", "other", 2, 1_050).is_none());
        assert!(c.lookup("api", "k", 2, 1_100).is_none(), "expired");
        assert!(c.is_empty(), "expired entries are dropped when touched");
    }

    #[test]
    fn entries_widen_to_costs_denied_with_a_wait() {
        let c = DenialCache::new(CacheConfig::default());
        c.insert("api", "k", 2, &denied(100), 1_000);
        // Cost 5 was denied with a wait too: it fits, and the cost-2
        // wait still bounds it.
        c.insert("api", "k", 5, &denied(400), 1_010);
        let d = c.lookup("api", "k", 4, 1_050).unwrap();
        assert_eq!(d.retry_after, Some(50));
        assert!(c.lookup("api", "k", 6, 1_050).is_none());
        // A smaller cost denied: its (shorter) wait bounds them all.
        c.insert("api", "k", 1, &denied(20), 1_060);
        assert_eq!(
            c.lookup("api", "k", 5, 1_070).unwrap().retry_after,
            Some(10)
        );
        assert!(c.lookup("api", "k", 5, 1_080).is_none());
    }

    #[test]
    fn stores_only_waitable_denials_of_real_costs() {
        let c = DenialCache::new(CacheConfig::default());
        c.insert("a", "k", 0, &denied(100), 0);
        let mut never = denied(100);
        never.retry_after = None;
        c.insert("a", "k", 1, &never, 0);
        let mut ok = denied(0);
        ok.allowed = true;
        c.insert("a", "k", 1, &ok, 0);
        assert!(c.is_empty());
    }

    #[test]
    fn bounded_by_max_entries() {
        let c = DenialCache::new(CacheConfig { max_entries: 32 });
        for i in 0..1000 {
            c.insert("a", &i.to_string(), 1, &denied(1_000), 0);
        }
        assert!(c.len() <= 32, "{}", c.len());
        // Expired entries make room.
        c.insert("a", "late", 1, &denied(1_000), 5_000);
        assert!(c.lookup("a", "late", 1, 5_001).is_some());
    }
}
