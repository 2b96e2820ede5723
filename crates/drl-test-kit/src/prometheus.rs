//! `/metrics` pages read by the parser of Prometheus's own Python client
//! (`prometheus_client.parser`, Debian's `python3-prometheus-client`,
//! installed by `scripts/test`), as a scraper reads them: a test judges
//! drl's text by an implementation of the format that is not drl's. A
//! missing parser fails the test with an install hint; it never skips.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// Debian's interpreter, which the package installs the parser for (a
/// `python3` earlier on `PATH`, such as a pyenv shim, may not see it).
pub const PYTHON: &str = "/usr/bin/python3";

const READER: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "help": f.documentation,
                "samples": [[s.name, s.labels, repr(s.value)] for s in f.samples]})
print(json.dumps(out))
"#;

/// One metric family as the parser read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The family name (a counter's without `_total`, as the parser gives it).
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `untyped` ...
    pub kind: String,
    /// The help text, unescaped.
    pub help: String,
    /// Its samples, in page order.
    pub samples: Vec<Sample>,
}

/// One sample as the parser read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name (`_total`, `_bucket` ... included).
    pub name: String,
    /// Its labels, unescaped.
    pub labels: BTreeMap<String, String>,
    /// Python's `repr` of the value the parser read (a float: `4.0`,
    /// `inf`, `nan`, `1e-07`).
    pub repr: String,
}

impl Sample {
    /// The value as an `f64`.
    pub fn value(&self) -> f64 {
        self.repr.parse().expect("a float")
    }
}

/// The families of `page`; panics if the parser refuses the page.
pub fn parse(page: &str) -> Vec<Family> {
    let mut child = Command::new(PYTHON)
        .args(["-c", READER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{PYTHON} must run (apt-get install python3-prometheus-client): {e}")
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = child.wait_with_output().expect("the parser ran");
    assert!(
        out.status.success(),
        "the Prometheus parser refused the page (apt-get install python3-prometheus-client if it is missing): {}\n{page}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|f| Family {
            name: f["name"].as_str().expect("name").to_owned(),
            kind: f["type"].as_str().expect("type").to_owned(),
            help: f["help"].as_str().expect("help").to_owned(),
            samples: f["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .map(|s| Sample {
                    name: s[0].as_str().expect("name").to_owned(),
                    labels: s[1]
                        .as_object()
                        .expect("labels")
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().expect("str").to_owned()))
                        .collect(),
                    repr: s[2].as_str().expect("value").to_owned(),
                })
                .collect(),
        })
        .collect()
}

/// The value of series `name` whose labels include every pair of `labels`,
/// from parsed `families`.
pub fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .flat_map(|f| &f.samples)
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(Sample::value)
}
