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

/// Node 2: in window 1 the lane origins are positions 1 and 3, so node 2
/// holds no table of its own and processes the one it receives.
fn node() -> OrbitNode {
    OrbitNode::new(cfg(), 2, vec![0, 1, 2, 3, 4], 0).expect("valid")
}

/// A full table of window 1, lane 0, as node 1 would forward it to node 2.
fn table(keys: u64) -> TableMsg {
    let pool = cfg().lane_pool(0, 5);
    TableMsg {
        window: 1,
        lane: 0,
        hop: 1,
        from: 1,
        base_hop: 0,
        pool: cfg().lane_pool(0, 5),
        visits: vec![0, 1, 0, 0, 0],
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
                    n.on_message(t, 1, m);
                    assert_eq!(n.stats().tables_received, 1, "processed");
                    let out = n.on_tick(t + 100 * MS);
                    assert_eq!(out.len(), 1);
                    assert!(out[0].msg.entries.len() as u64 >= keys);
                    // Returned, so that dropping the maps is not measured.
                    black_box((n, out))
                },
                BatchSize::LargeInput,
            )
        });
    }
    // Steady state: the node already handled the table once this window;
    // the next lap brings a delta in which 1% of the keys changed.
    let keys = 1_000_000u64;
    let first = table(keys);
    let pool = cfg().lane_pool(0, 5);
    let delta = TableMsg {
        hop: 6,
        base_hop: 2,
        visits: vec![5, 6, 2, 3, 4],
        entries: (0..keys)
            .step_by(100)
            .map(|i| (format!("user:{i:08}").into_bytes(), pool - 1 - i % 50, 4))
            .collect(),
        ..first.clone()
    };
    g.bench_function("visit_1000000_keys_steady_delta_1pct", |b| {
        b.iter_batched(
            || {
                let mut n = node();
                let t = WINDOW + MS;
                n.on_message(t, 1, first.clone());
                let out = n.on_tick(t + 100 * MS);
                assert_eq!(out[0].msg.hop, 2);
                (n, delta.clone())
            },
            |(mut n, m)| {
                let t = WINDOW + 600 * MS;
                n.on_message(t, 1, m);
                assert_eq!(n.stats().tables_received, 2, "delta processed");
                let out = n.on_tick(t + 100 * MS);
                assert_eq!(out.len(), 1);
                black_box((n, out))
            },
            BatchSize::LargeInput,
        )
    });
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
