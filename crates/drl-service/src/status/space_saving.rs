//! Heavy hitters in fixed memory: the space-saving sketch (Metwally,
//! Agrawal and El Abbadi, "Efficient computation of frequent and top-k
//! elements in data streams", ICDT 2005), weighted, and a merge of several
//! sketches with exact error bounds.
//!
//! A [`SpaceSaving`] of capacity `k` monitors at most `k` keys. A key
//! already monitored adds its weight to its counter; a new key takes over
//! the counter with the smallest count `m` and starts at `m + weight`,
//! remembering `m` as its possible overestimate. With `N` the total weight
//! observed:
//!
//! * every monitored key's count `c` and error `e` satisfy
//!   `c - e <= true <= c`, and `e <= min <= N / k`;
//! * a key whose true weight exceeds the smallest count (so, any key
//!   heavier than `N / k`) is monitored.
//!
//! [`merge`] combines sketches that each saw a disjoint part of one stream
//! (per-thread shards, time generations): a key's upper bound is the sum,
//! over the sketches, of its count where monitored and of that sketch's
//! smallest count where not (a full sketch's unmonitored key weighs at most
//! that much there); its lower bound sums `c - e` where monitored. The
//! difference is at most the sum of the sketches' smallest counts, at most
//! `N / k` for the merged `N`. Every key heavier than `N / k` is in some
//! sketch (it is heavier than `N_j / k` in at least one part `j`), so it
//! is in the merge.
//!
//! Memory is fixed by `k` and the longest key kept ([`SpaceSaving::new`]):
//! longer keys are kept as a prefix, `#` and the 64-bit FNV-1a hash of
//! the whole key in hex (two long keys with the same prefix stay apart
//! unless their hashes collide; the cut form is the same in every sketch,
//! so merges match it). [`SpaceSaving::bytes`] accounts for every byte the sketch
//! holds. Sans-IO and single-threaded (`&mut self`); callers shard it.

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// The fewest bytes a kept key may be cut to (prefix, `#`, 16 hex digits).
pub const MIN_KEY_BYTES: usize = 32;

/// One monitored key.
#[derive(Debug, Clone)]
struct Slot {
    key: String,
    hash: u64,
    count: u64,
    error: u64,
    /// Position in the heap.
    pos: u32,
}

/// A space-saving sketch of capacity `k` (see the module docs).
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    max_key_bytes: usize,
    slots: Vec<Slot>,
    /// Slot indices, a min-heap by count.
    heap: Vec<u32>,
    /// Slot indices by key hash.
    index: HashTable<u32>,
    hasher: foldhash::quality::RandomState,
    total: u64,
    /// The cut form of a long key being observed.
    scratch: String,
    /// The index's capacity when made (it must never grow).
    table_cap: usize,
}

/// A key reported by [`SpaceSaving::entries`] or [`merge`]: its true weight
/// is in `[count - error, count]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeavyKey {
    /// The key (cut with a hash suffix if longer than the sketch keeps).
    pub key: String,
    /// Upper bound of the key's weight.
    pub count: u64,
    /// How much `count` may overestimate (at most `total / capacity`).
    pub error: u64,
}

/// What [`merge`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Every key any sketch monitors, heaviest (upper bound) first; ties
    /// by key.
    pub keys: Vec<HeavyKey>,
    /// Total weight the sketches observed.
    pub total: u64,
    /// The bound on every key's `error`, and on the weight of any key
    /// missing from `keys`: the sum of the sketches' smallest counts
    /// (at most `total / capacity`).
    pub bound: u64,
}

impl SpaceSaving {
    /// A sketch monitoring at most `capacity` keys (at least 1), keeping at
    /// most `max_key_bytes` bytes of each (at least [`MIN_KEY_BYTES`]).
    pub fn new(capacity: usize, max_key_bytes: usize) -> Self {
        let capacity = capacity.clamp(1, u32::MAX as usize / 4);
        // Twice the keys (and a little), so that the tombstones evictions
        // leave are cleaned up in place and the table never grows.
        let index = HashTable::with_capacity(capacity * 2 + 2);
        Self {
            capacity,
            max_key_bytes: max_key_bytes.max(MIN_KEY_BYTES),
            slots: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            table_cap: index.capacity(),
            index,
            hasher: foldhash::quality::RandomState::default(),
            total: 0,
            scratch: String::new(),
        }
    }

    /// Most keys monitored.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Total weight observed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Keys monitored now.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True before the first observation.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The smallest count if every slot is taken, else 0: an unmonitored
    /// key weighs at most this much.
    pub fn min_count(&self) -> u64 {
        if self.slots.len() < self.capacity {
            0
        } else {
            self.heap
                .first()
                .map_or(0, |&i| self.slots[i as usize].count)
        }
    }

