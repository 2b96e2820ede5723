//! The authenticated UDP transport on real loopback sockets: good frames
//! pass, forged / truncated / oversized / replayed ones are dropped and
//! counted; the fault wrapper loses, delays and partitions as configured.
//!
//! No verdict depends on how fast this machine is: waits are on conditions
//! under a hang guard, datagrams are sent no faster than the receiver
//! takes them (a stalled receiver would otherwise overflow the socket
//! buffer), and "send does not block" is a protocol fact (the send is
//! ready the first time it is polled), not a latency.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use drl_cluster_net::transport::fault::{FaultConfig, FaultyTransport};
use drl_cluster_net::transport::frame::{self, Header, Receiver};
use drl_cluster_net::transport::{ClusterKey, Transport, UdpTransport, channel};

fn key() -> ClusterKey {
    ClusterKey::new(b"test cluster key, 32 bytes long!").unwrap()
}

async fn bind(ip: &str, id: u32) -> UdpTransport {
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    UdpTransport::bind(addr, id, key()).await.unwrap()
}

/// How long a wait on a condition may take before the test fails: a hang
/// guard, not a verdict.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn bad_datagrams_are_dropped_and_counted() {
    let rx = bind("127.0.0.1", 1).await;
    let to = rx.local_addr();
    let raw = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let header = |seq: u64| Header {
        channel: channel::GOSSIP,
        sender: 2,
        instance: 77,
        seq,
        to: Receiver::Node(1),
    };
    let good = |seq: u64, payload: &[u8]| {
        let mut out = Vec::new();
        frame::encode(&key().into(), header(seq), payload, &mut out).unwrap();
        out
    };
    let valid = good(10, b"valid");
    let mut forged = Vec::new();
    frame::encode(
        &ClusterKey::new(b"some other key that is not ours")
            .unwrap()
            .into(),
        header(11),
        b"forged",
        &mut forged,
    )
    .unwrap();
    let mut tampered = good(11, b"tampered");
    tampered[frame::OVERHEAD - frame::TAG_LEN] ^= 1;
    raw.send_to(&valid, to).await.unwrap();
    raw.send_to(&valid, to).await.unwrap(); // replay
    raw.send_to(&forged, to).await.unwrap(); // another cluster's key
    raw.send_to(&tampered, to).await.unwrap();
    raw.send_to(&valid[..valid.len() - 3], to).await.unwrap(); // truncated
    raw.send_to(&[0u8; 1_500], to).await.unwrap(); // oversized
    raw.send_to(&good(9, b"older, still in window"), to)
        .await
        .unwrap();
    raw.send_to(&good(12, b"last"), to).await.unwrap();

    let mut got = Vec::new();
    for _ in 0..3 {
        let d = tokio::time::timeout(HANG_GUARD, rx.recv())
            .await
            .expect("a good datagram")
            .unwrap();
        assert_eq!(d.sender, 2);
        assert_eq!(d.channel, channel::GOSSIP);
        got.push(d.payload);
    }
    assert_eq!(
        got,
        vec![
            b"valid".to_vec(),
            b"older, still in window".to_vec(),
            b"last".to_vec()
        ]
    );
    let s = rx.stats();
    assert_eq!(s.accepted, 3);
    assert_eq!(s.replayed, 1);
    assert_eq!(s.unknown_key, 1);
    assert_eq!(s.forged, 1);
    assert_eq!(s.truncated, 1);
    assert_eq!(s.oversized, 1);
    assert_eq!(s.rejected(), 5);
}

#[tokio::test]
async fn transports_talk_and_payload_bounds_hold() {
    let a = bind("127.0.0.2", 1).await;
    let b = bind("127.0.0.2", 2).await;
    a.send(b.local_addr(), channel::ORBIT, b"hello")
        .await
        .unwrap();
    let d = b.recv().await.unwrap();
    assert_eq!(
        (d.sender, d.channel, d.from),
        (1, channel::ORBIT, a.local_addr())
    );
    assert!(
        a.send(
            b.local_addr(),
            0,
            &[0; drl_cluster_net::transport::MAX_PAYLOAD + 1]
        )
        .await
        .is_err()
    );
    a.send(
        b.local_addr(),
        0,
        &[7; drl_cluster_net::transport::MAX_PAYLOAD],
    )
    .await
    .unwrap();
    assert_eq!(
        b.recv().await.unwrap().payload.len(),
        drl_cluster_net::transport::MAX_PAYLOAD
    );
    assert_eq!(a.stats().sent, 2);
    // a has not heard from b: both frames are bound to b's IPv4 address.
    let addr_overhead = frame::FIXED_LEN + 6 + frame::TAG_LEN;
    assert_eq!(
        a.stats().sent_bytes,
        (5 + addr_overhead + drl_cluster_net::transport::MAX_PAYLOAD + addr_overhead) as u64
    );
    // Once a has heard from b, its frames are bound to b's node id.
    let before = a.stats().sent_bytes;
    b.send(a.local_addr(), 0, b"hi").await.unwrap();
    assert_eq!(a.recv().await.unwrap().payload, b"hi");
    a.send(b.local_addr(), 0, b"bound").await.unwrap();
    assert_eq!(b.recv().await.unwrap().payload, b"bound");
    assert_eq!(a.stats().sent_bytes - before, (5 + frame::OVERHEAD) as u64);
}

