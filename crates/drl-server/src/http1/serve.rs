//! The fast path's connection loop: read, answer every whole check in the
//! buffer (pipelined answers leave in one write), read again; hand the
//! connection to hyper at the first request it does not take.

use std::time::Instant;

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::linger::linger;
use super::parse::{self, Head};
use super::response;
use super::rewind::Rewind;
use super::{Handler, Refused};
use crate::deadline::bounded;
use crate::grpc::direct::CloseSignal;

/// Read buffer size.
const READ_BUF: usize = 8 * 1024;

/// How a connection left the fast path.
#[derive(Debug)]
pub enum Outcome<I> {
    /// It is done (closed by either side, failed, or asked to close).
    Done,
    /// hyper serves the rest of it: the IO with the bytes read and not
    /// answered in front.
    Handoff(Rewind<I>),
}

/// Serves checks on `io` until the client closes, a request the fast path
/// does not take arrives ([`Outcome::Handoff`]), or `close` is set (then
/// the request being answered is finished first). `track` is called as
/// each request starts; what it returns is dropped when it is answered.
pub async fn serve_connection<I, H, G>(
    mut io: I,
    handler: &H,
    track: impl Fn() -> G,
    close: &CloseSignal,
) -> Outcome<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
    H: Handler,
{
    // Allocated on first use: the read buffer just before the first read,
    // the output buffer with the first answer.
    let mut buf = BytesMut::new();
    let mut out: Vec<u8> = Vec::new();
    // The waker given to `close`, kept so that each wait does not register
    // it again.
    let mut close_waker = None;
    loop {
        if close.is_set() {
            // Asked to close: what is answered leaves, the rest is dropped.
            let _ = send(&mut io, &mut out).await;
            return Outcome::Done;
        }
        let (head_len, len, close_after, refused) = match parse::parse(&buf) {
            Head::Partial => {
                if !out.is_empty() && send(&mut io, &mut out).await.is_err() {
                    return Outcome::Done;
                }
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(READ_BUF);
                }
                tokio::select! {
                    biased;
                    () = std::future::poll_fn(|cx| close.poll_closed(cx, &mut close_waker)) => {
                        return Outcome::Done
                    }
                    r = io.read_buf(&mut buf) => match r {
                        Ok(0) | Err(_) => return Outcome::Done,
                        Ok(_) => continue,
                    },
                }
            }
            Head::Handoff => {
                if !out.is_empty() && send(&mut io, &mut out).await.is_err() {
                    return Outcome::Done;
                }
                return Outcome::Handoff(Rewind::new(io, buf.freeze()));
            }
            Head::Check(c) => (
                c.head_len,
                c.content_length,
                c.close,
                handler.authorize(c.authorization),
            ),
        };
        let guard = track();
        let req = handler.begin();
        let refused = match refused {
            Err(r) => Some(r),
            Ok(()) if len > H::max_body(&req) as u64 => {
                Some(Refused::Answer(handler.too_large(&req)))
            }
            Ok(()) => None,
        };
        if let Some(r) = refused {
            // Refused before reading the body: kept alive if the body is
            // already here (skipped), closed otherwise (hyper's choice
            // too: it drains what it has and gives up on the rest).
            let total = (head_len as u64).saturating_add(len);
            let keep = !close_after && (buf.len() as u64) >= total;
            match r {
                Refused::Answer(a) => response::answer(&mut out, &a, close_after),
                Refused::Response(resp) => {
                    use http_body_util::BodyExt as _;
                    let (parts, body) = (*resp).into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    response::response(&mut out, &parts, &body, close_after || !keep)
                }
            }
            drop(guard);
            if !keep {
                if send(&mut io, &mut out).await.is_ok() {
                    linger(&mut io).await;
                }
                return Outcome::Done;
            }
            buf.advance(total as usize);
            continue;
        }
        let total = head_len + len as usize;
        let started = Instant::now();
        let timeout = H::timeout(&req);
        if buf.len() < total {
            // Answers already made go first; then the body.
            if !out.is_empty() && send(&mut io, &mut out).await.is_err() {
                return Outcome::Done;
            }
            buf.reserve(total - buf.len());
            let read = bounded(started, timeout, async {
                while buf.len() < total {
                    match io.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(_) => {}
                    }
                }
                true
            })
            .await;
            match read {
                Some(true) => {}
                Some(false) => return Outcome::Done,
                None => {
                    response::answer(&mut out, &handler.timed_out(&req), close_after);
                    drop(guard);
                    if send(&mut io, &mut out).await.is_ok() {
                        linger(&mut io).await;
                    }
                    return Outcome::Done;
                }
            }
        }
        let answer = bounded(
            started,
            timeout,
            handler.check(&req, &buf[head_len..total], started),
        )
        .await
        .unwrap_or_else(|| handler.timed_out(&req));
        buf.advance(total);
        response::answer(&mut out, &answer, close_after);
        drop(guard);
        if close_after {
            let _ = send(&mut io, &mut out).await;
            let _ = io.shutdown().await;
            return Outcome::Done;
        }
    }
}

