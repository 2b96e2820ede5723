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
//! ([`super::space_saving::merge`]): each key's true weight lies in
//! `[count - error, count]`, every error is at most the reported `bound`,
//! which is at most `total / CAPACITY`, and any key heavier than `bound`
//! is reported. Keys longer than [`KEY_BYTES`] are kept as a prefix and a
//! hash. Keys stay in this process: only `/v1/status` and the status page
//! show them.
//!
//! Sampling ([`super::sampling`]): the status sampler sets, once a second,
//! the limit's `1/s` from its decision rate ([`TopKeys::set_rate`]); above
//! [`SAMPLES_PER_S`](sampling::SAMPLES_PER_S) decisions a second a decision is recorded with
//! probability `1/s` and weight `cost * s`. With `s = 1` (the default, and
//! any rate up to that) every decision is recorded and the
//! bounds above are exact; otherwise they hold on the sampled estimates,
//! and [`Ranking::sample_1_in`] (the largest `s` that fed the ranking)
//! says so. So that a burst does not pay the full price until the next
//! second, each shard also checks its own rate every
//! [`sampling::PACE_RECORDS`] records and raises `s` at once when it is
//! too fast (only once the sampler drives the limit: a `TopKeys` nobody
//! calls [`TopKeys::set_rate`] on records every decision).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use super::space_saving::{HeavyKey, SpaceSaving, merge};
use parking_lot::Mutex;

use super::sampling::{self, sample_1_in};
use crate::sharded::{shards_at_most, thread_slot};

/// Keys each sketch monitors.
pub const CAPACITY: usize = 64;
/// Longest key kept whole, bytes.
pub const KEY_BYTES: usize = 128;
/// Seconds per generation.
pub const GENERATION_S: u64 = 60;
/// At most this many shards per limit.
const MAX_SHARDS: usize = 8;

fn shard_count() -> usize {
    shards_at_most(MAX_SHARDS)
}

#[derive(Debug)]
struct Shard {
    /// `[generation]`; `cur` is the one being written.
    demand: [SpaceSaving; 2],
    denials: [SpaceSaving; 2],
    /// The largest `s` of a decision recorded in each generation (0:
    /// none).
    max_s: [u32; 2],
    cur: usize,
    /// Decisions since `pace.0` and records among them (in-band raise).
    pace: (Instant, u64, u32),
}

