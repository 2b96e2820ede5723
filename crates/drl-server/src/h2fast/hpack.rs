//! HPACK (RFC 7541), sans-IO: the request-side [`Decoder`] with its
//! dynamic table, the [`OkEncoder`] of the two fields every successful
//! answer carries, and the literal encoding of any other response field.
//!
//! Responses index nothing but `content-type: application/grpc` and
//! `grpc-status: 0` (each added to the peer's table once, then sent as one
//! byte, which spares the client decoding and allocating them per answer);
//! every other field is a literal without indexing.

use std::collections::VecDeque;

use super::huffman;

/// The static table (RFC 7541, Appendix A), index 1 first.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Per-entry overhead in table and header-list sizes (RFC 7541, 4.1).
const ENTRY_OVERHEAD: usize = 32;

/// A header block that cannot be decoded: a connection error
/// (`COMPRESSION_ERROR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer too large to be meant.
    IntegerOverflow,
    /// Index 0, or past the tables.
    BadIndex,
    /// A Huffman string that does not decode.
    Huffman,
    /// A table size update over the limit, or after a field.
    BadSizeUpdate,
}

/// One dynamic-table entry: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }
    fn size(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }
}

/// The fields of one decoded header block, in order, in one buffer
/// (reused block after block).
#[derive(Debug, Default)]
pub struct Fields {
    buf: Vec<u8>,
    /// (name start, value start, value end) in `buf`.
    spans: Vec<(u32, u32, u32)>,
    /// The header list size (RFC 9113, 6.5.2: name + value + 32 each).
    pub list_size: usize,
    /// Over the list size limit: fields past it were decoded (the HPACK
    /// state stays right) but not kept.
    pub oversize: bool,
}

impl Fields {
    /// Empties it for the next block.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
        self.list_size = 0;
        self.oversize = false;
    }

    /// The fields, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|&(n, v, e)| {
            (
                &self.buf[n as usize..v as usize],
                &self.buf[v as usize..e as usize],
            )
        })
    }

    /// How many fields were kept.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True if no field was kept.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn add(&mut self, name: &[u8], value: &[u8], limit: usize) {
        self.list_size += name.len() + value.len() + ENTRY_OVERHEAD;
        if self.list_size > limit {
            self.oversize = true;
        }
        if self.oversize {
            return;
        }
        let n = self.buf.len();
        self.buf.extend_from_slice(name);
        let v = self.buf.len();
        self.buf.extend_from_slice(value);
        self.spans.push((n as u32, v as u32, self.buf.len() as u32));
    }
}

/// The request-side HPACK decoder of one connection.
#[derive(Debug)]
pub struct Decoder {
    table: VecDeque<Entry>,
    /// Sum of the entries' sizes.
    size: usize,
    /// The table's current maximum size (set by size updates).
    max: usize,
    /// The most a size update may set: our `SETTINGS_HEADER_TABLE_SIZE`.
    limit: usize,
    /// Scratch space for Huffman-decoded strings.
    name: Vec<u8>,
    value: Vec<u8>,
    /// Recently decoded Huffman strings.
    cache: HuffCache,
}

/// A Huffman string and its decoding.
type Decoded = (Box<[u8]>, Box<[u8]>);

/// The last few long Huffman strings and what they decode to. Clients do
/// not index some fields (nghttp2 never indexes `:path` or
/// `content-length`), so the same coded bytes come in every request;
/// comparing them costs far less than decoding them.
#[derive(Debug, Default)]
struct HuffCache {
    entries: Vec<Decoded>,
    next: usize,
}

impl HuffCache {
    /// Coded strings shorter than this are decoded every time.
    const MIN: usize = 12;
    /// Entries kept.
    const SIZE: usize = 4;

    /// Decodes `coded` into `dst` (cleared first).
    fn decode(&mut self, coded: &[u8], dst: &mut Vec<u8>) -> Result<(), huffman::InvalidHuffman> {
        dst.clear();
        if coded.len() < Self::MIN {
            return huffman::decode(coded, dst);
        }
        if let Some((_, plain)) = self.entries.iter().find(|(c, _)| **c == *coded) {
            dst.extend_from_slice(plain);
            return Ok(());
        }
        huffman::decode(coded, dst)?;
        let e = (Box::from(coded), Box::from(&dst[..]));
        if self.entries.len() < Self::SIZE {
            self.entries.push(e);
        } else {
            self.entries[self.next] = e;
            self.next = (self.next + 1) % Self::SIZE;
        }
        Ok(())
    }
}

