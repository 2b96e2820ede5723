//! `scope: orbit` end-to-end: five real `drl serve` processes on loopback
//! form an Orbit ring; load goes through `POST /v1/check` on every node; one
//! node is killed (and later restarted) and another is cut off from the
//! ring mid-run. The invariant is asserted exactly: for every window, the
//! admissions of all nodes sum to at most the cap.
//!
//! The ring traffic goes through a UDP relay in this test process: node `i`
//! binds its own socket, and every node's `orbit.ring` lists the relay's
//! socket for node `i`. The relay forwards each datagram to the node it was
//! addressed to, and drops everything to and from a partitioned node, so
//! the partitioned node keeps serving HTTP while it hears nobody and nobody
//! hears it (a real network partition of one node).
//!
//! Two independent counts of admissions per window:
//! - client side: every `allowed` result, attributed to the window the
//!   server charged it to. The server's window is `now / window` on the
//!   same system clock as this test, and every result reports
//!   `reset_after_ms` (time to the window's end, rounded up), so the window
//!   end lies in `(sent + reset - 1 ms, received + reset]`: exactly one
//!   window boundary in that interval unless a request took a whole window;
//! - server side: `drl_decisions_total{limit="capped",result="allowed"}`
//!   scraped from every node at each window boundary while no request is
//!   in flight (the load generator is gated: it sends only inside a window
//!   and stops for the scrape), so a delta between two scrapes is exactly
//!   what the nodes admitted for the requests of that window.
//!
//! The two counts must agree exactly per node and gate period, and both
//! must stay within the cap.
//!
//! No verdict depends on how fast this machine is. The cap is an upper
//! bound per window, which holds however slow the run. The scripted events
//! are placed relative to conditions, not to fixed windows: the ring runs
//! healthy until a window admitted half the cap, and after the heal until
//! a window admitted half the cap with the restarted node taking part
//! (each under a hang guard). A request the server charged to a later
//! window than the one it was sent in (a slow answer) is counted in the
//! window charged, and is reported, not failed.

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{DEADLINE, Drl, http_get, http_request, metric};

/// How long the run may stay in one phase before the test fails (doubled
/// for the whole run): a hang guard, not a verdict.
const HANG_GUARD: Duration = Duration::from_secs(60);

const NODES: usize = 5;
const CAP: u64 = 1000;
const WINDOW_MS: u64 = 3000;
const WINDOW: u64 = WINDOW_MS * 1_000_000;
/// The load generator is quiet this long after a window starts and before
/// it ends, so that the boundary scrape sees no request in flight.
const GAP: u64 = 300_000_000;
/// Checks per HTTP request, and the pause between two batches of a worker.
const BATCH: usize = 10;
const PACE: Duration = Duration::from_millis(20);
const ALLOWED: &str = "drl_decisions_total{limit=\"capped\",result=\"allowed\"}";

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// Sleeps until the system clock reaches `t` (ns since the epoch).
fn sleep_until(t: u64) {
    loop {
        let now = unix_ns();
        if now >= t {
            return;
        }
        std::thread::sleep(Duration::from_nanos((t - now).min(50_000_000)));
    }
}

