//! Issue 42, defect D11: eviction must never admit more than the exact
//! limiter. A key whose live state is evicted comes back no more generous
//! than it left (docs/semantics.md, "Bounded memory in the keyed limiter").

use std::collections::HashMap;

use drl_core::{Algorithm, KeyedConfig, KeyedLimiter, MultiLimiter, Quota, State};
use proptest::prelude::*;

const SECOND: u64 = 1_000_000_000;
const HOUR: u64 = 3_600 * SECOND;

/// The cost that drains a fresh key: the burst, or the limit for the
/// windowed algorithms.
fn drain_cost(alg: Algorithm, q: &Quota) -> u64 {
    if alg.is_windowed() {
        q.limit()
    } else {
        q.burst()
    }
}

/// The attack: a 10/hour victim is drained, then a flood of distinct keys,
/// each drained at once, keeps the table full so that the victim (the
/// entry nearest to fresh) is evicted again and again. Between flood keys
/// the victim retries. Over 20 s it must be admitted 0 times: its hour is
/// not over. (Before the summary, it was admitted 462-901 times.)
#[test]
fn a_flood_of_drained_keys_never_resets_a_drained_victim() {
    let q = Quota::new(10, HOUR).unwrap();
    let mut reset = Vec::new();
    // One shard of 1 key (every new key evicts the victim) or of 16 (every
    // eviction samples every entry; the victim goes when nearest to fresh).
    for (max_keys, alg) in [1, 16]
        .into_iter()
        .flat_map(|n| Algorithm::ALL.map(|a| (n, a)))
    {
        let cfg = KeyedConfig {
            max_keys,
            shards: 1,
            sweep_interval: SECOND,
            ..KeyedConfig::default()
        };
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let drain = drain_cost(alg, &q);
        let t0 = 1_000 * HOUR; // the start of an hour window
        assert!(keyed.decide(&0, t0, drain).allowed, "{alg}");
        let (mut admitted, mut evicted) = (0, 0);
        // One flood key and one victim retry every 1 ms for 20 s.
        for i in 1..=20_000u64 {
            let now = t0 + i * 1_000_000;
            keyed.decide(&i, now, drain);
            evicted += u64::from(keyed.snapshot(&0).is_none());
            if keyed.decide(&0, now, 1).allowed {
                admitted += 1;
            }
        }
        let st = keyed.stats();
        // Evicted once, it stays out: its retries are denied on the
        // summary's state and so never stored again.
        assert!(
            evicted > 0 || max_keys > 1,
            "{alg}: the victim was never evicted ({st:?})"
        );
        if admitted > 0 {
            reset.push((max_keys, alg, admitted));
        }
    }
    assert!(
        reset.is_empty(),
        "victims reset (max_keys, algorithm, admissions): {reset:?}"
    );
}
