//! Decisions per second through [`RedisStore`] against a running Redis.
//!
//! `cargo bench -p drl-store --bench redis -- --url redis://127.0.0.1:6379
//! --clients 50 --pipeline 16 --seconds 5 [--algorithm gcra] [--keys 10000]
//! [--time redis|caller]`
//!
//! Like `redis-benchmark -c CLIENTS -P PIPELINE`: CLIENTS connections, each
//! keeping PIPELINE decisions in flight as one pipeline (`decide_many`).
//! Prints one line: `decisions_per_sec=N admitted=N errors=N`.
//! Used by `scripts/bench-redis`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_core::{Algorithm, Quota};
use drl_store::{Check, LimitSpec, RedisConfig, RedisStore, Store, TimeSource};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--url") {
        eprintln!("redis bench: no --url given, nothing to do (see scripts/bench-redis)");
        return;
    }
    let url = arg(&args, "--url", "");
    let clients: usize = arg(&args, "--clients", "50").parse().expect("--clients");
    let pipeline: usize = arg(&args, "--pipeline", "16").parse().expect("--pipeline");
    let seconds: u64 = arg(&args, "--seconds", "5").parse().expect("--seconds");
    let keys: u64 = arg(&args, "--keys", "10000").parse().expect("--keys");
    let algorithm: Algorithm = arg(&args, "--algorithm", "gcra")
        .parse()
        .expect("--algorithm");
    let time = match arg(&args, "--time", "redis").as_str() {
        "caller" => TimeSource::Caller,
        _ => TimeSource::Redis,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = RedisConfig::single(url);
        cfg.time = time;
        let spec = Arc::new(LimitSpec::new(
            "bench",
            algorithm,
            vec![Quota::new(1_000_000, 1_000_000_000).unwrap()],
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let admitted = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for c in 0..clients {
            let store = RedisStore::connect(&cfg).await.expect("connect");
            store.load_script().await.expect("SCRIPT LOAD");
            let (spec, stop, done, admitted, errors) = (
                spec.clone(),
                stop.clone(),
                done.clone(),
                admitted.clone(),
                errors.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let names: Vec<String> = (0..pipeline)
                    .map(|i| format!("key-{}", (c * pipeline + i) as u64 % keys))
                    .collect();
                let start = Instant::now();
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let now = start.elapsed().as_nanos() as u64 + 1;
                    let checks: Vec<Check<'_>> = names
                        .iter()
                        .map(|k| Check {
                            spec: &spec,
                            key: k,
                            cost: 1,
                            now,
                        })
                        .collect();
                    for r in store.decide_many(&checks).await {
                        match r {
                            Ok(d) => {
                                admitted.fetch_add(d.allowed as u64, Ordering::Relaxed);
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    done.fetch_add(pipeline as u64, Ordering::Relaxed);
                    round += 1;
                }
                round
            }));
        }
        // Warm up, then measure.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d0 = done.load(Ordering::Relaxed);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let d1 = done.load(Ordering::Relaxed);
        let el = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        println!(
            "decisions_per_sec={:.0} admitted={} errors={}",
            (d1 - d0) as f64 / el,
            admitted.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
    });
}
