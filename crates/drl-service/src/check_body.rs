//! The body of `POST /v1/check`, read into the engine's items.
//!
//! Nearly every body has one shape:
//! `{"requests":[{"limit":"api","key":"tenant-7","cost":1}]}`. [`read`]
//! first tries [`common`]. That matches the compact form serializers write
//! (no whitespace, the fields in the documented order) literally, and
//! otherwise scans for the same shape more loosely: any JSON whitespace
//! between tokens, the fields of an item in any order, `cost` optional and
//! written as a plain whole number, strings without escapes. It gives up on
//! anything else (an escape, an unknown or repeated field, `1.0`, `null`,
//! a missing field, trailing bytes), and `read` then parses the body with
//! serde_json ([`Body`]), which gives the same items or the error the
//! client sees. Both `drl serve` and the minimal server read bodies
//! through `read`.
//!
//! Invariant (proptests below): whenever [`common`] returns items,
//! serde_json reads the same items from the same text. For a one-item
//! body the literal match costs about 270 instructions, the scanner about
//! 740, serde_json about 2,100 (callgrind; docs/performance.md, "The service").

use std::borrow::Cow;

use serde::Deserialize;
use smallvec::SmallVec;

use crate::engine::{CheckRequest, INLINE_BATCH, Op};

/// The items of a body, in order.
pub type Items<'a> = SmallVec<[CheckRequest<'a>; INLINE_BATCH]>;

/// Why a body was refused: the message for the client, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Not JSON of the expected shape (`invalid_json`).
    Json(String),
    /// A cost that is not a whole number from 0 to `u64::MAX`
    /// (`invalid_cost`).
    Cost(String),
}

/// The items of `text`: by [`common`] when it can, else by serde_json,
/// whose [`Body`] is kept in `slot` for the items to borrow from.
pub fn read<'t: 's, 's>(
    text: &'t str,
    slot: &'s mut Option<Body<'t>>,
) -> Result<Items<'s>, Refused> {
    if let Some(items) = common(text) {
        return Ok(items);
    }
    let body = slot.insert(Body::parse(text).map_err(Refused::Json)?);
    body.items()
}

/// A body as serde_json reads it: any JSON of the documented shape
/// (escapes, `1.0`, `null` costs), or the error the client sees. Strings
/// borrow from the body unless an escape forced a copy.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body<'a> {
    #[serde(borrow)]
    requests: Vec<Item<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Item<'a> {
    #[serde(borrow)]
    limit: Cow<'a, str>,
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default)]
    cost: Option<serde_json::Number>,
    /// `take` (absent), `check`, `charge`, `reserve`, `settle`, `release`.
    #[serde(default, borrow)]
    mode: Option<Cow<'a, str>>,
    /// `settle`, `release`: the id a `reserve` answered (a decimal
    /// string: JSON numbers lose precision above 2^53 in many clients).
    #[serde(default, borrow)]
    reservation: Option<Cow<'a, str>>,
}

impl<'a> Body<'a> {
    /// Parses `text`; the error is the message for the client.
    pub fn parse(text: &'a str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "invalid request body: {e} (expected {{\"requests\":[{{\"limit\":\"api\",\"key\":\"tenant-7\",\"cost\":1}}]}})"
            )
        })
    }

    /// The items, or why the first bad one is refused: a cost that is not
    /// a whole number from 0 to `u64::MAX`, an unknown `mode`, or a
    /// `reservation` missing from a settle or release (or given to another
    /// mode, or not a decimal id).
    pub fn items(&self) -> Result<Items<'_>, Refused> {
        let mut items = Items::with_capacity(self.requests.len());
        for (i, it) in self.requests.iter().enumerate() {
            items.push(CheckRequest {
                limit: &it.limit,
                key: &it.key,
                cost: cost_of(i, it.cost.as_ref()).map_err(Refused::Cost)?,
                op: op_of(i, it.mode.as_deref(), it.reservation.as_deref())
                    .map_err(Refused::Json)?,
            });
        }
        Ok(items)
    }
}

