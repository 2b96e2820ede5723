//! The `raw` gRPC client of `loadgen`: HTTP/2 written by hand, so that the
//! load generator costs little per request and the server, not the
//! client, is the limit of a saturation run on two cores.
//!
//! Each request is two frames built once per body (HEADERS with a header
//! block that uses no dynamic table, then DATA with END_STREAM), with only
//! the stream id written in per request. Answers are parsed frame by frame:
//! response headers and trailers through drl-server's HPACK decoder (the
//! server may index and Huffman-code them), DATA kept only as far as the
//! check needs. Flow control is honoured both ways (the connection's send
//! window, the peer's SETTINGS; our receive windows are opened wide and
//! topped up); SETTINGS and PING are acknowledged; GOAWAY, RST_STREAM and
//! a closed connection are errors.
//!
//! One task per connection drives its `-m` streams: each slot sends when
//! it is idle and due (at once when not paced; woken by [`Pacer`]), and
//! its latency is counted from when it was due.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drl_server::h2fast::frame::{self, Head, flag, kind, setting};
use drl_server::h2fast::hpack::{self, Decoder, Fields};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pacer::{Pacer, Schedule};
use crate::{Args, Run, check_grpc};

/// Our receive window per stream and the connection's (both opened to
/// this at the start; the connection's topped up when half is used).
const RECV_WINDOW: u32 = 1 << 30;

/// One body's request: HEADERS then DATA, stream ids to fill in.
struct Template {
    bytes: Vec<u8>,
    /// Offsets of the two frames' stream ids.
    ids: [usize; 2],
    /// DATA payload length (counts against the send windows).
    data: usize,
}

impl Template {
    fn new(a: &Args, body: &[u8]) -> Self {
        let auth = a.url.authority().map_or("localhost", |h| h.as_str());
        let path = a.url.path_and_query().map_or("/", |p| p.as_str());
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
        // Literals without indexing, the name from the static table.
        for (index, value) in [(4, path), (1, auth), (31, "application/grpc")] {
            hpack::put_integer(&mut block, 0, 4, index);
            hpack::put_string(&mut block, value.as_bytes());
        }
        hpack::put_literal(&mut block, b"te", b"trailers");
        assert!(
            block.len() <= frame::DEFAULT_MAX_FRAME && body.len() <= frame::DEFAULT_MAX_FRAME,
            "--client raw: a request over one frame (16 KiB) is not supported"
        );
        let mut bytes = Vec::with_capacity(2 * frame::HEADER_LEN + block.len() + body.len());
        frame::put_head(&mut bytes, block.len(), kind::HEADERS, flag::END_HEADERS, 0);
        bytes.extend_from_slice(&block);
        let second = bytes.len();
        frame::put_head(&mut bytes, body.len(), kind::DATA, flag::END_STREAM, 0);
        bytes.extend_from_slice(body);
        Self {
            bytes,
            ids: [5, second + 5],
            data: body.len(),
        }
    }

    fn put(&self, out: &mut Vec<u8>, stream: u32) {
        let at = out.len();
        out.extend_from_slice(&self.bytes);
        for i in self.ids {
            out[at + i..at + i + 4].copy_from_slice(&stream.to_be_bytes());
        }
    }
}

/// A request in flight.
struct Stream {
    id: u32,
    slot: usize,
    due: Instant,
    status: Option<Vec<u8>>,
    grpc_status: Option<Vec<u8>>,
    /// The first bytes of the answer's DATA (as many as the check needs).
    head: Vec<u8>,
}

/// One `-m` slot: its pacing and when it is next due.
struct Slot {
    busy: bool,
    pace: Option<Schedule>,
    next: usize,
}

impl Slot {
    fn due(&self) -> Option<Instant> {
        self.pace.as_ref().map(Schedule::due)
    }
}

