//! The keyed limiter in the service's benchmark shape (docs/performance.md,
//! "drl-core vs governor"): 16 `String` keys taken in turn, one limit far
//! above the load, on one thread and on two (the service's two runtime
//! workers), where a key's shard and entry move between the cores.
//!
//! Each thread keeps its own clock, advanced 1 us per decision, as each
//! worker of the service reads its own; every decision is an admission
//! that writes state. Reported time is wall time per decision (total wall
//! time / decisions made by all threads).

// Wall time is this bench's job (criterion's `iter_custom`), unlike the
// library's, which takes `now` as an argument (clippy.toml).
#![allow(clippy::disallowed_methods)]
#![allow(missing_docs)] // criterion_group! generates an undocumented fn

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, MultiLimiter, Quota};

const KEYS: usize = 16;
const STEP_NS: u64 = 1_000;

fn limiter(algorithm: Algorithm) -> KeyedLimiter<String> {
    // 1e9 per minute: never denies here.
    let q = Quota::new(1_000_000_000, 60_000_000_000).unwrap();
    KeyedLimiter::new(
        MultiLimiter::uniform(algorithm, &[q]),
        KeyedConfig::default(),
    )
}

/// `iters` decisions on each of `threads` threads, keys in turn (each
/// thread starting at another key); wall time per decision.
fn run(keyed: &KeyedLimiter<String>, keys: &[String], threads: usize, iters: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut now = 1_700_000_000_000_000_000u64;
                let mut i = t * 5;
                for _ in 0..iters {
                    i = (i + 1) % KEYS;
                    now += STEP_NS;
                    black_box(keyed.decide(keys[i].as_str(), now, 1).allowed);
                }
            });
        }
    });
    start.elapsed() / threads as u32
}

fn service_keys(c: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k-{i}")).collect();
    let mut g = c.benchmark_group("16 keys");
    for (name, algorithm) in [
        ("fixed window", Algorithm::FixedWindow),
        ("gcra", Algorithm::Gcra),
        ("sliding window", Algorithm::SlidingWindow),
    ] {
        let keyed = limiter(algorithm);
        for threads in [1, 2] {
            g.bench_function(format!("{name}, {threads} thread(s)"), |b| {
                b.iter_custom(|iters| run(&keyed, &keys, threads, iters))
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = service_keys
}
criterion_main!(benches);
