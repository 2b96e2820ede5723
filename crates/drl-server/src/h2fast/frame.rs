//! HTTP/2 frames (RFC 9113, section 4 and 6), sans-IO: the frame header,
//! and the writers of every frame the server sends.

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 9;

/// The client connection preface (RFC 9113, 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The smallest, and our, `SETTINGS_MAX_FRAME_SIZE`.
pub const DEFAULT_MAX_FRAME: usize = 16_384;

/// The largest flow-control window.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The initial window of a connection and of each stream until SETTINGS
/// say otherwise.
pub const DEFAULT_WINDOW: i64 = 65_535;

/// Frame types.
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY.
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE.
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers.
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113, 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    /// NO_ERROR.
    NoError = 0x0,
    /// PROTOCOL_ERROR.
    Protocol = 0x1,
    /// INTERNAL_ERROR.
    Internal = 0x2,
    /// FLOW_CONTROL_ERROR.
    FlowControl = 0x3,
    /// STREAM_CLOSED.
    StreamClosed = 0x5,
    /// FRAME_SIZE_ERROR.
    FrameSize = 0x6,
    /// REFUSED_STREAM.
    RefusedStream = 0x7,
    /// CANCEL.
    Cancel = 0x8,
    /// COMPRESSION_ERROR.
    Compression = 0x9,
    /// ENHANCE_YOUR_CALM.
    EnhanceYourCalm = 0xb,
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: usize,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl Head {
    /// Parses the first [`HEADER_LEN`] bytes of `b`, if there are that
    /// many.
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Head {
            len: (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// True if `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends a SETTINGS frame with `settings`.
pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING acknowledgement of `payload`.
pub fn put_ping_ack(out: &mut Vec<u8>, payload: &[u8; 8]) {
    put_head(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(payload);
}

/// Appends a WINDOW_UPDATE.
pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a RST_STREAM.
pub fn put_rst(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    put_head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(reason as u32).to_be_bytes());
}

/// Appends a GOAWAY.
pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    put_head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&(reason as u32).to_be_bytes());
}

/// Appends a header block as HEADERS and as many CONTINUATION frames as
/// `max_frame` needs.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let es = if end_stream { flag::END_STREAM } else { 0 };
    if block.len() <= max_frame {
        put_head(
            out,
            block.len(),
            kind::HEADERS,
            es | flag::END_HEADERS,
            stream,
        );
        out.extend_from_slice(block);
        return;
    }
    let mut chunks = block.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        let eh = if last { flag::END_HEADERS } else { 0 };
        if first {
            put_head(out, c.len(), kind::HEADERS, es | eh, stream);
            first = false;
        } else {
            put_head(out, c.len(), kind::CONTINUATION, eh, stream);
        }
        out.extend_from_slice(c);
    }
}

/// Appends one DATA frame.
pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let f = if end_stream { flag::END_STREAM } else { 0 };
    put_head(out, data.len(), kind::DATA, f, stream);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trip() {
        let mut out = Vec::new();
        put_head(&mut out, 0x12_3456, kind::HEADERS, 0x25, 0x7fff_fffe);
        assert_eq!(
            Head::parse(&out),
            Some(Head {
                len: 0x12_3456,
                kind: kind::HEADERS,
                flags: 0x25,
                stream: 0x7fff_fffe
            })
        );
        // The reserved bit is ignored.
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).unwrap().stream, 0x7fff_fffe);
        assert_eq!(Head::parse(&out[..8]), None);
    }

    #[test]
    fn long_header_blocks_continue() {
        let block = vec![7u8; 40];
        let mut out = Vec::new();
        put_headers(&mut out, 3, &block, true, 16);
        let mut at = 0;
        let mut seen = Vec::new();
        while at < out.len() {
            let h = Head::parse(&out[at..]).unwrap();
            seen.push((h.kind, h.flags, h.len));
            at += HEADER_LEN + h.len;
        }
        assert_eq!(
            seen,
            vec![
                (kind::HEADERS, flag::END_STREAM, 16),
                (kind::CONTINUATION, 0, 16),
                (kind::CONTINUATION, flag::END_HEADERS, 8)
            ]
        );
    }
}
