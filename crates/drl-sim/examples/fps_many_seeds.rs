//! `tests/fps_many_flows.rs` over several seeds: FPS at 2 limiters with
//! 1,500 and 3,500 long-lived flows (50 Mbps, 30 s measured from 10 s);
//! prints the 1,500 flows' share of the aggregate and the last published
//! weights per seed.
//!
//! `cargo run --release -p drl-sim --example fps_many_seeds -- [AGGREGATION] [SEEDS]`
//! (defaults: peer-table 8; seeds 1..=SEEDS).

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
    for seed in 1..=seeds {
        let sc = Scenario {
            flows_per_limiter: vec![1_500, 3_500],
            limit_bps: 50_000_000,
            duration: 30 * SEC,
            warmup: 10 * SEC,
            seed,
            aggregation: agg,
            ..Scenario::paper_baseline(AlgorithmKind::Fps)
        };
        let r = drl_sim::run(&sc, &mut |_| {}).unwrap();
        let l = r.limiter_mbps();
        let mut last: Vec<f64> = r.ticks.iter().rev().take(2).map(|t| t.published).collect();
        last.reverse();
        println!(
            "{agg} seed {seed}: share {:.3}, aggregate {:.2} Mbps, last weights {:.1?}",
            l[0] / (l[0] + l[1]),
            r.aggregate_mbps(),
            last
        );
    }
}
