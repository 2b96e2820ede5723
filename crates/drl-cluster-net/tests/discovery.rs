//! The DNS client of `discovery.nameserver` against a real DNS server on
//! loopback (drl-test-kit's `DnsResponder`), and both resolvers through
//! `discovery::resolve`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use drl_cluster_net::discovery::{
    DiscoveryConfig, decode_answer, encode_query, query_server, resolve,
};
use drl_test_kit::dns::{DnsResponder, answer};
use proptest::prelude::*;

#[test]
fn client_and_responder_agree() {
    let dns = DnsResponder::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let v4: Vec<IpAddr> = vec![[127, 0, 0, 2].into(), [127, 0, 0, 3].into()];
    let v6: IpAddr = "::1".parse().unwrap();
    let mut both = v4.clone();
    both.push(v6);
    dns.set("drl.test", both.clone());
    let t = Duration::from_secs(2);
    let mut got = query_server(dns.addr(), "DRL.test.", t).unwrap();
    got.sort();
    let mut want = both.clone();
    want.sort();
    assert_eq!(got, want);
    dns.set("drl.test", v4[..1].to_vec());
    assert_eq!(query_server(dns.addr(), "drl.test", t).unwrap(), v4[..1]);
    dns.set("drl.test", vec![]);
    assert!(query_server(dns.addr(), "drl.test", t).unwrap().is_empty());
    assert!(
        query_server(dns.addr(), "other.test", t)
            .unwrap()
            .is_empty(),
        "NXDOMAIN"
    );
    drop(dns);
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = query_server(
        silent.local_addr().unwrap(),
        "x",
        Duration::from_millis(100),
    );
    assert!(e.is_err(), "no answer is an error, never an empty cluster");
}

#[tokio::test]
async fn both_resolvers_answer_through_resolve() {
    // The system resolver (getaddrinfo: /etc/hosts has localhost).
    let sys = resolve("localhost", 9191, &DiscoveryConfig::default())
        .await
        .unwrap();
    assert!(
        sys.contains(&SocketAddr::from(([127, 0, 0, 1], 9191))),
        "{sys:?}"
    );
    assert!(sys.windows(2).all(|w| w[0] < w[1]), "sorted, deduplicated");
    // A given nameserver: its records, with the port; a missing name
    // is no peer (not an error); a silent server is an error.
    let dns = DnsResponder::start("127.0.0.1:0".parse().unwrap()).unwrap();
    dns.set(
        "peers.test",
        vec![[127, 0, 0, 3].into(), [127, 0, 0, 2].into()],
    );
    let cfg = DiscoveryConfig {
        nameserver: Some(dns.addr()),
        timeout_ms: 1_000,
        ..DiscoveryConfig::default()
    };
    assert_eq!(
        resolve("peers.test", 7, &cfg).await.unwrap(),
        vec![
            SocketAddr::from(([127, 0, 0, 2], 7)),
            SocketAddr::from(([127, 0, 0, 3], 7))
        ]
    );
    assert!(resolve("gone.test", 7, &cfg).await.unwrap().is_empty());
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let cfg = DiscoveryConfig {
        nameserver: Some(silent.local_addr().unwrap()),
        timeout_ms: 100,
        ..DiscoveryConfig::default()
    };
    assert!(resolve("peers.test", 7, &cfg).await.is_err());
    assert!(
        DiscoveryConfig {
            interval_ms: 5,
            ..DiscoveryConfig::default()
        }
        .validate()
        .is_err()
    );
}

const TYPE_A: u16 = 1;

proptest! {
    #[test]
    fn hostile_queries_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = answer(&bytes, &BTreeMap::new());
    }

    #[test]
    fn answers_round_trip(ips in proptest::collection::vec(any::<[u8; 4]>(), 0..20), id in any::<u16>()) {
        let ips: Vec<IpAddr> = ips.into_iter().map(IpAddr::from).collect();
        let mut table = BTreeMap::new();
        table.insert("a.b".to_string(), ips.clone());
        let q = encode_query(id, "a.b", TYPE_A).unwrap();
        let r = answer(&q, &table).unwrap();
        prop_assert_eq!(decode_answer(&r, id, TYPE_A).unwrap(), Some(ips));
        prop_assert_eq!(decode_answer(&r, id.wrapping_add(1), TYPE_A).unwrap(), None);
    }
}
