//! The concurrent keyed limiter: same decisions as the single-threaded
//! limiter for the same per-key order, bounded memory, no state for
//! requests that never consumed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use drl_core::{Algorithm, Decision, KeyedConfig, KeyedLimiter, MultiLimiter, Quota};
use proptest::prelude::*;

fn big() -> KeyedConfig {
    KeyedConfig {
        max_keys: 1 << 20,
        shards: 8,
        ..KeyedConfig::default()
    }
}

/// The decisions of `trace` on one thread, and each key's states after it.
fn single_threaded(
    m: &MultiLimiter,
    trace: &[(u64, u32, u64)],
) -> (Vec<Decision>, HashMap<u32, Vec<drl_core::State>>) {
    let mut states: HashMap<u32, Vec<drl_core::State>> = HashMap::new();
    let decisions = trace
        .iter()
        .map(|&(t, k, c)| m.decide(states.entry(k).or_insert_with(|| m.new_states()), t, c))
        .collect();
    (decisions, states)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Threads share the table (shards, inserts, cells, mutexes); each key's
    /// arrivals are handled in trace order by one thread. Every decision
    /// equals the single-threaded one, and every key held ends in the
    /// single-threaded states (the cells' packed words included).
    #[test]
    fn concurrent_equals_single_threaded(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        two_quotas in any::<bool>(),
        steps in prop::collection::vec((0u64..30, 0u32..40, 0u64..5), 1..600),
    ) {
        let mut quotas = vec![Quota::with_burst(3, 50, 4).unwrap()];
        if two_quotas {
            quotas.push(Quota::new(10, 400).unwrap());
        }
        let m = MultiLimiter::uniform(alg, &quotas);
        let mut t = 0;
        let trace: Vec<(u64, u32, u64)> = steps.into_iter().map(|(dt, k, c)| { t += dt; (t, k, c) }).collect();
        let (expected, states) = single_threaded(&m, &trace);

        let keyed = Arc::new(KeyedLimiter::<u32>::new(m.clone(), big()));
        let threads = 4;
        let mut got = vec![None; trace.len()];
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|i| {
                let keyed = keyed.clone();
                let trace = &trace;
                s.spawn(move || {
                    trace.iter().enumerate()
                        .filter(|(_, (_, k, _))| *k as usize % threads == i)
                        .map(|(j, &(t, k, c))| (j, keyed.decide(&k, t, c)))
                        .collect::<Vec<_>>()
                })
            }).collect();
            for h in handles {
                for (j, d) in h.join().unwrap() {
                    got[j] = Some(d);
                }
            }
        });
        let got: Vec<Decision> = got.into_iter().map(Option::unwrap).collect();
        prop_assert_eq!(got, expected);
        for (k, s) in &states {
            if let Some(held) = keyed.snapshot(k) {
                prop_assert_eq!(&held, s, "key {}", k);
            }
        }
    }
}

/// Many threads on one key at one instant: exactly `burst` admitted,
/// whatever the interleaving (lock-free and locked paths).
#[test]
fn contended_key_admits_exactly_the_burst() {
    for alg in Algorithm::ALL {
        let q = Quota::with_burst(1, 1_000_000_000, 1000).unwrap();
        let cap = if alg.is_windowed() {
            q.limit()
        } else {
            q.burst()
        };
        let keyed = Arc::new(KeyedLimiter::<String>::new(
            MultiLimiter::uniform(alg, &[q]),
            big(),
        ));
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        if keyed.decide("hot", 7, 1).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), cap, "{alg}");
    }
}

#[test]
fn requests_that_consume_nothing_store_nothing() {
    let q = Quota::new(5, 1000).unwrap();
    for alg in Algorithm::ALL {
        let keyed = KeyedLimiter::<String>::new(MultiLimiter::uniform(alg, &[q]), big());
        for i in 0..100 {
            let k = format!("k{i}");
            assert!(keyed.decide(k.as_str(), 10, 0).allowed);
            assert!(!keyed.decide(k.as_str(), 10, 6).allowed);
        }
        assert_eq!(keyed.len(), 0, "{alg}");
        assert!(keyed.decide("a", 10, 1).allowed);
        assert_eq!(keyed.len(), 1);
    }
}

