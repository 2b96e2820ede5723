//! Three real `drl serve` processes sharing one `scope: gossip` limit of
//! [`LIMIT`] req/s, and an open-loop HTTP load on each, counted per node in
//! 100 ms buckets. Used by `serve_gossip.rs` and `serve_gossip_faults.rs`.
//!
//! Each node's load is a client thread posting `POST /v1/check` batches at a
//! fixed request rate ([`PERIOD`]); the batch size (the node's demand) can
//! change while it runs ([`Cluster::set_demand`]). Every check of a batch is
//! for limit `global`, key `all|c<node>-<k>`: aggregate `all` (the cluster
//! is configured with `flow_separator: "|"`), client `k`, with
//! [`CHECKS_PER_CLIENT`] checks per client per request (333 checks/s per
//! client), so FPS sees one flow per 333 req/s of demand.
//!
//! Heavy scenarios must not overlap on a 2-core machine: a [`Cluster`] holds
//! a process-wide lock for as long as it lives.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{DEADLINE, Drl, http_get, metric};

/// The global limit, req/s.
pub const LIMIT: u64 = 1000;
/// Checks per HTTP request at each node for the 1:2:6 split of about
/// 3,000 checks/s (333, 667 and 2,000 checks/s).
pub const SPLIT: [usize; 3] = [5, 10, 30];
/// Checks per client in each request (333 checks/s per client).
pub const CHECKS_PER_CLIENT: usize = 5;
/// Pause between two requests of a node: 15 ms = 66.7 requests/s.
pub const PERIOD: Duration = Duration::from_millis(15);
/// Accounting bucket, ms.
pub const BUCKET_MS: u64 = 100;
/// Buckets per second.
pub const PER_S: u64 = 1000 / BUCKET_MS;
/// The allowed-decisions counter of limit `global` in `/metrics`.
pub const ALLOWED: &str = "drl_decisions_total{limit=\"global\",result=\"allowed\"}";

static SERIAL: Mutex<()> = Mutex::new(());

/// A free UDP port on 127.0.0.1 (bound, then released).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A keep-alive HTTP/1.1 connection for `POST /v1/check` (a new TCP
/// connection per request would cost more than the decision).
pub struct Conn {
    addr: SocketAddr,
    stream: Option<(TcpStream, BufReader<TcpStream>)>,
}

