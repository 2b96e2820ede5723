//! What the top-keys sketch costs one decision, in-process: nanoseconds
//! per `TopKeys::observe` over 1,000 rotating keys (every update evicts),
//! recording every decision (`s = 1`) and sampled 1 in `s`, against the
//! bare loop, interleaved rounds on one thread. Compare with a
//! decision's own cost (`scripts/status-cost` prints decisions per
//! CPU-second). Results: docs/performance.md ("Status page").
//!
//! ```sh
//! CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
//!   cargo run --release -p drl-bench --bin topkeys_cost [rounds]
//! ```

use std::hint::black_box;
use std::time::Instant;

use drl_service::status::sampling;
use drl_service::status::topkeys::TopKeys;

/// Observations per measurement.
const N: usize = 2_000_000;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let keys: Vec<String> = (0..1_000).map(|i| format!("tenant-{i}")).collect();
    sampling::seed_thread(1);
    // `None`: the bare loop; `Some(s)`: observe at 1 in `s`.
    let modes: [Option<u32>; 5] = [None, Some(1), Some(10), Some(100), Some(1_000)];
    let mut best = [f64::INFINITY; 5];
    for _ in 0..rounds {
        for (m, mode) in modes.iter().enumerate() {
            let t = TopKeys::new();
            if let Some(s) = mode {
                t.set_sample(*s);
            }
            let start = Instant::now();
            for i in 0..N {
                let k = black_box(keys[i % keys.len()].as_str());
                if mode.is_some() {
                    t.observe(k, 1, i % 7 != 0);
                }
            }
            let ns = start.elapsed().as_nanos() as f64 / N as f64;
            best[m] = best[m].min(ns);
            black_box(t.report(1));
        }
    }
    println!("mode         ns/decision  over the bare loop (best of {rounds})");
    for (m, mode) in modes.iter().enumerate() {
        let name = mode.map_or("bare loop".to_string(), |s| format!("s = {s}"));
        println!("{name:<12} {:>11.2}  {:>+8.2}", best[m], best[m] - best[0]);
    }
}
