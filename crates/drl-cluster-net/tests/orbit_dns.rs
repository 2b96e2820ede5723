//! Orbit ring members named by DNS (`addr: dns:NAME:PORT`), answered by a
//! real DNS server on loopback (`DnsResponder`): the members find each
//! other, a record removed takes the member away (the other node marks it
//! down), a record back at a new address is followed; ids and ring order
//! stay those of the list throughout.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use drl_cluster_net::orbit::{OrbitConfig, OrbitStore};
use drl_core::{Algorithm, Quota};
use drl_store::LimitSpec;
use drl_test_kit::dns::DnsResponder;

const KEY: &str = "orbit-dns-test-key-0123456789abc";

fn port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_members_are_found_by_name_and_followed() {
    let dns = DnsResponder::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let lo: IpAddr = [127, 0, 0, 1].into();
    dns.set("m1.orbit.test", vec![lo]);
    dns.set("m2.orbit.test", vec![lo]);
    let (p1, p2) = (port(), port());
    let yaml = |id: u32, bind: u16| {
        format!(
            "node_id: {id}\nbind: 127.0.0.1:{bind}\nkey: {{inline: {KEY}}}\n\
             ring:\n  - {{id: 1, addr: \"dns:m1.orbit.test:{p1}\"}}\n  - {{id: 2, addr: \"dns:m2.orbit.test:{p2}\"}}\n\
             epoch_ms: 50\nheartbeat_ms: 50\nsuspect_after_ms: 400\n\
             discovery: {{nameserver: \"{}\", interval_ms: 100, timeout_ms: 500}}\n",
            dns.addr()
        )
    };
    let c1: OrbitConfig = serde_norway::from_str(&yaml(1, p1)).unwrap();
    let c2: OrbitConfig = serde_norway::from_str(&yaml(2, p2)).unwrap();
    assert_eq!(c1.ring_ids(), vec![1, 2], "ids and order from the list");
    assert_eq!(
        c1.ring[1].dns,
        Some(("m2.orbit.test".to_string(), p2)),
        "the name is kept"
    );
    c1.validate().unwrap();
    let s1 = OrbitStore::start(c1).await.unwrap();
    let s2 = OrbitStore::start(c2).await.unwrap();
    let spec = LimitSpec::new(
        "capped",
        Algorithm::FixedWindow,
        vec![Quota::new(100, 2_000_000_000).unwrap()],
    );
    s1.register(&spec).unwrap();
    s2.register(&spec).unwrap();
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    wait("both members resolved", || {
        s1.ring_addrs().get(&2) == Some(&at(p2)) && s2.ring_addrs().get(&1) == Some(&at(p1))
    })
    .await;
    wait("heartbeats both ways, nobody down", || {
        let (a, b) = (s1.stats(), s2.stats());
        a.heartbeats > 3 && b.heartbeats > 3 && a.down.is_empty() && b.down.is_empty()
    })
    .await;

    // Member 2's record gone: node 1 stops reaching it and marks it down.
    dns.remove("m2.orbit.test");
    wait("member 2 forgotten and down on node 1", || {
        !s1.ring_addrs().contains_key(&2) && s1.stats().down == vec![2]
    })
    .await;

    // Back under its name (same address): found again, up again.
    dns.set("m2.orbit.test", vec![lo]);
    wait("member 2 back on node 1", || {
        s1.ring_addrs().get(&2) == Some(&at(p2)) && s1.stats().down.is_empty()
    })
    .await;
    s1.shutdown().await;
    s2.shutdown().await;
}
