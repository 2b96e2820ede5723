//! Experiments: one scenario template run for several algorithms and seeds,
//! summarised the way the paper reports its figures.

use std::collections::BTreeMap;

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use serde::Serialize;

use crate::engine::{RunResult, run};
use crate::metrics::stddev;
use crate::scenario::{Scenario, ScenarioError};

/// The algorithms `drl sim <figure>` compares when `--algorithms` is not
/// given: `baseline` CTB, GTB, GRD, FPS; `fig3` and `fig4` the same; `fig5`
/// adds central random drop. The paper's algorithms only: `grd-smooth`
/// (ours) was in these lists until it was found to drift apart at five
/// limiters (each limiter integrates its own estimate of the global
/// forwarded rate; 9.40 Mbps and Jain 0.686), `tests/five_limiters.rs`.
pub fn default_algorithms(figure: &str) -> Vec<AlgorithmKind> {
    use AlgorithmKind::*;
    match figure {
        "fig5" => vec![Ctb, Crd, Gtb, Grd, Fps],
        _ => vec![Ctb, Gtb, Grd, Fps],
    }
}

/// A set of runs: every algorithm × `runs` seeds of one scenario template.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// The template (its `algorithm` and `seed` are overridden per run).
    pub base: Scenario,
    /// Algorithms to compare, in report order.
    pub algorithms: Vec<AlgorithmKind>,
    /// Runs per algorithm; run `k` uses seed `base.seed + k` (the same seeds
    /// for every algorithm).
    pub runs: u32,
    /// Timescales of the short-term rate histograms (Figure 4).
    pub timescales: Vec<Nanos>,
}

/// Progress of an experiment, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Runs finished.
    pub runs_done: u32,
    /// Runs in total.
    pub runs_total: u32,
    /// Fraction of the current run done.
    pub current: f64,
}

/// Results of all runs of one algorithm.
#[derive(Debug, Clone)]
pub struct AlgorithmRuns {
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// One result per run.
    pub runs: Vec<RunResult>,
}

/// Statistics of a short-term rate series at one timescale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimescaleStats {
    /// Timescale, ms.
    pub timescale_ms: u64,
    /// Mean of the aggregate rate samples, Mbps.
    pub mean_mbps: f64,
    /// Standard deviation of the samples, Mbps.
    pub stddev_mbps: f64,
    /// Fraction of samples more than 10 % above the limit.
    pub frac_over_110pct: f64,
}

/// The summary of one algorithm (means over `t >= warmup`, averaged over
/// runs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlgorithmSummary {
    /// Mean aggregate forwarding rate, Mbps.
    pub aggregate_mbps: f64,
    /// Mean forwarding rate per limiter, Mbps.
    pub limiter_mbps: Vec<f64>,
    /// Share of the aggregate per limiter.
    pub limiter_share: Vec<f64>,
    /// Mean Jain's index over per-flow goodput.
    pub jain: f64,
    /// Jain's index of each run.
    pub jain_runs: Vec<f64>,
    /// Aggregate rate of each run, Mbps.
    pub aggregate_runs_mbps: Vec<f64>,
    /// Mean per-flow goodput, Mbps, in flow order.
    pub flow_goodput_mbps: Vec<f64>,
    /// Short-term aggregate rate statistics (Figure 4).
    pub timescales: Vec<TimescaleStats>,
    /// Mean TCP timeouts per flow per run.
    pub timeouts_per_flow: f64,
    /// Mean fast recoveries per flow per run.
    pub fast_recoveries_per_flow: f64,
    /// Mean simulator events per run.
    pub events_per_run: f64,
}

/// Parameters echoed into the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryParameters {
    /// Flows per limiter.
    pub flows: Vec<u32>,
    /// Global limit, Mbps.
    pub limit_mbps: f64,
    /// Bucket depth, bytes.
    pub depth_bytes: u64,
    /// Flow RTT, ms.
    pub flow_rtt_ms: f64,
    /// Inter-limiter RTT, ms.
    pub limiter_rtt_ms: f64,
    /// Estimate interval, ms.
    pub estimate_interval_ms: f64,
    /// 1-second EWMA parameter.
    pub ewma: f64,
    /// Gossip branching factor.
    pub branching: u32,
    /// Gossip loss probability.
    pub gossip_loss: f64,
    /// Duration, s.
    pub duration_s: f64,
    /// Warm-up excluded from means, s.
    pub warmup_s: f64,
    /// First seed.
    pub seed: u64,
    /// Runs per algorithm.
    pub runs: u32,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Per algorithm, by name.
    pub algorithms: BTreeMap<String, AlgorithmSummary>,
    /// The parameters used.
    pub parameters: SummaryParameters,
}

/// Everything an experiment produced.
#[derive(Debug, Clone)]
pub struct ExperimentResult {
    /// The experiment run.
    pub experiment: Experiment,
    /// Results per algorithm, in the experiment's order.
    pub algorithms: Vec<AlgorithmRuns>,
}

