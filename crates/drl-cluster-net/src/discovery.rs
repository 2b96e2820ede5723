//! Discovery by DNS: seeds written `dns:NAME:PORT`, resolved periodically,
//! every A and AAAA record a peer at `PORT` (a Kubernetes headless service
//! or any DNS round robin); and the per-pod helpers a shared config needs
//! (`node_id: ordinal`, `advertise: env:VAR`).
//!
//! Two resolvers: the system's (`getaddrinfo` through
//! `tokio::net::lookup_host`: `/etc/hosts`, search domains, what
//! Kubernetes pods expect) by default, or, with `discovery.nameserver`
//! set, a small DNS client over UDP that asks that server for A and AAAA
//! records directly (no search list, no cache). The static DNS server the
//! tests answer with is drl-test-kit's `dns::DnsResponder`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// A seed: a literal address, or a DNS name resolved periodically.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seed {
    /// `IP:PORT`.
    Addr(SocketAddr),
    /// `dns:NAME:PORT`: every A/AAAA record of `name`, at `port`.
    Dns {
        /// The name (resolved as given; the system resolver applies the
        /// search domains).
        name: String,
        /// The port of every peer found.
        port: u16,
    },
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seed::Addr(a) => write!(f, "{a}"),
            Seed::Dns { name, port } => write!(f, "dns:{name}:{port}"),
        }
    }
}

impl FromStr for Seed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("dns:") {
            let (name, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("seed {s:?}: expected dns:NAME:PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("seed {s:?}: {port:?} is not a port"))?;
            let name = name.trim_end_matches('.');
            if name.is_empty()
                || name.len() > 253
                || name.split('.').any(|l| {
                    l.is_empty()
                        || l.len() > 63
                        || !l
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                })
            {
                return Err(format!("seed {s:?}: {name:?} is not a DNS name"));
            }
            if port == 0 {
                return Err(format!("seed {s:?}: the port must not be 0"));
            }
            return Ok(Seed::Dns {
                name: name.to_ascii_lowercase(),
                port,
            });
        }
        s.parse::<SocketAddr>().map(Seed::Addr).map_err(|_| {
            format!("seed {s:?}: expected IP:PORT (e.g. 10.0.0.5:9191) or dns:NAME:PORT")
        })
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Seed {
    /// The port peers found through this seed listen on.
    pub fn port(&self) -> u16 {
        match self {
            Seed::Addr(a) => a.port(),
            Seed::Dns { port, .. } => *port,
        }
    }
}

impl From<SocketAddr> for Seed {
    fn from(a: SocketAddr) -> Self {
        Seed::Addr(a)
    }
}

/// How DNS seeds are resolved (`cluster.discovery`, `orbit.discovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// Resolution period, ms (default 5,000). A record that disappears is
    /// a peer gone at the next resolution.
    pub interval_ms: u64,
    /// Ask this DNS server (UDP) directly instead of the system resolver
    /// (default: none, the system resolver).
    pub nameserver: Option<SocketAddr>,
    /// How long one resolution may take, ms (default 2,000). A failed or
    /// timed-out resolution keeps the previous answer.
    pub timeout_ms: u64,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            interval_ms: 5_000,
            nameserver: None,
            timeout_ms: 2_000,
        }
    }
}

impl DiscoveryConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval_ms < 10 || self.interval_ms > 3_600_000 {
            return Err("discovery.interval_ms must be in 10..=3600000".into());
        }
        if self.timeout_ms == 0 || self.timeout_ms > 60_000 {
            return Err("discovery.timeout_ms must be in 1..=60000".into());
        }
        Ok(())
    }
}

