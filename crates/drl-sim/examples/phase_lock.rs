//! The sweep behind the simulator's default per-packet jitter (EXPERIMENTS.md,
//! "Phase lock"): the paper's baseline (3 vs 7 flows, 10 Mbps) over 10 seeds
//! for each jitter, with Jain's index and the shape of the 100 ms histogram
//! of the aggregate rate (fraction of windows near 8, 10 and 12 Mbps).
//!
//! cargo run --release -p drl-sim --example phase_lock -- [JITTER_US ...]
//!
//! Its output chose `drl_sim::scenario::DEFAULT_JITTER` (1 ms).

use drl_cluster::alloc::AlgorithmKind;
use drl_sim::experiment::Experiment;
use drl_sim::scenario::{MS, Scenario};

fn main() {
    let jitters: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("jitter in µs"))
        .collect();
    let jitters = if jitters.is_empty() {
        vec![50, 250, 500, 1000, 2000, 5000]
    } else {
        jitters
    };
    use AlgorithmKind::*;
    println!(
        "jitter_us alg  jain_mean jain_min  agg_mbps  h100[7.5,8.5) h100[9.5,10.5) h100[11.5,12.5) sd100"
    );
    for j in jitters {
        let mut base = Scenario::paper_baseline(Ctb);
        base.jitter = j * 1_000;
        let exp = Experiment {
            base,
            algorithms: vec![Ctb, Grd, Fps],
            runs: 10,
            timescales: vec![100 * MS],
        };
        let res = exp.run(&mut |_| {}).expect("valid scenario");
        for a in &res.algorithms {
            let s = a.summary(&[100 * MS]);
            let xs: Vec<f64> = a
                .runs
                .iter()
                .flat_map(|r| r.aggregate_series(100 * MS))
                .collect();
            let frac = |lo: f64, hi: f64| {
                xs.iter().filter(|&&x| x >= lo && x < hi).count() as f64 / xs.len() as f64
            };
            let min = s.jain_runs.iter().copied().fold(1.0, f64::min);
            println!(
                "{j:>9} {:<4} {:>9.3} {:>8.3} {:>9.3} {:>13.3} {:>14.3} {:>15.3} {:>5.2}",
                a.algorithm.name(),
                s.jain,
                min,
                s.aggregate_mbps,
                frac(7.5, 8.5),
                frac(9.5, 10.5),
                frac(11.5, 12.5),
                s.timescales[0].stddev_mbps
            );
        }
    }
}
