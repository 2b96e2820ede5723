//! `drl relay` with a local limit on real kernel TCP: one site's four
//! bulk flows through a relay limited to 2 Mbps hold 2 Mbps ±10 % over
//! 10 s; SIGTERM stops the relay and removes its rules.

mod relay_net;

use relay_net::*;

#[test]
fn one_site_limited_locally_holds_2_mbps() {
    let dir = tempfile::tempdir().unwrap();
    let topo = topology("rl", 1);
    let yaml = format!(
        "queue: 0\nchain: OUTPUT\ndelay_ms: 20\nlisten: {METRICS}\nalgorithm: ctb\nscope: local\n{}",
        class("2Mbit/s")
    );
    let mut r = relay(&topo.sites[0].ns, dir.path(), "local", &yaml);
    let rules = iptables_rules(&topo.sites[0].ns);
    assert!(
        rules.contains("-A OUTPUT -j DRL-RELAY-0")
            && rules.contains("--queue-num 0 --queue-bypass"),
        "{rules}"
    );
    let sink = sink(&topo);
    let flows = senders(&topo, 1, 4);
    // Warm up: the flows are up and the relay has dropped (the limit
    // binds).
    wait_for(10, "the relay's first drops", || {
        relay_metric(&r, "drl_relay_packets_total", &["verdict=\"dropped\""]).unwrap_or(0.0) > 0.0
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mbps = rate_mbps(10.0, || from_site(&sink, &topo, 1));
    flows.stop();
    assert!(
        (1.8..=2.2).contains(&mbps),
        "4 TCP flows through a 2 Mbps local limit got {mbps:.3} Mbps over 10 s\n{}",
        r.log()
    );
    let m = r.metrics().unwrap();
    let allowed = metric(&m, "drl_relay_bytes_total", &["verdict=\"allowed\""]).unwrap();
    let dropped = metric(&m, "drl_relay_packets_total", &["verdict=\"dropped\""]).unwrap();
    assert!(dropped > 10.0, "the limit dropped packets: {dropped}");
    assert!(allowed > 2_000_000.0, "allowed bytes counted: {allowed}");
    assert_eq!(
        metric(&m, "drl_relay_queue_kernel_dropped_total", &[]),
        Some(0.0),
        "{m}"
    );
    assert_eq!(metric(&m, "drl_relay_queue_overruns_total", &[]), Some(0.0));
    // SIGTERM: clean exit, rules gone.
    let status = r.stop().expect("the relay was running");
    assert!(status.success(), "relay exit status {status}: {}", r.log());
    let rules = iptables_rules(&topo.sites[0].ns);
    assert!(
        !rules.contains("DRL-RELAY"),
        "rules left after SIGTERM:\n{rules}"
    );
}
