//! One HTTP/2 connection as a sans-IO state machine (RFC 9113).
//!
//! [`Conn::receive`] takes the bytes read, handles every whole frame in
//! them and says how many it used; a request whose body is complete
//! becomes a [`Job`] for the driver to decide, and the answer comes back
//! through [`Conn::respond`]. Everything to send (SETTINGS and their
//! acknowledgements, PING answers, WINDOW_UPDATEs, responses, resets,
//! GOAWAY) is appended to [`Conn::out`], which the driver writes and
//! empties. Nothing here blocks, reads a clock (the caller passes `now`)
//! or spawns.
//!
//! Streams: a request stream is open from its HEADERS until its answer is
//! sent whole; if the client is still sending then, the stream is reset
//! with `NO_ERROR` (RFC 9113, 8.1). A stream over the concurrency limit is
//! refused (`REFUSED_STREAM`); a request head over the header-list limit
//! is answered 431 and reset, as `h2` does, its block decoded all the same
//! so the HPACK state stays in sync. Connection errors send GOAWAY with
//! their code and end the connection ([`Conn::is_done`]).

use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use tonic::Status;

use super::frame::{self, Head, Reason, flag, kind, setting};
use super::hpack::{self, Decoder, Fields};
use super::{Service, Settings, Whole};
use crate::grpc::frame::UnaryDecoder;

/// `:status 431`.
const TOO_LARGE_HEAD: &[u8] = b"\x08\x03431";

/// The HPACK table size our SETTINGS leave at the default.
const HEADER_TABLE_SIZE: usize = 4096;
/// The most compressed header block bytes taken for one request head
/// (HEADERS and CONTINUATION together).
const MAX_BLOCK: usize = 64 * 1024;
/// The most CONTINUATION frames of one header block.
const MAX_CONTINUATIONS: usize = 64;

/// A request whose body is complete, for the driver to decide.
#[derive(Debug)]
pub enum Job<M> {
    /// A hot-path call.
    Call {
        /// Its stream.
        stream: u32,
        /// The method.
        method: M,
        /// The request message, without its prefix.
        msg: Bytes,
        /// When its HEADERS arrived (the deadline counts from there).
        started: Instant,
    },
    /// Any other request, whole.
    Fallback {
        /// Its stream.
        stream: u32,
        /// The request.
        req: Box<http::Request<Bytes>>,
    },
}

/// The answer to a [`Job`].
#[derive(Debug)]
pub enum Reply {
    /// A response message (framed): HEADERS, one DATA, `grpc-status: 0`.
    Message(Bytes),
    /// A status, as a trailers-only response.
    Status(Status),
    /// A whole response (the fallback's).
    Whole(Box<Whole>),
}

/// What becomes of a stream's request body.
enum Body<M> {
    /// A hot-path call's message.
    Hot { method: M, dec: UnaryDecoder },
    /// Another request, kept whole up to `limit` bytes.
    Fallback {
        head: http::request::Parts,
        buf: BytesMut,
        limit: usize,
    },
    /// Already answered, or handed to a job.
    Done,
}

/// Trailers to send after a response's data.
enum Trailers {
    /// `grpc-status: 0`.
    Ok,
    /// An encoded block.
    Block(Vec<u8>),
    /// None: the last DATA frame ends the stream.
    None,
}

/// Response data held until the flow-control windows allow it.
struct Pending {
    data: Bytes,
    trailers: Trailers,
}

struct Stream<M, G> {
    id: u32,
    body: Body<M>,
    /// END_STREAM received.
    remote_done: bool,
    /// The request's start (its HEADERS).
    started: Instant,
    send_window: i64,
    /// Window left to the peer.
    recv_window: i64,
    /// Bytes received and not yet given back with a WINDOW_UPDATE.
    recv_unacked: u32,
    /// `content-length`, if the request had one, and the bytes seen.
    content_length: Option<u64>,
    received: u64,
    pending: Option<Pending>,
    /// In-flight accounting, until a job takes it.
    guard: Option<G>,
}

/// A header block being continued.
struct Partial {
    stream: u32,
    end_stream: bool,
    priority_self: bool,
    block: Vec<u8>,
    frames: usize,
}

/// One connection.
pub struct Conn<M, G> {
    settings: Settings,
    /// Bytes to send.
    pub out: Vec<u8>,
    preface: bool,
    peer_settings_seen: bool,
    hpack: Decoder,
    ok: hpack::OkEncoder,
    fields: Fields,
    scratch: Vec<u8>,
    peer_window: i64,
    peer_max_frame: usize,
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    streams: Vec<Stream<M, G>>,
    last_stream: u32,
    partial: Option<Partial>,
    /// GOAWAY sent (graceful close): no new streams.
    goaway_sent: bool,
    /// GOAWAY received: no new streams will come.
    peer_goaway: bool,
    /// A connection error was sent: nothing more is read or answered.
    dead: bool,
    /// Calls still being decided (some of streams reset since): they
    /// count toward the stream limit too.
    busy: usize,
}

