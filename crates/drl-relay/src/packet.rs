//! Sans-IO packet parsing: the IPv4/IPv6 header and the TCP/UDP ports of
//! a packet as NFQUEUE hands it over (starting at the IP header, possibly
//! truncated to the queue's copy range).
//!
//! The packet's length is the IP header's own length field (total length
//! for IPv4, 40 + payload length for IPv6), so a truncated copy still
//! costs what the whole packet costs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
pub const TCP: u8 = 6;
/// IP protocol number of UDP.
pub const UDP: u8 = 17;
/// IP protocol number of ICMP.
pub const ICMP: u8 = 1;
/// IP protocol number of ICMPv6.
pub const ICMPV6: u8 = 58;

/// What the relay knows about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (the upper-layer protocol after IPv6 extension headers).
    pub proto: u8,
    /// Source port (TCP/UDP; 0 otherwise or when not in the copy).
    pub sport: u16,
    /// Destination port (TCP/UDP; 0 otherwise or when not in the copy).
    pub dport: u16,
    /// Length of the whole IP packet in bytes (its cost).
    pub len: u32,
}

impl Packet {
    /// A stable 64-bit id of the packet's 5-tuple (FNV-1a), the flow id
    /// FPS counts flows by.
    pub fn flow(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |bytes: &[u8]| {
            for b in bytes {
                h ^= *b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                mix(&s.octets());
                mix(&d.octets());
            }
            (s, d) => {
                mix(&to_v6(s).octets());
                mix(&to_v6(d).octets());
            }
        }
        mix(&[self.proto]);
        mix(&self.sport.to_be_bytes());
        mix(&self.dport.to_be_bytes());
        h
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}

/// A packet the parser cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Shorter than the IP header.
    #[error("packet shorter than its IP header ({0} bytes)")]
    Short(usize),
    /// Neither IPv4 nor IPv6.
    #[error("IP version {0} is neither 4 nor 6")]
    Version(u8),
    /// The header's own length fields are inconsistent.
    #[error("malformed IP header")]
    Malformed,
}

