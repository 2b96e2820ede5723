//! Table 2 (mixed RTTs) with diagnostics at the cause: per limiter, the
//! mean local limit FPS gave it, what its flows offered and what it
//! forwarded, its published weight, how often its demand sat below its
//! local limit (FPS's second regime), and per flow goodput, timeouts and
//! fast recoveries.
//!
//! `cargo run --release -p drl-sim --example table2_probe -- [OPTIONS]`
//!
//! Options (each `--name value`): `--alg` (fps), `--seeds` (10), `--secs`
//! (60), `--depth` bytes (75000), `--interval-ms` (50), `--ewma` (0.1),
//! `--long-ms` (100), `--short-ms` (10), `--flows` (3,7),
//! `--growth-divisor` (1; 2 = an ACK-counting sender behind delayed ACKs),
//! `--min-rto-ms` (200), `--linux-rto 1` (RTO = SRTT + max(4·RTTVAR, min
//! RTO)), `--rwnd` segments (1000), `--jitter-us` (the default jitter),
//! `--flow-ewma` (FPS's per-flow 1-second EWMA; default: `--ewma`),
//! `--sample` (FPS's sample set, 16 flows); `--series 1` prints both limiters' state once a second
//! for the first seed.

use drl_cluster::alloc::AlgorithmKind;
use drl_sim::scenario::{MS, SEC, Scenario};

