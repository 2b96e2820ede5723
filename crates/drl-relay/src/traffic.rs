//! Bulk TCP traffic for the testbed and the tests: a [`Sink`] that counts
//! the bytes it receives per connection (and per source address), and [`Senders`], `n`
//! unbottlenecked flows with a chosen congestion control.
//!
//! Both can run in another network namespace ([`in_netns`]): sockets keep
//! the namespace they were created in.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

/// Runs `f` on a new thread that has joined network namespace `name`
/// (`/run/netns/<name>`, as `ip netns add` makes it) and returns its
/// result. Threads `f` starts are in that namespace too.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let path = format!("/run/netns/{name}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("network namespace {path}: {e}")))?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&fd),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| std::io::Error::other(format!("joining {path}: {e}")))?;
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}

#[derive(Debug, Default)]
struct SinkShared {
    stop: AtomicBool,
    by_peer: Mutex<HashMap<SocketAddr, Arc<AtomicU64>>>,
    conns: Mutex<Vec<TcpStream>>,
}

/// A TCP sink: accepts connections and reads them to the end, counting
/// bytes per source address.
#[derive(Debug)]
pub struct Sink {
    addr: SocketAddr,
    /// The listening socket (a clone), shut down on drop to end `accept`.
    listener: TcpListener,
    shared: Arc<SinkShared>,
    accept: Option<JoinHandle<()>>,
}

impl Sink {
    /// Listens on `addr` (in the calling thread's namespace).
    pub fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let handle = listener.try_clone()?;
        let shared = Arc::new(SinkShared::default());
        let sh = shared.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sh.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let Ok(peer) = conn.peer_addr() else { continue };
                let counter = sh.by_peer.lock().entry(peer).or_default().clone();
                if let Ok(c) = conn.try_clone() {
                    sh.conns.lock().push(c);
                }
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        counter.fetch_add(n as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        Ok(Self {
            addr,
            listener: handle,
            shared,
            accept: Some(accept),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Bytes received so far on each connection, by peer address (one
    /// entry per flow).
    pub fn by_peer(&self) -> HashMap<SocketAddr, u64> {
        self.shared
            .by_peer
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.load(Ordering::Relaxed)))
            .collect()
    }

    /// Bytes received so far from each source address.
    pub fn by_source(&self) -> HashMap<IpAddr, u64> {
        let mut out = HashMap::new();
        for (peer, b) in self.by_peer() {
            *out.entry(peer.ip()).or_insert(0) += b;
        }
        out
    }

    /// Bytes received so far from sources `pred` accepts.
    pub fn bytes_from(&self, pred: impl Fn(IpAddr) -> bool) -> u64 {
        self.by_source()
            .into_iter()
            .filter(|(ip, _)| pred(*ip))
            .map(|(_, b)| b)
            .sum()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for c in self.shared.conns.lock().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Wake the accept loop: shutting a listening socket down makes
        // its blocked `accept` fail (Linux); the loop sees `stop` and
        // returns, closing the listener, so the port is free for the
        // next sink when this returns.
        if rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Read).is_ok()
            && let Some(h) = self.accept.take()
        {
            let _ = h.join();
        }
    }
}

/// Bulk flows to one sink.
#[derive(Debug)]
pub struct Senders {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Senders {
    /// Opens `flows` connections from the calling thread's namespace to
    /// `dst` (from `bind_ip` if given), sets congestion control `cc` on
    /// each if given (`reno`, `cubic`, `bbr`), and writes to them as fast
    /// as TCP lets until stopped.
    pub fn start(
        dst: SocketAddr,
        flows: usize,
        cc: Option<&str>,
        bind_ip: Option<IpAddr>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for _ in 0..flows {
            let s = connect(dst, bind_ip)?;
            if let Some(cc) = cc {
                rustix::net::sockopt::set_tcp_congestion(&s, cc).map_err(|e| {
                    std::io::Error::other(format!(
                        "congestion control {cc:?}: {e} (available: {})",
                        std::fs::read_to_string(
                            "/proc/sys/net/ipv4/tcp_available_congestion_control"
                        )
                        .unwrap_or_default()
                        .trim()
                    ))
                })?;
            }
            s.set_write_timeout(Some(Duration::from_millis(200)))?;
            let stop = stop.clone();
            let sent = sent.clone();
            threads.push(std::thread::spawn(move || {
                let mut s = s;
                let buf = vec![0x5au8; 1 << 16];
                while !stop.load(Ordering::Relaxed) {
                    match s.write(&buf) {
                        Ok(n) => {
                            sent.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
                let _ = s.shutdown(Shutdown::Both);
            }));
        }
        Ok(Self {
            stop,
            sent,
            threads,
        })
    }

    /// Bytes written so far (accepted by the kernel).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops every flow and waits for the threads.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.halt();
    }
}

fn connect(dst: SocketAddr, bind_ip: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(ip) = bind_ip else {
        return TcpStream::connect_timeout(&dst, Duration::from_secs(5));
    };
    use rustix::net::{AddressFamily, SocketType, ipproto};
    let fam = if ip.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket(fam, SocketType::STREAM, Some(ipproto::TCP))?;
    rustix::net::bind(&fd, &SocketAddr::new(ip, 0))?;
    rustix::net::connect(&fd, &dst)?;
    Ok(TcpStream::from(fd))
}

/// A plain HTTP/1.1 GET of `path` from `addr` (in the calling thread's
/// namespace): the status code and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Ok((status, body))
}

/// The value of the first sample of `name` whose labels contain every
/// `label` (`class="a"`), from a Prometheus text exposition.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|l| {
        if l.starts_with('#') {
            return None;
        }
        let (key, value) = l.rsplit_once(' ')?;
        let (n, rest) = key.split_once('{').unwrap_or((key, ""));
        (n == name && labels.iter().all(|x| rest.contains(x)))
            .then(|| value.parse().ok())
            .flatten()
    })
}

