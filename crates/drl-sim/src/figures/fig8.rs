//! Figure 8 (paper §5.6): delivered rate, fairness and control traffic
//! against the number of limiters, for gossip branching factors 1-7,
//! under gossip loss.
//!
//! The paper's setup: a 50 Mbps global limit, 40 ms flow and inter-limiter
//! RTTs; each limiter gets 0-5 long-lived TCP flows (uniform, the same
//! draw for every run with the same number of limiters); one flow starts
//! every 100 ms, in random order, and lives 60 s. We run the same on
//! `drl_cluster::cloud_control::Node`, the node `drl serve` runs, and add
//! what the paper leaves out: the aggregation (peer table or push-sum) and
//! the exact control bytes.
//!
//! Control traffic is counted per datagram as its payload (the node's wire
//! format) plus [`DATAGRAM_OVERHEAD`]: drl-cluster-net's encrypted frame bound to
//! a node id and the IPv4 and UDP headers. The paper's updates were 48
//! bytes including IP and UDP headers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use drl_cluster::alloc::AlgorithmKind;
use drl_core::Nanos;
use plotters::prelude::*;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::engine::{RunOptions, RunResult, run_with};
use crate::metrics::jain;
use crate::scenario::{Churn, MS, SEC, Scenario, ScenarioError};

/// Bytes a datagram costs on the wire beyond the node's payload: drl-cluster-net's
/// frame bound to a node id (`drl_cluster_net::transport::frame::OVERHEAD`, 51:
/// header, key id, receiver id, nonce, Poly1305 tag) and IPv4 + UDP
/// headers (28).
pub const DATAGRAM_OVERHEAD: u64 = 51 + 28;

/// The paper's update size, bytes, IP and UDP headers included (§3.1).
pub const PAPER_UPDATE_BYTES: u64 = 48;

/// The experiment: every algorithm × branching factor × number of
/// limiters, one run each.
#[derive(Debug, Clone, PartialEq)]
pub struct Fig8 {
    /// Scenario template: limit, RTTs, interval, loss, aggregation,
    /// duration, warm-up, seed (`flows_per_limiter` and `churn` are set per
    /// point).
    pub base: Scenario,
    /// Numbers of limiters.
    pub limiters: Vec<usize>,
    /// Gossip branching factors.
    pub branchings: Vec<u32>,
    /// Algorithms.
    pub algorithms: Vec<AlgorithmKind>,
    /// Most flows per limiter (the draw is uniform in `0..=max`).
    pub max_flows: u32,
    /// Flow churn: one flow starts every `every`, each lives `life`
    /// (`None`: all flows start within the template's `start_spread` and
    /// live to the end).
    pub churn: Option<Churn>,
    /// Flows alive less than this within the measurement window are left
    /// out of the fairness index.
    pub min_alive: Nanos,
}

/// One point of the figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Algorithm name.
    pub algorithm: String,
    /// Gossip branching factor.
    pub branching: u32,
    /// Number of limiters.
    pub limiters: usize,
    /// Flows in the run.
    pub flows: u64,
    /// Mean aggregate forwarded rate over the window, Mbps.
    pub aggregate_mbps: f64,
    /// Lowest and highest aggregate over 1 s windows in the window, Mbps.
    pub min_1s_mbps: f64,
    /// Highest aggregate over 1 s windows in the window, Mbps.
    pub max_1s_mbps: f64,
    /// Fraction of the window's 1 s windows above 110 % of the limit.
    pub over_110pct: f64,
    /// Jain's index over the rates of the flows alive at least
    /// `min_alive` in the window.
    pub jain: f64,
    /// Flows counted in `jain`.
    pub jain_flows: usize,
    /// Control traffic per limiter, bytes/s (payload + datagram overhead).
    pub control_bytes_per_s_per_limiter: f64,
    /// Control payload alone per limiter, bytes/s.
    pub payload_bytes_per_s_per_limiter: f64,
    /// Whole cluster's control traffic as a fraction of the limit (bits
    /// against bits).
    pub control_fraction_of_limit: f64,
    /// Datagrams sent and lost.
    pub datagrams_sent: u64,
    /// Datagrams lost.
    pub datagrams_lost: u64,
}

/// Everything the experiment produced.
#[derive(Debug, Clone)]
pub struct Fig8Result {
    /// The experiment.
    pub fig: Fig8,
    /// One point per run, in run order (algorithm, branching, limiters).
    pub points: Vec<Point>,
    /// Aggregate Mbps per 1 s window of each run, same order.
    pub seconds: Vec<Vec<f64>>,
}