/// Drives one connection's `paces.len()` streams until the run stops;
/// returns the latencies (µs) measured.
pub async fn connection(
    a: Arc<Args>,
    run: Arc<Run>,
    mut tcp: TcpStream,
    first: usize,
    paces: Vec<Option<Schedule>>,
) -> Vec<u32> {
    let templates: Vec<Template> = a.bodies.iter().map(|b| Template::new(&a, b)).collect();
    let need = 5 + a.expect_hex.as_ref().map_or(0, Vec::len);
    let mut slots: Vec<Slot> = paces
        .into_iter()
        .enumerate()
        .map(|(i, pace)| Slot {
            busy: false,
            pace,
            next: first + i,
        })
        .collect();
    let mut lat = Vec::with_capacity(1 << 16);
    let mut out = Vec::with_capacity(1 << 16);
    out.extend_from_slice(frame::PREFACE);
    frame::put_settings(
        &mut out,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, RECV_WINDOW),
        ],
    );
    frame::put_window_update(&mut out, 0, RECV_WINDOW - frame::DEFAULT_WINDOW as u32);
    let mut inbuf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut decoder = Decoder::new(4096);
    let mut fields = Fields::default();
    let mut block: Vec<u8> = Vec::new();
    // The stream and END_STREAM flag of the header block being collected.
    let mut block_of: Option<(u32, bool)> = None;
    let mut streams: Vec<Stream> = Vec::new();
    let mut next_id: u32 = 1;
    let mut send_window: i64 = frame::DEFAULT_WINDOW;
    let mut peer_stream_window: i64 = frame::DEFAULT_WINDOW;
    let mut consumed: u64 = 0;
    let mut stopping: Option<Instant> = None;
    let pacer = Pacer::new().expect("timerfd");
    loop {
        let now = Instant::now();
        if run.stop.load(Ordering::Relaxed) {
            let t = *stopping.get_or_insert(now);
            if streams.is_empty() || now > t + Duration::from_secs(2) {
                break;
            }
        } else {
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.busy || slot.due().is_some_and(|d| d > now) {
                    continue;
                }
                let t = &templates[slot.next % templates.len()];
                if (t.data as i64) > send_window || (t.data as i64) > peer_stream_window {
                    break; // wait for WINDOW_UPDATE or SETTINGS
                }
                if next_id > 0x7fff_fff0 {
                    run.error("stream ids used up; use more connections".into());
                    return lat;
                }
                send_window -= t.data as i64;
                t.put(&mut out, next_id);
                streams.push(Stream {
                    id: next_id,
                    slot: i,
                    due: slot.due().unwrap_or(now),
                    status: None,
                    grpc_status: None,
                    head: Vec::new(),
                });
                next_id += 2;
                slot.next += 1;
                if let Some(p) = &mut slot.pace {
                    p.advance();
                }
                slot.busy = true;
            }
        }
        if !out.is_empty() {
            if let Err(e) = tcp.write_all(&out).await {
                run.error(format!("write: {e}"));
                return lat;
            }
            out.clear();
        }
        // Wait for bytes, or for the next idle slot to fall due, or (at
        // most) 50 ms to look at the stop flag.
        let due = slots.iter().filter(|s| !s.busy).filter_map(Slot::due).min();
        let tick = now + Duration::from_millis(50);
        let read = tokio::select! {
            r = tcp.read_buf(&mut inbuf) => Some(r),
            () = pacer.until(due.unwrap_or(tick)), if due.is_some_and(|d| d < tick) => None,
            () = tokio::time::sleep_until(tick.into()) => None,
        };
        match read {
            None => continue,
            Some(Ok(0)) => {
                if !run.stop.load(Ordering::Relaxed) || !streams.is_empty() {
                    run.error("connection closed by the server".into());
                }
                return lat;
            }
            Some(Err(e)) => {
                run.error(format!("read: {e}"));
                return lat;
            }
            Some(Ok(_)) => {}
        }
        // Every whole frame read.
        let mut at = 0;
        while let Some(h) = Head::parse(&inbuf[at..]) {
            let end = at + frame::HEADER_LEN + h.len;
            if inbuf.len() < end {
                break;
            }
            let p = &inbuf[at + frame::HEADER_LEN..end];
            at = end;
            let mut done: Option<u32> = None;
            match h.kind {
                kind::DATA => {
                    consumed += h.len as u64;
                    let data = unpad(&h, p);
                    if let Some(s) = streams.iter_mut().find(|s| s.id == h.stream) {
                        let take = need.saturating_sub(s.head.len()).min(data.len());
                        s.head.extend_from_slice(&data[..take]);
                    }
                    if h.has(flag::END_STREAM) {
                        done = Some(h.stream);
                    }
                }
                kind::HEADERS | kind::CONTINUATION => {
                    let mut frag = p;
                    if h.kind == kind::HEADERS {
                        frag = unpad(&h, frag);
                        if h.has(flag::PRIORITY) {
                            frag = frag.get(5..).unwrap_or_default();
                        }
                        block.clear();
                        block_of = Some((h.stream, h.has(flag::END_STREAM)));
                    }
                    block.extend_from_slice(frag);
                    if h.has(flag::END_HEADERS) {
                        let Some((id, end_stream)) = block_of.take() else {
                            run.error("CONTINUATION without HEADERS".into());
                            return lat;
                        };
                        if let Err(e) = decoder.decode(&block, &mut fields, 1 << 20) {
                            run.error(format!("HPACK: {e:?}"));
                            return lat;
                        }
                        if let Some(s) = streams.iter_mut().find(|s| s.id == id) {
                            for (name, value) in fields.iter() {
                                match name {
                                    b":status" => s.status = Some(value.to_vec()),
                                    b"grpc-status" => s.grpc_status = Some(value.to_vec()),
                                    _ => {}
                                }
                            }
                        }
                        if end_stream {
                            done = Some(id);
                        }
                    }
                }
                kind::RST_STREAM => {
                    if let Some(i) = streams.iter().position(|s| s.id == h.stream) {
                        let s = streams.swap_remove(i);
                        slots[s.slot].busy = false;
                        if run.measuring.load(Ordering::Relaxed) {
                            run.error(format!("RST_STREAM {:02x?}", p));
                        }
                    }
                }
                kind::SETTINGS if !h.has(flag::ACK) => {
                    for s in p.chunks_exact(6) {
                        let id = u16::from_be_bytes([s[0], s[1]]);
                        let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                        if id == setting::INITIAL_WINDOW_SIZE {
                            peer_stream_window = i64::from(v);
                        } else if id == setting::MAX_CONCURRENT_STREAMS
                            && (v as usize) < slots.len()
                        {
                            run.error(format!(
                                "the server allows {v} streams, -m is {}",
                                slots.len()
                            ));
                            return lat;
                        }
                    }
                    frame::put_settings_ack(&mut out);
                }
                kind::PING if !h.has(flag::ACK) => {
                    if let Ok(payload) = <&[u8; 8]>::try_from(p) {
                        frame::put_ping_ack(&mut out, payload);
                    }
                }
                kind::WINDOW_UPDATE if h.stream == 0 => {
                    if let Ok(b) = <[u8; 4]>::try_from(p) {
                        send_window += i64::from(u32::from_be_bytes(b) & 0x7fff_ffff);
                    }
                }
                kind::GOAWAY => {
                    let code = p
                        .get(4..8)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                    run.error(format!("GOAWAY, error code {code:?}"));
                    return lat;
                }
                _ => {}
            }
            if let Some(id) = done
                && let Some(i) = streams.iter().position(|s| s.id == id)
            {
                let s = streams.swap_remove(i);
                slots[s.slot].busy = false;
                if run.measuring.load(Ordering::Relaxed) {
                    let result = if s.status.as_deref() != Some(b"200") {
                        Err(format!(
                            "HTTP {}",
                            String::from_utf8_lossy(s.status.as_deref().unwrap_or(b"(none)"))
                        ))
                    } else {
                        check_grpc(
                            &a,
                            s.grpc_status
                                .as_deref()
                                .map(|v| String::from_utf8_lossy(v).into_owned()),
                            &s.head,
                        )
                    };
                    run.record(result, s.due, &mut lat);
                }
            }
        }
        inbuf.drain(..at);
        if consumed >= u64::from(RECV_WINDOW / 2) {
            frame::put_window_update(&mut out, 0, consumed as u32);
            consumed = 0;
        }
    }
    lat
}

/// A DATA or HEADERS payload without its padding.
fn unpad<'a>(h: &Head, p: &'a [u8]) -> &'a [u8] {
    if !h.has(flag::PADDED) {
        return p;
    }
    let Some((&pad, rest)) = p.split_first() else {
        return &[];
    };
    &rest[..rest.len().saturating_sub(usize::from(pad))]
}
