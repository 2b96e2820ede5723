//! Paper §5.6: 5,000 flows split 1,500 / 3,500 over two limiters. FPS
//! must give the 1,500 flows about 30 % of the limit, as CTB (one bucket
//! for all) does, on every seed. Issue 15, defect 3: both FPS weights hit
//! the former clamp of 1,000 and the split was 47:53. Later, with the
//! paper's packet sampling evicting the slowest flow, the sample set was
//! replaced every interval, the fastest sampled rate read 0 and the split
//! depended on the seed (0.26-0.48 on seeds 1-8): FPS's sample is uniform
//! over flows now (`drl_cluster::alloc::fps`).
//!
//! More seeds, with their weights: `cargo run --release -p drl-sim
//! --example fps_many_seeds -- peer-table 40`.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::fps::FpsConfig;
use drl_sim::scenario::{SEC, Scenario};

/// Seeds the test runs: each run costs about 0.4 s in a debug build
/// (0.1 s in release). On Flow Updating (the default aggregation), over
/// seeds 1-40 the share is 0.235-0.374 (mean 0.309, standard deviation
/// 0.029; the peer table: 0.243-0.336, mean 0.285, 0.021); seeds 1-8 give
/// 0.261-0.374 (EXPERIMENTS.md, "FPS with many flows").
const SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

/// The paper's §5.6 flow-scaling point: 2 limiters, 1,500 and 3,500 flows,
/// 50 Mbps, 30 s measured from 10 s.
fn many(algorithm: AlgorithmKind, seed: u64) -> drl_sim::RunResult {
    let sc = Scenario {
        flows_per_limiter: vec![1_500, 3_500],
        limit_bps: 50_000_000,
        duration: 30 * SEC,
        warmup: 10 * SEC,
        seed,
        ..Scenario::paper_baseline(algorithm)
    };
    drl_sim::run(&sc, &mut |_| {}).unwrap()
}

fn share_of_first(r: &drl_sim::RunResult) -> f64 {
    let l = r.limiter_mbps();
    l[0] / (l[0] + l[1])
}

#[test]
fn fps_splits_five_thousand_flows_three_to_seven_on_every_seed() {
    let ctb = share_of_first(&many(AlgorithmKind::Ctb, SEEDS[0]));
    assert!(
        (ctb - 0.30).abs() <= 0.03,
        "CTB gives the 1,500 flows {ctb:.3}"
    );
    let mut bad = Vec::new();
    let mut shares = Vec::new();
    for seed in SEEDS {
        let fps = many(AlgorithmKind::Fps, seed);
        let s = share_of_first(&fps);
        let agg = fps.aggregate_mbps();
        // The published weights come from measured flows: not the safety
        // net the second regime ran to when no sampled flow was measured.
        let last: Vec<f64> = fps
            .ticks
            .iter()
            .rev()
            .take(2)
            .map(|t| t.published)
            .collect();
        let net = FpsConfig::default().max_weight;
        eprintln!("seed {seed}: share {s:.3}, aggregate {agg:.2} Mbps, weights {last:.1?}");
        shares.push(s);
        // Within 8 points of CTB's 30 % (1:1 would be 50 %), the limit
        // delivered.
        if (s - 0.30).abs() > 0.08
            || (agg - 50.0).abs() > 2.5
            || last.iter().any(|&w| !(1.0..net / 100.0).contains(&w))
        {
            bad.push(format!(
                "seed {seed}: share {s:.3}, {agg:.2} Mbps, weights {last:.1?}"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?} (CTB {ctb:.3})");
    // And on average within 3 points of it.
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    assert!(
        (mean - 0.30).abs() <= 0.03,
        "mean share {mean:.3} {shares:.3?}"
    );
}
