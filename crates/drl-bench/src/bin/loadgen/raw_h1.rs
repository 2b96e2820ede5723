//! The `raw` HTTP/1.1 client of `loadgen`: each request's bytes built once
//! per body, answers parsed with `httparse` (status, `content-length`,
//! body), one request in flight per connection, paced by [`Pacer`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pacer::{Pacer, Schedule};
use crate::{Args, Run};

/// How long an answer may take before the connection is given up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The request bytes of every body.
fn requests(a: &Args) -> Vec<Vec<u8>> {
    let host = a.url.authority().map_or("localhost", |h| h.as_str());
    let path = a.url.path_and_query().map_or("/", |p| p.as_str());
    a.bodies
        .iter()
        .map(|body| {
            let mut r = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n");
            if let Some(ct) = &a.content_type {
                r.push_str(&format!("content-type: {ct}\r\n"));
            }
            r.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut r = r.into_bytes();
            r.extend_from_slice(body);
            r
        })
        .collect()
}

/// Reads one whole answer from `tcp` into `buf` (what follows it is kept
/// there) and checks it: `Ok(check)`, or `Err` when the connection cannot
/// go on.
async fn answer(
    a: &Args,
    tcp: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<Result<(), String>, String> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let parsed = resp
            .parse(buf)
            .map_err(|e| format!("unparsable answer: {e}"))?;
        if let httparse::Status::Complete(head) = parsed {
            let code = resp.code.unwrap_or(0);
            let mut len = None;
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    len = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|v| v.trim().parse::<usize>().ok());
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    return Err("a chunked answer (not supported by --client raw)".into());
                }
            }
            let len = len.ok_or("an answer without content-length")?;
            while buf.len() < head + len {
                read(tcp, buf).await?;
            }
            let body = &buf[head..head + len];
            let check = if code != 200 {
                Err(format!(
                    "HTTP {code}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ))
            } else if let Some(want) = &a.expect
                && !body.windows(want.len()).any(|w| w == want.as_slice())
            {
                Err(format!(
                    "body lacks the expected text: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ))
            } else {
                Ok(())
            };
            buf.drain(..head + len);
            return Ok(check);
        }
        read(tcp, buf).await?;
    }
}

async fn read(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), String> {
    match tokio::time::timeout(ANSWER_TIMEOUT, tcp.read_buf(buf)).await {
        Err(_) => Err(format!("no answer within {ANSWER_TIMEOUT:?}")),
        Ok(Ok(0)) => Err("connection closed by the server".into()),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("read: {e}")),
    }
}

/// Drives one connection until the run stops; returns the latencies (µs)
/// measured.
pub async fn connection(
    a: Arc<Args>,
    run: Arc<Run>,
    mut tcp: TcpStream,
    first: usize,
    mut pace: Option<Schedule>,
) -> Vec<u32> {
    let reqs = requests(&a);
    let pacer = Pacer::new().expect("timerfd");
    let mut lat = Vec::with_capacity(1 << 16);
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut i = first;
    while !run.stop.load(Ordering::Relaxed) {
        let due = match &mut pace {
            Some(schedule) => {
                let due = schedule.due();
                schedule.advance();
                pacer.until(due).await;
                due
            }
            None => Instant::now(),
        };
        let req = &reqs[i % reqs.len()];
        i += 1;
        if let Err(e) = tcp.write_all(req).await {
            run.error(format!("write: {e}"));
            return lat;
        }
        let result = match answer(&a, &mut tcp, &mut buf).await {
            Ok(r) => r,
            Err(e) => {
                run.error(e);
                return lat;
            }
        };
        if run.measuring.load(Ordering::Relaxed) {
            run.record(result, due, &mut lat);
        }
    }
    lat
}