impl Conn {
    /// A connection to `addr`, opened on first use.
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr, stream: None }
    }

    /// Posts `body` to `/v1/check`: status and body.
    pub fn post(&mut self, body: &str) -> Result<(u16, String), String> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr).map_err(|e| e.to_string())?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(|e| e.to_string())?;
            let r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
            self.stream = Some((s, r));
        }
        let res = self.exchange(body);
        if res.is_err() {
            self.stream = None;
        }
        res
    }

    fn exchange(&mut self, body: &str) -> Result<(u16, String), String> {
        let (s, r) = self.stream.as_mut().expect("connected");
        let req = format!(
            "POST /v1/check HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut len = None;
        loop {
            line.clear();
            r.read_line(&mut line).map_err(|e| e.to_string())?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let len = len.ok_or("response without content-length")?;
        let mut buf = vec![0u8; len];
        r.read_exact(&mut buf).map_err(|e| e.to_string())?;
        Ok((status, String::from_utf8_lossy(&buf).into_owned()))
    }
}

/// Per accounting bucket: (offered, allowed) per node.
pub type Buckets = BTreeMap<u64, [(u64, u64); 3]>;

/// The load on the three nodes and what it saw.
pub struct Load {
    /// (offered, allowed) per node per bucket.
    pub buckets: Mutex<Buckets>,
    /// Allowed checks per node since the start.
    pub allowed_total: Mutex<[u64; 3]>,
    /// Failed requests.
    pub errors: Mutex<Vec<String>>,
    stop: [AtomicBool; 3],
    /// Checks per request, per node (0: the node gets no requests).
    batch: [AtomicUsize; 3],
    origin: Instant,
}

/// The request body of `checks` checks from node `node`'s clients
/// (`checks / CHECKS_PER_CLIENT` of them). Independent clients' requests
/// interleave: the checks go round-robin over the clients, starting at
/// client `first` (rotated per request), so that no client is always first
/// in line for the node's tokens.
fn body(node: usize, checks: usize, first: usize) -> String {
    let clients = checks.div_ceil(CHECKS_PER_CLIENT).max(1);
    let one = |j: usize| {
        format!(
            r#"{{"limit":"global","key":"all|c{node}-{}","cost":1}}"#,
            (first + j) % clients
        )
    };
    format!(
        r#"{{"requests":[{}]}}"#,
        (0..checks).map(one).collect::<Vec<_>>().join(",")
    )
}

fn drive(node: usize, addr: SocketAddr, load: Arc<Load>) {
    let mut conn = Conn::new(addr);
    let mut next = Instant::now();
    let mut sent = 0usize;
    while !load.stop[node].load(Ordering::SeqCst) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        // Open loop at a fixed request rate; after a stall (a loaded
        // machine), resume the schedule instead of bursting to catch up.
        next = (next + PERIOD).max(Instant::now() - PERIOD * 4);
        let checks = load.batch[node].load(Ordering::SeqCst);
        if checks == 0 {
            continue;
        }
        sent += 1;
        match conn.post(&body(node, checks, sent)) {
            Ok((200, text)) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                let results = v["results"].as_array().expect("results");
                assert_eq!(results.len(), checks, "{text}");
                let allowed = results
                    .iter()
                    .filter(|r| r["allowed"].as_bool() == Some(true))
                    .count() as u64;
                let bucket = load.origin.elapsed().as_millis() as u64 / BUCKET_MS;
                let mut b = load.buckets.lock().unwrap();
                let e = &mut b.entry(bucket).or_default()[node];
                e.0 += checks as u64;
                e.1 += allowed;
                load.allowed_total.lock().unwrap()[node] += allowed;
            }
            other => load
                .errors
                .lock()
                .unwrap()
                .push(format!("node {}: {other:?}", node + 1)),
        }
    }
}

/// (offered, allowed) per node over buckets `[from, to)`.
pub fn totals(b: &Buckets, from: u64, to: u64) -> [(u64, u64); 3] {
    let mut t = [(0, 0); 3];
    for (_, v) in b.range(from..to) {
        for i in 0..3 {
            t[i].0 += v[i].0;
            t[i].1 += v[i].1;
        }
    }
    t
}

/// The most any 1 s window (sliding by one bucket) starting in
/// `[from, to)` admitted over all nodes, and where it started.
pub fn peak_second(b: &Buckets, from: u64, to: u64) -> (u64, u64) {
    let mut peak = (0, from);
    for s in from..to {
        let w = totals(b, s, s + PER_S);
        let adm = w.iter().map(|x| x.1).sum::<u64>();
        if adm > peak.0 {
            peak = (adm, s);
        }
    }
    peak
}

/// How the cluster is configured.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// `cluster.algorithm`.
    pub algorithm: &'static str,
    /// `cluster.faults.drop_rate` at every node (0: no `faults:` section).
    pub drop_rate: f64,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            algorithm: "grd",
            drop_rate: 0.0,
        }
    }
}

