//! One scale-matrix cell with diagnostics every 250 ms: the true sum of
//! published weights, how the limiters' remote sums compare with the truth,
//! and the sum of local limits.
//!
//! `cargo run --release -p drl-sim --example scale_probe -- N ALG AGG LOSS START [SECS]`

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::scenario::Scenario;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(1000, |s| s.parse().unwrap());
    let alg: AlgorithmKind = a.get(2).map_or("fps", |s| s.as_str()).parse().unwrap();
    let agg: Aggregation = a
        .get(3)
        .map_or("flow-updating", |s| s.as_str())
        .parse()
        .unwrap();
    let loss: f64 = a.get(4).map_or(0.0, |s| s.parse().unwrap());
    let start = a.get(5).map_or("together", |s| s.as_str());
    let secs: u64 = a.get(6).map_or(20, |s| s.parse().unwrap());
    let sc = Scenario::scale_matrix_cell(n, alg, agg, loss, secs, 1, start == "staggered");
    let r = drl_sim::engine::run(&sc, &mut |_| {}).unwrap();
    let mut by_at: std::collections::BTreeMap<u64, Vec<_>> = Default::default();
    for s in &r.ticks {
        by_at.entry(s.at).or_default().push(*s);
    }
    for (at, v) in by_at.iter().step_by(5) {
        let total: f64 = v.iter().map(|s| s.published).sum();
        let active: Vec<_> = v.iter().filter(|s| s.local_rate > 0.0).collect();
        let truth = |s: &drl_sim::engine::TickSample| total - s.published;
        let low = active.iter().filter(|s| s.remote < 0.5 * truth(s)).count();
        let high = active.iter().filter(|s| s.remote > 2.0 * truth(s)).count();
        let zero = active.iter().filter(|s| s.remote == 0.0).count();
        let ll: f64 = v.iter().filter_map(|s| s.local_limit).sum::<f64>() * 8.0 / 1e6;
        let big = v
            .iter()
            .filter_map(|s| s.local_limit)
            .filter(|&l| l * 8.0 / 1e6 > 5.0)
            .count();
        let maxp = v.iter().map(|s| s.published).fold(0.0, f64::max);
        let demand: f64 = v.iter().map(|s| s.local_rate).sum::<f64>() * 8.0 / 1e6;
        println!(
            "t={:5.2} active {:4} low {:4} high {:4} zero {:4} sumLL {:8.1} >5Mbps {:3} demand {:7.1} total {:.3e} max {:.3e}",
            *at as f64 / 1e9,
            active.len(),
            low,
            high,
            zero,
            ll,
            big,
            demand,
            total,
            maxp
        );
    }
}
