//! Figure 6 (paper §5.2): flow dynamics. Five limiters share 10 Mbps;
//! one long-lived flow joins at an unused limiter every 10 s (limiter k
//! at 10·k s), then they leave one by one in the same order (from 50 s,
//! every 10 s; the last stays), so every limiter carries one flow at a
//! time and its rate is that flow's. Variants: CTB, GRD with 500 ms and
//! 50 ms estimate intervals, FPS with 500 ms.
//!
//! The paper: GRD at 500 ms fails to track CTB; at 50 ms it does (and is
//! fairer); FPS at 500 ms varies least.

use std::collections::BTreeMap;

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use serde::Serialize;

use super::common::{
    FigureOptions, FigurePlan, FigureSummary, Variant, VariantRuns, mean, r6, rate_mbps, standard,
    windows,
};
use crate::metrics::{jain, stddev};
use crate::scenario::{FlowSpec, MS, SEC, Scenario};

/// Limiters (one flow each at most).
pub const LIMITERS: u32 = 5;
/// Time between two joins (and two departures).
pub const STEP: Nanos = 10 * SEC;

/// When the flow of limiter `k` joins and leaves (`None`: stays).
pub fn schedule(k: u32) -> (Nanos, Option<Nanos>) {
    let join = k as u64 * STEP;
    let leave = (k + 1 < LIMITERS).then(|| (LIMITERS as u64 + k as u64) * STEP);
    (join, leave)
}

/// The runs: CTB, GRD at 500 and 50 ms, FPS at 500 ms; 1 run of 90 s.
pub fn plan(o: &FigureOptions) -> FigurePlan {
    let variants = [
        ("ctb", AlgorithmKind::Ctb, 50 * MS),
        ("grd-500ms", AlgorithmKind::Grd, 500 * MS),
        ("grd-50ms", AlgorithmKind::Grd, 50 * MS),
        ("fps-500ms", AlgorithmKind::Fps, 500 * MS),
    ]
    .into_iter()
    .map(|(label, a, interval)| {
        let mut sc = Scenario::paper_baseline(a);
        sc.flows_per_limiter = vec![0; LIMITERS as usize];
        sc.flow_specs = (0..LIMITERS)
            .map(|k| {
                let (join, leave) = schedule(k);
                FlowSpec::bulk(k, join, leave)
            })
            .collect();
        sc.estimate_interval = interval;
        sc.duration = o.duration.unwrap_or((2 * LIMITERS as u64 - 1) * STEP);
        sc.warmup = 0;
        sc.aggregation = o.aggregation;
        sc.grd_draws = o.grd_draws;
        sc.seed = o.seed;
        Variant {
            label: label.to_string(),
            scenario: sc,
        }
    })
    .collect();
    FigurePlan {
        name: "fig6",
        variants,
        runs: o.runs.unwrap_or(1),
    }
}

/// One variant's behaviour, averaged over runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dynamics {
    /// Mean aggregate forwarding rate over the run, Mbps.
    pub aggregate_mbps: f64,
    /// Standard deviation of the aggregate over 500 ms windows from 1 s
    /// on, Mbps (how steady the limit is held).
    pub aggregate_stddev_500ms: f64,
    /// Mean over the 10 s epochs of the standard deviation of each active
    /// flow's 500 ms rate in the epoch's second half, Mbps (how steady
    /// each flow is once settled).
    pub flow_stddev_500ms: f64,
    /// Jain's index over the active flows' rates in the second half of
    /// each epoch with two or more flows, averaged over epochs.
    pub epoch_jain: f64,
    /// Per epoch: `[start s, active flows, Jain]`, first run.
    pub epochs: Vec<[f64; 3]>,
    /// Mean time from a join until the new flow's 500 ms rate first
    /// reaches 80 % of its fair share (limit / active flows), s; joins it
    /// never reached count as the rest of the epoch.
    pub join_convergence_s: f64,
}

