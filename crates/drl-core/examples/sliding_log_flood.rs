//! The cost of one sliding-log decision on a key that holds many entries:
//! `limit` admissions at distinct times fill one key's log, then a flood of
//! takes at the limit is decided (every one denied). Prints decisions per
//! second of this process (a measurement, not a verdict: RELIABILITY.md
//! gives the figures and the machine).
//!
//! `cargo run --release -p drl-core --example sliding_log_flood -- 10000 2000000`

// A measurement of wall time, outside the decision code.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use drl_core::{Algorithm, Limiter, Quota};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: LIMIT DECISIONS"))
        .collect();
    let limit = args.first().copied().unwrap_or(10_000);
    let n = args.get(1).copied().unwrap_or(1_000_000);
    let window = 60_000_000_000;
    let l = Limiter::new(Algorithm::SlidingLog, Quota::new(limit, window).unwrap());
    let mut s = l.new_state();
    for i in 0..limit {
        assert!(l.decide(&mut s, i * 1_000, 1).allowed);
    }
    let start = Instant::now();
    let mut allowed = 0u64;
    for i in 0..n {
        allowed += black_box(l.decide(&mut s, limit * 1_000 + i, 1)).allowed as u64;
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "limit {limit}: {n} decisions on one full key in {s:.3} s: {:.0} decisions/s ({allowed} admitted)",
        n as f64 / s
    );
}
