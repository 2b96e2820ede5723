//! One point of Figure 8 with diagnostics: per-second aggregate, and at
//! chosen ticks how many limiters saw a remote sum far under the truth.
//!
//! `cargo run --release -p drl-sim --example fig8_probe -- LIMITERS ALG AGG LOSS SECS BRANCHING`

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::figures::fig8::Fig8;

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
    let br: u32 = a.get(6).map_or(3, |s| s.parse().unwrap());
    let mut f = Fig8::paper(loss, secs, secs / 3);
    f.base.aggregation = agg;
    let sc = f.scenario(alg, br, n);
    let t = std::time::Instant::now();
    let r = drl_sim::engine::run(&sc, &mut |_| {}).unwrap();
    let wall = t.elapsed().as_secs_f64();
    let (p, _) = f.point(&r);
    let per_s = drl_sim::figures::fig8::aggregate_per_second(&r);
    println!(
        "{n} limiters {alg} {agg} loss {loss} br {br}: {wall:.1} s wall, {} events",
        r.events
    );
    println!("per second: {:.1?}", per_s);
    println!("{p:?}");
    // Remote sums seen at each whole second: the truth is the sum of the
    // others' published values at the same tick.
    let mut by_at: std::collections::BTreeMap<u64, Vec<_>> = Default::default();
    for s in &r.ticks {
        by_at.entry(s.at).or_default().push(*s);
    }
    for (at, v) in by_at.iter().step_by(20) {
        let total: f64 = v.iter().map(|s| s.published).sum();
        let active: Vec<_> = v.iter().filter(|s| s.local_rate > 0.0).collect();
        let low = active
            .iter()
            .filter(|s| s.remote < 0.5 * (total - s.published))
            .count();
        let zero = active.iter().filter(|s| s.remote == 0.0).count();
        let mean_ll: f64 = active.iter().filter_map(|s| s.local_limit).sum::<f64>() * 8.0 / 1e6;
        println!(
            "t={:.1}s active {} remote<half {} remote=0 {} sum local limits {:.1} Mbps total published {:.3e}",
            *at as f64 / 1e9,
            active.len(),
            low,
            zero,
            mean_ll,
            total
        );
    }
}
