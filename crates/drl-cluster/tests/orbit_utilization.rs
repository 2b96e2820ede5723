//! Utilization of the Orbit ring on a healthy network: with total demand at
//! twice the cap, admitted >= 90% of the cap in every window, with the demand
//! on one node and with the demand spread evenly; and the curve against
//! `rollover_ratio` (printed with `--nocapture`, copied into
//! `docs/benchmarks/orbit.md`).
//!
//! `cargo test -p drl-cluster --test orbit_utilization -- --nocapture`

use drl_cluster::orbit::OrbitConfig;
use drl_cluster::orbit::sim::{Faults, Sim, SimConfig};

const MS: u64 = 1_000_000;
const CAP: u64 = 3000;
const WINDOWS: u64 = 4;

/// 5 nodes, cap 3000 per 10 s, epoch 100 ms (20 laps per window), 1 ms
/// links; returns the admitted fraction of the cap for windows 1.. (window
/// 0 is the boot window: every node sits it out by the restart rule).
fn utilization(rollover: f64, weights: Vec<u32>) -> Vec<f64> {
    let orbit = OrbitConfig::new(CAP, 10_000 * MS, 100 * MS).with_rollover_ratio(rollover);
    let cfg = SimConfig {
        orbit,
        nodes: weights.len(),
        keys: 1,
        duration: WINDOWS * 10_000 * MS - 1,
        weights,
        demand_per_window: 2 * CAP,
        cost: (1, 3),
        tick: 50 * MS,
        faults: Faults::none(MS),
    };
    let report = Sim::new(cfg, 7)
        .expect("valid config")
        .run()
        .expect("invariant");
    (1..WINDOWS)
        .map(|w| report.admitted.get(&(0, w)).copied().unwrap_or(0) as f64 / CAP as f64)
        .collect()
}

#[test]
fn demand_on_one_node_reaches_90_percent() {
    let u = utilization(0.1, vec![0, 0, 1, 0, 0]);
    for (w, f) in u.iter().enumerate() {
        assert!(*f >= 0.90 && *f <= 1.0, "window {}: {f:.3} of cap", w + 1);
    }
}

#[test]
fn demand_spread_evenly_reaches_90_percent() {
    let u = utilization(0.1, vec![1; 5]);
    for (w, f) in u.iter().enumerate() {
        assert!(*f >= 0.90 && *f <= 1.0, "window {}: {f:.3} of cap", w + 1);
    }
}

#[test]
fn curve_against_rollover_ratio() {
    println!("| rollover_ratio | one node: min / mean of cap | spread: min / mean of cap |");
    println!("|---|---|---|");
    for r in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9] {
        let one = utilization(r, vec![0, 0, 1, 0, 0]);
        let all = utilization(r, vec![1; 5]);
        let stats = |u: &[f64]| {
            let min = u.iter().copied().fold(f64::INFINITY, f64::min);
            let mean = u.iter().sum::<f64>() / u.len() as f64;
            (min, mean)
        };
        let (a, b) = stats(&one);
        let (c, d) = stats(&all);
        println!("| {r:.2} | {a:.3} / {b:.3} | {c:.3} / {d:.3} |");
        assert!(a <= 1.0 && c <= 1.0, "over the cap");
        assert!(b > 0.0 && d > 0.0, "nothing admitted");
    }
}
