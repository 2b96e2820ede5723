//! Counters and a latency histogram that many threads update at once
//! without writing the same cache line: each thread adds to its own shard
//! (threads are given shards round-robin on first use) and a reader sums
//! the shards.
//!
//! The decision path updates these on every request. A `metrics` crate
//! handle keeps one atomic per counter for all threads (and, for a
//! histogram, an epoch-protected queue of samples), so two workers
//! deciding at the same time pass those cache lines back and forth between
//! their cores on every request.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// At most this many shards per counter set (a power of two).
const MAX_SHARDS: usize = 16;

/// Shards per counter set: the machine's parallelism rounded up to a power
/// of two, at most [`MAX_SHARDS`]. Threads beyond that share shards, which
/// stays exact (every add is atomic) and only costs some line sharing.
fn shard_count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| shards_at_most(MAX_SHARDS))
}

/// The machine's parallelism rounded up to a power of two, at most `max`
/// (a power of two).
pub fn shards_at_most(max: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .next_power_of_two()
        .min(max)
}

/// This thread's shard number, below [`MAX_SHARDS`] (a shard set of
/// `n` shards, a power of two no larger, takes it `& (n - 1)`).
#[inline]
pub fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Relaxed) % MAX_SHARDS;
        s.set(v);
        v
    })
}

/// One shard: `W` counters on their own cache line(s).
#[repr(align(64))]
struct Line<const W: usize>([AtomicU64; W]);

/// `W` related counters (say allowed, denied and shadow of one limit),
/// sharded by thread. Sums wrap at `u64::MAX` like the counters they add.
pub struct Counters<const W: usize> {
    shards: Box<[Line<W>]>,
    mask: usize,
}

impl<const W: usize> std::fmt::Debug for Counters<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("values", &(0..W).map(|i| self.get(i)).collect::<Vec<_>>())
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl<const W: usize> Default for Counters<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> Counters<W> {
    /// All counters at zero.
    pub fn new() -> Self {
        Self::with_shards(shard_count())
    }

    /// All counters at zero, over `shards` shards (rounded up to a power of
    /// two, at least 1).
    pub fn with_shards(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        Self {
            shards: (0..n)
                .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            mask: n - 1,
        }
    }

    /// This thread's shard: the counters it adds to.
    #[inline]
    fn mine(&self) -> &[AtomicU64; W] {
        &self.shards[thread_slot() & self.mask].0
    }

    /// Adds `n` to counter `i` (`i < W`).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        self.mine()[i].fetch_add(n, Relaxed);
    }

    /// Adds each `(i, n)` of `adds`, finding this thread's shard once.
    #[inline]
    pub fn add_each<const N: usize>(&self, adds: [(usize, u64); N]) {
        let mine = self.mine();
        for (i, n) in adds {
            if n > 0 {
                mine[i].fetch_add(n, Relaxed);
            }
        }
    }

    /// Counter `i`: the sum over the shards.
    pub fn get(&self, i: usize) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |s, l| s.wrapping_add(l.0[i].load(Relaxed)))
    }
}

/// Upper bounds of the latency buckets, nanoseconds (Prometheus `le`).
pub const LATENCY_BOUNDS_NS: [u64; BUCKETS] = [
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
];

/// Number of finite latency buckets.
const BUCKETS: usize = 15;

/// A bound of [`LATENCY_BOUNDS_NS`] as a Prometheus `le` label value, in
/// seconds (`5_000` -> `"0.000005"`).
pub fn le_label(bound_ns: u64) -> String {
    // f64's Display never uses an exponent and prints the shortest
    // decimal that reads back to the same value.
    (bound_ns as f64 / 1e9).to_string()
}

/// Counters per latency histogram: one per bound, one for `+Inf`, the sum.
const HIST_WORDS: usize = BUCKETS + 2;
const SUM: usize = HIST_WORDS - 1;

/// A latency histogram with the fixed buckets of [`LATENCY_BOUNDS_NS`],
/// sharded like [`Counters`]: a sample is two atomic adds to this thread's
/// shard.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    counts: Counters<HIST_WORDS>,
}