/// Resolves `name` to every address it has (A and AAAA), each with `port`,
/// sorted and deduplicated. A name that does not exist, or has no
/// records, resolves to no address (not an error); a server that fails or
/// does not answer in time is an error.
pub async fn resolve(
    name: &str,
    port: u16,
    cfg: &DiscoveryConfig,
) -> Result<Vec<SocketAddr>, String> {
    let timeout = Duration::from_millis(cfg.timeout_ms);
    let mut out = match cfg.nameserver {
        Some(ns) => {
            let (name, ns) = (name.to_string(), ns);
            tokio::task::spawn_blocking(move || query_server(ns, &name, timeout))
                .await
                .map_err(|e| format!("resolver task: {e}"))??
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect::<Vec<_>>()
        }
        None => match tokio::time::timeout(timeout, tokio::net::lookup_host((name, port))).await {
            Err(_) => return Err(format!("{name}: no answer in {} ms", cfg.timeout_ms)),
            Ok(Ok(addrs)) => addrs.collect(),
            // getaddrinfo does not tell "no such name" apart portably: an
            // unknown name is an error here, and the previous answer stays.
            Ok(Err(e)) => return Err(format!("{name}: {e}")),
        },
    };
    out.sort();
    out.dedup();
    Ok(out)
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// Asks `server` for the A and AAAA records of `name` (one UDP query
/// each, recursion desired). NXDOMAIN is an empty answer.
pub fn query_server(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<Vec<IpAddr>, String> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).map_err(|e| format!("dns socket: {e}"))?;
    sock.connect(server)
        .map_err(|e| format!("dns server {server}: {e}"))?;
    sock.set_read_timeout(Some(timeout))
        .map_err(|e| format!("dns socket: {e}"))?;
    let mut ips = Vec::new();
    for (i, qtype) in [TYPE_A, TYPE_AAAA].into_iter().enumerate() {
        // A random query id (RandomState's keys are random per process).
        let id = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.finish() as u16
        };
        let q = encode_query(id, name, qtype)?;
        sock.send(&q)
            .map_err(|e| format!("dns server {server}: {e}"))?;
        let mut buf = [0u8; 1500];
        loop {
            let n = sock
                .recv(&mut buf)
                .map_err(|e| format!("dns server {server}: no answer for {name} ({e})"))?;
            match decode_answer(&buf[..n], id, qtype) {
                Ok(Some(found)) => {
                    ips.extend(found);
                    break;
                }
                // Another query's answer (a late one): keep waiting.
                Ok(None) => continue,
                Err(e) => return Err(format!("dns server {server}: {name}: {e}")),
            }
        }
    }
    Ok(ips)
}

/// A DNS query for `name`, type `qtype`, class IN, recursion desired.
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(32 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    encode_name(&mut q, name)?;
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    Ok(q)
}

fn encode_name(out: &mut Vec<u8>, name: &str) -> Result<(), String> {
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("{name:?} is not a DNS name"));
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    Ok(())
}

/// Reads a (possibly compressed) name at `pos`; returns it lowercased and
/// the position after it in the message.
fn read_name(msg: &[u8], mut pos: usize) -> Result<(String, usize), String> {
    let mut name = String::new();
    let mut end = None;
    for _ in 0..64 {
        let len = *msg.get(pos).ok_or("truncated name")? as usize;
        if len & 0xC0 == 0xC0 {
            let lo = *msg.get(pos + 1).ok_or("truncated pointer")? as usize;
            end.get_or_insert(pos + 2);
            pos = ((len & 0x3F) << 8) | lo;
            continue;
        }
        if len == 0 {
            return Ok((name, end.unwrap_or(pos + 1)));
        }
        let label = msg.get(pos + 1..pos + 1 + len).ok_or("truncated label")?;
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += 1 + len;
    }
    Err("name too long or pointer loop".into())
}

fn u16_at(msg: &[u8], pos: usize) -> Result<u16, String> {
    msg.get(pos..pos + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| "truncated message".to_string())
}

/// Decodes an answer to query `id`: `Ok(None)` if it answers another
/// query, the addresses of type `qtype` otherwise (none for NXDOMAIN).
pub fn decode_answer(msg: &[u8], id: u16, qtype: u16) -> Result<Option<Vec<IpAddr>>, String> {
    if msg.len() < 12 {
        return Err("truncated header".into());
    }
    if u16_at(msg, 0)? != id || msg[2] & 0x80 == 0 {
        return Ok(None);
    }
    if msg[2] & 0x02 != 0 {
        return Err("truncated answer (TC): too many records for UDP".into());
    }
    match msg[3] & 0x0F {
        0 => {}
        3 => return Ok(Some(Vec::new())),
        rcode => return Err(format!("server answered rcode {rcode}")),
    }
    let qd = u16_at(msg, 4)?;
    let an = u16_at(msg, 6)?;
    let mut pos = 12;
    for _ in 0..qd {
        pos = read_name(msg, pos)?.1 + 4;
    }
    let mut out = Vec::new();
    for _ in 0..an {
        pos = read_name(msg, pos)?.1;
        let rtype = u16_at(msg, pos)?;
        let len = u16_at(msg, pos + 8)? as usize;
        let data = msg
            .get(pos + 10..pos + 10 + len)
            .ok_or("truncated record")?;
        match (rtype, len) {
            (TYPE_A, 4) if qtype == TYPE_A => {
                out.push(IpAddr::from([data[0], data[1], data[2], data[3]]))
            }
            (TYPE_AAAA, 16) if qtype == TYPE_AAAA => {
                let mut o = [0u8; 16];
                o.copy_from_slice(data);
                out.push(IpAddr::from(o));
            }
            // CNAMEs and anything else: the records that follow carry the
            // addresses.
            _ => {}
        }
        pos += 10 + len;
    }
    Ok(Some(out))
}

