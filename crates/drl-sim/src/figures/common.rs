//! What every figure driver shares: variants of a scenario run over
//! seeds, per-window rate helpers, and the output files (`rates.csv`,
//! `flows.csv`, `limiters.csv`, `summary.json`, an SVG time series).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use drl_cluster::alloc::dither::GrdDraws;
use drl_cluster::cloud_control::Aggregation;
use drl_core::Nanos;
use serde::Serialize;

use crate::engine::{RunResult, run};
use crate::experiment::{AlgorithmRuns, AlgorithmSummary, Progress};
use crate::report::ReportError;
use crate::scenario::{MS, SEC, Scenario, ScenarioError};

/// Options every figure command takes.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureOptions {
    /// Seed of the first run (run `k` uses `seed + k`).
    pub seed: u64,
    /// Runs per variant (`None`: the figure's default).
    pub runs: Option<u32>,
    /// How the limiters aggregate each other's values.
    pub aggregation: Aggregation,
    /// How GRD draws its drops.
    pub grd_draws: GrdDraws,
    /// Simulated time per run (`None`: the figure's default).
    pub duration: Option<Nanos>,
}

impl Default for FigureOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            runs: None,
            aggregation: Aggregation::default(),
            grd_draws: GrdDraws::Independent,
            duration: None,
        }
    }
}

/// One curve of a figure: a label and the scenario it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// Label in reports (`grd-50ms`, `fps`, ...).
    pub label: String,
    /// The scenario (its seed is the first run's).
    pub scenario: Scenario,
}

/// A figure's runs: every variant × `runs` seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct FigurePlan {
    /// The figure's name (`fig6`, `table2`, ...), used for the SVG.
    pub name: &'static str,
    /// The variants, in report order.
    pub variants: Vec<Variant>,
    /// Runs per variant.
    pub runs: u32,
}

/// The results of one variant.
#[derive(Debug, Clone)]
pub struct VariantRuns {
    /// Its label.
    pub label: String,
    /// One result per run.
    pub runs: Vec<RunResult>,
}

impl FigurePlan {
    /// Runs every variant × run; `progress` as for
    /// [`crate::Experiment::run`].
    pub fn run(
        &self,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<VariantRuns>, ScenarioError> {
        let total = self.variants.len() as u32 * self.runs;
        let mut done = 0;
        let mut out = Vec::new();
        for v in &self.variants {
            let mut runs = Vec::new();
            for k in 0..self.runs {
                let sc = Scenario {
                    seed: v.scenario.seed.wrapping_add(k as u64),
                    ..v.scenario.clone()
                };
                runs.push(run(&sc, &mut |f| {
                    progress(Progress {
                        runs_done: done,
                        runs_total: total,
                        current: f,
                    })
                })?);
                done += 1;
                progress(Progress {
                    runs_done: done,
                    runs_total: total,
                    current: 0.0,
                });
            }
            out.push(VariantRuns {
                label: v.label.clone(),
                runs,
            });
        }
        Ok(out)
    }
}

/// Rounds for stable, readable JSON (6 decimals).
pub fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Mean of `xs` (0 for none).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Harmonic mean of the positive values of `xs` (0 for none).
pub fn harmonic_mean(xs: &[f64]) -> f64 {
    let pos: Vec<f64> = xs.iter().copied().filter(|&x| x > 0.0).collect();
    if pos.is_empty() {
        0.0
    } else {
        pos.len() as f64 / pos.iter().map(|x| 1.0 / x).sum::<f64>()
    }
}

/// Forwarding rate of `limiters` (summed; all limiters if empty), Mbps,
/// over `[from, until)`.
pub fn rate_mbps(r: &RunResult, limiters: &[usize], from: Nanos, until: Nanos) -> f64 {
    let bin = r.scenario.bin;
    let (b0, b1) = ((from / bin) as usize, (until / bin) as usize);
    let mut bytes = 0u64;
    for (l, bins) in r.forwarded.iter().enumerate() {
        if limiters.is_empty() || limiters.contains(&l) {
            let hi = b1.min(bins.len());
            bytes += bins[b0.min(hi)..hi].iter().sum::<u64>();
        }
    }
    let span = (b1.saturating_sub(b0) as u64) * bin;
    crate::metrics::bps(bytes, span) / 1e6
}

/// Forwarding rate of each limiter and the aggregate in consecutive
/// windows of `window` over the whole run: `(end time, per limiter,
/// aggregate)`, Mbps.
pub fn windows(r: &RunResult, window: Nanos) -> Vec<(Nanos, Vec<f64>, f64)> {
    let per = (window / r.scenario.bin).max(1) as usize;
    let nb = r.forwarded.first().map_or(0, Vec::len);
    let span = per as u64 * r.scenario.bin;
    let mut out = Vec::new();
    let mut b = 0;
    while b + per <= nb {
        let lim: Vec<f64> = r
            .forwarded
            .iter()
            .map(|bins| crate::metrics::bps(bins[b..b + per].iter().sum(), span) / 1e6)
            .collect();
        let agg = lim.iter().sum();
        out.push(((b + per) as u64 * r.scenario.bin, lim, agg));
        b += per;
    }
    out
}

/// The standard per-variant statistics (as in `drl sim fig3`'s
/// `summary.json`), keyed by label.
pub fn standard(results: &[VariantRuns]) -> BTreeMap<String, AlgorithmSummary> {
    results
        .iter()
        .filter_map(|v| {
            let algorithm = v.runs.first()?.scenario.algorithm;
            let a = AlgorithmRuns {
                algorithm,
                runs: v.runs.clone(),
            };
            Some((v.label.clone(), a.summary(&[SEC, 100 * MS])))
        })
        .collect()
}

/// `summary.json` of a figure: what it is, the standard statistics and
/// the figure's own results.
#[derive(Debug, Clone, Serialize)]
pub struct FigureSummary<T: Serialize> {
    /// The figure (`fig6`, ...).
    pub figure: &'static str,
    /// Runs per variant and the first seed.
    pub runs: u32,
    /// First seed.
    pub seed: u64,
    /// The figure's own measurements.
    pub results: T,
    /// Standard statistics per variant (means over `t >= warm-up`).
    pub variants: BTreeMap<String, AlgorithmSummary>,
}

fn write(
    dir: &Path,
    name: &str,
    contents: &str,
    out: &mut Vec<PathBuf>,
) -> Result<(), ReportError> {
    let p = dir.join(name);
    fs::write(&p, contents).map_err(|source| ReportError::Io {
        path: p.display().to_string(),
        source,
    })?;
    out.push(p);
    Ok(())
}

/// Per-limiter and aggregate rate per `series` window, every variant and run.
pub fn rates_csv(results: &[VariantRuns], series: Nanos) -> String {
    let nl = results
        .first()
        .and_then(|v| v.runs.first())
        .map_or(0, |r| r.forwarded.len());
    let mut s = String::from("variant,run,seed,time_s");
    for l in 0..nl {
        let _ = write!(s, ",limiter_{}_mbps", l + 1);
    }
    s.push_str(",aggregate_mbps\n");
    for v in results {
        for (k, r) in v.runs.iter().enumerate() {
            for (t, lim, agg) in windows(r, series) {
                let _ = write!(
                    s,
                    "{},{},{},{:.3}",
                    v.label,
                    k,
                    r.scenario.seed,
                    t as f64 / 1e9
                );
                for x in lim {
                    let _ = write!(s, ",{x:.4}");
                }
                let _ = writeln!(s, ",{agg:.4}");
            }
        }
    }
    s
}

/// Every flow of every run: where and when it ran, its size, goodput,
/// completion and TCP counters.
pub fn flows_csv(results: &[VariantRuns]) -> String {
    let mut s = String::from(
        "variant,run,seed,flow,limiter,start_s,stop_s,rtt_ms,size_bytes,finished_s,rate_kbps,\
goodput_mbps,total_bytes,syn_retries,retransmits,timeouts\n",
    );
    let opt = |x: Option<Nanos>| x.map_or(String::new(), |t| format!("{:.4}", t as f64 / 1e9));
    for v in results {
        for (k, r) in v.runs.iter().enumerate() {
            for (i, (f, g)) in r.flows.iter().zip(r.flow_goodput_mbps()).enumerate() {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{:.4},{},{:.1},{},{},{},{:.4},{},{},{},{}",
                    v.label,
                    k,
                    r.scenario.seed,
                    i,
                    f.limiter + 1,
                    f.start as f64 / 1e9,
                    opt(f.stop),
                    f.rtt as f64 / 1e6,
                    f.size_bytes.map_or(String::new(), |b| b.to_string()),
                    opt(f.finished),
                    f.completion_bps()
                        .map_or(String::new(), |b| format!("{:.3}", b / 1e3)),
                    g,
                    f.total_bytes,
                    f.syn_retries,
                    f.tcp.retransmits,
                    f.tcp.timeouts
                );
            }
        }
    }
    s
}