impl<M: Copy, G> Conn<M, G> {
    /// A new connection: our SETTINGS and the connection window's
    /// increase are already in [`out`](Self::out).
    pub fn new(settings: Settings) -> Self {
        let mut out = Vec::with_capacity(4096);
        frame::put_settings(
            &mut out,
            &[
                (
                    setting::MAX_CONCURRENT_STREAMS,
                    settings.max_concurrent_streams,
                ),
                (setting::INITIAL_WINDOW_SIZE, settings.window),
                (setting::MAX_HEADER_LIST_SIZE, settings.max_header_list),
            ],
        );
        let window = i64::from(settings.window);
        if window > frame::DEFAULT_WINDOW {
            frame::put_window_update(&mut out, 0, (window - frame::DEFAULT_WINDOW) as u32);
        }
        Self {
            settings,
            out,
            preface: false,
            peer_settings_seen: false,
            hpack: Decoder::new(HEADER_TABLE_SIZE),
            ok: hpack::OkEncoder::default(),
            fields: Fields::default(),
            scratch: Vec::new(),
            peer_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            send_window: frame::DEFAULT_WINDOW,
            recv_window: window.max(frame::DEFAULT_WINDOW),
            recv_unacked: 0,
            streams: Vec::new(),
            last_stream: 0,
            partial: None,
            goaway_sent: false,
            peer_goaway: false,
            dead: false,
            busy: 0,
        }
    }

    /// True once the connection is over: a connection error was sent, or
    /// a GOAWAY went either way and no stream is left.
    pub fn is_done(&self) -> bool {
        self.dead || ((self.goaway_sent || self.peer_goaway) && self.streams.is_empty())
    }

    /// True if a connection error was sent.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Open streams.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Says how many calls are being decided: new streams are refused
    /// while they reach the stream limit, so that streams reset by the
    /// client while their call runs cannot pile up calls without bound.
    pub fn set_busy(&mut self, calls: usize) {
        self.busy = calls;
    }

    /// Closes gracefully: GOAWAY with the last stream taken; streams open
    /// finish, later ones are refused.
    pub fn go_away(&mut self) {
        if !self.goaway_sent && !self.dead {
            frame::put_goaway(&mut self.out, self.last_stream, Reason::NoError);
            self.goaway_sent = true;
        }
    }

    /// Handles every whole frame at the start of `input`; returns the
    /// bytes used (the rest is an unfinished frame). `track` is called as
    /// each request starts; what it returns is handed out with the
    /// request's job (or dropped when the stream ends first).
    pub fn receive<S>(
        &mut self,
        input: &[u8],
        svc: &S,
        now: Instant,
        track: &impl Fn() -> G,
        jobs: &mut Vec<(Job<M>, G)>,
    ) -> usize
    where
        S: Service<Method = M>,
    {
        let mut at = 0;
        if !self.preface {
            let n = input.len().min(frame::PREFACE.len());
            if input[..n] != frame::PREFACE[..n] {
                self.fatal(Reason::Protocol);
                return input.len();
            }
            if n < frame::PREFACE.len() {
                return 0;
            }
            self.preface = true;
            at = n;
        }
        while !self.dead {
            let Some(h) = Head::parse(&input[at..]) else {
                break;
            };
            if h.len > frame::DEFAULT_MAX_FRAME {
                self.fatal(Reason::FrameSize);
                break;
            }
            let start = at + frame::HEADER_LEN;
            if input.len() - start < h.len {
                break;
            }
            at = start + h.len;
            self.frame(h, &input[start..at], svc, now, track, jobs);
        }
        if self.dead { input.len() } else { at }
    }

