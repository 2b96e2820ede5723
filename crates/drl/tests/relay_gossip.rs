//! Two `drl relay`s sharing one global limit by gossip (drl-node's
//! transport and membership, the same node as `drl serve`'s
//! `scope: gossip`), on real kernel TCP with 3:7 demand: the aggregate
//! holds 10 Mbps ±10 %.

mod relay_net;

use relay_net::*;

#[test]
fn two_sites_with_gossip_hold_10_mbps_with_3_to_7_demand() {
    let dir = tempfile::tempdir().unwrap();
    let key = key(dir.path());
    let topo = topology("rg", 2);
    let relays: Vec<_> = (1..=2)
        .map(|i| {
            relay(
                &topo.sites[i - 1].ns,
                dir.path(),
                &format!("site{i}"),
                &gossip_yaml(i, 2, "fps", "10Mbit/s", &key, ""),
            )
        })
        .collect();
    wait_for(15, "both relays to count 2 live nodes", || {
        relays
            .iter()
            .all(|r| relay_metric(r, "drl_relay_live_nodes", &[]) == Some(2.0))
    });
    let sink = sink(&topo);
    let a = senders(&topo, 1, 3);
    let b = senders(&topo, 2, 7);
    std::thread::sleep(std::time::Duration::from_secs(5));
    let site = |i| from_site(&sink, &topo, i);
    let (t0, b1, b2) = (std::time::Instant::now(), site(1), site(2));
    std::thread::sleep(std::time::Duration::from_secs(10));
    let dt = t0.elapsed().as_secs_f64();
    let m1 = (site(1) - b1) as f64 * 8.0 / dt / 1e6;
    let m2 = (site(2) - b2) as f64 * 8.0 / dt / 1e6;
    let mbps = m1 + m2;
    a.stop();
    b.stop();
    let logs: String = relays.iter().map(|r| r.log()).collect();
    assert!(
        (9.0..=11.0).contains(&mbps),
        "aggregate {mbps:.3} Mbps over 10 s (site 1 {m1:.3}, site 2 {m2:.3})\n{logs}"
    );
    assert!(
        m1 > 1.0 && m2 > 1.0,
        "a site starved: {m1:.3} / {m2:.3} Mbps"
    );
    // Both sites got traffic through (no starvation), and gossip flowed.
    for r in &relays {
        let m = r.metrics().unwrap();
        assert!(
            metric(&m, "drl_relay_gossip_datagrams_received_total", &[]).unwrap() > 20.0,
            "{m}"
        );
        assert!(
            metric(&m, "drl_relay_bytes_total", &["verdict=\"allowed\""]).unwrap() > 1e6,
            "{m}"
        );
        assert_eq!(
            metric(&m, "drl_relay_effective_limit_bytes_per_second", &[]),
            Some(1_250_000.0)
        );
    }
}
