//! The soak's cluster: 3 gossip nodes, 5 Orbit nodes, 2 nodes on one
//! Redis, 1 local-scope node, and the limits they enforce. Each node's
//! config file is generated here; faults that act through the config
//! (`cluster.faults`, a changed spare quota) rewrite it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::processes::{Group, Proc, free_udp_port};

/// Gossip nodes.
pub const GOSSIP_NODES: usize = 3;
/// Orbit ring size.
pub const ORBIT_NODES: usize = 5;
/// `drl serve` nodes sharing the Redis.
pub const REDIS_NODES: usize = 2;

/// Limit `g` (`scope: gossip`): this many per second over the 3 nodes.
pub const GOSSIP_LIMIT: u64 = 600;
/// Limit `o` (`scope: orbit`, fixed window): cap per window.
pub const ORBIT_CAP: u64 = 1000;
/// Limit `o`'s window, ms.
pub const ORBIT_WINDOW_MS: u64 = 2000;
/// Limit `r` (`scope: redis`, fixed window): quota per window.
pub const REDIS_QUOTA: u64 = 400;
/// Limit `r`'s window, ms.
pub const REDIS_WINDOW_MS: u64 = 2000;
/// Limit `l` (local fixed window on the local node): quota per window.
pub const LOCAL_QUOTA: u64 = 100;
/// Limit `l`'s window, ms.
pub const LOCAL_WINDOW_MS: u64 = 1000;
/// `max_keys` of the `flood` limit every node has (distinct keys only).
pub const FLOOD_MAX_KEYS: u64 = 2000;
/// Orbit ring datagram loss, all the time (`orbit.fault.drop_rate`).
pub const ORBIT_LOSS: f64 = 0.05;
/// `redis_resilience` decision deadline, ms: long enough that a loaded
/// machine does not fail over while Redis is up.
pub const REDIS_TIMEOUT_MS: u64 = 1000;
/// Breaker `open_ms`.
pub const REDIS_OPEN_MS: u64 = 500;

/// A deliberate misconfiguration the soak's checks must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Orbit node 5 enforces limit `o` on its own (`scope: local`, same
    /// cap, no `orbit:` section) instead of on the ring: the ring's 4
    /// others and it each admit up to the cap per window.
    OrbitLocal,
}

impl Broken {
    /// Parses `orbit-local`. (An Orbit node with its cap doubled is no
    /// such mode: its limit id differs, the ring never exchanges that
    /// limit's tables with it, and the others' invariant holds — tried,
    /// see RELIABILITY.md.)
    pub fn parse(s: &str) -> Result<Broken> {
        match s {
            "orbit-local" => Ok(Broken::OrbitLocal),
            _ => anyhow::bail!("unknown --broken mode {s:?}; expected orbit-local"),
        }
    }
}

/// What a node's config says now, beyond its fixed part.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Quota per second of limit `spare` (changed by reload faults).
    pub spare: u64,
    /// `cluster.faults.drop_rate` (gossip nodes).
    pub drop_rate: f64,
    /// `cluster.faults.isolate` (gossip nodes).
    pub isolate: bool,
}

/// Every process and what its config is made of.
pub struct Topology {
    /// The processes: gossip 1-3, orbit 1-5, redis 1-2, local, then the
    /// `redis-server` (last).
    pub procs: Vec<Proc>,
    /// Per process (same index), its config state.
    pub state: Vec<NodeState>,
    gossip_udp: Vec<SocketAddr>,
    orbit_udp: Vec<SocketAddr>,
    key_file: PathBuf,
    broken: Option<Broken>,
}

/// The loopback address of process `i`: 127.0.0.(10 + i).
fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + i as u8)
}

impl Topology {
    /// Lays out the processes (nothing started): configs in `dir`, logs
    /// in `logs`.
    pub fn new(dir: &Path, logs: &Path, broken: Option<Broken>) -> Result<Topology> {
        let key_file = dir.join("cluster.key");
        std::fs::write(&key_file, "soak-cluster-key-0123456789abcdef\n")?;
        let mut procs = Vec::new();
        let mut gossip_udp = Vec::new();
        let mut orbit_udp = Vec::new();
        let groups = [
            (Group::Gossip, GOSSIP_NODES),
            (Group::Orbit, ORBIT_NODES),
            (Group::Redis, REDIS_NODES),
            (Group::Local, 1),
        ];
        for (group, n) in groups {
            for k in 1..=n {
                let i = procs.len();
                let name = if group == Group::Local {
                    "local".to_string()
                } else {
                    format!("{}-{k}", group.name())
                };
                let p = Proc::drl(&name, group, ip(i), dir, logs)?;
                match group {
                    Group::Gossip => {
                        gossip_udp.push(SocketAddr::from((p.ip, free_udp_port(p.ip)?)))
                    }
                    Group::Orbit => orbit_udp.push(SocketAddr::from((p.ip, free_udp_port(p.ip)?))),
                    _ => {}
                }
                procs.push(p);
            }
        }
        procs.push(Proc::redis(ip(procs.len()), logs)?);
        let state = procs
            .iter()
            .map(|_| NodeState {
                spare: 50,
                ..NodeState::default()
            })
            .collect();
        Ok(Topology {
            procs,
            state,
            gossip_udp,
            orbit_udp,
            key_file,
            broken,
        })
    }

