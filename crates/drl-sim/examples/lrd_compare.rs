//! FPS with local random drop (`fps-lrd`, the paper's footnote 3) beside
//! FPS and GRD on the paper's baseline (3 and 7 flows, 10 Mbps, 60 s):
//! fairness (Jain over the 10 flows), mean aggregate, and the standard
//! deviation of the aggregate over 100 ms windows (stability), seeds 1-5.
//!
//! `cargo run --release -p drl-sim --example lrd_compare -- [FLOWS]`
//! (FLOWS: flows per limiter, comma-separated, default 3,7).

use drl_cluster::alloc::AlgorithmKind;
use drl_sim::metrics::stddev;
use drl_sim::scenario::{MS, Scenario};

fn main() {
    let flows: Vec<u32> = std::env::args()
        .nth(1)
        .map_or("3,7".to_string(), |s| s)
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    for alg in [
        AlgorithmKind::Grd,
        AlgorithmKind::Fps,
        AlgorithmKind::FpsLrd,
        AlgorithmKind::Ctb,
    ] {
        let (mut j, mut m, mut sd) = (Vec::new(), Vec::new(), Vec::new());
        for seed in 1..=5 {
            let sc = Scenario {
                seed,
                flows_per_limiter: flows.clone(),
                ..Scenario::paper_baseline(alg)
            };
            let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
            j.push(r.jain());
            m.push(r.aggregate_mbps());
            let per = (100 * MS / sc.bin) as usize;
            let first = (sc.warmup / sc.bin) as usize;
            let nb = r.forwarded[0].len();
            let w: Vec<f64> = (first / per..nb / per)
                .map(|k| {
                    let b: u64 = r
                        .forwarded
                        .iter()
                        .map(|v| v[k * per..(k + 1) * per].iter().sum::<u64>())
                        .sum();
                    b as f64 * 8.0 / 0.1 / 1e6
                })
                .collect();
            sd.push(stddev(&w));
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "{alg:>8}: Jain {:.3} (min {:.3}), aggregate {:.2} Mbps, 100 ms stddev {:.2} Mbps",
            mean(&j),
            j.iter().copied().fold(1.0, f64::min),
            mean(&m),
            mean(&sd)
        );
    }
}
