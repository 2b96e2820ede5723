//! Network namespaces for the testbed and the tests, through `ip`
//! (iproute2): the paper's setup on one machine.
//!
//! [`Topology::build`] makes `sites` sender namespaces `<prefix>-s<i>` and
//! one receiver namespace `<prefix>-rx`, each site joined to the receiver
//! by a veth pair (site side `10.77.<i>.1/24`, receiver side
//! `10.77.<i>.2/24`); the receiver routes between the sites (the relays'
//! gossip goes that way). Everything is removed on drop, and
//! [`cleanup_prefix`] removes what a killed run left.

use std::net::Ipv4Addr;
use std::process::{Command, Output};

/// A network namespace (deleted on drop).
#[derive(Debug)]
pub struct Netns {
    name: String,
}

fn ip(args: &[&str]) -> std::io::Result<Output> {
    Command::new("ip").args(args).output().map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot run `ip` (iproute2): {e}; install the iproute2 package"),
        )
    })
}

fn check(what: &str, out: Output) -> std::io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let hint = if err.contains("Operation not permitted") || err.contains("Permission denied") {
        " (creating network namespaces needs root, or CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    } else {
        ""
    };
    Err(std::io::Error::other(format!("{what}: {err}{hint}")))
}

impl Netns {
    /// Creates namespace `name` with its loopback up. Fails loudly if it
    /// cannot (no root, no namespaces, name taken).
    pub fn add(name: &str) -> std::io::Result<Self> {
        check(
            &format!("ip netns add {name}"),
            ip(&["netns", "add", name])?,
        )?;
        let ns = Self {
            name: name.to_string(),
        };
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `args` inside the namespace.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }

