//! `relay.yaml`: what the relay captures, how it classifies packets into
//! limits and how it limits them (docs/relay.md has every key).
//!
//! Errors name the file, line and column (values such as quotas and
//! prefixes are checked while parsing, so a bad one points at itself).

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use drl_cluster::alloc::AlgorithmKind;
use drl_cluster_net::GossipConfig;
use serde::{Deserialize, Deserializer};

use crate::classify::{Cidr, Match, parse_protocol};
use crate::units::{parse_rate, parse_size};

/// Where the relay's packets are queued from (the iptables filter chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Chain {
    /// Locally generated packets (the relay sits on the senders' host).
    #[default]
    Output,
    /// Routed packets (the relay is a router or bridge hop).
    Forward,
    /// Packets for local sockets (the relay sits on the receivers' host).
    Input,
}

impl Chain {
    /// The iptables chain name.
    pub fn name(self) -> &'static str {
        match self {
            Chain::Output => "OUTPUT",
            Chain::Forward => "FORWARD",
            Chain::Input => "INPUT",
        }
    }
}

/// `local` (this relay alone) or `gossip` (a global limit shared with the
/// peers in `cluster`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// The limit applies to this relay's traffic alone.
    #[default]
    Local,
    /// The limit is global, shared by gossip (drl-cluster-net's Cloud Control
    /// node, as `drl serve`'s `scope: gossip`).
    Gossip,
}

/// One class: the packets it matches and their limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    /// The class's (limit's) name, used in metrics and on the wire.
    pub name: String,
    /// Which packets belong to it.
    pub matches: Match,
    /// The limit, bytes per second (global for `scope: gossip`).
    pub rate: u64,
    /// Token bucket depth, bytes (split over the cluster's `N` nodes for
    /// `scope: gossip`).
    pub burst: u64,
}

/// A parsed and checked `relay.yaml`.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// NFQUEUE number.
    pub queue: u16,
    /// Chain the capture rules go into.
    pub chain: Chain,
    /// Only packets leaving (OUTPUT, FORWARD) or arriving on (INPUT) this
    /// interface.
    pub interface: Option<String>,
    /// Install (and remove on exit) the iptables rules.
    pub install_rules: bool,
    /// `--queue-bypass` on the rules: packets pass when no relay listens.
    pub queue_bypass: bool,
    /// Accept (rather than drop) packets when the kernel queue is full.
    pub accept_when_full: bool,
    /// Kernel queue length, packets.
    pub queue_max_len: u32,
    /// Hold accepted packets this long before their verdict (the
    /// testbed's RTT), ms.
    pub delay_ms: u64,
    /// Also capture IPv6 (ip6tables) for classes without an IPv4 prefix.
    pub ipv6: bool,
    /// /metrics and /healthz listen address (`None`: no listener).
    pub listen: Option<SocketAddr>,
    /// The allocator every class runs.
    pub algorithm: AlgorithmKind,
    /// Local or gossip.
    pub scope: Scope,
    /// The gossip node (`scope: gossip`), with `algorithm` applied.
    pub cluster: Option<GossipConfig>,
    /// Classes in match order.
    pub classes: Vec<Class>,
    /// Random seed of the local node's decisions.
    pub seed: u64,
    /// Benchmark baseline (`drl relay --accept-all`, never from the
    /// file): accept every queued packet without parsing or deciding.
    pub accept_all: bool,
}

pub use drl_config::ConfigError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    queue: u16,
    #[serde(default, deserialize_with = "de_chain")]
    chain: Chain,
    #[serde(default)]
    interface: Option<String>,
    #[serde(default = "yes")]
    install_rules: bool,
    #[serde(default = "yes")]
    queue_bypass: bool,
    #[serde(default)]
    accept_when_full: bool,
    #[serde(default = "default_queue_len")]
    queue_max_len: u32,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    ipv6: bool,
    #[serde(default = "default_listen")]
    listen: Option<SocketAddr>,
    #[serde(default, deserialize_with = "de_algorithm")]
    algorithm: Option<AlgorithmKind>,
    #[serde(default, deserialize_with = "de_scope")]
    scope: Scope,
    #[serde(default)]
    cluster: Option<GossipConfig>,
    classes: Vec<RawClass>,
    #[serde(default)]
    seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: String,
    #[serde(default, rename = "match")]
    matches: RawMatch,
    #[serde(deserialize_with = "de_rate")]
    quota: u64,
    #[serde(default, deserialize_with = "de_size")]
    burst: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    #[serde(default, deserialize_with = "de_cidr")]
    src: Option<Cidr>,
    #[serde(default, deserialize_with = "de_cidr")]
    dst: Option<Cidr>,
    #[serde(default, deserialize_with = "de_protocol")]
    protocol: Option<u8>,
    #[serde(default)]
    sport: Option<u16>,
    #[serde(default)]
    dport: Option<u16>,
    #[serde(default)]
    fwmark: Option<u32>,
}

