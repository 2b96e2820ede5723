//! NFQUEUE over netlink, in safe Rust (rustix sockets; no libnetfilter).
//!
//! [`Queue::open`] binds queue `N`, asks for the first [`COPY_RANGE`]
//! bytes of each packet (headers only), sets the queue length and the
//! fail-open flag. [`Queue::recv_batch`] waits (with a timeout) for
//! packets and reads every one already queued, up to a batch;
//! [`Queue::verdict`] appends a verdict to a buffer that
//! [`Queue::flush`] sends as one datagram (the kernel's netlink receive
//! path processes each message of a datagram in turn), so a batch costs
//! one `sendto`.
//!
//! GSO packets are segmented by the kernel before they are queued (the
//! relay does not ask for `NFQA_CFG_F_GSO`), so each decision is about
//! one wire-size packet.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

/// Bytes of each packet copied to the relay: the IP header and the
/// ports, with room for IPv6 extension headers.
pub const COPY_RANGE: u32 = 128;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const SUBSYS_QUEUE: u16 = 3 << 8;
const MSG_PACKET: u16 = SUBSYS_QUEUE;
const MSG_VERDICT: u16 = SUBSYS_QUEUE | 1;
const MSG_CONFIG: u16 = SUBSYS_QUEUE | 2;
const CFG_CMD: u16 = 1;
const CFG_PARAMS: u16 = 2;
const CFG_QUEUE_MAXLEN: u16 = 3;
const CFG_MASK: u16 = 4;
const CFG_FLAGS: u16 = 5;
const CMD_BIND: u8 = 1;
const CMD_UNBIND: u8 = 2;
const COPY_PACKET: u8 = 2;
const F_FAIL_OPEN: u32 = 1;
const A_PACKET_HDR: u16 = 1;
const A_VERDICT_HDR: u16 = 2;
const A_MARK: u16 = 3;
const A_PAYLOAD: u16 = 10;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
/// Verdicts buffered before [`Queue::verdict`] flushes on its own.
const MAX_PENDING: usize = 512;

/// One queued packet, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct Queued<'a> {
    /// The kernel's packet id (what the verdict names).
    pub id: u32,
    /// The packet's netfilter mark.
    pub mark: u32,
    /// The first bytes of the packet, from its IP header.
    pub payload: &'a [u8],
}

/// How the queue is set up.
#[derive(Debug, Clone, Copy)]
pub struct QueueOptions {
    /// Kernel queue length (packets waiting for a verdict).
    pub max_len: u32,
    /// Accept packets when the queue is full (else the kernel drops and
    /// counts them).
    pub fail_open: bool,
}

/// Counters of the netlink side.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets received.
    pub received: u64,
    /// Verdicts sent.
    pub verdicts: u64,
    /// `sendto` calls that carried verdicts.
    pub verdict_batches: u64,
    /// Times the socket's receive buffer overflowed (`ENOBUFS`): the
    /// kernel could not deliver packets to the relay (it counts them in
    /// `/proc/net/netfilter/nfnetlink_queue` as user drops).
    pub overruns: u64,
    /// Messages that did not parse.
    pub malformed: u64,
}

/// A bound NFQUEUE.
#[derive(Debug)]
pub struct Queue {
    fd: OwnedFd,
    num: u16,
    seq: u32,
    rx: Vec<u8>,
    tx: Vec<u8>,
    pending: usize,
    stats: QueueStats,
}

/// Explains an errno from binding or configuring the queue.
fn explain(num: u16, what: &str, e: Errno) -> io::Error {
    let msg = match e {
        Errno::PERM | Errno::ACCESS => format!(
            "{what} NFQUEUE {num}: permission denied: the relay needs CAP_NET_ADMIN in this \
             network namespace (run it as root)"
        ),
        Errno::BUSY => format!(
            "{what} NFQUEUE {num}: the queue is bound by another process (another relay? \
             choose another `queue:`)"
        ),
        Errno::PROTONOSUPPORT | Errno::AFNOSUPPORT | Errno::NOENT => format!(
            "{what} NFQUEUE {num}: the kernel has no nfnetlink_queue support ({e}); \
             load the nfnetlink_queue module"
        ),
        e => format!("{what} NFQUEUE {num}: {e}"),
    };
    io::Error::other(msg)
}

