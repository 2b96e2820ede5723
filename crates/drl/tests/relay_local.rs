//! `drl relay` with a local limit on real kernel TCP: one site's four
//! bulk flows through a relay limited to 2 Mbps reach 2 Mbps ±10 % over
//! a 5 s window and never more than 2 Mbps + 10 % over the whole measured
//! run; SIGTERM stops the relay and removes its rules.
//!
//! Reaching the limit is a wait on the condition (under a hang guard), not
//! a rate over a fixed stretch of wall time; the upper bound is over the
//! test's own measured interval, so a slow machine only loosens it.

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
    wait_for(60, "the relay's first drops", || {
        relay_metric(&r, "drl_relay_packets_total", &["verdict=\"dropped\""]).unwrap_or(0.0) > 0.0
    });
    let (t0, b0) = (std::time::Instant::now(), from_site(&sink, &topo, 1));
    eventually_rates(
        "4 TCP flows at the 2 Mbps local limit",
        5.0,
        || vec![from_site(&sink, &topo, 1)],
        |r| {
            if (1.8..=2.2).contains(&r[0]) {
                Ok(())
            } else {
                Err(format!("{:.3} Mbps over 5 s", r[0]))
            }
        },
    );
    // One more 5 s, then the whole run since the first drops: never over
    // the limit + 10% (sink goodput; the limit counts IP bytes).
    std::thread::sleep(std::time::Duration::from_secs(5));
    let (b1, dt) = (from_site(&sink, &topo, 1), t0.elapsed().as_secs_f64());
    flows.stop();
    let mbps = (b1 - b0) as f64 * 8.0 / dt / 1e6;
    assert!(
        mbps <= 2.2,
        "4 TCP flows through a 2 Mbps local limit got {mbps:.3} Mbps over {dt:.1} s\n{}",
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
    // Prometheus's own parser reads the page and the same counter.
    let families = drl_test_kit::prometheus::parse(&m);
    assert_eq!(
        drl_test_kit::prometheus::value(
            &families,
            "drl_relay_packets_total",
            &[("verdict", "dropped")]
        ),
        Some(dropped)
    );
    // SIGTERM: clean exit, rules gone.
    let status = r.stop().expect("the relay was running");
    assert!(status.success(), "relay exit status {status}: {}", r.log());
    let rules = iptables_rules(&topo.sites[0].ns);
    assert!(
        !rules.contains("DRL-RELAY"),
        "rules left after SIGTERM:\n{rules}"
    );
}
