//! What the tower layer sees of a request ([`RequestView`]), and ready-made
//! classifiers: the key from a header ([`by_header`]), the peer address
//! ([`by_peer_ip`]) or a path prefix ([`by_path_prefix`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};

use crate::layer::{Key, Target};

/// A request's head, whatever its body type.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions (axum puts `ConnectInfo<SocketAddr>` here).
    pub extensions: &'a Extensions,
}

impl<'a> RequestView<'a> {
    /// The view of `req`.
    pub fn of<B>(req: &'a Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The value of header `name`, trimmed, when present and UTF-8.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.get(name).and_then(value_str).map(trim)
    }

    /// The peer's IP address: axum's `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), or a
    /// `SocketAddr` extension another layer inserted.
    pub fn peer_ip(&self) -> Option<IpAddr> {
        if let Some(ci) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(ci.0.ip());
        }
        self.extensions.get::<SocketAddr>().map(SocketAddr::ip)
    }

    /// The first `segments` segments of the path: `/v1/users` for
    /// `/v1/users/7/posts` and 2 (the whole path if it is shorter).
    pub fn path_prefix(&self, segments: usize) -> &'a str {
        let path = self.uri.path();
        let mut seen = 0;
        for (i, b) in path.bytes().enumerate() {
            if b == b'/' && i > 0 {
                seen += 1;
                if seen == segments {
                    return &path[..i];
                }
            }
        }
        path
    }
}

/// A header value as UTF-8 text: `to_str`'s visible-ASCII scan first
/// (cheaper than a UTF-8 check on short values), then a UTF-8 check for
/// values with other bytes. Equals `str::from_utf8(v.as_bytes()).ok()`.
#[inline]
fn value_str(v: &HeaderValue) -> Option<&str> {
    match v.to_str() {
        Ok(s) => Some(s),
        Err(_) => std::str::from_utf8(v.as_bytes()).ok(),
    }
}

/// `s.trim()`, without walking the string when it starts and ends with an
/// ASCII character that is not whitespace (the usual header value).
#[inline]
fn trim(s: &str) -> &str {
    // The ASCII characters `char::is_whitespace` holds for.
    let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(&f), Some(&l)) if f.is_ascii() && l.is_ascii() && !ws(f) && !ws(l) => s,
        _ => s.trim(),
    }
}

/// Limit `limit` by the value of header `header` (e.g. `x-api-key`), at
/// cost 1. A request without the header uses the key `missing` when given
/// (all such requests share it), and is not limited when `None`.
pub fn by_header(
    limit: impl Into<Cow<'static, str>>,
    header: &'static str,
    missing: Option<&'static str>,
) -> impl Fn(&RequestView<'_>) -> Option<Target> + Clone + Send + Sync + 'static {
    let limit = limit.into();
    // Parsed once (a lookup by `&str` parses and lower-cases the name on
    // every request); a name no header can have is never present.
    let name = HeaderName::from_bytes(header.as_bytes()).ok();
    move |req| {
        let found = name
            .as_ref()
            .and_then(|n| req.headers.get(n))
            .and_then(value_str)
            .map(trim);
        let key = match found {
            Some(k) => k,
            None => missing?,
        };
        Some(Target::new(limit.clone(), key, 1))
    }
}

/// Limit `limit` by the peer's IP address, cost 1 (not limited when the
/// address is unknown: see [`RequestView::peer_ip`]).
pub fn by_peer_ip(
    limit: impl Into<Cow<'static, str>>,
) -> impl Fn(&RequestView<'_>) -> Option<Target> + Clone + Send + Sync + 'static {
    let limit = limit.into();
    move |req| {
        // Written into the key's inline buffer: no allocation.
        let mut key = Key::new();
        write!(key, "{}", req.peer_ip()?).ok()?;
        Some(Target::new(limit.clone(), key, 1))
    }
}

/// Limit `limit` by the first `segments` path segments, cost 1 (one
/// budget per route family, shared by all callers).
pub fn by_path_prefix(
    limit: impl Into<Cow<'static, str>>,
    segments: usize,
) -> impl Fn(&RequestView<'_>) -> Option<Target> + Clone + Send + Sync + 'static {
    let limit = limit.into();
    move |req| Some(Target::new(limit.clone(), req.path_prefix(segments), 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_read_header_peer_and_prefix() {
        let mut req = Request::builder()
            .uri("/v1/users/7/posts?x=1")
            .header("x-api-key", " k1 ")
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(SocketAddr::from((
                [10, 0, 0, 9],
                5,
            ))));
        let v = RequestView::of(&req);
        assert_eq!(v.header("X-Api-Key"), Some("k1"));
        assert_eq!(v.peer_ip().unwrap().to_string(), "10.0.0.9");
        assert_eq!(v.path_prefix(1), "/v1");
        assert_eq!(v.path_prefix(2), "/v1/users");
        assert_eq!(v.path_prefix(9), "/v1/users/7/posts");
        let t = by_header("api", "x-api-key", None)(&v).unwrap();
        assert_eq!((&*t.limit, t.key.as_str(), t.cost), ("api", "k1", 1));
        assert!(by_header("api", "x-other", None)(&v).is_none());
        assert_eq!(
            by_header("api", "x-other", Some("anon"))(&v).unwrap().key,
            "anon"
        );
        assert_eq!(by_peer_ip("ip")(&v).unwrap().key, "10.0.0.9");
        assert_eq!(by_path_prefix("p", 2)(&v).unwrap().key, "/v1/users");
    }

    proptest::proptest! {
        /// The fast paths equal what they replace: `from_utf8` of the
        /// value's bytes, and `str::trim` (Unicode whitespace too).
        #[test]
        fn value_str_and_trim_are_the_plain_forms(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    0x20u8..0x7f,
                    proptest::sample::select(vec![b'\t', 0x0b, 0x0c, 0x85, 0xa0, 0xc2, 0xe3, 0x80, 0xff]),
                ],
                0..12,
            ),
            text in "[ \t\n\r\u{b}\u{c}\u{85}\u{a0}\u{3000}a-z\u{1f}é]{0,10}",
        ) {
            if let Ok(v) = HeaderValue::from_bytes(&bytes) {
                proptest::prop_assert_eq!(value_str(&v), std::str::from_utf8(v.as_bytes()).ok());
            }
            proptest::prop_assert_eq!(trim(&text), text.trim());
        }
    }
}
