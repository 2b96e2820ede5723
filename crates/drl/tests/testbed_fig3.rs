//! `drl testbed fig3` end to end, short: real namespaces, real relays,
//! real kernel TCP. The regression it guards: the testbed once added the
//! flows' RTT at the senders' OUTPUT hook, where a held packet counts
//! against its socket's TCP Small Queues budget; every flow was then
//! capped near 1 Mbit/s at 40 ms, and Figure 3 measured that cap instead
//! of the limiter. With a 20 Mbit/s limit, the 10 flows must reach it,
//! and the relays must be the ones holding them there.

use std::process::Command;

#[test]
fn fig3_is_bound_by_the_limit_not_by_the_testbed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fig3");
    let prefix = format!("tf{}", std::process::id() % 100_000);
    let run = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args([
            "testbed",
            "fig3",
            "--algorithms",
            "grd",
            "--limit",
            "20Mbit/s",
        ])
        .args(["--duration", "9", "--warmup", "4", "--prefix", &prefix])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running drl testbed fig3");
    let _ = Command::new(env!("CARGO_BIN_EXE_drl"))
        .args(["testbed", "cleanup", "--prefix", &prefix])
        .output();
    let text =
        String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "drl testbed fig3 failed (it needs root: namespaces, veth, iptables):\n{text}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let grd = &summary["algorithms"]["grd"];
    let aggregate = grd["aggregate_mbps"].as_f64().unwrap();
    // 20 Mbit/s of IP bytes carries at most 19.3 Mbps of TCP goodput.
    assert!(
        (16.0..=21.0).contains(&aggregate),
        "10 flows against a 20 Mbit/s GRD limit: {aggregate:.3} Mbps\n{summary:#}\n{text}"
    );
    let drops: Vec<f64> = grd["relay_drop_fraction"]
        .as_array()
        .unwrap_or_else(|| panic!("relay_drop_fraction missing: {summary:#}"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(drops.len(), 2, "one limiting relay per site: {drops:?}");
    assert!(
        drops.iter().all(|&d| d > 0.0 && d < 0.5),
        "both sites' relays dropped (the limit binds): {drops:?}"
    );
    assert_eq!(summary["parameters"]["limiter_rtt_ms"].as_f64(), Some(40.0));
    for f in ["summary.json", "rates.csv", "fig3.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
}