/// A free UDP port on loopback (bound then released).
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut esc = false;
    for c in s.chars() {
        match (esc, c) {
            (false, '\u{1b}') => esc = true,
            (true, c) if c.is_ascii_alphabetic() => esc = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// The UDP relay between the ring members (see the module doc).
struct Relay {
    /// The relay's socket for each node: what the ring lists.
    fronts: Vec<SocketAddr>,
    /// Slot + 1 of the partitioned node; 0: none.
    partitioned: Arc<AtomicU32>,
    dropped: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    fn start(backs: &[SocketAddr]) -> Relay {
        let partitioned = Arc::new(AtomicU32::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut fronts = Vec::new();
        let mut threads = Vec::new();
        for (slot, &back) in backs.iter().enumerate() {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            fronts.push(sock.local_addr().unwrap());
            let backs = backs.to_vec();
            let (partitioned, dropped, forwarded, stop) = (
                partitioned.clone(),
                dropped.clone(),
                forwarded.clone(),
                stop.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    let p = partitioned.load(Ordering::SeqCst) as usize;
                    let cut = p != 0 && (p - 1 == slot || backs[p - 1] == from);
                    if cut {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        // The node may be down (killed): best effort, like UDP.
                        let _ = sock.send_to(&buf[..n], back);
                        forwarded.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        Relay {
            fronts,
            partitioned,
            dropped,
            forwarded,
            stop,
            threads,
        }
    }

    fn partition(&self, slot: Option<usize>) {
        let v = slot.map_or(0, |s| s as u32 + 1);
        self.partitioned.store(v, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn node_yaml(slot: usize, back: SocketAddr, ring: &[SocketAddr], key: &std::path::Path) -> String {
    let mut members = String::new();
    for (j, a) in ring.iter().enumerate() {
        members.push_str(&format!("    - {{id: {}, addr: \"{a}\"}}\n", j + 1));
    }
    format!(
        r#"listen:
  http: 127.0.0.1:0
  grpc: null
limits:
  - name: capped
    algorithm: fixed-window
    quota: {CAP}/{WINDOW_MS}ms
    scope: orbit
orbit:
  node_id: {id}
  bind: "{back}"
  key: {{file: "{key}"}}
  epoch_ms: 100
  heartbeat_ms: 100
  suspect_after_ms: 600
  ring:
{members}"#,
        id = slot + 1,
        key = key.display(),
    )
}

/// Who may send now: requests are only sent while `open` is the current
/// window, the slot is not paused, and the window is not near its end.
struct Gate {
    open: u64,
    paused: [bool; NODES],
    inflight: [usize; NODES],
}

/// Counts of one (slot, gate period, window the server charged).
#[derive(Default, Clone, Copy, Debug)]
struct Count {
    allowed: u64,
    denied: u64,
}

#[derive(Default)]
struct Records {
    /// (slot, period the request was sent in, charged window) -> counts.
    counts: BTreeMap<(usize, u64, u64), Count>,
    /// Allowed results whose window was ambiguous (a request that took a
    /// whole window); counted in every candidate window.
    ambiguous: u64,
    errors: Vec<String>,
    requests: u64,
    /// (slot, period the request was sent in) -> allowed results, each
    /// counted once.
    by_period: BTreeMap<(usize, u64), u64>,
}

struct Shared {
    gate: Mutex<Gate>,
    idle: Condvar,
    urls: Mutex<Vec<String>>,
    records: Mutex<Records>,
    stop: AtomicBool,
}

/// The windows whose end lies in `(lo, hi]`.
fn windows_ending_in(lo: u64, hi: u64) -> Vec<u64> {
    let first = lo / WINDOW + 1;
    let last = hi / WINDOW;
    (first..=last).map(|k| k - 1).collect()
}

fn worker(slot: usize, shared: Arc<Shared>) {
    let body = {
        let one = r#"{"limit":"capped","key":"tenant","cost":1}"#;
        format!(r#"{{"requests":[{}]}}"#, [one; BATCH].join(","))
    };
    while !shared.stop.load(Ordering::SeqCst) {
        let now = unix_ns();
        let (w, pos) = (now / WINDOW, now % WINDOW);
        let period = {
            let mut g = shared.gate.lock().unwrap();
            if g.open == w && !g.paused[slot] && (GAP..WINDOW - GAP).contains(&pos) {
                g.inflight[slot] += 1;
                Some(w)
            } else {
                None
            }
        };
        let Some(period) = period else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let url = shared.urls.lock().unwrap()[slot].clone();
        let sent = unix_ns();
        let resp = http_request(
            "POST",
            &url,
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        let received = unix_ns();
        {
            let mut r = shared.records.lock().unwrap();
            r.requests += 1;
            match resp {
                Some((200, _, text)) => {
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let results = v["results"].as_array().expect("results");
                    assert_eq!(results.len(), BATCH, "{text}");
                    for res in results {
                        let allowed = res["allowed"].as_bool().expect("allowed");
                        if allowed {
                            *r.by_period.entry((slot, period)).or_default() += 1;
                        }
                        let reset = res["reset_after_ms"].as_u64().expect("reset_after_ms");
                        let reset = reset * 1_000_000;
                        let ws = windows_ending_in(sent + reset - 1_000_000, received + reset);
                        if ws.is_empty() {
                            r.errors.push(format!(
                                "slot {slot}: no window ends in ({sent} + {reset} - 1 ms, {received} + {reset}]"
                            ));
                        }
                        if ws.len() > 1 && allowed {
                            r.ambiguous += 1;
                        }
                        for w in ws {
                            let c = r.counts.entry((slot, period, w)).or_default();
                            if allowed {
                                c.allowed += 1;
                            } else {
                                c.denied += 1;
                            }
                        }
                    }
                }
                other => r
                    .errors
                    .push(format!("slot {slot}: POST {url} failed: {other:?}")),
            }
        }
        shared.gate.lock().unwrap().inflight[slot] -= 1;
        shared.idle.notify_all();
        std::thread::sleep(PACE);
    }
}

/// Waits until none of `slots` has a request in flight (the caller has
/// closed the gate for them).
fn wait_idle(shared: &Shared, slots: &[usize]) {
    let start = Instant::now();
    let mut g = shared.gate.lock().unwrap();
    while slots.iter().any(|&s| g.inflight[s] > 0) {
        assert!(start.elapsed() < DEADLINE, "requests still in flight");
        g = shared
            .idle
            .wait_timeout(g, Duration::from_millis(50))
            .unwrap()
            .0;
    }
}

fn scrape_allowed(d: &Drl) -> u64 {
    let (status, text) = http_get(&d.url("/metrics")).expect("GET /metrics");
    assert_eq!(status, 200);
    metric(&text, ALLOWED).map_or(0, |v| v as u64)
}

/// Per slot: the process (None while killed) and the allowed count of
/// earlier incarnations.
struct Slot {
    drl: Option<Drl>,
    earlier: u64,
}

impl Slot {
    fn cumulative(&self) -> u64 {
        self.earlier + self.drl.as_ref().map_or(0, scrape_allowed)
    }
}

#[test]
fn orbit_five_serve_nodes_kill_one_partition_one_never_exceed_cap() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "a-test-cluster-key-of-32-bytes!!\n").unwrap();
    let backs: Vec<SocketAddr> = (0..NODES)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_udp_port())))
        .collect();
    let relay = Relay::start(&backs);
    let yamls: Vec<String> = (0..NODES)
        .map(|i| node_yaml(i, backs[i], &relay.fronts, &key))
        .collect();
    let mut slots: Vec<Slot> = yamls
        .iter()
        .map(|y| Slot {
            drl: Some(Drl::start(y)),
            earlier: 0,
        })
        .collect();
    let started = unix_ns();
    // Every node registered the limit when it loaded its config, and sits
    // out that window (restart rule): load starts in the next one.
    let w1 = started / WINDOW + 1;
    let shared = Arc::new(Shared {
        gate: Mutex::new(Gate {
            open: w1,
            paused: [false; NODES],
            inflight: [0; NODES],
        }),
        idle: Condvar::new(),
        urls: Mutex::new(
            slots
                .iter()
                .map(|s| s.drl.as_ref().unwrap().url("/v1/check"))
                .collect(),
        ),
        records: Mutex::new(Records::default()),
        stop: AtomicBool::new(false),
    });
    let workers: Vec<_> = (0..NODES)
        .map(|s| {
            let sh = shared.clone();
            std::thread::spawn(move || worker(s, sh))
        })
        .collect();

    // Boundary scrapes: cumulative allowed per slot when period `w` opened.
    let mut scrapes: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    scrapes.insert(w1, slots.iter().map(Slot::cumulative).collect());
    let (killed, cut) = (2usize, 0usize);
    let at = |w: u64, ms: u64| w * WINDOW + ms * 1_000_000;
    let all: Vec<usize> = (0..NODES).collect();
    // Allowed per node in window `w`, by the window the server charged.
    let charged = |w: u64| -> [u64; NODES] {
        let r = shared.records.lock().unwrap();
        let mut out = [0; NODES];
        for (&(slot, _, cw), c) in &r.counts {
            if cw == w {
                out[slot] += c.allowed;
            }
        }
        out
    };
    // Phases: healthy until a window admitted half the cap; then kill (in
    // the next window), partition (the one after), a full partitioned
    // window, heal and restart; then recovered until a window admitted
    // half the cap with the restarted node taking part.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Phase {
        Healthy,
        Kill,
        Partition,
        Partitioned,
        Heal,
        Recovering,
    }
    let mut phase = Phase::Healthy;
    let mut phases: BTreeMap<u64, Phase> = BTreeMap::new();
    let mut w = w1;
    loop {
        phases.insert(w, phase);
        match phase {
            Phase::Kill => {
                // Kill node 3 mid-window. Its requests are paused first so
                // that none is in flight (an unanswered request may have
                // been admitted), and its last count is scraped.
                sleep_until(at(w, 1200));
                shared.gate.lock().unwrap().paused[killed] = true;
                wait_idle(&shared, &[killed]);
                let s = &mut slots[killed];
                s.earlier = s.cumulative();
                let mut d = s.drl.take().unwrap();
                d.child.kill().unwrap();
                d.wait_exit();
                eprintln!("window {w}: killed node {}", killed + 1);
            }
            Phase::Partition => {
                sleep_until(at(w, 600));
                relay.partition(Some(cut));
                eprintln!("window {w}: partitioned node {}", cut + 1);
            }
            Phase::Heal => {
                sleep_until(at(w, 500));
                relay.partition(None);
                eprintln!("window {w}: healed node {}", cut + 1);
                let d = Drl::start(&yamls[killed]);
                assert_eq!(scrape_allowed(&d), 0, "a fresh process starts at 0");
                shared.urls.lock().unwrap()[killed] = d.url("/v1/check");
                slots[killed].drl = Some(d);
                shared.gate.lock().unwrap().paused[killed] = false;
                eprintln!(
                    "window {w}: restarted node {} at +{} ms",
                    killed + 1,
                    (unix_ns() % WINDOW) / 1_000_000
                );
            }
            _ => {}
        }
        // End of the window: close the gate (workers stop by themselves
        // GAP before the end), wait until nothing is in flight, scrape.
        sleep_until((w + 1) * WINDOW - GAP);
        shared.gate.lock().unwrap().open = u64::MAX;
        wait_idle(&shared, &all);
        scrapes.insert(w + 1, slots.iter().map(Slot::cumulative).collect());
        let got = charged(w);
        let sum: u64 = got.iter().sum();
        let next = match phase {
            Phase::Healthy if sum >= CAP / 2 => Phase::Kill,
            Phase::Kill => Phase::Partition,
            Phase::Partition => Phase::Partitioned,
            Phase::Partitioned => Phase::Heal,
            Phase::Heal => Phase::Recovering,
            Phase::Recovering if sum >= CAP / 2 && got[killed] >= 1 => break,
            p => p,
        };
        assert!(
            unix_ns() - at(w1, 0) < HANG_GUARD.as_nanos() as u64 * 2,
            "window {w}, {phase:?}: never left the phase ({got:?} admitted)"
        );
        phase = next;
        w += 1;
        shared.gate.lock().unwrap().open = w;
    }
    shared.stop.store(true, Ordering::SeqCst);
    shared.gate.lock().unwrap().open = u64::MAX;
    for t in workers {
        t.join().unwrap();
    }
    let last = w;

    // The partition was real: both sides saw it.
    let saw = |slot: usize, peer: usize| {
        slots[slot]
            .drl
            .as_ref()
            .unwrap()
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| {
                let l = strip_ansi(l);
                l.contains("suspected down") && l.contains(&format!("peer={}", peer + 1))
            })
    };
    assert!(saw(1, cut), "node 2 never suspected the partitioned node 1");
    assert!(saw(cut, 1), "the partitioned node 1 never suspected node 2");
    assert!(saw(1, killed), "node 2 never suspected the killed node 3");
    assert!(relay.dropped.load(Ordering::Relaxed) > 0);
    assert!(relay.forwarded.load(Ordering::Relaxed) > 0);

    let r = shared.records.lock().unwrap();
    assert!(r.errors.is_empty(), "request errors: {:#?}", r.errors);
    // Per window: admissions over all nodes, client side (by charged window).
    let mut by_window: BTreeMap<u64, [u64; NODES]> = BTreeMap::new();
    let mut clean: BTreeMap<u64, bool> = BTreeMap::new();
    for (&(slot, period, cw), c) in &r.counts {
        by_window.entry(cw).or_default()[slot] += c.allowed;
        if cw != period {
            clean.insert(period, false);
        }
    }
    let mut report = String::new();
    let server_of = |w: u64| -> Vec<u64> {
        let (before, after) = (&scrapes[&w], &scrapes[&(w + 1)]);
        (0..NODES).map(|s| after[s] - before[s]).collect()
    };
    for w in w1..=last {
        let client = by_window.get(&w).copied().unwrap_or_default();
        let server = server_of(w);
        let requested: u64 = r
            .counts
            .iter()
            .filter(|((_, p, _), _)| *p == w)
            .map(|(_, c)| c.allowed + c.denied)
            .sum();
        report.push_str(&format!(
            "window {w} {:?}: client {:?} = {} | metrics {:?} = {} | decisions {requested}{}\n",
            phases[&w],
            client,
            client.iter().sum::<u64>(),
            server,
            server.iter().sum::<u64>(),
            if clean.get(&w).copied().unwrap_or(true) {
                ""
            } else {
                " (a request charged to a later window)"
            },
        ));
    }
    eprintln!("cap {CAP} per {WINDOW_MS} ms, admitted per window:\n{report}");
    for w in w1..=last {
        let client = by_window.get(&w).copied().unwrap_or_default();
        // The invariant, client side: every allowed result, by the window
        // the server charged it to.
        let total: u64 = client.iter().sum();
        assert!(
            total <= CAP,
            "window {w}: {total} admitted > cap {CAP}\n{report}"
        );
        // Exact agreement: the metrics count exactly what the clients saw
        // of the requests sent in the period between two scrapes.
        let server = server_of(w);
        let sent: Vec<u64> = (0..NODES)
            .map(|s| r.by_period.get(&(s, w)).copied().unwrap_or(0))
            .collect();
        assert_eq!(server, sent, "window {w}\n{report}");
        // The invariant on the metrics, where the period is the window.
        if clean.get(&w).copied().unwrap_or(true) {
            let sum: u64 = server.iter().sum();
            assert!(
                sum <= CAP,
                "window {w}: metrics sum {sum} > cap {CAP}\n{report}"
            );
        }
    }
    let win = |w: u64| by_window.get(&w).copied().unwrap_or_default();
    let phase_window = |p: Phase| -> u64 {
        *phases
            .iter()
            .find(|(_, q)| **q == p)
            .expect("every phase ran")
            .0
    };
    // The partitioned node kept answering from its local allowance, and the
    // rest of the ring kept admitting without it (and without node 3).
    let part = phase_window(Phase::Partitioned);
    assert!(
        win(part)[cut] >= 1,
        "the partitioned node admitted nothing\n{report}"
    );
    assert!(
        win(part).iter().sum::<u64>() > win(part)[cut],
        "the rest of the ring admitted nothing\n{report}"
    );
    // The restarted node sits out the window it started in, then takes
    // part (the recovered window, checked above when the loop ended).
    assert_eq!(
        win(phase_window(Phase::Heal))[killed],
        0,
        "restart rule\n{report}"
    );
    eprintln!(
        "{} requests, {} ambiguous, relay forwarded {} dropped {}, {:?}",
        r.requests,
        r.ambiguous,
        relay.forwarded.load(Ordering::Relaxed),
        relay.dropped.load(Ordering::Relaxed),
        t0.elapsed()
    );
}

#[test]
fn orbit_example_configs_pass_config_check() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/orbit");
    for n in 1..=5 {
        let path = dir.join(format!("node{n}.yaml"));
        let (ok, out) = common::config_check(&path);
        assert!(ok, "{}: {out}", path.display());
        assert!(out.contains("ok (1 limits"), "{out}");
    }
    let script = std::fs::read_to_string(dir.join("run.sh")).unwrap();
    assert!(script.contains("serve --config \"node$n.yaml\""));
}

#[test]
fn orbit_config_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, yaml: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, yaml).unwrap();
        let (ok, out) = common::config_check(&p);
        assert!(!ok, "{name} should be refused: {out}");
        out
    };
    let orbit = r#"orbit:
  node_id: 1
  bind: 127.0.0.1:0
  key: {env: DRL_TEST_KEY}
  epoch_ms: 100
  ring:
    - {id: 1, addr: 127.0.0.1:9381}
    - {id: 2, addr: 127.0.0.1:9382}
"#;
    // scope: orbit without an orbit: section: at the scope line.
    let out = check(
        "no-section.yaml",
        "limits:\n  - name: a\n    algorithm: fixed-window\n    quota: 10/s\n    scope: orbit\n",
    );
    assert!(
        out.contains(":5:5:") && out.contains("no `orbit:` section"),
        "{out}"
    );
    // A window shorter than one lap (100 ms x 2 nodes): at the limit.
    let out = check(
        "short.yaml",
        &format!(
            "limits:\n  - name: x\n    algorithm: fixed-window\n    quota: 10/150ms\n    scope: orbit\n{orbit}"
        ),
    );
    assert!(
        out.contains(":2:5:") && out.contains("shorter than one lap"),
        "{out}"
    );
    // Not a fixed window: at the limit.
    let out = check(
        "gcra.yaml",
        &format!("limits:\n  - name: g\n    quota: 10/s\n    scope: orbit\n{orbit}"),
    );
    assert!(
        out.contains(":2:5:") && out.contains("fixed-window"),
        "{out}"
    );
    // max_keys above the ring's bound.
    let out = check(
        "keys.yaml",
        &format!(
            "limits:\n  - name: k\n    algorithm: fixed-window\n    quota: 10/s\n    scope: orbit\n    max_keys: 5000\n{orbit}  max_keys: 100\n"
        ),
    );
    assert!(
        out.contains(":2:5:") && out.contains("orbit.max_keys"),
        "{out}"
    );
    // An invalid section: node_id not in the ring, at `orbit:`.
    let bad = orbit.replace("node_id: 1", "node_id: 7");
    let out = check(
        "ring.yaml",
        &format!(
            "limits:\n  - name: r\n    algorithm: fixed-window\n    quota: 10/s\n    scope: orbit\n{bad}"
        ),
    );
    assert!(
        out.contains(":6:1:") && out.contains("not in orbit.ring"),
        "{out}"
    );
}

