//! Table 1 (paper §5.3): bulk flows against Web flows. Two limiters share
//! 10 Mbps; 10 long-lived flows enter limiter 1, Web requests limiter 2:
//! a Poisson process of 15 requests per second, each a TCP connection
//! (handshake whose SYN-ACK crosses the limiter, 3 s SYN timeout) that
//! fetches one object. Object sizes are heavy-tailed ([`SizeDist::WEB`]:
//! lognormal body, Pareto tail, mean ≈ 16.5 KB): the paper's CAIDA-derived
//! distribution is not published, so the fit is chosen to offer what the
//! paper's Web flows received (≈ 2 Mbps at 15 requests per second).
//!
//! Reported as in the paper: bulk and Web goodput (Kbps, mean and stddev
//! over runs), the harmonic mean of the delivered rate of Web objects per
//! size bin, and Jain's index over the 10 bulk flows.

use std::collections::BTreeMap;

use drl_cluster::alloc::AlgorithmKind;
use serde::Serialize;

use super::common::{
    FigureOptions, FigurePlan, FigureSummary, Variant, VariantRuns, harmonic_mean, mean, r6,
    standard,
};
use crate::metrics::{jain, stddev};
use crate::scenario::{SEC, Scenario, SizeDist, WebWorkload};

/// Object size bins, bytes: `[lo, hi)`.
pub const BINS: [(u64, u64); 4] = [
    (0, 5_000),
    (5_000, 50_000),
    (50_000, 500_000),
    (500_000, u64::MAX),
];

/// Web requests per second.
pub const WEB_PER_SECOND: f64 = 15.0;

/// The paper's Table 1, Kbps (fairness unitless): bulk goodput mean and
/// stddev, Web goodput mean and stddev, h-mean per bin, bulk fairness.
pub const PAPER: [(&str, [f64; 9]); 3] = [
    (
        "ctb",
        [
            6900.90, 125.45, 1796.06, 104.32, 28.17, 276.18, 472.09, 695.40, 0.971,
        ],
    ),
    (
        "grd",
        [
            7257.87, 75.87, 1974.35, 93.90, 25.84, 342.96, 612.08, 751.98, 0.997,
        ],
    ),
    (
        "fps",
        [
            6989.76, 219.55, 2090.25, 57.98, 25.71, 335.80, 571.40, 765.26, 0.962,
        ],
    ),
];

/// The runs: CTB, GRD and FPS, 10 runs of 60 s; and GRD with the Web
/// flows' SYN-ACKs crossing the limiter unpoliced (`grd-syn-unpoliced`,
/// beside the paper's GRD column): GRD drops every packet with the same
/// probability, handshakes included, and a lost SYN-ACK costs a 3 s
/// timeout, which rules a harmonic mean of small objects' rates.
pub fn plan(o: &FigureOptions) -> FigurePlan {
    let variants = [
        (AlgorithmKind::Ctb, true),
        (AlgorithmKind::Grd, true),
        (AlgorithmKind::Fps, true),
        (AlgorithmKind::Grd, false),
    ]
    .into_iter()
    .map(|(a, police_handshake)| {
        let mut sc = Scenario::paper_baseline(a);
        sc.flows_per_limiter = vec![10, 0];
        sc.duration = o.duration.unwrap_or(60 * SEC);
        sc.warmup = (10 * SEC).min(sc.duration / 2);
        sc.web = vec![WebWorkload {
            limiter: 1,
            per_second: WEB_PER_SECOND,
            sizes: SizeDist::WEB,
            from: 0,
            until: sc.duration,
            police_handshake,
        }];
        sc.aggregation = o.aggregation;
        sc.grd_draws = o.grd_draws;
        sc.seed = o.seed;
        let label = if police_handshake {
            a.name().to_string()
        } else {
            format!("{}-syn-unpoliced", a.name())
        };
        Variant {
            label,
            scenario: sc,
        }
    })
    .collect();
    FigurePlan {
        name: "table1",
        variants,
        runs: o.runs.unwrap_or(10),
    }
}

/// One column of Table 1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// Goodput of the 10 bulk flows together, Kbps: mean over runs.
    pub bulk_goodput_kbps: f64,
    /// Its standard deviation over runs.
    pub bulk_goodput_stddev: f64,
    /// Goodput of all Web flows together, Kbps: mean over runs.
    pub web_goodput_kbps: f64,
    /// Its standard deviation over runs.
    pub web_goodput_stddev: f64,
    /// Harmonic mean of the delivered rate (size over request-to-last-byte
    /// time) of Web objects in each size bin, Kbps, over objects requested
    /// after the warm-up that finished.
    pub web_rate_hmean_kbps: [f64; 4],
    /// Objects behind each harmonic mean.
    pub web_objects: [u64; 4],
    /// Web objects requested after the warm-up that had not finished at
    /// the end of the run, per run.
    pub web_unfinished: f64,
    /// SYN retransmissions (handshakes that lost a SYN-ACK), per run.
    pub syn_retries: f64,
    /// Jain's index over the 10 bulk flows, mean over runs.
    pub bulk_fairness: f64,
    /// The paper's column (see [`PAPER`]).
    pub paper: Option<[f64; 9]>,
}

