//! `tests/fps_many_flows.rs` over more seeds: FPS at 2 limiters with
//! 1,500 and 3,500 long-lived flows (50 Mbps, 30 s measured from 10 s);
//! prints the 1,500 flows' share of the aggregate and the last published
//! weights per seed, then the range of the shares.
//!
//! `cargo run --release -p drl-sim --example fps_many_seeds -- [AGGREGATION] [SEEDS] [ALGORITHM]`
//! (defaults: peer-table 8 fps; seeds 1..=SEEDS).

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::scenario::{SEC, Scenario};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let agg: Aggregation = a
        .get(1)
        .map_or("peer-table", |s| s.as_str())
        .parse()
        .unwrap();
    let seeds: u64 = a.get(2).map_or(8, |s| s.parse().unwrap());
    let algorithm: AlgorithmKind = a.get(3).map_or("fps", |s| s.as_str()).parse().unwrap();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for seed in 1..=seeds {
        let sc = Scenario {
            flows_per_limiter: vec![1_500, 3_500],
            limit_bps: 50_000_000,
            duration: 30 * SEC,
            warmup: 10 * SEC,
            seed,
            aggregation: agg,
            ..Scenario::paper_baseline(algorithm)
        };
        let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
        let l = r.limiter_mbps();
        let share = l[0] / (l[0] + l[1]);
        lo = lo.min(share);
        hi = hi.max(share);
        let mut last: Vec<f64> = r.ticks.iter().rev().take(2).map(|t| t.published).collect();
        last.reverse();
        println!(
            "{algorithm} {agg} seed {seed}: share {share:.3}, aggregate {:.2} Mbps, last weights {:.1?}",
            r.aggregate_mbps(),
            last
        );
    }
    println!("{algorithm} {agg} seeds 1-{seeds}: share {lo:.3}-{hi:.3}");
}
