//! Relays that die: the survivor of a two-relay gossip cluster falls back
//! to 1/N of the global limit (the paper's rule, drl-cluster's node); a
//! relay killed with `queue_bypass: true` lets traffic flow (fail open),
//! with `queue_bypass: false` stops it (fail closed).

mod relay_net;

use std::time::Duration;

use relay_net::*;

#[test]
fn killing_one_relay_the_other_falls_back_to_one_nth() {
    let dir = tempfile::tempdir().unwrap();
    let key = key(dir.path());
    let topo = topology("rk", 2);
    let mut relays: Vec<_> = (1..=2)
        .map(|i| {
            relay(
                &topo.sites[i - 1].ns,
                dir.path(),
                &format!("site{i}"),
                &gossip_yaml(i, 2, "grd", "10Mbit/s", &key, ""),
            )
        })
        .collect();
    wait_for(15, "both relays to count 2 live nodes", || {
        relays
            .iter()
            .all(|r| relay_metric(r, "drl_relay_live_nodes", &[]) == Some(2.0))
    });
    let sink = sink(&topo);
    let a = senders(&topo, 1, 4);
    let b = senders(&topo, 2, 4);
    std::thread::sleep(Duration::from_secs(3));
    // Site 2's relay crashes: no leave, its rules stay (with bypass).
    relays[1].kill();
    let survivor = &relays[0];
    wait_for(
        15,
        "the survivor to count 1 live node and halve its limit",
        || {
            relay_metric(survivor, "drl_relay_live_nodes", &[]) == Some(1.0)
                && relay_metric(survivor, "drl_relay_effective_limit_bytes_per_second", &[])
                    == Some(625_000.0)
        },
    );
    // Site 2's relay is gone and its rule has --queue-bypass: unlimited.
    let site2 = rate_mbps(2.0, || from_site(&sink, &topo, 2));
    // Stop the unlimited flows (they would only load the machine), let
    // GRD's demand estimate settle (1 s EWMA), then measure site 1.
    b.stop();
    std::thread::sleep(Duration::from_secs(3));
    let site1 = rate_mbps(8.0, || from_site(&sink, &topo, 1));
    a.stop();
    assert!(
        (4.5..=5.5).contains(&site1),
        "site 1 alone got {site1:.3} Mbps, expected 1/2 of 10 Mbps ±10 %\n{}",
        survivor.log()
    );
    assert!(site2 > 20.0, "site 2 after its relay died: {site2:.3} Mbps");
}

/// A local relay on one site, killed; returns the site's rate after.
fn rate_after_kill(tag: &str, bypass: bool) -> (f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let topo = topology(tag, 1);
    let yaml = format!(
        "queue: 0\nqueue_bypass: {bypass}\nlisten: {METRICS}\nalgorithm: ctb\n{}",
        class("2Mbit/s")
    );
    let mut r = relay(&topo.sites[0].ns, dir.path(), "local", &yaml);
    let sink = sink(&topo);
    let flows = senders(&topo, 1, 2);
    wait_for(10, "traffic through the relay", || {
        from_site(&sink, &topo, 1) > 100_000
    });
    r.kill();
    let rules = iptables_rules(&topo.sites[0].ns);
    // Let what was in flight land, then measure.
    std::thread::sleep(Duration::from_millis(1500));
    let mbps = rate_mbps(3.0, || from_site(&sink, &topo, 1));
    flows.stop();
    (mbps, rules)
}

#[test]
fn relay_killed_with_queue_bypass_lets_traffic_flow() {
    let (mbps, rules) = rate_after_kill("rb", true);
    assert!(rules.contains("--queue-bypass"), "{rules}");
    assert!(
        mbps > 20.0,
        "fail open: {mbps:.3} Mbps after the relay died"
    );
}

#[test]
fn relay_killed_without_queue_bypass_stops_traffic() {
    let (mbps, rules) = rate_after_kill("rc", false);
    assert!(
        rules.contains("NFQUEUE") && !rules.contains("--queue-bypass"),
        "{rules}"
    );
    assert!(
        mbps < 0.05,
        "fail closed: {mbps:.3} Mbps after the relay died"
    );
}
