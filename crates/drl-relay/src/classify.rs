//! Sans-IO classification: which configured class (limit) a packet
//! belongs to. Classes are tried in order; the first whose every given
//! field matches wins. A packet no class matches is accepted and counted.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::packet::Packet;

/// An IPv4 or IPv6 prefix (`10.0.0.0/8`, `2001:db8::/32`; a bare address
/// is a /32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// True if `ip` is inside the prefix (an IPv4 prefix never holds an
    /// IPv6 address and vice versa).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }

    /// True for an IPv6 prefix.
    pub fn is_v6(&self) -> bool {
        self.addr.is_ipv6()
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an address or prefix (e.g. 10.0.0.0/8, 2001:db8::/32)");
        let (a, p) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The fields a class matches on (absent fields match anything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    /// Source prefix.
    pub src: Option<Cidr>,
    /// Destination prefix.
    pub dst: Option<Cidr>,
    /// IP protocol number.
    pub proto: Option<u8>,
    /// Source port (TCP/UDP).
    pub sport: Option<u16>,
    /// Destination port (TCP/UDP).
    pub dport: Option<u16>,
    /// Netfilter mark (`fwmark`) of the packet.
    pub fwmark: Option<u32>,
}

impl Match {
    /// True if `p` (with netfilter mark `mark`) matches every given field.
    pub fn matches(&self, p: &Packet, mark: u32) -> bool {
        self.src.is_none_or(|c| c.contains(p.src))
            && self.dst.is_none_or(|c| c.contains(p.dst))
            && self.proto.is_none_or(|x| x == p.proto)
            && self.sport.is_none_or(|x| x == p.sport)
            && self.dport.is_none_or(|x| x == p.dport)
            && self.fwmark.is_none_or(|x| x == mark)
    }
}

/// Classes in order; [`Classifier::classify`] returns the index of the
/// first that matches.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    matches: Vec<Match>,
}

impl Classifier {
    /// A classifier over `matches`, in order.
    pub fn new(matches: Vec<Match>) -> Self {
        Self { matches }
    }

    /// The index of the first class `p` (marked `mark`) matches.
    pub fn classify(&self, p: &Packet, mark: u32) -> Option<usize> {
        self.matches.iter().position(|m| m.matches(p, mark))
    }
}

/// Parses a protocol name or number (`tcp`, `udp`, `icmp`, `icmpv6`,
/// `0`-`255`).
pub fn parse_protocol(s: &str) -> Result<u8, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "tcp" => Ok(crate::packet::TCP),
        "udp" => Ok(crate::packet::UDP),
        "icmp" => Ok(crate::packet::ICMP),
        "icmpv6" | "ipv6-icmp" => Ok(crate::packet::ICMPV6),
        n => n
            .parse()
            .map_err(|_| format!("unknown protocol {s:?} (tcp, udp, icmp, icmpv6 or a number)")),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::packet::{TCP, UDP, parse, tests::v4};

    #[test]
    fn prefixes() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.255.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let h: Cidr = "2001:db8::1".parse().unwrap();
        assert!(h.contains("2001:db8::1".parse().unwrap()));
        assert!(!h.contains("2001:db8::2".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("ten".parse::<Cidr>().is_err());
        assert_eq!(c.to_string(), "10.1.0.0/16");
    }

    #[test]
    fn first_matching_class_wins() {
        let cls = Classifier::new(vec![
            Match {
                proto: Some(UDP),
                ..Match::default()
            },
            Match {
                dst: Some("10.0.0.0/8".parse().unwrap()),
                dport: Some(5001),
                ..Match::default()
            },
            Match {
                fwmark: Some(7),
                ..Match::default()
            },
        ]);
        let tcp = parse(&v4([1, 1, 1, 1], [10, 0, 0, 2], TCP, 999, 5001)).unwrap();
        let udp = parse(&v4([1, 1, 1, 1], [10, 0, 0, 2], UDP, 999, 5001)).unwrap();
        let other = parse(&v4([1, 1, 1, 1], [11, 0, 0, 2], TCP, 999, 5001)).unwrap();
        assert_eq!(cls.classify(&udp, 0), Some(0));
        assert_eq!(cls.classify(&tcp, 0), Some(1));
        assert_eq!(cls.classify(&other, 0), None);
        assert_eq!(cls.classify(&other, 7), Some(2));
    }

    #[test]
    fn protocols() {
        assert_eq!(parse_protocol("TCP"), Ok(TCP));
        assert_eq!(parse_protocol("132"), Ok(132));
        assert!(parse_protocol("sctpx").is_err());
    }

    proptest! {
        /// An address is inside its own prefix of every length, and a
        /// prefix holds exactly the addresses that agree on its bits.
        #[test]
        fn prefix_membership(a in any::<u32>(), b in any::<u32>(), len in 0u8..=32) {
            let c: Cidr = format!("{}/{len}", std::net::Ipv4Addr::from(a)).parse().unwrap();
            prop_assert!(c.contains(IpAddr::from(std::net::Ipv4Addr::from(a))));
            let same = len == 0 || (a ^ b) >> (32 - len as u32) == 0;
            prop_assert_eq!(c.contains(IpAddr::from(std::net::Ipv4Addr::from(b))), same);
        }
    }
}
