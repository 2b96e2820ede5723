//! limitador limits files (Kuadrant/limitador), read as they are.
//!
//! A limits file is a YAML list of limits, each with a `namespace` (the
//! Envoy RLS domain its requests name), `max_value` hits per `seconds`,
//! optional `name`, `conditions` (all must hold for the limit to apply)
//! and `variables` (one counter per distinct value; every variable must be
//! present for the limit to apply). drl reads both condition forms
//! limitador has used:
//!
//! * the current (CEL) form on the request's descriptors:
//!   `descriptors[0]['req.method'] == 'GET'`, `descriptors[1]["k"] != "v"`,
//!   `descriptors[0].k == 'v'`; variables `descriptors[0]['user_id']`;
//! * the older form on an entry key of any descriptor: `req.method ==
//!   "GET"`, `req_method != 'POST'`, and the oldest with an unquoted value
//!   (`KEY_A == VALUE_A`); variables `user_id`.
//!
//! Supported: `==` and `!=` between one descriptor entry and one string
//! literal (either side). Anything else (`&&`, `||`, `in`, functions,
//! comparisons, numbers, escapes, unquoted values after `descriptors[N]`)
//! is an error naming the line and column, never a limit that silently
//! allows. The decision rules are in `docs/limitador.md` and
//! [`crate::limitador`].

use std::path::PathBuf;

use serde::Deserialize;

use crate::{ConfigError, Scope};

/// Where a condition or variable reads a descriptor entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    /// `descriptors[index]['key']`: the entry `key` of the request's
    /// descriptor number `index` (absent if there is no such descriptor or
    /// entry).
    At {
        /// Descriptor position in the request (0-based).
        index: usize,
        /// Entry key.
        key: String,
    },
    /// The older form, a bare `key`: the entry `key` of any descriptor (the
    /// last one wins when several carry it, as limitador merged them).
    Any {
        /// Entry key.
        key: String,
    },
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

/// One condition: `selector op 'value'`. A condition on an absent entry
/// does not hold (whatever the operator), as in limitador.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition {
    /// The entry compared.
    pub selector: Selector,
    /// The operator.
    pub op: Op,
    /// The literal compared with.
    pub value: String,
}

/// One limit of a limits file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitadorLimit {
    /// The namespace (the RLS domain).
    pub namespace: String,
    /// The limit's name in drl (metrics, state): `NAMESPACE:NAME` when the
    /// file names it, else `NAMESPACE:#N` with `N` its 1-based position in
    /// the file.
    pub name: String,
    /// Hits allowed per window (0: every request that matches is over).
    pub max_value: u64,
    /// The window, seconds (a fixed window, as limitador's counters).
    pub seconds: u64,
    /// All must hold for the limit to apply.
    pub conditions: Vec<Condition>,
    /// One counter per distinct tuple of their values; all must be present.
    pub variables: Vec<Selector>,
}

/// The `limitador:` section of drl's native config: a limitador limits
/// file, loaded with the config (and re-read on every reload).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitadorSource {
    /// The limits file, unchanged (relative paths are relative to the
    /// working directory).
    pub file: PathBuf,
    /// Where the counters live (default `local`; `redis`, `gossip` and
    /// `orbit` need their section, as for native limits).
    #[serde(default)]
    pub scope: Scope,
    /// The limits read from `file` (filled when the config is parsed).
    #[serde(skip)]
    pub limits: Vec<LimitadorLimit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    namespace: String,
    max_value: i64,
    seconds: i64,
    #[serde(default)]
    name: Option<String>,
    // Newer limitador versions carry an identifier; drl does not need it.
    #[serde(default, rename = "id")]
    _id: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<String>>,
    #[serde(default)]
    variables: Option<Vec<String>>,
}

/// True when `text` looks like a limitador limits file: a top-level YAML
/// list whose first item is a mapping with a `namespace`.
pub fn looks_like(text: &str) -> bool {
    match serde_norway::from_str::<serde_norway::Value>(text) {
        Ok(serde_norway::Value::Sequence(items)) => items
            .first()
            .is_some_and(|i| i.as_mapping().is_some_and(|m| m.contains_key("namespace"))),
        _ => false,
    }
}