    /// Every byte this sketch holds: its fields, its arrays at their
    /// allocated capacity, the hash table's buckets and control bytes, and
    /// each kept key's allocation. Bounded by
    /// [`SpaceSaving::max_bytes`] whatever it observes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.heap.capacity() * std::mem::size_of::<u32>()
            + table_bytes(self.index.capacity())
            + self.slots.iter().map(|s| s.key.capacity()).sum::<usize>()
            + self.scratch.capacity()
    }

    /// The most [`SpaceSaving::bytes`] can ever be for this capacity and
    /// key length.
    pub fn max_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.capacity * (std::mem::size_of::<Slot>() + std::mem::size_of::<u32>())
            + table_bytes(self.table_cap)
            + (self.capacity + 1) * self.max_key_bytes
    }

    /// Forgets everything (the arrays and the table keep their
    /// allocations; the kept keys are freed).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.index.clear();
        self.total = 0;
    }

    /// Adds `weight` to `key`.
    pub fn observe(&mut self, key: &str, weight: u64) {
        if weight == 0 {
            return;
        }
        if key.len() > self.max_key_bytes {
            let mut kept = std::mem::take(&mut self.scratch);
            cut_key(&mut kept, key, self.max_key_bytes);
            self.observe_kept(&kept, weight);
            self.scratch = kept;
        } else {
            self.observe_kept(key, weight);
        }
    }

    /// [`SpaceSaving::observe`] of a key already in its kept form.
    fn observe_kept(&mut self, key: &str, weight: u64) {
        self.total = self.total.saturating_add(weight);
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let found = self
            .index
            .find(hash, |&i| {
                let s = &slots[i as usize];
                s.hash == hash && s.key == key
            })
            .copied();
        if let Some(i) = found {
            let s = &mut self.slots[i as usize];
            s.count = s.count.saturating_add(weight);
            let pos = s.pos as usize;
            self.sift_down(pos);
            return;
        }
        if self.slots.len() < self.capacity {
            let i = self.slots.len() as u32;
            let k = key.to_string();
            self.slots.push(Slot {
                key: k,
                hash,
                count: weight,
                error: 0,
                pos: self.heap.len() as u32,
            });
            self.heap.push(i);
            let pos = self.heap.len() - 1;
            self.sift_up(pos);
            let slots = &self.slots;
            self.index.insert_unique(hash, i, |&j| slot_hash(slots, j));
            return;
        }
        // Evict the smallest counter: the new key inherits it.
        let i = self.heap[0];
        let old_hash = self.slots[i as usize].hash;
        if let Ok(entry) = self.index.find_entry(old_hash, |&j| j == i) {
            entry.remove();
        }
        let s = &mut self.slots[i as usize];
        let min = s.count;
        // Reuse the evicted key's buffer (kept keys are at most
        // `max_key_bytes` long, so it never grows past that).
        s.key.clear();
        if s.key.capacity() < key.len() {
            s.key.reserve_exact(key.len());
        }
        s.key.push_str(key);
        s.hash = hash;
        s.error = min;
        s.count = min.saturating_add(weight);
        self.sift_down(0);
        let slots = &self.slots;
        self.index.insert_unique(hash, i, |&j| slot_hash(slots, j));
    }

    /// Every monitored key, heaviest first (ties by key).
    pub fn entries(&self) -> Vec<HeavyKey> {
        let mut v: Vec<HeavyKey> = self
            .slots
            .iter()
            .map(|s| HeavyKey {
                key: s.key.clone(),
                count: s.count,
                error: s.error,
            })
            .collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        v
    }

    fn count_at(&self, pos: usize) -> u64 {
        self.slots[self.heap[pos] as usize].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        let (ia, ib) = (self.heap[a] as usize, self.heap[b] as usize);
        self.slots[ia].pos = a as u32;
        self.slots[ib].pos = b as u32;
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.count_at(pos) >= self.count_at(parent) {
                break;
            }
            self.swap(pos, parent);
            pos = parent;
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * pos + 1, 2 * pos + 2);
            let mut least = pos;
            if l < n && self.count_at(l) < self.count_at(least) {
                least = l;
            }
            if r < n && self.count_at(r) < self.count_at(least) {
                least = r;
            }
            if least == pos {
                return;
            }
            self.swap(pos, least);
            pos = least;
        }
    }
}

/// Bytes of a hashbrown table holding `capacity` `u32`s (buckets plus
/// one control byte each, plus a group of trailing control bytes).
fn table_bytes(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    // hashbrown keeps buckets at a power of two with 1/8 free.
    let buckets = (capacity * 8 / 7).next_power_of_two().max(4);
    buckets * (std::mem::size_of::<u32>() + 1) + 16
}

fn slot_hash(slots: &[Slot], i: u32) -> u64 {
    slots[i as usize].hash
}

/// The kept form of a key longer than `max` bytes: a prefix (cut at a
/// character boundary), `#` and its FNV-1a hash, `max` bytes at most.
fn cut_key(out: &mut String, key: &str, max: usize) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut cut = max - 17;
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    out.clear();
    if out.capacity() < max {
        out.reserve_exact(max);
    }
    out.push_str(&key[..cut]);
    out.push('#');
    for shift in (0..16).rev() {
        let d = ((h >> (shift * 4)) & 0xf) as u8;
        out.push(char::from(if d < 10 { b'0' + d } else { b'a' + d - 10 }));
    }
}

/// Merges sketches that saw disjoint parts of one stream (see the module
/// docs for the bounds).
pub fn merge<'a>(sketches: impl IntoIterator<Item = &'a SpaceSaving>) -> Merged {
    // upper(k) = sum over sketches of (count if monitored, else min), that
    // is, the sum of all mins plus (count - min) over the sketches that
    // monitor k.
    let mut acc: std::collections::HashMap<&str, (u64, u64)> = std::collections::HashMap::new();
    let (mut total, mut bound) = (0u64, 0u64);
    for s in sketches {
        total = total.saturating_add(s.total);
        let min = s.min_count();
        bound = bound.saturating_add(min);
        for x in &s.slots {
            let e = acc.entry(x.key.as_str()).or_default();
            // A monitored count is never below the sketch's smallest.
            e.0 = e.0.saturating_add(x.count - min);
            e.1 = e.1.saturating_add(x.count - x.error);
        }
    }
    let mut keys: Vec<HeavyKey> = acc
        .into_iter()
        .map(|(k, (over, lower))| {
            let count = over.saturating_add(bound);
            HeavyKey {
                key: k.to_string(),
                count,
                error: count - lower.min(count),
            }
        })
        .collect();
    keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    Merged { keys, total, bound }
}