/// Table 1 from the runs, by variant label.
pub fn results(runs: &[VariantRuns]) -> BTreeMap<String, Column> {
    runs.iter()
        .map(|v| {
            let (mut bulk, mut web, mut fair) = (Vec::new(), Vec::new(), Vec::new());
            let mut rates: [Vec<f64>; 4] = Default::default();
            let (mut unfinished, mut syn) = (0u64, 0u64);
            for r in &v.runs {
                let g = r.flow_goodput_mbps();
                let b: Vec<f64> = r
                    .flows
                    .iter()
                    .zip(&g)
                    .filter(|(f, _)| f.size_bytes.is_none())
                    .map(|(_, &x)| x)
                    .collect();
                bulk.push(b.iter().sum::<f64>() * 1e3);
                fair.push(jain(&b));
                web.push(
                    r.flows
                        .iter()
                        .zip(&g)
                        .filter(|(f, _)| f.size_bytes.is_some())
                        .map(|(_, &x)| x)
                        .sum::<f64>()
                        * 1e3,
                );
                for f in r.flows.iter().filter(|f| f.size_bytes.is_some()) {
                    syn += f.syn_retries as u64;
                    if f.start < r.scenario.warmup {
                        continue;
                    }
                    let (Some(size), Some(bps)) = (f.size_bytes, f.completion_bps()) else {
                        unfinished += 1;
                        continue;
                    };
                    if let Some(k) = BINS.iter().position(|&(lo, hi)| size >= lo && size < hi) {
                        rates[k].push(bps / 1e3);
                    }
                }
            }
            let n = v.runs.len().max(1) as f64;
            // A variant of an algorithm is shown beside its paper column.
            let paper = PAPER
                .iter()
                .find(|p| v.label == p.0 || v.label.starts_with(&format!("{}-", p.0)))
                .map(|p| p.1);
            (
                v.label.clone(),
                Column {
                    bulk_goodput_kbps: r6(mean(&bulk)),
                    bulk_goodput_stddev: r6(stddev(&bulk)),
                    web_goodput_kbps: r6(mean(&web)),
                    web_goodput_stddev: r6(stddev(&web)),
                    web_rate_hmean_kbps: std::array::from_fn(|k| r6(harmonic_mean(&rates[k]))),
                    web_objects: std::array::from_fn(|k| rates[k].len() as u64),
                    web_unfinished: r6(unfinished as f64 / n),
                    syn_retries: r6(syn as f64 / n),
                    bulk_fairness: r6(mean(&fair)),
                    paper,
                },
            )
        })
        .collect()
}

/// `summary.json` of Table 1.
pub fn summary(plan: &FigurePlan, runs: &[VariantRuns]) -> FigureSummary<BTreeMap<String, Column>> {
    FigureSummary {
        figure: "table1",
        runs: plan.runs,
        seed: plan.variants.first().map_or(1, |v| v.scenario.seed),
        results: results(runs),
        variants: standard(runs),
    }
}

/// The table for the terminal, ours beside the paper's.
pub fn report(runs: &[VariantRuns]) -> Vec<String> {
    let res = results(runs);
    let mut out = vec![format!(
        "{:<28}{}",
        "",
        res.keys().map(|k| format!("{k:>22}")).collect::<String>()
    )];
    let row = |name: &str, f: &dyn Fn(&Column) -> (f64, f64)| {
        let cells: String = res
            .values()
            .map(|c| {
                let (ours, paper) = f(c);
                format!("{:>22}", format!("{ours:.2} ({paper:.2})"))
            })
            .collect();
        format!("{name:<28}{cells}")
    };
    let p = |c: &Column, i: usize| c.paper.map_or(f64::NAN, |p| p[i]);
    out.push(row("bulk goodput Kbps (paper)", &|c| {
        (c.bulk_goodput_kbps, p(c, 0))
    }));
    out.push(row("web goodput Kbps", &|c| (c.web_goodput_kbps, p(c, 2))));
    for (k, (lo, hi)) in BINS.iter().enumerate() {
        let name = if *hi == u64::MAX {
            format!("web h-mean [{lo}, inf)")
        } else {
            format!("web h-mean [{lo}, {hi})")
        };
        out.push(row(&name, &|c| (c.web_rate_hmean_kbps[k], p(c, 4 + k))));
    }
    out.push(row("bulk fairness", &|c| (c.bulk_fairness, p(c, 8))));
    out
}