/// Parses a limitador limits file. `source` names it in errors, which
/// carry the line and column.
pub fn parse(text: &str, source: &str) -> Result<Vec<LimitadorLimit>, ConfigError> {
    let raw: Vec<RawLimit> =
        serde_norway::from_str(text).map_err(|e| crate::yaml::yaml_error(source, &e))?;
    let mut out = Vec::with_capacity(raw.len());
    // How often each condition/variable text was seen before: errors go to
    // the nth line holding it.
    let mut seen: Vec<String> = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in raw.into_iter().enumerate() {
        let at_limit = |msg: String| {
            ConfigError::new(source, format!("limit {}: {msg}", i + 1)).locate_nth(
                text,
                &["namespace:", &r.namespace],
                nth_namespace(&out, &r.namespace),
            )
        };
        if r.namespace.trim().is_empty() {
            return Err(at_limit("namespace must not be empty".into()));
        }
        let max_value = u64::try_from(r.max_value)
            .map_err(|_| at_limit(format!("max_value {} must not be negative", r.max_value)))?;
        if r.seconds <= 0 {
            return Err(at_limit(format!(
                "seconds {} must be at least 1 (the window of the counter)",
                r.seconds
            )));
        }
        let name = match r.name.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => format!("{}:{n}", r.namespace),
            _ => format!("{}:#{}", r.namespace, i + 1),
        };
        if !names.insert(name.clone()) {
            return Err(at_limit(format!(
                "two limits of namespace {:?} are named {:?}",
                r.namespace,
                r.name.unwrap_or_default()
            )));
        }
        let mut conditions = Vec::new();
        for c in r.conditions.unwrap_or_default() {
            let nth = seen.iter().filter(|s| **s == c).count();
            seen.push(c.clone());
            conditions.push(parse_condition(&c).map_err(|e| e.place(source, text, &c, nth))?);
        }
        let mut variables = Vec::new();
        for v in r.variables.unwrap_or_default() {
            let nth = seen.iter().filter(|s| **s == v).count();
            seen.push(v.clone());
            variables.push(parse_variable(&v).map_err(|e| e.place(source, text, &v, nth))?);
        }
        out.push(LimitadorLimit {
            namespace: r.namespace,
            name,
            max_value,
            seconds: r.seconds as u64,
            conditions,
            variables,
        });
    }
    Ok(out)
}

fn nth_namespace(before: &[LimitadorLimit], ns: &str) -> usize {
    before.iter().filter(|l| l.namespace == ns).count()
}

/// An error inside one condition or variable string, at byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Byte offset in the expression.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl ExprError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        Self {
            offset,
            message: message.into(),
        }
    }

    /// Places the error at the `nth` line of `text` holding `expr`.
    fn place(self, source: &str, text: &str, expr: &str, nth: usize) -> ConfigError {
        let msg = format!("{:?}: {}", expr, self.message);
        let mut seen = 0;
        for (i, line) in text.lines().enumerate() {
            if let Some(col) = line.find(expr) {
                if seen == nth {
                    return ConfigError::at(source, i + 1, col + 1 + self.offset, msg);
                }
                seen += 1;
            }
        }
        // Written with YAML escapes: the line is the best we can say.
        ConfigError::new(source, msg).locate(text, &[expr.split('\'').next().unwrap_or(expr)])
    }
}

const SUPPORTED: &str = "drl reads `==` and `!=` between one descriptor entry (descriptors[N]['key'], descriptors[N].key, or a bare key) and one quoted string (unquoted only after a bare key)";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Str(String),
    Int(usize),
    LBracket,
    RBracket,
    Dot,
    Eq,
    Ne,
}

fn tokenize(s: &str) -> Result<Vec<(usize, Tok)>, ExprError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' => i += 1,
            b'[' => {
                out.push((start, Tok::LBracket));
                i += 1;
            }
            b']' => {
                out.push((start, Tok::RBracket));
                i += 1;
            }
            b'.' => {
                out.push((start, Tok::Dot));
                i += 1;
            }
            b'=' if b.get(i + 1) == Some(&b'=') => {
                out.push((start, Tok::Eq));
                i += 2;
            }
            b'!' if b.get(i + 1) == Some(&b'=') => {
                out.push((start, Tok::Ne));
                i += 2;
            }
            b'\'' | b'"' => {
                let end = s[i + 1..]
                    .find(c as char)
                    .ok_or_else(|| ExprError::new(start, "unterminated string literal"))?;
                let lit = &s[i + 1..i + 1 + end];
                if let Some(k) = lit.find('\\') {
                    return Err(ExprError::new(
                        i + 1 + k,
                        "escape sequences in string literals are not supported",
                    ));
                }
                out.push((start, Tok::Str(lit.to_string())));
                i += end + 2;
            }
            b'0'..=b'9' => {
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let n = s[start..i]
                    .parse()
                    .map_err(|_| ExprError::new(start, "index too large"))?;
                out.push((start, Tok::Int(n)));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-')
                {
                    i += 1;
                }
                out.push((start, Tok::Ident(s[start..i].to_string())));
            }
            _ => {
                let what = match c {
                    b'&' | b'|' => {
                        "`&&` and `||` are not supported: write one condition per list item (all must hold); `||` has no equivalent"
                    }
                    b'<' | b'>' => "ordering comparisons are not supported",
                    b'(' | b')' => "function calls and parentheses are not supported",
                    b'!' => "negation is not supported (use !=)",
                    b'=' => "a single `=` is not an operator (use ==)",
                    _ => "unexpected character",
                };
                let ch = s[start..].chars().next().unwrap_or('?');
                return Err(ExprError::new(
                    start,
                    format!("{what} (at {ch:?}); {SUPPORTED}"),
                ));
            }
        }
    }
    Ok(out)
}

