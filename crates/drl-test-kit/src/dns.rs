//! [`DnsResponder`]: a static DNS server on UDP for the discovery tests
//! (`dns:NAME:PORT` seeds, `discovery.nameserver`): A and AAAA answers from
//! a table the test changes while it runs.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// A static DNS server on UDP: answers A and AAAA queries from a table
/// that can be changed while it runs; an unknown name is NXDOMAIN. Stops
/// when dropped.
#[derive(Debug)]
pub struct DnsResponder {
    addr: SocketAddr,
    table: Arc<Mutex<BTreeMap<String, Vec<IpAddr>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DnsResponder {
    /// Binds `addr` (port 0: any free port) and starts answering.
    pub fn start(addr: SocketAddr) -> std::io::Result<Self> {
        let sock = UdpSocket::bind(addr)?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        let addr = sock.local_addr()?;
        let table: Arc<Mutex<BTreeMap<String, Vec<IpAddr>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (table, stop) = (table.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Some(reply) =
                        answer(&buf[..n], &table.lock().unwrap_or_else(|e| e.into_inner()))
                    {
                        let _ = sock.send_to(&reply, from);
                    }
                }
            })
        };
        Ok(Self {
            addr,
            table,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it answers on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the records of `name` (an empty list: the name has no
    /// records).
    pub fn set(&self, name: &str, ips: Vec<IpAddr>) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.trim_end_matches('.').to_ascii_lowercase(), ips);
    }

    /// Removes `name` (NXDOMAIN from now on).
    pub fn remove(&self, name: &str) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name.trim_end_matches('.').to_ascii_lowercase());
    }
}

impl Drop for DnsResponder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The question's name (lowercased) and the position after it. A query's
/// question is never compressed.
fn question_name(msg: &[u8]) -> Option<(String, usize)> {
    let mut name = String::new();
    let mut pos = 12;
    loop {
        let len = *msg.get(pos)? as usize;
        if len == 0 {
            return Some((name, pos + 1));
        }
        if len > 63 {
            return None;
        }
        let label = msg.get(pos + 1..pos + 1 + len)?;
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += 1 + len;
    }
}

fn u16_at(msg: &[u8], pos: usize) -> Option<u16> {
    msg.get(pos..pos + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// The reply to one query, from `table` (what [`DnsResponder`] sends; `None`
/// for anything that is not one well-formed query).
pub fn answer(q: &[u8], table: &BTreeMap<String, Vec<IpAddr>>) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 || u16_at(q, 4)? != 1 {
        return None;
    }
    let (name, end) = question_name(q)?;
    let qtype = u16_at(q, end)?;
    let question = q.get(12..end + 4)?;
    let mut r = Vec::with_capacity(512);
    r.extend_from_slice(&q[0..2]);
    let records: Vec<&IpAddr> = match table.get(&name) {
        None => {
            // NXDOMAIN, recursion available.
            r.extend_from_slice(&[0x81, 0x83, 0, 1, 0, 0, 0, 0, 0, 0]);
            r.extend_from_slice(question);
            return Some(r);
        }
        Some(ips) => ips
            .iter()
            .filter(|ip| match qtype {
                TYPE_A => ip.is_ipv4(),
                TYPE_AAAA => ip.is_ipv6(),
                _ => false,
            })
            .collect(),
    };
    r.extend_from_slice(&[0x81, 0x80, 0, 1]);
    r.extend_from_slice(&(records.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(question);
    for ip in records {
        r.extend_from_slice(&[0xC0, 12]);
        r.extend_from_slice(&qtype.to_be_bytes());
        r.extend_from_slice(&[0, 1, 0, 0, 0, 5]);
        match ip {
            IpAddr::V4(v) => {
                r.extend_from_slice(&4u16.to_be_bytes());
                r.extend_from_slice(&v.octets());
            }
            IpAddr::V6(v) => {
                r.extend_from_slice(&16u16.to_be_bytes());
                r.extend_from_slice(&v.octets());
            }
        }
    }
    Some(r)
}
