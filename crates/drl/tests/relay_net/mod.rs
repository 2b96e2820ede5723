//! Shared by the `relay_*` tests: real namespaces, real `drl relay`
//! processes, real kernel TCP (root needed; nothing is skipped: a test
//! that cannot build its namespaces fails and says why).

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use drl_relay::netns::{RelayProcess, Topology};
pub use drl_relay::traffic::{Senders, Sink, in_netns, metric};

/// The sink's port.
pub const PORT: u16 = 5001;
/// The relays' gossip port.
pub const GOSSIP_PORT: u16 = 7946;
/// The relays' metrics address (inside each namespace).
pub const METRICS: &str = "127.0.0.1:9464";

/// A namespace prefix unique to this test process and `tag`.
pub fn prefix(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100_000)
}

/// The drl binary.
pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_drl"))
}

/// A topology of `sites`; panics with the reason if it cannot be built.
pub fn topology(tag: &str, sites: usize) -> Topology {
    let p = prefix(tag);
    let _ = drl_relay::netns::cleanup_prefix(&format!("{p}-"));
    Topology::build(&p, sites, None).unwrap_or_else(|e| {
        panic!("cannot build the test's network namespaces (run the tests as root): {e}")
    })
}

/// Writes `yaml` to `dir/name` and starts a relay with it in `ns`.
pub fn relay(ns: &drl_relay::netns::Netns, dir: &Path, name: &str, yaml: &str) -> RelayProcess {
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(&cfg, yaml).unwrap();
    RelayProcess::start(
        ns,
        &exe(),
        &cfg,
        METRICS.parse().unwrap(),
        &dir.join(format!("{name}.log")),
    )
    .unwrap_or_else(|e| panic!("starting relay {name}: {e}"))
}

/// The class every test limits: TCP to the sink.
pub fn class(quota: &str) -> String {
    format!(
        "classes:\n  - name: bulk\n    match: {{ dst: 10.77.0.0/16, protocol: tcp, dport: {PORT} }}\n    \
         quota: {quota}\n"
    )
}

/// A gossip relay's config for site `i` of `n`. Its 20 ms delay line sits
/// on the senders' OUTPUT hook, where a held packet counts against its
/// socket's TCP Small Queues budget: that caps each flow near 2 Mbit/s
/// (3 KB per 20 ms), above every per-flow share these tests limit to, so
/// the limit, not the cap, binds (docs/relay.md, `delay_ms`).
pub fn gossip_yaml(
    i: usize,
    n: usize,
    algorithm: &str,
    quota: &str,
    key: &Path,
    extra: &str,
) -> String {
    let seeds: Vec<String> = (1..=n)
        .map(|j| format!("10.77.{j}.1:{GOSSIP_PORT}"))
        .collect();
    format!(
        "queue: 0\nchain: OUTPUT\ndelay_ms: 20\nlisten: {METRICS}\nalgorithm: {algorithm}\nscope: gossip\n\
         {extra}cluster:\n  node_id: {i}\n  bind: 10.77.{i}.1:{GOSSIP_PORT}\n  seeds: [{}]\n  key_file: {}\n{}",
        seeds.join(", "),
        key.display(),
        class(quota)
    )
}

/// Writes a cluster key into `dir`.
pub fn key(dir: &Path) -> PathBuf {
    let p = dir.join("cluster.key");
    std::fs::write(&p, b"drl relay test cluster key, 32 b").unwrap();
    p
}

/// Starts a sink in the receiver's namespace.
pub fn sink(topo: &Topology) -> Sink {
    in_netns(topo.rx.name(), || {
        Sink::bind(SocketAddr::from(([0, 0, 0, 0], PORT)))
    })
    .expect("sink in the receiver namespace")
}

/// Starts `flows` bulk TCP flows from site `i` (1-based) to the sink.
pub fn senders(topo: &Topology, i: usize, flows: usize) -> Senders {
    let site = &topo.sites[i - 1];
    let dst = SocketAddr::new(IpAddr::V4(site.sink_addr), PORT);
    in_netns(site.ns.name(), move || {
        Senders::start(dst, flows, Some("reno"), None)
    })
    .expect("senders in the site namespace")
}

/// Bytes the sink got from site `i`.
pub fn from_site(sink: &Sink, topo: &Topology, i: usize) -> u64 {
    let ip = IpAddr::V4(topo.sites[i - 1].addr);
    sink.bytes_from(|a| a == ip)
}

/// Polls `f` every 50 ms until it is true; panics with `what` after
/// `secs`.
pub fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The rate (Mbps) of `bytes` over `secs` seconds of sink counters:
/// samples `f` now and after `secs`.
pub fn rate_mbps(secs: f64, mut f: impl FnMut() -> u64) -> f64 {
    let (t0, b0) = (Instant::now(), f());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (b1, dt) = (f(), t0.elapsed().as_secs_f64());
    (b1 - b0) as f64 * 8.0 / dt / 1e6
}

/// The relay's value of metric `name` with `labels`.
pub fn relay_metric(r: &RelayProcess, name: &str, labels: &[&str]) -> Option<f64> {
    metric(&r.metrics().ok()?, name, labels)
}

/// The filter table rules of namespace `ns` (`iptables -S`).
pub fn iptables_rules(ns: &drl_relay::netns::Netns) -> String {
    let out = ns
        .command(&["iptables", "-w", "-S"])
        .output()
        .expect("iptables -S");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How long a wait on a condition may take before the test fails: a hang
/// guard, not a verdict (a slow machine only makes the wait longer).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// Measures consecutive windows of `secs` seconds of the sink counters
/// `f` (one value per site or series, Mbps over the window as this test's
/// clock measured it) until `check` accepts one, and returns it; panics
/// after [`HANG_GUARD`] with the windows' reasons. A liveness condition
/// ("the relays get there"), not a rate over a fixed stretch of wall time.
pub fn eventually_rates(
    what: &str,
    secs: f64,
    mut f: impl FnMut() -> Vec<u64>,
    mut check: impl FnMut(&[f64]) -> Result<(), String>,
) -> Vec<f64> {
    let start = Instant::now();
    let mut why = Vec::new();
    loop {
        let (t0, b0) = (Instant::now(), f());
        std::thread::sleep(Duration::from_secs_f64(secs));
        let (b1, dt) = (f(), t0.elapsed().as_secs_f64());
        let r: Vec<f64> = b1
            .iter()
            .zip(&b0)
            .map(|(b1, b0)| (b1 - b0) as f64 * 8.0 / dt / 1e6)
            .collect();
        match check(&r) {
            Ok(()) => {
                eprintln!("{what}: held after {:?}: {r:.3?} Mbps", start.elapsed());
                return r;
            }
            Err(e) => {
                eprintln!("{what}: {e}");
                why.push(e);
            }
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "{what}: no window held within {HANG_GUARD:?}: {why:#?}"
        );
    }
}
