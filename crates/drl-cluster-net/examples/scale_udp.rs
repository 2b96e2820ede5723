//! `scope: gossip` at scale on real UDP with the real membership: N
//! `GossipStore` nodes in one process, each on its own loopback address
//! (127.0.X.Y, port 17946), joined through three seeds (SWIM finds the
//! rest), sharing one global limit. Each node is offered 0-5 flows drawn at
//! random (the paper's Figure 8 setup), together about twice the limit,
//! all starting at once; every second the admitted total is counted on
//! this process's clock.
//!
//! ```sh
//! cargo run --release -p drl-cluster-net --example scale_udp -- \
//!     NODES ALG AGGREGATION LOSS SECONDS
//! cargo run --release -p drl-cluster-net --example scale_udp -- 100 fps flow-updating 0.05 40
//! ```
//!
//! Prints each second's admitted total, then the summary from 10 s on:
//! mean, 1 s min and max, the share of seconds within +/-10% of the limit,
//! and the control bytes each node sent per second. Exit status 1 when the
//! mean is off by more than 5% or under 95% of the seconds hold +/-10%
//! (the issue's per-second bounds). Measured: EXPERIMENTS.md, "Scale on
//! real UDP".

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_cluster_net::{GossipConfig, GossipStore};
use drl_core::{Algorithm, Quota};
use drl_store::{Check, LimitSpec};
use rand::{Rng, SeedableRng};

/// Requests per second one flow offers.
const FLOW_RATE: f64 = 40.0;
/// Seconds excluded from the summary (membership forms, estimates settle).
const WARM_S: usize = 10;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let n: usize = arg(0, "100").parse().expect("NODES");
    let algorithm: AlgorithmKind = arg(1, "fps").parse().expect("ALG: grd, fps, ...");
    let aggregation = match arg(2, "flow-updating").as_str() {
        "peer-table" => Aggregation::PeerTable,
        "push-sum" => Aggregation::PushSum,
        "flow-updating" => Aggregation::FlowUpdating,
        other => panic!("AGGREGATION: peer-table, push-sum or flow-updating, not {other}"),
    };
    let loss: f64 = arg(3, "0.05").parse().expect("LOSS");
    let seconds: usize = arg(4, "40").parse().expect("SECONDS");
    assert!(
        seconds > WARM_S,
        "SECONDS must exceed the {WARM_S} s warm-up"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ok = rt.block_on(run(n, algorithm, aggregation, loss, seconds));
    std::process::exit(if ok { 0 } else { 1 });
}

/// Node `i`'s address: 127.0.(1 + i / 250).(1 + i % 250), port 17946 (the
/// tests use 7946).
fn addr(i: usize) -> SocketAddr {
    format!("127.0.{}.{}:17946", 1 + i / 250, 1 + i % 250)
        .parse()
        .unwrap()
}

async fn run(
    n: usize,
    algorithm: AlgorithmKind,
    aggregation: Aggregation,
    loss: f64,
    seconds: usize,
) -> bool {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(n as u64);
    let flows: Vec<usize> = (0..n).map(|_| rng.random_range(0..=5)).collect();
    let total_flows: usize = flows.iter().sum();
    // The limit: half of what the flows offer (about twice the limit is
    // offered), at least 1 per node.
    let limit = ((total_flows as f64 * FLOW_RATE) / 2.0)
        .round()
        .max(n as f64) as u64;
    let spec = Arc::new(LimitSpec::new(
        "global",
        Algorithm::Gcra,
        vec![Quota::new(limit, 1_000_000_000).unwrap()],
    ));
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("cluster.key");
    std::fs::write(&key_file, b"scale on udp example key 32 byte").unwrap();
    let seeds: Vec<SocketAddr> = (0..3.min(n)).map(addr).collect();
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = GossipConfig::new(i as u32 + 1, addr(i), seeds.clone());
        c.nodes = Some(n as u32);
        c.key_file = Some(key_file.clone());
        c.flow_separator = Some("|".into());
        c.algorithm = algorithm;
        c.aggregation = aggregation;
        c.faults.drop_rate = loss;
        c.faults.seed = 7 * (i as u64 + 1);
        nodes.push(Arc::new(GossipStore::start(c).await.expect("node starts")));
    }
    let t_join = Instant::now();
    loop {
        let seen = nodes.iter().filter(|s| s.members().len() + 1 == n).count();
        if seen == n {
            break;
        }
        assert!(
            t_join.elapsed() < Duration::from_secs(300),
            "membership did not form: {seen} of {n} nodes have every peer active"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{n} nodes ({algorithm}, {}, loss {loss}): every node has its {} peers active after {:.1} s; \
         {total_flows} flows of {FLOW_RATE}/s, limit {limit}/s",
        aggregation.name(),
        n - 1,
        t_join.elapsed().as_secs_f64()
    );
    let sent0: u64 = nodes.iter().map(|s| s.transport_stats().sent_bytes).sum();
    let admitted = Arc::new(AtomicU64::new(0));
    let origin = Instant::now();
    let tasks: Vec<_> = nodes
        .iter()
        .zip(&flows)
        .enumerate()
        .filter(|(_, (_, f))| **f > 0)
        .map(|(i, (node, &f))| {
            let (node, spec, admitted) = (node.clone(), spec.clone(), admitted.clone());
            tokio::spawn(async move {
                let keys: Vec<String> = (0..f).map(|k| format!("all|n{i}-f{k}")).collect();
                let mut issued = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(20));
                loop {
                    tick.tick().await;
                    let due = (origin.elapsed().as_secs_f64() * FLOW_RATE * f as f64) as u64;
                    while issued < due {
                        let key = &keys[(issued % f as u64) as usize];
                        let d = node
                            .decide_now(Check {
                                spec: &spec,
                                key,
                                cost: 1,
                                now: 0,
                            })
                            .expect("decides");
                        if d.allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        issued += 1;
                    }
                }
            })
        })
        .collect();
    let mut per_s = Vec::with_capacity(seconds);
    let mut last = 0;
    for s in 1..=seconds {
        let due = origin + Duration::from_secs(s as u64);
        tokio::time::sleep_until(due.into()).await;
        let now = admitted.load(Ordering::Relaxed);
        per_s.push(now - last);
        eprintln!("t={s:>3} s admitted {}", now - last);
        last = now;
    }
    let elapsed = origin.elapsed().as_secs_f64();
    for t in tasks {
        t.abort();
    }
    let sent1: u64 = nodes.iter().map(|s| s.transport_stats().sent_bytes).sum();
    let held = &per_s[WARM_S..];
    let mean = held.iter().sum::<u64>() as f64 / held.len() as f64;
    let (min, max) = (*held.iter().min().unwrap(), *held.iter().max().unwrap());
    let within = held
        .iter()
        .filter(|&&a| (a as f64 - limit as f64).abs() <= 0.10 * limit as f64)
        .count() as f64
        / held.len() as f64;
    let bytes = (sent1 - sent0) as f64 / n as f64 / elapsed;
    let ok = (mean - limit as f64).abs() <= 0.05 * limit as f64 && within >= 0.95;
    println!(
        "nodes={n} alg={algorithm} agg={} loss={loss} limit={limit} mean={mean:.1} ({:+.1} %) \
         min={min} max={max} within10={:.0} % bytes_per_node_s={bytes:.0} verdict={}",
        aggregation.name(),
        (mean / limit as f64 - 1.0) * 100.0,
        within * 100.0,
        if ok { "held" } else { "NOT HELD" }
    );
    ok
}