/// Reads an item's `mode` and `reservation`.
fn op_of(index: usize, mode: Option<&str>, reservation: Option<&str>) -> Result<Op, String> {
    let mode = mode.unwrap_or("take");
    let needs_id = matches!(mode, "settle" | "release");
    let id = match (reservation, needs_id) {
        (None, false) => 0,
        (Some(r), true) => match r.parse::<u64>() {
            Ok(id) if !r.starts_with('+') => id,
            _ => {
                return Err(format!(
                    "requests[{index}]: reservation {r:?} is not an id a reserve answered (a decimal string)"
                ));
            }
        },
        (None, true) => {
            return Err(format!(
                "requests[{index}]: mode {mode:?} needs `reservation` (the id a reserve answered)"
            ));
        }
        (Some(_), false) => {
            return Err(format!(
                "requests[{index}]: `reservation` goes with mode \"settle\" or \"release\", not {mode:?}"
            ));
        }
    };
    Op::parse(mode, id).ok_or_else(|| {
        format!(
            "requests[{index}]: unknown mode {mode:?}; expected take, check, charge, reserve, settle or release"
        )
    })
}

/// Validates a JSON cost: a whole number from 0 to `u64::MAX` (`1.0` and
/// `2e3` are whole numbers too).
fn cost_of(index: usize, n: Option<&serde_json::Number>) -> Result<u64, String> {
    let Some(n) = n else { return Ok(1) };
    if let Some(c) = n.as_u64() {
        return Ok(c);
    }
    if n.as_i64().is_some() {
        return Err(format!(
            "requests[{index}]: cost {n} is negative; costs are whole numbers >= 0"
        ));
    }
    match n.as_f64() {
        // A whole number written with a fraction (`1.0`, `2e3`).
        Some(f) if f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f) => {
            Ok(f as u64)
        }
        Some(f) if f.fract() == 0.0 && f > 0.0 => Err(format!(
            "requests[{index}]: cost {n} is too large (at most {})",
            u64::MAX
        )),
        Some(f) if f < 0.0 => Err(format!(
            "requests[{index}]: cost {n} is negative; costs are whole numbers >= 0"
        )),
        _ => Err(format!("requests[{index}]: cost {n} is not a whole number")),
    }
}

/// The items of a body of the common shape, or `None` for any other text
/// (which [`Body::parse`] then reads or refuses).
pub fn common(text: &str) -> Option<Items<'_>> {
    if let Some(items) = compact(text) {
        return Some(items);
    }
    let mut c = Cursor { text, at: 0 };
    c.eat(b'{')?;
    if c.string()? != "requests" {
        return None;
    }
    c.eat(b':')?;
    c.eat(b'[')?;
    let mut items = Items::new();
    c.space();
    if c.peek() == Some(b']') {
        c.at += 1;
    } else {
        loop {
            items.push(c.item()?);
            match c.next()? {
                b',' => {}
                b']' => break,
                _ => return None,
            }
        }
    }
    c.eat(b'}')?;
    c.space();
    (c.at == text.len()).then_some(items)
}

