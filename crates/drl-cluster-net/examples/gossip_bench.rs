//! Measures a 3-node gossip cluster on loopback: control traffic per node
//! (idle: SWIM membership plus the gossip heartbeats a node without keys
//! sends; then 1, 100 and 1,000 active keys), and the decision latency of
//! `scope: gossip` against the local in-memory store.
//!
//! `cargo run --release -p drl-cluster-net --example gossip_bench`

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use drl_cluster_net::{GossipConfig, GossipStore};
use drl_core::{Algorithm, Quota};
use drl_store::{Check, LimitSpec, MemoryStore, Store};

fn spec() -> LimitSpec {
    LimitSpec::new(
        "global",
        Algorithm::Gcra,
        vec![Quota::new(1_000, 1_000_000_000).unwrap()],
    )
}

async fn cluster(dir: &std::path::Path, branching: u32) -> Vec<GossipStore> {
    let key = dir.join("cluster.key");
    std::fs::write(&key, b"benchmark cluster key, 32 bytes!").unwrap();
    let addrs: Vec<SocketAddr> = (1..=3)
        .map(|i| format!("127.0.231.{i}:7946").parse().unwrap())
        .collect();
    let mut nodes = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let mut c = GossipConfig::new(i as u32 + 1, *a, addrs.clone());
        c.key_file = Some(key.clone());
        c.branching = branching;
        nodes.push(GossipStore::start(c).await.unwrap());
    }
    let t0 = Instant::now();
    while nodes.iter().any(|n| n.live_nodes() < 3) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "cluster did not form"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes
}

/// Offers `keys` keys at every node for `secs`, returns bytes/s and
/// datagrams/s sent per node (mean over nodes).
async fn traffic(nodes: &[GossipStore], keys: usize, secs: u64) -> (f64, f64) {
    let spec = spec();
    let names: Vec<String> = (0..keys).map(|k| format!("tenant-{k:05}")).collect();
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(1) {
        for n in nodes {
            for k in &names {
                let _ = n.decide_now(Check {
                    spec: &spec,
                    key: k,
                    cost: 1,
                    now: 0,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before: Vec<_> = nodes.iter().map(|n| n.transport_stats()).collect();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        for n in nodes {
            for k in &names {
                let _ = n.decide_now(Check {
                    spec: &spec,
                    key: k,
                    cost: 1,
                    now: 0,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dt = t0.elapsed().as_secs_f64();
    let (mut bytes, mut dgrams) = (0.0, 0.0);
    for (n, b) in nodes.iter().zip(before) {
        let a = n.transport_stats();
        bytes += (a.sent_bytes - b.sent_bytes) as f64 / dt;
        dgrams += (a.sent - b.sent) as f64 / dt;
    }
    (bytes / nodes.len() as f64, dgrams / nodes.len() as f64)
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

/// One block of `n` timed decisions on `store`. Like the server, each call
/// reads the clock for `Check::now` first (the gossip store ignores it and
/// reads its own), and the timing covers clock read + decision.
async fn block<S: Store>(store: &S, origin: Instant, n: usize, out: &mut Vec<u64>) {
    let spec = spec();
    let keys: Vec<String> = (0..64).map(|k| format!("tenant-{k}")).collect();
    for i in 0..n {
        let key = &keys[i % keys.len()];
        let t = Instant::now();
        let now = origin.elapsed().as_nanos() as u64;
        let d = store
            .decide(Check {
                spec: &spec,
                key,
                cost: 1,
                now,
            })
            .await;
        out.push(t.elapsed().as_nanos() as u64);
        std::hint::black_box(d.ok());
    }
}

/// Percentiles (p50, p99, p99.9) of both stores, measured in alternating
/// blocks so that background noise hits both alike, and the median over
/// block pairs of (p99 of `a`'s block / p99 of `b`'s next block): a ratio
/// that a noisy moment spoils for one pair only.
async fn latency<A: Store, B: Store>(
    a: &A,
    b: &B,
    blocks: usize,
    n: usize,
) -> ([(u64, u64, u64); 2], f64) {
    let origin = Instant::now();
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    let mut ratios = Vec::with_capacity(blocks);
    for _ in 0..blocks {
        let (mut ba, mut bb) = (Vec::with_capacity(n), Vec::with_capacity(n));
        block(a, origin, n, &mut ba).await;
        block(b, origin, n, &mut bb).await;
        va.extend_from_slice(&ba);
        vb.extend_from_slice(&bb);
        ratios.push(percentile(&mut ba, 0.99) as f64 / percentile(&mut bb, 0.99).max(1) as f64);
    }
    let p = |v: &mut Vec<u64>| {
        (
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 0.999),
        )
    };
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    ([p(&mut va), p(&mut vb)], median)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    for branching in [2u32] {
        let nodes = cluster(dir.path(), branching).await;
        // No active key: SWIM membership and gossip heartbeats (an empty
        // payload per peer per interval, so that peers keep counting this
        // node).
        let t0 = Instant::now();
        let before: Vec<_> = nodes.iter().map(|n| n.transport_stats()).collect();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let dt = t0.elapsed().as_secs_f64();
        let idle: f64 = nodes
            .iter()
            .zip(&before)
            .map(|(n, b)| (n.transport_stats().sent_bytes - b.sent_bytes) as f64 / dt)
            .sum::<f64>()
            / 3.0;
        println!(
            "branching {branching}: no active key (membership + heartbeats): {idle:.0} B/s per node"
        );
        for keys in [1usize, 100, 1_000] {
            let (b, d) = traffic(&nodes, keys, 5).await;
            let gossip = b - idle;
            println!(
                "branching {branching}: {keys} active keys: {b:.0} B/s per node ({d:.1} datagrams/s), above idle {gossip:.0} B/s = {:.1} kbit/s, {:.1} B/s per key",
                gossip * 8.0 / 1000.0,
                gossip / keys as f64
            );
        }
        let mem = MemoryStore::default();
        let (blocks, n) = (40, 10_000);
        let ([g, l], ratio) = latency(&nodes[0], &mem, blocks, n).await;
        println!(
            "decision latency, {} decisions each, 64 keys, alternating blocks of {n}:",
            blocks * n
        );
        println!(
            "  gossip (3-node cluster running): p50 {} ns, p99 {} ns, p99.9 {} ns; p99 gossip/local: {:.3} overall, {ratio:.3} median of block pairs",
            g.0,
            g.1,
            g.2,
            g.1 as f64 / l.1.max(1) as f64
        );
        println!(
            "  local (MemoryStore):             p50 {} ns, p99 {} ns, p99.9 {} ns",
            l.0, l.1, l.2
        );
        // The same with node 1's loop stopped (no ticks contending for the
        // key locks): how much of the tail is the background work.
        let mut nodes = nodes;
        nodes[0].kill();
        let ([g, l], ratio) = latency(&nodes[0], &mem, blocks, n).await;
        println!(
            "  gossip, node loop stopped:       p50 {} ns, p99 {} ns, p99.9 {} ns (local again: p99 {} ns); p99 ratio {:.3} overall, {ratio:.3} median of block pairs",
            g.0,
            g.1,
            g.2,
            l.1,
            g.1 as f64 / l.1.max(1) as f64
        );
        for mut node in nodes {
            node.kill();
        }
    }
}