/// Parses one operand that must be an entry selector, from `toks`.
fn selector(toks: &[(usize, Tok)]) -> Result<Selector, ExprError> {
    let Some((p0, first)) = toks.first() else {
        return Err(ExprError::new(0, format!("missing operand; {SUPPORTED}")));
    };
    match first {
        Tok::Ident(id) if id == "descriptors" => {
            // descriptors [ N ] ( [ 'key' ] | . key )
            let index = match toks.get(1..4) {
                Some([(_, Tok::LBracket), (_, Tok::Int(n)), (_, Tok::RBracket)]) => *n,
                _ => {
                    return Err(ExprError::new(
                        *p0,
                        format!("expected descriptors[N] with a literal index N; {SUPPORTED}"),
                    ));
                }
            };
            let rest = &toks[4..];
            let key = match rest {
                [(_, Tok::LBracket), (_, Tok::Str(k)), (_, Tok::RBracket)] => k.clone(),
                [(_, Tok::Dot), (_, Tok::Ident(k))] => k.clone(),
                [] => {
                    return Err(ExprError::new(
                        *p0,
                        format!("descriptors[{index}] needs an entry: descriptors[{index}]['key']"),
                    ));
                }
                [(p, _), ..] => {
                    return Err(ExprError::new(
                        *p,
                        format!("expected ['key'] or .key after descriptors[{index}]; {SUPPORTED}"),
                    ));
                }
            };
            if key.is_empty() {
                return Err(ExprError::new(*p0, "an entry key must not be empty"));
            }
            Ok(Selector::At { index, key })
        }
        Tok::Ident(_) => {
            // The older form: a bare key, possibly dotted (req.method).
            let mut key = String::new();
            let mut want_ident = true;
            for (p, t) in toks {
                match (t, want_ident) {
                    (Tok::Ident(s), true) => key.push_str(s),
                    (Tok::Int(n), true) if !key.is_empty() => key.push_str(&n.to_string()),
                    (Tok::Dot, false) => key.push('.'),
                    _ => {
                        return Err(ExprError::new(
                            *p,
                            format!("unexpected token in an entry key; {SUPPORTED}"),
                        ));
                    }
                }
                want_ident = !want_ident;
            }
            if want_ident {
                return Err(ExprError::new(*p0, "an entry key must not end with a dot"));
            }
            Ok(Selector::Any { key })
        }
        Tok::Str(_) => Err(ExprError::new(
            *p0,
            "a string literal is not a descriptor entry",
        )),
        _ => Err(ExprError::new(
            *p0,
            format!("expected a descriptor entry; {SUPPORTED}"),
        )),
    }
}