    fn frame<S>(
        &mut self,
        h: Head,
        payload: &[u8],
        svc: &S,
        now: Instant,
        track: &impl Fn() -> G,
        jobs: &mut Vec<(Job<M>, G)>,
    ) where
        S: Service<Method = M>,
    {
        if !self.peer_settings_seen {
            if h.kind != kind::SETTINGS || h.has(flag::ACK) {
                return self.fatal(Reason::Protocol);
            }
            self.peer_settings_seen = true;
        }
        if let Some(p) = &self.partial
            && (h.kind != kind::CONTINUATION || h.stream != p.stream)
        {
            return self.fatal(Reason::Protocol);
        }
        match h.kind {
            kind::DATA => self.data(h, payload, jobs),
            kind::HEADERS => self.headers(h, payload, svc, now, track, jobs),
            kind::CONTINUATION => self.continuation(h, payload, svc, now, track, jobs),
            kind::PRIORITY => {
                if h.stream == 0 {
                    return self.fatal(Reason::Protocol);
                }
                if h.len != 5 {
                    self.reset(h.stream, Reason::FrameSize);
                }
            }
            kind::RST_STREAM => {
                if h.len != 4 {
                    return self.fatal(Reason::FrameSize);
                }
                if h.stream == 0 || h.stream > self.last_stream {
                    return self.fatal(Reason::Protocol);
                }
                if let Some(i) = self.find(h.stream) {
                    self.streams.swap_remove(i);
                }
            }
            kind::SETTINGS => self.settings(h, payload),
            kind::PUSH_PROMISE => self.fatal(Reason::Protocol),
            kind::PING => {
                if h.stream != 0 {
                    return self.fatal(Reason::Protocol);
                }
                let Ok(p) = <&[u8; 8]>::try_from(payload) else {
                    return self.fatal(Reason::FrameSize);
                };
                if !h.has(flag::ACK) {
                    frame::put_ping_ack(&mut self.out, p);
                }
            }
            kind::GOAWAY => {
                if h.stream != 0 {
                    return self.fatal(Reason::Protocol);
                }
                if h.len < 8 {
                    return self.fatal(Reason::FrameSize);
                }
                self.peer_goaway = true;
            }
            kind::WINDOW_UPDATE => self.window_update(h, payload),
            _ => {}
        }
    }