fn yes() -> bool {
    true
}
fn default_queue_len() -> u32 {
    4096
}
fn default_listen() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 9464)))
}

thread_local! {
    /// The raw text of the last value a `de_*` function refused: serde
    /// places custom errors poorly (often at the document's start), so
    /// the error is placed at the value's own first occurrence instead.
    static BAD_VALUE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// A custom error about the value written as `raw`.
fn bad<E: serde::de::Error>(raw: &str, message: impl fmt::Display) -> E {
    BAD_VALUE.with(|b| *b.borrow_mut() = Some(raw.to_string()));
    E::custom(message)
}

/// A scalar as written (string or number).
fn scalar<'de, D: Deserializer<'de>>(d: D, what: &str) -> Result<String, D::Error> {
    match serde_norway::Value::deserialize(d)? {
        serde_norway::Value::String(s) => Ok(s),
        serde_norway::Value::Number(n) => Ok(n.to_string()),
        serde_norway::Value::Bool(b) => Err(bad(&b.to_string(), format!("{what}, not {b}"))),
        _ => Err(serde::de::Error::custom(what)),
    }
}

fn de_chain<'de, D: Deserializer<'de>>(d: D) -> Result<Chain, D::Error> {
    let s = String::deserialize(d)?;
    match s.to_ascii_uppercase().as_str() {
        "OUTPUT" => Ok(Chain::Output),
        "FORWARD" => Ok(Chain::Forward),
        "INPUT" => Ok(Chain::Input),
        o => Err(bad(
            &s,
            format!("unknown chain {o:?} (OUTPUT, FORWARD or INPUT)"),
        )),
    }
}

fn de_scope<'de, D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
    match String::deserialize(d)?.as_str() {
        "local" => Ok(Scope::Local),
        "gossip" => Ok(Scope::Gossip),
        o => Err(bad(o, format!("unknown scope {o:?} (local or gossip)"))),
    }
}

fn de_algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<AlgorithmKind>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(|e| bad(&s, e))
}

fn de_rate<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = scalar(d, "quota must be a rate such as 10Mbit/s")?;
    parse_rate(&s).map_err(|e| bad(&s, e))
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = scalar(d, "burst must be a size such as 64KB")?;
    parse_size(&s).map(Some).map_err(|e| bad(&s, e))
}

fn de_cidr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cidr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(|e| bad(&s, e))
}

fn de_protocol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    let s = scalar(d, "protocol must be tcp, udp or a number")?;
    parse_protocol(&s).map(Some).map_err(|e| bad(&s, e))
}

