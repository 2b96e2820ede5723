//! The async driver of one connection: reads into a fixed buffer, feeds
//! [`Conn`], runs the calls of all streams concurrently, and writes what
//! every ready answer produced in one write per wakeup.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::Status;

use super::conn::{Conn, Job, Reply};
use super::{Service, Settings};
use crate::deadline::bounded;

/// Read buffer: room for several whole frames (ours are at most 16 KiB).
const READ_BUF: usize = 64 * 1024;
/// The least room left for a read: a largest frame, header included.
const MIN_READ: usize = 16 * 1024 + 9;
/// Reading stops while this much output waits for the peer to read it.
const MAX_OUT: usize = 1024 * 1024;

/// Serves one connection until either side ends it. `track` is called as
/// each request stream starts and what it returns is dropped when its
/// answer is sent (or the stream ends first). Once `close` resolves the
/// connection shuts down gracefully (GOAWAY; streams in flight finish).
pub async fn serve_connection<T, S, G>(
    mut io: T,
    settings: Settings,
    svc: &S,
    track: impl Fn() -> G,
    close: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: Service,
{
    let mut close = pin!(close);
    let mut closing = false;
    let mut conn: Conn<S::Method, G> = Conn::new(settings);
    let mut rbuf = vec![0u8; READ_BUF];
    let (mut start, mut end) = (0, 0);
    let mut written = 0;
    let mut flushing = false;
    let mut eof = false;
    let mut jobs = Vec::new();
    let mut running = FuturesUnordered::new();
    let mut timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)> = None;
    poll_fn(|cx| {
        // The close signal once per poll of the task, not once per turn of
        // the loop below: whoever asks for the close wakes this task, so a
        // poll always follows the request.
        if !closing && close.as_mut().poll(cx).is_ready() {
            closing = true;
            conn.go_away();
        }
        loop {
            let mut progress = false;
            // Read and handle what came.
            if !eof && !conn.is_dead() && conn.out.len() - written < MAX_OUT {
                if start == end {
                    (start, end) = (0, 0);
                } else if rbuf.len() - end < MIN_READ {
                    // Room for at least a whole frame.
                    rbuf.copy_within(start..end, 0);
                    (start, end) = (0, end - start);
                }
                conn.set_busy(running.len());
                let mut rb = ReadBuf::new(&mut rbuf[end..]);
                match Pin::new(&mut io).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        let n = rb.filled().len();
                        progress = true;
                        if n == 0 {
                            eof = true;
                        } else {
                            end += n;
                            // The read's stamp: its streams' start, and
                            // the time of the calls it completes.
                            let read_at = Instant::now();
                            let used =
                                conn.receive(&rbuf[start..end], svc, read_at, &track, &mut jobs);
                            start += used;
                            for (job, guard) in jobs.drain(..) {
                                // Calls the service answers without a
                                // future cost no allocation.
                                let job = match answer_now(svc, job, read_at) {
                                    Ok((id, reply)) => {
                                        conn.respond(id, reply);
                                        drop(guard);
                                        continue;
                                    }
                                    Err(job) => job,
                                };
                                // Most other calls are decided at once:
                                // polled here first, they never enter the
                                // set.
                                let mut call = Box::pin(run(svc, job, guard));
                                match call.as_mut().poll(cx) {
                                    Poll::Ready((id, reply, guard)) => {
                                        conn.respond(id, reply);
                                        drop(guard);
                                    }
                                    Poll::Pending => running.push(call),
                                }
                            }
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            // Answers of calls that are done (an empty set is not polled:
            // it has nothing to wake this task for, and a poll registers
            // the waker anew).
            while !running.is_empty()
                && let Poll::Ready(Some((id, reply, guard))) = running.poll_next_unpin(cx)
            {
                conn.respond(id, reply);
                drop(guard);
                progress = true;
            }
            // Calls whose body is late.
            let timeout = svc.timeout();
            match conn.next_deadline(timeout) {
                None => timer = None,
                Some(at) => {
                    if timer.as_ref().is_none_or(|(t, _)| *t != at) {
                        timer = Some((at, Box::pin(tokio::time::sleep_until(at.into()))));
                    }
                    if let Some((_, sleep)) = &mut timer
                        && sleep.as_mut().poll(cx).is_ready()
                    {
                        conn.expire(svc, Instant::now());
                        timer = None;
                        progress = true;
                    }
                }
            }
            // Write what is ready, all of it in one buffer.
            if written < conn.out.len() {
                match Pin::new(&mut io).poll_write(cx, &conn.out[written..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                    }
                    Poll::Ready(Ok(n)) => {
                        written += n;
                        if written == conn.out.len() {
                            conn.out.clear();
                            written = 0;
                            flushing = true;
                        }
                        progress = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if flushing {
                match Pin::new(&mut io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flushing = false,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            let sent = conn.out.is_empty() && !flushing;
            if sent && (conn.is_done() || (eof && running.is_empty())) {
                return Poll::Ready(Ok(()));
            }
            if !progress {
                return Poll::Pending;
            }
        }
    })
    .await?;
    // Closed cleanly: let the peer see the end of the stream (TLS
    // close_notify).
    let _ = poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx)).await;
    Ok(())
}

/// A call the service answers at once ([`Service::call_now`], given the
/// stamp of the read that completed it): its stream and reply; any other
/// job back.
fn answer_now<S: Service>(
    svc: &S,
    job: Job<S::Method>,
    read_at: Instant,
) -> Result<(u32, Reply), Job<S::Method>> {
    if let Job::Call {
        stream,
        method,
        msg,
        ..
    } = &job
        && let Some(r) = svc.call_now(*method, msg, read_at)
    {
        return Ok((*stream, reply_of(r)));
    }
    Err(job)
}

/// The reply carrying a call's answer.
fn reply_of(r: Result<Bytes, Status>) -> Reply {
    match r {
        Ok(framed) => Reply::Message(framed),
        Err(s) => Reply::Status(s),
    }
}

/// Decides one job; the guard comes back with the answer.
async fn run<S: Service, G>(svc: &S, job: Job<S::Method>, guard: G) -> (u32, Reply, G) {
    match job {
        Job::Call {
            stream,
            method,
            msg,
            started,
        } => {
            let reply = match bounded(started, svc.timeout(), svc.call(method, msg)).await {
                Some(r) => reply_of(r),
                None => Reply::Status(svc.timed_out(method)),
            };
            (stream, reply, guard)
        }
        Job::Fallback { stream, req } => {
            let whole = svc.fallback(*req).await;
            (stream, Reply::Whole(Box::new(whole)), guard)
        }
    }
}
