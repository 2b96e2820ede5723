//! [`KeyedLimiter`]: per-key state for many threads and millions of keys,
//! with bounded memory.
//!
//! Keys are spread over shards, each a `RwLock<HashTable>`; one hash of the
//! key picks the shard (high bits) and the bucket. A decision on a known key
//! takes the shard's read lock only; single-quota token bucket,
//! leaky meter, GCRA and fixed window then decide lock-free on a 128-bit cell
//! ([`cell`]); other algorithms and multi-quota limits take a per-key mutex.
//! A limiter's table holds one kind of slot only, so an entry of a `u64` key
//! and a cell is 32 bytes, of a `String` key and a cell 48 bytes
//! ([`KeyedLimiter::entry_bytes`]).
//!
//! **The bound.** At most `max_keys` keys are held, and the entries count at
//! most `max_bytes` bytes: each entry counts [`KeyedLimiter::entry_bytes`]
//! plus what its key owns on the heap ([`KeyBytes`]; a `String`'s capacity).
//! Each shard holds at most its share of both. When a new key does not fit
//! its shard (too many keys, or too many bytes), the shard first drops
//! every fresh state in the shard (at most once per `sweep_interval` of
//! `now`). If nothing fresh is left, it evicts, among a sample of
//! [`EVICTION_SAMPLE`] entries, the one nearest to fresh (smallest
//! `reset_after`), until the new key fits (a key larger than a shard's
//! byte share is still held, alone; the service bounds key length before
//! it gets here); such evictions are counted as `evicted_live` in
//! [`KeyedStats`].
//!
//! **Never fail open.** Every state that leaves the table is folded into a
//! fixed-size summary (`summary`), and a key without an entry starts from
//! the state the summary restores for it, never more generous than the
//! state it lost: eviction can deny (`summary_denials`), never admit what
//! the exact limiter would refuse. The bound, the summary's size and what
//! it costs are in docs/semantics.md, "Bounded memory in the keyed
//! limiter". Size `max_keys` so that `evicted_live` stays at zero.
//!
//! **Costs known afterwards** (`costs`): [`KeyedLimiter::check`],
//! [`KeyedLimiter::charge`], [`KeyedLimiter::reserve`],
//! [`KeyedLimiter::settle`] and [`KeyedLimiter::release`], under the same
//! bounds; a key in debt that is evicted comes back in debt.

pub mod cell;
mod costs;
mod direct;
mod envelope;
mod slot;
mod summary;
mod table;
pub mod tat;

pub use direct::AtomicLimiter;
pub use summary::SUMMARY_ROWS;

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::Ordering;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::limiter::State;
use crate::multi::MultiLimiter;
use crate::time::Nanos;
use cell::CellKind;
use slot::{CellCtx, CellSlot, LockedSlot};
use table::Table;

/// How many entries a full shard with no fresh state looks at to choose a victim.
pub const EVICTION_SAMPLE: usize = 16;

/// Bytes per key that the default byte budget allows (`max_bytes` =
/// `max_keys` x this): a 48-byte entry (a `String` key and a cell) and a
/// key of up to 80 bytes.
pub const DEFAULT_BYTES_PER_KEY: usize = 128;

/// What a key owns on the heap, counted against
/// [`KeyedConfig::max_bytes`] on top of the entry itself.
pub trait KeyBytes {
    /// Heap bytes this key owns (0 for plain values).
    fn heap_bytes(&self) -> usize;
}

impl KeyBytes for String {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

impl KeyBytes for Box<str> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.len()
    }
}

impl KeyBytes for Vec<u8> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

macro_rules! plain_keys {
    ($($t:ty),*) => {$(
        impl KeyBytes for $t {
            #[inline]
            fn heap_bytes(&self) -> usize {
                0
            }
        }
    )*};
}
plain_keys!(u8, u16, u32, u64, u128, usize, i32, i64, (u64, u64));

/// Bounds and layout of a [`KeyedLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedConfig {
    /// The most keys held at once (default 1,000,000).
    pub max_keys: usize,
    /// The most bytes held at once: [`KeyedLimiter::entry_bytes`] per key
    /// plus each key's [`KeyBytes::heap_bytes`] (default 128,000,000:
    /// 1,000,000 x [`DEFAULT_BYTES_PER_KEY`]).
    pub max_bytes: usize,
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
            max_bytes: 1_000_000 * DEFAULT_BYTES_PER_KEY,
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
    /// Bytes held now, as counted against `max_bytes`.
    pub bytes: usize,
    /// Fresh states dropped (no effect on decisions).
    pub evicted_fresh: u64,
    /// Live states evicted because a bound (keys or bytes) was hit with
    /// nothing fresh; each is folded into the summary.
    pub evicted_live: u64,
    /// Requests on keys without an entry that the summary of evicted
    /// states denied where a fresh state would have admitted: the key's own
    /// evicted state holding it back (a right denial), or another key's
    /// sharing its cells (a false one).
    pub summary_denials: u64,
}