fn arg<T: std::str::FromStr>(a: &[String], name: &str, default: T) -> T {
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("bad value for {name}"))
        })
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let alg: AlgorithmKind = arg::<String>(&a, "--alg", "fps".into()).parse().unwrap();
    let seeds: u64 = arg(&a, "--seeds", 10);
    let secs: u64 = arg(&a, "--secs", 60);
    let depth: u64 = arg(&a, "--depth", 75_000);
    let interval: u64 = arg(&a, "--interval-ms", 50);
    let ewma: f64 = arg(&a, "--ewma", 0.1);
    let long: u64 = arg(&a, "--long-ms", 100);
    let short: u64 = arg(&a, "--short-ms", 10);
    let flows: String = arg(&a, "--flows", "3,7".to_string());
    let series: u32 = arg(&a, "--series", 0);
    let growth: u32 = arg(&a, "--growth-divisor", 1);
    let min_rto: u64 = arg(&a, "--min-rto-ms", 200);
    let rwnd: u32 = arg(&a, "--rwnd", 1_000);
    let linux_rto: u32 = arg(&a, "--linux-rto", 0);
    let flow_ewma: f64 = arg(&a, "--flow-ewma", -1.0);
    let sample: usize = arg(&a, "--sample", 16);
    let jitter: u64 = arg(&a, "--jitter-us", drl_sim::scenario::DEFAULT_JITTER / 1_000);
    let flows: Vec<u32> = flows.split(',').map(|s| s.parse().unwrap()).collect();

    println!(
        "alg {} depth {depth} B interval {interval} ms ewma {ewma} rtt {long}/{short} ms flows {flows:?}, {seeds} x {secs} s",
        alg.name()
    );
    println!(
        "seed  L  limit_Mbps  offered  fwd  weight  below_limit  flows_Mbps/timeouts  timeouts  fast_rec"
    );
    let mut sums = [[0.0f64; 4]; 2];
    let mut long_flows = Vec::new();
    let mut short_flows = Vec::new();
    for seed in 1..=seeds {
        let mut sc = Scenario::paper_baseline(alg);
        sc.flows_per_limiter = flows.clone();
        sc.limiter_flow_rtts = vec![long * MS, short * MS];
        sc.depth_bytes = depth;
        sc.estimate_interval = interval * MS;
        sc.ewma = ewma;
        sc.duration = secs * SEC;
        sc.seed = seed;
        sc.tcp.growth_divisor = growth;
        sc.tcp.min_rto = min_rto * MS;
        sc.tcp.rwnd = rwnd;
        sc.tcp.linux_rto = linux_rto != 0;
        sc.fps.flow_ewma = (flow_ewma >= 0.0).then_some(flow_ewma);
        sc.fps.sample_capacity = sample;
        sc.jitter = jitter * 1_000;
        let r = drl_sim::engine::run(&sc, &mut |_| {}).unwrap();
        let warm = sc.warmup;
        let bins_from = (warm / sc.bin) as usize;
        let span = (sc.duration - warm) as f64 / 1e9;
        let goodput = r.flow_goodput_mbps();
        for (l, sum) in sums.iter_mut().enumerate() {
            let ticks: Vec<_> = r
                .ticks
                .iter()
                .filter(|t| t.node as usize == l && t.at >= warm)
                .collect();
            let n = ticks.len().max(1) as f64;
            let limit = ticks.iter().filter_map(|t| t.local_limit).sum::<f64>() * 8.0 / 1e6 / n;
            let weight = ticks.iter().map(|t| t.published).sum::<f64>() / n;
            // Second regime: the smoothed demand under the limit in force
            // during the interval (the previous tick's).
            let below = ticks
                .windows(2)
                .filter(|w| w[1].local_rate < w[0].local_limit.unwrap_or(f64::INFINITY))
                .count() as f64
                / (ticks.len().max(2) - 1) as f64;
            let mbps = |v: &[u64]| {
                v[bins_from.min(v.len())..].iter().sum::<u64>() as f64 * 8.0 / 1e6 / span
            };
            let offered = mbps(&r.arrived[l]);
            let fwd = mbps(&r.forwarded[l]);
            let fl: Vec<usize> = (0..r.flows.len())
                .filter(|&i| r.flows[i].limiter == l)
                .collect();
            let rates: Vec<String> = fl
                .iter()
                .map(|&i| format!("{:.2}/{}", goodput[i], r.flows[i].tcp.timeouts))
                .collect();
            let to: u64 = fl.iter().map(|&i| r.flows[i].tcp.timeouts).sum();
            let fr: u64 = fl.iter().map(|&i| r.flows[i].tcp.fast_recoveries).sum();
            for &i in &fl {
                if l == 0 {
                    long_flows.push(goodput[i]);
                } else {
                    short_flows.push(goodput[i]);
                }
            }
            for (k, v) in [limit, offered, fwd, weight].into_iter().enumerate() {
                sum[k] += v / seeds as f64;
            }
            println!(
                "{seed:>4} {:>2} {limit:>10.2} {offered:>8.2} {fwd:>5.2} {weight:>7.2} {below:>12.2}  [{}]  {to} {fr}",
                l + 1,
                rates.join(" ")
            );
        }
        if series > 0 && seed == 1 {
            println!("  t   L1 limit  L1 demand  L1 w  L2 w  L1 fwd(1s)  L2 fwd(1s)");
            let per_s = (SEC / sc.bin) as usize;
            for s in 0..secs as usize {
                let t = r
                    .ticks
                    .iter()
                    .rfind(|t| t.node == 0 && t.at <= (s as u64 + 1) * SEC)
                    .unwrap();
                let t2 = r
                    .ticks
                    .iter()
                    .rfind(|t| t.node == 1 && t.at <= (s as u64 + 1) * SEC)
                    .unwrap();
                let f = |l: usize| {
                    r.forwarded[l][s * per_s..((s + 1) * per_s).min(r.forwarded[l].len())]
                        .iter()
                        .sum::<u64>() as f64
                        * 8.0
                        / 1e6
                };
                println!(
                    "{s:>3} {:>9.2} {:>10.2} {:>5.2} {:>5.2} {:>11.2} {:>11.2}",
                    t.local_limit.unwrap_or(0.0) * 8.0 / 1e6,
                    t.local_rate * 8.0 / 1e6,
                    t.published,
                    t2.published,
                    f(0),
                    f(1)
                );
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "fastest sampled flow (local limit / weight): L1 {:.2} Mbps, L2 {:.2} Mbps",
        sums[0][0] / sums[0][3],
        sums[1][0] / sums[1][3]
    );
    println!(
        "mean: L1 limit {:.2} offered {:.2} fwd {:.2} weight {:.2} | L2 limit {:.2} offered {:.2} fwd {:.2} weight {:.2}",
        sums[0][0],
        sums[0][1],
        sums[0][2],
        sums[0][3],
        sums[1][0],
        sums[1][1],
        sums[1][2],
        sums[1][3]
    );
    println!(
        "per-flow goodput: long {:.2} ± {:.2}, short {:.2} ± {:.2}",
        mean(&long_flows),
        drl_sim::metrics::stddev(&long_flows),
        mean(&short_flows),
        drl_sim::metrics::stddev(&short_flows)
    );
}
