//! Scale under gossip loss (paper §5.6): many limiters, a few flows each,
//! lossy gossip; prints the aggregate forwarded rate per second.
//!
//! `cargo run --release -p drl-sim --example scale -- LIMITERS ALG AGG LOSS SECS`

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::engine::run;
use drl_sim::scenario::{SEC, Scenario};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(490, |s| s.parse().unwrap());
    let alg: AlgorithmKind = a.get(2).map_or("fps", |s| s.as_str()).parse().unwrap();
    let agg: Aggregation = a
        .get(3)
        .map_or("peer-table", |s| s.as_str())
        .parse()
        .unwrap();
    let loss: f64 = a.get(4).map_or(0.05, |s| s.parse().unwrap());
    let secs: u64 = a.get(5).map_or(30, |s| s.parse().unwrap());
    let sc = Scenario::paper_scaling(n, alg, agg, loss, secs);
    let t = std::time::Instant::now();
    let r = run(&sc, &mut |_| {}).unwrap();
    let bins_per_s = (SEC / sc.bin) as usize;
    let secs_n = r.forwarded[0].len() / bins_per_s;
    let mut line = Vec::new();
    for s in 0..secs_n {
        let bytes: u64 = r
            .forwarded
            .iter()
            .map(|v| v[s * bins_per_s..(s + 1) * bins_per_s].iter().sum::<u64>())
            .sum();
        line.push(format!("{:.1}", bytes as f64 * 8.0 / 1e6));
    }
    println!(
        "{n} limiters {alg} {agg} loss {loss}: Mbps per second [{}] ({:.1} s, {} events)",
        line.join(" "),
        t.elapsed().as_secs_f64(),
        r.events
    );
}