/// One-node ring config with the given limits (`name: cap` per second) and
/// epoch.
fn single_node_yaml(limits: &[(&str, u64)], epoch_ms: u64, bind: SocketAddr, key: &str) -> String {
    let mut y = String::from("limits:\n");
    for (name, cap) in limits {
        y.push_str(&format!(
            "  - name: {name}\n    algorithm: fixed-window\n    quota: {cap}/s\n    scope: orbit\n"
        ));
    }
    y.push_str(&format!(
        "orbit:\n  node_id: 1\n  bind: \"{bind}\"\n  key: {{inline: \"{key}\"}}\n  epoch_ms: {epoch_ms}\n  ring:\n    - {{id: 1, addr: \"{bind}\"}}\n"
    ));
    y
}

/// Sends `n` checks of `limit` one by one; returns the admissions per
/// window the server charged them to.
fn admitted_per_window(d: &Drl, limit: &str, n: usize) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    let body = format!(r#"{{"requests":[{{"limit":"{limit}","key":"k","cost":1}}]}}"#);
    for _ in 0..n {
        let sent = unix_ns();
        let (s, _, v) = common::post_json(&d.url("/v1/check"), &body);
        let received = unix_ns();
        assert_eq!(s, 200, "{v}");
        let r = &v["results"][0];
        let reset = r["reset_after_ms"].as_u64().unwrap() * 1_000_000;
        let window = 1_000_000_000;
        let first = (sent + reset - 1_000_000) / window + 1;
        let last = (received + reset) / window;
        assert!(first <= last, "no window boundary for {v}");
        if r["allowed"].as_bool().unwrap() {
            // Conservative: an ambiguous admission counts in every window.
            for w in first..=last {
                *out.entry(w).or_default() += 1;
            }
        }
    }
    out
}