fn put_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_ne_bytes());
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_ne_bytes());
}

/// Starts a message of `ty` for queue `num` in `b`; returns its start.
fn begin(b: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, num: u16) -> usize {
    let start = b.len();
    put_u32(b, 0); // length, patched by `end`
    put_u16(b, ty);
    put_u16(b, flags);
    put_u32(b, seq);
    put_u32(b, 0);
    // nfgenmsg: family AF_UNSPEC, version 0, queue number (big-endian).
    b.push(0);
    b.push(0);
    b.extend_from_slice(&num.to_be_bytes());
    start
}

fn attr(b: &mut Vec<u8>, ty: u16, value: &[u8]) {
    put_u16(b, 4 + value.len() as u16);
    put_u16(b, ty);
    b.extend_from_slice(value);
    while b.len() % 4 != 0 {
        b.push(0);
    }
}

fn end(b: &mut [u8], start: usize) {
    let len = (b.len() - start) as u32;
    b[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// One netlink message: (type, body after the 16-byte header).
fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = ne_u32(b, 0)? as usize;
        let ty = ne_u16(b, 4)?;
        if len < 16 || len > b.len() {
            return None;
        }
        let body = &b[16..len];
        b = &b[((len + 3) & !3).min(b.len())..];
        Some((ty, body))
    })
}