/// Parses a condition string.
pub fn parse_condition(s: &str) -> Result<Condition, ExprError> {
    if let Some(c) = unquoted_older_form(s) {
        return Ok(c);
    }
    let toks = tokenize(s)?;
    let ops: Vec<usize> = toks
        .iter()
        .enumerate()
        .filter(|(_, (_, t))| matches!(t, Tok::Eq | Tok::Ne))
        .map(|(i, _)| i)
        .collect();
    let i = match ops.as_slice() {
        [i] => *i,
        [] => {
            if let Some((p, _)) = toks.iter().find(|(_, t)| *t == Tok::Ident("in".into())) {
                return Err(ExprError::new(
                    *p,
                    format!("the `in` operator is not supported; {SUPPORTED}"),
                ));
            }
            return Err(ExprError::new(
                0,
                format!("a condition needs `==` or `!=`; {SUPPORTED}"),
            ));
        }
        [_, j, ..] => {
            return Err(ExprError::new(
                toks[*j].0,
                format!("one comparison per condition; {SUPPORTED}"),
            ));
        }
    };
    let op = if toks[i].1 == Tok::Eq { Op::Eq } else { Op::Ne };
    let (left, right) = (&toks[..i], &toks[i + 1..]);
    let literal = |side: &[(usize, Tok)], at: usize| -> Result<Option<String>, ExprError> {
        match side {
            [(_, Tok::Str(v))] => Ok(Some(v.clone())),
            [(p, Tok::Int(_))] => Err(ExprError::new(
                *p,
                "numbers are not supported: descriptor values are strings, quote it",
            )),
            [] => Err(ExprError::new(at, format!("missing operand; {SUPPORTED}"))),
            _ => Ok(None),
        }
    };
    let op_at = toks[i].0;
    match (literal(left, 0)?, literal(right, op_at + 2)?) {
        (None, Some(value)) => Ok(Condition {
            selector: selector(left)?,
            op,
            value,
        }),
        (Some(value), None) => Ok(Condition {
            selector: selector(right)?,
            op,
            value,
        }),
        (Some(_), Some(_)) => Err(ExprError::new(
            0,
            format!("compares two literals; {SUPPORTED}"),
        )),
        (None, None) => {
            // Both sides look like entries: the deprecated unquoted value
            // (`req.method == GET`), or two entries compared.
            let p = right.first().map_or(op_at, |t| t.0);
            Err(ExprError::new(
                p,
                format!(
                    "the right-hand side must be a quoted string (only the older bare-key form takes an unquoted value); {SUPPORTED}"
                ),
            ))
        }
    }
}

/// The oldest form, with an unquoted value (`KEY_A == VALUE_A`,
/// `req.path != /json`, as limitador's early documentation wrote it): a
/// bare entry key, one `==` or `!=`, and a value without quotes, spaces or
/// operator characters. `None` when `s` is not of that shape (the
/// tokenizer then reads it, or says what is wrong).
fn unquoted_older_form(s: &str) -> Option<Condition> {
    if s.contains(['\'', '"']) {
        return None;
    }
    let (i, op) = match (s.find("=="), s.find("!=")) {
        (Some(i), None) => (i, Op::Eq),
        (None, Some(i)) => (i, Op::Ne),
        _ => return None,
    };
    let (left, right) = (s[..i].trim(), s[i + 2..].trim());
    if left.starts_with("descriptors")
        || right.is_empty()
        || right.contains(|c: char| c.is_whitespace() || "&|()<>=!,[]".contains(c))
    {
        return None;
    }
    match selector(&tokenize(left).ok()?) {
        Ok(selector @ Selector::Any { .. }) => Some(Condition {
            selector,
            op,
            value: right.to_string(),
        }),
        _ => None,
    }
}

