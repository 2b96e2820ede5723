//! Security of cluster datagrams on real loopback UDP sockets: frames are
//! encrypted (a limit key never appears in clear), bound to their receiver
//! (a frame captured on its way to B and replayed to C is refused as
//! misdirected), fresh per sender instance (a restarted sender is heard, its
//! previous life's frames are not), and keys rotate without a gap (a node
//! with {old, new} talks to nodes with {old} and with {new}; once old is
//! dropped its frames are refused). Forged, mutated (every bit of a frame),
//! truncated and random datagrams are dropped, counted, and never handed to
//! the layer above.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use drl_cluster_net::transport::frame::{self, Header, Receiver};
use drl_cluster_net::transport::{
    ClusterKey, Datagram, KeyRing, Transport, TransportStats, UdpTransport, channel,
};
use parking_lot::Mutex;
use proptest::prelude::*;

const OLD: &[u8] = b"the old cluster key, 32 bytes...";
const NEW: &[u8] = b"the new cluster key, 32 bytes...";

fn key(k: &[u8]) -> ClusterKey {
    ClusterKey::new(k).unwrap()
}

fn ring(send: &[u8], previous: &[&[u8]]) -> KeyRing {
    KeyRing::new(key(send), previous.iter().map(|k| key(k))).unwrap()
}

async fn bind(addr: &str, id: u32, keys: KeyRing) -> Arc<UdpTransport> {
    Arc::new(
        UdpTransport::bind(addr.parse().unwrap(), id, keys)
            .await
            .unwrap(),
    )
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Everything a transport hands up, collected by a background task.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<Datagram>>>);

impl Inbox {
    fn start(t: &Arc<UdpTransport>) -> Self {
        let inbox = Self::default();
        let (t, got) = (t.clone(), inbox.0.clone());
        tokio::spawn(async move {
            while let Ok(d) = t.recv().await {
                got.lock().push(d);
            }
        });
        inbox
    }

    fn payloads(&self) -> Vec<Vec<u8>> {
        self.0.lock().iter().map(|d| d.payload.clone()).collect()
    }

    async fn wait_for(&self, payload: &[u8]) {
        let what = format!("{:?} delivered", String::from_utf8_lossy(payload));
        wait_until(&what, || self.payloads().iter().any(|p| p == payload)).await;
    }
}

/// A man in the middle on a real socket: forwards what `a` sends it to `b`
/// and what `b` sends it to the last address that was not `b`, and records
/// every datagram on its way to `b` (what an on-path attacker captures).
struct Tap {
    addr: SocketAddr,
    socket: Arc<tokio::net::UdpSocket>,
    captured: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Tap {
    async fn start(at: &str, b: SocketAddr) -> Self {
        let socket = Arc::new(tokio::net::UdpSocket::bind(at).await.unwrap());
        let addr = socket.local_addr().unwrap();
        let captured = Arc::new(Mutex::new(Vec::new()));
        let (s, cap) = (socket.clone(), captured.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 2_048];
            let mut a: Option<SocketAddr> = None;
            while let Ok((n, from)) = s.recv_from(&mut buf).await {
                if from == b {
                    if let Some(a) = a {
                        let _ = s.send_to(&buf[..n], a).await;
                    }
                } else {
                    a = Some(from);
                    cap.lock().push(buf[..n].to_vec());
                    let _ = s.send_to(&buf[..n], b).await;
                }
            }
        });
        Self {
            addr,
            socket,
            captured,
        }
    }

    fn captured(&self) -> Vec<Vec<u8>> {
        self.captured.lock().clone()
    }

    /// Replays `frames` from the tap's own socket to `to`.
    async fn replay(&self, frames: &[Vec<u8>], to: SocketAddr) {
        for f in frames {
            self.socket.send_to(f, to).await.unwrap();
        }
    }
}

fn dropped(before: TransportStats, after: TransportStats) -> u64 {
    after.rejected() - before.rejected()
}

