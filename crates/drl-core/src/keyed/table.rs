//! [`Table`]: the sharded, bounded key → [`Slot`] map behind a
//! [`super::KeyedLimiter`], generic over the slot kind.
//!
//! Keys are spread over shards, each a `RwLock<HashTable>`; one hash of the
//! key picks the shard (high bits) and the bucket. A decision on a known key
//! takes the shard's read lock only. Each shard also counts the bytes its
//! entries take ([`Table::ENTRY_BYTES`] plus what each key owns on the
//! heap, [`KeyBytes`]), under the same write lock that inserts and removes.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::RwLock;

use super::slot::{Applied, Op, Slot};
use super::summary::Summary;
use super::{EVICTION_SAMPLE, KeyBytes, KeyedConfig};
use crate::decision::Decision;
use crate::limiter::{Limiter, State};
use crate::time::Nanos;

/// The key hasher. foldhash's `quality` variant, not `fast`: the shard is
/// picked from middle bits of the hash, which `fast` leaves poorly mixed for
/// integer keys under some process seeds (runs of consecutive keys then all
/// land in one shard, which fills while the others stay empty). `quality`
/// adds one final multiply that spreads every bit.
type Hasher = foldhash::quality::RandomState;

/// The shard of a key hash: bits 40.. (hashbrown uses the low bits for the
/// bucket and the top 7 for the tag, so the shard choice stays independent
/// of both).
#[inline]
fn shard_index(hash: u64, mask: u64) -> usize {
    ((hash >> 40) & mask) as usize
}

struct Entry<K, S> {
    key: K,
    slot: S,
}

/// One shard's entries and the bytes they take.
struct ShardMap<K, S> {
    table: HashTable<Entry<K, S>>,
    /// Sum of [`Table::bytes_of`] over the entries.
    bytes: usize,
}

/// One shard: its lock, its table's header and its sweep mark, alone on
/// a pair of cache lines. (Unpadded, a shard took 56 bytes, so two
/// shards shared a line: a reader taking one shard's lock invalidated the
/// other's line in the other core's cache. 128 bytes, not 64: adjacent
/// lines are fetched in pairs on common x86 parts.)
#[repr(align(128))]
struct Shard<K, S> {
    map: RwLock<ShardMap<K, S>>,
    last_sweep: AtomicU64,
}

/// Sharded per-key slots with a bound on the number of keys and on the
/// bytes they take.
pub(crate) struct Table<K, S> {
    shards: Box<[Shard<K, S>]>,
    mask: u64,
    per_shard: usize,
    per_shard_bytes: usize,
    sweep_interval: Nanos,
    hasher: Hasher,
    /// Fresh states dropped (no effect on decisions).
    pub evicted_fresh: AtomicU64,
    /// Live states evicted because a shard was full with nothing fresh.
    pub evicted_live: AtomicU64,
    /// Requests on keys without an entry that the summary's state denied
    /// and a fresh state would have admitted.
    pub summary_denials: AtomicU64,
    /// The states that left the table, folded by key hash.
    pub summary: Summary,
}

impl<K: Hash + Eq + Clone + Send + Sync + KeyBytes, S: Slot> Table<K, S> {
    /// An empty table for the quotas `parts`; `config.shards` must be a
    /// power of two and `config.max_keys` at least 1.
    pub fn new(config: &KeyedConfig, parts: &[Limiter]) -> Self {
        let n = config.shards;
        debug_assert!(n.is_power_of_two() && config.max_keys >= 1);
        Self {
            shards: (0..n)
                .map(|_| Shard {
                    map: RwLock::new(ShardMap {
                        table: HashTable::new(),
                        bytes: 0,
                    }),
                    last_sweep: AtomicU64::new(0),
                })
                .collect(),
            mask: (n - 1) as u64,
            per_shard: config.max_keys.div_ceil(n),
            per_shard_bytes: config.max_bytes.div_ceil(n),
            sweep_interval: config.sweep_interval,
            hasher: Hasher::default(),
            evicted_fresh: AtomicU64::new(0),
            evicted_live: AtomicU64::new(0),
            summary_denials: AtomicU64::new(0),
            summary: Summary::new(parts, config.max_keys),
        }
    }