impl Experiment {
    /// Runs every algorithm × run; `progress` is told after every simulated
    /// second and every run.
    pub fn run(
        &self,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ExperimentResult, ScenarioError> {
        let total = self.algorithms.len() as u32 * self.runs;
        let mut done = 0;
        let mut out = Vec::new();
        for &algorithm in &self.algorithms {
            let mut runs = Vec::new();
            for k in 0..self.runs {
                let sc = Scenario {
                    algorithm,
                    seed: self.base.seed.wrapping_add(k as u64),
                    ..self.base.clone()
                };
                let r = run(&sc, &mut |f| {
                    progress(Progress {
                        runs_done: done,
                        runs_total: total,
                        current: f,
                    })
                })?;
                runs.push(r);
                done += 1;
                progress(Progress {
                    runs_done: done,
                    runs_total: total,
                    current: 0.0,
                });
            }
            out.push(AlgorithmRuns { algorithm, runs });
        }
        Ok(ExperimentResult {
            experiment: self.clone(),
            algorithms: out,
        })
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Rounds for stable, readable JSON (6 significant decimals).
fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl AlgorithmRuns {
    /// The summary of these runs.
    pub fn summary(&self, timescales: &[Nanos]) -> AlgorithmSummary {
        let n = self.runs.len().max(1) as f64;
        let nl = self.runs.first().map_or(0, |r| r.forwarded.len());
        let mut limiter = vec![0.0; nl];
        for r in &self.runs {
            for (acc, x) in limiter.iter_mut().zip(r.limiter_mbps()) {
                *acc += x / n;
            }
        }
        let agg_runs: Vec<f64> = self.runs.iter().map(|r| r.aggregate_mbps()).collect();
        let jain_runs: Vec<f64> = self.runs.iter().map(|r| r.jain()).collect();
        let nf = self.runs.first().map_or(0, |r| r.flows.len());
        let mut flows = vec![0.0; nf];
        for r in &self.runs {
            for (acc, x) in flows.iter_mut().zip(r.flow_goodput_mbps()) {
                *acc += x / n;
            }
        }
        let limit = self
            .runs
            .first()
            .map_or(1.0, |r| r.scenario.limit_bps as f64 / 1e6);
        let ts = timescales
            .iter()
            .map(|&t| {
                let samples: Vec<f64> = self
                    .runs
                    .iter()
                    .flat_map(|r| r.aggregate_series(t))
                    .collect();
                let over = samples.iter().filter(|&&x| x > 1.1 * limit).count();
                TimescaleStats {
                    timescale_ms: t / 1_000_000,
                    mean_mbps: r6(mean(&samples)),
                    stddev_mbps: r6(stddev(&samples)),
                    frac_over_110pct: r6(over as f64 / samples.len().max(1) as f64),
                }
            })
            .collect();
        let flow_runs = (nf.max(1) as f64) * n;
        let timeouts: u64 = self
            .runs
            .iter()
            .flat_map(|r| r.flows.iter().map(|f| f.tcp.timeouts))
            .sum();
        let frs: u64 = self
            .runs
            .iter()
            .flat_map(|r| r.flows.iter().map(|f| f.tcp.fast_recoveries))
            .sum();
        let agg = mean(&agg_runs);
        AlgorithmSummary {
            aggregate_mbps: r6(agg),
            limiter_share: limiter
                .iter()
                .map(|x| {
                    r6(if agg > 0.0 {
                        x / limiter.iter().sum::<f64>()
                    } else {
                        0.0
                    })
                })
                .collect(),
            limiter_mbps: limiter.iter().map(|&x| r6(x)).collect(),
            jain: r6(mean(&jain_runs)),
            jain_runs: jain_runs.iter().map(|&x| r6(x)).collect(),
            aggregate_runs_mbps: agg_runs.iter().map(|&x| r6(x)).collect(),
            flow_goodput_mbps: flows.iter().map(|&x| r6(x)).collect(),
            timescales: ts,
            timeouts_per_flow: r6(timeouts as f64 / flow_runs),
            fast_recoveries_per_flow: r6(frs as f64 / flow_runs),
            events_per_run: r6(self.runs.iter().map(|r| r.events as f64).sum::<f64>() / n),
        }
    }
}

impl ExperimentResult {
    /// The `summary.json` contents.
    pub fn summary(&self) -> Summary {
        let b = &self.experiment.base;
        Summary {
            algorithms: self
                .algorithms
                .iter()
                .map(|a| {
                    (
                        a.algorithm.name().to_string(),
                        a.summary(&self.experiment.timescales),
                    )
                })
                .collect(),
            parameters: SummaryParameters {
                flows: b.flows_per_limiter.clone(),
                limit_mbps: b.limit_bps as f64 / 1e6,
                depth_bytes: b.depth_bytes,
                flow_rtt_ms: b.flow_rtt as f64 / 1e6,
                limiter_rtt_ms: b.limiter_rtt as f64 / 1e6,
                estimate_interval_ms: b.estimate_interval as f64 / 1e6,
                ewma: b.ewma,
                branching: b.branching,
                gossip_loss: b.gossip_loss,
                duration_s: b.duration as f64 / 1e9,
                warmup_s: b.warmup as f64 / 1e9,
                seed: b.seed,
                runs: self.experiment.runs,
            },
        }
    }
}
