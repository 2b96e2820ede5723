//! Random drop with the count held to its expectation.
//!
//! GRD drops each arrival with probability `p`. Drawn independently, the
//! number forwarded in a second is binomial: at 940 arrivals/s and
//! `p ≈ 0.36` its standard deviation is about 15, half of the variance of
//! the count the soak measured for a limit of 600/s (21 in all, with the
//! demand estimate's own error), which passes the limit + 10 % about one
//! second in 500. [`Dither`] keeps the
//! draw random for every arrival (which flow is dropped stays a fair coin,
//! so GRD's fairness between flows is unchanged) but tilts each draw by
//! the running difference between the arrivals expected to be forwarded
//! (`Σ (1 − p)`) and those forwarded: the admit probability is
//! `(1 − p) + debt / 8`. The difference then stays within a few arrivals
//! (its standard deviation is about `sqrt(2 p (1 − p))`, under 1) instead
//! of growing as the square root of the count. With `p = 0` everything is
//! forwarded and with `p = 1` everything dropped, as before.
//!
//! Integers only: probabilities are in units of 2⁻³² (the thresholds of
//! `to_threshold`), one random `u32` per arrival as before.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use rand_chacha::ChaCha8Rng;

use super::Verdict;

/// How GRD draws its drops (`cluster.grd_draws`, `drl sim --grd-draws`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum GrdDraws {
    /// One independent draw per arrival, as the paper writes it: the count
    /// forwarded per second is binomial around its expectation.
    Independent,
    /// Each draw tilted by the running difference between the expected and
    /// the actual count forwarded ([`Dither`]): the count stays within a few
    /// arrivals of its expectation. The service's default.
    #[default]
    Dithered,
}

impl fmt::Display for GrdDraws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GrdDraws::Independent => "independent",
            GrdDraws::Dithered => "dithered",
        })
    }
}

impl FromStr for GrdDraws {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "independent" => Ok(GrdDraws::Independent),
            "dithered" => Ok(GrdDraws::Dithered),
            other => Err(format!(
                "unknown grd_draws {other:?} (expected dithered or independent)"
            )),
        }
    }
}

/// A random-drop limiter's draws, as [`GrdDraws`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draws(Option<Dither>);

impl Draws {
    /// Draws of kind `kind`, with no debt yet.
    pub fn new(kind: GrdDraws) -> Self {
        Self((kind == GrdDraws::Dithered).then(Dither::default))
    }

    /// Decides one arrival under drop threshold `threshold`.
    pub fn decide(&mut self, threshold: u64, rng: &mut ChaCha8Rng) -> Verdict {
        match &mut self.0 {
            Some(d) => d.decide(threshold, rng),
            None => independent(threshold, rng),
        }
    }
}

impl Default for Draws {
    fn default() -> Self {
        Self::new(GrdDraws::default())
    }
}

/// One arrival decided under drop threshold `threshold` with one
/// independent draw (the paper's GRD).
pub fn independent(threshold: u64, rng: &mut ChaCha8Rng) -> Verdict {
    if threshold > 0 && (rng.next_u32() as u64) < threshold {
        Verdict::Drop
    } else {
        Verdict::Forward
    }
}

/// One arrival in units of 2⁻³².
const ONE: i64 = 1 << 32;
/// The debt is applied at `1 / 2^GAIN_SHIFT` per arrival of debt.
const GAIN_SHIFT: u32 = 3;
/// The debt is held within ± this many arrivals (a long run at a
/// probability the tilt cannot reach, e.g. just after `p` changed a lot).
const MAX_DEBT: i64 = 16 * ONE;

/// The state of one random-drop limiter's draws.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dither {
    /// Arrivals expected to be forwarded less those forwarded, in units of
    /// 2⁻³².
    debt: i64,
}

