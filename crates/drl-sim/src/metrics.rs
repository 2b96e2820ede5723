//! Metrics: Jain's fairness index, mean rates over a window, and rate
//! histograms at a given timescale.

use drl_core::Nanos;

use crate::engine::RunResult;

/// Jain's fairness index `(Σx)² / (n·Σx²)`; 1 for an empty or all-zero set.
pub fn jain(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || s2 == 0.0 {
        1.0
    } else {
        s * s / (n * s2)
    }
}

/// Bits per second for `bytes` over `ns`.
pub fn bps(bytes: u64, ns: Nanos) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 * 1e9 / ns as f64
    }
}

impl RunResult {
    /// Index of the first bin at or after the warm-up.
    fn first_bin(&self) -> usize {
        (self.scenario.warmup / self.scenario.bin) as usize
    }

    /// Mean forwarding rate of each limiter over `[warmup, duration)`, Mbps.
    pub fn limiter_mbps(&self) -> Vec<f64> {
        let b0 = self.first_bin();
        self.forwarded
            .iter()
            .map(|bins| {
                let bytes: u64 = bins[b0.min(bins.len())..].iter().sum();
                let span = (bins.len() - b0.min(bins.len())) as u64 * self.scenario.bin;
                bps(bytes, span) / 1e6
            })
            .collect()
    }

    /// Mean aggregate forwarding rate over `[warmup, duration)`, Mbps.
    pub fn aggregate_mbps(&self) -> f64 {
        self.limiter_mbps().iter().sum()
    }

    /// Per-flow goodput over `[warmup, duration)`, Mbps.
    pub fn flow_goodput_mbps(&self) -> Vec<f64> {
        let span = self.scenario.duration - self.scenario.warmup;
        self.flows
            .iter()
            .map(|f| bps(f.goodput_bytes, span) / 1e6)
            .collect()
    }

    /// Jain's index over per-flow goodput.
    pub fn jain(&self) -> f64 {
        jain(&self.flow_goodput_mbps())
    }

    /// Aggregate forwarding rate series (Mbps) at `timescale` (a multiple of
    /// the bin; rounded down, at least one bin) over `[warmup, duration)`.
    pub fn aggregate_series(&self, timescale: Nanos) -> Vec<f64> {
        let per = (timescale / self.scenario.bin).max(1) as usize;
        let b0 = self.first_bin();
        let n = self.forwarded.first().map_or(0, Vec::len);
        let mut out = Vec::new();
        let mut b = b0;
        while b + per <= n {
            let bytes: u64 = self
                .forwarded
                .iter()
                .map(|bins| bins[b..b + per].iter().sum::<u64>())
                .sum();
            out.push(bps(bytes, per as u64 * self.scenario.bin) / 1e6);
            b += per;
        }
        out
    }
}

/// Standard deviation (population) of `xs`.
pub fn stddev(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt()
}

/// Counts of `xs` in `bins` equal bins over `[lo, hi)` (values outside are
/// clamped into the end bins).
pub fn histogram(xs: &[f64], lo: f64, hi: f64, bins: usize) -> Vec<u64> {
    let mut h = vec![0u64; bins.max(1)];
    let w = (hi - lo) / h.len() as f64;
    for &x in xs {
        let i = if w > 0.0 { ((x - lo) / w).floor() } else { 0.0 };
        let i = (i.max(0.0) as usize).min(h.len() - 1);
        h[i] += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_examples() {
        assert!((jain(&[1.0; 10]) - 1.0).abs() < 1e-12);
        // The paper's caveat: 9 equal flows and one starved gives 0.9.
        let mut xs = vec![1.0; 9];
        xs.push(0.0);
        assert!((jain(&xs) - 0.9).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn histogram_clamps_and_counts() {
        let h = histogram(&[0.0, 0.5, 1.0, 9.9, 10.0, -1.0], 0.0, 10.0, 10);
        assert_eq!(h.iter().sum::<u64>(), 6);
        assert_eq!(h[0], 3);
        assert_eq!(h[9], 2);
        assert!((stddev(&[1.0, 3.0]) - 1.0).abs() < 1e-12);
    }
}