/// Parses a packet message's body (nfgenmsg then attributes).
fn parse_packet(body: &[u8]) -> Option<Queued<'_>> {
    let mut at = 4;
    let (mut id, mut mark, mut payload) = (None, 0, &[][..]);
    while at + 4 <= body.len() {
        let len = ne_u16(body, at)? as usize;
        let ty = ne_u16(body, at + 2)? & 0x3fff;
        if len < 4 || at + len > body.len() {
            return None;
        }
        let v = &body[at + 4..at + len];
        match ty {
            A_PACKET_HDR => id = be_u32(v),
            A_MARK => mark = be_u32(v)?,
            A_PAYLOAD => payload = v,
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Some(Queued {
        id: id?,
        mark,
        payload,
    })
}

impl Queue {
    /// Opens a netlink socket and binds queue `num` with `opts`.
    pub fn open(num: u16, opts: QueueOptions) -> io::Result<Self> {
        let fd = rustix::net::socket(
            AddressFamily::NETLINK,
            SocketType::RAW,
            Some(netlink::NETFILTER),
        )
        .map_err(|e| explain(num, "opening", e))?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))
            .map_err(|e| explain(num, "binding", e))?;
        // A deep receive buffer rides out bursts; counted if it overflows.
        let want = 8 << 20;
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&fd, want).is_err() {
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, want);
        }
        let mut q = Self {
            fd,
            num,
            seq: 0,
            rx: vec![0u8; 1 << 16],
            tx: Vec::with_capacity(MAX_PENDING * 32),
            pending: 0,
            stats: QueueStats::default(),
        };
        q.config(|b| attr(b, CFG_CMD, &[CMD_BIND, 0, 0, 0]))
            .map_err(|e| explain(num, "binding", e))?;
        q.config(|b| {
            let mut p = COPY_RANGE.to_be_bytes().to_vec();
            p.push(COPY_PACKET);
            attr(b, CFG_PARAMS, &p);
        })
        .map_err(|e| explain(num, "configuring", e))?;
        q.config(|b| attr(b, CFG_QUEUE_MAXLEN, &opts.max_len.to_be_bytes()))
            .map_err(|e| explain(num, "sizing", e))?;
        let flags = if opts.fail_open { F_FAIL_OPEN } else { 0 };
        q.config(|b| {
            attr(b, CFG_FLAGS, &flags.to_be_bytes());
            attr(b, CFG_MASK, &F_FAIL_OPEN.to_be_bytes());
        })
        .map_err(|e| explain(num, "configuring", e))?;
        Ok(q)
    }

    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }

    /// The counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Sends one config message and waits for its acknowledgement.
    /// Packets that arrive meanwhile (rules left by an earlier run) are
    /// accepted at once.
    fn config(&mut self, build: impl FnOnce(&mut Vec<u8>)) -> Result<(), Errno> {
        self.seq = self.seq.wrapping_add(1);
        let mut b = Vec::with_capacity(64);
        let start = begin(
            &mut b,
            MSG_CONFIG,
            NLM_F_REQUEST | NLM_F_ACK,
            self.seq,
            self.num,
        );
        build(&mut b);
        end(&mut b, start);
        rustix::net::sendto(
            &self.fd,
            &b,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )?;
        loop {
            let (n, _) = rustix::net::recv(&self.fd, &mut self.rx[..], RecvFlags::empty())?;
            let mut result = None;
            let mut early = Vec::new();
            for (ty, body) in messages(&self.rx[..n]) {
                match ty {
                    NLMSG_ERROR => {
                        let code = ne_u32(body, 0).unwrap_or(0) as i32;
                        let seq = ne_u32(body, 12).unwrap_or(0);
                        if seq == self.seq {
                            result = Some(code);
                        }
                    }
                    MSG_PACKET => {
                        if let Some(p) = parse_packet(body) {
                            early.push(p.id);
                        }
                    }
                    _ => {}
                }
            }
            for id in early {
                self.verdict(id, true);
            }
            let _ = self.flush();
            match result {
                Some(0) => return Ok(()),
                Some(code) => return Err(Errno::from_raw_os_error(-code)),
                None => continue,
            }
        }
    }

    /// Waits up to `timeout` (`None`: not at all) for packets, then hands
    /// every packet already queued, at most `max`, to `f`. Returns how
    /// many were handed over.
    pub fn recv_batch(
        &mut self,
        timeout: Option<Duration>,
        max: usize,
        mut f: impl FnMut(Queued<'_>),
    ) -> io::Result<usize> {
        if let Some(t) = timeout {
            let ts = Timespec {
                tv_sec: t.as_secs() as _,
                tv_nsec: t.subsec_nanos() as _,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(Errno::INTR) => return Ok(0),
                Err(e) => return Err(e.into()),
            }
        }
        let mut n = 0;
        while n < max {
            let len = match rustix::net::recv(&self.fd, &mut self.rx[..], RecvFlags::DONTWAIT) {
                Ok((len, _)) => len,
                Err(Errno::AGAIN) | Err(Errno::INTR) => break,
                Err(Errno::NOBUFS) => {
                    self.stats.overruns += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for (ty, body) in messages(&self.rx[..len]) {
                match ty {
                    MSG_PACKET => match parse_packet(body) {
                        Some(p) => {
                            self.stats.received += 1;
                            n += 1;
                            f(p);
                        }
                        None => self.stats.malformed += 1,
                    },
                    NLMSG_ERROR | NLMSG_DONE => {}
                    _ => self.stats.malformed += 1,
                }
            }
        }
        Ok(n)
    }

    /// Buffers the verdict for packet `id` (sent by [`Queue::flush`], or
    /// at once when the buffer is full).
    pub fn verdict(&mut self, id: u32, accept: bool) {
        let start = begin(&mut self.tx, MSG_VERDICT, NLM_F_REQUEST, 0, self.num);
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&(if accept { NF_ACCEPT } else { NF_DROP }).to_be_bytes());
        v[4..].copy_from_slice(&id.to_be_bytes());
        attr(&mut self.tx, A_VERDICT_HDR, &v);
        end(&mut self.tx, start);
        self.pending += 1;
        if self.pending >= MAX_PENDING {
            let _ = self.flush();
        }
    }

    /// Sends the buffered verdicts in one datagram.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let r = rustix::net::sendto(
            &self.fd,
            &self.tx,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        );
        self.stats.verdicts += self.pending as u64;
        self.stats.verdict_batches += 1;
        self.tx.clear();
        self.pending = 0;
        r.map(|_| ()).map_err(io::Error::from)
    }

    /// Unbinds the queue (packets still queued are then dropped by the
    /// kernel, or pass with `--queue-bypass` once the rule sees no
    /// listener).
    pub fn unbind(&mut self) -> io::Result<()> {
        let _ = self.flush();
        self.config(|b| attr(b, CFG_CMD, &[CMD_UNBIND, 0, 0, 0]))
            .map_err(|e| explain(self.num, "unbinding", e))
    }
}

