//! The gossip fault harness's random seeds (`tests/gossip_faults.rs`),
//! every one run to its verdict: prints each failing seed and, per
//! aggregation and algorithm, the seeds run and failed.
//!
//! `cargo run --release -p drl-sim --example faults_count -- FIRST_SEED SEEDS`

use std::collections::BTreeMap;

use drl_sim::faults::gossip::{random_scenario, run};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| a.get(i).map_or(default, |s| s.parse().unwrap());
    let (first, seeds) = (arg(1, 0), arg(2, 2000));
    let mut tally: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for seed in first..first + seeds {
        let sc = random_scenario(seed);
        let key = format!("{} {}", sc.settings.aggregation, sc.settings.algorithm);
        let e = tally.entry(key.clone()).or_default();
        e.0 += 1;
        if let Err(v) = run(&sc, seed) {
            e.1 += 1;
            println!(
                "seed {seed} ({key}, {} nodes, loss {}): {v}",
                sc.nodes, sc.loss
            );
        }
    }
    for (key, (ran, failed)) in tally {
        println!("{key}: {failed} of {ran} seeds failed");
    }
}
