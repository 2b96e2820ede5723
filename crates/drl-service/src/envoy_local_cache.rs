//! The local over-limit cache of Envoy RLS descriptors counted in a store
//! (`server.envoy_local_cache_bytes`, envoyproxy/ratelimit's
//! `LOCAL_CACHE_SIZE_IN_BYTES`): a key the store found over its limit is
//! remembered until its fixed window ends, and later requests for it are
//! answered OVER_LIMIT without a store round trip.
//!
//! Never fails open: an entry is made only from a store's denial that
//! left no room (`remaining == 0`, so any later hit of the same window
//! would be denied too), its key names the window, and it expires at the
//! window's end. (A denial that `redis_resilience`'s failure policy made
//! while the store was unreachable is indistinguishable here and is
//! remembered too: it can only deny more until its window ends, never
//! admit.) Bounded: every entry costs its key's bytes plus
//! [`ENTRY_OVERHEAD`]; when an entry does not fit, the expired ones go
//! first, then those closest to their end (`evacuateCount`). Losing an
//! entry only costs a store round trip.
//!
//! Its counters are the reference's `localcache` gauges, rendered as its
//! statsd names map to Prometheus (`ratelimit_localcache_hitCount`, ...).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use drl_core::time::Nanos;
use drl_core::{Decision, DenyReason};
use drl_http::prometheus::{Exposition, Kind};

/// Bytes counted for an entry besides its key (held twice: map and order).
pub const ENTRY_OVERHEAD: u64 = 64;

const HIT: usize = 0;
const MISS: usize = 1;
const LOOKUP: usize = 2;
const EXPIRED: usize = 3;
const ENTRIES: usize = 4;
const EVACUATE: usize = 5;
const OVERWRITE: usize = 6;

/// The reference's gauge names, in counter order.
const NAMES: [(&str, &str); 7] = [
    (
        "hitCount",
        "Lookups answered from the local over-limit cache.",
    ),
    (
        "missCount",
        "Lookups the local over-limit cache could not answer.",
    ),
    ("lookupCount", "Lookups of the local over-limit cache."),
    (
        "expiredCount",
        "Entries of the local over-limit cache found past their window.",
    ),
    ("entryCount", "Entries held by the local over-limit cache."),
    (
        "evacuateCount",
        "Entries dropped from the full local over-limit cache before their end.",
    ),
    (
        "overwriteCount",
        "Entries of the local over-limit cache made again.",
    ),
];

/// Process-wide counters (a reload makes a new cache; they go on).
static COUNTS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
/// Whether any cache was made (the families are rendered from then on).
static MADE: AtomicU64 = AtomicU64::new(0);

fn add(i: usize, n: u64) {
    COUNTS[i].fetch_add(n, Ordering::Relaxed);
}

/// The counters `[hit, miss, lookup, expired, entries, evacuate,
/// overwrite]`.
pub fn counts() -> [u64; 7] {
    std::array::from_fn(|i| COUNTS[i].load(Ordering::Relaxed))
}

#[derive(Debug, Default)]
struct Inner {
    /// Key -> the end of its window.
    ends: HashMap<Box<str>, Nanos>,
    /// (end, key), soonest first.
    order: BTreeSet<(Nanos, Box<str>)>,
    bytes: u64,
}

/// A bounded set of keys over their limit, each until its window's end.
#[derive(Debug)]
pub struct LocalCache {
    capacity: u64,
    inner: Mutex<Inner>,
}

fn cost(key: &str) -> u64 {
    2 * key.len() as u64 + ENTRY_OVERHEAD
}

