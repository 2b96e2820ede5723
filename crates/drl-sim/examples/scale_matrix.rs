//! The scale matrix of EXPERIMENTS.md ("Scale matrix"): every cell of
//! limiters x aggregation x algorithm x gossip loss x start, one Markdown
//! row each.
//!
//! ```text
//! cargo run --release -p drl-sim --example scale_matrix -- \
//!     [--n 3,12,50,100,250,490,1000] [--agg peer-table,push-sum,flow-updating] \
//!     [--alg fps,grd] [--loss 0,0.05] [--start together,staggered] [--secs 40] [--seed 1] \
//!     [--series]   (each run's Mbps per second on stderr)
//! ```
//!
//! The scenario is `drl sim baseline`'s at scale: a 50 Mbps limit, 0-5
//! long-lived flows per limiter (drawn with seed 7), branching 3, the
//! service's settings otherwise. `together`: every flow starts within
//! 500 ms; `staggered`: one flow every 100 ms in a random order. Per cell:
//! the mean from 10 s, the 1 s minimum and maximum from 10 s, the share of
//! those seconds within ±10 % of the limit, the highest second before
//! 10 s, Jain's index over the flows running from 10 s, control bytes per
//! limiter per second, and the wall time of the run.

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::engine::run;
use drl_sim::metrics::jain;
use drl_sim::scenario::{SEC, Scenario};

fn list<T: std::str::FromStr>(args: &[String], flag: &str, default: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    let v = args
        .iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |s| s.as_str());
    v.split(',').map(|x| x.trim().parse().unwrap()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ns: Vec<usize> = list(&args, "--n", "3,12,50,100,250,490,1000");
    let aggs: Vec<Aggregation> = list(&args, "--agg", "peer-table,push-sum,flow-updating");
    let algs: Vec<AlgorithmKind> = list(&args, "--alg", "fps,grd");
    let losses: Vec<f64> = list(&args, "--loss", "0,0.05");
    let starts: Vec<String> = list(&args, "--start", "together,staggered");
    let secs: u64 = list(&args, "--secs", "40")[0];
    let seed: u64 = list(&args, "--seed", "1")[0];
    println!(
        "| limiters | aggregation | alg | loss | start | mean Mbps | 1 s min-max | within ±10 % | peak < 10 s | Jain | control B/node/s | wall s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &ns {
        for &agg in &aggs {
            for &alg in &algs {
                for &loss in &losses {
                    for start in &starts {
                        let sc = Scenario::scale_matrix_cell(
                            n,
                            alg,
                            agg,
                            loss,
                            secs,
                            seed,
                            start == "staggered",
                        );
                        row(&sc, n, start);
                    }
                }
            }
        }
    }
}

fn row(sc: &Scenario, n: usize, start: &str) {
    let t = std::time::Instant::now();
    let r = run(sc, &mut |_| {}).unwrap();
    let wall = t.elapsed().as_secs_f64();
    let bins = (SEC / sc.bin) as usize;
    let total_secs = r.forwarded[0].len() / bins;
    let per_s: Vec<f64> = (0..total_secs)
        .map(|s| {
            let b: u64 = r
                .forwarded
                .iter()
                .map(|v| v[s * bins..(s + 1) * bins].iter().sum::<u64>())
                .sum();
            b as f64 * 8.0 / 1e6
        })
        .collect();
    let limit = sc.limit_bps as f64 / 1e6;
    let from = (sc.warmup / SEC) as usize;
    let tail = &per_s[from.min(per_s.len())..];
    let mean = tail.iter().sum::<f64>() / tail.len().max(1) as f64;
    let min = tail.iter().copied().fold(f64::INFINITY, f64::min);
    let max = tail.iter().copied().fold(0.0, f64::max);
    let within = tail
        .iter()
        .filter(|&&x| (x - limit).abs() <= 0.1 * limit)
        .count() as f64
        / tail.len().max(1) as f64;
    let peak = per_s[..from.min(per_s.len())]
        .iter()
        .copied()
        .fold(0.0, f64::max);
    let window = (sc.duration - sc.warmup) as f64 / SEC as f64;
    let rates: Vec<f64> = r
        .flows
        .iter()
        .filter(|f| f.start <= sc.warmup && f.stop.is_none_or(|t| t >= sc.duration))
        .map(|f| f.goodput_bytes as f64 / window)
        .collect();
    if std::env::args().any(|a| a == "--series") {
        let line: Vec<String> = per_s.iter().map(|x| format!("{x:.0}")).collect();
        eprintln!(
            "{n} {} {}: {}",
            sc.aggregation,
            sc.algorithm,
            line.join(" ")
        );
        let tenth = (bins / 10).max(1);
        let first: Vec<String> = (0..20)
            .map(|k| {
                let b: u64 = r
                    .forwarded
                    .iter()
                    .map(|v| v[k * tenth..(k + 1) * tenth].iter().sum::<u64>())
                    .sum();
                format!("{:.0}", b as f64 * 8.0 / 1e5)
            })
            .collect();
        eprintln!("  first 2 s, Mbps per 100 ms: {}", first.join(" "));
    }
    let fair = if rates.is_empty() {
        f64::NAN
    } else {
        jain(&rates)
    };
    let control = r.gossip_bytes as f64 / n as f64 / (sc.duration as f64 / SEC as f64);
    println!(
        "| {n} | {} | {} | {:.0} % | {start} | {mean:.1} | {min:.1}-{max:.1} | {:.0} % | {peak:.1} | {fair:.3} | {control:.0} | {wall:.1} |",
        sc.aggregation,
        sc.algorithm,
        sc.gossip_loss * 100.0,
        within * 100.0
    );
}