/// Where a string of a representation is: in the input, or decoded into
/// scratch space.
enum Str {
    Raw(usize, usize),
    Scratch,
}

impl Decoder {
    /// A decoder whose table may grow to `limit` bytes (4,096 unless our
    /// SETTINGS said otherwise).
    pub fn new(limit: usize) -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max: limit,
            limit,
            name: Vec::new(),
            value: Vec::new(),
            cache: HuffCache::default(),
        }
    }

    /// Decodes one whole header block into `out` (cleared first); fields
    /// past `list_limit` bytes of header list are decoded but not kept.
    pub fn decode(
        &mut self,
        block: &[u8],
        out: &mut Fields,
        list_limit: usize,
    ) -> Result<(), DecodeError> {
        out.clear();
        let mut at = 0;
        let mut fields_seen = false;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                // Indexed field.
                let idx = integer(block, &mut at, 7)?;
                fields_seen = true;
                let (name, value) = self.get(idx)?;
                out.add(name, value, list_limit);
            } else if b & 0x40 != 0 {
                // Literal with incremental indexing.
                fields_seen = true;
                let (name, value) = self.literal(block, &mut at, 6)?;
                let name = self.resolve(block, name, true)?.to_vec();
                let value = self.resolve(block, value, false)?;
                out.add(&name, value, list_limit);
                let mut bytes = name;
                let name_len = bytes.len();
                bytes.extend_from_slice(value);
                self.insert(Entry {
                    bytes: bytes.into_boxed_slice(),
                    name_len,
                });
            } else if b & 0x20 != 0 {
                // Dynamic table size update: only before the first field.
                if fields_seen {
                    return Err(DecodeError::BadSizeUpdate);
                }
                let size = integer(block, &mut at, 5)?;
                if size > self.limit {
                    return Err(DecodeError::BadSizeUpdate);
                }
                self.max = size;
                self.evict(0);
            } else {
                // Literal without indexing / never indexed.
                fields_seen = true;
                let (name, value) = self.literal(block, &mut at, 4)?;
                let name = self.resolve(block, name, true)?;
                let value = self.resolve(block, value, false)?;
                out.add(name, value, list_limit);
            }
        }
        Ok(())
    }

    /// Reads a literal's name (indexed or literal) and value; strings that
    /// need decoding are decoded into scratch space (`name`, `value`).
    fn literal(
        &mut self,
        block: &[u8],
        at: &mut usize,
        prefix: u8,
    ) -> Result<(NameRef, Str), DecodeError> {
        let idx = integer(block, at, prefix)?;
        let name = if idx == 0 {
            NameRef::Literal(string(block, at, &mut self.name, &mut self.cache)?)
        } else {
            // Checked now; read in `resolve`.
            self.get(idx)?;
            NameRef::Indexed(idx)
        };
        let value = string(block, at, &mut self.value, &mut self.cache)?;
        Ok((name, value))
    }

    fn resolve<'a>(
        &'a self,
        block: &'a [u8],
        name: impl Into<NameOrStr>,
        is_name: bool,
    ) -> Result<&'a [u8], DecodeError> {
        Ok(match name.into() {
            NameOrStr::Name(NameRef::Indexed(i)) => self.get(i)?.0,
            NameOrStr::Name(NameRef::Literal(s)) | NameOrStr::Str(s) => match s {
                Str::Raw(s, e) => &block[s..e],
                Str::Scratch if is_name => &self.name,
                Str::Scratch => &self.value,
            },
        })
    }

    /// The entry at `idx` (1-based; static then dynamic).
    fn get(&self, idx: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        if idx == 0 {
            return Err(DecodeError::BadIndex);
        }
        if idx <= STATIC.len() {
            return Ok(STATIC[idx - 1]);
        }
        let e = self
            .table
            .get(idx - STATIC.len() - 1)
            .ok_or(DecodeError::BadIndex)?;
        Ok((e.name(), e.value()))
    }

    fn insert(&mut self, e: Entry) {
        let size = e.size();
        if size > self.max {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(e);
    }

    /// Evicts until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }

    /// Entries in the dynamic table (tests).
    pub fn table_len(&self) -> usize {
        self.table.len()
    }
}

/// A literal's name.
enum NameRef {
    Indexed(usize),
    Literal(Str),
}

enum NameOrStr {
    Name(NameRef),
    Str(Str),
}

impl From<NameRef> for NameOrStr {
    fn from(n: NameRef) -> Self {
        NameOrStr::Name(n)
    }
}

impl From<Str> for NameOrStr {
    fn from(s: Str) -> Self {
        NameOrStr::Str(s)
    }
}