impl Shard {
    fn new() -> Self {
        let s = || SpaceSaving::new(CAPACITY, KEY_BYTES);
        Self {
            demand: [s(), s()],
            denials: [s(), s()],
            max_s: [0; 2],
            cur: 0,
            pace: (Instant::now(), 0, 0),
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
    /// Record 1 decision in this many (at least 1).
    sample: AtomicU32,
    /// The status sampler sets `sample` ([`TopKeys::set_rate`] was
    /// called): from then on a shard recording fast raises it in-band.
    adaptive: AtomicBool,
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
    /// The largest `s` among the decisions recorded (1-in-`s` sampling,
    /// weight `cost * s`; 1 when every decision was recorded, or none):
    /// above 1, `count`, `total` and `bound` are estimates (see
    /// [`super::sampling`] for the error).
    pub sample_1_in: u32,
}

impl Ranking {
    /// Nothing seen.
    pub fn empty() -> Self {
        Self {
            keys: Vec::new(),
            total: 0,
            bound: 0,
            sample_1_in: 1,
        }
    }
}

impl TopKeys {
    /// Empty sketches, one shard per core (at most 8).
    pub fn new() -> Self {
        let n = shard_count();
        Self {
            shards: (0..n).map(|_| Padded(Mutex::new(Shard::new()))).collect(),
            mask: n - 1,
            sample: AtomicU32::new(1),
            adaptive: AtomicBool::new(false),
        }
    }

    /// Records a decision of `cost` for `key`: every one while the
    /// sampling is 1 in 1, else with probability `1/s` and weight
    /// `cost * s`.
    #[inline]
    pub fn observe(&self, key: &str, cost: u64, allowed: bool) {
        if cost == 0 {
            return;
        }
        let s = self.sample.load(Ordering::Relaxed);
        if s > 1 && !sampling::draw(s) {
            return;
        }
        self.record(key, cost.saturating_mul(u64::from(s)), allowed, s);
    }

    #[inline]
    fn record(&self, key: &str, weight: u64, allowed: bool, s: u32) {
        let mut sh = self.shards[thread_slot() & self.mask].0.lock();
        let g = sh.cur;
        sh.demand[g].observe(key, weight);
        if !allowed {
            sh.denials[g].observe(key, weight);
        }
        if sh.max_s[g] < s {
            sh.max_s[g] = s;
        }
        sh.pace.1 += u64::from(s);
        sh.pace.2 += 1;
        if sh.pace.2 >= sampling::PACE_RECORDS {
            self.pace(&mut sh.pace, Instant::now());
        }
    }

    /// Every [`sampling::PACE_RECORDS`] records of a shard: once the
    /// window is at least [`sampling::PACE_MIN`] long, raises `s` to what
    /// the shard's own rate over it calls for (a lower bound of the
    /// limit's rate) if the status sampler drives this limit, and starts
    /// a new window. The sampler may lower `s` again a second later.
    #[cold]
    fn pace(&self, pace: &mut (Instant, u64, u32), now: Instant) {
        pace.2 = 0;
        let elapsed = now.saturating_duration_since(pace.0);
        if elapsed < sampling::PACE_MIN {
            return;
        }
        let decisions = pace.1;
        *pace = (now, 0, 0);
        if self.adaptive.load(Ordering::Relaxed) {
            let s = sampling::in_band_sample(decisions, elapsed);
            self.sample.fetch_max(s, Ordering::Relaxed);
        }
    }

    /// Sets the sampling from the limit's decisions in the last second
    /// (the status sampler, once a second): 1 in [`sample_1_in`]`(rate)`.
    /// Returns the new `s`.
    pub fn set_rate(&self, decisions_per_s: u64) -> u32 {
        let s = sample_1_in(decisions_per_s);
        self.set_sample(s);
        self.adaptive.store(true, Ordering::Relaxed);
        s
    }

    /// Records 1 decision in `s` from now on (at least 1).
    pub fn set_sample(&self, s: u32) {
        self.sample.store(s.max(1), Ordering::Relaxed);
    }

    /// The sampling in force: 1 decision in this many is recorded.
    pub fn sample(&self) -> u32 {
        self.sample.load(Ordering::Relaxed)
    }

    /// Starts a new generation, forgetting the older one.
    pub fn rotate(&self) {
        for p in self.shards.iter() {
            let mut s = p.0.lock();
            let g = 1 - s.cur;
            s.demand[g].clear();
            s.denials[g].clear();
            s.max_s[g] = 0;
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
                    max_s: s.max_s,
                    cur: s.cur,
                    pace: s.pace,
                }
            })
            .collect();
        let sample_1_in = shards
            .iter()
            .flat_map(|s| s.max_s)
            .max()
            .unwrap_or(0)
            .max(1);
        let rank = |pick: fn(&Shard) -> &[SpaceSaving; 2]| {
            let m = merge(shards.iter().flat_map(|s| pick(s).iter()));
            Ranking {
                keys: m.keys.into_iter().take(n).collect(),
                total: m.total,
                bound: m.bound,
                sample_1_in,
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

    use proptest::prelude::*;
    use std::time::Duration;

    /// `n` decisions of cost 1: every 20th on `heavy` (5 % of the
    /// weight), the others spread over 100,000 light keys (19 each).
    fn heavy_among_light(t: &TopKeys, n: u64) {
        for i in 0..n {
            if i % 20 == 0 {
                t.observe("heavy", 1, true);
            } else {
                t.observe(&format!("light-{}", i % 100_000), 1, i % 3 != 0);
            }
        }
    }

    /// Five standard deviations of a sampled estimate of true weight `w`
    /// at 1 in `s`, checks of cost 1 (the bound in `sampling`'s docs).
    fn five_sd(w: u64, s: u32) -> u64 {
        (5.0 * (w as f64 * f64::from(s)).sqrt()).ceil() as u64
    }

    /// The sampled claims on one run: the heavy key ranks first, its
    /// interval `[count - error, count]` widened by five standard
    /// deviations holds its true weight, and the total is within five
    /// standard deviations of the truth.
    fn check_sampled(seed: u64) -> Result<(), TestCaseError> {
        const N: u64 = 2_000_000;
        const S: u32 = 100;
        sampling::seed_thread(seed);
        let t = TopKeys::new();
        t.set_sample(S);
        heavy_among_light(&t, N);
        let (demand, denials) = t.report(10);
        prop_assert_eq!(demand.sample_1_in, S);
        prop_assert_eq!(denials.sample_1_in, S);
        let h = &demand.keys[0];
        prop_assert_eq!(h.key.as_str(), "heavy", "{:?}", demand);
        let w = N / 20;
        let tol = five_sd(w, S);
        prop_assert!(
            h.count - h.error <= w + tol && w <= h.count + tol,
            "heavy {h:?}, true {w}, tolerance {tol}"
        );
        let tol = five_sd(N, S);
        prop_assert!(
            demand.total.abs_diff(N) <= tol,
            "total {} of {N}",
            demand.total
        );
        // Denials: a third of the light decisions.
        let d = (0..N).filter(|i| i % 20 != 0 && i % 3 == 0).count() as u64;
        prop_assert!(
            denials.total.abs_diff(d) <= five_sd(d, S),
            "denials {} of {d}",
            denials.total
        );
        Ok(())
    }

    #[test]
    fn sampled_one_in_100_the_heavy_key_ranks_first_within_tolerance() {
        check_sampled(19).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4))]

        #[test]
        fn sampled_estimates_hold_for_any_seed(seed in any::<u64>()) {
            check_sampled(seed)?;
        }

        /// With `s = 1` the sketch is exactly the unsampled space-saving
        /// sketch: the same keys, counts, errors, total and bound.
        #[test]
        fn unsampled_is_exactly_the_space_saving_sketch(
            items in prop::collection::vec((0u16..300, 1u64..5, any::<bool>()), 1..3000),
        ) {
            let t = TopKeys::new();
            prop_assert_eq!(t.sample(), 1);
            let mut demand = SpaceSaving::new(CAPACITY, KEY_BYTES);
            let mut denials = SpaceSaving::new(CAPACITY, KEY_BYTES);
            for &(k, c, allowed) in &items {
                let key = format!("k{k}");
                t.observe(&key, c, allowed);
                demand.observe(&key, c);
                if !allowed {
                    denials.observe(&key, c);
                }
            }
            let (d, n) = t.report(CAPACITY);
            let (md, mn) = (merge([&demand]), merge([&denials]));
            prop_assert_eq!((&d.keys, d.total, d.bound), (&md.keys, md.total, md.bound));
            prop_assert_eq!((&n.keys, n.total, n.bound), (&mn.keys, mn.total, mn.bound));
            prop_assert_eq!(d.sample_1_in, 1);
        }
    }

