//! Orbit usage-table codec: encode and decode time and bytes per key for a
//! full table of 1,000,000 keys, and for a delta where 10% of keys changed.
//!
//! `cargo bench -p drl-cluster --bench orbit_codec`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use drl_cluster::orbit::TableMsg;
use drl_cluster::orbit::codec::{decode, encode};

const KEYS: u64 = 1_000_000;
const POOL: u64 = 2700;

fn table(every: u64) -> TableMsg {
    let entries = (0..KEYS)
        .filter(|i| i % every == 0)
        .map(|i| {
            // Typical free values: the pool minus a little usage, some keys
            // with donated capacity above the pool.
            let used = (i.wrapping_mul(2_654_435_761) >> 7) % 300;
            let free = if i % 7 == 0 { POOL + used } else { POOL - used };
            // Changed during the last lap (hops 36..=40).
            let modified = 36 + (i % 5) as u32;
            (
                format!("tenant-{:03}/user:{i:08}", i % 1000).into_bytes(),
                (free, modified),
            )
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .map(|(k, (f, m))| (k, f, m))
        .collect();
    TableMsg {
        window: 123_456,
        lane: 0,
        hop: 40,
        from: 2,
        base_hop: if every == 1 { 0 } else { 35 },
        pool: POOL,
        visits: vec![36, 37, 38, 39, 40],
        entries,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("orbit_codec");
    g.sample_size(10);
    for (name, every) in [("full_1M", 1u64), ("delta_10pct_of_1M", 10)] {
        let m = table(every);
        let bytes = encode(&m).expect("encodes");
        println!(
            "{name}: {} entries, {} bytes, {:.2} bytes/key",
            m.entries.len(),
            bytes.len(),
            bytes.len() as f64 / m.entries.len() as f64
        );
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| encode(black_box(&m)).expect("encodes"))
        });
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| decode(black_box(&bytes)).expect("decodes"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