impl Dither {
    /// Decides one arrival under drop threshold `threshold` (`p × 2³²`, as
    /// `to_threshold` makes it).
    pub fn decide(&mut self, threshold: u64, rng: &mut ChaCha8Rng) -> Verdict {
        if threshold == 0 {
            return Verdict::Forward;
        }
        if threshold >= ONE as u64 {
            return Verdict::Drop;
        }
        let q = ONE - threshold as i64;
        let tilted = (q + (self.debt >> GAIN_SHIFT)).clamp(0, ONE);
        let forward = (rng.next_u32() as i64) < tilted;
        self.debt = (self.debt + q - if forward { ONE } else { 0 }).clamp(-MAX_DEBT, MAX_DEBT);
        if forward {
            Verdict::Forward
        } else {
            Verdict::Drop
        }
    }

    /// The difference between arrivals expected to be forwarded and those
    /// forwarded so far, in arrivals.
    pub fn debt(&self) -> f64 {
        self.debt as f64 / ONE as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::to_threshold;
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn forwarded(p: f64, n: u32, seed: u64, dither: bool) -> u32 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let t = to_threshold(p);
        let mut d = Dither::default();
        (0..n)
            .filter(|_| {
                let v = if dither {
                    d.decide(t, &mut rng)
                } else {
                    independent(t, &mut rng)
                };
                v == Verdict::Forward
            })
            .count() as u32
    }

    #[test]
    fn the_count_stays_at_its_expectation_where_independent_draws_wander() {
        // 940 arrivals a second at p = 0.36, 200 seconds: the spread of the
        // per-second count, dithered and not.
        let spread = |dither: bool| {
            let counts: Vec<f64> = (0..200)
                .map(|s| forwarded(0.36, 940, s, dither) as f64)
                .collect();
            let mean = counts.iter().sum::<f64>() / counts.len() as f64;
            let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / 200.0;
            (mean, var.sqrt())
        };
        let (m_ind, sd_ind) = spread(false);
        let (m_dit, sd_dit) = spread(true);
        assert!((m_ind - 601.6).abs() < 5.0, "{m_ind}");
        assert!((m_dit - 601.6).abs() < 2.0, "{m_dit}");
        assert!(sd_ind > 10.0, "independent draws: sd {sd_ind}");
        assert!(sd_dit < 2.0, "dithered: sd {sd_dit}");
    }

    #[test]
    fn alternating_flows_still_share_alike() {
        // Two flows taking turns at p = 0.5: a deterministic pattern would
        // forward one and drop the other; the tilted coin forwards each
        // about half of the time.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let t = to_threshold(0.5);
        let mut d = Dither::default();
        let mut per = [0u32; 2];
        for i in 0..20_000 {
            if d.decide(t, &mut rng) == Verdict::Forward {
                per[i % 2] += 1;
            }
        }
        assert_eq!(per[0] + per[1], 10_000 - (d.debt().round() as u32));
        for f in per {
            assert!((4_700..=5_300).contains(&f), "{per:?}");
        }
    }

    #[test]
    fn zero_and_one_are_exact() {
        assert_eq!(forwarded(0.0, 1_000, 1, true), 1_000);
        assert_eq!(forwarded(1.0, 1_000, 1, true), 0);
    }

    proptest! {
        /// Under any sequence of drop probabilities, the forwarded count
        /// stays within a few arrivals of `Σ (1 − p)`.
        #[test]
        fn forwarded_tracks_the_expected_count(
            ps in proptest::collection::vec(0.0f64..=1.0, 1..40),
            per in 1u32..400,
            seed in any::<u64>(),
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut d = Dither::default();
            let (mut expected, mut got) = (0.0f64, 0u64);
            for p in ps {
                let t = to_threshold(p);
                for _ in 0..per {
                    if d.decide(t, &mut rng) == Verdict::Forward {
                        got += 1;
                    }
                    if t > 0 && t < 1 << 32 {
                        expected += 1.0 - t as f64 / (1u64 << 32) as f64;
                    } else if t == 0 {
                        expected += 1.0;
                    }
                }
                // At a debt of 8 the tilt makes forwarding certain (at
                // -8 dropping), so the difference never passes 9.
                prop_assert!((expected - got as f64).abs() <= 9.0 + 1e-6, "{} vs {}", expected, got);
            }
        }
    }
}