/// Writes and flushes `out`, then empties it.
async fn send<I: AsyncWrite + Unpin>(io: &mut I, out: &mut Vec<u8>) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    io.write_all(out).await?;
    out.clear();
    io.flush().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;
    use tokio::io::AsyncReadExt as _;

    use super::*;
    use crate::http::Answer;

    /// Echoes the body's length.
    struct Echo;

    impl Handler for Echo {
        type Req = ();
        fn begin(&self) {}
        fn max_body(_: &()) -> usize {
            8
        }
        fn timeout(_: &()) -> Duration {
            Duration::ZERO
        }
        fn too_large(&self, _: &()) -> Answer {
            Answer {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                content_type: "text/plain",
                body: "big".into(),
            }
        }
        fn timed_out(&self, _: &()) -> Answer {
            unreachable!()
        }
        async fn check(&self, _: &(), body: &[u8], _: Instant) -> Answer {
            Answer {
                status: StatusCode::OK,
                content_type: "text/plain",
                body: format!("{}", body.len()),
            }
        }
    }

    fn check(body: &str, extra: &str) -> String {
        format!(
            "POST /v1/check HTTP/1.1\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Runs the loop on `input` (the client then closes its side); returns
    /// what the server wrote, the outcome's unread bytes (handoff) and the
    /// requests tracked.
    async fn run(input: String) -> (String, Option<Vec<u8>>, usize) {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        client.write_all(input.as_bytes()).await.unwrap();
        client.shutdown().await.unwrap();
        let tracked = std::sync::atomic::AtomicUsize::new(0);
        let track = || {
            tracked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        let out = serve_connection(server, &Echo, track, &CloseSignal::default()).await;
        let rest = match out {
            Outcome::Done => None,
            Outcome::Handoff(mut r) => {
                let mut v = Vec::new();
                r.read_to_end(&mut v).await.unwrap();
                Some(v)
            }
        };
        let mut written = Vec::new();
        client.read_to_end(&mut written).await.unwrap();
        let written = String::from_utf8(written).unwrap();
        (written, rest, tracked.into_inner())
    }

    #[tokio::test]
    async fn checks_are_answered_here_in_order_and_the_rest_handed_off() {
        let get = "GET /healthz HTTP/1.1\r\n\r\n";
        let (w, rest, n) = run(check("abc", "") + &check("abcdef", "") + get + "tail").await;
        assert_eq!(n, 2);
        // Both answers, in order.
        assert_eq!(w.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{w}");
        assert!(
            w.contains("\r\n\r\n3HTTP/1.1 ") && w.ends_with("\r\n\r\n6"),
            "{w}"
        );
        assert_eq!(rest.as_deref(), Some(format!("{get}tail").as_bytes()));
    }

    #[tokio::test]
    async fn close_too_large_and_eof_end_the_connection_here() {
        let (w, rest, n) = run(check("a", "connection: close\r\n") + &check("b", "")).await;
        assert_eq!((n, rest), (1, None));
        assert!(
            w.contains("connection: close\r\n") && w.ends_with("\r\n\r\n1"),
            "{w}"
        );
        // Too large with the body here: skipped, the next one answered.
        let (w, rest, n) = run(check("123456789", "") + &check("ab", "")).await;
        assert_eq!((n, rest), (2, None));
        assert!(
            w.starts_with("HTTP/1.1 413 Payload Too Large\r\n") && w.ends_with("\r\n\r\n2"),
            "{w}"
        );
        // Too large with the body not here: answered, closed.
        let (w, _, n) = run("POST /v1/check HTTP/1.1\r\nContent-Length: 100\r\n\r\n{".into()).await;
        assert_eq!(n, 1);
        assert!(w.ends_with("\r\n\r\nbig"), "{w}");
        // A body cut short by the client: nothing answered.
        let (w, rest, n) =
            run("POST /v1/check HTTP/1.1\r\nContent-Length: 5\r\n\r\n{".into()).await;
        assert_eq!((w.as_str(), rest, n), ("", None, 1));
    }
}
