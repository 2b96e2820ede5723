//! The text drl's Prometheus writer produces, read back by the parser of
//! Prometheus's own Python client (drl-test-kit's `prometheus::parse`), as a
//! scraper would: every family, help text, label and value comes back as
//! written.

use drl_http::prometheus::{Exposition, Kind};
use drl_test_kit::prometheus::parse;
use proptest::prelude::*;

/// Python's `repr` of the float the parser reads for `n`.
fn py_float(n: u64) -> String {
    format!("{:.1}", n as f64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn families_labels_and_values_read_back_as_written(
        // Help text as written is trimmed by the format (one space after
        // the name, the rest of the line): ours never starts or ends in one.
        help in "[!-~]([ -~\n]{0,22}[!-~])?",
        rows in prop::collection::vec(("[ -~\n]{0,12}", 0u64..1 << 53), 1..6),
    ) {
        let mut e = Exposition::new();
        e.family("drl_t_total", Kind::Counter, &help);
        for (i, (label, n)) in rows.iter().enumerate() {
            e.sample("drl_t_total", &[("limit", label), ("i", &i.to_string())], *n);
        }
        let fams = parse(&e.finish());
        prop_assert_eq!(fams.len(), 1);
        prop_assert_eq!(fams[0].name.as_str(), "drl_t");
        prop_assert_eq!(fams[0].kind.as_str(), "counter");
        prop_assert_eq!(&fams[0].help, &help);
        prop_assert_eq!(fams[0].samples.len(), rows.len());
        for (i, (s, (label, n))) in fams[0].samples.iter().zip(&rows).enumerate() {
            prop_assert_eq!(s.name.as_str(), "drl_t_total");
            prop_assert_eq!(s.labels.len(), 2);
            prop_assert_eq!(s.labels.get("limit"), Some(label));
            prop_assert_eq!(s.labels.get("i"), Some(&i.to_string()));
            prop_assert_eq!(&s.repr, &py_float(*n));
        }
    }
}

#[test]
fn gauges_spell_infinities_and_nan_so_the_parser_reads_them() {
    let mut e = Exposition::new();
    e.family("drl_g", Kind::Gauge, "A gauge.");
    for (i, v) in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.25, 1e-7]
        .into_iter()
        .enumerate()
    {
        e.sample("drl_g", &[("i", &i.to_string())], v);
    }
    let fams = parse(&e.finish());
    let values: Vec<&str> = fams[0].samples.iter().map(|s| s.repr.as_str()).collect();
    assert_eq!(values, ["inf", "-inf", "nan", "0.25", "1e-07"]);
}

#[test]
fn a_histogram_reads_back_with_its_buckets_sum_and_count() {
    let mut e = Exposition::new();
    e.family("drl_d_seconds", Kind::Histogram, "Time to decide.");
    for (le, n) in [("0.001", 2u64), ("0.01", 5), ("+Inf", 6)] {
        e.sample("drl_d_seconds_bucket", &[("api", "x"), ("le", le)], n);
    }
    e.sample("drl_d_seconds_sum", &[("api", "x")], 0.5f64);
    e.sample("drl_d_seconds_count", &[("api", "x")], 6u64);
    let fams = parse(&e.finish());
    assert_eq!(fams.len(), 1);
    assert_eq!(fams[0].kind, "histogram");
    let got: Vec<(&str, &str)> = fams[0]
        .samples
        .iter()
        .map(|s| (s.name.as_str(), s.repr.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("drl_d_seconds_bucket", "2.0"),
            ("drl_d_seconds_bucket", "5.0"),
            ("drl_d_seconds_bucket", "6.0"),
            ("drl_d_seconds_sum", "0.5"),
            ("drl_d_seconds_count", "6.0"),
        ]
    );
}
