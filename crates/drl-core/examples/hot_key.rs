//! Profiling aid: `N` decisions on one key, by drl or by governor, so that
//! `valgrind --tool=callgrind` can count instructions per decision
//! (repeatable on a noisy machine, unlike wall time).
//!
//! `cargo build --release -p drl-core --example hot_key`, then
//! `valgrind --tool=callgrind target/release/examples/hot_key drl-keyed 1000000`
//! (or `governor-keyed`, `drl-direct`, `governor-direct`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use drl_core::{Algorithm, AtomicLimiter, KeyedConfig, KeyedLimiter, MultiLimiter, Quota};
use governor::clock::FakeRelativeClock;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("drl-keyed");
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let q = Quota::with_burst(1_000_000, 1_000_000_000, 1000).unwrap();
    let gq = governor::Quota::per_second(NonZeroU32::new(1_000_000).unwrap())
        .allow_burst(NonZeroU32::new(1000).unwrap());
    let mut allowed = 0u64;
    match which {
        "drl-keyed" => {
            let l = KeyedLimiter::<u64>::new(
                MultiLimiter::uniform(Algorithm::Gcra, &[q]),
                KeyedConfig::default(),
            );
            for i in 0..n {
                allowed += l.decide(black_box(&7u64), i * 1000, 1).allowed as u64;
            }
        }
        "drl-direct" => {
            let l = AtomicLimiter::new(Algorithm::Gcra, q).unwrap();
            for i in 0..n {
                allowed += l.decide(i * 1000, 1).allowed as u64;
            }
        }
        "governor-keyed" => {
            let clock = FakeRelativeClock::default();
            let l = governor::RateLimiter::dashmap_with_clock(gq, clock.clone());
            for _ in 0..n {
                clock.advance(Duration::from_nanos(1000));
                allowed += l.check_key(black_box(&7u64)).is_ok() as u64;
            }
        }
        "governor-direct" => {
            let clock = FakeRelativeClock::default();
            let l = governor::RateLimiter::direct_with_clock(gq, clock.clone());
            for _ in 0..n {
                clock.advance(Duration::from_nanos(1000));
                allowed += l.check().is_ok() as u64;
            }
        }
        other => panic!("unknown mode {other}"),
    }
    println!("{which}: {allowed} of {n} allowed");
}