/// What a [`LatencyHistogram`] holds at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Samples at or below each bound of [`LATENCY_BOUNDS_NS`]
    /// (cumulative, as Prometheus buckets are).
    pub cumulative: [u64; BUCKETS],
    /// All samples (the `+Inf` bucket).
    pub count: u64,
    /// The sum of the samples, nanoseconds.
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one sample of `ns` nanoseconds.
    #[inline]
    pub fn record_ns(&self, ns: u64) {
        // First bound >= ns: the `le` bucket; past the last: `+Inf`.
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        self.counts.add_each([(i, 1), (SUM, ns)]);
    }

    /// The counts and sum now. Read shard by shard while writers run: a
    /// sample recorded meanwhile may already be in its bucket and not yet
    /// in the sum, or the reverse.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut cumulative = [0u64; BUCKETS];
        let mut running = 0u64;
        for (i, c) in cumulative.iter_mut().enumerate() {
            running = running.wrapping_add(self.counts.get(i));
            *c = running;
        }
        LatencySnapshot {
            cumulative,
            count: running.wrapping_add(self.counts.get(BUCKETS)),
            sum_ns: self.counts.get(SUM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn counters_are_exact_under_concurrent_adds() {
        // More threads than shards, so some threads share a shard.
        let c = Arc::new(Counters::<3>::with_shards(2));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for k in 0..10_000u64 {
                        c.add((t + k as usize) % 3, 1 + k % 2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Each thread adds 10,000 times, alternating 1 and 2: 15,000.
        let total: u64 = (0..3).map(|i| c.get(i)).sum();
        assert_eq!(total, 6 * 15_000);
        // Counter i receives the adds whose (t + k) % 3 == i.
        for i in 0..3 {
            let want: u64 = (0..6usize)
                .flat_map(|t| (0..10_000u64).filter(move |&k| (t + k as usize) % 3 == i))
                .map(|k| 1 + k % 2)
                .sum();
            assert_eq!(c.get(i), want, "counter {i}");
        }
    }

    #[test]
    fn shard_counts_are_powers_of_two() {
        for (asked, got) in [(0, 1), (1, 1), (3, 4), (16, 16), (17, 32)] {
            assert_eq!(Counters::<1>::with_shards(asked).shards.len(), got);
        }
        let n = Counters::<1>::new().shards.len();
        assert!(n.is_power_of_two() && n <= MAX_SHARDS, "{n}");
    }

    #[test]
    fn samples_on_a_bound_count_in_that_bucket() {
        let h = LatencyHistogram::new();
        h.record_ns(5_000); // le 0.000005
        h.record_ns(5_001); // le 0.00001
        h.record_ns(250_000_001); // +Inf only
        h.record_ns(0); // le 0.000005
        let s = h.snapshot();
        assert_eq!(s.cumulative[0], 2);
        assert_eq!(s.cumulative[1], 3);
        assert_eq!(s.cumulative[14], 3);
        assert_eq!(s.count, 4);
        assert_eq!(s.sum_ns, 5_000 + 5_001 + 250_000_001);
    }

    proptest! {
        /// Every bucket holds exactly the samples at or below its bound;
        /// the count and sum are those of all samples.
        #[test]
        fn histogram_matches_a_direct_count(samples in proptest::collection::vec(0u64..400_000_000, 0..200)) {
            let h = LatencyHistogram::new();
            for &s in &samples {
                h.record_ns(s);
            }
            let snap = h.snapshot();
            for (i, &b) in LATENCY_BOUNDS_NS.iter().enumerate() {
                let want = samples.iter().filter(|&&s| s <= b).count() as u64;
                prop_assert_eq!(snap.cumulative[i], want, "bucket le {}", le_label(b));
            }
            prop_assert_eq!(snap.count, samples.len() as u64);
            prop_assert_eq!(snap.sum_ns, samples.iter().sum::<u64>());
        }
    }

    #[test]
    fn bounds_and_labels_agree() {
        let labels: Vec<String> = LATENCY_BOUNDS_NS.iter().map(|&b| le_label(b)).collect();
        for (ns, le) in LATENCY_BOUNDS_NS.iter().zip(&labels) {
            let secs: f64 = le.parse().unwrap();
            assert_eq!((secs * 1e9).round() as u64, *ns, "{le}");
        }
        assert_eq!(labels[0], "0.000005");
        assert_eq!(labels[BUCKETS - 1], "0.25");
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }
}
