//! Per-limit decision latency: a log-linear histogram of fixed size
//! (four buckets per power of two from 64 ns to about 137 s, so a
//! reported percentile is the upper edge of a bucket at most 25 % wider
//! than its lower edge), sharded by thread like the decision counters.

use crate::sharded::Counters;

/// Buckets: one below 64 ns, four per octave from 2^6 to 2^37 ns, one
/// above.
pub const BUCKETS: usize = 2 + 4 * 31;

/// The bucket of a sample of `ns` nanoseconds.
#[inline]
pub fn bucket(ns: u64) -> usize {
    if ns < 64 {
        return 0;
    }
    let octave = 63 - ns.leading_zeros() as usize; // >= 6
    let sub = ((ns >> (octave - 2)) & 3) as usize;
    (1 + (octave - 6) * 4 + sub).min(BUCKETS - 1)
}

/// The upper edge of bucket `i`, nanoseconds (`u64::MAX` for the last).
pub fn upper_ns(i: usize) -> u64 {
    if i == 0 {
        return 64;
    }
    if i >= BUCKETS - 1 {
        return u64::MAX;
    }
    let octave = (i - 1) / 4 + 6;
    let sub = ((i - 1) % 4) as u64;
    (5 + sub) << (octave - 2)
}

/// A limit's latency histogram.
#[derive(Debug, Default)]
pub struct Latency {
    counts: Counters<BUCKETS>,
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one decision of `ns` nanoseconds.
    #[inline]
    pub fn record(&self, ns: u64) {
        self.counts.add(bucket(ns), 1);
    }

    /// Counts per bucket so far.
    pub fn snapshot(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.counts.get(i))
    }
}

/// Samples in `now - then` per bucket (counts only grow).
pub fn delta(now: &[u64; BUCKETS], then: &[u64; BUCKETS]) -> [u64; BUCKETS] {
    std::array::from_fn(|i| now[i].wrapping_sub(then[i]))
}

/// The `q` quantile (0 < q <= 1) of `counts`, as the upper edge of its
/// bucket in nanoseconds; `None` without samples.
pub fn quantile_ns(counts: &[u64; BUCKETS], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(upper_ns(i));
        }
    }
    Some(upper_ns(BUCKETS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_sample_lies_in_its_bucket_and_buckets_are_tight(ns in 0u64..(1 << 40)) {
            let i = bucket(ns);
            prop_assert!(ns < upper_ns(i), "{ns} >= upper {}", upper_ns(i));
            if i > 0 {
                let lower = upper_ns(i - 1);
                prop_assert!(ns >= lower, "{ns} < lower {lower}");
                if i < BUCKETS - 1 {
                    // At most 25 % wider than the lower edge.
                    prop_assert!(upper_ns(i) - lower <= lower / 4, "bucket {i}");
                }
            }
        }
    }

    #[test]
    fn quantiles_come_from_the_right_bucket() {
        let h = Latency::new();
        for _ in 0..98 {
            h.record(1_000);
        }
        h.record(1_000_000);
        h.record(1_000_000);
        let s = h.snapshot();
        let p50 = quantile_ns(&s, 0.5).unwrap();
        let p99 = quantile_ns(&s, 0.99).unwrap();
        assert!((1_000..=1_280).contains(&p50), "{p50}");
        assert!((1_000_000..=1_250_000).contains(&p99), "{p99}");
        assert_eq!(quantile_ns(&[0; BUCKETS], 0.5), None);
    }
}