#[test]
fn memory_is_bounded_and_fresh_state_goes_first() {
    let q = Quota::new(1, 1_000).unwrap();
    let cfg = KeyedConfig {
        max_keys: 64,
        shards: 4,
        sweep_interval: 1,
        ..KeyedConfig::default()
    };
    for alg in Algorithm::ALL {
        let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        // One new key every 200 ns: a state stays live for at most two
        // windows (the sliding counter's previous window), so at most 10
        // keys are live at any time. That fits one shard's 16 even if every
        // live key hashes to the same shard, so everything evicted is fresh
        // whatever the hash seed.
        for k in 0..10_000u64 {
            assert!(keyed.decide(&k, k * 200, 1).allowed, "{alg} key {k}");
            assert!(keyed.len() <= 64);
        }
        let st = keyed.stats();
        assert_eq!(st.evicted_live, 0, "{alg}: {st:?}");
        assert!(st.evicted_fresh > 9_000, "{alg}: {st:?}");
        // A recent key is still limited (its state was kept).
        assert!(!keyed.decide(&9_999, 9_999 * 200 + 50, 1).allowed, "{alg}");
    }
}

/// With nothing fresh, the bound holds by evicting live state, and every
/// eviction is counted. The evicted states are folded into the summary, so
/// new keys that share its cells are denied (counted as summary denials);
/// each key is either admitted (and held until evicted) or so denied.
#[test]
fn when_nothing_is_fresh_the_bound_still_holds_and_evictions_are_counted() {
    let q = Quota::new(1, u64::MAX / 4).unwrap();
    let cfg = KeyedConfig {
        max_keys: 32,
        shards: 2,
        sweep_interval: 1,
        ..KeyedConfig::default()
    };
    let keyed = KeyedLimiter::<u64>::new(MultiLimiter::uniform(Algorithm::Gcra, &[q]), cfg);
    let mut admitted = 0;
    for k in 0..1_000u64 {
        admitted += u64::from(keyed.decide(&k, 5, 1).allowed);
        assert!(keyed.len() <= 32);
    }
    let st = keyed.stats();
    assert_eq!(st.keys, 32);
    assert_eq!(st.evicted_live, admitted - 32);
    assert_eq!(st.summary_denials, 1_000 - admitted);
    assert!(st.evicted_live > 0, "{st:?}");
}

#[test]
fn sweep_drops_only_fresh_state() {
    let q = Quota::new(2, 100).unwrap();
    let keyed =
        KeyedLimiter::<u64>::new(MultiLimiter::uniform(Algorithm::TokenBucket, &[q]), big());
    for k in 0..10u64 {
        keyed.decide(&k, k * 20, 1);
    }
    // T = 50: key k is full again at k*20 + 50.
    assert_eq!(keyed.sweep(100), 3); // keys 0, 1, 2
    assert_eq!(keyed.len(), 7);
    assert!(keyed.snapshot(&2).is_none());
    assert!(keyed.snapshot(&3).is_some());
}

#[test]
fn entries_are_compact_and_the_slot_kind_follows_the_algorithm() {
    let q = Quota::with_burst(10, 1_000_000_000, 10).unwrap();
    for (algorithm, lock_free) in [
        (Algorithm::Gcra, true),
        (Algorithm::TokenBucket, true),
        (Algorithm::LeakyBucket, true),
        (Algorithm::FixedWindow, true),
        (Algorithm::SlidingWindow, false),
        (Algorithm::LeakyQueue, false),
    ] {
        let k: KeyedLimiter<u64> = KeyedLimiter::new(MultiLimiter::uniform(algorithm, &[q]), big());
        assert_eq!(k.is_lock_free(), lock_free, "{algorithm:?}");
        // A u64 key and a 16-byte-aligned 128-bit cell, or a u64 key and a
        // mutex over a boxed slice: 32 bytes, no enum tag.
        assert_eq!(k.entry_bytes(), 32, "{algorithm:?}");
        // A String key (24 bytes, padded to the cell's 16-byte alignment):
        // 48 bytes, as docs/config.md and docs/semantics.md state.
        let s: KeyedLimiter<String> =
            KeyedLimiter::new(MultiLimiter::uniform(algorithm, &[q]), big());
        assert_eq!(s.entry_bytes(), 48, "{algorithm:?}");
    }
    // Two quotas never take the cell, even for GCRA.
    let two: KeyedLimiter<u64> =
        KeyedLimiter::new(MultiLimiter::uniform(Algorithm::Gcra, &[q, q]), big());
    assert!(!two.is_lock_free());
}

