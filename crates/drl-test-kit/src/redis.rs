//! Test harness: real `redis-server` processes on free loopback ports,
//! started per test and torn down on drop; a 3-master Redis Cluster.
//!
//! These tests need the Debian packages `redis-server` and `redis-tools`
//! (redis-cli). If the binaries are missing the tests FAIL with an
//! explanation; they never skip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tls;

const MISSING: &str = "these tests need a real Redis: install the Debian packages \
`redis-server` and `redis-tools` (apt-get update && apt-get install -y redis-server redis-tools). \
They never skip.";

/// Polls `cond` every few ms until it holds or `within` passes.
pub fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Async flavour of [`wait_until`].
pub async fn wait_until_async<F, Fut>(within: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free port `p` (and, for cluster nodes, `p + 10000` for the bus).
fn free_port(cluster: bool) -> u16 {
    // Spread the search by pid and time so parallel test binaries collide rarely.
    let seed = std::process::id() as u64 * 7919
        + Instant::now().elapsed().as_nanos() as u64
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
    for i in 0..5000u64 {
        let port = (20000 + (seed + i * 7) % 30000) as u16;
        if port_free(port) && (!cluster || port_free(port + 10000)) {
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// Sends one inline command over a raw socket; the first reply line.
pub fn raw_command(port: u16, cmd: &str) -> Option<String> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
            .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).to_string())
}

fn ping(port: u16) -> bool {
    raw_command(port, "PING").is_some_and(|r| r.starts_with("+PONG"))
}

/// One `redis-server` process.
pub struct RedisServer {
    /// Its port on 127.0.0.1 (the TLS port of a TLS server, whose plain
    /// port is off).
    pub port: u16,
    child: Option<Running>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// The certificates of a TLS server.
    tls: Option<Arc<tls::Pki>>,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        Self::start_with(free_port(false), &[])
    }

    /// A standalone server on a free port with extra arguments.
    pub fn start_with_free_port(extra: &[&str]) -> Self {
        Self::start_with(free_port(false), extra)
    }

    /// A standalone server on a free port with drl's module loaded.
    pub fn start_module() -> Self {
        let module = module_path();
        Self::start_with(
            free_port(false),
            &["--loadmodule", module.to_str().expect("utf-8 path")],
        )
    }

    /// A server on `port` with extra arguments.
    pub fn start_with(port: u16, extra: &[&str]) -> Self {
        Self::start_inner(port, extra.iter().map(|s| s.to_string()).collect(), None)
    }

    /// A TLS-only server (plain port off) on a free port, its certificate
    /// from `pki`, client certificates `auth_clients` (`yes`, `optional`,
    /// `no`), with extra arguments.
    pub fn start_tls(pki: &Arc<tls::Pki>, auth_clients: &str, extra: &[&str]) -> Self {
        Self::start_tls_on(free_port(false), pki, auth_clients, extra)
    }

    /// [`RedisServer::start_tls`] on `port`.
    pub fn start_tls_on(
        port: u16,
        pki: &Arc<tls::Pki>,
        auth_clients: &str,
        extra: &[&str],
    ) -> Self {
        let mut args = pki.server_args(port, auth_clients);
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_inner(port, args, Some(pki.clone()))
    }

    fn start_inner(port: u16, extra: Vec<String>, tls: Option<Arc<tls::Pki>>) -> Self {
        let mut s = RedisServer {
            port,
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            extra,
            tls,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        // Fail loudly (never skip) if the binary is missing.
        match Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("`redis-server` not found on PATH: {MISSING}")
            }
            Err(e) => panic!("could not run redis-server: {e}"),
        }
        // A watchdog shell owns the server and kills it when our end of its
        // stdin closes, i.e. when this process exits however it exits
        // (a server held in a `static` is never dropped).
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                "redis-server \"$@\" >\"$DRL_REDIS_LOG\" 2>&1 & pid=$!; echo $pid; \
                 cat >/dev/null; kill -CONT $pid 2>/dev/null; kill -9 $pid 2>/dev/null; wait",
            )
            .arg("redis-watchdog");
        if self.tls.is_none() {
            cmd.arg("--port").arg(self.port.to_string());
        }
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .env("DRL_REDIS_LOG", self.dir.path().join("redis.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut watchdog = cmd.spawn().expect("sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(watchdog.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the watchdog's pid line");
        let pid: u32 = line.trim().parse().expect("redis-server pid");
        let stdin = watchdog.stdin.take();
        self.child = Some(Running {
            watchdog,
            stdin,
            pid,
        });
        let port = self.port;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !match &self.tls {
            None => ping(port),
            Some(_) => self
                .try_admin()
                .is_some_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok()),
        } {
            assert!(
                Instant::now() < deadline,
                "redis-server {:?} did not answer PING within 30 s; its log:\n{}",
                self.extra,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What the server wrote to stdout and stderr (its log, warnings and
    /// up) since it was last started.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// The server's directory (config files, cluster state).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        match self.tls {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(_) => format!("rediss://127.0.0.1:{}", self.port),
        }
    }

    /// The test PKI of a TLS server.
    pub fn pki(&self) -> Option<&Arc<tls::Pki>> {
        self.tls.as_ref()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").pid
    }

    /// Is the process (still) running?
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut r) = self.child.take() {
            // Closing the watchdog's stdin makes it SIGKILL the server and
            // reap it; then the port is free.
            drop(r.stdin.take());
            let _ = r.watchdog.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(sig)
            .arg(self.pid().to_string())
            .status()
            .expect("kill(1)");
        assert!(st.success(), "kill {sig} failed");
    }

    /// SIGSTOP: the process stops answering but keeps its sockets.
    /// Returns once every thread of it is stopped (the kernel stops them
    /// asynchronously: a thread still running could answer a request
    /// sent right after `kill` returned).
    pub fn pause(&self) {
        self.signal("-STOP");
        self.wait_threads(true);
    }

    /// SIGCONT; returns once no thread of it is stopped.
    pub fn resume(&self) {
        self.signal("-CONT");
        self.wait_threads(false);
    }

    fn wait_threads(&self, stopped: bool) {
        let tasks = format!("/proc/{}/task", self.pid());
        wait_until(Duration::from_secs(30), "redis-server's threads", || {
            std::fs::read_dir(&tasks).is_ok_and(|d| {
                d.filter_map(Result::ok).all(|t| {
                    std::fs::read_to_string(t.path().join("stat"))
                        .ok()
                        .and_then(|st| {
                            st.rsplit_once(')')
                                .map(|(_, rest)| rest.trim_start().starts_with('T'))
                        })
                        .is_none_or(|t| t == stopped)
                })
            })
        });
    }

    /// A synchronous admin connection (over TLS with the client
    /// certificate, for a TLS server).
    pub fn admin(&self) -> redis::Connection {
        let client = match &self.tls {
            None => redis::Client::open(self.url()).unwrap(),
            Some(pki) => pki.client(&self.url()),
        };
        client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("admin connection")
    }

    /// [`RedisServer::admin`], or `None` if the server does not answer.
    pub fn try_admin(&self) -> Option<redis::Connection> {
        let client = match &self.tls {
            None => redis::Client::open(self.url()).ok()?,
            Some(pki) => pki.client(&self.url()),
        };
        client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running server: its watchdog shell and the server's pid.
struct Running {
    watchdog: Child,
    stdin: Option<std::process::ChildStdin>,
    pid: u32,
}

/// Runs `redis-cli` with `args`; its stdout. Fails loudly if missing.
pub fn redis_cli(args: &[&str]) -> String {
    let out = match Command::new("redis-cli").args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("`redis-cli` not found on PATH: {MISSING}")
        }
        Err(e) => panic!("redis-cli: {e}"),
    };
    assert!(
        out.status.success(),
        "redis-cli {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A Redis Cluster of `n` masters (no replicas) on loopback.
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` nodes and joins them with `redis-cli --cluster create`.
    pub fn start(n: usize) -> Self {
        Self::start_with_replicas(n, 0)
    }

    /// `n` masters, each with drl's module loaded.
    pub fn start_module(n: usize) -> Self {
        Self::start_nodes(n, 0, true)
    }

    /// `masters` masters with `replicas` replicas each.
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Self {
        Self::start_nodes(masters, replicas, false)
    }

    /// Like [`RedisCluster::start_with_replicas`]; with `with_module`,
    /// every node (masters and replicas) loads drl's module.
    pub fn start_with_replicas_and_module(
        masters: usize,
        replicas: usize,
        with_module: bool,
    ) -> Self {
        Self::start_nodes(masters, replicas, with_module)
    }

    /// `masters` masters over TLS only (client connections, the cluster
    /// bus and replication: `--tls-cluster yes --tls-replication yes`),
    /// certificates from `pki`, client certificates optional.
    pub fn start_tls(masters: usize, pki: &Arc<tls::Pki>) -> Self {
        Self::start_all(masters, 0, false, Some(pki))
    }

    fn start_nodes(masters: usize, replicas: usize, with_module: bool) -> Self {
        Self::start_all(masters, replicas, with_module, None)
    }

    fn start_all(
        masters: usize,
        replicas: usize,
        with_module: bool,
        tls: Option<&Arc<tls::Pki>>,
    ) -> Self {
        let module = if with_module {
            Some(module_path().to_str().expect("utf-8 path").to_string())
        } else {
            None
        };
        let n = masters * (1 + replicas);
        let mut nodes: Vec<RedisServer> = Vec::new();
        for _ in 0..n {
            let mut port = free_port(true);
            while nodes.iter().any(|s| s.port == port) {
                port = free_port(true);
            }
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ];
            if let Some(m) = &module {
                args.extend(["--loadmodule", m.as_str()]);
            }
            let s = match tls {
                None => RedisServer::start_with(port, &args),
                Some(pki) => {
                    args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"]);
                    RedisServer::start_tls_on(port, pki, "optional", &args)
                }
            };
            nodes.push(s);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let cli_tls = tls.map(|p| p.cli_args()).unwrap_or_default();
        let mut args: Vec<&str> = cli_tls.iter().map(String::as_str).collect();
        args.extend(["--cluster", "create"]);
        args.extend(addrs.iter().map(String::as_str));
        let replicas = replicas.to_string();
        args.extend(["--cluster-replicas", replicas.as_str(), "--cluster-yes"]);
        redis_cli(&args);
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Waits until every node reports `cluster_state:ok` and knows every slot.
    pub fn wait_ok(&self) {
        for s in &self.nodes {
            wait_until(Duration::from_secs(20), "cluster_state:ok", || {
                let Some(mut c) = s.try_admin() else {
                    return false;
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut c)
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
        }
    }

    /// Node URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `CLUSTER MYID` of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].admin())
            .unwrap()
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].admin())
            .unwrap()
    }

    /// Index of the node serving `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        if let Some(i) = self.owner_opt(slot) {
            return i;
        }
        let views: Vec<String> = self
            .nodes
            .iter()
            .filter(|s| s.is_running())
            .map(|s| {
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut s.admin())
                    .unwrap_or_default()
            })
            .collect();
        panic!("no node serves slot {slot}: {views:#?}");
    }

    /// The running master that claims `slot`, if any.
    pub fn owner_opt(&self, slot: u16) -> Option<usize> {
        for (i, s) in self.nodes.iter().enumerate() {
            if !s.is_running() {
                continue;
            }
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut s.admin())
                .unwrap();
            let me = nodes.lines().find(|l| l.contains("myself")).unwrap();
            if me.contains("master") && serves(me, slot) {
                return Some(i);
            }
        }
        None
    }

    /// Moves `slot` (and its keys) from node `from` to node `to` the way
    /// `redis-cli --cluster reshard` does: IMPORTING/MIGRATING, MIGRATE the
    /// keys, then SETSLOT NODE on every node.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        self.migrate_slot_with(slot, from, to, || {});
    }

    /// [`RedisCluster::migrate_slot`], calling `mid` once the keys have
    /// moved but before the slot is reassigned (clients get ASK then).
    pub fn migrate_slot_with(&self, slot: u16, from: usize, to: usize, mut mid: impl FnMut()) {
        let from_id = self.node_id(from);
        let to_id = self.node_id(to);
        let mut src = self.nodes[from].admin();
        let mut dst = self.nodes[to].admin();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query(&mut dst)
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query(&mut src)
            .unwrap();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut src)
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut src)
                .unwrap();
        }
        mid();
        for s in &self.nodes {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query(&mut s.admin())
                .unwrap();
        }
    }
}

