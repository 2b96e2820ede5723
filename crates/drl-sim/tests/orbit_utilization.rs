//! Utilization of the Orbit ring on a healthy network: with total demand at
//! twice the cap, admitted >= 90% of the cap in every window, with the demand
//! on one node and with the demand spread evenly; and the curve against
//! `rollover_ratio` (printed with `--nocapture`; summarized in
//! `docs/performance.md`, "Orbit").
//!
//! `cargo test -p drl-sim --test orbit_utilization -- --nocapture`

use drl_cluster::orbit::OrbitConfig;
use drl_sim::faults::orbit::{Faults, Sim, SimConfig};

const MS: u64 = 1_000_000;
const CAP: u64 = 3000;
const WINDOWS: u64 = 4;

/// Admitted fraction of the cap in each window 1.. (window 0 is the boot
/// window: every node sits it out by the restart rule), and the fairness of
/// each window: smallest over largest admitted among the nodes with demand.
struct Run {
    util: Vec<f64>,
    fairness: Vec<f64>,
}

/// 5 nodes, cap 3000 per 10 s, epoch 100 ms (20 laps per window), 1 ms
/// links, demand twice the cap.
fn utilization(rollover: f64, weights: Vec<u32>) -> Vec<f64> {
    run(rollover, weights, 20).util
}

/// As [`utilization`] with `laps` laps of the ring per 10 s window.
fn run(rollover: f64, weights: Vec<u32>, laps: u64) -> Run {
    let epoch = 10_000 * MS / (weights.len() as u64 * laps);
    let orbit = OrbitConfig::new(CAP, 10_000 * MS, epoch).with_rollover_ratio(rollover);
    let active: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0).collect();
    let cfg = SimConfig {
        orbit,
        nodes: weights.len(),
        keys: 1,
        duration: WINDOWS * 10_000 * MS - 1,
        weights,
        demand_per_window: 2 * CAP,
        cost: (1, 3),
        tick: (epoch / 2).max(1),
        faults: Faults::none(MS),
    };
    let report = Sim::new(cfg, 7)
        .expect("valid config")
        .run()
        .expect("invariant");
    let util = (1..WINDOWS)
        .map(|w| report.admitted.get(&(0, w)).copied().unwrap_or(0) as f64 / CAP as f64)
        .collect();
    let fairness = (1..WINDOWS)
        .map(|w| {
            let got: Vec<u64> = active
                .iter()
                .map(|&i| report.admitted_by_node.get(&(i, w)).copied().unwrap_or(0))
                .collect();
            let max = got.iter().copied().max().unwrap_or(0).max(1);
            got.iter().copied().min().unwrap_or(0) as f64 / max as f64
        })
        .collect();
    Run { util, fairness }
}

fn min(u: &[f64]) -> f64 {
    u.iter().copied().fold(f64::INFINITY, f64::min)
}

fn mean(u: &[f64]) -> f64 {
    u.iter().sum::<f64>() / u.len() as f64
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
    let mut out = String::new();
    out.push_str("| rollover_ratio | laps/window | one node: min / mean util | spread: min / mean util | spread: fairness (min/max node) |\n");
    out.push_str("|---|---|---|---|---|\n");
    for r in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9] {
        for laps in [2u64, 20] {
            let one = run(r, vec![0, 0, 1, 0, 0], laps);
            let all = run(r, vec![1; 5], laps);
            out.push_str(&format!(
                "| {r:.2} | {laps} | {:.3} / {:.3} | {:.3} / {:.3} | {:.2} |\n",
                min(&one.util),
                mean(&one.util),
                min(&all.util),
                mean(&all.util),
                mean(&all.fairness)
            ));
            for u in one.util.iter().chain(&all.util) {
                assert!(*u <= 1.0, "over the cap: {u}");
            }
            assert!(
                mean(&one.util) > 0.0 && mean(&all.util) > 0.0,
                "nothing admitted"
            );
        }
    }
    println!("{out}");
}

#[test]
fn curve_against_laps_per_window() {
    let mut out = String::new();
    out.push_str(
        "| laps per window (epoch) | one node: min / mean util | spread: min / mean util |\n",
    );
    out.push_str("|---|---|---|\n");
    for laps in [1u64, 2, 5, 10, 20, 50] {
        let one = run(0.1, vec![0, 0, 1, 0, 0], laps).util;
        let all = run(0.1, vec![1; 5], laps).util;
        out.push_str(&format!(
            "| {laps} ({} ms) | {:.3} / {:.3} | {:.3} / {:.3} |\n",
            10_000 / (5 * laps),
            min(&one),
            mean(&one),
            min(&all),
            mean(&all)
        ));
        for u in one.iter().chain(&all) {
            assert!(*u <= 1.0, "over the cap: {u}");
        }
    }
    println!("{out}");
}

/// Utilization when table messages are lost (each forward independently),
/// default configuration, demand spread evenly. A lost table takes its free
/// capacity with it for the rest of the window (safe, but costly): the
/// transport should retransmit the same frame to the same node.
#[test]
fn curve_against_message_loss() {
    let mut out = String::new();
    out.push_str("| loss per message | spread: min / mean util | one node: min / mean util |\n");
    out.push_str("|---|---|---|\n");
    for loss in [0.0, 0.001, 0.01, 0.05, 0.2] {
        let mut row = Vec::new();
        for weights in [vec![1u32; 5], vec![0, 0, 1, 0, 0]] {
            let mut faults = Faults::none(MS);
            faults.loss = loss;
            let cfg = SimConfig {
                orbit: OrbitConfig::new(CAP, 10_000 * MS, 100 * MS),
                nodes: 5,
                keys: 1,
                duration: 6 * 10_000 * MS - 1,
                weights,
                demand_per_window: 2 * CAP,
                cost: (1, 3),
                tick: 50 * MS,
                faults,
            };
            let report = Sim::new(cfg, 3).expect("valid").run().expect("invariant");
            let u: Vec<f64> = (1..6)
                .map(|w| report.admitted.get(&(0, w)).copied().unwrap_or(0) as f64 / CAP as f64)
                .collect();
            assert!(u.iter().all(|x| *x <= 1.0), "over the cap");
            row.push(format!("{:.3} / {:.3}", min(&u), mean(&u)));
        }
        out.push_str(&format!("| {loss} | {} | {} |\n", row[0], row[1]));
    }
    println!("{out}");
}
