//! A plain loop over one unkeyed limiter, drl's `AtomicLimiter` or
//! governor's direct limiter, for measurements criterion's harness blurs:
//! time per decision, or (under callgrind) instructions per decision.
//!
//! ```sh
//! cargo run --release -p drl-core --example direct_loop -- drl 50000000
//! cargo run --release -p drl-core --example direct_loop -- governor 50000000
//! valgrind --tool=callgrind target/release/examples/direct_loop drl 1000000
//! ```
//!
//! Same setup as the `limiter` bench: quota 1,000,000/s with burst 1000,
//! time advanced 1 us per decision through an atomic counter (governor's
//! `FakeRelativeClock`), so every decision is an admission that writes.

// This example measures wall time per decision with `Instant::now`, which
// clippy.toml bans in drl-core's library code (the limiters take `now` as
// an argument, here from an atomic counter).
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_core::{Algorithm, AtomicLimiter, Quota};
use governor::clock::FakeRelativeClock;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let n: u64 = match args.next().map(|a| a.parse()) {
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("usage: direct_loop drl|governor ITERATIONS");
            std::process::exit(2);
        }
    };
    let start = Instant::now();
    let admitted = match which.as_str() {
        "drl" => {
            let clock = AtomicU64::new(0);
            let quota = Quota::with_burst(1_000_000, 1_000_000_000, 1000).expect("valid quota");
            let limiter = AtomicLimiter::new(Algorithm::Gcra, quota).expect("gcra fits a cell");
            (0..n)
                .filter(|_| {
                    let now = clock.fetch_add(1_000, Ordering::Relaxed);
                    black_box(limiter.decide(now, 1).allowed)
                })
                .count()
        }
        "governor" => {
            let clock = FakeRelativeClock::default();
            let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000).unwrap())
                .allow_burst(NonZeroU32::new(1000).unwrap());
            let limiter = governor::RateLimiter::direct_with_clock(quota, clock.clone());
            (0..n)
                .filter(|_| {
                    clock.advance(Duration::from_nanos(1_000));
                    black_box(limiter.check().is_ok())
                })
                .count()
        }
        other => {
            eprintln!("unknown limiter {other:?}: drl or governor");
            std::process::exit(2);
        }
    };
    let per = start.elapsed().as_nanos() as f64 / n as f64;
    // Every decision admits (1 permit per 1 us at 1,000,000/s).
    assert_eq!(admitted as u64, n, "{which} denied some decisions");
    println!("{which}: {per:.2} ns per decision over {n}");
}