/// The epochs: `[start, end)` and the limiters active in each.
pub fn epochs(duration: Nanos) -> Vec<(Nanos, Nanos, Vec<usize>)> {
    let mut out = Vec::new();
    let mut t = 0;
    while t < duration {
        let end = (t + STEP).min(duration);
        let active: Vec<usize> = (0..LIMITERS)
            .filter(|&k| {
                let (j, l) = schedule(k);
                j <= t && l.is_none_or(|l| l >= end)
            })
            .map(|k| k as usize)
            .collect();
        out.push((t, end, active));
        t = end;
    }
    out
}

/// Figure 6's measurements by variant.
pub fn results(runs: &[VariantRuns]) -> BTreeMap<String, Dynamics> {
    runs.iter()
        .map(|v| {
            let (mut agg, mut agg_sd, mut flow_sd, mut jains, mut conv) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut first_epochs = Vec::new();
            for (k, r) in v.runs.iter().enumerate() {
                let d = r.scenario.duration;
                agg.push(rate_mbps(r, &[], 0, d));
                let w = windows(r, 500 * MS);
                let a: Vec<f64> = w.iter().filter(|x| x.0 > SEC).map(|x| x.2).collect();
                agg_sd.push(stddev(&a));
                let limit = r.scenario.limit_bps as f64 / 1e6;
                for (from, to, active) in epochs(d) {
                    let mid = from + (to - from) / 2;
                    let rates: Vec<f64> = active
                        .iter()
                        .map(|&l| rate_mbps(r, &[l], mid, to))
                        .collect();
                    for &l in &active {
                        let xs: Vec<f64> = w
                            .iter()
                            .filter(|x| x.0 > mid && x.0 <= to)
                            .map(|x| x.1[l])
                            .collect();
                        flow_sd.push(stddev(&xs));
                    }
                    let j = jain(&rates);
                    if active.len() >= 2 {
                        jains.push(j);
                    }
                    if k == 0 {
                        first_epochs.push([r6(from as f64 / 1e9), active.len() as f64, r6(j)]);
                    }
                    // A join at `from`: the flow of limiter from / STEP.
                    let joiner = (from / STEP) as usize;
                    if from > 0 && joiner < LIMITERS as usize && active.contains(&joiner) {
                        let fair = limit / active.len() as f64;
                        let reached = w
                            .iter()
                            .filter(|x| x.0 > from && x.0 <= to)
                            .find(|x| x.1[joiner] >= 0.8 * fair)
                            .map_or(to, |x| x.0);
                        conv.push((reached - from) as f64 / 1e9);
                    }
                }
            }
            (
                v.label.clone(),
                Dynamics {
                    aggregate_mbps: r6(mean(&agg)),
                    aggregate_stddev_500ms: r6(mean(&agg_sd)),
                    flow_stddev_500ms: r6(mean(&flow_sd)),
                    epoch_jain: r6(mean(&jains)),
                    epochs: first_epochs,
                    join_convergence_s: r6(mean(&conv)),
                },
            )
        })
        .collect()
}

/// `summary.json` of Figure 6.
pub fn summary(
    plan: &FigurePlan,
    runs: &[VariantRuns],
) -> FigureSummary<BTreeMap<String, Dynamics>> {
    FigureSummary {
        figure: "fig6",
        runs: plan.runs,
        seed: plan.variants.first().map_or(1, |v| v.scenario.seed),
        results: results(runs),
        variants: standard(runs),
    }
}

/// One line per variant for the terminal.
pub fn report(runs: &[VariantRuns]) -> Vec<String> {
    let mut out = vec![format!(
        "{:<10} {:>9} {:>12} {:>12} {:>10} {:>12}",
        "", "aggregate", "agg sd 500ms", "flow sd 500ms", "epoch jain", "join conv s"
    )];
    for (label, d) in results(runs) {
        out.push(format!(
            "{label:<10} {:>9.3} {:>12.3} {:>12.3} {:>10.3} {:>12.2}",
            d.aggregate_mbps,
            d.aggregate_stddev_500ms,
            d.flow_stddev_500ms,
            d.epoch_jain,
            d.join_convergence_s
        ));
    }
    out
}
