//! Adaptive sampling in front of the top-keys sketch: a limit taking more
//! than [`SAMPLES_PER_S`] decisions a second records each decision with
//! probability `1/s` and weight `cost * s`, so that the sketch sees about
//! [`SAMPLES_PER_S`] updates a second whatever the load.
//!
//! **Why.** A sketch update takes a lock, hashes the key, probes the index
//! and, with many keys, evicts the smallest counter and moves it in the
//! heap: 0.1-0.5 µs, about the cost of the decision itself (measured in
//! docs/performance.md, "Status page": 25-30 % of the decisions/s with every
//! decision recorded). Sampled, the sketch costs at most
//! `SAMPLES_PER_S * 0.5 µs` = 5 ms of CPU per second per busy limit (0.5 %
//! of one core) however many decisions the limit takes; a skipped decision
//! costs an atomic load, one step of a thread-local xorshift generator and
//! a multiply (a few ns, under 1 % of a 0.5-1 µs decision).
//!
//! **Bursts.** The status sampler sets `s` once a second from the last
//! second's rate, so a burst after a quiet second would be recorded in
//! full for up to a second. A shard therefore also reads the clock every
//! [`PACE_RECORDS`] records and, once its window is at least [`PACE_MIN`]
//! long, raises `s` at once to what its own rate over the window (a lower
//! bound of the limit's rate) calls for: a sustained load pays the full
//! price for about [`PACE_MIN`], then the sampled one, while a short
//! burst (one large batch on a quiet limit) stays exact. Only the
//! once-a-second sampler lowers `s`.
//!
//! **Why Bernoulli, not every `s`-th decision.** Each decision is kept or
//! not independently (a draw from a per-thread generator), so the estimate
//! is unbiased for every key whatever the order of the keys: "every
//! `s`-th" would alias with periodic patterns (16 keys in rotation and
//! `s = 16` would record a single key).
//!
//! **Error.** With `s = 1` every decision is recorded and the sketch's
//! deterministic bounds hold as they are. With `s > 1` a key of true
//! weight `W` (checks of cost at most `c`) has an estimate `X` (the sum of
//! `cost * s` over its kept decisions) with `E[X] = W` and
//! `Var[X] = sum(cost^2 * (s - 1)) <= W * s * c`: the standard deviation is
//! at most `sqrt(W * s * c)` (relative: `sqrt(s * c / W)`). The sketch's
//! bounds hold on `X` (`count - error <= X <= count`), so the true weight
//! is in `[count - error - z * sd, count + z * sd]` with the usual normal
//! confidence for `z`. [`SAMPLES_PER_S`] keeps that small for the keys a
//! ranking shows: over a 60 s generation a busy limit records 600,000
//! decisions, so a key with 1 % of the demand is estimated from about 6,000
//! of them (relative standard deviation about 1.3 %).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Decisions per second a limit records into its sketch at most, on
/// average; below this rate every decision is recorded (`s = 1`).
pub const SAMPLES_PER_S: u64 = 10_000;

/// Records between two in-band rate checks of a shard (one clock read per
/// this many records: a few ps per decision).
pub const PACE_RECORDS: u32 = 1_024;

/// The shortest window an in-band rate is measured over: a burst shorter
/// than this (a large batch on a quiet limit) raises nothing, and a
/// sustained load is recorded in full for at most about this long.
pub const PACE_MIN: std::time::Duration = std::time::Duration::from_millis(10);

/// The `s` a shard that saw `decisions` in `elapsed` calls for (at most
/// what its own rate calls for: `elapsed` is floored at 1 µs).
pub fn in_band_sample(decisions: u64, elapsed: std::time::Duration) -> u32 {
    let ns = elapsed.as_nanos().max(1_000);
    let rate = (u128::from(decisions) * 1_000_000_000 / ns).min(u128::from(u64::MAX)) as u64;
    sample_1_in(rate)
}

