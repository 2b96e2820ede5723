//! A Figure 8 sweep without the CLI (for measurements while `drl` is not
//! built): `fig8_sweep LOSS SECS WARMUP AGG BRANCHINGS LIMITERS ALGS OUT`,
//! lists comma-separated. Prints each point and its wall time and peak RSS.
//! `DEPTH=BYTES` sets every limiter's bucket depth (default: the paper's
//! 75 KB).

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::figures::fig8::Fig8;

fn list<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    s.split(',').map(|x| x.trim().parse().unwrap()).collect()
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let loss: f64 = a[1].parse().unwrap();
    let secs: u64 = a[2].parse().unwrap();
    let warmup: u64 = a[3].parse().unwrap();
    let agg: Aggregation = a[4].parse().unwrap();
    let mut f = Fig8::paper(loss, secs, warmup);
    f.base.aggregation = agg;
    if let Ok(d) = std::env::var("DEPTH") {
        f.base.depth_bytes = d.parse().expect("DEPTH: bytes");
    }
    f.branchings = list(&a[5]);
    f.limiters = list(&a[6]);
    f.algorithms = list::<AlgorithmKind>(&a[7]);
    let t = std::time::Instant::now();
    let res = f.run(&mut |_| {}).unwrap();
    for p in &res.points {
        println!("{p:?}");
    }
    res.write_all(std::path::Path::new(&a[8])).unwrap();
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("")
        .to_string();
    println!("wall {:.1} s, {rss}", t.elapsed().as_secs_f64());
}
