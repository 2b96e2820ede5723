//! [`KeyedLimiter`]: per-key state for many threads and millions of keys,
//! with bounded memory.
//!
//! Keys are spread over shards, each a `RwLock<HashTable>`; one hash of the
//! key picks the shard (high bits) and the bucket. A decision on a known key
//! takes the shard's read lock only; single-quota token bucket,
//! leaky meter and GCRA then decide lock-free on a 128-bit cell
//! ([`cell`]); other algorithms and multi-quota limits take a per-key mutex.
//!
//! **The bound.** At most `max_keys` keys are held (each shard holds at most
//! its share). When a shard is full and a new key arrives, it first drops
//! every fresh state in the shard (at most once per `sweep_interval` of
//! `now`), since a fresh state decides exactly as a missing one. If nothing
//! fresh is left, it evicts, among a sample of [`EVICTION_SAMPLE`] entries,
//! the one nearest to fresh (smallest `reset_after`). That key then starts
//! over from a fresh state: it may be admitted up to what its evicted state
//! was still holding back. Such evictions are counted as `evicted_live` in
//! [`KeyedStats`]; size `max_keys` so that it stays at zero.

pub mod cell;
mod direct;

pub use direct::AtomicLimiter;

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::{Mutex, RwLock};

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::limiter::State;
use crate::multi::MultiLimiter;
use crate::time::Nanos;
use cell::CellKind;

/// How many entries a full shard with no fresh state looks at to choose a victim.
pub const EVICTION_SAMPLE: usize = 16;

type Word = portable_atomic::AtomicU128;

/// Bounds and layout of a [`KeyedLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedConfig {
    /// The most keys held at once (default 1,000,000).
    pub max_keys: usize,
    /// Number of shards (default 64; rounded up to a power of two).
    pub shards: usize,
    /// The least time between two fresh-state sweeps of one full shard
    /// (default 1 s).
    pub sweep_interval: Nanos,
}

impl Default for KeyedConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 64,
            sweep_interval: crate::time::SECOND,
        }
    }
}

/// Counters of a [`KeyedLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyedStats {
    /// Keys held now.
    pub keys: usize,
    /// Fresh states dropped (no effect on decisions).
    pub evicted_fresh: u64,
    /// Live states evicted because the bound was hit with nothing fresh.
    pub evicted_live: u64,
}

enum Slot {
    Cell(Word),
    Locked(Mutex<Box<[State]>>),
}

struct Entry<K> {
    key: K,
    slot: Slot,
}

struct Shard<K> {
    map: RwLock<HashTable<Entry<K>>>,
    last_sweep: AtomicU64,
}

/// Per-key limits over a [`MultiLimiter`] (one or more quotas, all-or-nothing).
pub struct KeyedLimiter<K> {
    limiter: MultiLimiter,
    cell: Option<CellKind>,
    shards: Box<[Shard<K>]>,
    mask: u64,
    per_shard: usize,
    config: KeyedConfig,
    hasher: foldhash::fast::RandomState,
    evicted_fresh: AtomicU64,
    evicted_live: AtomicU64,
}

impl<K> std::fmt::Debug for KeyedLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("limiter", &self.limiter)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> KeyedLimiter<K> {
    /// A keyed limiter deciding with `limiter`, bounded by `config`.
    pub fn new(limiter: MultiLimiter, config: KeyedConfig) -> Self {
        let n = config.shards.clamp(1, 1 << 16).next_power_of_two();
        let max_keys = config.max_keys.max(1);
        let per_shard = max_keys.div_ceil(n);
        let cell = match limiter.parts() {
            [only] => match only.algorithm() {
                Algorithm::TokenBucket => Some(CellKind::TokenBucket),
                Algorithm::LeakyBucket => Some(CellKind::LeakyBucket),
                Algorithm::Gcra => Some(CellKind::Gcra),
                _ => None,
            },
            _ => None,
        };
        let hasher = foldhash::fast::RandomState::default();
        let shards = (0..n)
            .map(|_| Shard {
                map: RwLock::new(HashTable::new()),
                last_sweep: AtomicU64::new(0),
            })
            .collect();
        Self {
            limiter,
            cell,
            shards,
            mask: (n - 1) as u64,
            per_shard,
            config: KeyedConfig {
                max_keys,
                shards: n,
                ..config
            },
            hasher,
            evicted_fresh: AtomicU64::new(0),
            evicted_live: AtomicU64::new(0),
        }
    }

    /// The quotas this limiter enforces.
    pub fn limiter(&self) -> &MultiLimiter {
        &self.limiter
    }

    /// The effective configuration (shards rounded to a power of two).
    pub fn config(&self) -> &KeyedConfig {
        &self.config
    }

    /// True if decisions take the lock-free path.
    pub fn is_lock_free(&self) -> bool {
        self.cell.is_some()
    }