/// Progress: runs done, runs in total, fraction of the current run.
pub type Fig8Progress = (u32, u32, f64);

impl Fig8 {
    /// The paper's setup for `limiters` (see the module docs) as a template,
    /// `secs` simulated, measured from `warmup_secs`.
    pub fn paper(loss: f64, secs: u64, warmup_secs: u64) -> Self {
        let base = Scenario {
            limit_bps: 50_000_000,
            gossip_loss: loss,
            duration: secs * SEC,
            warmup: warmup_secs * SEC,
            ..Scenario::paper_baseline(AlgorithmKind::Fps)
        };
        Self {
            base,
            limiters: vec![10, 50, 100, 250, 490],
            branchings: vec![1, 3, 7],
            algorithms: vec![AlgorithmKind::Fps, AlgorithmKind::Grd],
            max_flows: 5,
            churn: Some(Churn {
                every: 100 * MS,
                life: 60 * SEC,
            }),
            min_alive: 5 * SEC,
        }
    }

    /// Flows per limiter for `n` limiters: uniform in `0..=max_flows`, from
    /// a seed fixed per `n` (the same flows for every algorithm, branching
    /// and run seed, as in the paper).
    pub fn flows_for(&self, n: usize) -> Vec<u32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5ca1e ^ n as u64);
        (0..n)
            .map(|_| rng.random_range(0..=self.max_flows))
            .collect()
    }

    /// The scenario of one point.
    pub fn scenario(&self, algorithm: AlgorithmKind, branching: u32, n: usize) -> Scenario {
        let mut flows = self.flows_for(n);
        if flows.iter().all(|&f| f == 0) {
            flows[0] = 1;
        }
        Scenario {
            algorithm,
            branching,
            flows_per_limiter: flows,
            churn: self.churn,
            // The figure reads whole seconds only: one bin per second
            // (10 ms bins at 10,000 limiters × 60 s are 0.5 GB per
            // series; the per-second sums are the same).
            bin: SEC,
            ..self.base.clone()
        }
    }

    /// Checks every point's scenario.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.limiters.is_empty() || self.branchings.is_empty() || self.algorithms.is_empty() {
            return Err(ScenarioError::NotPositive(
                "the lists of limiters, branchings and algorithms",
            ));
        }
        for &a in &self.algorithms {
            for &b in &self.branchings {
                for &n in &self.limiters {
                    self.scenario(a, b, n).validate()?;
                }
            }
        }
        Ok(())
    }

    /// Runs every point; `progress` hears about every simulated second.
    pub fn run(&self, progress: &mut dyn FnMut(Fig8Progress)) -> Result<Fig8Result, ScenarioError> {
        self.validate()?;
        let total = (self.algorithms.len() * self.branchings.len() * self.limiters.len()) as u32;
        let mut done = 0;
        let mut points = Vec::new();
        let mut seconds = Vec::new();
        for &a in &self.algorithms {
            for &b in &self.branchings {
                for &n in &self.limiters {
                    let sc = self.scenario(a, b, n);
                    let r = run_with(&sc, RunOptions { ticks: false }, &mut |f| {
                        progress((done, total, f))
                    })?;
                    let (p, s) = self.point(&r);
                    points.push(p);
                    seconds.push(s);
                    done += 1;
                    progress((done, total, 0.0));
                }
            }
        }
        Ok(Fig8Result {
            fig: self.clone(),
            points,
            seconds,
        })
    }

    /// The point a run gives, and its aggregate per second (window only).
    pub fn point(&self, r: &RunResult) -> (Point, Vec<f64>) {
        let sc = &r.scenario;
        let per_s = aggregate_per_second(r);
        let first = sc.warmup.div_ceil(SEC) as usize;
        let window: Vec<f64> = per_s.iter().skip(first).copied().collect();
        let limit = sc.limit_bps as f64 / 1e6;
        let mean = if window.is_empty() {
            0.0
        } else {
            window.iter().sum::<f64>() / window.len() as f64
        };
        let over = window.iter().filter(|&&m| m > 1.1 * limit).count();
        let rates: Vec<f64> = r
            .flows
            .iter()
            .filter_map(|f| {
                let from = f.start.max(sc.warmup);
                let to = f.stop.unwrap_or(sc.duration).min(sc.duration);
                (to > from && to - from >= self.min_alive)
                    .then(|| f.goodput_bytes as f64 * 8.0 / ((to - from) as f64 / 1e9))
            })
            .collect();
        let secs = sc.duration as f64 / 1e9;
        let n = sc.limiters() as f64;
        let payload = r.gossip_bytes as f64 / secs / n;
        let control = (r.gossip_bytes + r.gossip_sent * DATAGRAM_OVERHEAD) as f64 / secs / n;
        let p = Point {
            algorithm: sc.algorithm.name().to_string(),
            branching: sc.branching,
            limiters: sc.limiters(),
            flows: sc.total_flows(),
            aggregate_mbps: r6(mean),
            min_1s_mbps: r6(window
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
                .min(1e12)),
            max_1s_mbps: r6(window.iter().copied().fold(0.0, f64::max)),
            over_110pct: r6(over as f64 / window.len().max(1) as f64),
            jain: r6(jain(&rates)),
            jain_flows: rates.len(),
            control_bytes_per_s_per_limiter: r6(control),
            payload_bytes_per_s_per_limiter: r6(payload),
            control_fraction_of_limit: r6(control * n * 8.0 / sc.limit_bps as f64),
            datagrams_sent: r.gossip_sent,
            datagrams_lost: r.gossip_lost,
        };
        (p, window.iter().map(|&x| r6(x)).collect())
    }
}

