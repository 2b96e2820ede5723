//! The real processes of a soak: `drl serve` nodes and one `redis-server`,
//! each on its own 127.0.0.x loopback address, each `drl serve` with its own
//! config file in the run's temp dir. Start, stop, SIGKILL, SIGSTOP,
//! SIGCONT and restart on the same addresses.

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a started process may take to answer (`/readyz`, or a TCP
/// connect for Redis) before the soak fails: a bound only a hung process
/// reaches (an Orbit node took over 30 s to be ready once, in CI on a
/// machine loaded by other builds); a ready process is seen at once.
pub const READY_DEADLINE: Duration = Duration::from_secs(120);

/// What a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// A `drl serve` node sharing a `scope: gossip` limit.
    Gossip,
    /// A `drl serve` node on the Orbit ring.
    Orbit,
    /// A `drl serve` node with a `scope: redis` limit.
    Redis,
    /// The `drl serve` node with only local limits.
    Local,
    /// The `redis-server` the Redis group shares.
    RedisServer,
}

impl Group {
    /// Lowercase name, used in process names and logs.
    pub fn name(self) -> &'static str {
        match self {
            Group::Gossip => "gossip",
            Group::Orbit => "orbit",
            Group::Redis => "redis",
            Group::Local => "local",
            Group::RedisServer => "redis-server",
        }
    }
}

/// One process of the soak and how to start it again.
pub struct Proc {
    /// `gossip-1`, `orbit-3`, `redis-server`, ...
    pub name: String,
    /// Its group.
    pub group: Group,
    /// Its loopback address.
    pub ip: Ipv4Addr,
    /// HTTP address (`drl serve`) or the Redis port's address.
    pub http: SocketAddr,
    /// gRPC address (`drl serve`; unused for Redis).
    pub grpc: SocketAddr,
    /// Its config file (`drl serve`; unused for Redis).
    pub config: PathBuf,
    /// Where its stderr goes (appended over restarts).
    pub log: PathBuf,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
    /// Stopped with SIGSTOP and not yet continued.
    pub stopped: bool,
}

/// A free port on `ip` for TCP (bound, then released; the process binds
/// it a moment later).
pub fn free_tcp_port(ip: Ipv4Addr) -> Result<u16> {
    Ok(TcpListener::bind((ip, 0))?.local_addr()?.port())
}

/// A free port on `ip` for UDP.
pub fn free_udp_port(ip: Ipv4Addr) -> Result<u16> {
    Ok(UdpSocket::bind((ip, 0))?.local_addr()?.port())
}

impl Proc {
    /// A `drl serve` node (not started) with free HTTP and gRPC ports on
    /// `ip`; its config will be `dir/<name>.yaml`.
    pub fn drl(name: &str, group: Group, ip: Ipv4Addr, dir: &Path, logs: &Path) -> Result<Proc> {
        Ok(Proc {
            name: name.to_string(),
            group,
            ip,
            http: SocketAddr::from((ip, free_tcp_port(ip)?)),
            grpc: SocketAddr::from((ip, free_tcp_port(ip)?)),
            config: dir.join(format!("{name}.yaml")),
            log: logs.join(format!("{name}.log")),
            child: None,
            starts: 0,
            stopped: false,
        })
    }

    /// The `redis-server` (not started) on a free port of `ip`.
    pub fn redis(ip: Ipv4Addr, logs: &Path) -> Result<Proc> {
        let port = free_tcp_port(ip)?;
        Ok(Proc {
            name: "redis-server".into(),
            group: Group::RedisServer,
            ip,
            http: SocketAddr::from((ip, port)),
            grpc: SocketAddr::from((ip, port)),
            config: PathBuf::new(),
            log: logs.join("redis-server.log"),
            child: None,
            starts: 0,
            stopped: false,
        })
    }

    /// Writes the config file atomically (a temp file renamed over it):
    /// a reader never sees half of it.
    pub fn write_config(&self, text: &str) -> Result<()> {
        let tmp = self.config.with_extension("yaml.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.config)?;
        Ok(())
    }

    fn log_file(&self) -> Result<File> {
        Ok(OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?)
    }

    /// Starts the process (`drl` is the `drl` binary). Does not wait for
    /// it to be ready: see [`wait_ready`].
    pub fn spawn(&mut self, drl: &Path) -> Result<()> {
        if self.child.is_some() {
            bail!("{} is already running", self.name);
        }
        let err = self.log_file()?;
        let child = if self.group == Group::RedisServer {
            Command::new("redis-server")
                .args(["--bind", &self.ip.to_string()])
                .args(["--port", &self.http.port().to_string()])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(err.try_clone()?)
                .stderr(err)
                .spawn()
                .context("redis-server is not installed (apt-get install -y redis-server)")?
        } else {
            Command::new(drl)
                .arg("serve")
                .arg("--config")
                .arg(&self.config)
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .with_context(|| format!("start {}", drl.display()))?
        };
        self.child = Some(child);
        self.starts += 1;
        self.stopped = false;
        Ok(())
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether it was started and has not exited.
    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends `sig` (`HUP`, `STOP`, `CONT`, `TERM`) with kill(1).
    pub fn signal(&mut self, sig: &str) -> Result<()> {
        let Some(pid) = self.pid() else {
            bail!("{} is not running", self.name);
        };
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()?
            .success();
        if !ok {
            bail!("kill -{sig} {pid} ({}) failed", self.name);
        }
        match sig {
            "STOP" => self.stopped = true,
            "CONT" => self.stopped = false,
            _ => {}
        }
        Ok(())
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait()?;
        }
        self.stopped = false;
        Ok(())
    }

    /// SIGTERM and waits up to `grace` for it to exit, then SIGKILL.
    pub fn terminate(&mut self, grace: Duration) {
        if self.stopped {
            let _ = self.signal("CONT");
        }
        if self.pid().is_some() && self.signal("TERM").is_ok() {
            let start = Instant::now();
            while start.elapsed() < grace && self.running() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.kill();
    }

    /// How many lines of its log contain `needle` (all its incarnations).
    pub fn count_log(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().filter(|l| l.contains(needle)).count())
            .unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Waits until the process answers: `GET /readyz` is 200 (`drl serve`) or
/// the port accepts a connection (Redis); fails after [`READY_DEADLINE`]
/// or if it exited.
pub async fn wait_ready(client: &reqwest::Client, group: Group, addr: SocketAddr) -> Result<()> {
    let start = Instant::now();
    let url = format!("http://{addr}/readyz");
    loop {
        let up = if group == Group::RedisServer {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        } else {
            matches!(client.get(&url).timeout(Duration::from_secs(1)).send().await,
                Ok(r) if r.status().as_u16() == 200)
        };
        if up {
            return Ok(());
        }
        if start.elapsed() > READY_DEADLINE {
            bail!(
                "{} at {addr} not ready after {READY_DEADLINE:?}",
                group.name()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
