//! Response bytes as hyper writes them (hyper 1.x, HTTP/1.1, lower-case
//! names): the status line (`HTTP/1.1 200 OK`, or the code and its
//! canonical reason), the response's headers in order, `connection:
//! close` when the client asked for it (hyper adds it to the header map,
//! so after the handler's headers), `content-length` unless the response
//! carries one, and `date` (cached per second, as hyper does).

use std::cell::RefCell;
use std::time::UNIX_EPOCH;

use http::StatusCode;

use crate::http::Answer;

/// Appends the status line of `status`.
fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends an [`Answer`] of the router: axum puts `content-type`, then
/// `content-length` into the header map.
pub fn answer(out: &mut Vec<u8>, a: &Answer, close: bool) {
    out.reserve(128 + a.body.len());
    status_line(out, a.status);
    header(out, b"content-type", a.content_type.as_bytes());
    header(
        out,
        b"content-length",
        itoa::Buffer::new().format(a.body.len()).as_bytes(),
    );
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    date(out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a.body.as_bytes());
}

/// Appends a response made outside the router (e.g. a token denial):
/// its headers in order, then what hyper adds.
pub fn response(out: &mut Vec<u8>, head: &http::response::Parts, body: &[u8], close: bool) {
    status_line(out, head.status);
    let mut has_len = false;
    for (name, value) in &head.headers {
        has_len |= name == http::header::CONTENT_LENGTH;
        header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if close && !head.headers.contains_key(http::header::CONNECTION) {
        out.extend_from_slice(b"connection: close\r\n");
    }
    if !has_len {
        header(
            out,
            b"content-length",
            itoa::Buffer::new().format(body.len()).as_bytes(),
        );
    }
    date(out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

thread_local! {
    /// The second and its `date` header line (`date: ...\r\n`).
    static DATE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
}

/// Appends `date: <IMF-fixdate>\r\n` for the current second.
fn date(out: &mut Vec<u8>) {
    // The coarse clock: a tick behind at most, which whole seconds hide.
    let secs = drl_core::time::coarse_wall_seconds();
    DATE.with_borrow_mut(|(at, line)| {
        if *at != secs {
            *at = secs;
            line.clear();
            line.extend_from_slice(b"date: ");
            let now = UNIX_EPOCH + std::time::Duration::from_secs(secs);
            line.extend_from_slice(httpdate::fmt_http_date(now).as_bytes());
            line.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(line);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// The `date` value, replaced by `D`.
    fn undated(s: &str) -> String {
        let i = s.find("date: ").unwrap();
        let j = i + s[i..].find("\r\n").unwrap();
        assert_eq!(j - i - 6, 29, "IMF-fixdate is 29 bytes: {s}");
        format!("{}date: D{}", &s[..i], &s[j..])
    }

    #[test]
    fn answers_look_as_hyper_writes_them() {
        let mut out = Vec::new();
        let a = Answer {
            status: StatusCode::OK,
            content_type: "application/json",
            body: "{}".into(),
        };
        answer(&mut out, &a, false);
        assert_eq!(
            undated(&text(&out)),
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\ndate: D\r\n\r\n{}"
        );
        out.clear();
        let a = Answer {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..a
        };
        answer(&mut out, &a, true);
        assert_eq!(
            undated(&text(&out)),
            "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\ndate: D\r\n\r\n{}"
        );
    }

    #[test]
    fn the_date_is_the_current_second() {
        let before = std::time::SystemTime::now();
        let mut out = Vec::new();
        date(&mut out);
        let after = std::time::SystemTime::now();
        let line = text(&out);
        let value = line
            .strip_prefix("date: ")
            .and_then(|l| l.strip_suffix("\r\n"))
            .unwrap();
        let at = httpdate::parse_http_date(value).unwrap();
        // Whole seconds, from a clock at most a tick behind.
        let slack = std::time::Duration::from_secs(1);
        assert!(at + slack >= before && at <= after, "{value}");
    }
}