/// The table, by slot kind.
enum Tables<K> {
    /// Lock-free cells (single-quota token bucket, leaky meter, GCRA,
    /// fixed window).
    Cell(CellCtx, Table<K, CellSlot>),
    /// Per-key mutexes (everything else; decided by the `MultiLimiter`).
    Locked(Table<K, LockedSlot>),
}

/// Runs `$body` with `$t` bound to the table and `$ctx` to its context.
macro_rules! with_table {
    ($self:ident, |$t:ident, $ctx:ident| $body:expr) => {
        match &$self.tables {
            Tables::Cell($ctx, $t) => $body,
            Tables::Locked($t) => {
                let $ctx = &$self.limiter;
                $body
            }
        }
    };
}

/// Per-key limits over a [`MultiLimiter`] (one or more quotas, all-or-nothing).
pub struct KeyedLimiter<K> {
    limiter: MultiLimiter,
    tables: Tables<K>,
    config: KeyedConfig,
}

impl<K> std::fmt::Debug for KeyedLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("limiter", &self.limiter)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + KeyBytes> KeyedLimiter<K> {
    /// A keyed limiter deciding with `limiter`, bounded by `config`.
    pub fn new(limiter: MultiLimiter, config: KeyedConfig) -> Self {
        let config = KeyedConfig {
            max_keys: config.max_keys.max(1),
            max_bytes: config.max_bytes.max(1),
            shards: config.shards.clamp(1, 1 << 16).next_power_of_two(),
            ..config
        };
        let cell = match limiter.parts() {
            [only] => match only.algorithm() {
                Algorithm::TokenBucket => Some(CellKind::TokenBucket),
                Algorithm::LeakyBucket => Some(CellKind::LeakyBucket),
                Algorithm::Gcra => Some(CellKind::Gcra),
                Algorithm::FixedWindow => Some(CellKind::FixedWindow),
                _ => None,
            }
            .map(|kind| CellCtx {
                kind,
                quota: *only.quota(),
            }),
            _ => None,
        };
        let tables = match cell {
            Some(ctx) => Tables::Cell(ctx, Table::new(&config, limiter.parts())),
            None => Tables::Locked(Table::new(&config, limiter.parts())),
        };
        Self {
            limiter,
            tables,
            config,
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
        matches!(self.tables, Tables::Cell(..))
    }

    /// Bytes one held key takes in the table, besides what the key itself
    /// owns on the heap and the table's free buckets.
    pub fn entry_bytes(&self) -> usize {
        match &self.tables {
            Tables::Cell(..) => Table::<K, CellSlot>::ENTRY_BYTES,
            Tables::Locked(_) => Table::<K, LockedSlot>::ENTRY_BYTES,
        }
    }

    /// Decides a request of `cost` at `now` for `key`.
    #[inline]
    pub fn decide<Q>(&self, key: &Q, now: Nanos, cost: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        with_table!(self, |t, ctx| t.decide(ctx, key, now, cost))
    }

    /// Drops every fresh state (no effect on decisions); returns how many.
    /// Call it from a periodic task to return memory after bursts of keys.
    pub fn sweep(&self, now: Nanos) -> usize {
        with_table!(self, |t, ctx| t.sweep(ctx, now))
    }

    /// Keys currently held.
    pub fn len(&self) -> usize {
        with_table!(self, |t, _ctx| t.len())
    }

    /// True when no key is held. Evicted state may still hold keys back
    /// through the summary: to know whether dropping the whole limiter
    /// changes a decision, ask [`Self::is_stateless`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when dropping this limiter and starting a new one would change
    /// no decision at `now` or later: no key is held and the summary of
    /// evicted state holds nothing back. Reads the whole summary
    /// ([`Self::summary_bytes`]); for periodic checks, not the hot path.
    pub fn is_stateless(&self, now: Nanos) -> bool {
        with_table!(self, |t, _ctx| t.len() == 0 && t.summary.is_fresh(now))
    }

    /// Counters.
    pub fn stats(&self) -> KeyedStats {
        with_table!(self, |t, _ctx| {
            let (keys, bytes) = t.usage();
            KeyedStats {
                keys,
                bytes,
                evicted_fresh: t.evicted_fresh.load(Ordering::Relaxed),
                evicted_live: t.evicted_live.load(Ordering::Relaxed),
                summary_denials: t.summary_denials.load(Ordering::Relaxed),
            }
        })
    }

    /// Bytes the summary of evicted live states takes once a live state
    /// has been evicted (0 before): [`SUMMARY_ROWS`] rows of
    /// `max_keys / 2` cells (a power of two, at least 32), each 8 bytes per
    /// lane (1 lane per quota for token bucket, leaky meter, GCRA and the
    /// shaper, 2 for fixed window and sliding log, 3 for sliding window).
    pub fn summary_bytes(&self) -> usize {
        with_table!(self, |t, _ctx| t.summary.bytes())
    }

    /// A copy of `key`'s states (`None` if not held, i.e. fresh).
    pub fn snapshot<Q>(&self, key: &Q) -> Option<Vec<State>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        with_table!(self, |t, ctx| t.snapshot(ctx, key))
    }
}