    #[test]
    fn sampling_rises_under_load_and_falls_back_to_every_decision() {
        let t = TopKeys::new();
        assert_eq!(t.sample(), 1, "a new limit records every decision");
        assert_eq!(t.set_rate(5_000), 1);
        assert_eq!(t.set_rate(sampling::SAMPLES_PER_S * 50), 50);
        assert_eq!(t.sample(), 50);
        sampling::seed_thread(7);
        for _ in 0..10_000 {
            t.observe("k", 2, true);
        }
        let (d, _) = t.report(1);
        assert_eq!(d.sample_1_in, 50, "the report says it was sampled");
        assert_eq!(d.total % 100, 0, "each kept decision weighs cost * s");
        // Five standard deviations: 5 * sqrt(20,000 * 50 * 2).
        assert!(d.total.abs_diff(20_000) <= 7_100, "{d:?}");
        assert_eq!(t.set_rate(3), 1, "the load is gone");
        t.observe("k", 2, true);
        assert_eq!(
            t.report(1).0.sample_1_in,
            50,
            "until the sampled generations age out"
        );
        t.rotate();
        t.rotate();
        t.observe("k", 2, true);
        let (d, _) = t.report(1);
        assert_eq!((d.sample_1_in, d.total), (1, 2), "exact again");
        t.rotate();
        t.rotate();
        assert_eq!(t.report(1).0.sample_1_in, 1, "nothing recorded: 1");
    }

    #[test]
    fn a_fast_shard_raises_the_sampling_in_band_once_the_sampler_drives_it() {
        let t = TopKeys::new();
        let n = sampling::PACE_RECORDS;
        let t0 = Instant::now();
        let win = sampling::PACE_MIN;
        let fast = 1_000 * u64::from(n);
        // Not driven by the sampler: every decision, however fast.
        t.pace(&mut (t0, fast, n), t0 + win);
        assert_eq!(t.sample(), 1);
        // Driven: a slow shard (n decisions over 10 s) changes nothing.
        assert_eq!(t.set_rate(0), 1);
        t.pace(&mut (t0, u64::from(n), n), t0 + Duration::from_secs(10));
        assert_eq!(t.sample(), 1);
        // A window shorter than PACE_MIN (a burst) only keeps counting.
        let mut p = (t0, fast, n);
        t.pace(&mut p, t0 + win / 10);
        assert_eq!((t.sample(), p), (1, (t0, fast, 0)));
        // A fast one (`fast` decisions over PACE_MIN) raises s to what its
        // rate calls for and starts a new window; never lowers it.
        t.pace(&mut p, t0 + win);
        assert_eq!(t.sample(), sampling::in_band_sample(fast, win));
        assert!(t.sample() > 1);
        assert_eq!(p, (t0 + win, 0, 0), "a new window starts");
        t.pace(&mut (t0, 1, 1), t0 + win);
        assert_eq!(t.sample(), sampling::in_band_sample(fast, win));
        // The sampler lowers it again when the limit is quiet.
        assert_eq!(t.set_rate(10), 1);
        // The decision path checks every PACE_RECORDS records.
        for _ in 0..n {
            t.observe("k", 1, true);
        }
        let slot = thread_slot() & t.mask;
        assert_eq!(t.shards[slot].0.lock().pace.2, 0, "checked");
        t.set_sample(1);
        t.observe("k", 1, true);
        assert_eq!(t.shards[slot].0.lock().pace.2, 1);
    }
}
