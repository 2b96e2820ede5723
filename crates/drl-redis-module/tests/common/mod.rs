//! Test harness: real `redis-server` processes on free loopback ports (with
//! the module loaded, or without it for a replica), killed on drop.
//!
//! Needs the Debian package `redis-server`; without it the tests FAIL with
//! an explanation, they never skip.
#![allow(dead_code)]

pub mod trace;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use drl_redis_module::spec::{self, Clock, Decision, Op};
use redis::Value;

/// Polls `cond` every few ms until it holds or `within` passes.
pub fn wait_until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The module's shared library, built if needed.
pub fn module_path() -> PathBuf {
    drl_redis_module::artifact::path().unwrap_or_else(|e| panic!("{e}"))
}

fn free_port() -> u16 {
    // Bind port 0 to get a free port from the kernel, then release it.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// One `redis-server`.
pub struct Redis {
    /// Its port on 127.0.0.1.
    pub port: u16,
    watchdog: Child,
    stdin: Option<ChildStdin>,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// A server with the drl module loaded.
    pub fn with_module() -> Self {
        let path = module_path();
        Self::start(&["--loadmodule", path.to_str().expect("utf-8 path")])
    }

    /// A server with extra arguments.
    pub fn start(extra: &[&str]) -> Self {
        match Command::new("redis-server").arg("--version").output() {
            Ok(_) => {}
            Err(e) => panic!(
                "`redis-server` could not be run ({e}): these tests need a real Redis \
                 (apt-get install -y redis-server); they never skip"
            ),
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        // A shell owns the server and SIGKILLs it when its stdin closes, i.e.
        // when this test process ends, however it ends.
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(
                "redis-server \"$@\" >\"$DRL_LOG\" 2>&1 & pid=$!; echo $pid; \
                 cat >/dev/null; kill -9 $pid 2>/dev/null; wait",
            )
            .arg("redis-watchdog")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .env("DRL_LOG", dir.path().join("redis.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        BufReader::new(watchdog.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("pid line");
        let stdin = watchdog.stdin.take();
        let r = Redis {
            port,
            watchdog,
            stdin,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = r.try_conn()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server {extra:?} did not answer PING within 30 s; its log:\n{}",
                r.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        r
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("redis.log")).unwrap_or_default()
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        c.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A new connection.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to redis-server")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.watchdog.wait();
    }
}

/// Calls `DRL.DECIDE keys... spec`.
pub fn decide(
    c: &mut redis::Connection,
    keys: &[String],
    grace_ms: u64,
    decisions: &[Decision],
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("DRL.DECIDE");
    for k in keys {
        cmd.arg(k);
    }
    cmd.arg(spec::encode(grace_ms, decisions));
    cmd.query(c)
}

/// A caller-time decision.
pub fn at(
    now: u64,
    algorithm: drl_core::Algorithm,
    cost: u64,
    quotas: &[drl_core::Quota],
) -> Decision {
    Decision {
        clock: Clock::Caller(now),
        op: Op::Take,
        algorithm,
        cost,
        quotas: quotas.to_vec(),
    }
}

/// The items of an array reply as (verdict, now, states) per decision of
/// `nqs` quotas each.
pub fn items(v: &Value, nqs: &[usize]) -> Vec<(i64, u64, Vec<Vec<u8>>)> {
    let Value::Array(items) = v else {
        panic!("expected an array, got {v:?}")
    };
    assert_eq!(
        items.len(),
        nqs.iter().map(|n| n + 2).sum::<usize>(),
        "{v:?}"
    );
    let mut it = items.iter();
    nqs.iter()
        .map(|&nq| {
            let Some(Value::Int(verdict)) = it.next() else {
                panic!("verdict in {v:?}")
            };
            let bulk = |x: Option<&Value>| match x {
                Some(Value::BulkString(b)) => b.clone(),
                other => panic!("expected a bulk string, got {other:?}"),
            };
            let now = String::from_utf8(bulk(it.next())).unwrap().parse().unwrap();
            let states = (0..nq).map(|_| bulk(it.next())).collect();
            (*verdict, now, states)
        })
        .collect()
}