/// The node id of a StatefulSet pod: its hostname's trailing ordinal plus
/// one (`drl-0` is node 1, `drl-2` node 3). The hostname is `$HOSTNAME`,
/// else `/etc/hostname`.
pub fn ordinal_node_id() -> Result<u32, String> {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .ok_or("node_id: ordinal needs $HOSTNAME or /etc/hostname")?;
    ordinal_of(host.trim())
}

/// `name-N` -> `N + 1`.
pub fn ordinal_of(host: &str) -> Result<u32, String> {
    let short = host.split('.').next().unwrap_or(host);
    short
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse::<u32>().ok())
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| {
            format!("node_id: ordinal: hostname {host:?} does not end in -N (a StatefulSet pod name such as drl-0)")
        })
}

/// Deserializes a node id: a number, or `ordinal` ([`ordinal_node_id`]).
pub fn de_node_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Num(u32),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Num(n) => Ok(n),
        Raw::Text(s) if s.trim() == "ordinal" => {
            ordinal_node_id().map_err(serde::de::Error::custom)
        }
        Raw::Text(s) => s.trim().parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "node_id {s:?}: expected a number or `ordinal` (from the StatefulSet pod name)"
            ))
        }),
    }
}

/// Where this node tells its peers to reach it (`advertise`): an IP, or
/// `env:VAR` naming a variable that holds one (Kubernetes: the pod IP from
/// the downward API). The port is the bound one.
pub fn advertise_ip(spec: &str) -> Result<IpAddr, String> {
    let (what, text) = match spec.trim().strip_prefix("env:") {
        Some(var) => (
            format!("advertise {spec:?}"),
            std::env::var(var).map_err(|_| {
                format!("advertise {spec:?}: environment variable {var} is not set")
            })?,
        ),
        None => (format!("advertise {spec:?}"), spec.trim().to_string()),
    };
    let ip: IpAddr = text
        .trim()
        .parse()
        .map_err(|_| format!("{what}: {text:?} is not an IP address"))?;
    if ip.is_unspecified() {
        return Err(format!("{what}: an unspecified address cannot be reached"));
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seeds_parse() {
        assert_eq!(
            "dns:drl-headless.default.svc:9191".parse::<Seed>().unwrap(),
            Seed::Dns {
                name: "drl-headless.default.svc".into(),
                port: 9191
            }
        );
        assert_eq!(
            "10.0.0.5:9191".parse::<Seed>().unwrap(),
            Seed::Addr("10.0.0.5:9191".parse().unwrap())
        );
        assert!(matches!("[::1]:9".parse::<Seed>(), Ok(Seed::Addr(_))));
        for bad in [
            "dns:x",
            "dns::9",
            "dns:a..b:9",
            "dns:a b:9",
            "dns:x:0",
            "dns:x:70000",
            "host:9",
        ] {
            assert!(bad.parse::<Seed>().is_err(), "{bad}");
        }
        assert_eq!(
            Seed::Dns {
                name: "a.b".into(),
                port: 1
            }
            .to_string(),
            "dns:a.b:1"
        );
    }

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_of("drl-0").unwrap(), 1);
        assert_eq!(
            ordinal_of("drl-gossip-12.drl-gossip.default.svc").unwrap(),
            13
        );
        assert!(ordinal_of("drl").is_err());
        assert!(ordinal_of("drl-x").is_err());
        assert!(advertise_ip("0.0.0.0").is_err());
        assert_eq!(
            advertise_ip("10.1.2.3").unwrap(),
            IpAddr::from([10, 1, 2, 3])
        );
        assert!(advertise_ip("env:DRL_TEST_SURELY_UNSET_VAR").is_err());
    }

    proptest! {
        #[test]
        fn hostile_answers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), id in any::<u16>()) {
            let _ = decode_answer(&bytes, id, TYPE_A);
        }
    }
}