/// Aggregate forwarded Mbps in each whole second of a run.
pub fn aggregate_per_second(r: &RunResult) -> Vec<f64> {
    let bins = (SEC / r.scenario.bin).max(1) as usize;
    let nb = r.forwarded.first().map_or(0, Vec::len);
    (0..nb / bins)
        .map(|s| {
            let bytes: u64 = r
                .forwarded
                .iter()
                .map(|v| v[s * bins..(s + 1) * bins].iter().sum::<u64>())
                .sum();
            bytes as f64 * 8.0 / 1e6
        })
        .collect()
}

fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// `summary.json`: the parameters and every point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fig8Summary {
    /// Global limit, Mbps.
    pub limit_mbps: f64,
    /// Gossip loss probability.
    pub gossip_loss: f64,
    /// Aggregation.
    pub aggregation: String,
    /// Estimate interval, ms.
    pub interval_ms: f64,
    /// Duration and warm-up, s.
    pub duration_s: f64,
    /// Warm-up excluded from the window, s.
    pub warmup_s: f64,
    /// Seed.
    pub seed: u64,
    /// Churn: ms between starts, s of life (0: no churn).
    pub churn_every_ms: f64,
    /// Life of a flow under churn, s.
    pub churn_life_s: f64,
    /// Bytes added per datagram to the payload when counting control
    /// traffic.
    pub datagram_overhead_bytes: u64,
    /// The paper's control rate per limiter for each branching factor,
    /// bytes/s: 48 bytes × updates per second × branching.
    pub paper_control_bytes_per_s_per_limiter: BTreeMap<u32, f64>,
    /// Every point, in run order.
    pub points: Vec<Point>,
}

impl Fig8Result {
    /// The summary.
    pub fn summary(&self) -> Fig8Summary {
        let b = &self.fig.base;
        let per_s = 1e9 / b.estimate_interval as f64;
        Fig8Summary {
            limit_mbps: b.limit_bps as f64 / 1e6,
            gossip_loss: b.gossip_loss,
            aggregation: b.aggregation.name().to_string(),
            interval_ms: b.estimate_interval as f64 / 1e6,
            duration_s: b.duration as f64 / 1e9,
            warmup_s: b.warmup as f64 / 1e9,
            seed: b.seed,
            churn_every_ms: self.fig.churn.map_or(0.0, |c| c.every as f64 / 1e6),
            churn_life_s: self.fig.churn.map_or(0.0, |c| c.life as f64 / 1e9),
            datagram_overhead_bytes: DATAGRAM_OVERHEAD,
            paper_control_bytes_per_s_per_limiter: self
                .fig
                .branchings
                .iter()
                .map(|&br| (br, r6(PAPER_UPDATE_BYTES as f64 * per_s * br as f64)))
                .collect(),
            points: self.points.clone(),
        }
    }

