//! Figure 7 (paper §5.4): bottlenecked flows. The baseline (3 flows at
//! limiter 1, 7 at limiter 2, 10 Mbps) until 15 s, when a 2 Mbps link with
//! a drop-tail queue appears upstream of limiter 2's 7 flows; at 31 s one
//! unbottlenecked flow joins limiter 2. In one pipe the 4 unbottlenecked
//! flows would share the 8 Mbps the bottleneck leaves, so limiter 2
//! should get 2 + 2 = 4 Mbps, 40 % of the limit; the paper's FPS gets there
//! by 39 s.

use std::collections::BTreeMap;

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use serde::Serialize;

use super::common::{
    FigureOptions, FigurePlan, FigureSummary, Variant, VariantRuns, mean, r6, rate_mbps, standard,
    windows,
};
use crate::scenario::{FlowSpec, SEC, Scenario, Upstream};

/// When the upstream bottleneck appears.
pub const BOTTLENECK_AT: Nanos = 15 * SEC;
/// When the unbottlenecked flow joins limiter 2.
pub const JOIN_AT: Nanos = 31 * SEC;
/// Capacity of the upstream link, bits per second.
pub const BOTTLENECK_BPS: u64 = 2_000_000;
/// Its drop-tail queue, packets (about 120 ms at 2 Mbps; the paper does
/// not give ModelNet's queue length).
pub const QUEUE_PACKETS: u32 = 20;
/// Limiter 2's target share after the join.
pub const TARGET_SHARE: f64 = 0.4;

/// The runs: FPS (the paper's figure), with CTB and GRD beside it; one
/// run of 60 s.
pub fn plan(o: &FigureOptions) -> FigurePlan {
    let variants = [AlgorithmKind::Ctb, AlgorithmKind::Grd, AlgorithmKind::Fps]
        .into_iter()
        .map(|a| {
            let mut sc = Scenario::paper_baseline(a);
            sc.upstream = Some(Upstream {
                bps: BOTTLENECK_BPS,
                queue_packets: QUEUE_PACKETS,
                from: BOTTLENECK_AT,
                limiters: vec![1],
            });
            sc.flow_specs = vec![FlowSpec::bulk(1, JOIN_AT, None)];
            sc.duration = o.duration.unwrap_or(60 * SEC);
            sc.warmup = 5 * SEC;
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
        name: "fig7",
        variants,
        runs: o.runs.unwrap_or(1),
    }
}

/// One variant's behaviour, averaged over runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bottleneck {
    /// Limiter 1 / limiter 2 / aggregate, Mbps, before the bottleneck
    /// (5-15 s).
    pub before_mbps: [f64; 3],
    /// The same with the bottleneck, before the join (20-31 s).
    pub bottlenecked_mbps: [f64; 3],
    /// The same after the join, from 8 s after it to the end.
    pub after_join_mbps: [f64; 3],
    /// Limiter 2's share of the aggregate from 8 s after the join.
    pub limiter2_share_after: f64,
    /// Seconds from the join until limiter 2's share over a 2 s window
    /// first reaches 90 % of 40 % (`None`: never, in some run).
    pub time_to_target_s: Option<f64>,
    /// Packets the upstream queue dropped, per run.
    pub upstream_drops: f64,
}

/// Figure 7's measurements by variant.
pub fn results(runs: &[VariantRuns]) -> BTreeMap<String, Bottleneck> {
    runs.iter()
        .map(|v| {
            let trio = |from: Nanos, to: Nanos| -> [f64; 3] {
                let xs: Vec<[f64; 3]> = v
                    .runs
                    .iter()
                    .map(|r| {
                        let to = to.min(r.scenario.duration);
                        [
                            rate_mbps(r, &[0], from, to),
                            rate_mbps(r, &[1], from, to),
                            rate_mbps(r, &[], from, to),
                        ]
                    })
                    .collect();
                std::array::from_fn(|i| r6(mean(&xs.iter().map(|x| x[i]).collect::<Vec<_>>())))
            };
            let after = trio(JOIN_AT + 8 * SEC, Nanos::MAX);
            let mut times = Vec::new();
            for r in &v.runs {
                let w = windows(r, 2 * SEC);
                let t = w
                    .iter()
                    .filter(|x| x.0 >= JOIN_AT + 2 * SEC)
                    .find(|x| x.2 > 0.0 && x.1[1] / x.2 >= 0.9 * TARGET_SHARE)
                    .map(|x| (x.0 - JOIN_AT) as f64 / 1e9);
                times.push(t);
            }
            let drops: Vec<f64> = v.runs.iter().map(|r| r.upstream_drops as f64).collect();
            (
                v.label.clone(),
                Bottleneck {
                    before_mbps: trio(5 * SEC, BOTTLENECK_AT),
                    bottlenecked_mbps: trio(20 * SEC, JOIN_AT),
                    after_join_mbps: after,
                    limiter2_share_after: r6(if after[2] > 0.0 {
                        after[1] / after[2]
                    } else {
                        0.0
                    }),
                    time_to_target_s: times
                        .iter()
                        .copied()
                        .collect::<Option<Vec<f64>>>()
                        .map(|t| r6(mean(&t))),
                    upstream_drops: mean(&drops),
                },
            )
        })
        .collect()
}

/// `summary.json` of Figure 7.
pub fn summary(
    plan: &FigurePlan,
    runs: &[VariantRuns],
) -> FigureSummary<BTreeMap<String, Bottleneck>> {
    FigureSummary {
        figure: "fig7",
        runs: plan.runs,
        seed: plan.variants.first().map_or(1, |v| v.scenario.seed),
        results: results(runs),
        variants: standard(runs),
    }
}

/// One line per variant for the terminal.
pub fn report(runs: &[VariantRuns]) -> Vec<String> {
    let mut out = vec![format!(
        "{:<6} {:>18} {:>18} {:>18} {:>9} {:>10}",
        "", "5-15 s (l1/l2)", "20-31 s (l1/l2)", "39 s- (l1/l2)", "l2 share", "to 40% s"
    )];
    for (label, b) in results(runs) {
        let p = |x: [f64; 3]| format!("{:.2} / {:.2}", x[0], x[1]);
        out.push(format!(
            "{label:<6} {:>18} {:>18} {:>18} {:>9.3} {:>10}",
            p(b.before_mbps),
            p(b.bottlenecked_mbps),
            p(b.after_join_mbps),
            b.limiter2_share_after,
            b.time_to_target_s
                .map_or("never".to_string(), |t| format!("{t:.1}"))
        ));
    }
    out
}