/// Issue 14, defect 1: the bound counted keys, not bytes. 4 KiB keys under
/// a 64-key bound held 64 x 4 KiB; the byte budget now caps what long
/// keys hold (keys x (entry + key bytes) <= max_bytes), evicting as the key
/// bound does, and counts live evictions.
#[test]
fn long_keys_are_bounded_by_the_byte_budget() {
    let q = Quota::new(1, u64::MAX / 4).unwrap();
    for alg in [Algorithm::Gcra, Algorithm::FixedWindow] {
        let cfg = KeyedConfig {
            max_keys: 1_000,
            max_bytes: 64 * 1024,
            shards: 4,
            sweep_interval: 1,
        };
        let keyed = KeyedLimiter::<String>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let per_key = keyed.entry_bytes() + 4096;
        let mut last = None;
        for i in 0..2_000u64 {
            let key = format!("{i:04096}");
            if keyed.decide(key.as_str(), 5, 1).allowed {
                last = Some(key);
            }
            let st = keyed.stats();
            assert!(st.bytes <= 64 * 1024, "{alg}: {st:?}");
            assert_eq!(st.bytes, st.keys * per_key, "{alg}: {st:?}");
        }
        let st = keyed.stats();
        // Each of 4 shards holds at most 16 KiB: 3 keys of 4,144 bytes.
        assert!(st.keys <= 12 && st.keys >= 4, "{alg}: {st:?}");
        // Nothing was fresh (the window never ends): every eviction was
        // live, and every key not admitted was denied by the summary.
        let admitted = 2_000 - st.summary_denials;
        assert_eq!(st.evicted_live, admitted - st.keys as u64, "{alg}: {st:?}");
        // The last key admitted is still limited.
        let last = last.expect("the first key is admitted");
        assert!(!keyed.decide(last.as_str(), 6, 1).allowed, "{alg}");
    }
}

/// Short keys never hit the default byte budget before the key bound, and
/// the bytes counted are exactly entry + key per held key.
#[test]
fn the_byte_count_is_entry_plus_key_per_held_key() {
    let q = Quota::new(5, 1_000).unwrap();
    let keyed = KeyedLimiter::<String>::new(MultiLimiter::uniform(Algorithm::Gcra, &[q]), big());
    let keys: Vec<String> = (0..500).map(|i| "k".repeat(1 + i % 90)).collect();
    let mut held = std::collections::HashSet::new();
    for k in &keys {
        keyed.decide(k.as_str(), 10, 1);
        held.insert(k.clone());
    }
    let want: usize = held.iter().map(|k| keyed.entry_bytes() + k.len()).sum();
    assert_eq!(keyed.stats().bytes, want);
    assert_eq!(keyed.stats().keys, held.len());
    // Every state is fresh long after: a sweep returns every byte.
    keyed.sweep(1_000_000_000);
    assert_eq!((keyed.stats().keys, keyed.stats().bytes), (0, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the keys' lengths, times and costs: the keys held never
    /// exceed max_keys, the bytes never exceed max_bytes (unless a single
    /// key alone is larger than a shard's share), the byte count always
    /// equals entry + key bytes per held key, and a sweep far in the
    /// future returns every byte.
    #[test]
    fn keys_and_bytes_stay_within_their_bounds(
        alg in prop::sample::select(Algorithm::ALL.to_vec()),
        max_keys in 1usize..40,
        max_bytes in 64usize..4_000,
        shards in prop::sample::select(vec![1usize, 2, 4]),
        steps in prop::collection::vec((0u64..50, 0u32..60, 0usize..300, 0u64..3), 1..300),
    ) {
        let q = Quota::with_burst(2, 100, 3).unwrap();
        let cfg = KeyedConfig { max_keys, max_bytes, shards, sweep_interval: 20 };
        let keyed = KeyedLimiter::<String>::new(MultiLimiter::uniform(alg, &[q]), cfg);
        let entry = keyed.entry_bytes();
        let share = max_bytes.div_ceil(shards);
        let mut t = 1;
        let mut longest = 0;
        for (dt, k, len, cost) in steps {
            t += dt;
            let key = format!("{k:0len$}");
            longest = longest.max(entry + key.len());
            keyed.decide(key.as_str(), t, cost);
            let st = keyed.stats();
            prop_assert!(st.keys <= max_keys.div_ceil(shards) * shards, "{:?}", st);
            // A shard over its share holds exactly one key.
            prop_assert!(st.bytes <= shards * share.max(longest), "{:?}", st);
        }
        keyed.sweep(u64::MAX / 2);
        let st = keyed.stats();
        prop_assert_eq!((st.keys, st.bytes), (0, 0));
    }
}