    /// `fig8.csv`: one row per point.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "algorithm,branching,limiters,flows,aggregate_mbps,min_1s_mbps,max_1s_mbps,\
             over_110pct,jain,jain_flows,control_bytes_per_s_per_limiter,\
             payload_bytes_per_s_per_limiter,control_fraction_of_limit,datagrams_sent,\
             datagrams_lost\n",
        );
        for p in &self.points {
            let _ = writeln!(
                s,
                "{},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{},{:.1},{:.1},{:.6},{},{}",
                p.algorithm,
                p.branching,
                p.limiters,
                p.flows,
                p.aggregate_mbps,
                p.min_1s_mbps,
                p.max_1s_mbps,
                p.over_110pct,
                p.jain,
                p.jain_flows,
                p.control_bytes_per_s_per_limiter,
                p.payload_bytes_per_s_per_limiter,
                p.control_fraction_of_limit,
                p.datagrams_sent,
                p.datagrams_lost
            );
        }
        s
    }

    /// `seconds.csv`: the aggregate of every 1 s window of the measurement
    /// window, per point.
    pub fn seconds_csv(&self) -> String {
        let mut s = String::from("algorithm,branching,limiters,second,aggregate_mbps\n");
        let first = self.fig.base.warmup.div_ceil(SEC);
        for (p, secs) in self.points.iter().zip(&self.seconds) {
            for (k, m) in secs.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{:.4}",
                    p.algorithm,
                    p.branching,
                    p.limiters,
                    first + k as u64 + 1,
                    m
                );
            }
        }
        s
    }

    /// Writes `fig8.csv`, `seconds.csv`, `summary.json` and `fig8.svg` into
    /// `dir` (created if needed); returns the paths.
    pub fn write_all(&self, dir: &Path) -> Result<Vec<PathBuf>, crate::report::ReportError> {
        use crate::report::ReportError;
        std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let mut out = Vec::new();
        let mut json = serde_json::to_string_pretty(&self.summary())?;
        json.push('\n');
        for (name, body) in [
            ("fig8.csv", self.csv()),
            ("seconds.csv", self.seconds_csv()),
            ("summary.json", json),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, body).map_err(|source| ReportError::Io {
                path: p.display().to_string(),
                source,
            })?;
            out.push(p);
        }
        let p = dir.join("fig8.svg");
        self.plot(&p)?;
        out.push(p);
        Ok(out)
    }

    /// Figure 8: delivered rate (top) and Jain's index (bottom) against
    /// the number of limiters, one line per algorithm and branching factor.
    pub fn plot(&self, path: &Path) -> Result<(), crate::plot::PlotError> {
        let e = |e: &dyn std::fmt::Display| crate::plot::PlotError {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let limit = self.fig.base.limit_bps as f64 / 1e6;
        let max_n = self.fig.limiters.iter().copied().max().unwrap_or(1) as f64;
        let top = self
            .points
            .iter()
            .map(|p| p.aggregate_mbps)
            .fold(limit * 1.5, f64::max)
            .min(limit * 4.0);
        let root = SVGBackend::new(path, (760, 720)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (upper, lower) = root.split_vertically(360);
        let mut lines: BTreeMap<(String, u32), Vec<&Point>> = BTreeMap::new();
        for p in &self.points {
            lines
                .entry((p.algorithm.clone(), p.branching))
                .or_default()
                .push(p);
        }
        let colors = [
            RGBColor(31, 119, 180),
            RGBColor(214, 39, 40),
            RGBColor(44, 160, 44),
            RGBColor(148, 103, 189),
            RGBColor(255, 127, 14),
            RGBColor(23, 190, 207),
            RGBColor(140, 86, 75),
            RGBColor(227, 119, 194),
        ];
        for (panel, area) in [(0, &upper), (1, &lower)] {
            let (caption, ylo, yhi, ydesc) = if panel == 0 {
                (
                    "Delivered rate vs number of limiters",
                    0.0,
                    top,
                    "Aggregate (Mbps)",
                )
            } else {
                (
                    "Fairness vs number of limiters",
                    0.0,
                    1.0,
                    "Jain's fairness index",
                )
            };
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(50)
                .build_cartesian_2d(0.0..max_n * 1.05, ylo..yhi)
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .x_desc("Number of limiters")
                .y_desc(ydesc)
                .draw()
                .map_err(|x| e(&x))?;
            if panel == 0 {
                chart
                    .draw_series(LineSeries::new(
                        vec![(0.0, limit), (max_n * 1.05, limit)],
                        BLACK.mix(0.5),
                    ))
                    .map_err(|x| e(&x))?
                    .label("limit")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
            }
            for (k, ((alg, br), pts)) in lines.iter().enumerate() {
                let c = colors[k % colors.len()];
                let xy: Vec<(f64, f64)> = pts
                    .iter()
                    .map(|p| {
                        let y = if panel == 0 {
                            p.aggregate_mbps.min(yhi)
                        } else {
                            p.jain
                        };
                        (p.limiters as f64, y)
                    })
                    .collect();
                chart
                    .draw_series(LineSeries::new(xy.clone(), c.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(format!("{alg}, br = {br}"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(xy.into_iter().map(move |p| Circle::new(p, 3, c.filled())))
                    .map_err(|x| e(&x))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
        Ok(())
    }
}
