//! The Prometheus text exposition format (version 0.0.4), written by hand
//! where a scrape must not lock or allocate per series: `drl serve`'s hot
//! decision counters, latency histograms and key tables, and `drl relay`'s
//! counters. Everything else `drl serve` records goes through the `metrics`
//! crate and its exporter, whose text is appended after these families.
//!
//! One writer, so that escaping is done once and right: label values escape
//! `\`, `"` and line feeds; help text escapes `\` and line feeds; floats
//! print `+Inf`, `-Inf` and `NaN` as the format spells them.
//!
//! ```
//! use drl_http::prometheus::{Exposition, Kind};
//! let mut e = Exposition::new();
//! e.family("drl_decisions_total", Kind::Counter, "Decisions per limit.");
//! e.sample("drl_decisions_total", &[("limit", "a\"b"), ("result", "allowed")], 3u64);
//! let page = e.finish();
//! assert!(page.ends_with("drl_decisions_total{limit=\"a\\\"b\",result=\"allowed\"} 3\n"));
//! ```

use std::fmt::Write as _;

/// A metric family's type, as its `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever goes up (reset at restart).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative `_bucket{le=...}` series with `_sum` and `_count`.
    Histogram,
}

impl Kind {
    /// The name the `# TYPE` line uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value.
pub trait Value {
    /// Appends the value as the format spells it.
    fn write_to(&self, out: &mut String);
}

impl Value for u64 {
    fn write_to(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

impl Value for usize {
    fn write_to(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
}

impl Value for f64 {
    fn write_to(&self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// A page of the text format being written: families, each a `# HELP` and
/// `# TYPE` line, then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Self::with_capacity(4096)
    }

    /// An empty page with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            out: String::with_capacity(bytes),
        }
    }

    /// Starts family `name`: its `# HELP` and `# TYPE` lines. Write each
    /// family once, and its samples right after it.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        escape(&mut self.out, help, false);
        self.out.push_str("\n# TYPE ");
        self.out.push_str(name);
        self.out.push(' ');
        self.out.push_str(kind.as_str());
        self.out.push('\n');
    }

    /// One sample of series `name` (a family's name, or a histogram's
    /// `_bucket`, `_sum` or `_count`) with `labels` in the order given.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Value) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape(&mut self.out, v, true);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(&mut self.out);
        self.out.push('\n');
    }

    /// Appends text already in the format (another writer's families).
    pub fn push_page(&mut self, page: &str) {
        self.out.push_str(page);
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Appends `v` escaped: `\` and line feed always, `"` in label values.
fn escape(out: &mut String, v: &str, label: bool) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped_as_the_format_says() {
        let mut e = Exposition::new();
        e.family("m", Kind::Gauge, "a \\ b\nc \"q\"");
        e.sample("m", &[("k", "x\\y\n\"z\"")], 1u64);
        assert_eq!(
            e.finish(),
            "# HELP m a \\\\ b\\nc \"q\"\n# TYPE m gauge\nm{k=\"x\\\\y\\n\\\"z\\\"\"} 1\n"
        );
    }

    #[test]
    fn floats_spell_infinities_and_nan_as_the_format_does() {
        let mut e = Exposition::new();
        for v in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.25, 1e-7] {
            e.sample("m", &[], v);
        }
        assert_eq!(e.finish(), "m +Inf\nm -Inf\nm NaN\nm 0.25\nm 0.0000001\n");
    }
}
