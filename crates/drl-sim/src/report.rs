//! Writes an experiment's outputs: CSVs, `summary.json` and SVG figures.
//!
//! Output is a pure function of the results: fixed float formatting, runs
//! and algorithms in experiment order, no timestamps.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use drl_core::Nanos;

use crate::experiment::ExperimentResult;
use crate::plot;

/// Failure to write outputs.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// File system error.
    #[error("writing {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// JSON serialisation error.
    #[error("serialising summary: {0}")]
    Json(#[from] serde_json::Error),
    /// Plotting error.
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
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

/// Per-limiter and aggregate forwarding rate (Mbps) over `series` windows,
/// for every algorithm and run.
pub fn rates_csv(res: &ExperimentResult, series: Nanos) -> String {
    let nl = res.experiment.base.limiters();
    let mut s = String::from("algorithm,run,seed,time_s");
    for l in 0..nl {
        let _ = write!(s, ",limiter_{}_mbps", l + 1);
    }
    s.push_str(",aggregate_mbps\n");
    for a in &res.algorithms {
        for (k, r) in a.runs.iter().enumerate() {
            let per = (series / r.scenario.bin).max(1) as usize;
            let w = per as f64 * r.scenario.bin as f64 / 1e9;
            let nb = r.forwarded.first().map_or(0, Vec::len);
            let mut b = 0;
            while b + per <= nb {
                let t = (b + per) as f64 * r.scenario.bin as f64 / 1e9;
                let _ = write!(s, "{},{},{},{:.3}", a.algorithm, k, r.scenario.seed, t);
                let mut agg = 0.0;
                for bins in &r.forwarded {
                    let mbps = bins[b..b + per].iter().sum::<u64>() as f64 * 8.0 / w / 1e6;
                    agg += mbps;
                    let _ = write!(s, ",{mbps:.4}");
                }
                let _ = writeln!(s, ",{agg:.4}");
                b += per;
            }
        }
    }
    s
}

/// Per-flow goodput and TCP counters.
pub fn flows_csv(res: &ExperimentResult) -> String {
    let mut s = String::from(
        "algorithm,run,seed,flow,limiter,goodput_mbps,total_bytes,sent,retransmits,fast_recoveries,timeouts\n",
    );
    for a in &res.algorithms {
        for (k, r) in a.runs.iter().enumerate() {
            for (i, (f, g)) in r.flows.iter().zip(r.flow_goodput_mbps()).enumerate() {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{:.4},{},{},{},{},{}",
                    a.algorithm,
                    k,
                    r.scenario.seed,
                    i,
                    f.limiter + 1,
                    g,
                    f.total_bytes,
                    f.tcp.sent,
                    f.tcp.retransmits,
                    f.tcp.fast_recoveries,
                    f.tcp.timeouts
                );
            }
        }
    }
    s
}

/// Limiter state at every estimate interval of the first run.
pub fn limiters_csv(res: &ExperimentResult) -> String {
    let mut s = String::from(
        "algorithm,time_s,node,local_rate_mbps,published,remote,local_limit_mbps,drop_probability\n",
    );
    for a in &res.algorithms {
        let Some(r) = a.runs.first() else { continue };
        for t in &r.ticks {
            let _ = write!(
                s,
                "{},{:.3},{},{:.4},{:.6},{:.6},",
                a.algorithm,
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

/// Histogram of the aggregate rate at each timescale, pooled over runs.
pub fn histograms_csv(res: &ExperimentResult) -> String {
    let limit = res.experiment.base.limit_bps as f64 / 1e6;
    let hi = (limit * 2.0).ceil();
    let nbins = 40;
    let w = hi / nbins as f64;
    let mut s = String::from("algorithm,timescale_ms,bin_lo_mbps,bin_hi_mbps,count,fraction\n");
    for a in &res.algorithms {
        for &t in &res.experiment.timescales {
            let samples: Vec<f64> = a.runs.iter().flat_map(|r| r.aggregate_series(t)).collect();
            let h = crate::metrics::histogram(&samples, 0.0, hi, nbins);
            let total = samples.len().max(1) as f64;
            for (k, c) in h.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{},{:.3},{:.3},{},{:.6}",
                    a.algorithm,
                    t / 1_000_000,
                    k as f64 * w,
                    (k + 1) as f64 * w,
                    c,
                    *c as f64 / total
                );
            }
        }
    }
    s
}

/// Writes every output into `dir` (created if needed); returns the paths.
pub fn write_all(
    res: &ExperimentResult,
    dir: &Path,
    series: Nanos,
) -> Result<Vec<PathBuf>, ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut out = Vec::new();
    write(dir, "rates.csv", &rates_csv(res, series), &mut out)?;
    write(dir, "flows.csv", &flows_csv(res), &mut out)?;
    write(dir, "limiters.csv", &limiters_csv(res), &mut out)?;
    write(dir, "histograms.csv", &histograms_csv(res), &mut out)?;
    let mut json = serde_json::to_string_pretty(&res.summary())?;
    json.push('\n');
    write(dir, "summary.json", &json, &mut out)?;
    let p = dir.join("fig3.svg");
    plot::figure3(res, series, &p)?;
    out.push(p);
    let p = dir.join("fig4.svg");
    plot::figure4(res, &p)?;
    out.push(p);
    let p = dir.join("fig5.svg");
    if plot::figure5(res, &p)? {
        out.push(p);
    }
    Ok(out)
}