/// Limiter state at every estimate interval of each variant's first run.
pub fn limiters_csv(results: &[VariantRuns]) -> String {
    let mut s = String::from(
        "variant,time_s,node,local_rate_mbps,published,remote,local_limit_mbps,drop_probability\n",
    );
    for v in results {
        let Some(r) = v.runs.first() else { continue };
        for t in &r.ticks {
            let _ = write!(
                s,
                "{},{:.3},{},{:.4},{:.6},{:.6},",
                v.label,
                t.at as f64 / 1e9,
                t.node + 1,
                t.local_rate * 8.0 / 1e6,
                t.published,
                t.remote
            );
            match t.local_limit {
                Some(l) => {
                    let _ = write!(s, "{:.4},", l * 8.0 / 1e6);
                }
                None => s.push(','),
            }
            match t.drop_probability {
                Some(p) => {
                    let _ = writeln!(s, "{p:.6}");
                }
                None => s.push('\n'),
            }
        }
    }
    s
}

/// Writes a figure's outputs into `dir` (created if needed): `rates.csv`,
/// `flows.csv`, `limiters.csv`, `summary.json` and `<name>.svg` (the first
/// run of each variant over time); returns the paths.
pub fn write_all<T: Serialize>(
    plan: &FigurePlan,
    results: &[VariantRuns],
    summary: &FigureSummary<T>,
    dir: &Path,
    series: Nanos,
) -> Result<Vec<PathBuf>, ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut out = Vec::new();
    write(dir, "rates.csv", &rates_csv(results, series), &mut out)?;
    write(dir, "flows.csv", &flows_csv(results), &mut out)?;
    write(dir, "limiters.csv", &limiters_csv(results), &mut out)?;
    let mut json = serde_json::to_string_pretty(summary)?;
    json.push('\n');
    write(dir, "summary.json", &json, &mut out)?;
    let panels: Vec<(String, &RunResult)> = results
        .iter()
        .filter_map(|v| Some((v.label.clone(), v.runs.first()?)))
        .collect();
    let p = dir.join(format!("{}.svg", plan.name));
    crate::plot::time_series(&panels, series, &p)?;
    out.push(p);
    Ok(out)
}
