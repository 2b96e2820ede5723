//! Figure 9 (paper §5.7): a cloud service at 10 sites limited to 5 Mbps in
//! total, 100 ms estimate interval, gossip branching 4 with 0.47 % of the
//! gossip lost. Every site first serves 3 transfers at once; every 30 s the
//! demand moves to 4 sites (the same 30 transfers, 8, 8, 7 and 7) and then
//! back to all 10. A static 1/N limiter cannot lend the idle sites' share
//! to the busy ones; FPS can.
//!
//! The sites are PlanetLab nodes across North America in the paper: we
//! give the flows of site k a round-trip time of 20 + 8·k ms (20-92 ms)
//! and the limiters a 60 ms round trip between them. Demand is modelled as
//! long-lived transfers started and stopped at the phase boundaries (the
//! paper's clients fetched Web objects with wget).

use std::collections::BTreeMap;

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use serde::Serialize;

use super::common::{
    FigureOptions, FigurePlan, FigureSummary, Variant, VariantRuns, mean, r6, rate_mbps, standard,
    windows,
};
use crate::scenario::{FlowSpec, MS, SEC, Scenario};

/// Sites (limiters).
pub const SITES: u32 = 10;
/// Sites that carry the demand in the concentrated phases.
pub const BUSY: u32 = 4;
/// Length of a phase.
pub const PHASE: Nanos = 30 * SEC;
/// Concurrent transfers per site when the demand is spread.
pub const PER_SITE: u32 = 3;
/// The global limit, bits per second.
pub const LIMIT_BPS: u64 = 5_000_000;

/// Transfers at `site` in phase `p` (even phases: spread; odd: on the
/// first [`BUSY`] sites).
pub fn demand(site: u32, p: u64) -> u32 {
    if p % 2 == 0 {
        PER_SITE
    } else if site < BUSY {
        let total = SITES * PER_SITE;
        total / BUSY + u32::from(site < total % BUSY)
    } else {
        0
    }
}

/// The flows of a run of `duration`: per site and phase, that phase's
/// transfers, each living for the phase.
pub fn flows(duration: Nanos) -> Vec<FlowSpec> {
    let mut out = Vec::new();
    let phases = duration.div_ceil(PHASE);
    for p in 0..phases {
        let from = p * PHASE;
        let until = ((p + 1) * PHASE).min(duration);
        for site in 0..SITES {
            for _ in 0..demand(site, p) {
                let mut f = FlowSpec::bulk(site, from, (until < duration).then_some(until));
                f.rtt = Some((20 + 8 * site as u64) * MS);
                out.push(f);
            }
        }
    }
    out
}

/// The runs: static 1/N and FPS, one run of 120 s (four phases).
pub fn plan(o: &FigureOptions) -> FigurePlan {
    let variants = [AlgorithmKind::Static, AlgorithmKind::Fps]
        .into_iter()
        .map(|a| {
            let mut sc = Scenario::paper_baseline(a);
            sc.flows_per_limiter = vec![0; SITES as usize];
            sc.limit_bps = LIMIT_BPS;
            sc.estimate_interval = 100 * MS;
            sc.branching = 4;
            sc.gossip_loss = 0.0047;
            sc.limiter_rtt = 60 * MS;
            sc.duration = o.duration.unwrap_or(4 * PHASE);
            sc.flow_specs = flows(sc.duration);
            sc.warmup = 0;
            sc.aggregation = o.aggregation;
            sc.grd_draws = o.grd_draws;
            sc.seed = o.seed;
            Variant {
                label: a.name().to_string(),
                scenario: sc,
            }
        })
        .collect();
    FigurePlan {
        name: "fig9",
        variants,
        runs: o.runs.unwrap_or(1),
    }
}

/// One phase of one variant (means over runs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// Start, s.
    pub from_s: f64,
    /// Sites with demand.
    pub busy_sites: u32,
    /// Aggregate over the phase without its first 5 s, Mbps.
    pub aggregate_mbps: f64,
    /// Fraction of the limit delivered.
    pub of_limit: f64,
}

/// One variant's behaviour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Service {
    /// Per phase.
    pub phases: Vec<Phase>,
    /// Fraction of 1 s windows (from 1 s on) above 110 % of the limit.
    pub windows_over_110pct: f64,
    /// Highest 1 s aggregate, Mbps.
    pub max_1s_mbps: f64,
}

/// Figure 9's measurements by variant.
pub fn results(runs: &[VariantRuns]) -> BTreeMap<String, Service> {
    runs.iter()
        .map(|v| {
            let Some(first) = v.runs.first() else {
                return (
                    v.label.clone(),
                    Service {
                        phases: Vec::new(),
                        windows_over_110pct: 0.0,
                        max_1s_mbps: 0.0,
                    },
                );
            };
            let d = first.scenario.duration;
            let limit = first.scenario.limit_bps as f64 / 1e6;
            let phases = (0..d.div_ceil(PHASE))
                .map(|p| {
                    let from = p * PHASE;
                    let to = ((p + 1) * PHASE).min(d);
                    let xs: Vec<f64> = v
                        .runs
                        .iter()
                        .map(|r| rate_mbps(r, &[], (from + 5 * SEC).min(to), to))
                        .collect();
                    let agg = mean(&xs);
                    Phase {
                        from_s: from as f64 / 1e9,
                        busy_sites: (0..SITES).filter(|&s| demand(s, p) > 0).count() as u32,
                        aggregate_mbps: r6(agg),
                        of_limit: r6(agg / limit),
                    }
                })
                .collect();
            let w: Vec<f64> = v
                .runs
                .iter()
                .flat_map(|r| {
                    windows(r, SEC)
                        .into_iter()
                        .filter(|x| x.0 > SEC)
                        .map(|x| x.2)
                })
                .collect();
            let over = w.iter().filter(|&&x| x > 1.1 * limit).count();
            (
                v.label.clone(),
                Service {
                    phases,
                    windows_over_110pct: r6(over as f64 / w.len().max(1) as f64),
                    max_1s_mbps: r6(w.iter().copied().fold(0.0, f64::max)),
                },
            )
        })
        .collect()
}

/// `summary.json` of Figure 9.
pub fn summary(
    plan: &FigurePlan,
    runs: &[VariantRuns],
) -> FigureSummary<BTreeMap<String, Service>> {
    FigureSummary {
        figure: "fig9",
        runs: plan.runs,
        seed: plan.variants.first().map_or(1, |v| v.scenario.seed),
        results: results(runs),
        variants: standard(runs),
    }
}

/// One line per variant and phase for the terminal.
pub fn report(runs: &[VariantRuns]) -> Vec<String> {
    let mut out = Vec::new();
    for (label, s) in results(runs) {
        let phases: Vec<String> = s
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{}s/{} sites: {:.2}",
                    p.from_s, p.busy_sites, p.aggregate_mbps
                )
            })
            .collect();
        out.push(format!(
            "{label:<7} {}  (1 s windows > 110 %: {:.1} %, max {:.2})",
            phases.join(", "),
            s.windows_over_110pct * 100.0,
            s.max_1s_mbps
        ));
    }
    out
}
