//! The gossip fault harness at scale: seeded scenarios of N nodes running
//! one aggregation, with kills, restarts, partitions, wrong suspicions and
//! 5 % gossip loss, every bound checked on every 1 s window
//! (`drl_sim::faults::gossip::scaled_scenario`).
//!
//! `cargo run --release -p drl-sim --example faults_scale -- [NODES] [AGGREGATION] [SEEDS] [FIRST]`
//! (defaults: 50 flow-updating 100 0).

use drl_cluster::cloud_control::Aggregation;
use drl_sim::faults::gossip::{run, scaled_scenario};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let nodes: u32 = a.get(1).map_or(50, |s| s.parse().unwrap());
    let agg: Aggregation = a
        .get(2)
        .map_or("flow-updating", |s| s.as_str())
        .parse()
        .unwrap();
    let seeds: u64 = a.get(3).map_or(100, |s| s.parse().unwrap());
    let first: u64 = a.get(4).map_or(0, |s| s.parse().unwrap());
    let t = std::time::Instant::now();
    let mut failed = 0;
    for seed in first..first + seeds {
        let sc = scaled_scenario(seed, nodes, agg);
        if let Err(v) = run(&sc, seed) {
            failed += 1;
            println!("seed {seed} ({}): {v}", sc.settings.algorithm);
        }
    }
    println!(
        "{nodes} nodes {agg}: {} of {seeds} seeds pass ({:.1} s)",
        seeds - failed,
        t.elapsed().as_secs_f64()
    );
}