/// The compact form that serializers write with the fields in the
/// documented order (drl-client, `serde_json::to_string`, the README's
/// examples): no whitespace, `limit` then `key` then an optional `cost`.
/// It is matched literally, which costs a fifth of the scanner below; any
/// other text is `None` and goes to the scanner.
fn compact(text: &str) -> Option<Items<'_>> {
    let mut rest = text.strip_prefix(r#"{"requests":["#)?;
    let mut items = Items::new();
    if rest == "]}" {
        return Some(items);
    }
    loop {
        let (limit, r) = plain(rest.strip_prefix(r#"{"limit":""#)?)?;
        let (key, r) = plain(r.strip_prefix(r#","key":""#)?)?;
        let (cost, r) = match r.strip_prefix(r#","cost":"#) {
            Some(r) => whole(r)?,
            None => (1, r),
        };
        items.push(CheckRequest {
            limit,
            key,
            cost,
            op: Op::Take,
        });
        rest = r.strip_prefix('}')?;
        match rest.strip_prefix(',') {
            Some(r) => rest = r,
            None => break,
        }
    }
    (rest == "]}").then_some(items)
}

/// The string that `text` starts with (after its opening quote), up to its
/// closing quote, and what follows the quote; `None` at an escape, a
/// control character or the end.
fn plain(text: &str) -> Option<(&str, &str)> {
    let end = text
        .as_bytes()
        .iter()
        .position(|&b| ENDS_STRING[usize::from(b)])?;
    // An ASCII quote is a char boundary on both sides.
    let (s, rest) = (text.get(..end)?, text.get(end..)?);
    Some((s, rest.strip_prefix('"')?))
}

/// A JSON integer (no sign, no leading zero, no fraction or exponent) that
/// fits a `u64`, and what follows it.
fn whole(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (s, rest) = text.split_at(digits);
    if digits == 0 || (digits > 1 && s.starts_with('0')) {
        return None;
    }
    Some((s.parse().ok()?, rest))
}

/// JSON whitespace.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The bytes that end a plain string: the quote, and the two this scanner
/// leaves to serde_json (a backslash, and the control characters JSON
/// forbids in strings).
static ENDS_STRING: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// A position in the body.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Skips JSON whitespace.
    fn space(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let mut b = self.peek()?;
        if is_space(b) {
            self.space();
            b = self.peek()?;
        }
        self.at += 1;
        Some(b)
    }

    /// Consumes `want` after whitespace.
    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut end = start;
        while !ENDS_STRING[usize::from(*bytes.get(end)?)] {
            end += 1;
        }
        if bytes[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // Both ends are ASCII quotes: char boundaries of valid UTF-8.
        self.text.get(start..end)
    }

    /// A whole number written as JSON writes integers (no sign, no
    /// leading zero, no fraction or exponent) that fits a `u64`.
    fn whole(&mut self) -> Option<u64> {
        self.space();
        let rest = &self.text[self.at..];
        let (n, after) = whole(rest)?;
        self.at += rest.len() - after.len();
        Some(n)
    }

    /// One `{"limit":..,"key":..[,"cost":..]}`, fields in any order, each
    /// at most once.
    fn item(&mut self) -> Option<CheckRequest<'a>> {
        self.eat(b'{')?;
        let (mut limit, mut key, mut cost) = (None, None, None);
        loop {
            let field = self.string()?;
            self.eat(b':')?;
            let repeated = match field {
                "limit" => limit.replace(self.string()?).is_some(),
                "key" => key.replace(self.string()?).is_some(),
                "cost" => cost.replace(self.whole()?).is_some(),
                _ => return None,
            };
            if repeated {
                return None;
            }
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        Some(CheckRequest {
            limit: limit?,
            key: key?,
            cost: cost.unwrap_or(1),
            op: Op::Take,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn owned(items: &Items<'_>) -> Vec<(String, String, u64)> {
        items
            .iter()
            .map(|r| (r.limit.to_string(), r.key.to_string(), r.cost))
            .collect()
    }

    /// serde_json's reading of `text`: the items, or `None` if refused.
    fn by_serde(text: &str) -> Option<Vec<(String, String, u64)>> {
        let body = Body::parse(text).ok()?;
        body.items().ok().map(|i| owned(&i))
    }

    #[test]
    fn the_common_shapes_are_read_without_serde() {
        for (text, want) in [
            (
                r#"{"requests":[{"limit":"api","key":"tenant-7"}]}"#,
                vec![("api", "tenant-7", 1)],
            ),
            (
                r#"{"requests":[{"limit":"api","key":"k","cost":0}]}"#,
                vec![("api", "k", 0)],
            ),
            (
                " {\n \"requests\" : [ { \"cost\" : 18446744073709551615 , \"key\" : \"é k\" , \"limit\" : \"a\" } ,\t{\"limit\":\"b\",\"key\":\"\"} ] } \r\n",
                vec![("a", "é k", u64::MAX), ("b", "", 1)],
            ),
            (r#"{"requests":[]}"#, vec![]),
        ] {
            let got = common(text).unwrap_or_else(|| panic!("not read: {text}"));
            let want: Vec<_> = want
                .into_iter()
                .map(|(l, k, c)| (l.to_string(), k.to_string(), c))
                .collect();
            assert_eq!(owned(&got), want, "{text}");
            assert_eq!(by_serde(text), Some(want), "{text}");
        }
    }

    #[test]
    fn the_compact_form_is_matched_literally_and_nothing_else_is() {
        assert_eq!(
            owned(
                &compact(
                    r#"{"requests":[{"limit":"api","key":"k-1","cost":3},{"limit":"b","key":""}]}"#
                )
                .unwrap()
            ),
            vec![
                ("api".to_string(), "k-1".to_string(), 3),
                ("b".to_string(), String::new(), 1)
            ]
        );
        assert_eq!(compact(r#"{"requests":[]}"#).map(|i| i.len()), Some(0));
        for text in [
            r#"{"requests":[{"key":"k","limit":"a"}]}"#, // another order
            r#"{"requests": [{"limit":"a","key":"k"}]}"#, // whitespace
            r#"{"requests":[{"limit":"a","key":"k"}]} "#,
            r#"{"requests":[{"limit":"a","key":"k"},]}"#,
            r#"{"requests":[{"limit":"a","key":"k","cost":1,"x":2}]}"#,
            r#"{"requests":[{"limit":"a","key":"k","cost":01}]}"#,
            r#"{"requests":[{"limit":"a\"b","key":"k"}]}"#,
        ] {
            assert!(compact(text).is_none(), "matched: {text}");
        }
        // The scanner still reads the ones of the common shape.
        assert!(common(r#"{"requests":[{"key":"k","limit":"a"}]}"#).is_some());
        assert!(common(r#"{"requests": [{"limit":"a","key":"k"}]}"#).is_some());
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for text in [
            r#"{"requests":[{"limit":"a\"b","key":"k"}]}"#, // an escape
            r#"{"requests":[{"limit":"a","key":"k","cost":1.0}]}"#, // a fraction
            r#"{"requests":[{"limit":"a","key":"k","cost":2e3}]}"#, // an exponent
            r#"{"requests":[{"limit":"a","key":"k","cost":null}]}"#,
            r#"{"requests":[{"limit":"a","key":"k","cost":-1}]}"#,
            r#"{"requests":[{"limit":"a","key":"k","cost":01}]}"#,
            r#"{"requests":[{"limit":"a","key":"k","cost":18446744073709551616}]}"#,
            r#"{"requests":[{"limit":"a","key":"k","limit":"b"}]}"#, // repeated
            r#"{"requests":[{"limit":"a"}]}"#,                       // missing key
            r#"{"requests":[{"limit":"a","key":"k","x":1}]}"#,       // unknown
            r#"{"requests":[{"limit":"a","key":"k"}],"x":1}"#,
            r#"{"requests":[{"limit":"a","key":"k"},]}"#, // trailing comma
            r#"{"requests":[{"limit":"a","key":"k"}]}x"#, // trailing bytes
            r#"{"requests":[{"limit":"a","key":"k"}]"#,   // truncated
            "{\"requests\":[{\"limit\":\"a\tb\",\"key\":\"k\"}]}", // control char
            "",
        ] {
            assert!(common(text).is_none(), "read: {text}");
        }
        // serde_json still reads the ones that are valid.
        assert_eq!(
            by_serde(r#"{"requests":[{"limit":"a\"b","key":"k","cost":2e3}]}"#),
            Some(vec![("a\"b".to_string(), "k".to_string(), 2000)])
        );
    }

    #[test]
    fn read_takes_either_path_and_says_why_it_refuses() {
        let mut slot = None;
        let text = r#"{"requests":[{"limit":"a","key":"k"}]}"#;
        assert_eq!(
            owned(&read(text, &mut slot).unwrap()),
            by_serde(text).unwrap()
        );
        assert!(slot.is_none(), "the common shape needs no serde_json body");
        let mut slot = None;
        let text = r#"{"requests":[{"limit":"a\"b","key":"k","cost":2e3}]}"#;
        assert_eq!(
            owned(&read(text, &mut slot).unwrap()),
            by_serde(text).unwrap()
        );
        let mut slot = None;
        assert!(matches!(read("{", &mut slot), Err(Refused::Json(_))));
        let mut slot = None;
        let text = r#"{"requests":[{"limit":"a","key":"k","cost":1.5}]}"#;
        assert!(matches!(read(text, &mut slot), Err(Refused::Cost(_))));
    }

    /// Pieces of bodies: valid and invalid tokens mixed, so that the
    /// scanner meets both.
    fn body() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", "", "", " ", "\n", "\t ", "\r\n", "\u{a0}"]);
        // Valid tokens are listed more than once: about one body in
        // sixteen is then of the common shape.
        let string = prop::sample::select(vec![
            "\"api\"",
            "\"api\"",
            "\"k-1\"",
            "\"k-1\"",
            "\"\"",
            "\"é\"",
            "\"é\"",
            "\"a\\\"b\"",
            "\"a\\u0041\"",
            "\"a\tb\"",
            "api",
            "\"limit\"",
        ]);
        let field = prop::sample::select(vec![
            "\"limit\"",
            "\"limit\"",
            "\"limit\"",
            "\"key\"",
            "\"key\"",
            "\"key\"",
            "\"cost\"",
            "\"cost\"",
            "\"other\"",
            "\"Limit\"",
            "limit",
        ]);
        let number = prop::sample::select(vec![
            "0",
            "1",
            "1",
            "42",
            "42",
            "18446744073709551615",
            "007",
            "1.0",
            "2e3",
            "-1",
            "-0",
            "null",
            "\"1\"",
            "18446744073709551616",
            "1x",
            "",
        ]);
        let member =
            (space.clone(), field, space.clone(), string, number).prop_map(|(s, f, s2, v, n)| {
                let value = if f == "\"cost\"" {
                    n.to_string()
                } else {
                    v.to_string()
                };
                format!("{s}{f}{s2}:{s}{value}{s2}")
            });
        let item = prop::collection::vec(member, 1..4).prop_map(|m| format!("{{{}}}", m.join(",")));
        let items = prop::collection::vec(item, 0..4);
        let top = prop::sample::select(vec![
            "\"requests\"",
            "\"requests\"",
            "\"requests\"",
            "\"request\"",
            "requests",
        ]);
        let tail = prop::sample::select(vec!["", "", "", " ", "\n", "x", ",", "}", "]"]);
        (space, top, items, tail, prop::bool::weighted(0.1)).prop_map(
            |(s, top, items, tail, comma)| {
                let mut list = items.join(",");
                if comma {
                    list.push(',');
                }
                format!("{s}{{{s}{top}{s}:{s}[{s}{list}{s}]{s}}}{tail}")
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The scanner never reads a body differently from serde_json:
        /// whatever it accepts, serde_json reads as the same items.
        #[test]
        fn common_agrees_with_serde(text in body()) {
            if let Some(items) = common(&text) {
                prop_assert_eq!(Some(owned(&items)), by_serde(&text), "{}", text);
            }
        }

        /// Any byte changed anywhere in a body of the common shape: what
        /// the scanner still reads, serde_json reads the same.
        #[test]
        fn changed_bytes_are_read_as_serde_reads_them(
            at in 0usize..64,
            byte in any::<u8>(),
            cost in proptest::option::of(0u64..1000),
        ) {
            let mut body = match cost {
                Some(c) => format!(r#"{{"requests":[{{"limit":"api","key":"é-7","cost":{c}}}]}}"#),
                None => r#"{"requests":[{"limit":"api","key":"é-7"}]}"#.to_string(),
            }
            .into_bytes();
            let at = at % body.len();
            body[at] = byte;
            // The handler reads only UTF-8 bodies (it answers 400 to others).
            if let Ok(text) = std::str::from_utf8(&body) {
                if let Some(items) = common(text) {
                    prop_assert_eq!(Some(owned(&items)), by_serde(text), "{}", text);
                }
            }
        }

        /// The literal match of the compact form never reads a body
        /// differently from serde_json either.
        #[test]
        fn compact_agrees_with_serde(text in body()) {
            if let Some(items) = compact(&text) {
                prop_assert_eq!(Some(owned(&items)), by_serde(&text), "{}", text);
            }
        }

        /// Compact bodies (fields in the documented order, no whitespace,
        /// one to three items) take the literal match.
        #[test]
        fn compact_bodies_take_the_literal_match(
            items in prop::collection::vec((
                "[a-z0-9_-]{1,12}",
                "[ -!#-\\[\\]-~é]{0,24}",
                proptest::option::of(any::<u64>()),
            ), 1..4),
        ) {
            #[derive(serde::Serialize)]
            struct Item<'a> {
                limit: &'a str,
                key: &'a str,
                #[serde(skip_serializing_if = "Option::is_none")]
                cost: Option<u64>,
            }
            let list: Vec<Item<'_>> = items
                .iter()
                .map(|(limit, key, cost)| Item { limit, key, cost: *cost })
                .collect();
            #[derive(serde::Serialize)]
            struct Top<'a> {
                requests: Vec<Item<'a>>,
            }
            let body = serde_json::to_string(&Top { requests: list }).unwrap();
            let read = compact(&body);
            prop_assert!(read.is_some(), "{}", body);
            let want: Vec<_> = items
                .into_iter()
                .map(|(l, k, c)| (l, k, c.unwrap_or(1)))
                .collect();
            prop_assert_eq!(owned(&read.unwrap()), want);
        }

        /// Every well-formed one-item body of plain strings and an integer
        /// cost is read by the scanner (the fast path is the usual one).
        #[test]
        fn plain_bodies_take_the_scanner(
            limit in "[a-z0-9_-]{1,12}",
            key in "[ -!#-\\[\\]-~é]{0,24}",
            cost in proptest::option::of(any::<u64>()),
        ) {
            let body = serde_json::json!({"requests": [match cost {
                Some(c) => serde_json::json!({"limit": limit, "key": key, "cost": c}),
                None => serde_json::json!({"limit": limit, "key": key}),
            }]})
            .to_string();
            let items = common(&body);
            prop_assert!(items.is_some(), "{}", body);
            prop_assert_eq!(owned(&items.unwrap()), vec![(limit, key, cost.unwrap_or(1))]);
        }
    }
}