    fn settings(&mut self, h: Head, payload: &[u8]) {
        if h.stream != 0 {
            return self.fatal(Reason::Protocol);
        }
        if h.has(flag::ACK) {
            if h.len != 0 {
                self.fatal(Reason::FrameSize);
            }
            return;
        }
        if h.len % 6 != 0 {
            return self.fatal(Reason::FrameSize);
        }
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::ENABLE_PUSH if v > 1 => return self.fatal(Reason::Protocol),
                setting::INITIAL_WINDOW_SIZE => {
                    let v = i64::from(v);
                    if v > frame::MAX_WINDOW {
                        return self.fatal(Reason::FlowControl);
                    }
                    let delta = v - self.peer_window;
                    self.peer_window = v;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > frame::MAX_WINDOW {
                            return self.fatal(Reason::FlowControl);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME as u32..=0xff_ffff).contains(&v) {
                        return self.fatal(Reason::Protocol);
                    }
                    self.peer_max_frame = v as usize;
                }
                setting::HEADER_TABLE_SIZE => self.ok.set_table_size(v),
                // MAX_CONCURRENT_STREAMS: the server opens none;
                // MAX_HEADER_LIST_SIZE: response heads are small.
                _ => {}
            }
        }
        frame::put_settings_ack(&mut self.out);
        self.flush_all();
    }

    fn window_update(&mut self, h: Head, payload: &[u8]) {
        let Ok(p) = <[u8; 4]>::try_from(payload) else {
            return self.fatal(Reason::FrameSize);
        };
        let inc = i64::from(u32::from_be_bytes(p) & 0x7fff_ffff);
        if h.stream == 0 {
            if inc == 0 {
                return self.fatal(Reason::Protocol);
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return self.fatal(Reason::FlowControl);
            }
            return self.flush_all();
        }
        if h.stream > self.last_stream {
            return self.fatal(Reason::Protocol);
        }
        let Some(i) = self.find(h.stream) else {
            return;
        };
        if inc == 0 {
            return self.reset_at(i, Reason::Protocol);
        }
        self.streams[i].send_window += inc;
        if self.streams[i].send_window > frame::MAX_WINDOW {
            return self.reset_at(i, Reason::FlowControl);
        }
        self.flush(i);
    }

    fn data(&mut self, h: Head, payload: &[u8], jobs: &mut Vec<(Job<M>, G)>) {
        if h.stream == 0 || h.stream > self.last_stream {
            return self.fatal(Reason::Protocol);
        }
        // The whole payload, padding included, counts.
        let len = payload.len();
        if len as i64 > self.recv_window {
            return self.fatal(Reason::FlowControl);
        }
        self.recv_window -= len as i64;
        self.recv_unacked += len as u32;
        if self.recv_unacked >= self.settings.window / 2 {
            frame::put_window_update(&mut self.out, 0, self.recv_unacked);
            self.recv_window += i64::from(self.recv_unacked);
            self.recv_unacked = 0;
        }
        let data = if h.has(flag::PADDED) {
            let Some((&pad, rest)) = payload.split_first() else {
                return self.fatal(Reason::FrameSize);
            };
            if usize::from(pad) > rest.len() {
                return self.fatal(Reason::Protocol);
            }
            &rest[..rest.len() - usize::from(pad)]
        } else {
            payload
        };
        let Some(i) = self.find(h.stream) else {
            // A stream already closed: ignored.
            return;
        };
        let s = &mut self.streams[i];
        if s.remote_done {
            return self.reset_at(i, Reason::StreamClosed);
        }
        if len as i64 > s.recv_window {
            return self.reset_at(i, Reason::FlowControl);
        }
        s.recv_window -= len as i64;
        s.recv_unacked += len as u32;
        s.received += data.len() as u64;
        let end = h.has(flag::END_STREAM);
        match &mut s.body {
            Body::Hot { dec, .. } if !data.is_empty() => {
                if let Err(status) = dec.push(Bytes::copy_from_slice(data)) {
                    s.body = Body::Done;
                    return self.status_at(i, status);
                }
            }
            Body::Fallback { buf, limit, .. } => {
                let room = limit.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
            }
            _ => {}
        }
        if end {
            s.remote_done = true;
            self.end_of_body(i, jobs);
        } else if s.recv_unacked >= self.settings.window / 2 {
            frame::put_window_update(&mut self.out, s.id, s.recv_unacked);
            s.recv_window += i64::from(s.recv_unacked);
            s.recv_unacked = 0;
        }
    }

    fn headers<S: Service<Method = M>>(
        &mut self,
        h: Head,
        payload: &[u8],
        svc: &S,
        now: Instant,
        track: &impl Fn() -> G,
        jobs: &mut Vec<(Job<M>, G)>,
    ) {
        if h.stream == 0 {
            return self.fatal(Reason::Protocol);
        }
        let mut start = 0;
        let mut pad = 0;
        if h.has(flag::PADDED) {
            let Some(&p) = payload.first() else {
                return self.fatal(Reason::FrameSize);
            };
            pad = usize::from(p);
            start = 1;
        }
        let mut priority_self = false;
        if h.has(flag::PRIORITY) {
            let Some(p) = payload.get(start..start + 5) else {
                return self.fatal(Reason::FrameSize);
            };
            let dep = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
            priority_self = dep == h.stream;
            start += 5;
        }
        if start + pad > payload.len() {
            return self.fatal(Reason::Protocol);
        }
        let fragment = &payload[start..payload.len() - pad];
        let end_stream = h.has(flag::END_STREAM);
        if !h.has(flag::END_HEADERS) {
            let mut block = std::mem::take(&mut self.scratch);
            block.clear();
            block.extend_from_slice(fragment);
            self.partial = Some(Partial {
                stream: h.stream,
                end_stream,
                priority_self,
                block,
                frames: 0,
            });
            return;
        }
        self.header_block(
            h.stream,
            end_stream,
            priority_self,
            fragment,
            svc,
            now,
            track,
            jobs,
        );
    }

    fn continuation<S: Service<Method = M>>(
        &mut self,
        h: Head,
        payload: &[u8],
        svc: &S,
        now: Instant,
        track: &impl Fn() -> G,
        jobs: &mut Vec<(Job<M>, G)>,
    ) {
        let Some(p) = &mut self.partial else {
            return self.fatal(Reason::Protocol);
        };
        p.frames += 1;
        if p.frames > MAX_CONTINUATIONS || p.block.len() + payload.len() > MAX_BLOCK {
            return self.fatal(Reason::EnhanceYourCalm);
        }
        p.block.extend_from_slice(payload);
        if !h.has(flag::END_HEADERS) {
            return;
        }
        let Some(p) = self.partial.take() else {
            return;
        };
        self.header_block(
            p.stream,
            p.end_stream,
            p.priority_self,
            &p.block,
            svc,
            now,
            track,
            jobs,
        );
        self.scratch = p.block;
    }

    #[allow(clippy::too_many_arguments)]
    fn header_block<S: Service<Method = M>>(
        &mut self,
        id: u32,
        end_stream: bool,
        priority_self: bool,
        block: &[u8],
        svc: &S,
        now: Instant,
        track: &impl Fn() -> G,
        jobs: &mut Vec<(Job<M>, G)>,
    ) {
        // Always decoded: the HPACK state must follow every block.
        let limit = self.settings.max_header_list as usize;
        if self.hpack.decode(block, &mut self.fields, limit).is_err() {
            return self.fatal(Reason::Compression);
        }
        if let Some(i) = self.find(id) {
            // Trailers: they must end the stream.
            if !end_stream || self.streams[i].remote_done {
                return self.reset_at(i, Reason::Protocol);
            }
            self.streams[i].remote_done = true;
            return self.end_of_body(i, jobs);
        }
        if id % 2 == 0 {
            return self.fatal(Reason::Protocol);
        }
        if id <= self.last_stream {
            // Trailers of a stream already closed are ignored; a new
            // request must have a new, larger id.
            if end_stream && !self.fields.iter().any(|(n, _)| n.first() == Some(&b':')) {
                return;
            }
            return self.fatal(Reason::Protocol);
        }
        self.last_stream = id;
        if self.goaway_sent || self.peer_goaway {
            return frame::put_rst(&mut self.out, id, Reason::RefusedStream);
        }
        if self.fields.oversize {
            frame::put_headers(&mut self.out, id, TOO_LARGE_HEAD, true, self.peer_max_frame);
            return frame::put_rst(&mut self.out, id, Reason::Protocol);
        }
        if self.streams.len().max(self.busy) >= self.settings.max_concurrent_streams as usize {
            return frame::put_rst(&mut self.out, id, Reason::RefusedStream);
        }
        let Some(req) = Request::parse(&self.fields) else {
            return frame::put_rst(&mut self.out, id, Reason::Protocol);
        };
        if priority_self {
            return frame::put_rst(&mut self.out, id, Reason::Protocol);
        }
        let mut status = None;
        let body = match std::str::from_utf8(req.path)
            .ok()
            .and_then(|p| svc.route(p))
        {
            Some(method) => {
                if let Err(s) = svc.admit(method, req.authorization) {
                    status = Some(s);
                } else if let Some(enc) = req.encoding
                    && enc != b"identity"
                {
                    status = Some(unsupported_encoding(enc));
                }
                Body::Hot {
                    method,
                    dec: UnaryDecoder::new(svc.max_message()),
                }
            }
            None => {
                let Some(head) = req.parts(&self.fields) else {
                    return frame::put_rst(&mut self.out, id, Reason::Protocol);
                };
                Body::Fallback {
                    head,
                    buf: BytesMut::new(),
                    limit: svc.max_message().saturating_add(crate::grpc::frame::PREFIX),
                }
            }
        };
        let guard = track();
        self.streams.push(Stream {
            id,
            body,
            remote_done: end_stream,
            started: now,
            send_window: self.peer_window,
            recv_window: i64::from(self.settings.window),
            recv_unacked: 0,
            content_length: req.content_length,
            received: 0,
            pending: None,
            guard: Some(guard),
        });
        let i = self.streams.len() - 1;
        if let Some(s) = status {
            self.streams[i].body = Body::Done;
            return self.status_at(i, s);
        }
        if end_stream {
            self.end_of_body(i, jobs);
        }
    }

    /// The request body of stream `i` is complete.
    fn end_of_body(&mut self, i: usize, jobs: &mut Vec<(Job<M>, G)>) {
        let s = &mut self.streams[i];
        if let Some(cl) = s.content_length
            && cl != s.received
        {
            return self.reset_at(i, Reason::Protocol);
        }
        let id = s.id;
        match std::mem::replace(&mut s.body, Body::Done) {
            Body::Hot { method, dec } => match dec.finish() {
                Ok(msg) => {
                    let guard = s.guard.take();
                    if let Some(g) = guard {
                        jobs.push((
                            Job::Call {
                                stream: id,
                                method,
                                msg,
                                started: s.started,
                            },
                            g,
                        ));
                    }
                }
                Err(status) => self.status_at(i, status),
            },
            Body::Fallback { head, buf, .. } => {
                if let Some(g) = s.guard.take() {
                    let req = Box::new(http::Request::from_parts(head, buf.freeze()));
                    jobs.push((Job::Fallback { stream: id, req }, g));
                }
            }
            Body::Done => {}
        }
    }

    /// When the earliest call still receiving its body runs out of time.
    pub fn next_deadline(&self, timeout: Duration) -> Option<Instant> {
        if timeout.is_zero() {
            return None;
        }
        self.streams
            .iter()
            .filter(|s| matches!(s.body, Body::Hot { .. }))
            .map(|s| s.started + timeout)
            .min()
    }

    /// Answers the calls still receiving their body once past their
    /// deadline.
    pub fn expire<S: Service<Method = M>>(&mut self, svc: &S, now: Instant) {
        let timeout = svc.timeout();
        if timeout.is_zero() {
            return;
        }
        let mut i = 0;
        while i < self.streams.len() {
            let s = &mut self.streams[i];
            if let Body::Hot { method, .. } = s.body
                && s.started + timeout <= now
            {
                s.body = Body::Done;
                let n = self.streams.len();
                self.status_at(i, svc.timed_out(method));
                if self.streams.len() < n {
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Sends the answer of stream `id` (nothing if it is gone).
    pub fn respond(&mut self, id: u32, reply: Reply) {
        if self.dead {
            return;
        }
        let Some(i) = self.find(id) else {
            return;
        };
        match reply {
            Reply::Message(framed) => {
                let mut block = std::mem::take(&mut self.scratch);
                block.clear();
                self.ok.head(&mut block);
                frame::put_headers(&mut self.out, id, &block, false, self.peer_max_frame);
                self.scratch = block;
                self.streams[i].pending = Some(Pending {
                    data: framed,
                    trailers: Trailers::Ok,
                });
                self.flush(i);
            }
            Reply::Status(s) => self.status_at(i, s),
            Reply::Whole(w) => {
                let mut block = std::mem::take(&mut self.scratch);
                block.clear();
                hpack::put_head(&mut block, w.head.status, &w.head.headers);
                let empty = w.body.is_empty() && w.trailers.is_none();
                frame::put_headers(&mut self.out, id, &block, empty, self.peer_max_frame);
                self.scratch = block;
                if empty {
                    return self.finished(i);
                }
                let trailers = match w.trailers {
                    Some(t) => {
                        let mut b = Vec::new();
                        hpack::put_fields(&mut b, &t);
                        Trailers::Block(b)
                    }
                    None => Trailers::None,
                };
                self.streams[i].pending = Some(Pending {
                    data: w.body,
                    trailers,
                });
                self.flush(i);
            }
        }
    }

    /// Answers stream `i` with `status` (trailers-only) and ends it.
    fn status_at(&mut self, i: usize, status: Status) {
        let id = self.streams[i].id;
        let (head, ()) = status.into_http::<()>().into_parts();
        let mut block = std::mem::take(&mut self.scratch);
        block.clear();
        hpack::put_head(&mut block, head.status, &head.headers);
        frame::put_headers(&mut self.out, id, &block, true, self.peer_max_frame);
        self.scratch = block;
        self.finished(i);
    }

    /// Sends what flow control allows of stream `i`'s held response; ends
    /// the stream once all is sent.
    fn flush(&mut self, i: usize) {
        let max_frame = self.peer_max_frame as i64;
        let s = &mut self.streams[i];
        let Some(p) = &mut s.pending else {
            return;
        };
        while !p.data.is_empty() {
            let n = (p.data.len() as i64)
                .min(s.send_window)
                .min(self.send_window)
                .min(max_frame);
            if n <= 0 {
                return;
            }
            let n = n as usize;
            let last = n == p.data.len() && matches!(p.trailers, Trailers::None);
            frame::put_data(&mut self.out, s.id, &p.data[..n], last);
            p.data.advance(n);
            s.send_window -= n as i64;
            self.send_window -= n as i64;
        }
        match &p.trailers {
            Trailers::Ok => {
                let mut block = std::mem::take(&mut self.scratch);
                block.clear();
                self.ok.trailers(&mut block);
                frame::put_headers(&mut self.out, s.id, &block, true, self.peer_max_frame);
                self.scratch = block;
            }
            Trailers::Block(b) => {
                frame::put_headers(&mut self.out, s.id, b, true, self.peer_max_frame)
            }
            Trailers::None => {}
        }
        s.pending = None;
        self.finished(i);
    }

    /// Flushes every held response the windows now allow.
    fn flush_all(&mut self) {
        let mut i = 0;
        while i < self.streams.len() && self.send_window > 0 {
            let n = self.streams.len();
            if self.streams[i].pending.is_some() {
                self.flush(i);
            }
            if self.streams.len() == n {
                i += 1;
            }
        }
    }

    /// Stream `i`'s answer is sent whole: it ends (reset with `NO_ERROR`
    /// if the client is still sending).
    fn finished(&mut self, i: usize) {
        let s = self.streams.swap_remove(i);
        if !s.remote_done {
            frame::put_rst(&mut self.out, s.id, Reason::NoError);
        }
    }

    /// Resets stream `i` with `reason`.
    fn reset_at(&mut self, i: usize, reason: Reason) {
        let s = self.streams.swap_remove(i);
        frame::put_rst(&mut self.out, s.id, reason);
    }

    /// Resets stream `id` (if open) with `reason`.
    fn reset(&mut self, id: u32, reason: Reason) {
        match self.find(id) {
            Some(i) => self.reset_at(i, reason),
            None => frame::put_rst(&mut self.out, id, reason),
        }
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// A connection error: GOAWAY with `reason`, and the end.
    fn fatal(&mut self, reason: Reason) {
        if !self.dead {
            frame::put_goaway(&mut self.out, self.last_stream, reason);
            self.dead = true;
            self.streams.clear();
            self.partial = None;
        }
    }
}

/// What a request head says, borrowed from its decoded fields.
struct Request<'a> {
    method: &'a [u8],
    scheme: &'a [u8],
    authority: Option<&'a [u8]>,
    path: &'a [u8],
    authorization: Option<&'a [u8]>,
    encoding: Option<&'a [u8]>,
    content_length: Option<u64>,
}

impl<'a> Request<'a> {
    /// The request's pseudo-headers and the fields the server reads;
    /// `None` if it is malformed (RFC 9113, 8.1.1: a stream error).
    fn parse(fields: &'a Fields) -> Option<Self> {
        let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
        let (mut authorization, mut encoding, mut content_length) = (None, None, None);
        let mut regular = false;
        for (name, value) in fields.iter() {
            if let Some(pseudo) = name.strip_prefix(b":") {
                let slot = match pseudo {
                    _ if regular => return None,
                    b"method" => &mut method,
                    b"scheme" => &mut scheme,
                    b"authority" => &mut authority,
                    b"path" => &mut path,
                    _ => return None,
                };
                if slot.replace(value).is_some() {
                    return None;
                }
                continue;
            }
            regular = true;
            // Folded without early exit: the loops vectorize.
            let upper = name.iter().fold(false, |u, &b| u | b.is_ascii_uppercase());
            let control = value
                .iter()
                .fold(false, |c, &b| c | ((b < 0x20) & (b != b'\t')) | (b == 0x7f));
            if upper || control {
                return None;
            }
            match name {
                b"authorization" => {
                    authorization.get_or_insert(value);
                }
                b"grpc-encoding" => {
                    encoding.get_or_insert(value);
                }
                b"content-length" => {
                    let n = std::str::from_utf8(value).ok()?.parse::<u64>().ok()?;
                    if content_length.replace(n).is_some_and(|m| m != n) {
                        return None;
                    }
                }
                b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
                | b"upgrade" => return None,
                b"te" if value != b"trailers" => return None,
                _ => {}
            }
        }
        let path = path?;
        if path.is_empty() {
            return None;
        }
        Some(Request {
            method: method?,
            scheme: scheme?,
            authority,
            path,
            authorization,
            encoding,
            content_length,
        })
    }

    /// The request head as `http` has it (the fallback's).
    fn parts(&self, fields: &Fields) -> Option<http::request::Parts> {
        let method = http::Method::from_bytes(self.method).ok()?;
        let mut uri = http::Uri::builder()
            .scheme(self.scheme)
            .path_and_query(self.path);
        if let Some(a) = self.authority {
            uri = uri.authority(a);
        }
        let uri = uri.build().ok()?;
        let mut b = http::Request::builder()
            .method(method)
            .uri(uri)
            .version(http::Version::HTTP_2);
        let headers = b.headers_mut()?;
        for (name, value) in fields.iter() {
            if name.first() == Some(&b':') {
                continue;
            }
            let name = http::HeaderName::from_bytes(name).ok()?;
            let value = http::HeaderValue::from_bytes(value).ok()?;
            headers.append(name, value);
        }
        Some(b.body(()).ok()?.into_parts().0)
    }
}

/// tonic's answer to a request compressed with an encoding it does not
/// accept (this transport accepts none).
fn unsupported_encoding(enc: &[u8]) -> Status {
    let name = match std::str::from_utf8(enc) {
        Ok(s) => s.to_string(),
        Err(_) => format!("{enc:?}"),
    };
    let mut s = Status::unimplemented(format!(
        "Content is compressed with `{name}` which isn't supported"
    ));
    s.metadata_mut().insert(
        "grpc-accept-encoding",
        tonic::metadata::MetadataValue::from_static("identity"),
    );
    s
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;

    use super::*;

    /// Answers `/m` by echoing the message; everything else falls back.
    struct Echo;

    impl Service for Echo {
        type Method = ();

        fn route(&self, path: &str) -> Option<()> {
            (path == "/m").then_some(())
        }

        fn max_message(&self) -> usize {
            1024
        }

        async fn call(&self, (): (), msg: Bytes) -> Result<Bytes, Status> {
            Ok(msg)
        }
    }

    fn framed(msg: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    fn head_block(path: &str) -> Vec<u8> {
        let mut b = vec![0x83, 0x86];
        hpack::put_integer(&mut b, 0, 4, 4);
        hpack::put_string(&mut b, path.as_bytes());
        hpack::put_literal(&mut b, b"content-type", b"application/grpc");
        // Huffman-coded, indexed: the decoder's table is exercised too.
        b.push(0x40);
        let mut h = Vec::new();
        super::super::huffman::encode(b"user-agent", &mut h);
        hpack::put_integer(&mut b, 0x80, 7, h.len());
        b.extend_from_slice(&h);
        hpack::put_string(&mut b, b"test/1.0");
        b
    }

    /// A client's bytes: preface, SETTINGS, then for each stream its
    /// head cut into HEADERS + CONTINUATION at `head_cuts` and its body
    /// into DATA frames at `body_cuts`.
    fn client_bytes(
        streams: &[(u32, Vec<u8>)],
        head_cuts: &[usize],
        body_cuts: &[usize],
    ) -> Vec<u8> {
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, &[]);
        for (id, msg) in streams {
            let block = head_block("/m");
            let pieces = cut(&block, head_cuts);
            for (i, p) in pieces.iter().enumerate() {
                let last = i == pieces.len() - 1;
                let eh = if last { flag::END_HEADERS } else { 0 };
                let k = if i == 0 {
                    kind::HEADERS
                } else {
                    kind::CONTINUATION
                };
                frame::put_head(&mut out, p.len(), k, eh, *id);
                out.extend_from_slice(p);
            }
            let body = framed(msg);
            let pieces = cut(&body, body_cuts);
            for (i, p) in pieces.iter().enumerate() {
                frame::put_data(&mut out, *id, p, i == pieces.len() - 1);
            }
        }
        out
    }

    /// `b` cut at the positions in `cuts` (taken modulo its length).
    fn cut<'a>(b: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (b.len() + 1)).collect();
        at.sort_unstable();
        at.dedup();
        let mut out = Vec::new();
        let mut prev = 0;
        for c in at {
            if c > prev {
                out.push(&b[prev..c]);
                prev = c;
            }
        }
        out.push(&b[prev..]);
        out
    }

    /// Feeds `input` to a connection in reads of the sizes in `reads`,
    /// answering each job at once; returns what the server wrote and the
    /// requests tracked.
    fn run(input: &[u8], reads: &[usize]) -> (Vec<u8>, usize) {
        let tracked = Cell::new(0);
        let track = || tracked.set(tracked.get() + 1);
        let mut conn: Conn<(), ()> = Conn::new(Settings::new(None));
        let mut buf = Vec::new();
        let mut jobs = Vec::new();
        let mut at = 0;
        let mut r = reads.iter().cycle();
        let now = Instant::now();
        while at < input.len() {
            let n = (*r.next().unwrap()).clamp(1, input.len() - at);
            buf.extend_from_slice(&input[at..at + n]);
            at += n;
            let used = conn.receive(&buf, &Echo, now, &track, &mut jobs);
            buf.drain(..used);
            for (job, ()) in jobs.drain(..) {
                match job {
                    Job::Call { stream, msg, .. } => {
                        conn.respond(stream, Reply::Message(Bytes::from(framed(&msg))))
                    }
                    Job::Fallback { .. } => panic!("no fallback here"),
                }
            }
        }
        assert!(buf.is_empty());
        assert!(!conn.is_dead());
        (conn.out, tracked.get())
    }

    proptest! {
        /// However the client cuts its head and body into frames, and
        /// however the bytes arrive, the server writes the same bytes.
        #[test]
        fn framing_and_reads_do_not_matter(
            msgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 1..4),
            head_cuts in prop::collection::vec(any::<usize>(), 0..4),
            body_cuts in prop::collection::vec(any::<usize>(), 0..6),
            reads in prop::collection::vec(1usize..64, 1..8),
        ) {
            let streams: Vec<(u32, Vec<u8>)> =
                msgs.into_iter().enumerate().map(|(i, m)| (2 * i as u32 + 1, m)).collect();
            let whole = client_bytes(&streams, &[], &[]);
            let (want, n) = run(&whole, &[whole.len()]);
            prop_assert_eq!(n, streams.len());
            let split = client_bytes(&streams, &head_cuts, &body_cuts);
            let (got, n) = run(&split, &reads);
            prop_assert_eq!(n, streams.len());
            prop_assert_eq!(got, want);
        }

        /// Random bytes after the preface never panic, and end in a
        /// GOAWAY or in frames still to come.
        #[test]
        fn garbage_never_panics(tail in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut input = frame::PREFACE.to_vec();
            frame::put_settings(&mut input, &[]);
            input.extend_from_slice(&tail);
            let mut conn: Conn<(), ()> = Conn::new(Settings::new(None));
            let mut jobs = Vec::new();
            let used = conn.receive(&input, &Echo, Instant::now(), &|| (), &mut jobs);
            prop_assert!(used <= input.len());
        }
    }

    #[test]
    fn responses_are_the_precomputed_blocks() {
        let input = client_bytes(&[(1, b"hi".to_vec())], &[], &[]);
        let (out, _) = run(&input, &[input.len()]);
        // After SETTINGS, WINDOW_UPDATE and the SETTINGS ack: the head,
        // the message, the trailers.
        let mut at = 0;
        let mut frames = Vec::new();
        while let Some(h) = Head::parse(&out[at..]) {
            frames.push((h, out[at + 9..at + 9 + h.len].to_vec()));
            at += 9 + h.len;
        }
        let kinds: Vec<u8> = frames.iter().map(|(h, _)| h.kind).collect();
        assert_eq!(
            kinds,
            [
                kind::SETTINGS,
                kind::WINDOW_UPDATE,
                kind::SETTINGS,
                kind::HEADERS,
                kind::DATA,
                kind::HEADERS
            ]
        );
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        d.decode(&frames[3].1, &mut f, 1 << 20).unwrap();
        let head: Vec<_> = f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(
            head,
            [
                (b":status".to_vec(), b"200".to_vec()),
                (b"content-type".to_vec(), b"application/grpc".to_vec())
            ]
        );
        assert_eq!(frames[4].1, framed(b"hi"));
        d.decode(&frames[5].1, &mut f, 1 << 20).unwrap();
        assert_eq!(f.iter().next(), Some((&b"grpc-status"[..], &b"0"[..])));
        assert_eq!(frames[5].0.flags, flag::END_STREAM | flag::END_HEADERS);
    }
}