impl LocalCache {
    /// A cache of at most `capacity` bytes (see [`ENTRY_OVERHEAD`]).
    pub fn new(capacity: u64) -> Self {
        MADE.store(1, Ordering::Relaxed);
        Self {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// True when `key` was found over its limit and its window has not
    /// ended at `now`.
    pub fn is_over(&self, key: &str, now: Nanos) -> bool {
        add(LOOKUP, 1);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let hit = match g.ends.get(key) {
            Some(&end) if end > now => true,
            Some(&end) => {
                g.remove(key, end);
                add(EXPIRED, 1);
                false
            }
            None => false,
        };
        add(if hit { HIT } else { MISS }, 1);
        hit
    }

    /// Remembers `key` as over its limit until `end`.
    pub fn remember(&self, key: &str, end: Nanos, now: Nanos) {
        let c = cost(key);
        if c > self.capacity || end <= now {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = g.ends.get(key).copied() {
            g.remove(key, old);
            add(OVERWRITE, 1);
        }
        while let Some((e, _)) = g.order.first()
            && *e <= now
        {
            let (e, k) = g.order.pop_first().expect("just seen");
            g.remove(&k, e);
            add(EXPIRED, 1);
        }
        while g.bytes + c > self.capacity {
            let Some((e, k)) = g.order.pop_first() else {
                break;
            };
            g.remove(&k, e);
            add(EVACUATE, 1);
        }
        let k: Box<str> = key.into();
        g.ends.insert(k.clone(), end);
        g.order.insert((end, k));
        g.bytes += c;
        add(ENTRIES, 1);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ends
            .len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes counted for the entries held.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

impl Inner {
    /// Drops `key` (ending at `end`) from both indexes.
    fn remove(&mut self, key: &str, end: Nanos) {
        if self.ends.remove(key).is_some() {
            self.order.remove(&(end, Box::from(key)));
            self.bytes -= cost(key);
            COUNTS[ENTRIES].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        let n = self.len() as u64;
        COUNTS[ENTRIES].fetch_sub(n, Ordering::Relaxed);
    }
}

/// The cache's key for descriptor `key` of the rule at `rule` (its
/// address: unique while its config is loaded, and a reload makes a new
/// cache), `limit` per `window` in `domain`, in the window of `now`.
fn cache_key(
    domain: &str,
    rule: usize,
    limit: u64,
    window: Nanos,
    now: Nanos,
    key: &str,
) -> String {
    let index = now / window.max(1);
    format!("{domain}\u{1f}{rule:x}\u{1f}{limit}\u{1f}{window}\u{1f}{index}\u{1f}{key}")
}

/// The end of the window of `now` (at most `reset_after` away: the
/// store's own figure, if sooner).
fn window_end(window: Nanos, now: Nanos, reset_after: Nanos) -> Nanos {
    let w = window.max(1);
    (now - now % w + w).min(now.saturating_add(reset_after))
}

/// The decision answered from the cache: denied, nothing left until the
/// window's end.
fn denial(limit: u64, window: Nanos, now: Nanos) -> Decision {
    let wait = window.max(1) - now % window.max(1);
    Decision {
        allowed: false,
        remaining: 0,
        limit,
        retry_after: Some(wait),
        reset_after: wait,
        delay: 0,
        reason: Some(DenyReason::OverLimit),
    }
}

/// One descriptor's use of a cache in an Envoy RLS call.
#[derive(Debug)]
pub struct Lookup<'a> {
    cache: &'a LocalCache,
    key: String,
    limit: u64,
    window: Nanos,
    now: Nanos,
    /// The key is over its limit: answer [`Lookup::denial`], ask no store.
    pub hit: bool,
}

impl<'a> Lookup<'a> {
    /// Looks descriptor `key` of the rule at `rule` (`limit` per `window`,
    /// in `domain`) up in `cache`, at `now`.
    pub fn new(
        cache: &'a LocalCache,
        domain: &str,
        rule: usize,
        (limit, window): (u64, Nanos),
        now: Nanos,
        key: &str,
    ) -> Self {
        let key = cache_key(domain, rule, limit, window, now, key);
        let hit = cache.is_over(&key, now);
        Self {
            cache,
            key,
            limit,
            window,
            now,
            hit,
        }
    }

    /// The decision answered on a hit.
    pub fn denial(&self) -> Decision {
        denial(self.limit, self.window, self.now)
    }

    /// After the store's decision `d` (on a miss): remembers the key when
    /// the store denied it with nothing left.
    pub fn after(&self, d: &Decision) {
        if !self.hit && !d.allowed && d.remaining == 0 {
            let end = window_end(self.window, self.now, d.reset_after);
            self.cache.remember(&self.key, end, self.now);
        }
    }
}

/// Appends the `ratelimit_localcache_*` gauges once a cache was made.
pub fn render(out: &mut Exposition) {
    if MADE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let c = counts();
    for (i, (name, help)) in NAMES.iter().enumerate() {
        let name = format!("ratelimit_localcache_{name}");
        out.family(&name, Kind::Gauge, help);
        out.sample(&name, &[], c[i]);
    }
    let name = "ratelimit_localcache_averageAccessTime";
    out.family(
        name,
        Kind::Gauge,
        "Always 0 (the reference's averageAccessTime; not measured).",
    );
    out.sample(name, &[], 0u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_entry_lasts_until_its_end() {
        let c = LocalCache::new(1000);
        assert!(!c.is_over("k", 0));
        c.remember("k", 10, 0);
        assert!(c.is_over("k", 9));
        assert!(!c.is_over("k", 10));
        assert!(c.is_empty());
    }

    #[test]
    fn nothing_past_its_end_or_too_big_is_held() {
        let c = LocalCache::new(ENTRY_OVERHEAD + 2);
        c.remember("k", 5, 5);
        c.remember("kk", 10, 0);
        assert!(c.is_empty());
        c.remember("k", 10, 0);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_denial_is_remembered_only_when_nothing_is_left_and_only_in_its_window() {
        let c = LocalCache::new(1000);
        let (limit, window) = (15, 100);
        let miss = Lookup::new(&c, "d", 1, (limit, window), 150, "k");
        assert!(!miss.hit);
        // Denied with room left (a big take): not remembered.
        let mut d = denial(limit, window, 150);
        d.remaining = 3;
        miss.after(&d);
        assert!(c.is_empty());
        miss.after(&denial(limit, window, 150));
        let hit = Lookup::new(&c, "d", 1, (limit, window), 199, "k");
        assert!(hit.hit);
        assert_eq!(hit.denial().reset_after, 1);
        // Another rule, another domain, the next window: not this entry.
        assert!(!Lookup::new(&c, "d", 2, (limit, window), 160, "k").hit);
        assert!(!Lookup::new(&c, "e", 1, (limit, window), 160, "k").hit);
        assert!(!Lookup::new(&c, "d", 1, (limit, window), 200, "k").hit);
    }

    proptest! {
        // Bounded, and every hit was remembered with an end past `now`.
        #[test]
        fn bounded_and_never_invented(
            ops in proptest::collection::vec((0u8..20, 1u64..50, any::<bool>()), 1..200),
            capacity in 0u64..1000,
        ) {
            let c = LocalCache::new(capacity);
            let mut ends: HashMap<String, Nanos> = HashMap::new();
            let mut now = 0;
            for (k, d, write) in ops {
                let key = format!("key{k}");
                now += 1;
                if write {
                    c.remember(&key, now + d, now);
                    ends.insert(key, now + d);
                } else if c.is_over(&key, now) {
                    prop_assert!(ends.get(&key).is_some_and(|&e| e > now));
                }
                prop_assert!(c.bytes() <= capacity);
            }
        }
    }
}
