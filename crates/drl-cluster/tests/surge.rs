//! Issue 42, D16: a surge from idle. Three nodes on a manual clock, idle,
//! then 1.8x the limit spread over the nodes in several ways: the first
//! second's admissions must stay within +10% of the limit, and every later
//! second within 10% of it.

mod common;

use common::{MS, cluster, deliver};
use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::{Aggregation, KeyLimit, KeyRef, Node};
use drl_core::Nanos;

const KEY: KeyRef<'static> = KeyRef {
    limit: "api",
    aggregate: "tenant-1",
};
const LIMIT: KeyLimit = KeyLimit {
    rate: 1_000,
    depth: 100,
};

/// Runs from `start` for `ms` milliseconds with `per_s[i]` requests per
/// second offered at node `i` (evenly spaced, cost 1); returns the units
/// admitted in each second.
fn run(nodes: &mut [Node], start: Nanos, ms: u64, per_s: &[u64]) -> Vec<u64> {
    let mut seconds = vec![0u64; ms.div_ceil(1_000) as usize];
    let mut offered = vec![0u64; nodes.len()];
    for t in 0..ms {
        let now = start + t * MS;
        for (i, n) in nodes.iter_mut().enumerate() {
            // Requests due by the end of this millisecond.
            let due = per_s[i] * (t + 1) / 1_000;
            while offered[i] < due {
                offered[i] += 1;
                if n.admit(now, KEY, LIMIT, 1, offered[i] % 8).unwrap().allowed {
                    seconds[(t / 1_000) as usize] += 1;
                }
            }
            n.handle_timeout(now);
        }
        deliver(nodes, now);
    }
    seconds
}

fn surge(algorithm: AlgorithmKind, aggregation: Aggregation, per_s: &[u64]) -> Vec<u64> {
    let mut nodes = cluster(algorithm, aggregation, 3);
    // Idle for 5 s (membership and heartbeats only), then 1,800/s in all.
    run(&mut nodes, 0, 5_000, &[0, 0, 0]);
    run(&mut nodes, 5_000 * MS, 5_000, per_s)
}

#[test]
fn a_surge_from_idle_stays_within_ten_percent_in_its_first_second() {
    let mut bad = Vec::new();
    // (Push-sum is not held to this: its sums mix over several rounds,
    // and an even surge took GRD 1,136 and FPS 1,296; EXPERIMENTS.md.)
    for aggregation in [Aggregation::PeerTable, Aggregation::FlowUpdating] {
        for algorithm in [AlgorithmKind::Grd, AlgorithmKind::Fps] {
            // Even, all at one node, two of three, uneven.
            for per_s in [
                [600, 600, 600],
                [1_800, 0, 0],
                [900, 900, 0],
                [1_200, 400, 200],
            ] {
                let got = surge(algorithm, aggregation, &per_s);
                eprintln!("{algorithm} {aggregation} {per_s:?}: {got:?}");
                // Within +10% in the first second (a single bucket's own
                // allowance: a second of the limit and its depth), and not
                // held by refusing: every later second within 10%.
                if got[0] > 1_100 || got[1..].iter().any(|s| !(900..=1_100).contains(s)) {
                    bad.push(format!("{algorithm} {aggregation} {per_s:?}: {got:?}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