    /// The key's hash and its shard (high bits pick the shard; the table
    /// uses the same hash).
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &Shard<K, S>) {
        let h = self.hasher.hash_one(key);
        (h, &self.shards[shard_index(h, self.mask)])
    }

    /// Decides a request of `cost` at `now` for `key`.
    #[inline]
    pub fn decide<Q>(&self, ctx: &S::Ctx, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let eq = |e: &Entry<K, S>| e.key.borrow() == key;
        {
            let map = shard.map.read();
            if let Some(e) = map.table.find(hash, eq) {
                return e.slot.decide(ctx, now, cost);
            }
        }
        self.apply_unknown(ctx, hash, shard, key, now, Op::Take(cost))
            .decision
    }

    /// Applies `op` to `key`'s states. A refund for a key without an entry
    /// is dropped (its state left the table, folded into the summary,
    /// which only ever holds back): the answer is then a query.
    pub fn apply<Q>(&self, ctx: &S::Ctx, key: &Q, now: Nanos, op: Op) -> Applied
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let eq = |e: &Entry<K, S>| e.key.borrow() == key;
        {
            let map = shard.map.read();
            if let Some(e) = map.table.find(hash, eq) {
                return e.slot.apply(ctx, now, op);
            }
        }
        let op = match op {
            Op::Refund(..) => Op::Check(0),
            op => op,
        };
        self.apply_unknown(ctx, hash, shard, key, now, op)
    }

    /// Unknown key: an operation that writes nothing (a query, a check, a
    /// denial) creates no entry, so apply it first (on the state the
    /// summary restores for the key, or a fresh one) and insert only when
    /// it wrote. This keeps floods of impossible or zero-cost requests from
    /// filling the table.
    #[cold]
    fn apply_unknown<Q>(
        &self,
        ctx: &S::Ctx,
        hash: u64,
        shard: &Shard<K, S>,
        key: &Q,
        now: Nanos,
        op: Op,
    ) -> Applied
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let folds = self.summary.folds();
        let (a, slot) = self.apply_restored(ctx, hash, now, op);
        if !a.wrote {
            return a;
        }
        // The owned key is made before taking the write lock (an allocation
        // for a String key); it is dropped unused in the rare case that
        // another thread inserted the key meanwhile.
        let owned: K = key.to_owned();
        let need = Self::bytes_of(&owned);
        let eq = |e: &Entry<K, S>| e.key.borrow() == key;
        let mut map = shard.map.write();
        if let Some(e) = map.table.find(hash, eq) {
            // Someone inserted it meanwhile: apply to the real state.
            return e.slot.apply(ctx, now, op);
        }
        // Someone may have inserted and evicted it meanwhile (an eviction
        // of this key folds under this shard's lock, which is held now):
        // apply again to what the summary holds now.
        let (a, slot) = if self.summary.folds() == folds {
            (a, slot)
        } else {
            let (a, slot) = self.apply_restored(ctx, hash, now, op);
            if !a.wrote {
                return a;
            }
            (a, slot)
        };
        if self.is_full(&map, need) {
            self.make_room(ctx, shard, &mut map, now, need);
        }
        map.bytes += need;
        let entry = Entry { key: owned, slot };
        map.table
            .insert_unique(hash, entry, |e| self.hasher.hash_one(&e.key));
        a
    }

    /// Applies `op` to the state the summary restores for `hash` (a fresh
    /// one if it holds nothing back for it); a denial that a fresh state
    /// would not have given is counted in `summary_denials`.
    fn apply_restored(&self, ctx: &S::Ctx, hash: u64, now: Nanos, op: Op) -> (Applied, S) {
        let Some(states) = self.summary.restore(hash, now) else {
            return S::apply_fresh(ctx, now, op);
        };
        let slot = S::from_states(ctx, states);
        let a = slot.apply(ctx, now, op);
        let decides = matches!(op, Op::Take(_) | Op::Check(_) | Op::Reserve(_));
        if decides && !a.decision.allowed && S::apply_fresh(ctx, now, op).0.decision.allowed {
            self.summary_denials.fetch_add(1, Ordering::Relaxed);
        }
        (a, slot)
    }

    /// Bytes an entry holding `key` counts against the budget: the entry
    /// itself and what the key owns on the heap.
    #[inline]
    fn bytes_of(key: &K) -> usize {
        Self::ENTRY_BYTES + key.heap_bytes()
    }

    /// True if a new entry of `need` bytes does not fit the shard.
    #[inline]
    fn is_full(&self, map: &ShardMap<K, S>, need: usize) -> bool {
        map.table.len() >= self.per_shard || map.bytes.saturating_add(need) > self.per_shard_bytes
    }

    /// Makes room for an entry of `need` bytes: drops every fresh state
    /// (at most once per `sweep_interval`), then evicts the entry nearest
    /// to fresh among a sample until the entry fits (or the shard is
    /// empty: one entry larger than a shard's budget is still held).
    fn make_room(
        &self,
        ctx: &S::Ctx,
        shard: &Shard<K, S>,
        map: &mut ShardMap<K, S>,
        now: Nanos,
        need: usize,
    ) {
        let last = shard.last_sweep.load(Ordering::Relaxed);
        if now >= last.saturating_add(self.sweep_interval) || last == 0 {
            shard.last_sweep.store(now.max(1), Ordering::Relaxed);
            let dropped = self.drop_fresh(ctx, map, now, true);
            self.evicted_fresh
                .fetch_add(dropped as u64, Ordering::Relaxed);
        }
        while self.is_full(map, need) && !map.table.is_empty() {
            // The victim is named by its address, not its key: no clone of
            // the key, no second hash, no key comparison. `extract_if`
            // walks the table in the order `iter` does, so it meets the
            // victim within the first `EVICTION_SAMPLE` entries and stops.
            let victim = map
                .table
                .iter()
                .take(EVICTION_SAMPLE)
                .map(|e| (e.slot.reset_after(ctx, now), e as *const Entry<K, S>))
                .min_by_key(|(r, _)| *r);
            let Some((reset, at)) = victim else { break };
            let gone = map.table.extract_if(|e| std::ptr::eq(e, at)).next();
            if let Some(gone) = gone {
                map.bytes -= Self::bytes_of(&gone.key);
                self.fold(ctx, &gone, true);
            }
            let counter = if reset == 0 {
                &self.evicted_fresh
            } else {
                &self.evicted_live
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Folds an entry that leaves the table into the summary, so that its
    /// key never comes back more generous. A live state must be folded; a
    /// state fresh at the `now` that drops it is folded too, since a
    /// request stamped before that `now` may still find it holding back
    /// (its envelope never restricts a stamp at or after that `now`).
    /// With `allocate` false (a sweep while the table has room) it is
    /// folded only if the summary's cells exist already.
    fn fold(&self, ctx: &S::Ctx, gone: &Entry<K, S>, allocate: bool) {
        if allocate || self.summary.is_allocated() {
            let hash = self.hasher.hash_one(&gone.key);
            self.summary.fold(hash, &gone.slot.states(ctx), allocate);
        }
    }

    /// Drops every fresh state of one shard (folded into the summary, see
    /// [`Self::fold`]); returns how many.
    fn drop_fresh(
        &self,
        ctx: &S::Ctx,
        map: &mut ShardMap<K, S>,
        now: Nanos,
        allocate: bool,
    ) -> usize {
        let before = map.table.len();
        let mut freed = 0;
        map.table.retain(|e| {
            let fresh = e.slot.is_fresh(ctx, now);
            if fresh {
                freed += Self::bytes_of(&e.key);
                self.fold(ctx, e, allocate);
            }
            !fresh
        });
        map.bytes -= freed;
        before - map.table.len()
    }

    /// Drops every fresh state; returns how many.
    pub fn sweep(&self, ctx: &S::Ctx, now: Nanos) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            dropped += self.drop_fresh(ctx, &mut shard.map.write(), now, false);
        }
        self.evicted_fresh
            .fetch_add(dropped as u64, Ordering::Relaxed);
        dropped
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().table.len()).sum()
    }

    /// Keys held and the bytes they count against the budget, read shard
    /// by shard.
    pub fn usage(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let m = s.map.read();
            (n + m.table.len(), b + m.bytes)
        })
    }

    /// A copy of `key`'s states (`None` if not held).
    pub fn snapshot<Q>(&self, ctx: &S::Ctx, key: &Q) -> Option<Vec<State>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let map = shard.map.read();
        Some(
            map.table
                .find(hash, |e| e.key.borrow() == key)?
                .slot
                .states(ctx),
        )
    }

    /// Bytes one entry takes in a shard's table (key and slot).
    pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry<K, S>>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::SharedSeed;
    use foldhash::quality::SeedableRandomState;

    /// Consecutive integer keys spread over the shards like random ones do,
    /// whatever the process seed: in total and in every run of 64 keys.
    /// Bounds are 6+ standard deviations out (p < 1e-9 per run checked).
    #[test]
    fn consecutive_keys_spread_over_shards_under_every_seed() {
        const SHARDS: usize = 4;
        const KEYS: u64 = 4096;
        const RUN: usize = 64;
        for g in 0..200u64 {
            let shared: &'static SharedSeed = Box::leak(Box::new(SharedSeed::from_u64(
                g.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            )));
            let hasher = SeedableRandomState::with_seed(g, shared);
            let shard: Vec<usize> = (0..KEYS)
                .map(|k| shard_index(hasher.hash_one(k), SHARDS as u64 - 1))
                .collect();
            let mut total = [0usize; SHARDS];
            shard.iter().for_each(|&s| total[s] += 1);
            assert!(
                total.iter().all(|&n| (850..=1200).contains(&n)),
                "seed {g}: {total:?}"
            );
            for run in shard.windows(RUN) {
                let mut n = [0usize; SHARDS];
                run.iter().for_each(|&s| n[s] += 1);
                assert!(n.iter().all(|&n| n <= 44), "seed {g}: run {n:?}");
            }
        }
    }
}