/// Three nodes with the load running.
pub struct Cluster {
    /// The `drl serve` processes (node `i + 1` is `nodes[i]`).
    pub nodes: Vec<Drl>,
    /// The load and its counts.
    pub load: Arc<Load>,
    threads: Vec<Option<std::thread::JoinHandle<()>>>,
    /// How long the start took to converge.
    pub warm: Duration,
    /// Each node's config without a `faults:` section.
    base: Vec<String>,
    _dir: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Starts three nodes with `opts`, offers the 1:2:6 demand and returns
    /// once the last full second admitted within 10% of the limit.
    pub fn start(opts: Opts) -> Cluster {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("cluster.key");
        std::fs::write(&key, "another-test-cluster-key-32-byte\n").unwrap();
        let udp: Vec<SocketAddr> = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_udp_port())))
            .collect();
        let seeds = udp
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let base: Vec<String> = (0..3)
            .map(|i| {
                format!(
                    r#"listen:
  http: 127.0.0.1:0
  grpc: null
status:
  keys: show
limits:
  - name: global
    quota: {LIMIT}/s
    scope: gossip
cluster:
  node_id: {id}
  bind: "{bind}"
  seeds: [{seeds}]
  key_file: "{key}"
  algorithm: {alg}
  flow_separator: "|"
  estimate_interval_ms: 50
  branching: 3
"#,
                    id = i + 1,
                    bind = udp[i],
                    key = key.display(),
                    alg = opts.algorithm,
                )
            })
            .collect();
        let nodes: Vec<Drl> = (0..3)
            .map(|i| {
                let faults = if opts.drop_rate > 0.0 {
                    format!(
                        "  faults:\n    drop_rate: {}\n    seed: {}\n",
                        opts.drop_rate,
                        7 * (i + 1)
                    )
                } else {
                    String::new()
                };
                Drl::start(&format!("{}{faults}", base[i]))
            })
            .collect();
        let load = Arc::new(Load {
            buckets: Mutex::new(BTreeMap::new()),
            allowed_total: Mutex::new([0; 3]),
            errors: Mutex::new(Vec::new()),
            stop: Default::default(),
            batch: SPLIT.map(AtomicUsize::new),
            origin: Instant::now(),
        });
        let threads = (0..3)
            .map(|i| {
                let (addr, l) = (nodes[i].http, load.clone());
                Some(std::thread::spawn(move || drive(i, addr, l)))
            })
            .collect();
        let mut c = Cluster {
            nodes,
            load,
            threads,
            warm: Duration::ZERO,
            base,
            _dir: dir,
            _serial: serial,
        };
        // Warm-up: membership forms and the 1 s EWMA estimates converge.
        c.warm = c.wait_rate(&[0, 1, 2], LIMIT, DEADLINE);
        c
    }

    /// The bucket being filled now.
    pub fn bucket_now(&self) -> u64 {
        self.load.origin.elapsed().as_millis() as u64 / BUCKET_MS
    }

    /// A copy of the counts so far.
    pub fn buckets(&self) -> Buckets {
        self.load.buckets.lock().unwrap().clone()
    }

    /// Waits (with a deadline) until the last full second of `nodes`
    /// admitted within 10% of `want`; returns the time waited.
    pub fn wait_rate(&self, nodes: &[usize], want: u64, deadline: Duration) -> Duration {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            let now = self.bucket_now();
            if now > PER_S {
                let t = totals(&self.load.buckets.lock().unwrap(), now - PER_S, now);
                let adm: u64 = nodes.iter().map(|&i| t[i].1).sum();
                last = format!("last second: {t:?}, admitted {adm}");
                if adm.abs_diff(want) <= want / 10 {
                    return start.elapsed();
                }
            }
            assert!(
                start.elapsed() < deadline,
                "nodes {nodes:?} never reached {want}/s: {last}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Admitted per node per second over the next `secs` s window in which
    /// the load really ran: every 100 ms bucket of it saw at least half of
    /// each node's demand answered. A window where the client or a node was
    /// not scheduled (a loaded 2-core machine) under-admits because the
    /// requests were not there, which says nothing about the limiter; such
    /// a window is reported and the next one is taken, up to `tries`
    /// windows, after which the test fails.
    pub fn loaded_rates(&self, secs: u64, tries: u32) -> [u64; 3] {
        let per_bucket = |node: usize| {
            let checks = self.load.batch[node].load(Ordering::SeqCst) as u64;
            checks * BUCKET_MS / PERIOD.as_millis() as u64
        };
        let mut starved = Vec::new();
        for _ in 0..tries {
            let from = self.bucket_now() + 1;
            let to = from + secs * PER_S;
            self.wait_bucket(to);
            let b = self.buckets();
            let short = (from..to).find_map(|k| {
                let v = b.get(&k).copied().unwrap_or_default();
                (0..3)
                    .find(|&i| v[i].0 * 2 < per_bucket(i))
                    .map(|i| format!("bucket {k}: node {} answered {} checks", i + 1, v[i].0))
            });
            match short {
                None => return totals(&b, from, to).map(|(_, a)| a / secs),
                Some(why) => {
                    eprintln!("window [{from}, {to}) not fully loaded ({why}); taking the next");
                    starved.push(why);
                }
            }
        }
        panic!("the load never ran for {secs} s in {tries} windows: {starved:?}")
    }

    /// Sleeps until bucket `b` is complete.
    pub fn wait_bucket(&self, b: u64) {
        while self.bucket_now() <= b {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sets each node's demand, in checks per request (66.7 requests/s;
    /// [`SPLIT`] is the 1:2:6 split, 0 sends nothing).
    pub fn set_demand(&self, checks: [usize; 3]) {
        for (b, c) in self.load.batch.iter().zip(checks) {
            b.store(c, Ordering::SeqCst);
        }
    }

    /// Stops node `node`'s client (waits for its last answer).
    pub fn stop(&mut self, node: usize) {
        self.load.stop[node].store(true, Ordering::SeqCst);
        if let Some(t) = self.threads[node].take() {
            t.join().unwrap();
        }
    }

    /// Stops every client and checks that no request failed.
    pub fn stop_all(&mut self) {
        for i in 0..3 {
            self.stop(i);
        }
        let errors = self.load.errors.lock().unwrap().clone();
        assert!(errors.is_empty(), "request errors: {errors:#?}");
    }

    /// Node `node`'s `/metrics` sample `name_and_labels`.
    pub fn metric(&self, node: usize, name_and_labels: &str) -> Option<f64> {
        let (s, text) = http_get(&self.nodes[node].url("/metrics"))?;
        assert_eq!(s, 200);
        metric(&text, name_and_labels)
    }

    /// The number of live nodes node `node` counts (`drl_cluster_net_live_nodes`).
    pub fn live_nodes(&self, node: usize) -> Option<u64> {
        self.metric(node, "drl_cluster_net_live_nodes")
            .map(|v| v as u64)
    }

    /// Rewrites node `node`'s config with `faults` (YAML lines indented
    /// under `cluster:`, e.g. `"  faults:\n    isolate: true\n"`; empty:
    /// no faults), sends SIGHUP and waits until the node reports the reload.
    pub fn reconfigure(&self, node: usize, faults: &str) {
        let text = format!("{}{faults}", self.base[node]);
        if let Err(e) = self.reload_with(node, &text) {
            panic!("reload refused: {e}");
        }
    }

    /// Node `node`'s config without a `faults:` section.
    pub fn base_config(&self, node: usize) -> &str {
        &self.base[node]
    }

    /// Writes `text` as node `node`'s config, sends SIGHUP and waits for
    /// the outcome: `Ok` if reloaded, else the refusal's log line.
    pub fn reload_with(&self, node: usize, text: &str) -> Result<(), String> {
        let d = &self.nodes[node];
        // The service's own lines (tracing logs the same events too).
        const OK: &str = "drl serve: config reloaded";
        const REFUSED: &str = "drl serve: config reload refused";
        let ok = d.count_log(OK);
        let refused = d.count_log(REFUSED);
        std::fs::write(&d.config, text).unwrap();
        d.signal("HUP");
        super::wait_for_or(
            "the reload",
            || d.log.lock().unwrap().join("\n"),
            || d.count_log(OK) > ok || d.count_log(REFUSED) > refused,
        );
        if d.count_log(REFUSED) > refused {
            let log = d.log.lock().unwrap();
            let line = log.iter().rev().find(|l| l.contains(REFUSED));
            return Err(line.cloned().unwrap_or_default());
        }
        Ok(())
    }
}

/// How long a wait on a cluster condition may take before the test fails:
/// a hang guard, not a verdict (a slow machine only makes the wait longer).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// (offered, allowed) per node over one measured window.
pub type Window = [(u64, u64); 3];

/// (offered, allowed) of node `node` over its first `n` buckets from
/// bucket `from` on in which it offered anything: what its first `n`
/// requests after an event got, however long the client took to send them.
pub fn first_offers(b: &Buckets, node: usize, from: u64, n: usize) -> (u64, u64) {
    b.range(from..)
        .map(|(_, v)| v[node])
        .filter(|&(o, _)| o > 0)
        .take(n)
        .fold((0, 0), |(o, a), (x, y)| (o + x, a + y))
}

impl Cluster {
    /// Waits until a `secs` s window of the load (buckets from `from` on,
    /// sliding by one second) satisfies `check`, and returns it with its
    /// first bucket. `check` gets the window's (offered, allowed) per node
    /// and says why it does not hold. A liveness condition ("the cluster
    /// reaches this state"), not a rate over a fixed stretch of wall time:
    /// a window where the machine kept the clients or the nodes from
    /// running does not hold, and the next one is taken. Panics after
    /// [`HANG_GUARD`] with the last windows' reasons.
    pub fn eventually(
        &self,
        what: &str,
        from: u64,
        secs: u64,
        mut check: impl FnMut(&Window) -> Result<(), String>,
    ) -> (u64, Window) {
        let start = Instant::now();
        let mut from = from;
        let mut why: Vec<String> = Vec::new();
        loop {
            let to = from + secs * PER_S;
            while self.bucket_now() <= to {
                assert!(
                    start.elapsed() < HANG_GUARD,
                    "{what}: no window held within {HANG_GUARD:?}; last windows: {why:#?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let w = totals(&self.buckets(), from, to);
            match check(&w) {
                Ok(()) => {
                    eprintln!(
                        "{what}: held over buckets [{from}, {to}) after {:?}: {w:?}",
                        start.elapsed()
                    );
                    return (from, w);
                }
                Err(e) => {
                    eprintln!("{what}: buckets [{from}, {to}): {e}");
                    why.push(format!("[{from}, {to}): {e}"));
                    if why.len() > 5 {
                        why.remove(0);
                    }
                }
            }
            assert!(
                start.elapsed() < HANG_GUARD,
                "{what}: no window held within {HANG_GUARD:?}; last windows: {why:#?}"
            );
            from += PER_S;
        }
    }
}

impl Cluster {
    /// Waits until the estimates have settled: a `secs` s stretch of the
    /// load in which every 1 s window (sliding by one bucket) admitted
    /// within 10% of [`LIMIT`]. Returns the stretch's first bucket: the
    /// start of "before" for a test that then asserts a safety bound
    /// through an event. The warm-up of [`Cluster::start`] needs only one
    /// such second, which can fall inside the estimates' start-up
    /// transient. Panics after [`HANG_GUARD`].
    pub fn settled(&self, secs: u64) -> u64 {
        let start = Instant::now();
        let mut from = self.bucket_now() + 1;
        loop {
            let to = from + secs * PER_S;
            self.wait_bucket(to);
            let b = self.buckets();
            let bad = (from..=to - PER_S).find_map(|s| {
                let adm: u64 = totals(&b, s, s + PER_S).iter().map(|x| x.1).sum();
                (adm.abs_diff(LIMIT) > LIMIT / 10).then_some((s, adm))
            });
            match bad {
                None => {
                    eprintln!(
                        "settled over buckets [{from}, {to}) after {:?}",
                        start.elapsed()
                    );
                    return from;
                }
                Some((s, adm)) => {
                    assert!(
                        start.elapsed() < HANG_GUARD,
                        "the estimates never settled within {HANG_GUARD:?}: the second from bucket {s} admitted {adm}"
                    );
                    from = s + 1;
                }
            }
        }
    }
}
