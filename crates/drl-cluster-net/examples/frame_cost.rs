//! CPU cost of one cluster frame, without the socket: sealing
//! (`frame::encode`, XChaCha20-Poly1305) and the whole receive check
//! (`UdpTransport::accept`: decode, key lookup, decryption in place,
//! receiver binding, replay window), for a heartbeat-sized and a full
//! payload. Also prints the framing overhead per datagram.
//!
//! `cargo run --release -p drl-cluster-net --example frame_cost`

use std::time::Instant;

use drl_cluster_net::transport::frame::{self, Header, Receiver};
use drl_cluster_net::transport::{ClusterKey, KeyRing, MAX_PAYLOAD, UdpTransport, channel};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let keys: KeyRing = ClusterKey::new(b"benchmark cluster key, 32 bytes!")
        .unwrap()
        .into();
    let rx = UdpTransport::bind("127.0.0.1:0".parse().unwrap(), 1, keys.clone())
        .await
        .unwrap();
    let from = "127.0.0.2:7946".parse().unwrap();
    println!(
        "framing overhead per datagram: {} bytes bound to a node id, {} to an IPv4 address, {} to an IPv6 address (HMAC-only version 1: 34)",
        frame::OVERHEAD,
        frame::FIXED_LEN + 6 + frame::TAG_LEN,
        frame::MAX_OVERHEAD
    );
    let mut seq = 1u64;
    for len in [9usize, 100, MAX_PAYLOAD] {
        let payload = vec![0x5au8; len];
        let n = 200_000u64;
        let mut out = Vec::with_capacity(frame::MAX_DATAGRAM);
        let t = Instant::now();
        for i in 0..n {
            let h = Header {
                channel: channel::GOSSIP,
                sender: 2,
                instance: 7,
                seq: seq + i,
                to: Receiver::Node(1),
            };
            frame::encode(&keys, h, &payload, &mut out).unwrap();
            std::hint::black_box(&out);
        }
        let seal = t.elapsed().as_nanos() as f64 / n as f64;
        // Pre-sealed frames, then the receive check alone.
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let h = Header {
                    channel: channel::GOSSIP,
                    sender: 2,
                    instance: 7,
                    seq: seq + i,
                    to: Receiver::Node(1),
                };
                let mut f = Vec::new();
                frame::encode(&keys, h, &payload, &mut f).unwrap();
                f
            })
            .collect();
        seq += n;
        let mut buf = [0u8; frame::MAX_DATAGRAM];
        let t = Instant::now();
        for f in &frames {
            let b = &mut buf[..f.len()];
            b.copy_from_slice(f);
            std::hint::black_box(rx.accept(from, b).unwrap());
        }
        let open = t.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "payload {len:>4} B: seal {seal:.0} ns, receive check {open:.0} ns per frame ({:.2} GB/s sealed)",
            len as f64 / seal
        );
    }
}
