//! Per-limit history for the status page: decisions per second over the
//! last [`SECONDS`] seconds (from the decision counters, sampled once a
//! second, never on the decision path), and latency snapshots every
//! [`LATENCY_EVERY`] seconds so that percentiles cover about the last
//! minute.

use std::collections::VecDeque;

use super::latency::{self, BUCKETS};

/// Seconds of per-second counts kept.
pub const SECONDS: usize = 60;
/// Seconds between two latency snapshots.
pub const LATENCY_EVERY: u64 = 10;
/// Latency snapshots kept (the percentiles span up to
/// `(LATENCY_SNAPSHOTS - 1) * LATENCY_EVERY` seconds, plus the seconds
/// since the newest).
const LATENCY_SNAPSHOTS: usize = 7;

/// One limit's history.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Allowed per second, oldest first.
    pub allowed: VecDeque<u64>,
    /// Denied per second, oldest first.
    pub denied: VecDeque<u64>,
    /// Totals at the last sample.
    last: Option<(u64, u64)>,
    /// Latency counts at the last snapshots, oldest first.
    latency: VecDeque<Box<[u64; BUCKETS]>>,
}

impl Series {
    /// Records the totals `(allowed, denied)` read one second after the
    /// previous call; returns the decisions since then (none on the first
    /// call).
    pub fn sample(&mut self, totals: (u64, u64)) -> Option<u64> {
        let delta = self.last.map(|(a, d)| {
            let (da, dd) = (totals.0.wrapping_sub(a), totals.1.wrapping_sub(d));
            push(&mut self.allowed, da);
            push(&mut self.denied, dd);
            da.saturating_add(dd)
        });
        self.last = Some(totals);
        delta
    }

    /// Keeps a latency snapshot (every [`LATENCY_EVERY`] seconds).
    pub fn snapshot_latency(&mut self, counts: [u64; BUCKETS]) {
        if self.latency.len() == LATENCY_SNAPSHOTS {
            self.latency.pop_front();
        }
        self.latency.push_back(Box::new(counts));
    }

    /// The decisions since the oldest latency snapshot, per bucket; all
    /// of `now` (everything since the start) until the snapshots span
    /// their full window, so that a decision made before the first
    /// snapshot counts for as long as a later one would.
    pub fn recent_latency(&self, now: &[u64; BUCKETS]) -> [u64; BUCKETS] {
        match self.latency.front() {
            Some(then) if self.latency.len() == LATENCY_SNAPSHOTS => latency::delta(now, then),
            _ => *now,
        }
    }
}

fn push(q: &mut VecDeque<u64>, v: u64) {
    if q.len() == SECONDS {
        q.pop_front();
    }
    q.push_back(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_second_deltas_keep_the_last_minute() {
        let mut s = Series::default();
        assert_eq!(s.sample((10, 1)), None);
        assert!(s.allowed.is_empty(), "the first sample is a baseline");
        for i in 1..=70u64 {
            assert_eq!(s.sample((10 + i * 5, 1 + i)), Some(6));
        }
        assert_eq!(s.allowed.len(), SECONDS);
        assert!(s.allowed.iter().all(|&v| v == 5));
        assert!(s.denied.iter().all(|&v| v == 1));
    }

    #[test]
    fn latency_covers_the_snapshots_kept() {
        let mut s = Series::default();
        let mut c = [0u64; BUCKETS];
        for i in 0..10u64 {
            c[3] = i * 100;
            s.snapshot_latency(c);
        }
        c[3] = 1_000;
        // The oldest kept snapshot is the 4th (i = 3): 1000 - 300.
        assert_eq!(s.recent_latency(&c)[3], 700);
    }

    #[test]
    fn latency_before_the_window_is_full_counts_from_the_start() {
        // Decisions before the first snapshot (at 1 s) still count while
        // the snapshots span less than their window (the status test saw
        // one of two batches vanish on a slow machine).
        let mut s = Series::default();
        let mut c = [0u64; BUCKETS];
        c[3] = 1;
        s.snapshot_latency(c);
        c[3] = 2;
        assert_eq!(s.recent_latency(&c)[3], 2);
        for _ in 1..LATENCY_SNAPSHOTS {
            s.snapshot_latency(c);
        }
        c[3] = 5;
        assert_eq!(s.recent_latency(&c)[3], 4, "full: since the oldest kept");
    }
}