    /// Index of the `redis-server`.
    pub fn redis_server(&self) -> usize {
        self.procs.len() - 1
    }

    /// Indices of the processes of `group`.
    pub fn of(&self, group: Group) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| self.procs[i].group == group)
            .collect()
    }

    /// Process `i`'s config file as its [`NodeState`] says now.
    pub fn config(&self, i: usize) -> String {
        let p = &self.procs[i];
        let st = &self.state[i];
        let mut y = format!(
            "listen:\n  http: \"{}\"\n  grpc: \"{}\"\nlimits:\n  - name: flood\n    algorithm: fixed-window\n    quota: 5/s\n    max_keys: {FLOOD_MAX_KEYS}\n  - name: spare\n    algorithm: gcra\n    quota: {}/s\n",
            p.http, p.grpc, st.spare
        );
        let k = self.of(p.group).iter().position(|&j| j == i).unwrap_or(0);
        let broken_here = self.broken.is_some() && p.group == Group::Orbit && k == ORBIT_NODES - 1;
        match p.group {
            Group::Gossip => {
                let seeds: Vec<String> =
                    self.gossip_udp.iter().map(|a| format!("\"{a}\"")).collect();
                y += &format!(
                    "  - name: g\n    quota: {GOSSIP_LIMIT}/s\n    scope: gossip\ncluster:\n  node_id: {}\n  bind: \"{}\"\n  seeds: [{}]\n  key_file: \"{}\"\n  algorithm: grd\n",
                    k + 1,
                    self.gossip_udp[k],
                    seeds.join(", "),
                    self.key_file.display()
                );
                if st.drop_rate > 0.0 || st.isolate {
                    y += &format!(
                        "  faults:\n    drop_rate: {}\n    isolate: {}\n    seed: {}\n",
                        st.drop_rate,
                        st.isolate,
                        k + 1
                    );
                }
            }
            Group::Orbit if broken_here => {
                y += &format!(
                    "  - name: o\n    algorithm: fixed-window\n    quota: {ORBIT_CAP}/{ORBIT_WINDOW_MS}ms\n"
                );
            }
            Group::Orbit => {
                let cap = ORBIT_CAP;
                let ring: Vec<String> = self
                    .orbit_udp
                    .iter()
                    .enumerate()
                    .map(|(j, a)| format!("    - {{id: {}, addr: \"{a}\"}}\n", j + 1))
                    .collect();
                y += &format!(
                    "  - name: o\n    algorithm: fixed-window\n    quota: {cap}/{ORBIT_WINDOW_MS}ms\n    scope: orbit\norbit:\n  node_id: {}\n  bind: \"{}\"\n  key: {{file: \"{}\"}}\n  epoch_ms: 100\n  ring:\n{}  fault:\n    drop_rate: {ORBIT_LOSS}\n    seed: {}\n",
                    k + 1,
                    self.orbit_udp[k],
                    self.key_file.display(),
                    ring.concat(),
                    k + 1
                );
            }
            Group::Redis => {
                y += &format!(
                    "  - name: r\n    algorithm: fixed-window\n    quota: {REDIS_QUOTA}/{REDIS_WINDOW_MS}ms\n    scope: redis\nredis:\n  url: \"redis://{}\"\nredis_resilience:\n  default_policy: {{timeout_ms: {REDIS_TIMEOUT_MS}, on_store_error: deny}}\n  breaker: {{failure_threshold: 5, open_ms: {REDIS_OPEN_MS}}}\n",
                    self.procs[self.redis_server()].http
                );
            }
            Group::Local => {
                y += &format!(
                    "  - name: l\n    algorithm: fixed-window\n    quota: {LOCAL_QUOTA}/{LOCAL_WINDOW_MS}ms\n"
                );
            }
            Group::RedisServer => {}
        }
        y
    }

    /// Writes every `drl serve` node's config file.
    pub fn write_configs(&self) -> Result<()> {
        for i in 0..self.procs.len() {
            if self.procs[i].group != Group::RedisServer {
                self.procs[i].write_config(&self.config(i))?;
            }
        }
        Ok(())
    }
}