/// Defect 6 of issue 14: a frame captured on its way to node B and sent to
/// node C was accepted by C. Now every frame names its receiver, and C
/// refuses it as misdirected (B refuses the same frame again as a replay).
#[tokio::test]
async fn frames_captured_for_one_node_are_refused_by_another() {
    let keys = ring(OLD, &[]);
    let a = bind("127.0.44.1:0", 1, keys.clone()).await;
    let b = bind("127.0.44.2:0", 2, keys.clone()).await;
    let c = bind("127.0.44.3:0", 3, keys.clone()).await;
    let tap = Tap::start("127.0.44.9:0", b.local_addr()).await;
    let (at_b, at_c) = (Inbox::start(&b), Inbox::start(&c));
    // a reaches b only through the tap, and knows b's id (as it would
    // after hearing from b): its frames are bound to node 2.
    a.learn_peer(tap.addr, 2);
    for i in 0..10u8 {
        a.send(tap.addr, channel::GOSSIP, &[b'g', i]).await.unwrap();
    }
    at_b.wait_for(&[b'g', 9]).await;
    let captured = tap.captured();
    assert_eq!(captured.len(), 10);

    let (b0, c0) = (b.stats(), c.stats());
    tap.replay(&captured, c.local_addr()).await;
    tap.replay(&captured, b.local_addr()).await;
    wait_until("all replays dropped", || {
        dropped(c0, c.stats()) == 10 && dropped(b0, b.stats()) == 10
    })
    .await;
    assert_eq!(c.stats().misdirected - c0.misdirected, 10);
    assert_eq!(b.stats().replayed - b0.replayed, 10);
    // A frame bound to b's address (first contact) is refused by c too.
    let mut first_contact = Vec::new();
    let h = Header {
        channel: channel::MEMBERSHIP,
        sender: 1,
        instance: a.instance(),
        seq: u64::MAX - 1,
        to: Receiver::Addr(b.local_addr()),
    };
    frame::encode(&keys, h, b"join", &mut first_contact).unwrap();
    tap.replay(&[first_contact], c.local_addr()).await;
    wait_until("address-bound frame dropped", || {
        c.stats().misdirected - c0.misdirected == 11
    })
    .await;
    // c still hears a's own frames, and nothing else ever reached it.
    a.send(c.local_addr(), channel::GOSSIP, b"for c")
        .await
        .unwrap();
    at_c.wait_for(b"for c").await;
    assert_eq!(at_c.payloads(), vec![b"for c".to_vec()]);
    assert_eq!(at_b.payloads().len(), 10);
    assert_eq!(c.stats().accepted, 1);
}

/// A limit key (often an API key or a user id) sent in a payload never
/// appears in the datagram's bytes, and two sends of one payload differ.
#[tokio::test]
async fn payloads_are_not_in_clear_on_the_wire() {
    let keys = ring(OLD, &[]);
    let a = bind("127.0.45.1:0", 1, keys.clone()).await;
    let b = bind("127.0.45.2:0", 2, keys).await;
    let tap = Tap::start("127.0.45.9:0", b.local_addr()).await;
    let at_b = Inbox::start(&b);
    a.learn_peer(tap.addr, 2);
    let secret = b"limit-key:sk_live_4242424242424242|user-31337";
    a.send(tap.addr, channel::GOSSIP, secret).await.unwrap();
    a.send(tap.addr, channel::GOSSIP, secret).await.unwrap();
    wait_until("both delivered", || at_b.payloads().len() == 2).await;
    assert_eq!(at_b.payloads(), vec![secret.to_vec(), secret.to_vec()]);
    let wire = tap.captured();
    for d in &wire {
        for piece in secret.windows(6) {
            assert!(
                !d.windows(6).any(|w| w == piece),
                "{:?} appears in clear",
                String::from_utf8_lossy(piece)
            );
        }
    }
    let body = frame::FIXED_LEN + 4;
    assert_ne!(wire[0][body..], wire[1][body..]);
}

