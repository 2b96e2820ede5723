//! A raw HTTP/2 client for attack tests: frames written by hand (HPACK
//! literals without Huffman coding, written here, not taken from any
//! server or client library), and a reader that records what the server
//! sends back. It shares no code with the server under test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
}

/// `ENHANCE_YOUR_CALM`.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Appends one frame to `out`.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK integer with an `n`-bit prefix whose high bits are `first`.
pub fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal (no Huffman).
pub fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A header field "literal without indexing, new name".
pub fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// The header block of a gRPC POST to `path` (static-table indices for
/// `:method POST` and `:scheme http`, literals for the rest).
pub fn grpc_head(path: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86];
    // `:path`, name from the static table (index 4), without indexing.
    hpack_int(&mut b, 0x00, 4, 4);
    hpack_str(&mut b, path.as_bytes());
    hpack_int(&mut b, 0x00, 4, 1);
    hpack_str(&mut b, b"localhost");
    hpack_literal(&mut b, b"content-type", b"application/grpc");
    hpack_literal(&mut b, b"te", b"trailers");
    b
}

/// What the server sent on a connection.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The GOAWAY error code, if one came.
    pub goaway: Option<u32>,
    /// RST_STREAM frames: (stream, error code).
    pub resets: Vec<(u32, u32)>,
    /// HEADERS frames: (stream, END_STREAM set).
    pub headers: Vec<(u32, bool)>,
    /// SETTINGS acknowledgements.
    pub settings_acks: usize,
    /// PING acknowledgements.
    pub ping_acks: usize,
    /// The server closed the connection (end of stream or an error).
    pub closed: bool,
}

/// A raw connection: a writer and a thread reading what comes back.
pub struct Raw {
    /// The socket (for writing).
    pub tcp: TcpStream,
    /// What the reader has seen so far.
    pub seen: Arc<Mutex<Seen>>,
}

impl Raw {
    /// Connects and sends the preface and an empty SETTINGS frame.
    pub fn connect(addr: SocketAddr) -> Raw {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_nodelay(true).unwrap();
        let mut hello = PREFACE.to_vec();
        frame(&mut hello, kind::SETTINGS, 0, 0, &[]);
        tcp.write_all(&hello).expect("preface");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut rd = tcp.try_clone().unwrap();
        let s = seen.clone();
        std::thread::spawn(move || read_frames(&mut rd, &s));
        Raw { tcp, seen }
    }

    /// Connects without a reader: the server's output is never read.
    pub fn connect_deaf(addr: SocketAddr) -> TcpStream {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        let mut hello = PREFACE.to_vec();
        frame(&mut hello, kind::SETTINGS, 0, 0, &[]);
        tcp.write_all(&hello).expect("preface");
        tcp
    }

    /// Writes `bytes`; false once the server has closed the connection.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.tcp.write_all(bytes).is_ok()
    }

    /// A copy of what was seen.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (up to the tests' deadline) until `cond` holds of what was seen.
    pub fn wait(&self, what: &str, cond: impl Fn(&Seen) -> bool) -> Seen {
        super::wait_for_or(what, || format!("{:?}", self.seen()), || cond(&self.seen()));
        self.seen()
    }
}

fn read_frames(rd: &mut TcpStream, seen: &Mutex<Seen>) {
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    loop {
        if rd.read_exact(&mut head).is_err() {
            break;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (k, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        payload.resize(len, 0);
        if rd.read_exact(&mut payload).is_err() {
            break;
        }
        let mut s = seen.lock().unwrap();
        match k {
            kind::GOAWAY if len >= 8 => {
                s.goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
            }
            kind::RST_STREAM if len == 4 => {
                s.resets
                    .push((stream, u32::from_be_bytes(payload[..4].try_into().unwrap())));
            }
            kind::HEADERS => s.headers.push((stream, flags & flag::END_STREAM != 0)),
            kind::SETTINGS if flags & flag::ACK != 0 => s.settings_acks += 1,
            kind::PING if flags & flag::ACK != 0 => s.ping_acks += 1,
            _ => {}
        }
    }
    seen.lock().unwrap().closed = true;
}

/// Writes `bytes` over and over on `tcp` until `rounds` writes were done
/// or a write made no progress for `stall` (the server stopped reading)
/// or failed; returns the writes done.
pub fn write_until_blocked(
    tcp: &mut TcpStream,
    bytes: &[u8],
    rounds: usize,
    stall: Duration,
) -> usize {
    tcp.set_write_timeout(Some(stall)).unwrap();
    for i in 0..rounds {
        if tcp.write_all(bytes).is_err() {
            return i;
        }
    }
    rounds
}
