//! gRPC message framing for the direct HTTP/2 transport ([`super::direct`]),
//! sans-IO: the 5-byte length prefix (a compressed flag, then the message
//! length, big-endian) around each protobuf message.
//!
//! [`UnaryDecoder`] takes a unary request body chunk by chunk and yields its
//! message, failing with the status tonic answers for the same bytes:
//! `INTERNAL` for a set compressed flag (no `grpc-encoding` is accepted),
//! an invalid flag, a truncated prefix or body, or an empty body;
//! `OUT_OF_RANGE` for a message over the size limit (checked as soon as
//! the prefix is in, before the body is buffered). Messages after the first
//! are checked the same way and skipped unread (tonic would also decode
//! them, and discard them).

use bytes::{Buf as _, Bytes, BytesMut};
use tonic::Status;

/// Bytes of the prefix before each message.
pub const PREFIX: usize = 5;

/// The largest request message accepted by default (tonic's default).
pub const DEFAULT_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// A unary request body, decoded chunk by chunk.
#[derive(Debug)]
pub struct UnaryDecoder {
    max: usize,
    buf: BytesMut,
    msg: Option<Bytes>,
    /// Bytes of a later message still to skip.
    skip: usize,
}

impl UnaryDecoder {
    /// A decoder accepting messages of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            buf: BytesMut::new(),
            msg: None,
            skip: 0,
        }
    }

    /// Takes the next chunk of the body.
    pub fn push(&mut self, chunk: Bytes) -> Result<(), Status> {
        // The common case: the whole body in one chunk, exactly one message.
        if self.msg.is_none() && self.buf.is_empty() && chunk.len() >= PREFIX {
            let len = self.header(&chunk)?;
            if chunk.len() == PREFIX + len {
                self.msg = Some(chunk.slice(PREFIX..));
                return Ok(());
            }
        }
        self.buf.extend_from_slice(&chunk);
        self.parse()
    }

    /// The body ended: its message, or the status for what was wrong.
    pub fn finish(self) -> Result<Bytes, Status> {
        if !self.buf.is_empty() || self.skip > 0 {
            return Err(Status::internal("Unexpected EOF decoding stream."));
        }
        self.msg
            .ok_or_else(|| Status::internal("Missing request message."))
    }

    fn parse(&mut self) -> Result<(), Status> {
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.buf.len());
                self.buf.advance(n);
                self.skip -= n;
                if self.skip > 0 {
                    return Ok(());
                }
            }
            if self.buf.len() < PREFIX {
                return Ok(());
            }
            let len = self.header(&self.buf)?;
            if self.msg.is_some() {
                self.buf.advance(PREFIX);
                self.skip = len;
                continue;
            }
            if self.buf.len() < PREFIX + len {
                return Ok(());
            }
            let mut m = self.buf.split_to(PREFIX + len);
            m.advance(PREFIX);
            self.msg = Some(m.freeze());
        }
    }

    /// The message length of the prefix at the start of `b` (5+ bytes).
    fn header(&self, b: &[u8]) -> Result<usize, Status> {
        match b[0] {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "protocol error: received message with compressed-flag but no grpc-encoding was specified",
                ));
            }
            f => {
                return Err(Status::internal(format!(
                    "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
                )));
            }
        }
        let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        if len > self.max {
            return Err(Status::out_of_range(format!(
                "Error, decoded message length too large: found {len} bytes, the limit is: {} bytes",
                self.max
            )));
        }
        Ok(len)
    }
}

/// `msg` encoded with its prefix: one gRPC response DATA frame's payload.
pub fn encode<M: prost::Message>(msg: &M) -> Bytes {
    let len = msg.encoded_len();
    let mut out = Vec::with_capacity(PREFIX + len);
    out.push(0);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    msg.encode_raw(&mut out);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(chunks: &[&[u8]], max: usize) -> Result<Bytes, (tonic::Code, String)> {
        let mut d = UnaryDecoder::new(max);
        for c in chunks {
            d.push(Bytes::copy_from_slice(c))
                .map_err(|s| (s.code(), s.message().to_string()))?;
        }
        d.finish().map_err(|s| (s.code(), s.message().to_string()))
    }

    fn framed(msg: &[u8]) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    #[test]
    fn malformed_bodies_get_tonics_statuses() {
        use tonic::Code;
        let ok = framed(b"hello");
        assert_eq!(decode(&[&ok], 16).unwrap(), &b"hello"[..]);
        assert_eq!(decode(&[], 16).unwrap_err().0, Code::Internal);
        assert_eq!(decode(&[&ok[..3]], 16).unwrap_err().0, Code::Internal);
        assert_eq!(decode(&[&ok[..7]], 16).unwrap_err().0, Code::Internal);
        let mut c = ok.clone();
        c[0] = 1;
        assert!(decode(&[&c], 16).unwrap_err().1.contains("compressed-flag"));
        assert_eq!(decode(&[&ok], 4).unwrap_err().0, Code::OutOfRange);
        // A later message is checked too, and skipped.
        let mut two = ok.clone();
        two.extend_from_slice(&framed(b"second"));
        assert_eq!(decode(&[&two], 16).unwrap(), &b"hello"[..]);
        two.pop();
        assert_eq!(decode(&[&two], 16).unwrap_err().0, Code::Internal);
    }

    #[test]
    fn encode_frames_the_message() {
        let m = crate::pb::CheckItem {
            limit: "l".into(),
            key: "k".into(),
            cost: Some(2),
            ..Default::default()
        };
        let b = encode(&m);
        assert_eq!(&b[..], &framed(&prost::Message::encode_to_vec(&m))[..]);
    }

    proptest! {
        /// How the body is cut into chunks never changes the outcome.
        #[test]
        fn chunking_does_not_matter(
            body in prop::collection::vec(any::<u8>(), 0..40),
            msg in prop::collection::vec(any::<u8>(), 0..20),
            cuts in prop::collection::vec(0usize..60, 0..6),
            framed_first in any::<bool>(),
            max in 0usize..24,
        ) {
            let mut body = body;
            if framed_first {
                let mut f = framed(&msg);
                f.extend_from_slice(&body);
                body = f;
            }
            let whole = decode(&[&body], max);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&body[at..c]);
                at = c;
            }
            chunks.push(&body[at..]);
            prop_assert_eq!(decode(&chunks, max), whole.clone());
            if framed_first && msg.len() <= max && whole.is_ok() {
                prop_assert_eq!(whole.unwrap(), Bytes::from(msg));
            }
        }
    }
}
