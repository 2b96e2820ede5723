//! End-to-end: the cluster key of three running `drl serve` gossip nodes
//! rotated by reload, in the three documented steps (accept the new key
//! everywhere, send with it everywhere, drop the old one), without a
//! datagram refused or a node lost; a node left on the old key is then
//! refused by the others.

mod common;

use common::gossip::{Cluster, Opts};
use common::wait_for_or;

fn unknown_key(c: &Cluster, node: usize) -> f64 {
    c.metric(
        node,
        "drl_cluster_net_datagrams_total{dir=\"in\",result=\"unknown_key\"}",
    )
    .unwrap_or(0.0)
}

fn accepted(c: &Cluster, node: usize) -> f64 {
    c.metric(
        node,
        "drl_cluster_net_datagrams_total{dir=\"in\",result=\"accepted\"}",
    )
    .unwrap_or(0.0)
}

/// Waits until every node has accepted more datagrams than in `before`.
fn traffic_flows(c: &Cluster, before: [f64; 3]) {
    wait_for_or(
        "datagrams accepted by every node",
        || format!("accepted {:?}", [0, 1, 2].map(|i| accepted(c, i))),
        || (0..3).all(|i| accepted(c, i) > before[i] + 20.0),
    );
}

#[test]
fn gossip_keys_rotate_by_reload_without_losing_a_datagram() {
    let c = Cluster::start(Opts::default());
    let base: Vec<String> = (0..3).map(|i| c.base_config(i).to_string()).collect();
    let line = base[0]
        .lines()
        .find(|l| l.trim_start().starts_with("key_file:"))
        .unwrap()
        .to_string();
    let old = line.split('"').nth(1).unwrap().to_string();
    let new = std::path::Path::new(&old).with_file_name("next.key");
    std::fs::write(&new, "the-next-cluster-key-of-32-bytes\n").unwrap();
    let new = new.display().to_string();
    wait_for_or(
        "the cluster to form",
        || format!("{:?}", [0, 1, 2].map(|i| c.live_nodes(i))),
        || (0..3).all(|i| c.live_nodes(i) == Some(3)),
    );
    let steps = [
        format!("  key_file: \"{old}\"\n  previous_key_files: [\"{new}\"]"),
        format!("  key_file: \"{new}\"\n  previous_key_files: [\"{old}\"]"),
        format!("  key_file: \"{new}\""),
    ];
    for (s, keys) in steps.iter().enumerate() {
        for (i, b) in base.iter().enumerate() {
            c.reload_with(i, &b.replace(&line, keys))
                .unwrap_or_else(|e| panic!("step {}: node {}: {e}", s + 1, i + 1));
        }
        traffic_flows(&c, [0, 1, 2].map(|i| accepted(&c, i)));
        for i in 0..3 {
            assert_eq!(
                unknown_key(&c, i),
                0.0,
                "step {}: node {} refused datagrams",
                s + 1,
                i + 1
            );
            assert_eq!(c.live_nodes(i), Some(3), "step {}: node {}", s + 1, i + 1);
        }
    }
    // A key file that is not usable refuses the reload; the keys stay.
    let short = std::path::Path::new(&old).with_file_name("short.key");
    std::fs::write(&short, "too-short\n").unwrap();
    let bad = base[0].replace(&line, &format!("  key_file: \"{}\"", short.display()));
    let e = c.reload_with(0, &bad).unwrap_err();
    assert!(e.contains("cluster:"), "{e}");
    // Node 3 goes back to the old key alone: the others refuse its frames.
    c.reload_with(2, &base[2]).unwrap();
    wait_for_or(
        "nodes 1 and 2 to refuse node 3's old-key frames",
        || format!("unknown_key {:?}", [0, 1].map(|i| unknown_key(&c, i))),
        || unknown_key(&c, 0) > 0.0 && unknown_key(&c, 1) > 0.0,
    );
}
