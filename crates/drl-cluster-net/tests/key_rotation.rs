//! Key rotation on running gossip and Orbit nodes, through the API a reload
//! uses (`GossipConfig::load_keys` + `GossipStore::set_keys`,
//! `KeySource::load_ring` + `OrbitStore::set_keys`): the documented three
//! steps keep the cluster whole with not one datagram refused, and a node
//! left on the old key is refused (counted `unknown_key`) afterwards.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drl_cluster_net::orbit::{KeySource, OrbitConfig, OrbitStore, RingMember};
use drl_cluster_net::transport::TransportStats;
use drl_cluster_net::{GossipConfig, GossipStore};

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Waits until every node accepted `n` more datagrams than in `before`,
/// then checks none was refused for its key.
async fn traffic_flows(stats: impl Fn() -> Vec<TransportStats>, before: &[TransportStats], n: u64) {
    wait_until("datagrams accepted under the new keys", || {
        stats()
            .iter()
            .zip(before)
            .all(|(a, b)| a.accepted >= b.accepted + n)
    })
    .await;
    for s in stats() {
        assert_eq!(s.unknown_key, 0, "{s:?}");
        assert_eq!(s.forged, 0, "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_keys_rotate_in_three_steps_without_a_refused_datagram() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.key", "the old cluster key, 32 bytes...\n");
    let new = write(dir.path(), "new.key", "the new cluster key, 32 bytes...\n");
    let addrs: Vec<SocketAddr> = (1..=2)
        .map(|i| format!("127.0.53.{i}:7946").parse().unwrap())
        .collect();
    let mut cfgs = Vec::new();
    let mut nodes = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let mut c = GossipConfig::new(i as u32 + 1, *a, addrs.clone());
        c.key_file = Some(old.clone());
        nodes.push(GossipStore::start(c.clone()).await.unwrap());
        cfgs.push(c);
    }
    wait_until("both nodes live", || {
        nodes.iter().all(|n| n.live_nodes() == 2)
    })
    .await;
    let stats = || {
        nodes
            .iter()
            .map(|n| n.transport_stats())
            .collect::<Vec<_>>()
    };

    // Each step, node by node, as a rolling reload would do it.
    let steps: [(&PathBuf, Vec<PathBuf>); 3] = [
        (&old, vec![new.clone()]),
        (&new, vec![old.clone()]),
        (&new, vec![]),
    ];
    for (send, previous) in steps {
        for (node, cfg) in nodes.iter().zip(cfgs.iter_mut()) {
            cfg.key_file = Some(send.clone());
            cfg.previous_key_files = previous.clone();
            cfg.validate().unwrap();
            node.set_keys(cfg.load_keys().unwrap());
            let before = stats();
            traffic_flows(stats, &before, 5).await;
        }
    }
    assert!(nodes.iter().all(|n| n.live_nodes() == 2));

    // A node still on the old key is refused by both.
    let mut c = GossipConfig::new(3, "127.0.53.3:7946".parse().unwrap(), addrs.clone());
    c.key_file = Some(old.clone());
    let stale = GossipStore::start(c).await.unwrap();
    wait_until("old-key frames refused", || {
        stats().iter().all(|s| s.unknown_key > 0)
    })
    .await;
    assert!(nodes.iter().all(|n| n.live_nodes() == 2));
    assert_eq!(stale.live_nodes(), 1);
    assert_eq!(stale.transport_stats().accepted, 0);
    for mut n in nodes {
        n.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_keys_rotate_on_a_running_ring() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.key", "orbit old key, at least 32 bytes\n");
    let new = write(dir.path(), "new.key", "orbit new key, at least 32 bytes\n");
    let ring: Vec<RingMember> = (1..=2)
        .map(|id| RingMember {
            id,
            addr: format!("127.0.54.{id}:9381").parse().unwrap(),
            dns: None,
        })
        .collect();
    let mut stores = Vec::new();
    for m in &ring {
        let c = OrbitConfig::new(m.id, m.addr, ring.clone(), KeySource::file(&old));
        stores.push(OrbitStore::start(c).await.unwrap());
    }
    let stats = || {
        stores
            .iter()
            .map(|s| s.stats().transport)
            .collect::<Vec<_>>()
    };
    let before = stats();
    traffic_flows(stats, &before, 3).await;
    for (send, previous) in [
        (&old, vec![new.clone()]),
        (&new, vec![old.clone()]),
        (&new, vec![]),
    ] {
        for s in &stores {
            let key = KeySource::file(send).with_previous(previous.clone());
            s.set_keys(key.load_ring().unwrap());
            let before = stats();
            traffic_flows(stats, &before, 3).await;
        }
    }
    // Node 2 rolled back to the old key alone: node 1 refuses its frames.
    stores[1].set_keys(KeySource::file(&old).load_ring().unwrap());
    wait_until("node 1 refuses old-key heartbeats", || {
        stores[0].stats().transport.unknown_key > 0
    })
    .await;
    for s in &stores {
        s.shutdown().await;
    }
}