#[test]
fn orbit_reload_adds_limits_and_refuses_a_changed_section() {
    let bind = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let key = "reload-test-cluster-key-0123456789";
    let d = Drl::start(&single_node_yaml(&[("a", 5)], 100, bind, key));
    // A limit sits out the window it was registered in, then admits.
    common::wait_for("limit a to admit", || {
        !admitted_per_window(&d, "a", 1).is_empty()
    });
    let a = admitted_per_window(&d, "a", 20);
    assert!(a.values().all(|&n| n <= 5), "{a:?}");

    // A changed orbit: section needs a restart: refused, old config serves.
    std::fs::write(&d.config, single_node_yaml(&[("a", 5)], 50, bind, key)).unwrap();
    d.signal("HUP");
    let refused = d.wait_log("drl serve: config reload refused");
    assert!(refused.contains("orbit"), "{refused}");

    // Adding an orbit limit by reload works; the kept one keeps its state.
    std::fs::write(
        &d.config,
        single_node_yaml(&[("a", 5), ("b", 3)], 100, bind, key),
    )
    .unwrap();
    d.signal("HUP");
    let ok = d.wait_log("drl serve: config reloaded");
    assert!(ok.contains("2 limits, 1 kept"), "{ok}");
    common::wait_for("limit b to admit", || {
        !admitted_per_window(&d, "b", 1).is_empty()
    });
    let b = admitted_per_window(&d, "b", 20);
    assert!(b.values().all(|&n| n <= 3), "{b:?}");
    assert!(b.values().sum::<u64>() >= 1, "{b:?}");
}
