//! A minimal pipelined Redis load generator for comparing `DRL.DECIDE`
//! with a no-op `EVALSHA` from the same client (`redis-benchmark` cannot
//! send the binary spec: its arguments are C strings).
//!
//! ```text
//! loadgen --port P --mode noop|decide [--clients 50] [--pipeline 16]
//!         [--seconds 3 | --calls N] [--decisions 1] [--keys 10000]
//!         [--algorithm gcra] [--threads 2]
//! ```
//!
//! `noop`: `EVALSHA <return 1> 1 key`. `decide`: `DRL.DECIDE` of
//! `--decisions` decisions (server clock, quota 1,000,000/s, so each is
//! admitted and written) on random keys out of `--keys`. Prints one line:
//! `mode=... clients=... pipeline=... decisions_per_call=... calls_per_s=...
//! decisions_per_s=...`. Connections are spread over `--threads` threads,
//! each writing a pipeline to every one of its connections, then reading
//! every reply, so C x P requests are in flight as with redis-benchmark.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use drl_core::{Algorithm, Quota};
use drl_redis_module::spec::{self, Clock, Decision, Op};

struct Args {
    port: u16,
    mode: String,
    clients: usize,
    pipeline: usize,
    seconds: f64,
    calls: Option<u64>,
    decisions: usize,
    keys: u64,
    algorithm: Algorithm,
    threads: usize,
}

fn args() -> Args {
    let mut a = Args {
        port: 6379,
        mode: "decide".into(),
        clients: 50,
        pipeline: 16,
        seconds: 3.0,
        calls: None,
        decisions: 1,
        keys: 10_000,
        algorithm: Algorithm::Gcra,
        threads: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => a.port = v.parse().expect("port"),
            "--mode" => a.mode = v,
            "--clients" => a.clients = v.parse().expect("clients"),
            "--pipeline" => a.pipeline = v.parse().expect("pipeline"),
            "--seconds" => a.seconds = v.parse().expect("seconds"),
            "--calls" => a.calls = Some(v.parse().expect("calls")),
            "--decisions" => a.decisions = v.parse().expect("decisions"),
            "--keys" => a.keys = v.parse().expect("keys"),
            "--algorithm" => a.algorithm = v.parse().expect("algorithm"),
            "--threads" => a.threads = v.parse().expect("threads"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(a.mode == "noop" || a.mode == "decide", "--mode noop|decide");
    a.threads = a.threads.clamp(1, a.clients);
    a
}

fn resp(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// The end of one complete RESP reply starting at `at`, if `buf` has it.
fn reply_end(buf: &[u8], at: usize) -> Option<usize> {
    let line_end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let head = &buf[at + 1..line_end];
    let next = line_end + 2;
    match buf[at] {
        b'+' | b':' => Some(next),
        b'-' => panic!("error reply: {}", String::from_utf8_lossy(head)),
        b'$' => {
            let n: i64 = std::str::from_utf8(head).ok()?.parse().ok()?;
            if n < 0 {
                return Some(next);
            }
            let end = next + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' => {
            let n: i64 = std::str::from_utf8(head).ok()?.parse().ok()?;
            let mut pos = next;
            for _ in 0..n.max(0) {
                pos = reply_end(buf, pos)?;
            }
            Some(pos)
        }
        other => panic!("unexpected reply byte {other:#x}"),
    }
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Self {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        Conn {
            s,
            buf: Vec::with_capacity(1 << 16),
        }
    }

    /// Reads until `n` complete replies arrived; returns the last one.
    fn read_replies(&mut self, n: usize) -> Vec<u8> {
        self.buf.clear();
        let mut done = 0;
        let mut pos = 0;
        let mut last = 0;
        let mut chunk = [0u8; 1 << 16];
        while done < n {
            while done < n {
                match reply_end(&self.buf, pos) {
                    Some(end) => {
                        last = pos;
                        pos = end;
                        done += 1;
                    }
                    None => break,
                }
            }
            if done == n {
                break;
            }
            let k = self.s.read(&mut chunk).expect("read");
            assert!(k > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..k]);
        }
        self.buf[last..pos].to_vec()
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// 64 pre-encoded pipelines of `p` commands each (random keys).
fn pipelines(a: &Args, sha: &str, seed: u64) -> Vec<Vec<u8>> {
    let quota = Quota::new(1_000_000, 1_000_000_000).expect("quota");
    let d = Decision {
        clock: Clock::Server,
        op: Op::Take,
        algorithm: a.algorithm,
        cost: 1,
        quotas: vec![quota],
        marks: vec![],
    };
    let spec = spec::encode(1_000, &vec![d; a.decisions]);
    let mut rng = seed | 1;
    (0..64)
        .map(|_| {
            let mut out = Vec::new();
            for _ in 0..a.pipeline {
                if a.mode == "noop" {
                    let key = format!("noop:{}", xorshift(&mut rng) % a.keys);
                    resp(
                        &mut out,
                        &[b"EVALSHA", sha.as_bytes(), b"1", key.as_bytes()],
                    );
                } else {
                    let keys: Vec<String> = (0..a.decisions)
                        .map(|_| format!("drl:bench:{}", xorshift(&mut rng) % a.keys))
                        .collect();
                    let mut parts: Vec<&[u8]> = vec![b"DRL.DECIDE"];
                    parts.extend(keys.iter().map(|k| k.as_bytes()));
                    parts.push(&spec);
                    resp(&mut out, &parts);
                }
            }
            out
        })
        .collect()
}

fn main() {
    let a = args();
    let mut setup = Conn::open(a.port);
    let mut load = Vec::new();
    resp(&mut load, &[b"SCRIPT", b"LOAD", b"return 1"]);
    setup.s.write_all(&load).expect("write");
    let reply = setup.read_replies(1);
    let sha = String::from_utf8_lossy(&reply)
        .lines()
        .nth(1)
        .expect("sha line")
        .to_string();
    let per_thread = a.clients.div_ceil(a.threads);
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let start = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                let a = &a;
                let sha = &sha;
                scope.spawn(move || {
                    let n = per_thread.min(a.clients - t * per_thread);
                    let mut conns: Vec<Conn> = (0..n).map(|_| Conn::open(a.port)).collect();
                    let pipes = pipelines(a, sha, 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                    let limit = a.calls.map(|c| c.div_ceil(a.threads as u64));
                    let mut calls = 0u64;
                    let mut i = 0;
                    loop {
                        for c in conns.iter_mut() {
                            c.s.write_all(&pipes[i % pipes.len()]).expect("write");
                            i += 1;
                        }
                        for c in conns.iter_mut() {
                            c.read_replies(a.pipeline);
                        }
                        calls += (n * a.pipeline) as u64;
                        let done = match limit {
                            Some(l) => calls >= l,
                            None => Instant::now() >= deadline,
                        };
                        if done {
                            break calls;
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    let secs = start.elapsed().as_secs_f64();
    let per_call = if a.mode == "noop" { 1 } else { a.decisions };
    println!(
        "mode={} clients={} pipeline={} decisions_per_call={} calls={} calls_per_s={:.0} decisions_per_s={:.0}",
        a.mode,
        a.clients,
        a.pipeline,
        per_call,
        total,
        total as f64 / secs,
        (total * per_call as u64) as f64 / secs
    );
}