/// Reads an integer with an `n`-bit prefix at `*at` (RFC 7541, 5.1).
fn integer(block: &[u8], at: &mut usize, n: u8) -> Result<usize, DecodeError> {
    let mask = ((1u16 << n) - 1) as u8;
    let first = *block.get(*at).ok_or(DecodeError::Truncated)? & mask;
    *at += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut v = usize::from(mask);
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(DecodeError::Truncated)?;
        *at += 1;
        if shift > 21 {
            // Past 2^28: no field, index or table is that large.
            return Err(DecodeError::IntegerOverflow);
        }
        v += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// Reads a string literal at `*at` (RFC 7541, 5.2): raw, left in the
/// block, or Huffman-decoded into `scratch`.
fn string(
    block: &[u8],
    at: &mut usize,
    scratch: &mut Vec<u8>,
    cache: &mut HuffCache,
) -> Result<Str, DecodeError> {
    let huff = *block.get(*at).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = integer(block, at, 7)?;
    let start = *at;
    let end = start.checked_add(len).ok_or(DecodeError::Truncated)?;
    if end > block.len() {
        return Err(DecodeError::Truncated);
    }
    *at = end;
    if !huff {
        return Ok(Str::Raw(start, end));
    }
    cache
        .decode(&block[start..end], scratch)
        .map_err(|_| DecodeError::Huffman)?;
    Ok(Str::Scratch)
}

/// The two fields of a successful answer, indexed in the peer's dynamic
/// table on first use (104 bytes of it: far under the 4,096 a peer has
/// unless its SETTINGS say less; if they do, a size update to 0 empties
/// the table and nothing is indexed again).
#[derive(Debug)]
pub struct OkEncoder {
    /// Indexing is on.
    on: bool,
    /// A table size update (to 0) is owed at the start of the next block.
    resize: bool,
    /// Fields in the peer's table, newest first (index 62 first).
    table: Vec<OkField>,
}

/// A field [`OkEncoder`] indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OkField {
    ContentType,
    GrpcStatus,
}

impl Default for OkEncoder {
    fn default() -> Self {
        Self {
            on: true,
            resize: false,
            table: Vec::with_capacity(2),
        }
    }
}

impl OkEncoder {
    /// The peer's `SETTINGS_HEADER_TABLE_SIZE`.
    pub fn set_table_size(&mut self, size: u32) {
        if size < 4096 && self.on {
            self.on = false;
            self.resize = !self.table.is_empty();
            self.table.clear();
        }
    }

    /// Appends the head `:status 200`, `content-type: application/grpc`.
    pub fn head(&mut self, out: &mut Vec<u8>) {
        self.start(out);
        out.push(0x88);
        self.field(out, OkField::ContentType);
    }

    /// Appends the trailers `grpc-status: 0`.
    pub fn trailers(&mut self, out: &mut Vec<u8>) {
        self.start(out);
        self.field(out, OkField::GrpcStatus);
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.resize {
            out.push(0x20);
            self.resize = false;
        }
    }

    fn field(&mut self, out: &mut Vec<u8>, f: OkField) {
        if let Some(i) = self.table.iter().position(|&t| t == f) {
            return put_integer(out, 0x80, 7, STATIC.len() + 1 + i);
        }
        let value: &[u8] = match f {
            OkField::ContentType => {
                // Name: static index 31.
                put_integer(
                    out,
                    if self.on { 0x40 } else { 0 },
                    if self.on { 6 } else { 4 },
                    31,
                );
                b"application/grpc"
            }
            OkField::GrpcStatus => {
                out.push(if self.on { 0x40 } else { 0 });
                put_string(out, b"grpc-status");
                b"0"
            }
        };
        put_string(out, value);
        if self.on {
            self.table.insert(0, f);
        }
    }
}