    /// Runs `args` inside the namespace; an error carries its stderr.
    pub fn run(&self, args: &[&str]) -> std::io::Result<()> {
        let out = self.command(args).output()?;
        check(&format!("[{}] {}", self.name, args.join(" ")), out)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Removes every namespace whose name starts with `prefix` (what a killed
/// testbed left). Returns their names.
pub fn cleanup_prefix(prefix: &str) -> std::io::Result<Vec<String>> {
    let out = ip(&["netns", "list"])?;
    let mut removed = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if !name.is_empty() && name.starts_with(prefix) {
            let _ = ip(&["netns", "del", name]);
            removed.push(name.to_string());
        }
    }
    Ok(removed)
}

/// One site: its namespace and addresses.
#[derive(Debug)]
pub struct Site {
    /// The site's namespace (senders and relay).
    pub ns: Netns,
    /// The site's address (its senders' source address).
    pub addr: Ipv4Addr,
    /// The receiver's address on the site's link (where its senders
    /// connect).
    pub sink_addr: Ipv4Addr,
    /// The site's interface towards the receiver.
    pub interface: String,
}

/// Sites and a shared receiver.
#[derive(Debug)]
pub struct Topology {
    /// The sites, in order (site `i` is `sites[i - 1]`).
    pub sites: Vec<Site>,
    /// The receiver's namespace (dropped last).
    pub rx: Netns,
}

impl Topology {
    /// Builds `sites` sites under `prefix` (at most 11 bytes: interface
    /// and namespace names derive from it). `rate`: an optional `tc tbf`
    /// rate (e.g. `100mbit`) on each site's link, as a bottleneck.
    pub fn build(prefix: &str, sites: usize, rate: Option<&str>) -> std::io::Result<Self> {
        assert!((1..=200).contains(&sites), "1..=200 sites");
        let rx = Netns::add(&format!("{prefix}-rx"))?;
        rx.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        let mut out = Vec::new();
        for i in 1..=sites {
            let ns = Netns::add(&format!("{prefix}-s{i}"))?;
            let (a, b) = (format!("s{i}"), format!("r{i}"));
            check(
                "ip link add (veth)",
                ip(&[
                    "link",
                    "add",
                    "name",
                    &a,
                    "netns",
                    ns.name(),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &b,
                    "netns",
                    rx.name(),
                ])?,
            )?;
            let addr = Ipv4Addr::new(10, 77, i as u8, 1);
            let sink_addr = Ipv4Addr::new(10, 77, i as u8, 2);
            ns.run(&["ip", "addr", "add", &format!("{addr}/24"), "dev", &a])?;
            ns.run(&["ip", "link", "set", &a, "up"])?;
            ns.run(&[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &sink_addr.to_string(),
            ])?;
            rx.run(&["ip", "addr", "add", &format!("{sink_addr}/24"), "dev", &b])?;
            rx.run(&["ip", "link", "set", &b, "up"])?;
            if let Some(r) = rate {
                ns.run(&[
                    "tc", "qdisc", "add", "dev", &a, "root", "tbf", "rate", r, "burst", "64kb",
                    "latency", "50ms",
                ])?;
            }
            out.push(Site {
                ns,
                addr,
                sink_addr,
                interface: a,
            });
        }
        Ok(Self { sites: out, rx })
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Sites first (their veths go with them), then the receiver.
        self.sites.clear();
    }
}

/// A `drl relay` process running in a namespace (stopped with SIGTERM on
/// drop, then SIGKILL if it does not stop within 5 s).
#[derive(Debug)]
pub struct RelayProcess {
    child: Option<std::process::Child>,
    ns: String,
    metrics: std::net::SocketAddr,
    log: std::path::PathBuf,
}

impl RelayProcess {
    /// Starts `exe relay --config config` in `ns` (stderr to `log`) and
    /// waits until its `/healthz` on `metrics` (inside `ns`) answers 200.
    pub fn start(
        ns: &Netns,
        exe: &std::path::Path,
        config: &std::path::Path,
        metrics: std::net::SocketAddr,
        log: &std::path::Path,
    ) -> std::io::Result<Self> {
        Self::start_with(ns, exe, config, metrics, log, &[])
    }

    /// [`RelayProcess::start`] with further arguments to `drl relay`.
    pub fn start_with(
        ns: &Netns,
        exe: &std::path::Path,
        config: &std::path::Path,
        metrics: std::net::SocketAddr,
        log: &std::path::Path,
        extra: &[&str],
    ) -> std::io::Result<Self> {
        let err = std::fs::File::create(log)?;
        let (exe, config) = (exe.display().to_string(), config.display().to_string());
        let mut args = vec![exe.as_str(), "relay", "--config", config.as_str()];
        args.extend_from_slice(extra);
        let child = ns
            .command(&args)
            .stdout(std::process::Stdio::null())
            .stderr(err)
            .spawn()?;
        let mut r = Self {
            child: Some(child),
            ns: ns.name().to_string(),
            metrics,
            log: log.to_path_buf(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Some(status) = r.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(std::io::Error::other(format!(
                    "drl relay in {} exited ({status}) before it was ready: {}",
                    r.ns,
                    std::fs::read_to_string(&r.log).unwrap_or_default().trim()
                )));
            }
            if r.get("/healthz").is_ok_and(|(s, _)| s == 200) {
                return Ok(r);
            }
            if std::time::Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "drl relay in {} not ready within 20 s: {}",
                    r.ns,
                    std::fs::read_to_string(&r.log).unwrap_or_default().trim()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// GET `path` from the relay's listener (inside its namespace).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let (addr, path) = (self.metrics, path.to_string());
        crate::traffic::in_netns(&self.ns, move || crate::traffic::http_get(addr, &path))
    }

    /// The relay's /metrics text.
    pub fn metrics(&self) -> std::io::Result<String> {
        self.get("/metrics").map(|(_, b)| b)
    }

    /// The relay's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// What the relay logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `sig` and waits up to 5 s for the exit (then SIGKILL).
    /// Returns the exit status.
    pub fn stop_with(&mut self, sig: rustix::process::Signal) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Stops the relay gracefully (SIGTERM: rules removed).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.stop_with(rustix::process::Signal::TERM)
    }

    /// Kills the relay (SIGKILL: rules stay, as after a crash).
    pub fn kill(&mut self) -> Option<std::process::ExitStatus> {
        self.stop_with(rustix::process::Signal::KILL)
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