#[tokio::test]
async fn fault_wrapper_drops_at_the_configured_rate_and_partitions() {
    let a = std::sync::Arc::new(FaultyTransport::new(
        bind("127.0.0.3", 1).await,
        FaultConfig {
            drop_rate: 0.3,
            seed: 42,
            ..FaultConfig::default()
        },
    ));
    let at_a = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<Vec<u8>>::new()));
    let (a2, at_a2) = (a.clone(), at_a.clone());
    tokio::spawn(async move {
        while let Ok(d) = a2.recv().await {
            at_a2.lock().push(d.payload);
        }
    });
    let b = std::sync::Arc::new(bind("127.0.0.3", 2).await);
    let b2 = b.clone();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let r2 = received.clone();
    tokio::spawn(async move {
        while b2.recv().await.is_ok() {
            r2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    // In rounds of 50, each once the last has arrived (the seeded drops
    // are the same whatever the pace).
    for round in 1..=20u64 {
        for _ in 0..50 {
            a.send(b.local_addr(), 1, b"x").await.unwrap();
        }
        let dropped = a.stats().injected_drops;
        wait_until("the rest of the round arrives", || {
            received.load(std::sync::atomic::Ordering::Relaxed) == round * 50 - dropped
        })
        .await;
    }
    let dropped = a.stats().injected_drops;
    assert!((230..370).contains(&dropped), "dropped {dropped} of 1000");
    // Partition: nothing more gets through, in either direction.
    let h = a.handle();
    h.set_drop_rate(0.0);
    h.block(b.local_addr());
    for _ in 0..10 {
        a.send(b.local_addr(), 1, b"x").await.unwrap();
    }
    b.send(a.local_addr(), 1, b"to a").await.unwrap();
    wait_until("a drops what b sent", || {
        a.stats().injected_drops > dropped + 10
    })
    .await;
    h.unblock(b.local_addr());
    a.send(b.local_addr(), 1, b"x").await.unwrap();
    wait_until("after heal", || {
        received.load(std::sync::atomic::Ordering::Relaxed) == 1_001 - dropped
    })
    .await;
    b.send(a.local_addr(), 1, b"after heal").await.unwrap();
    wait_until("a hears b again", || !at_a.lock().is_empty()).await;
    assert_eq!(
        *at_a.lock(),
        vec![b"after heal".to_vec()],
        "the datagram sent during the partition was cut"
    );
}

#[tokio::test]
async fn fault_wrapper_delays() {
    let a = FaultyTransport::new(
        bind("127.0.0.4", 1).await,
        FaultConfig {
            delay_ms: 150,
            ..FaultConfig::default()
        },
    );
    let b = bind("127.0.0.4", 2).await;
    let t0 = std::time::Instant::now();
    // Ready at the first poll: the delay is not the sender's to wait.
    let sent =
        pin!(a.send(b.local_addr(), 1, b"late")).poll(&mut Context::from_waker(Waker::noop()));
    assert!(
        matches!(sent, Poll::Ready(Ok(()))),
        "send does not block: {sent:?}"
    );
    tokio::time::timeout(HANG_GUARD, b.recv())
        .await
        .expect("the delayed datagram arrives")
        .unwrap();
    // A lower bound: a loaded machine can only make it later.
    assert!(t0.elapsed() >= Duration::from_millis(150));
}

/// A whole `FaultConfig` applied to a running transport (what a reload of
/// `cluster.faults` does): blocking a peer, isolating, and back to nothing.
#[tokio::test]
async fn fault_config_applies_to_a_running_transport() {
    let a = FaultyTransport::new(bind("127.0.0.5", 1).await, FaultConfig::default());
    let b = bind("127.0.0.5", 2).await;
    let h = a.handle();
    let delivered = |n: u64| n - a.stats().injected_drops;
    a.send(b.local_addr(), 1, b"1").await.unwrap();
    assert_eq!(b.recv().await.unwrap().payload, b"1");
    h.apply(&FaultConfig {
        block: vec![b.local_addr()],
        ..FaultConfig::default()
    });
    a.send(b.local_addr(), 1, b"blocked").await.unwrap();
    assert_eq!(delivered(2), 1, "sending to a blocked peer is dropped");
    h.apply(&FaultConfig {
        isolate: true,
        ..FaultConfig::default()
    });
    assert!(h.is_isolated());
    a.send(b.local_addr(), 1, b"isolated").await.unwrap();
    assert_eq!(delivered(3), 1, "an isolated node sends nothing");
    // Back to no faults: the block set is replaced, not merged.
    h.apply(&FaultConfig::default());
    assert!(!h.is_isolated());
    a.send(b.local_addr(), 1, b"healed").await.unwrap();
    assert_eq!(b.recv().await.unwrap().payload, b"healed");
    assert_eq!(a.stats().injected_drops, 2);
}
