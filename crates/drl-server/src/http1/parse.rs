//! Sans-IO: which request heads the fast path takes.
//!
//! A head is parsed with `httparse` (hyper's own parser). The fast path
//! takes exactly one shape of request: `POST /v1/check HTTP/1.1` (no query
//! string; the absolute form `http://host:port/v1/check` too) with one
//! plain `Content-Length`, no `Transfer-Encoding`,
//! `Expect` or `Upgrade`, and a `Connection` header, if any, of `close` or
//! `keep-alive`. Anything else, including a head that does not parse or
//! grows past [`MAX_HEAD`], is [`Head::Handoff`]: hyper answers it (and
//! the rest of the connection) as it always did.

/// The most bytes of an unfinished head the fast path waits for before
/// handing the connection to hyper (which has its own, larger bound).
pub const MAX_HEAD: usize = 16 * 1024;

/// The most header lines the fast path parses; a head with more goes to
/// hyper.
const MAX_HEADERS: usize = 32;

/// The path the fast path answers.
pub const CHECK_PATH: &[u8] = b"/v1/check";

/// What the bytes at the start of a connection's buffer are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head<'b> {
    /// Not a whole head yet: read more.
    Partial,
    /// A check the fast path answers.
    Check(Check<'b>),
    /// Anything else: hyper answers from here on.
    Handoff,
}

/// A `POST /v1/check` head the fast path takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check<'b> {
    /// Bytes of the head, up to and including its blank line.
    pub head_len: usize,
    /// The body's length.
    pub content_length: u64,
    /// The client asked to close the connection after this answer.
    pub close: bool,
    /// The first `Authorization` header's value.
    pub authorization: Option<&'b [u8]>,
}

/// Classifies the head at the start of `buf`.
pub fn parse(buf: &[u8]) -> Head<'_> {
    // An empty buffer (every request on a kept-alive connection starts
    // with one) is not worth a parser.
    if buf.is_empty() {
        return Head::Partial;
    }
    // httparse fills what it parses: nothing to initialise (32 headers
    // would be 1 KiB written per request).
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => return Head::Partial,
        _ => return Head::Handoff,
    };
    if req.method != Some("POST")
        || !req.path.is_some_and(|p| is_check_target(p.as_bytes()))
        || req.version != Some(1)
    {
        return Head::Handoff;
    }
    let mut content_length = None;
    let mut close = false;
    let mut authorization = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return Head::Handoff;
            }
            match decimal(h.value) {
                Some(n) => content_length = Some(n),
                None => return Head::Handoff,
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            let v = h.value.trim_ascii();
            if v.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if !v.eq_ignore_ascii_case(b"keep-alive") {
                return Head::Handoff;
            }
        } else if name.eq_ignore_ascii_case(b"authorization") {
            authorization.get_or_insert(h.value);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
        {
            return Head::Handoff;
        }
    }
    match content_length {
        Some(content_length) => Head::Check(Check {
            head_len,
            content_length,
            close,
            authorization,
        }),
        None => Head::Handoff,
    }
}

/// `/v1/check`, or its absolute form (`http://host:port/v1/check`, as
/// proxies and some clients send it; hyper routes it by its path) with a
/// plain host name or IPv4 address and an optional port.
fn is_check_target(t: &[u8]) -> bool {
    if t == CHECK_PATH {
        return true;
    }
    let rest = match t.split_at_checked(7) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"http://") => rest,
        _ => match t.split_at_checked(8) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"https://") => rest,
            _ => return false,
        },
    };
    let Some(slash) = rest.iter().position(|&b| b == b'/') else {
        return false;
    };
    let (authority, path) = rest.split_at(slash);
    let (host, port) = match authority.iter().position(|&b| b == b':') {
        Some(i) => (&authority[..i], Some(&authority[i + 1..])),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.');
    let port_ok = port.is_none_or(|p| decimal(p).is_some_and(|n| (1..=65_535).contains(&n)));
    path == CHECK_PATH && host_ok && port_ok
}

/// A plain decimal `Content-Length` (digits only, at most 18 of them).
fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REQ: &[u8] = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";

    #[test]
    fn the_simple_check_is_taken() {
        let Head::Check(c) = parse(REQ) else {
            panic!("{:?}", parse(REQ))
        };
        assert_eq!(c.head_len, REQ.len() - 2);
        assert_eq!(c.content_length, 2);
        assert!(!c.close && c.authorization.is_none());
        let r = b"POST /v1/check HTTP/1.1\r\nconnection: Close\r\nAuthorization: Bearer t\r\nauthorization: x\r\ncontent-length: 0\r\n\r\n";
        let Head::Check(c) = parse(r) else { panic!() };
        assert!(c.close);
        for target in [
            "http://127.0.0.1:8080/v1/check",
            "HTTP://localhost/v1/check",
            "https://drl.example/v1/check",
        ] {
            let r = format!("POST {target} HTTP/1.1\r\ncontent-length: 0\r\n\r\n");
            assert!(matches!(parse(r.as_bytes()), Head::Check(_)), "{target}");
        }
        assert_eq!(c.authorization, Some(&b"Bearer t"[..]));
    }

    #[test]
    fn everything_else_is_handed_off() {
        for r in [
            &b"GET /healthz HTTP/1.1\r\n\r\n"[..],
            b"POST /v1/check HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/checks HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nUpgrade: h2c\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nConnection: upgrade\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"POST /v1/check HTTP/1.1\r\nBad Header\r\n\r\n",
            b"POST http://h:0/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http://h:65536/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http://[::1]/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http:///v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http://u@h/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST http://h/v1/check?x HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            b"POST ftp://h/v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        ] {
            assert_eq!(parse(r), Head::Handoff, "{}", String::from_utf8_lossy(r));
        }
        let many: Vec<u8> = [
            &b"POST /v1/check HTTP/1.1\r\n"[..],
            &b"x-a: 1\r\n".repeat(MAX_HEADERS + 1),
            b"Content-Length: 0\r\n\r\n",
        ]
        .concat();
        assert_eq!(parse(&many), Head::Handoff);
        let long = [&b"POST /v1/check HTTP/1.1\r\nx-a: "[..], &[b'a'; MAX_HEAD]].concat();
        assert_eq!(parse(&long), Head::Handoff);
    }

    proptest! {
        /// Every proper prefix of a head is `Partial`, and the whole head
        /// parses the same with any body bytes after it.
        #[test]
        fn prefixes_wait_and_trailing_bytes_do_not_matter(cut in 0..REQ.len() - 2, tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(parse(&REQ[..cut]), Head::Partial);
            let mut whole = REQ.to_vec();
            whole.extend_from_slice(&tail);
            prop_assert_eq!(parse(&whole), parse(REQ));
        }

        /// Content-Length: any plain decimal is read as such.
        #[test]
        fn lengths_are_decimal(n in 0u64..1_000_000_000_000) {
            let r = format!("POST /v1/check HTTP/1.1\r\ncontent-length: {n}\r\n\r\n");
            let Head::Check(c) = parse(r.as_bytes()) else { panic!() };
            prop_assert_eq!(c.content_length, n);
        }
    }
}