/// Parses the IP header (and the ports, when the copy holds them) of
/// `bytes`. Ports missing from a truncated copy are 0; a packet is never
/// refused for lacking its transport header.
pub fn parse(bytes: &[u8]) -> Result<Packet, ParseError> {
    let first = *bytes.first().ok_or(ParseError::Short(0))?;
    match first >> 4 {
        4 => parse_v4(bytes),
        6 => parse_v6(bytes),
        v => Err(ParseError::Version(v)),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn ports(proto: u8, l4: Option<&[u8]>) -> (u16, u16) {
    match (proto, l4) {
        (TCP | UDP, Some(t)) => (be16(t, 0).unwrap_or(0), be16(t, 2).unwrap_or(0)),
        _ => (0, 0),
    }
}

fn parse_v4(b: &[u8]) -> Result<Packet, ParseError> {
    if b.len() < 20 {
        return Err(ParseError::Short(b.len()));
    }
    let ihl = (b[0] & 0x0f) as usize * 4;
    let total = be16(b, 2).unwrap_or(0) as usize;
    if ihl < 20 || total < ihl {
        return Err(ParseError::Malformed);
    }
    let proto = b[9];
    let src = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
    let dst = Ipv4Addr::new(b[16], b[17], b[18], b[19]);
    // Only the first fragment carries the ports.
    let frag_offset = be16(b, 6).unwrap_or(0) & 0x1fff;
    let l4 = if frag_offset == 0 { b.get(ihl..) } else { None };
    let (sport, dport) = ports(proto, l4);
    Ok(Packet {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        proto,
        sport,
        dport,
        len: total as u32,
    })
}

fn parse_v6(b: &[u8]) -> Result<Packet, ParseError> {
    if b.len() < 40 {
        return Err(ParseError::Short(b.len()));
    }
    let payload = be16(b, 4).unwrap_or(0) as u32;
    let mut next = b[6];
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&b[8..24]);
    dst.copy_from_slice(&b[24..40]);
    // Walk the extension headers (hop-by-hop, routing, destination
    // options: 8-byte units; fragment: 8 bytes; AH: 4-byte units) while
    // they are in the copy.
    let mut at = 40usize;
    let mut l4 = None;
    let mut first_fragment = true;
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let (Some(&n), Some(&len)) = (b.get(at), b.get(at + 1)) else {
                    break;
                };
                next = n;
                at += (len as usize + 1) * 8;
            }
            44 => {
                let (Some(&n), Some(off)) = (b.get(at), be16(b, at + 2)) else {
                    break;
                };
                first_fragment = off & 0xfff8 == 0;
                next = n;
                at += 8;
            }
            51 => {
                let (Some(&n), Some(&len)) = (b.get(at), b.get(at + 1)) else {
                    break;
                };
                next = n;
                at += (len as usize + 2) * 4;
            }
            _ => {
                l4 = if first_fragment { b.get(at..) } else { None };
                break;
            }
        }
    }
    let (sport, dport) = ports(next, l4);
    Ok(Packet {
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        proto: next,
        sport,
        dport,
        len: 40 + payload,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An IPv4 packet: header + `l4` (ports first), total length `len`.
    pub(crate) fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[0] = 0x45;
        b[2..4].copy_from_slice(&1500u16.to_be_bytes());
        b[9] = proto;
        b[12..16].copy_from_slice(&src);
        b[16..20].copy_from_slice(&dst);
        b[20..22].copy_from_slice(&sport.to_be_bytes());
        b[22..24].copy_from_slice(&dport.to_be_bytes());
        b
    }

    fn v6(proto: u8, ext: &[u8], sport: u16, dport: u16, payload: u16) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[0] = 0x60;
        b[4..6].copy_from_slice(&payload.to_be_bytes());
        b[6] = if ext.is_empty() { proto } else { 0 };
        b[8..24].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        b[24..40].copy_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(ext);
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&dport.to_be_bytes());
        b
    }

    #[test]
    fn ipv4_tcp() {
        let p = parse(&v4([10, 0, 0, 1], [10, 0, 0, 2], TCP, 40000, 5001)).unwrap();
        assert_eq!(p.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(p.dst, IpAddr::from([10, 0, 0, 2]));
        assert_eq!((p.proto, p.sport, p.dport, p.len), (TCP, 40000, 5001, 1500));
    }

    #[test]
    fn ipv4_truncated_copy_keeps_length_and_loses_ports() {
        let b = v4([1, 2, 3, 4], [5, 6, 7, 8], UDP, 1, 2);
        let p = parse(&b[..20]).unwrap();
        assert_eq!((p.sport, p.dport, p.len), (0, 0, 1500));
        assert_eq!(parse(&b[..19]), Err(ParseError::Short(19)));
    }

    #[test]
    fn ipv4_later_fragments_have_no_ports() {
        let mut b = v4([1, 2, 3, 4], [5, 6, 7, 8], UDP, 1, 2);
        b[6..8].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(parse(&b).unwrap().dport, 0);
    }

    #[test]
    fn ipv6_with_extension_header() {
        // Hop-by-hop options (8 bytes) then UDP.
        let ext = [UDP, 0, 0, 0, 0, 0, 0, 0];
        let p = parse(&v6(UDP, &ext, 53, 5353, 100)).unwrap();
        assert_eq!((p.proto, p.sport, p.dport, p.len), (UDP, 53, 5353, 140));
        let p = parse(&v6(TCP, &[], 1, 2, 0)).unwrap();
        assert_eq!((p.proto, p.sport, p.dport, p.len), (TCP, 1, 2, 40));
    }

    #[test]
    fn bad_versions_and_lengths_are_refused() {
        assert_eq!(parse(&[]), Err(ParseError::Short(0)));
        assert_eq!(parse(&[0x50; 40]), Err(ParseError::Version(5)));
        let mut b = v4([1, 2, 3, 4], [5, 6, 7, 8], TCP, 1, 2);
        b[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(parse(&b), Err(ParseError::Malformed));
    }

    #[test]
    fn flow_id_depends_on_every_field_of_the_5_tuple() {
        let base = parse(&v4([10, 0, 0, 1], [10, 0, 0, 2], TCP, 40000, 5001)).unwrap();
        let f = base.flow();
        for other in [
            Packet {
                sport: 40001,
                ..base
            },
            Packet {
                dport: 5002,
                ..base
            },
            Packet { proto: UDP, ..base },
            Packet {
                src: IpAddr::from([10, 0, 0, 3]),
                ..base
            },
            Packet {
                dst: IpAddr::from([10, 0, 0, 4]),
                ..base
            },
        ] {
            assert_ne!(other.flow(), f, "{other:?}");
        }
        assert_eq!(
            Packet { len: 40, ..base }.flow(),
            f,
            "the length is no part of it"
        );
    }

    proptest! {
        /// Any bytes: the parser answers (never panics), and what it
        /// reads back from a well-formed IPv4 header is what was written.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn ipv4_round_trip(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
                           sport in any::<u16>(), dport in any::<u16>(),
                           tcp in any::<bool>(), cut in 20usize..40) {
            let proto = if tcp { TCP } else { UDP };
            let b = v4(src, dst, proto, sport, dport);
            let p = parse(&b[..cut]).unwrap();
            prop_assert_eq!(p.src, IpAddr::from(src));
            prop_assert_eq!(p.dst, IpAddr::from(dst));
            prop_assert_eq!(p.len, 1500);
            if cut >= 24 {
                prop_assert_eq!((p.sport, p.dport), (sport, dport));
            }
        }
    }
}
