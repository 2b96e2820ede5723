//! SVG figures in the style of the paper's Figures 3, 4 and 5 (plotters).

use std::path::Path;

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use plotters::prelude::*;

use crate::experiment::ExperimentResult;
use crate::metrics::histogram;

/// A plotting failure (I/O or drawing).
#[derive(Debug, thiserror::Error)]
#[error("plotting {path}: {message}")]
pub struct PlotError {
    /// The file being drawn.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

fn err(path: &Path, e: impl std::fmt::Display) -> PlotError {
    PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

const LIMITER_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

fn title(a: AlgorithmKind) -> &'static str {
    match a {
        AlgorithmKind::Ctb => "Central token bucket",
        AlgorithmKind::Crd => "Central random drop",
        AlgorithmKind::Gtb => "Global token bucket",
        AlgorithmKind::Grd => "Global random drop (paper)",
        AlgorithmKind::GrdSmooth => "Global random drop (grd-smooth)",
        AlgorithmKind::Fps => "Flow proportional share (paper)",
        AlgorithmKind::FpsMean => "Flow proportional share (fps-mean)",
        AlgorithmKind::Static => "Static 1/N",
        AlgorithmKind::FpsLrd => "Flow proportional share, local random drop (fps-lrd)",
    }
}

/// Figure 3: forwarding rate per limiter and aggregate over time, one panel
/// per algorithm (first run), averaged over `series` windows.
pub fn figure3(res: &ExperimentResult, series: Nanos, path: &Path) -> Result<(), PlotError> {
    let panels: Vec<(String, &crate::engine::RunResult)> = res
        .algorithms
        .iter()
        .filter_map(|a| Some((title(a.algorithm).to_string(), a.runs.first()?)))
        .collect();
    time_series(&panels, series, path)
}

/// Forwarding rate per limiter and aggregate over time, one panel per
/// `(caption, run)`, averaged over `series` windows (Figures 3, 6, 7, 9).
pub fn time_series(
    runs: &[(String, &crate::engine::RunResult)],
    series: Nanos,
    path: &Path,
) -> Result<(), PlotError> {
    let n = runs.len().max(1);
    let cols = if n > 3 { 2 } else { 1 };
    let rows = n.div_ceil(cols);
    let root = SVGBackend::new(path, (600 * cols as u32, 300 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let panels = root.split_evenly((rows, cols));
    for ((caption, run), panel) in runs.iter().zip(panels.iter()) {
        let limit = run.scenario.limit_bps as f64 / 1e6;
        let dur = run.scenario.duration as f64 / 1e9;
        let per = (series / run.scenario.bin).max(1) as usize;
        let nl = run.forwarded.len();
        let nb = run.forwarded.first().map_or(0, Vec::len);
        let mut lines: Vec<Vec<(f64, f64)>> = vec![Vec::new(); nl + 1];
        let mut b = 0;
        while b + per <= nb {
            let t = (b + per) as f64 * run.scenario.bin as f64 / 1e9;
            let w = per as f64 * run.scenario.bin as f64 / 1e9;
            let mut agg = 0.0;
            for (l, bins) in run.forwarded.iter().enumerate() {
                let bytes: u64 = bins[b..b + per].iter().sum();
                let mbps = bytes as f64 * 8.0 / w / 1e6;
                agg += mbps;
                lines[l].push((t, mbps));
            }
            lines[nl].push((t, agg));
            b += per;
        }
        let ymax = (limit * 1.6).max(lines[nl].iter().map(|p| p.1).fold(0.0, f64::max) * 1.05);
        let mut chart = ChartBuilder::on(panel)
            .caption(caption.as_str(), ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0.0..dur, 0.0..ymax)
            .map_err(|e| err(path, e))?;
        chart
            .configure_mesh()
            .x_desc("Time (s)")
            .y_desc("Rate (Mbps)")
            .draw()
            .map_err(|e| err(path, e))?;
        chart
            .draw_series(LineSeries::new(lines[nl].clone(), BLACK.stroke_width(2)))
            .map_err(|e| err(path, e))?
            .label("Aggregate")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
        for l in 0..nl {
            let c = LIMITER_COLORS[l % LIMITER_COLORS.len()];
            let flows = run.scenario.flows_per_limiter[l];
            let label = if run.scenario.flow_specs.is_empty() && run.scenario.web.is_empty() {
                format!("Limiter {} ({} flows)", l + 1, flows)
            } else {
                format!("Limiter {}", l + 1)
            };
            chart
                .draw_series(LineSeries::new(lines[l].clone(), c))
                .map_err(|e| err(path, e))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| err(path, e))?;
    }
    root.present().map_err(|e| err(path, e))?;
    Ok(())
}

/// Figure 4: histograms of the aggregate forwarding rate computed over each
/// timescale (first run of each algorithm): rows are algorithms, columns
/// timescales.
pub fn figure4(res: &ExperimentResult, path: &Path) -> Result<(), PlotError> {
    let ts = &res.experiment.timescales;
    let rows = res.algorithms.len().max(1);
    let cols = ts.len().max(1);
    let root = SVGBackend::new(path, (420 * cols as u32, 220 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let panels = root.split_evenly((rows, cols));
    let limit = res.experiment.base.limit_bps as f64 / 1e6;
    let hi = (limit * 2.0).ceil();
    let nbins = 40;
    let w = hi / nbins as f64;
    for (i, a) in res.algorithms.iter().enumerate() {
        let Some(run) = a.runs.first() else { continue };
        for (j, &t) in ts.iter().enumerate() {
            let samples = run.aggregate_series(t);
            let h = histogram(&samples, 0.0, hi, nbins);
            let total = samples.len().max(1) as f64;
            let ymax = h
                .iter()
                .map(|&c| c as f64 / total)
                .fold(0.0, f64::max)
                .max(0.05)
                * 1.1;
            let panel = &panels[i * cols + j];
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!("{} — {} ms", a.algorithm.name(), t / 1_000_000),
                    ("sans-serif", 15),
                )
                .margin(6)
                .x_label_area_size(28)
                .y_label_area_size(40)
                .build_cartesian_2d(0.0..hi, 0.0..ymax)
                .map_err(|e| err(path, e))?;
            chart
                .configure_mesh()
                .x_desc("Forwarding rate (Mbps)")
                .y_desc("Fraction")
                .draw()
                .map_err(|e| err(path, e))?;
            chart
                .draw_series(h.iter().enumerate().map(|(k, &c)| {
                    let x0 = k as f64 * w;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + w * 0.9, c as f64 / total)],
                        LIMITER_COLORS[0].filled(),
                    )
                }))
                .map_err(|e| err(path, e))?;
            chart
                .draw_series(LineSeries::new(vec![(limit, 0.0), (limit, ymax)], RED))
                .map_err(|e| err(path, e))?;
        }
    }
    root.present().map_err(|e| err(path, e))?;
    Ok(())
}

/// Figure 5: quantile-quantile plot of each algorithm's Jain's index
/// distribution (over runs) against the central token bucket's. Returns
/// `false` (and draws nothing) when CTB was not run.
pub fn figure5(res: &ExperimentResult, path: &Path) -> Result<bool, PlotError> {
    let Some(ctb) = res
        .algorithms
        .iter()
        .find(|a| a.algorithm == AlgorithmKind::Ctb)
    else {
        return Ok(false);
    };
    let sorted = |runs: &[crate::engine::RunResult]| {
        let mut v: Vec<f64> = runs.iter().map(|r| r.jain()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let base = sorted(&ctb.runs);
    let all: Vec<(AlgorithmKind, Vec<f64>)> = res
        .algorithms
        .iter()
        .filter(|a| a.algorithm != AlgorithmKind::Ctb)
        .map(|a| (a.algorithm, sorted(&a.runs)))
        .collect();
    let lo = all
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .chain(base.iter().copied())
        .fold(1.0, f64::min)
        .min(0.6)
        - 0.02;
    let root = SVGBackend::new(path, (640, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Jain's fairness index: quantiles vs CTB",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(lo..1.0, lo..1.0)
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("Central token bucket")
        .y_desc("Other limiters")
        .draw()
        .map_err(|e| err(path, e))?;
    chart
        .draw_series(LineSeries::new(vec![(lo, lo), (1.0, 1.0)], BLACK))
        .map_err(|e| err(path, e))?
        .label("x = y")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    for (k, (alg, v)) in all.iter().enumerate() {
        let c = LIMITER_COLORS[k % LIMITER_COLORS.len()];
        // Quantile-match by rank (same number of runs for all algorithms).
        let pts: Vec<(f64, f64)> = base.iter().copied().zip(v.iter().copied()).collect();
        chart
            .draw_series(pts.into_iter().map(move |p| Circle::new(p, 4, c.filled())))
            .map_err(|e| err(path, e))?
            .label(title(*alg))
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))?;
    Ok(true)
}
