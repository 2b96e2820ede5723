//! The space-saving sketch: its error bound against exact counts
//! (proptest), the merge of shards and generations, long keys, and fixed
//! memory under a flood of distinct keys.

use std::collections::HashMap;

use drl_service::status::space_saving::{HeavyKey, SpaceSaving, merge};
use proptest::prelude::*;

/// A skewed stream: key `i` of `keys` drawn with weight ~ 1/(i+1)
/// (Zipf-like), each with a weight of 1..=4.
fn stream() -> impl Strategy<Value = Vec<(u16, u64)>> {
    (2u16..200).prop_flat_map(|keys| {
        prop::collection::vec(
            (
                // Square of a uniform draw: small indices are much more
                // likely (a heavy head and a long tail).
                (0u32..(keys as u32 * keys as u32)).prop_map(move |x| {
                    let r = (x as f64).sqrt() as u16;
                    keys - 1 - r.min(keys - 1)
                }),
                1u64..=4,
            ),
            1..3000,
        )
    })
}

fn exact(items: &[(u16, u64)]) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for (k, w) in items {
        *m.entry(format!("key-{k}")).or_insert(0) += w;
    }
    m
}

/// The bounds the module docs state, for a merged report over a stream of
/// total weight `n` and sketches of capacity `k`.
fn check_bounds(keys: &[HeavyKey], bound: u64, truth: &HashMap<String, u64>, n: u64, k: u64) {
    assert!(bound <= n / k, "bound {bound} > N/k = {}", n / k);
    let reported: HashMap<&str, &HeavyKey> = keys.iter().map(|h| (h.key.as_str(), h)).collect();
    for h in keys {
        let t = truth.get(&h.key).copied().unwrap_or(0);
        assert!(
            h.count - h.error <= t && t <= h.count,
            "{}: true {t} not in [{}, {}]",
            h.key,
            h.count - h.error,
            h.count
        );
        assert!(
            h.error <= bound,
            "{}: error {} > bound {bound}",
            h.key,
            h.error
        );
    }
    for (key, &t) in truth {
        if t > bound {
            assert!(
                reported.contains_key(key.as_str()),
                "{key} (true {t}) heavier than the bound {bound} but not reported"
            );
        }
    }
    // Top-n: whatever is cut off after the n heaviest reported is at most
    // as heavy as the lightest of them (upper bound), or the bound.
    for n_top in [1usize, 5, 10] {
        let top = &keys[..n_top.min(keys.len())];
        let Some(lightest) = top.last() else { continue };
        for (key, &t) in truth {
            if !top.iter().any(|h| &h.key == key) {
                assert!(
                    t <= lightest.count.max(bound),
                    "{key} (true {t}) left out of the top {n_top}, whose lightest may weigh only {}",
                    lightest.count
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn one_sketch_reports_the_heaviest_keys_within_n_over_k(
        items in stream(),
        k in 1usize..40,
    ) {
        let mut s = SpaceSaving::new(k, 64);
        for (key, w) in &items {
            s.observe(&format!("key-{key}"), *w);
        }
        let truth = exact(&items);
        let n: u64 = items.iter().map(|x| x.1).sum();
        prop_assert_eq!(s.total(), n);
        prop_assert!(s.len() <= k);
        let m = merge([&s]);
        prop_assert_eq!(m.total, n);
        check_bounds(&m.keys, m.bound, &truth, n, k as u64);
        // A single sketch's entries are the merge's.
        let mut e = s.entries();
        e.sort_by(|a, b| a.key.cmp(&b.key));
        let mut mk = m.keys.clone();
        mk.sort_by(|a, b| a.key.cmp(&b.key));
        prop_assert_eq!(e, mk);
    }

    #[test]
    fn shards_and_generations_merge_within_the_same_bound(
        items in stream(),
        k in 1usize..40,
        shards in 1usize..6,
        split in 0usize..3000,
    ) {
        // Each item goes to one of `shards` sketches (as threads would
        // spread them), and to an old or new generation (before or after
        // `split`).
        let mut old: Vec<SpaceSaving> = (0..shards).map(|_| SpaceSaving::new(k, 64)).collect();
        let mut new: Vec<SpaceSaving> = (0..shards).map(|_| SpaceSaving::new(k, 64)).collect();
        for (i, (key, w)) in items.iter().enumerate() {
            let g = if i < split { &mut old } else { &mut new };
            g[(i * 7 + *key as usize) % shards].observe(&format!("key-{key}"), *w);
        }
        let truth = exact(&items);
        let n: u64 = items.iter().map(|x| x.1).sum();
        let m = merge(old.iter().chain(new.iter()));
        prop_assert_eq!(m.total, n);
        check_bounds(&m.keys, m.bound, &truth, n, k as u64);
    }

    #[test]
    fn long_keys_are_kept_cut_and_stay_apart(
        prefix_len in 40usize..200,
        tails in prop::collection::vec(0u8..5, 1..200),
    ) {
        // Keys sharing a prefix longer than the sketch keeps differ only
        // at the end: they must still be counted apart.
        let prefix = "p".repeat(prefix_len);
        let mut s = SpaceSaving::new(8, 32);
        let mut truth = HashMap::new();
        for t in &tails {
            let key = format!("{prefix}{t}");
            s.observe(&key, 1);
            *truth.entry(t).or_insert(0u64) += 1;
        }
        let e = s.entries();
        prop_assert_eq!(e.len(), truth.len());
        for h in &e {
            prop_assert!(h.key.len() <= 32, "{} bytes kept", h.key.len());
            prop_assert_eq!(h.error, 0);
        }
        let mut counts: Vec<u64> = e.iter().map(|h| h.count).collect();
        let mut want: Vec<u64> = truth.values().copied().collect();
        counts.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(counts, want);
    }
}

#[test]
fn ten_million_distinct_keys_leave_the_memory_where_it_was() {
    let mut s = SpaceSaving::new(64, 128);
    let bound = s.max_bytes();
    // Fill every slot with keys as long as kept, then flood.
    let long = "x".repeat(300);
    for i in 0..64 {
        s.observe(&format!("{long}{i}"), 1);
    }
    let full = s.bytes();
    assert!(full <= bound, "{full} > {bound}");
    let mut key = String::with_capacity(32);
    for i in 0..10_000_000u64 {
        key.clear();
        key.push_str("flood-");
        key.push_str(&i.to_string());
        s.observe(&key, 1);
        if i == 1_000 {
            assert_eq!(s.bytes(), full, "memory moved after 1,000 keys");
        }
    }
    assert_eq!(s.len(), 64);
    assert_eq!(s.total(), 10_000_064);
    let after = s.bytes();
    assert!(after <= bound, "{after} > {bound}");
    // Keys of the flood are shorter than the ones they replaced: the
    // buffers are reused, never grown, so the accounting cannot rise.
    assert!(after <= full, "grew from {full} to {after} bytes");
    // A heavy key arriving now is found at once, within N/k.
    s.observe("hot", 1_000_000);
    let e = s.entries();
    assert_eq!(e[0].key, "hot");
    assert!(e[0].count - e[0].error <= 1_000_000 && e[0].count >= 1_000_000);
    assert!(e[0].error <= s.total() / 64);
}

#[test]
fn exact_while_fewer_keys_than_slots() {
    let mut s = SpaceSaving::new(4, 64);
    for (k, w) in [("a", 3), ("b", 1), ("a", 2), ("c", 7), ("b", 1)] {
        s.observe(k, w);
    }
    s.observe("zero", 0);
    let e = s.entries();
    let got: Vec<(&str, u64, u64)> = e
        .iter()
        .map(|h| (h.key.as_str(), h.count, h.error))
        .collect();
    assert_eq!(got, [("c", 7, 0), ("a", 5, 0), ("b", 2, 0)]);
    assert_eq!(s.min_count(), 0, "not full: an absent key weighs 0");
    s.clear();
    assert!(s.is_empty());
    assert_eq!(s.total(), 0);
}
