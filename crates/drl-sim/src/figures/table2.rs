//! Table 2 (paper §5.5): mixed round-trip times. Two limiters share
//! 10 Mbps; the 3 flows at limiter 1 have a 100 ms RTT, the 7 at limiter 2
//! a 10 ms RTT. TCP favours short RTTs at a shared bottleneck; FPS, which
//! splits by flow count, gives the long-RTT flows more than CTB does.

use drl_cluster::alloc::AlgorithmKind;
use serde::Serialize;

use super::common::FigureSummary;
use super::common::{FigureOptions, FigurePlan, Variant, VariantRuns, mean, r6, standard};
use crate::metrics::stddev;
use crate::scenario::{MS, Scenario};

/// The paper's numbers (Mbps): aggregate, short-RTT mean and stddev,
/// long-RTT mean and stddev, for CTB, GRD and FPS.
pub const PAPER: [(&str, [f64; 5]); 3] = [
    ("ctb", [10.57, 1.41, 0.16, 0.10, 0.01]),
    ("grd", [10.63, 1.35, 0.71, 0.16, 0.03]),
    ("fps", [10.43, 0.92, 0.15, 0.57, 0.05]),
];

/// The runs: CTB, GRD and FPS on the mixed-RTT baseline, 10 runs of 60 s.
pub fn plan(o: &FigureOptions) -> FigurePlan {
    let variants = [AlgorithmKind::Ctb, AlgorithmKind::Grd, AlgorithmKind::Fps]
        .into_iter()
        .map(|a| {
            let mut sc = Scenario::paper_baseline(a);
            sc.limiter_flow_rtts = vec![100 * MS, 10 * MS];
            sc.aggregation = o.aggregation;
            sc.grd_draws = o.grd_draws;
            sc.seed = o.seed;
            if let Some(d) = o.duration {
                sc.duration = d;
                sc.warmup = sc.warmup.min(d / 2);
            }
            Variant {
                label: a.name().to_string(),
                scenario: sc,
            }
        })
        .collect();
    FigurePlan {
        name: "table2",
        variants,
        runs: o.runs.unwrap_or(10),
    }
}

/// One column of Table 2.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// Mean aggregate forwarding rate, Mbps.
    pub aggregate_mbps: f64,
    /// Mean goodput of a short-RTT (10 ms) flow, Mbps.
    pub short_rtt_mbps: f64,
    /// Standard deviation over the short-RTT flows of all runs.
    pub short_rtt_stddev: f64,
    /// Mean goodput of a long-RTT (100 ms) flow, Mbps.
    pub long_rtt_mbps: f64,
    /// Standard deviation over the long-RTT flows of all runs.
    pub long_rtt_stddev: f64,
    /// The paper's `[aggregate, short, short stddev, long, long stddev]`.
    pub paper: Option<[f64; 5]>,
}

/// Table 2 from the runs, by variant label.
pub fn results(runs: &[VariantRuns]) -> std::collections::BTreeMap<String, Column> {
    runs.iter()
        .map(|v| {
            let (mut short, mut long) = (Vec::new(), Vec::new());
            for r in &v.runs {
                for (f, g) in r.flows.iter().zip(r.flow_goodput_mbps()) {
                    if f.rtt >= 50 * MS {
                        long.push(g);
                    } else {
                        short.push(g);
                    }
                }
            }
            let agg: Vec<f64> = v.runs.iter().map(|r| r.aggregate_mbps()).collect();
            let paper = PAPER.iter().find(|p| p.0 == v.label).map(|p| p.1);
            (
                v.label.clone(),
                Column {
                    aggregate_mbps: r6(mean(&agg)),
                    short_rtt_mbps: r6(mean(&short)),
                    short_rtt_stddev: r6(stddev(&short)),
                    long_rtt_mbps: r6(mean(&long)),
                    long_rtt_stddev: r6(stddev(&long)),
                    paper,
                },
            )
        })
        .collect()
}

/// `summary.json` of Table 2.
pub fn summary(
    plan: &FigurePlan,
    runs: &[VariantRuns],
) -> FigureSummary<std::collections::BTreeMap<String, Column>> {
    FigureSummary {
        figure: "table2",
        runs: plan.runs,
        seed: plan.variants.first().map_or(1, |v| v.scenario.seed),
        results: results(runs),
        variants: standard(runs),
    }
}

/// One line per column for the terminal.
pub fn report(runs: &[VariantRuns]) -> Vec<String> {
    let mut out = vec![format!(
        "{:<8} {:>10} {:>16} {:>16}   paper (agg / short / long)",
        "", "aggregate", "short 10 ms", "long 100 ms"
    )];
    for (label, c) in results(runs) {
        let paper = c.paper.map_or(String::new(), |p| {
            format!("{:.2} / {:.2} / {:.2}", p[0], p[1], p[3])
        });
        out.push(format!(
            "{label:<8} {:>10.2} {:>9.2} ± {:<4.2} {:>9.2} ± {:<4.2}   {paper}",
            c.aggregate_mbps,
            c.short_rtt_mbps,
            c.short_rtt_stddev,
            c.long_rtt_mbps,
            c.long_rtt_stddev
        ));
    }
    out
}