    /// The key's hash and its shard (high bits pick the shard; the table
    /// uses the same hash).
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &Shard<K>) {
        let h = self.hasher.hash_one(key);
        (h, &self.shards[((h >> 40) & self.mask) as usize])
    }

    fn rehash(&self) -> impl Fn(&Entry<K>) -> u64 + '_ {
        |e| self.hasher.hash_one(&e.key)
    }

    /// Decides a request of `cost` at `now` for `key`.
    pub fn decide<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let eq = |e: &Entry<K>| e.key.borrow() == key;
        {
            let map = shard.map.read();
            if let Some(e) = map.find(hash, eq) {
                return self.decide_slot(&e.slot, now, cost);
            }
        }
        // Unknown key: a query or a denial on a fresh state writes nothing,
        // so decide on a fresh state first and insert only when admitted
        // with a cost. This keeps floods of impossible or zero-cost requests
        // from filling the table.
        let mut fresh = self.limiter.new_states();
        let d = self.limiter.decide(&mut fresh, now, cost);
        if !d.allowed || cost == 0 {
            return d;
        }
        let mut map = shard.map.write();
        if let Some(e) = map.find(hash, eq) {
            // Someone inserted it meanwhile: decide on the real state.
            return self.decide_slot(&e.slot, now, cost);
        }
        if map.len() >= self.per_shard {
            self.make_room(shard, &mut map, now);
        }
        let entry = Entry {
            key: key.to_owned(),
            slot: self.slot_from(fresh.into_boxed_slice()),
        };
        map.insert_unique(hash, entry, self.rehash());
        d
    }

    fn slot_from(&self, states: Box<[State]>) -> Slot {
        match (self.cell, &*states) {
            (Some(kind), [only]) => match kind.pack_state(only) {
                Some(w) => Slot::Cell(Word::new(w)),
                None => unreachable!("cell kinds hold only their own states"),
            },
            _ => Slot::Locked(Mutex::new(states)),
        }
    }

    #[inline]
    fn decide_slot(&self, slot: &Slot, now: Nanos, cost: u64) -> Decision {
        match (slot, self.cell) {
            (Slot::Cell(w), Some(kind)) => {
                cell::decide(kind, self.limiter.parts()[0].quota(), w, now, cost)
            }
            (Slot::Locked(m), _) => self.limiter.decide(&mut m.lock(), now, cost),
            (Slot::Cell(_), None) => unreachable!("cells exist only for cell kinds"),
        }
    }

    fn slot_is_fresh(&self, slot: &Slot, now: Nanos) -> bool {
        match (slot, self.cell) {
            (Slot::Cell(w), Some(kind)) => {
                kind.is_fresh(self.limiter.parts()[0].quota(), cell::Word128::load(w), now)
            }
            (Slot::Locked(m), _) => self.limiter.is_fresh(&m.lock(), now),
            (Slot::Cell(_), None) => unreachable!(),
        }
    }

    fn slot_reset_after(&self, slot: &Slot, now: Nanos) -> Nanos {
        match (slot, self.cell) {
            (Slot::Cell(w), Some(kind)) => {
                kind.reset_after(self.limiter.parts()[0].quota(), cell::Word128::load(w), now)
            }
            (Slot::Locked(m), _) => {
                let states = m.lock();
                self.limiter
                    .parts()
                    .iter()
                    .zip(states.iter())
                    .map(|(l, s)| l.check(s, now, 0).reset_after)
                    .max()
                    .unwrap_or(0)
            }
            (Slot::Cell(_), None) => unreachable!(),
        }
    }

    fn make_room(&self, shard: &Shard<K>, map: &mut HashTable<Entry<K>>, now: Nanos) {
        let last = shard.last_sweep.load(Ordering::Relaxed);
        if now >= last.saturating_add(self.config.sweep_interval) || last == 0 {
            shard.last_sweep.store(now.max(1), Ordering::Relaxed);
            let before = map.len();
            map.retain(|e| !self.slot_is_fresh(&e.slot, now));
            let dropped = before - map.len();
            self.evicted_fresh
                .fetch_add(dropped as u64, Ordering::Relaxed);
            if map.len() < self.per_shard {
                return;
            }
        }
        let victim = map
            .iter()
            .take(EVICTION_SAMPLE)
            .map(|e| (self.slot_reset_after(&e.slot, now), &e.key))
            .min_by_key(|(r, _)| *r)
            .map(|(r, k)| (r, k.clone()));
        if let Some((reset, k)) = victim {
            let hash = self.hasher.hash_one(&k);
            if let Ok(e) = map.find_entry(hash, |e| e.key == k) {
                e.remove();
            }
            let counter = if reset == 0 {
                &self.evicted_fresh
            } else {
                &self.evicted_live
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops every fresh state (no effect on decisions); returns how many.
    /// Call it from a periodic task to return memory after bursts of keys.
    pub fn sweep(&self, now: Nanos) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut map = shard.map.write();
            let before = map.len();
            map.retain(|e| !self.slot_is_fresh(&e.slot, now));
            dropped += before - map.len();
        }
        self.evicted_fresh
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().len()).sum()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters.
    pub fn stats(&self) -> KeyedStats {
        KeyedStats {
            keys: self.len(),
            evicted_fresh: self.evicted_fresh.load(Ordering::Relaxed),
            evicted_live: self.evicted_live.load(Ordering::Relaxed),
        }
    }

    /// A copy of `key`'s states (`None` if not held, i.e. fresh).
    pub fn snapshot<Q>(&self, key: &Q) -> Option<Vec<State>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let map = shard.map.read();
        let slot = &map.find(hash, |e| e.key.borrow() == key)?.slot;
        Some(match (slot, self.cell) {
            (Slot::Cell(w), Some(kind)) => vec![kind.unpack_state(cell::Word128::load(w))],
            (Slot::Locked(m), _) => m.lock().to_vec(),
            (Slot::Cell(_), None) => unreachable!(),
        })
    }
}