fn serves(node_line: &str, slot: u16) -> bool {
    node_line.split_whitespace().skip(8).any(|r| {
        if r.starts_with('[') {
            return false;
        }
        match r.split_once('-') {
            Some((a, b)) => {
                a.parse::<u16>().is_ok_and(|a| a <= slot)
                    && b.parse::<u16>().is_ok_and(|b| slot <= b)
            }
            None => r.parse::<u16>() == Ok(slot),
        }
    })
}

/// Where the tests' temporary files go.
pub fn scratch() -> PathBuf {
    std::env::temp_dir()
}

/// drl's Redis module (`libdrl_redis_module.so`), built on first use by
/// `drl_redis_module::artifact::path()` (`DRL_REDIS_MODULE` overrides the
/// path).
pub fn module_path() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("DRL_REDIS_MODULE") {
            return PathBuf::from(p);
        }
        drl_redis_module::artifact::path()
            .unwrap_or_else(|e| panic!("cannot build drl's Redis module: {e}"))
    })
    .clone()
}

/// One real `redis-server` with drl's module loaded, a runtime and a store
/// per engine on it, shared by a whole suite: `store` as configured (Lua
/// scripts), `general` the same with the fast scripts off (the general
/// exact-integer script for everything), `module` the same with
/// `engine: module` (`DRL.DECIDE`). [`StoreEnv::engines`] lists them, so
/// each differential test runs every engine.
pub struct StoreEnv {
    /// Runs the stores' futures.
    pub rt: tokio::runtime::Runtime,
    /// The store as `config` made it.
    pub store: drl_store::RedisStore,
    /// The same configuration with `fast_path = false`.
    pub general: drl_store::RedisStore,
    /// The same configuration with `engine: module`.
    pub module: drl_store::RedisStore,
    /// The server (module loaded).
    pub server: RedisServer,
}

impl StoreEnv {
    /// Starts the server and connects the three stores with `config(url)`.
    pub fn start(config: impl FnOnce(String) -> drl_store::RedisConfig) -> Self {
        let server = RedisServer::start_module();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut cfg = config(server.url());
        let store = rt.block_on(drl_store::RedisStore::connect(&cfg)).unwrap();
        cfg.fast_path = false;
        let general = rt.block_on(drl_store::RedisStore::connect(&cfg)).unwrap();
        cfg.fast_path = true;
        cfg.engine = drl_store::Engine::Module;
        let module = rt.block_on(drl_store::RedisStore::connect(&cfg)).unwrap();
        Self {
            rt,
            store,
            general,
            module,
            server,
        }
    }

    /// Every engine's store, named: Lua fast scripts, Lua general script,
    /// the module.
    pub fn engines(&self) -> [(&'static str, &drl_store::RedisStore); 3] {
        [
            ("lua", &self.store),
            ("lua-general", &self.general),
            ("module", &self.module),
        ]
    }
}

/// A name no other call of this process returns: `prefix-N`.
pub fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{prefix}-{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}