/// The sampling for a limit taking `decisions_per_s`: record 1 decision
/// in `s` (1 up to [`SAMPLES_PER_S`], then `ceil(rate / SAMPLES_PER_S)`).
pub fn sample_1_in(decisions_per_s: u64) -> u32 {
    if decisions_per_s <= SAMPLES_PER_S {
        1
    } else {
        decisions_per_s
            .div_ceil(SAMPLES_PER_S)
            .min(u64::from(u32::MAX)) as u32
    }
}

/// One step of xorshift64* (Vigna): `state` must not be 0 (it never
/// becomes 0); returns 64 well-mixed bits.
#[inline]
pub fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// True with probability `1/s` for a uniform `r` (its top 32 bits scaled
/// to `[0, s)` are 0: the probability is `ceil(2^32 / s) / 2^32`, within
/// `s / 2^32` of `1/s`, relatively).
#[inline]
pub fn kept(r: u64, s: u32) -> bool {
    ((r >> 32) * u64::from(s)) >> 32 == 0
}

/// SplitMix64's finaliser: spreads a seed over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

thread_local! {
    /// This thread's generator; 0 until first used.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// A fresh seed: distinct per call (a counter) and per process start (the
/// clock), never 0.
fn fresh_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mix(n ^ mix(t)) | 1
}

/// True for about one call in `s` on this thread (independent draws).
#[inline]
pub fn draw(s: u32) -> bool {
    STATE.with(|c| {
        let mut x = c.get();
        if x == 0 {
            x = fresh_seed();
        }
        let r = xorshift(&mut x);
        c.set(x);
        kept(r, s)
    })
}

/// Seeds this thread's generator (reproducible tests and benchmarks).
pub fn seed_thread(seed: u64) {
    STATE.with(|c| c.set(mix(seed) | 1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_decision_is_recorded_up_to_the_target_rate_then_about_the_target() {
        assert_eq!(sample_1_in(0), 1);
        assert_eq!(sample_1_in(SAMPLES_PER_S), 1);
        assert_eq!(sample_1_in(SAMPLES_PER_S + 1), 2);
        assert_eq!(sample_1_in(1_000_000), 100);
        assert_eq!(sample_1_in(u64::MAX), u32::MAX);
        assert!(kept(u64::MAX, 1), "s = 1 keeps every draw");
        let sec = std::time::Duration::from_secs(1);
        assert_eq!(in_band_sample(SAMPLES_PER_S, sec), 1);
        assert_eq!(in_band_sample(SAMPLES_PER_S * 30, sec), 30);
        assert_eq!(in_band_sample(1_024, sec / 1_000), 103, "1,024 in 1 ms");
        assert_eq!(
            in_band_sample(1_024, std::time::Duration::ZERO),
            sample_1_in(1_024_000_000),
            "elapsed floored at 1 µs"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Recorded decisions per second stay within (target/2, target]
        /// once sampling starts, and s never drops below 1.
        #[test]
        fn the_recorded_rate_stays_near_the_target(rate in 0u64..100_000_000_000) {
            let s = u64::from(sample_1_in(rate));
            prop_assert!(s >= 1);
            prop_assert!(rate / s <= SAMPLES_PER_S);
            if rate > SAMPLES_PER_S {
                prop_assert!(rate / s > SAMPLES_PER_S / 2, "rate {rate}, s {s}");
            }
        }

        /// The kept fraction of a seeded stream is 1/s within 5 standard
        /// deviations.
        #[test]
        fn draws_keep_one_in_s(seed in any::<u64>(), s in 1u32..1_000) {
            let mut x = mix(seed) | 1;
            let n = 200_000u64;
            let k = (0..n).filter(|_| kept(xorshift(&mut x), s)).count() as f64;
            let p = 1.0 / f64::from(s);
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            prop_assert!((k - n as f64 * p).abs() <= 5.0 * sd + 1.0, "kept {k} of {n} at 1/{s}");
        }
    }
}