/// Every single-bit flip of a valid frame, every truncation, random bytes
/// and a foreign key's frame are dropped and counted at a real transport,
/// and only the valid frames reach the layer above.
#[tokio::test]
async fn mutated_truncated_and_foreign_datagrams_never_reach_the_layer_above() {
    let keys = ring(OLD, &[]);
    let rx = bind("127.0.46.1:0", 1, keys.clone()).await;
    let inbox = Inbox::start(&rx);
    let raw = tokio::net::UdpSocket::bind("127.0.46.9:0").await.unwrap();
    let frame_with = |keys: &KeyRing, seq: u64, payload: &[u8]| {
        let mut out = Vec::new();
        let h = Header {
            channel: channel::GOSSIP,
            sender: 2,
            instance: 99,
            seq,
            to: Receiver::Node(1),
        };
        frame::encode(keys, h, payload, &mut out).unwrap();
        out
    };
    let valid = frame_with(&keys, 100, b"tenant-a:42");
    let mut bad: Vec<Vec<u8>> = Vec::new();
    for i in 0..valid.len() {
        for bit in 0..8 {
            let mut f = valid.clone();
            f[i] ^= 1 << bit;
            bad.push(f);
        }
    }
    for cut in 0..valid.len() {
        bad.push(valid[..cut].to_vec());
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for len in [1usize, 17, 50, 51, 52, 200, 1_232, 1_233, 1_500] {
        let mut f = vec![0u8; len];
        for x in &mut f {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            *x = rng as u8;
        }
        bad.push(f);
    }
    bad.push(frame_with(&ring(NEW, &[]), 101, b"tenant-a:9999999"));
    let before = rx.stats();
    for (i, f) in bad.iter().enumerate() {
        raw.send_to(f, rx.local_addr()).await.unwrap();
        if i % 64 == 63 {
            // Paced, so the kernel's receive buffer does not overflow.
            let want = i as u64 + 1;
            wait_until("drops counted", || dropped(before, rx.stats()) == want).await;
        }
    }
    let n = bad.len() as u64;
    wait_until("every bad datagram counted", || {
        dropped(before, rx.stats()) == n
    })
    .await;
    raw.send_to(&valid, rx.local_addr()).await.unwrap();
    inbox.wait_for(b"tenant-a:42").await;
    let s = rx.stats();
    assert_eq!(s.accepted, 1);
    assert_eq!(inbox.payloads(), vec![b"tenant-a:42".to_vec()]);
    assert_eq!(
        s.unknown_key,
        1 + 32,
        "the foreign frame, and bit flips of the key id"
    );
    assert!(s.forged > 0 && s.truncated > 0 && s.oversized > 0 && s.bad_version > 0);
    assert_eq!(s.rejected(), n);
}

/// Key rotation: a node with {old, new} talks to a node with {old} and to a
/// node with {new}; switching its send key moves which of them hears it;
/// once `old` is dropped, old-key frames are refused and counted.
#[tokio::test]
async fn keys_rotate_without_a_gap() {
    let x = bind("127.0.47.1:0", 1, ring(OLD, &[NEW])).await;
    let o = bind("127.0.47.2:0", 2, ring(OLD, &[])).await;
    let n = bind("127.0.47.3:0", 3, ring(NEW, &[])).await;
    let (at_x, at_o, at_n) = (Inbox::start(&x), Inbox::start(&o), Inbox::start(&n));
    // Step 1: x sends with old, accepts both.
    o.send(x.local_addr(), 0, b"o->x 1").await.unwrap();
    n.send(x.local_addr(), 0, b"n->x 1").await.unwrap();
    x.send(o.local_addr(), 0, b"x->o 1").await.unwrap();
    x.send(n.local_addr(), 0, b"x->n 1").await.unwrap();
    at_x.wait_for(b"o->x 1").await;
    at_x.wait_for(b"n->x 1").await;
    at_o.wait_for(b"x->o 1").await;
    wait_until("n refuses x's old-key frame", || n.stats().unknown_key == 1).await;
    // Step 2: x sends with new, still accepts old.
    x.set_keys(ring(NEW, &[OLD]));
    x.send(n.local_addr(), 0, b"x->n 2").await.unwrap();
    x.send(o.local_addr(), 0, b"x->o 2").await.unwrap();
    o.send(x.local_addr(), 0, b"o->x 2").await.unwrap();
    at_n.wait_for(b"x->n 2").await;
    at_x.wait_for(b"o->x 2").await;
    wait_until("o refuses x's new-key frame", || o.stats().unknown_key == 1).await;
    // Step 3: old dropped at x.
    x.set_keys(ring(NEW, &[]));
    o.send(x.local_addr(), 0, b"o->x 3").await.unwrap();
    n.send(x.local_addr(), 0, b"n->x 3").await.unwrap();
    at_x.wait_for(b"n->x 3").await;
    wait_until("x refuses old-key frames", || x.stats().unknown_key == 1).await;
    assert_eq!(
        at_x.payloads(),
        vec![
            b"o->x 1".to_vec(),
            b"n->x 1".to_vec(),
            b"o->x 2".to_vec(),
            b"n->x 3".to_vec()
        ]
    );
    assert_eq!(at_o.payloads(), vec![b"x->o 1".to_vec()]);
    assert_eq!(at_n.payloads(), vec![b"x->n 2".to_vec()]);
    assert_eq!(x.keys().ids(), vec![key(NEW).id()]);
}

/// A sender that restarts (same node id, fresh boot instance) is heard at
/// once; frames of its previous life, replayed afterwards, are refused and
/// do not re-open its window.
#[tokio::test]
async fn a_restarted_sender_is_heard_and_its_past_is_not() {
    let keys = ring(OLD, &[]);
    let b = bind("127.0.48.2:0", 2, keys.clone()).await;
    let at_b = Inbox::start(&b);
    let tap = Tap::start("127.0.48.9:0", b.local_addr()).await;
    let a1 = bind("127.0.48.1:0", 1, keys.clone()).await;
    a1.learn_peer(tap.addr, 2);
    for i in 0..5u8 {
        a1.send(tap.addr, 0, &[b'1', i]).await.unwrap();
    }
    at_b.wait_for(&[b'1', 4]).await;
    let first_life = tap.captured();
    let addr = a1.local_addr();
    let old_instance = a1.instance();
    drop(a1);
    // Same node id, same address, new process.
    let a2 = bind(&addr.to_string(), 1, keys.clone()).await;
    assert_ne!(a2.instance(), old_instance);
    a2.learn_peer(tap.addr, 2);
    a2.send(tap.addr, 0, b"second life").await.unwrap();
    at_b.wait_for(b"second life").await;
    let before = b.stats();
    tap.replay(&first_life, b.local_addr()).await;
    wait_until("first life refused", || {
        b.stats().replayed - before.replayed == 5
    })
    .await;
    a2.send(tap.addr, 0, b"still heard").await.unwrap();
    at_b.wait_for(b"still heard").await;
    assert_eq!(at_b.payloads().len(), 7);
    assert_eq!(b.stats().rejected(), 5);
}

/// A node bound to a wildcard address checks only the port of an
/// address-bound frame; a node-id-bound frame is checked exactly.
#[tokio::test]
async fn wildcard_binds_accept_first_contact_by_port() {
    let keys = ring(OLD, &[]);
    let w = bind("0.0.0.0:0", 5, keys.clone()).await;
    let at_w = Inbox::start(&w);
    let port = w.local_addr().port();
    let a = bind("127.0.49.1:0", 1, keys.clone()).await;
    a.send(format!("127.0.0.1:{port}").parse().unwrap(), 0, b"first")
        .await
        .unwrap();
    at_w.wait_for(b"first").await;
    let raw = tokio::net::UdpSocket::bind("127.0.49.9:0").await.unwrap();
    let mut f = Vec::new();
    let h = Header {
        channel: 0,
        sender: 1,
        instance: a.instance(),
        seq: u64::MAX - 7,
        to: Receiver::Addr(
            format!("127.0.0.1:{}", port.wrapping_add(1))
                .parse()
                .unwrap(),
        ),
    };
    frame::encode(&keys, h, b"other port", &mut f).unwrap();
    raw.send_to(&f, ("127.0.0.1", port)).await.unwrap();
    wait_until("other port refused", || w.stats().misdirected == 1).await;
    assert_eq!(at_w.payloads(), vec![b"first".to_vec()]);
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

struct Target {
    rx: Arc<UdpTransport>,
    inbox: Inbox,
    raw: tokio::net::UdpSocket,
}

fn target() -> &'static Target {
    static T: std::sync::OnceLock<Target> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        runtime().block_on(async {
            let rx = bind("127.0.50.1:0", 1, ring(OLD, &[NEW])).await;
            let inbox = Inbox::start(&rx);
            let raw = tokio::net::UdpSocket::bind("127.0.50.9:0").await.unwrap();
            Target { rx, inbox, raw }
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random datagrams, and random datagrams behind this build's magic and
    /// version, sent to a real transport holding two keys: every one is
    /// dropped and counted, none reaches the layer above.
    #[test]
    fn random_datagrams_never_reach_the_layer_above(
        body in proptest::collection::vec(any::<u8>(), 0..1_300),
        framed in any::<bool>(),
    ) {
        let t = target();
        let mut d = body;
        if framed && d.len() >= 8 {
            d[..2].copy_from_slice(&frame::MAGIC);
            d[2] = frame::VERSION;
            d[4..8].copy_from_slice(&key(OLD).id().0);
        }
        runtime().block_on(async {
            let before = t.rx.stats();
            t.raw.send_to(&d, t.rx.local_addr()).await.unwrap();
            wait_until("dropped", || dropped(before, t.rx.stats()) == 1).await;
        });
        prop_assert_eq!(t.rx.stats().accepted, 0);
        prop_assert!(t.inbox.payloads().is_empty());
    }
}
