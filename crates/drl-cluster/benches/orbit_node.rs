//! Orbit node: the cost of one visit of the table (receive, rebalance every
//! key, forward) for tables of 100,000 and 1,000,000 keys, and of one
//! admission decision.
//!
//! `cargo bench -p drl-cluster --bench orbit_node`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use drl_cluster::orbit::{OrbitConfig, OrbitNode, TableMsg};

const MS: u64 = 1_000_000;
const WINDOW: u64 = 10_000 * MS;

fn cfg() -> OrbitConfig {
    OrbitConfig::new(3000, WINDOW, 100 * MS)
}

fn node() -> OrbitNode {
    OrbitNode::new(cfg(), 1, vec![0, 1, 2, 3, 4], 0).expect("valid")
}

/// A full table of window 1 as node 0 would forward it to node 1.
fn table(keys: u64) -> TableMsg {
    let pool = cfg().pool();
    TableMsg {
        window: 1,
        lane: 0,
        hop: 1,
        from: 0,
        base_hop: 0,
        pool,
        visits: vec![1, 0, 0, 0, 0],
        entries: (0..keys)
            .map(|i| (format!("user:{i:08}").into_bytes(), pool - i % 100, 1))
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("orbit_node");
    g.sample_size(10);
    for keys in [100_000u64, 1_000_000] {
        let msg = table(keys);
        g.bench_function(format!("visit_{keys}_keys"), |b| {
            b.iter_batched(
                || (node(), msg.clone()),
                |(mut n, m)| {
                    let t = WINDOW + MS;
                    n.on_message(t, 0, m);
                    let out = n.on_tick(t + 100 * MS);
                    assert_eq!(out.len(), 1);
                    black_box(out)
                },
                BatchSize::LargeInput,
            )
        });
    }
    let mut n = node();
    let mut i = 0u64;
    g.bench_function("admit", |b| {
        b.iter(|| {
            i += 1;
            let key = (i % 1000).to_be_bytes();
            black_box(n.admit(WINDOW + i, &key, 1))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