/// The kernel's counters for one queue, from
/// `/proc/net/netfilter/nfnetlink_queue` (this network namespace).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelQueueStats {
    /// Packets waiting for a verdict.
    pub waiting: u64,
    /// Packets dropped because the queue was full.
    pub queue_dropped: u64,
    /// Packets dropped because they could not be sent to the relay
    /// (its socket buffer was full).
    pub user_dropped: u64,
    /// The last packet id the kernel handed out (packets queued so far).
    pub id_sequence: u64,
}

/// Reads the kernel's counters for queue `num` (`None` if the queue is
/// not bound or the file is missing).
pub fn kernel_stats(num: u16) -> Option<KernelQueueStats> {
    let text = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue").ok()?;
    parse_kernel_stats(&text, num)
}

/// Parses `/proc/net/netfilter/nfnetlink_queue`: queue number, peer port
/// id, waiting, copy mode, copy range, queue drops, user drops, id
/// sequence, 1.
pub fn parse_kernel_stats(text: &str, num: u16) -> Option<KernelQueueStats> {
    text.lines().find_map(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        (f.len() >= 8 && f[0] == num as u64).then(|| KernelQueueStats {
            waiting: f[2],
            queue_dropped: f[5],
            user_dropped: f[6],
            id_sequence: f[7],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_well_formed_and_batched() {
        let mut tx = Vec::new();
        for id in [7u32, 8] {
            let s = begin(&mut tx, MSG_VERDICT, NLM_F_REQUEST, 0, 3);
            attr(&mut tx, A_VERDICT_HDR, &[0, 0, 0, 1, 0, 0, 0, id as u8]);
            end(&mut tx, s);
        }
        assert_eq!(tx.len(), 64, "two 32-byte messages");
        let msgs: Vec<_> = messages(&tx).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].0, MSG_VERDICT);
        // nfgenmsg carries the queue number big-endian.
        assert_eq!(&msgs[1].1[2..4], &[0, 3]);
    }

    #[test]
    fn packet_messages_parse() {
        let mut b = Vec::new();
        let s = begin(&mut b, MSG_PACKET, 0, 0, 0);
        attr(&mut b, A_PACKET_HDR, &[0, 0, 1, 2, 0x08, 0x00, 3]);
        attr(&mut b, A_MARK, &9u32.to_be_bytes());
        attr(&mut b, A_PAYLOAD, &[0x45, 1, 2]);
        end(&mut b, s);
        let (ty, body) = messages(&b).next().unwrap();
        assert_eq!(ty, MSG_PACKET);
        let p = parse_packet(body).unwrap();
        assert_eq!((p.id, p.mark, p.payload), (258, 9, &[0x45, 1, 2][..]));
        // Truncated attribute: refused, not misread.
        assert!(parse_packet(&body[..body.len() - 4]).is_none());
    }

    #[test]
    fn kernel_counters_parse() {
        let text = "    0  12345     0 2 65531     0     0       10  1\n    \
                    7  999     3 2   128    17     2     4242  1\n";
        let s = parse_kernel_stats(text, 7).unwrap();
        assert_eq!(
            s,
            KernelQueueStats {
                waiting: 3,
                queue_dropped: 17,
                user_dropped: 2,
                id_sequence: 4242
            }
        );
        assert!(parse_kernel_stats(text, 1).is_none());
    }
}