/// Appends an integer with an `n`-bit prefix, the prefix's other bits set
/// to `flags` (RFC 7541, 5.1).
pub fn put_integer(out: &mut Vec<u8>, flags: u8, n: u8, mut v: usize) {
    let mask = (1usize << n) - 1;
    if v < mask {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | mask as u8);
    v -= mask;
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a raw string literal.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_integer(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends `name: value` as a literal without indexing, new name.
pub fn put_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    put_string(out, name);
    put_string(out, value);
}

/// Appends `:status` (index 8 for 200, a literal with the indexed name
/// otherwise).
pub fn put_status(out: &mut Vec<u8>, status: http::StatusCode) {
    if status == http::StatusCode::OK {
        out.push(0x88);
    } else {
        put_integer(out, 0, 4, 8);
        put_string(out, status.as_str().as_bytes());
    }
}

/// Appends a response head: `:status` then every field of `headers`.
pub fn put_head(out: &mut Vec<u8>, status: http::StatusCode, headers: &http::HeaderMap) {
    put_status(out, status);
    put_fields(out, headers);
}

/// Appends every field of `headers` (trailers).
pub fn put_fields(out: &mut Vec<u8>, headers: &http::HeaderMap) {
    for (name, value) in headers {
        put_literal(out, name.as_str().as_bytes(), value.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(f: &Fields) -> Vec<(String, String)> {
        f.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn rfc_c3_requests_without_huffman() {
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        d.decode(
            &hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
            &mut f,
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            fields(&f),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        d.decode(&hex("8286 84be 5808 6e6f 2d63 6163 6865"), &mut f, 1 << 20)
            .unwrap();
        assert_eq!(
            fields(&f),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        d.decode(
            &hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
            &mut f,
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            fields(&f),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.table_len(), 3);
        assert_eq!(d.size, 164);
    }

    #[test]
    fn rfc_c4_requests_with_huffman() {
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        d.decode(
            &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
            &mut f,
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            fields(&f)[3],
            pairs(&[(":authority", "www.example.com")])[0]
        );
        d.decode(&hex("8286 84be 5886 a8eb 1064 9cbf"), &mut f, 1 << 20)
            .unwrap();
        assert_eq!(fields(&f)[4], pairs(&[("cache-control", "no-cache")])[0]);
        d.decode(
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
            &mut f,
            1 << 20,
        )
        .unwrap();
        assert_eq!(fields(&f)[4], pairs(&[("custom-key", "custom-value")])[0]);
        assert_eq!(d.size, 164);
    }

    #[test]
    fn eviction_and_size_updates() {
        // RFC 7541, C.5: responses with a 256-byte table.
        let mut d = Decoder::new(256);
        d.max = 256;
        let mut f = Fields::default();
        d.decode(
            &hex(
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
                 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
                 6c65 2e63 6f6d",
            ),
            &mut f,
            1 << 20,
        )
        .unwrap();
        assert_eq!(d.size, 222);
        d.decode(&hex("4803 3330 37c1 c0bf"), &mut f, 1 << 20)
            .unwrap();
        assert_eq!(fields(&f)[0], pairs(&[(":status", "307")])[0]);
        assert_eq!(d.size, 222);
        assert_eq!(d.table_len(), 4);
        // A size update over the limit, or after a field, is an error.
        assert_eq!(
            d.decode(&[0x3f, 0xe2, 0x1f], &mut f, 1 << 20),
            Err(DecodeError::BadSizeUpdate)
        );
        assert_eq!(
            d.decode(&[0x82, 0x20], &mut f, 1 << 20),
            Err(DecodeError::BadSizeUpdate)
        );
        // A size update to 0 empties the table.
        d.decode(&[0x20], &mut f, 1 << 20).unwrap();
        assert_eq!(d.table_len(), 0);
        assert_eq!(
            d.decode(&[0xbe], &mut f, 1 << 20),
            Err(DecodeError::BadIndex)
        );
        assert_eq!(
            d.decode(&[0x80], &mut f, 1 << 20),
            Err(DecodeError::BadIndex)
        );
    }

    #[test]
    fn over_the_list_limit_decodes_but_keeps_nothing_more() {
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        let mut block = Vec::new();
        put_literal(&mut block, b"a", &[b'x'; 100]);
        block.push(0x40);
        put_string(&mut block, b"big");
        put_string(&mut block, &[b'y'; 200]);
        d.decode(&block, &mut f, 200).unwrap();
        assert!(f.oversize);
        assert_eq!(f.len(), 1);
        // The indexed field is in the table all the same.
        assert_eq!(d.table_len(), 1);
        d.decode(&[0xbe], &mut f, 1 << 20).unwrap();
        assert_eq!(fields(&f)[0].0, "big");
    }

    #[test]
    fn integers_round_trip() {
        for n in 1..=8u8 {
            for v in [0usize, 1, 30, 31, 127, 128, 255, 256, 1337, 1 << 20] {
                let mut out = Vec::new();
                put_integer(&mut out, 0, n, v);
                let mut at = 0;
                assert_eq!(integer(&out, &mut at, n), Ok(v));
                assert_eq!(at, out.len());
            }
        }
        let mut at = 0;
        assert_eq!(
            integer(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut at, 5),
            Err(DecodeError::IntegerOverflow)
        );
    }

    /// A tiny encoder for the round trip: each field indexed (when it is
    /// already in `table`), or a literal with or without indexing, with or
    /// without Huffman.
    fn encode(fields: &[(Vec<u8>, Vec<u8>, u8)], table: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value, how) in fields {
            let put = |out: &mut Vec<u8>, s: &[u8]| {
                if how & 4 != 0 {
                    let mut h = Vec::new();
                    huffman::encode(s, &mut h);
                    put_integer(out, 0x80, 7, h.len());
                    out.extend_from_slice(&h);
                } else {
                    put_string(out, s);
                }
            };
            if let Some(i) = table.iter().position(|(n, v)| n == name && v == value) {
                put_integer(&mut out, 0x80, 7, STATIC.len() + 1 + i);
                continue;
            }
            if how & 1 != 0 {
                out.push(0x40);
                put(&mut out, name);
                put(&mut out, value);
                table.insert(0, (name.clone(), value.clone()));
            } else {
                out.push(if how & 2 != 0 { 0x10 } else { 0 });
                put(&mut out, name);
                put(&mut out, value);
            }
        }
        out
    }

    #[test]
    fn ok_fields_are_indexed_once_and_follow_the_peers_table_size() {
        let mut e = OkEncoder::default();
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        let mut decode = |b: &[u8]| {
            d.decode(b, &mut f, 1 << 20).unwrap();
            f.iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let head = pairs(&[(":status", "200"), ("content-type", "application/grpc")]);
        let trailers = pairs(&[("grpc-status", "0")]);
        let mut sizes = Vec::new();
        // Heads and trailers interleaved as two streams' would be.
        for step in 0..6 {
            let mut b = Vec::new();
            if step % 3 == 2 {
                e.trailers(&mut b);
                assert_eq!(decode(&b), trailers);
            } else {
                e.head(&mut b);
                assert_eq!(decode(&b), head);
            }
            sizes.push(b.len());
        }
        // After the first of each: one byte per field.
        assert_eq!(&sizes[3..], &[2, 2, 1]);
        // The peer lowers its table size: a size update to 0, then
        // literals; the decoder (limit 4096 here) follows.
        e.set_table_size(100);
        let mut b = Vec::new();
        e.head(&mut b);
        assert_eq!(b[0], 0x20);
        assert_eq!(decode(&b), head);
        let mut b = Vec::new();
        e.trailers(&mut b);
        assert_eq!(decode(&b), trailers);
        assert_eq!(d.table_len(), 0);
    }

    #[test]
    fn a_cached_huffman_string_decodes_as_before() {
        let mut d = Decoder::new(4096);
        let mut f = Fields::default();
        let path = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
        let mut block = Vec::new();
        for value in [&path[..], b"/other/path/long/enough", &path[..], b"/a"] {
            block.clear();
            let mut h = Vec::new();
            huffman::encode(value, &mut h);
            put_integer(&mut block, 0, 4, 4);
            put_integer(&mut block, 0x80, 7, h.len());
            block.extend_from_slice(&h);
            d.decode(&block, &mut f, 1 << 20).unwrap();
            assert_eq!(f.iter().next(), Some((&b":path"[..], value)));
        }
        assert_eq!(d.cache.entries.len(), 2);
        // A bad string is not cached, and still fails.
        let bad = [
            0x04, 0x8c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(d.decode(&bad, &mut f, 1 << 20), Err(DecodeError::Huffman));
        assert_eq!(d.decode(&bad, &mut f, 1 << 20), Err(DecodeError::Huffman));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(block in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut d = Decoder::new(4096);
            let mut f = Fields::default();
            let _ = d.decode(&block, &mut f, 16 * 1024);
            let _ = d.decode(&block, &mut f, 16 * 1024);
        }

        #[test]
        fn round_trip(
            blocks in prop::collection::vec(
                prop::collection::vec(
                    ("[a-z-]{1,12}", prop::collection::vec(any::<u8>(), 0..30), 0u8..8),
                    0..8,
                ),
                1..4,
            )
        ) {
            // Entries stay small enough that a 64 KiB table never evicts.
            let mut d = Decoder::new(65536);
            let mut table = Vec::new();
            for b in blocks {
                let b: Vec<(Vec<u8>, Vec<u8>, u8)> = b
                    .into_iter()
                    .map(|(n, v, h)| (n.into_bytes(), v, h))
                    .collect();
                let block = encode(&b, &mut table);
                let mut f = Fields::default();
                d.decode(&block, &mut f, 1 << 20).unwrap();
                let got: Vec<(Vec<u8>, Vec<u8>)> =
                    f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> =
                    b.into_iter().map(|(n, v, _)| (n, v)).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
