//! A loopback cluster of real `drl serve` processes sharing one
//! `scope: gossip` limit: N processes (UDP on 127.0.1.1..N, port 17950,
//! joined through three seeds), each offered 0-5 flows of 40 checks/s
//! drawn at random over `POST /v1/check`, together about twice the limit,
//! all starting at once. Every 100 ms each node gets one batch; admitted
//! checks are counted per second of this process's clock.
//!
//! ```sh
//! cargo build --release -p drl --bin drl --example gossip_processes
//! target/release/examples/gossip_processes target/release/drl 32 fps flow-updating 40
//! #                                        DRL                NODES ALG AGGREGATION SECONDS
//! ```
//!
//! Prints each second's admitted total, then the summary from 10 s on
//! (mean, 1 s min and max, share of seconds within +/-10% of the limit).
//! Exit status 1 when the mean is off by more than 5% or under 95% of the
//! seconds hold +/-10%. Measured: EXPERIMENTS.md, "Scale on real UDP".

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_test_kit::drl::{Drl, http_request};
use rand::{Rng, SeedableRng};

/// Checks per second one flow offers.
const FLOW_RATE: u64 = 40;
/// Batches per second per node.
const BATCHES: u64 = 10;
/// Seconds excluded from the summary (membership forms, estimates settle).
const WARM_S: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let bin = PathBuf::from(arg(0, "target/release/drl"));
    let n: usize = arg(1, "32").parse().expect("NODES");
    let algorithm = arg(2, "fps");
    let aggregation = arg(3, "flow-updating");
    let seconds: usize = arg(4, "40").parse().expect("SECONDS");
    assert!(
        seconds > WARM_S,
        "SECONDS must exceed the {WARM_S} s warm-up"
    );
    assert!((3..=250).contains(&n), "NODES: 3 to 250");

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(n as u64);
    let flows: Vec<u64> = (0..n).map(|_| rng.random_range(0..=5)).collect();
    let total: u64 = flows.iter().sum::<u64>() * FLOW_RATE;
    let limit = (total / 2).max(n as u64);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "gossip processes example key, 32 bytes\n").unwrap();
    let udp = |i: usize| format!("127.0.1.{}:17950", i + 1);
    let seeds = (0..3)
        .map(|i| format!("\"{}\"", udp(i)))
        .collect::<Vec<_>>()
        .join(", ");
    let t0 = Instant::now();
    let nodes: Vec<Drl> = (0..n)
        .map(|i| {
            Drl::start(
                &bin,
                &format!(
                    "limits:\n  - name: global\n    quota: {limit}/s\n    scope: gossip\n\
                     cluster:\n  node_id: {id}\n  bind: \"{bind}\"\n  seeds: [{seeds}]\n  nodes: {n}\n\
                     \x20 key_file: \"{key}\"\n  algorithm: {algorithm}\n  aggregation: {aggregation}\n\
                     \x20 flow_separator: \"|\"\n",
                    id = i + 1,
                    bind = udp(i),
                    key = key.display(),
                ),
            )
        })
        .collect();
    eprintln!(
        "{n} drl serve processes started in {:.1} s; {} flows of {FLOW_RATE}/s, limit {limit}/s",
        t0.elapsed().as_secs_f64(),
        flows.iter().sum::<u64>()
    );
    let origin = Instant::now();
    let admitted: Arc<Vec<AtomicU64>> =
        Arc::new((0..seconds + 2).map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = nodes
        .iter()
        .zip(&flows)
        .enumerate()
        .filter(|(_, (_, f))| **f > 0)
        .map(|(i, (d, &f))| {
            let url = d.url("/v1/check");
            let (admitted, errors, stop) = (admitted.clone(), errors.clone(), stop.clone());
            std::thread::spawn(move || {
                let per_batch = (f * FLOW_RATE / BATCHES) as usize;
                let mut b = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let due = origin + Duration::from_millis(b * 1_000 / BATCHES);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let items: Vec<String> = (0..per_batch)
                        .map(|k| {
                            format!(r#"{{"limit":"global","key":"all|n{i}-f{}"}}"#, k as u64 % f)
                        })
                        .collect();
                    let body = format!(r#"{{"requests":[{}]}}"#, items.join(","));
                    match http_request(
                        "POST",
                        &url,
                        &[("content-type", "application/json")],
                        body.as_bytes(),
                    ) {
                        Some((200, _, text)) => {
                            let ok = text.matches("\"allowed\":true").count() as u64;
                            let s = origin.elapsed().as_secs() as usize;
                            if let Some(c) = admitted.get(s) {
                                c.fetch_add(ok, Ordering::Relaxed);
                            }
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    b += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds as u64 + 1));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let per_s: Vec<u64> = (0..seconds)
        .map(|s| admitted[s].load(Ordering::Relaxed))
        .collect();
    for (s, a) in per_s.iter().enumerate() {
        eprintln!("t={s:>3} s admitted {a}");
    }
    let held = &per_s[WARM_S..];
    let mean = held.iter().sum::<u64>() as f64 / held.len() as f64;
    let (min, max) = (*held.iter().min().unwrap(), *held.iter().max().unwrap());
    let within = held
        .iter()
        .filter(|&&a| (a as f64 - limit as f64).abs() <= 0.10 * limit as f64)
        .count() as f64
        / held.len() as f64;
    let ok = (mean - limit as f64).abs() <= 0.05 * limit as f64 && within >= 0.95;
    println!(
        "processes={n} alg={algorithm} agg={aggregation} limit={limit} mean={mean:.1} ({:+.1} %) \
         min={min} max={max} within10={:.0} % errors={} verdict={}",
        (mean / limit as f64 - 1.0) * 100.0,
        within * 100.0,
        errors.load(Ordering::Relaxed),
        if ok { "held" } else { "NOT HELD" }
    );
    drop(nodes);
    std::process::exit(if ok { 0 } else { 1 });
}
