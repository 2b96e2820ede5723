//! Top keys of one limit, by demand and by denials, in fixed memory.
//!
//! Each thread records into its own shard (threads take shards round-robin
//! on first use, as the decision counters do), so a decision takes one
//! uncontended lock. A shard holds two generations of two
//! [`SpaceSaving`] sketches (demand: the cost of every check; denials: the
//! cost of every denied check); the status sampler starts a new
//! generation every [`GENERATION_S`] seconds, dropping the older one, so
//! the report covers the last one to two generations.
//!
//! The report merges every shard and both generations
//! ([`drl_core::topk::merge`]): each key's true weight lies in
//! `[count - error, count]`, every error is at most the reported `bound`,
//! which is at most `total / CAPACITY`, and any key heavier than `bound`
//! is reported. Keys longer than [`KEY_BYTES`] are kept as a prefix and a
//! hash. Keys stay in this process: only `/v1/status` and the status page
//! show them.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use drl_core::topk::{HeavyKey, SpaceSaving, merge};
use parking_lot::Mutex;

/// Keys each sketch monitors.
pub const CAPACITY: usize = 64;
/// Longest key kept whole, bytes.
pub const KEY_BYTES: usize = 128;
/// Seconds per generation.
pub const GENERATION_S: u64 = 60;
/// At most this many shards per limit.
const MAX_SHARDS: usize = 8;

fn shard_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .next_power_of_two()
        .min(MAX_SHARDS)
}

#[inline]
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        s.set(v);
        v
    })
}

#[derive(Debug)]
struct Shard {
    /// `[generation]`; `cur` is the one being written.
    demand: [SpaceSaving; 2],
    denials: [SpaceSaving; 2],
    cur: usize,
}

impl Shard {
    fn new() -> Self {
        let s = || SpaceSaving::new(CAPACITY, KEY_BYTES);
        Self {
            demand: [s(), s()],
            denials: [s(), s()],
            cur: 0,
        }
    }
}

/// A shard on its own cache lines.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// One limit's top-keys sketches.
#[derive(Debug)]
pub struct TopKeys {
    shards: Box<[Padded]>,
    mask: usize,
}

impl Default for TopKeys {
    fn default() -> Self {
        Self::new()
    }
}

/// One ranking (demand or denials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranking {
    /// The heaviest keys, heaviest first.
    pub keys: Vec<HeavyKey>,
    /// Total weight the ranking saw.
    pub total: u64,
    /// The bound on every key's error and on any key left out.
    pub bound: u64,
}

impl TopKeys {
    /// Empty sketches, one shard per core (at most 8).
    pub fn new() -> Self {
        let n = shard_count();
        Self {
            shards: (0..n).map(|_| Padded(Mutex::new(Shard::new()))).collect(),
            mask: n - 1,
        }
    }

    /// Records a decision of `cost` for `key`.
    #[inline]
    pub fn observe(&self, key: &str, cost: u64, allowed: bool) {
        if cost == 0 {
            return;
        }
        let mut s = self.shards[thread_slot() & self.mask].0.lock();
        let g = s.cur;
        s.demand[g].observe(key, cost);
        if !allowed {
            s.denials[g].observe(key, cost);
        }
    }

    /// Starts a new generation, forgetting the older one.
    pub fn rotate(&self) {
        for p in self.shards.iter() {
            let mut s = p.0.lock();
            let g = 1 - s.cur;
            s.demand[g].clear();
            s.denials[g].clear();
            s.cur = g;
        }
    }

    /// The `n` heaviest keys by demand and by denials.
    pub fn report(&self, n: usize) -> (Ranking, Ranking) {
        let shards: Vec<Shard> = self
            .shards
            .iter()
            .map(|p| {
                let s = p.0.lock();
                Shard {
                    demand: s.demand.clone(),
                    denials: s.denials.clone(),
                    cur: s.cur,
                }
            })
            .collect();
        let rank = |pick: fn(&Shard) -> &[SpaceSaving; 2]| {
            let m = merge(shards.iter().flat_map(|s| pick(s).iter()));
            Ranking {
                keys: m.keys.into_iter().take(n).collect(),
                total: m.total,
                bound: m.bound,
            }
        };
        (rank(|s| &s.demand), rank(|s| &s.denials))
    }

    /// Every byte the sketches hold (fixed: see
    /// [`SpaceSaving::max_bytes`]).
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|p| {
                let s = p.0.lock();
                std::mem::size_of::<Padded>()
                    + s.demand
                        .iter()
                        .chain(&s.denials)
                        .map(|x| x.bytes())
                        .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_demand_and_by_denials_across_threads_and_generations() {
        let t = std::sync::Arc::new(TopKeys::new());
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for k in 0..1_000u64 {
                        t.observe("heavy", 2, true);
                        t.observe(&format!("t{i}-{k}"), 1, true);
                        t.observe("denied", 1, false);
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        t.rotate();
        t.observe("heavy", 1, true);
        let (demand, denials) = t.report(3);
        assert_eq!(demand.total, 4 * (2_000 + 1_000 + 1_000) + 1);
        assert_eq!(demand.keys[0].key, "heavy");
        let h = &demand.keys[0];
        assert!(h.count - h.error <= 8_001 && 8_001 <= h.count, "{h:?}");
        assert!(h.error <= demand.bound && demand.bound <= demand.total / CAPACITY as u64);
        assert_eq!(denials.total, 4_000);
        assert_eq!(denials.keys.len(), 1);
        assert_eq!(
            (denials.keys[0].key.as_str(), denials.keys[0].count),
            ("denied", 4_000)
        );
        // A second rotation drops the first generation.
        t.rotate();
        let (demand, _) = t.report(3);
        assert_eq!(demand.total, 1);
        t.observe("query", 0, true);
        assert_eq!(t.report(3).0.total, 1, "a cost-0 query is no demand");
    }
}
