//! What never failing open costs: the share of new, legitimate keys that
//! the summary of evicted state denies after a flood of drained keys.
//!
//! A `KeyedLimiter` of 10,000 keys (16 shards) at 10/hour is filled with
//! flood keys, then `extra` more flood keys arrive (each evicts a live one,
//! folded into the summary, unless the summary already denies it), then
//! 2,000 keys never seen make one request each. Flood keys either drain
//! their quota at once or take one unit of it. All within 0.2 s of a
//! manual clock, so nothing ages out: the worst case. Denials of the new
//! keys are false denials: an exact limiter admits every one. Hash seeds
//! are random per run; each figure is the mean over 5 limiters.
//!
//! Run: `cargo run -p drl-core --example eviction_flood`

use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, MultiLimiter, Quota};

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SECOND;
const MAX_KEYS: usize = 10_000;
const LEGIT: u64 = 2_000;
const RUNS: u64 = 5;

/// Share of fresh keys denied after `extra` flood keys past the bound,
/// each taking all of its quota (`drain`) or one unit.
fn false_denials(alg: Algorithm, extra: u64, drain: bool) -> (f64, u64) {
    let q = Quota::new(10, HOUR).unwrap();
    let cost = match (drain, alg.is_windowed()) {
        (false, _) => 1,
        (true, true) => q.limit(),
        (true, false) => q.burst(),
    };
    let cfg = KeyedConfig {
        max_keys: MAX_KEYS,
        shards: 16,
        ..KeyedConfig::default()
    };
    let (mut denied, mut summary_bytes) = (0, 0);
    for _ in 0..RUNS {
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let t0 = 1_000 * HOUR;
        let flood = MAX_KEYS as u64 + extra;
        for k in 0..flood {
            keyed.decide(&k, t0 + k, cost);
        }
        let now = t0 + flood;
        for k in 0..LEGIT {
            denied += u64::from(!keyed.decide(&(u64::MAX - k), now + k, 1).allowed);
        }
        summary_bytes = keyed.summary_bytes();
    }
    (denied as f64 / (LEGIT * RUNS) as f64, summary_bytes as u64)
}

fn main() {
    let extras = [0u64, 1_000, 2_500, 5_000, 10_000, 20_000, 100_000];
    for drain in [true, false] {
        let what = if drain { "drained" } else { "one unit" };
        print!("{:<15}", format!("extra {what}"));
        for e in extras {
            print!("{e:>8}");
        }
        println!("{:>16}", "summary bytes");
        for alg in Algorithm::ALL {
            print!("{:<15}", alg.to_string());
            let mut bytes = 0;
            for e in extras {
                let (rate, b) = false_denials(alg, e, drain);
                bytes = b;
                print!("{:>7.1}%", rate * 100.0);
            }
            println!("{bytes:>16}");
        }
    }
}