/// A UDP sink counting datagrams (the packets-per-second benchmark).
#[derive(Debug)]
pub struct UdpSink {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl UdpSink {
    /// Binds `addr` (in the calling thread's namespace) and counts.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let s = std::net::UdpSocket::bind(addr)?;
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&s, 8 << 20);
        s.set_read_timeout(Some(Duration::from_millis(100)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (st, c) = (stop.clone(), count.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !st.load(Ordering::Relaxed) {
                if s.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Self {
            stop,
            count,
            thread: Some(thread),
        })
    }

    /// Datagrams received.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `size`-byte UDP datagrams to `dst` as fast as one thread can
/// until dropped (created in the calling thread's namespace).
#[derive(Debug)]
pub struct UdpFlood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl UdpFlood {
    /// Starts the flood.
    pub fn start(dst: SocketAddr, size: usize) -> std::io::Result<Self> {
        let s = std::net::UdpSocket::bind(SocketAddr::new(
            if dst.is_ipv4() {
                IpAddr::from([0, 0, 0, 0])
            } else {
                IpAddr::from([0u16; 8])
            },
            0,
        ))?;
        s.connect(dst)?;
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (st, c) = (stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            let buf = vec![0u8; size];
            while !st.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    if s.send(&buf).is_ok() {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Ok(Self {
            stop,
            sent,
            thread: Some(thread),
        })
    }

    /// Datagrams sent.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for UdpFlood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropping a sink closes its listener, so the next run's sink can
    /// bind the same port (the testbed runs one sink per algorithm), and
    /// the bytes of a connection are counted per peer.
    #[test]
    fn a_dropped_sink_frees_its_port() {
        let sink = Sink::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = sink.addr();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&[7u8; 1000]).unwrap();
        let local = c.local_addr().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sink.by_peer().get(&local).copied() != Some(1000) {
            assert!(std::time::Instant::now() < deadline, "{:?}", sink.by_peer());
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(sink);
        let again = Sink::bind(addr).expect("the port is free again");
        assert_eq!(again.addr(), addr);
    }
}
