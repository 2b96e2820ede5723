//! [`ConfigError`]: a configuration error and the place it was found
//! (file, line, column). One type for every crate that reads a YAML file:
//! `drl serve`'s config (drl-service, drl-server), drl-client's in-process
//! backend and `drl relay`, so every one of them prints
//! `file:line:column: message`.

use std::fmt;

/// A configuration error, with the place it was found when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or the name given for a text: `<embedded>`, `<text>`).
    pub source_name: String,
    /// One-based line, when known.
    pub line: Option<usize>,
    /// One-based column, when known (only with a line).
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.source_name, self.message),
            (Some(l), None) => write!(f, "{}:{l}: {}", self.source_name, self.message),
            _ => write!(f, "{}: {}", self.source_name, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error without a position.
    pub fn new(source_name: &str, message: impl Into<String>) -> Self {
        Self {
            source_name: source_name.to_string(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// An error at one-based `line`, `column`.
    pub fn at(source_name: &str, line: usize, column: usize, message: impl Into<String>) -> Self {
        Self {
            source_name: source_name.to_string(),
            line: Some(line),
            column: Some(column),
            message: message.into(),
        }
    }

    /// An error a YAML parser reported: its `message` loses the
    /// " at line L column C" suffix parsers append (the position is printed
    /// once, in front), `location` is its one-based (line, column).
    pub fn from_parser(
        source_name: &str,
        message: impl Into<String>,
        location: Option<(usize, usize)>,
    ) -> Self {
        let mut message = message.into();
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        match location {
            Some((line, column)) => Self::at(source_name, line, column, message),
            None => Self::new(source_name, message),
        }
    }

    /// Places an error found after parsing (a cross-field check, a value a
    /// custom deserializer refused) at the first line of `text` that
    /// contains every one of `needles`, the column of the first needle: a
    /// best effort. An error that already has a line keeps it.
    pub fn locate(self, text: &str, needles: &[&str]) -> Self {
        self.locate_nth(text, needles, 0)
    }

    /// Like [`ConfigError::locate`], but at the `nth` (zero-based) such
    /// line (the second of two duplicate names, say); at the first if
    /// there are not that many.
    pub fn locate_nth(mut self, text: &str, needles: &[&str], nth: usize) -> Self {
        if self.line.is_some() {
            return self;
        }
        let mut matching = text
            .lines()
            .enumerate()
            .filter(|(_, l)| needles.iter().all(|n| l.contains(n)));
        let found = matching.clone().nth(nth).or_else(|| matching.next());
        if let Some((i, l)) = found {
            let col = needles.first().and_then(|n| l.find(n)).map_or(1, |c| c + 1);
            self.line = Some(i + 1);
            self.column = Some(col);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn display_has_the_place_in_front() {
        assert_eq!(
            ConfigError::at("a.yaml", 3, 7, "bad").to_string(),
            "a.yaml:3:7: bad"
        );
        let mut e = ConfigError::new("a.yaml", "bad");
        assert_eq!(e.to_string(), "a.yaml: bad");
        e.line = Some(4);
        assert_eq!(e.to_string(), "a.yaml:4: bad");
    }

    #[test]
    fn parser_suffix_is_dropped_and_the_position_kept() {
        let e = ConfigError::from_parser(
            "f.yaml",
            "limits[0]: unknown field `x` at line 2 column 5",
            Some((2, 5)),
        );
        assert_eq!(e.to_string(), "f.yaml:2:5: limits[0]: unknown field `x`");
        let e = ConfigError::from_parser("f.yaml", "EOF while parsing", None);
        assert_eq!(e.to_string(), "f.yaml: EOF while parsing");
    }

    #[test]
    fn locate_finds_the_first_line_with_every_needle() {
        let text = "limits:\n  - name: a\n    quota: 5/s\n  - name: a\n";
        let e = ConfigError::new("f", "duplicate").locate(text, &["name:", "a"]);
        assert_eq!((e.line, e.column), (Some(2), Some(5)));
        // Not found: no position; already placed: unchanged.
        let e = ConfigError::new("f", "x").locate(text, &["nowhere"]);
        assert_eq!((e.line, e.column), (None, None));
        let e = ConfigError::at("f", 9, 1, "x").locate(text, &["name:"]);
        assert_eq!((e.line, e.column), (Some(9), Some(1)));
        // The second duplicate; past the last match, the first.
        let e = ConfigError::new("f", "duplicate").locate_nth(text, &["name:", "a"], 1);
        assert_eq!((e.line, e.column), (Some(4), Some(5)));
        let e = ConfigError::new("f", "duplicate").locate_nth(text, &["name:", "a"], 5);
        assert_eq!(e.line, Some(2));
    }

    proptest! {
        /// A located error points at a line that holds every needle, and
        /// no earlier line does.
        #[test]
        fn located_line_holds_the_needles(
            lines in proptest::collection::vec("[a-c: ]{0,8}", 0..12),
            needle in "[a-c]{1,2}",
        ) {
            let text = lines.join("\n");
            let e = ConfigError::new("f", "m").locate(&text, &[needle.as_str()]);
            match e.line {
                Some(l) => {
                    let line = text.lines().nth(l - 1).unwrap();
                    prop_assert_eq!(line.find(&needle).map(|c| c + 1), e.column);
                    prop_assert!(text.lines().take(l - 1).all(|x| !x.contains(&needle)));
                }
                None => prop_assert!(text.lines().all(|x| !x.contains(&needle))),
            }
        }
    }
}