impl RelayConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, format!("cannot read: {e}")))?;
        Self::parse(&name, &text)
    }

    /// Parses and checks `text` (named `source_name` in errors).
    pub fn parse(source_name: &str, text: &str) -> Result<Self, ConfigError> {
        let raw = Self::read(source_name, text)?;
        let err = |m: String, needles: &[&str]| -> ConfigError {
            ConfigError::new(source_name, m).locate(text, needles)
        };
        let classes = Self::classes(raw.classes, &err)?;
        if raw.queue_max_len == 0 {
            return Err(err(
                "queue_max_len must be at least 1".into(),
                &["queue_max_len"],
            ));
        }
        if raw.delay_ms > 10_000 {
            return Err(err("delay_ms must be at most 10000".into(), &["delay_ms"]));
        }
        if let Some(i) = &raw.interface
            && (i.is_empty() || i.len() > 15 || i.contains(['/', ' ', '\0']))
        {
            return Err(err(
                format!("interface {i:?} is not a valid interface name"),
                &["interface"],
            ));
        }
        let cluster = Self::cluster(raw.scope, raw.cluster, raw.algorithm, &err)?;
        let algorithm = match (&cluster, raw.algorithm) {
            (Some(c), _) => c.algorithm,
            (None, Some(a)) => a,
            (None, None) => AlgorithmKind::Ctb,
        };
        Ok(Self {
            queue: raw.queue,
            chain: raw.chain,
            interface: raw.interface,
            install_rules: raw.install_rules,
            queue_bypass: raw.queue_bypass,
            accept_when_full: raw.accept_when_full,
            queue_max_len: raw.queue_max_len,
            delay_ms: raw.delay_ms,
            ipv6: raw.ipv6,
            listen: raw.listen,
            algorithm,
            scope: raw.scope,
            cluster,
            classes,
            seed: raw.seed.unwrap_or(1),
            accept_all: false,
        })
    }

    /// The YAML read into its raw form, an error at the value a `de_*`
    /// function refused when there is one.
    fn read(source_name: &str, text: &str) -> Result<RawConfig, ConfigError> {
        BAD_VALUE.with(|b| b.borrow_mut().take());
        serde_norway::from_str(text).map_err(|e| {
            let located = ConfigError::from_parser(
                source_name,
                e.to_string(),
                e.location().map(|l| (l.line(), l.column())),
            );
            // A value a `de_*` function refused: at its first occurrence
            // (an identical earlier value would have failed first).
            if let Some(raw) = BAD_VALUE.with(|b| b.borrow_mut().take()) {
                let at_value = ConfigError {
                    line: None,
                    column: None,
                    ..located.clone()
                }
                .locate(text, &[raw.as_str()]);
                if at_value.line.is_some() {
                    return at_value;
                }
            }
            located
        })
    }

    /// The classes, each checked (name, ports, IP versions).
    fn classes(
        raw: Vec<RawClass>,
        err: &impl Fn(String, &[&str]) -> ConfigError,
    ) -> Result<Vec<Class>, ConfigError> {
        if raw.is_empty() {
            return Err(err(
                "classes: at least one class is needed".into(),
                &["classes"],
            ));
        }
        let mut out = Vec::with_capacity(raw.len());
        for c in raw {
            if c.name.is_empty() || c.name.len() > 64 || c.name.contains(['\0', '#']) {
                return Err(err(
                    format!(
                        "class name {:?} must be 1-64 bytes without NUL or '#'",
                        c.name
                    ),
                    &["name:", &c.name],
                ));
            }
            if out.iter().any(|x: &Class| x.name == c.name) {
                return Err(err(
                    format!("class {:?} is defined twice", c.name),
                    &["name:", &c.name],
                ));
            }
            let m = &c.matches;
            if (m.sport.is_some() || m.dport.is_some())
                && !matches!(m.protocol, Some(crate::packet::TCP | crate::packet::UDP))
            {
                return Err(err(
                    format!(
                        "class {:?}: a port match needs protocol: tcp or udp",
                        c.name
                    ),
                    &["port:"],
                ));
            }
            if let (Some(s), Some(d)) = (m.src, m.dst)
                && s.is_v6() != d.is_v6()
            {
                return Err(err(
                    format!(
                        "class {:?}: src and dst are of different IP versions",
                        c.name
                    ),
                    &["src:"],
                ));
            }
            out.push(Class {
                matches: Match {
                    src: m.src,
                    dst: m.dst,
                    proto: m.protocol,
                    sport: m.sport,
                    dport: m.dport,
                    fwmark: m.fwmark,
                },
                rate: c.quota,
                // 100 ms of the rate, at least two full-size packets.
                burst: c.burst.unwrap_or((c.quota / 10).max(3_000)),
                name: c.name,
            });
        }
        Ok(out)
    }

    /// The `cluster:` section as `scope` and `algorithm` allow it.
    fn cluster(
        scope: Scope,
        cluster: Option<GossipConfig>,
        algorithm: Option<AlgorithmKind>,
        err: &impl Fn(String, &[&str]) -> ConfigError,
    ) -> Result<Option<GossipConfig>, ConfigError> {
        Ok(match (scope, cluster) {
            (Scope::Local, Some(_)) => {
                return Err(err(
                    "cluster: is only used with scope: gossip (set scope: gossip or remove it)"
                        .into(),
                    &["cluster"],
                ));
            }
            (Scope::Local, None) => None,
            (Scope::Gossip, None) => {
                return Err(err(
                    "scope: gossip needs a cluster: section (node_id, bind, seeds, key)".into(),
                    &["scope"],
                ));
            }
            (Scope::Gossip, Some(mut c)) => {
                if let Some(a) = algorithm {
                    if a.is_central() {
                        return Err(err(
                            format!(
                                "algorithm {a} is a central limiter: use it with scope: local \
                                 (one relay sees all the traffic)"
                            ),
                            &["algorithm"],
                        ));
                    }
                    c.algorithm = a;
                }
                // The relay names flows itself (5-tuples).
                c.flow_separator = Some("#".to_string());
                c.validate()
                    .map_err(|e| err(format!("cluster: {e}"), &["cluster"]))?;
                Some(c)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
queue: 3
chain: output
classes:
  - name: web
    match: { dst: 10.0.0.0/8, protocol: tcp, dport: 5001 }
    quota: 10Mbit/s
  - name: marked
    match: { fwmark: 7 }
    quota: 1MB/s
    burst: 64KB
";

    #[test]
    fn a_good_config() {
        let c = RelayConfig::parse("relay.yaml", GOOD).unwrap();
        assert_eq!(c.queue, 3);
        assert_eq!(c.chain, Chain::Output);
        assert_eq!(c.scope, Scope::Local);
        assert_eq!(c.algorithm, AlgorithmKind::Ctb);
        assert!(c.queue_bypass && c.install_rules);
        assert_eq!(c.classes[0].rate, 1_250_000);
        assert_eq!(c.classes[0].burst, 125_000);
        assert_eq!(c.classes[0].matches.dport, Some(5001));
        assert_eq!(c.classes[1].burst, 64_000);
        assert_eq!(c.classes[1].matches.fwmark, Some(7));
    }

    fn error(text: &str) -> ConfigError {
        RelayConfig::parse("relay.yaml", text).unwrap_err()
    }

    #[test]
    fn a_bad_quota_points_at_itself() {
        let e = error(&GOOD.replace("10Mbit/s", "10 furlongs/s"));
        assert_eq!((e.line, e.column), (Some(6), Some(12)), "{e}");
        assert!(e.to_string().starts_with("relay.yaml:6:12: "), "{e}");
        assert!(e.message.contains("unknown rate unit"), "{e}");
    }

    #[test]
    fn bad_values_name_line_and_column() {
        let e = error(&GOOD.replace("10.0.0.0/8", "10.0.0.0/99"));
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("not an address or prefix"), "{e}");
        let e = error(&GOOD.replace("chain: output", "chain: sideways"));
        assert_eq!(e.line, Some(2), "{e}");
        let e = error(&GOOD.replace("queue: 3", "queue: 3\nqueues: 4"));
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn cross_field_errors_are_located() {
        let e = error(&GOOD.replace("name: marked", "name: web"));
        assert_eq!(e.line, Some(4), "first line naming it: {e}");
        assert!(e.message.contains("defined twice"));
        let e = error(&GOOD.replace("protocol: tcp, ", ""));
        assert!(e.message.contains("needs protocol"), "{e}");
        let e = error(&format!("scope: gossip\n{GOOD}"));
        assert!(e.message.contains("needs a cluster"), "{e}");
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn gossip_scope_takes_the_top_level_algorithm() {
        let text = format!(
            "scope: gossip\nalgorithm: fps\ncluster:\n  node_id: 1\n  bind: 127.0.0.1:7000\n  \
             seeds: [127.0.0.1:7001]\n{GOOD}"
        );
        let c = RelayConfig::parse("relay.yaml", &text).unwrap();
        assert_eq!(c.algorithm, AlgorithmKind::Fps);
        assert_eq!(c.cluster.as_ref().unwrap().algorithm, AlgorithmKind::Fps);
        let e = error(&text.replace("algorithm: fps", "algorithm: ctb"));
        assert!(e.message.contains("central limiter"), "{e}");
        let c = RelayConfig::parse("relay.yaml", &text.replace("fps", "gtb")).unwrap();
        assert_eq!(c.algorithm, AlgorithmKind::Gtb);
    }
}