/// Parses a variable string.
pub fn parse_variable(s: &str) -> Result<Selector, ExprError> {
    let toks = tokenize(s)?;
    if let Some((p, _)) = toks.iter().find(|(_, t)| matches!(t, Tok::Eq | Tok::Ne)) {
        return Err(ExprError::new(
            *p,
            "a variable is a descriptor entry, not a comparison (put comparisons under conditions)",
        ));
    }
    selector(&toks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(index: usize, key: &str) -> Selector {
        Selector::At {
            index,
            key: key.into(),
        }
    }

    #[test]
    fn both_forms_parse() {
        let c = parse_condition("descriptors[0]['req.method'] == 'GET'").unwrap();
        assert_eq!(
            c,
            Condition {
                selector: at(0, "req.method"),
                op: Op::Eq,
                value: "GET".into()
            }
        );
        let c = parse_condition("descriptors[2][\"k\"] != \"v w\"").unwrap();
        assert_eq!(
            (c.selector, c.op, c.value.as_str()),
            (at(2, "k"), Op::Ne, "v w")
        );
        let c = parse_condition("descriptors[1].x == '1'").unwrap();
        assert_eq!(c.selector, at(1, "x"));
        let c = parse_condition("'POST' == descriptors[0]['m']").unwrap();
        assert_eq!((c.selector, c.value.as_str()), (at(0, "m"), "POST"));
        let c = parse_condition("req.method == \"GET\"").unwrap();
        assert_eq!(
            c.selector,
            Selector::Any {
                key: "req.method".into()
            }
        );
        // The oldest form: an unquoted value.
        let c = parse_condition("KEY_A == VALUE_A").unwrap();
        assert_eq!(
            (c.selector, c.op, c.value.as_str()),
            (
                Selector::Any {
                    key: "KEY_A".into()
                },
                Op::Eq,
                "VALUE_A"
            )
        );
        let c = parse_condition(" req.path != /json ").unwrap();
        assert_eq!((c.op, c.value.as_str()), (Op::Ne, "/json"));
        let c = parse_condition("req_method != 'POST'").unwrap();
        assert_eq!((c.op, c.value.as_str()), (Op::Ne, "POST"));
        assert_eq!(
            parse_variable("descriptors[0]['user_id']").unwrap(),
            at(0, "user_id")
        );
        assert_eq!(
            parse_variable("user_id").unwrap(),
            Selector::Any {
                key: "user_id".into()
            }
        );
    }

    #[test]
    fn unsupported_is_an_error_at_the_token() {
        for (expr, col, needle) in [
            (
                "descriptors[0]['a'] == 'x' && descriptors[0]['b'] == 'y'",
                27,
                "&&",
            ),
            (
                "descriptors[0]['a'] == 'x' || descriptors[0]['b'] == 'y'",
                27,
                "||",
            ),
            ("descriptors[0]['a'].startsWith('x')", 30, "function"),
            ("size(descriptors) > 1", 4, "function"),
            ("descriptors[0]['a'] in ['x']", 20, "`in`"),
            ("descriptors[0]['n'] > '3'", 20, "ordering"),
            ("descriptors[0]['n'] == 3", 23, "numbers"),
            ("descriptors[0]['m'] == GET", 23, "quoted string"),
            ("req.method == GET && x == y", 18, "&&"),
            ("descriptors[0]['a'] == 'x\\n'", 25, "escape"),
            ("descriptors[i]['a'] == 'x'", 0, "literal index"),
            ("'a' == 'b'", 0, "two literals"),
            ("descriptors[0]['a']", 0, "needs `==`"),
        ] {
            let e = parse_condition(expr).unwrap_err();
            assert_eq!(e.offset, col, "{expr}: {e:?}");
            assert!(e.message.contains(needle), "{expr}: {}", e.message);
        }
        assert!(parse_variable("descriptors[0]['a'] == 'x'").is_err());
        assert!(parse_variable("'lit'").is_err());
    }

    #[test]
    fn file_errors_name_line_and_column() {
        let text = "---\n- namespace: ns\n  max_value: 5\n  seconds: 60\n  conditions:\n    - \"descriptors[0]['a'] == 'x'\"\n    - \"descriptors[0]['b'] == 'y' && descriptors[0]['c'] == 'z'\"\n  variables: []\n";
        let e = parse(text, "limits.yaml").unwrap_err();
        assert_eq!((e.line, e.column), (Some(7), Some(35)), "{e}");
        assert!(e.to_string().starts_with("limits.yaml:7:35: "), "{e}");
        let text = "- namespace: ns\n  max_value: -1\n  seconds: 60\n";
        let e = parse(text, "f").unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
        assert!(e.message.contains("negative"), "{e}");
        let text = "- namespace: ns\n  max_value: 1\n  seconds: 60\n  condition: []\n";
        let e = parse(text, "f").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let text = "- namespace: ns\n  max_value: 1\n  seconds: 0\n";
        assert!(parse(text, "f").unwrap_err().message.contains("seconds"));
    }

    #[test]
    fn names_and_empty_lists() {
        let text = "- namespace: a\n  max_value: 1\n  seconds: 60\n  conditions:\n  variables:\n- namespace: a\n  name: per-user\n  max_value: 0\n  seconds: 1\n  conditions: []\n  variables: [user]\n";
        assert!(looks_like(text));
        let l = parse(text, "f").unwrap();
        assert_eq!(l[0].name, "a:#1");
        assert_eq!(l[1].name, "a:per-user");
        assert_eq!(l[1].max_value, 0);
        assert!(l[0].conditions.is_empty() && l[0].variables.is_empty());
        assert!(!looks_like("limits: []\n"));
        assert!(!looks_like("domain: x\n"));
    }

    proptest! {
        #[test]
        fn any_text_parses_or_errors_within_it(s in "[ -~]{0,60}") {
            match parse_condition(&s) {
                Ok(_) => {}
                Err(e) => prop_assert!(e.offset <= s.len()),
            }
            let _ = parse_variable(&s);
        }

        #[test]
        fn written_conditions_read_back(
            index in 0usize..4,
            key in "[a-z][a-z0-9_.]{0,12}[a-z0-9]",
            value in "[ -&(-\\[\\]-~]{0,12}",
            ne in any::<bool>(),
        ) {
            let op = if ne { "!=" } else { "==" };
            let c = parse_condition(&format!("descriptors[{index}]['{key}'] {op} '{value}'")).unwrap();
            prop_assert_eq!(c.selector, Selector::At { index, key: key.clone() });
            prop_assert_eq!(c.op, if ne { Op::Ne } else { Op::Eq });
            prop_assert_eq!(c.value, value);
        }
    }
}
