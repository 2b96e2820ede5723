//! `drl sim`: the deterministic simulator and the Cloud Control figures.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::fps::FlowRateEstimator;
use drl_cluster::gossip::LossCompensation;
use drl_sim::experiment::{Experiment, Progress};
use drl_sim::report;
use drl_sim::scenario::{MS, SEC, Scenario};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Arguments of `drl sim`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Deterministic discrete-event simulation of distributed rate limiting \
(Raghavan et al., SIGCOMM 2007). Long-lived TCP NewReno+SACK flows cross policing \
limiters that share one global limit through push-sum gossip.\n\n\
Every experiment writes to --out: rates.csv (per-limiter and aggregate forwarding \
rate), flows.csv (per-flow goodput and TCP counters), limiters.csv (limiter state per \
estimate interval, first run), histograms.csv (short-timescale rate histograms), \
summary.json (means over t >= warm-up, averaged over runs) and fig3.svg, fig4.svg, \
fig5.svg. Same flags and seed give byte-identical output.\n\n\
Algorithms: ctb (central token bucket, the reference), crd (central random drop), \
gtb (global token bucket), grd (global random drop as in the paper), grd-smooth \
(GRD with an integral controller on the global forwarded rate), fps (flow \
proportional share as in the paper), fps-mean (experimental: FPS with a mean-based estimate of an \
unbottlenecked flow's rate)."
)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, clap::Subcommand)]
enum Which {
    /// The paper's baseline (§5.1) with every parameter adjustable.
    Baseline(Flags),
    /// Figure 3: forwarding-rate time series of each algorithm (3 vs 7 flows).
    Fig3(Flags),
    /// Figure 4: histograms of the aggregate rate at short timescales.
    Fig4(Flags),
    /// Figure 5: Jain's fairness index over 10 runs, quantiles against CTB.
    Fig5(Flags),
    /// Fault harness: a protocol's invariant over many seeded fault scenarios.
    ///
    /// Runs the protocol's state machines (orbit) on virtual time with loss,
    /// delay, duplication, crashes and partitions, checking its invariant
    /// after every event.
    Faults(super::sim_faults::Args),
}

#[derive(Debug, Clone, clap::Args)]
struct Flags {
    /// Algorithms to compare (ctb, crd, gtb, grd, grd-smooth, fps, fps-mean)
    /// [default: baseline ctb,gtb,grd,fps; fig3/fig4 ctb,gtb,grd,grd-smooth,fps;
    /// fig5 adds crd].
    #[arg(long, value_delimiter = ',')]
    algorithms: Option<Vec<AlgorithmKind>>,
    /// Long-lived TCP flows at each limiter; one number per limiter.
    #[arg(long, value_delimiter = ',', default_value = "3,7")]
    flows: Vec<u32>,
    /// Global rate limit in Mbps.
    #[arg(long, default_value_t = 10.0)]
    limit_mbps: f64,
    /// Simulated seconds per run.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Seconds excluded from means and fairness at the start of each run.
    #[arg(long, default_value_t = 10.0)]
    warmup: f64,
    /// Seed of the first run (run k uses seed + k).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per algorithm [default: 10 for fig5, else 1].
    #[arg(long)]
    runs: Option<u32>,
    /// Round-trip time of every flow, ms.
    #[arg(long, default_value_t = 40.0)]
    flow_rtt_ms: f64,
    /// Round-trip time between limiters (gossip delay is half), ms.
    #[arg(long, default_value_t = 40.0)]
    limiter_rtt_ms: f64,
    /// Estimate interval, ms.
    #[arg(long, default_value_t = 50.0)]
    interval_ms: f64,
    /// 1-second EWMA parameter of the demand estimators (0 = no smoothing).
    #[arg(long, default_value_t = 0.1)]
    ewma: f64,
    /// Token bucket depth, bytes.
    #[arg(long, default_value_t = 75_000)]
    depth_bytes: u64,
    /// Gossip branching factor (peers contacted per estimate interval).
    #[arg(long, default_value_t = 1)]
    branching: u32,
    /// Probability that a gossip message is lost.
    #[arg(long, default_value_t = 0.0)]
    gossip_loss: f64,
    /// Gossip loss compensation: cumulative (running totals, exact), paper
    /// (scale the newest update by the sequence gap; leaks mass under
    /// sustained loss), none.
    #[arg(long, default_value = "cumulative")]
    compensation: String,
    /// Random loss probability on each flow's path to its limiter.
    #[arg(long, default_value_t = 0.0)]
    data_loss: f64,
    /// Flows start uniformly at random within this many ms.
    #[arg(long, default_value_t = 500.0)]
    start_spread_ms: f64,
    /// Per-packet host jitter, µs (uniform).
    #[arg(long, default_value_t = 50.0)]
    jitter_us: f64,
    /// Data packet size on the wire, bytes.
    #[arg(long, default_value_t = 1500)]
    packet_bytes: u32,
    /// Capacity of every link, Mbps.
    #[arg(long, default_value_t = 100.0)]
    link_mbps: f64,
    /// grd-smooth: drop-probability change per interval per 100 % excess.
    #[arg(long, default_value_t = 0.04)]
    grd_gain: f64,
    /// fps: 1-second EWMA parameter of per-flow rates [default: --ewma].
    #[arg(long)]
    fps_flow_ewma: Option<f64>,
    /// fps-mean: flows within this fraction of the fastest count as unbottlenecked.
    #[arg(long, default_value_t = 0.3)]
    fps_mean_fraction: f64,
    /// Timescales of the Figure 4 histograms, ms.
    #[arg(long, value_delimiter = ',', default_value = "1000,100")]
    timescales_ms: Vec<u64>,
    /// Window of the rate time series (rates.csv, fig3.svg), ms.
    #[arg(long, default_value_t = 500)]
    series_ms: u64,
    /// Output directory [default: sim-out/<experiment>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn ns(ms: f64, what: &str) -> anyhow::Result<u64> {
    anyhow::ensure!(
        ms.is_finite() && ms >= 0.0,
        "{what} must be a non-negative number"
    );
    Ok((ms * MS as f64).round() as u64)
}

fn build(which: &str, f: &Flags) -> anyhow::Result<Experiment> {
    use AlgorithmKind::*;
    let default_algs: Vec<AlgorithmKind> = match which {
        "baseline" => vec![Ctb, Gtb, Grd, Fps],
        "fig5" => vec![Ctb, Crd, Gtb, Grd, GrdSmooth, Fps],
        _ => vec![Ctb, Gtb, Grd, GrdSmooth, Fps],
    };
    let runs = f.runs.unwrap_or(if which == "fig5" { 10 } else { 1 });
    anyhow::ensure!(runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        f.limit_mbps.is_finite() && f.limit_mbps > 0.0,
        "--limit-mbps must be positive"
    );
    anyhow::ensure!(
        f.link_mbps.is_finite() && f.link_mbps > 0.0,
        "--link-mbps must be positive"
    );
    let compensation = match f.compensation.as_str() {
        "paper" | "scale" => LossCompensation::ScaleBySeqGap,
        "cumulative" => LossCompensation::Cumulative,
        "none" => LossCompensation::None,
        other => anyhow::bail!("unknown --compensation {other:?} (paper, cumulative, none)"),
    };
    let mut base = Scenario::paper_baseline(Ctb);
    base.flows_per_limiter = f.flows.clone();
    base.limit_bps = (f.limit_mbps * 1e6).round() as u64;
    base.duration = ns(f.duration * 1e3, "--duration")?;
    base.warmup = ns(f.warmup * 1e3, "--warmup")?;
    base.seed = f.seed;
    base.flow_rtt = ns(f.flow_rtt_ms, "--flow-rtt-ms")?;
    base.limiter_rtt = ns(f.limiter_rtt_ms, "--limiter-rtt-ms")?;
    base.estimate_interval = ns(f.interval_ms, "--interval-ms")?;
    base.ewma = f.ewma;
    base.depth_bytes = f.depth_bytes;
    base.branching = f.branching;
    base.gossip_loss = f.gossip_loss;
    base.compensation = compensation;
    base.data_loss = f.data_loss;
    base.start_spread = ns(f.start_spread_ms, "--start-spread-ms")?;
    base.jitter = ns(f.jitter_us / 1e3, "--jitter-us")?;
    base.packet_bytes = f.packet_bytes;
    base.link_bps = (f.link_mbps * 1e6).round() as u64;
    base.grd_smooth.gain = f.grd_gain;
    base.fps.flow_ewma = f.fps_flow_ewma;
    base.fps_mean.flow_rate = FlowRateEstimator::MeanAbove(f.fps_mean_fraction);
    let algorithms = f.algorithms.clone().unwrap_or(default_algs);
    anyhow::ensure!(!algorithms.is_empty(), "--algorithms is empty");
    for &a in &algorithms {
        Scenario {
            algorithm: a,
            ..base.clone()
        }
        .validate()
        .with_context(|| format!("invalid parameters for {a}"))?;
    }
    anyhow::ensure!(
        f.timescales_ms.iter().all(|&t| t > 0) && f.series_ms > 0,
        "timescales must be positive"
    );
    Ok(Experiment {
        base,
        algorithms,
        runs,
        timescales: f.timescales_ms.iter().map(|&t| t * MS).collect(),
    })
}

/// Runs `drl sim`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let (which, flags) = match &args.which {
        Which::Baseline(f) => ("baseline", f),
        Which::Fig3(f) => ("fig3", f),
        Which::Fig4(f) => ("fig4", f),
        Which::Fig5(f) => ("fig5", f),
        Which::Faults(a) => return super::sim_faults::run(a),
    };
    let exp = build(which, flags)?;
    let out = flags
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sim-out").join(which));
    let total = exp.algorithms.len() as u64 * exp.runs as u64;
    let sim_secs = exp.base.duration / SEC;
    let bar = if flags.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(
            Some(total * sim_secs.max(1)),
            ProgressDrawTarget::stderr(),
        );
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let started = Instant::now();
    let res = exp.run(&mut |p: Progress| {
        let pos = p.runs_done as u64 * sim_secs.max(1) + (p.current * sim_secs as f64) as u64;
        bar.set_position(pos);
        bar.set_message(format!(
            "run {}/{}",
            (p.runs_done + 1).min(p.runs_total),
            p.runs_total
        ));
    })?;
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let files = report::write_all(&res, &out, flags.series_ms * MS)
        .with_context(|| format!("writing results to {}", out.display()))?;
    let summary = res.summary();
    println!(
        "{which}: {} algorithm(s) x {} run(s) x {} s simulated in {:.2} s",
        exp.algorithms.len(),
        exp.runs,
        sim_secs,
        elapsed.as_secs_f64()
    );
    println!(
        "{:<12} {:>10} {:>24} {:>7}",
        "algorithm", "aggregate", "per limiter (Mbps)", "jain"
    );
    for a in &exp.algorithms {
        if let Some(s) = summary.algorithms.get(a.name()) {
            let lim: Vec<String> = s.limiter_mbps.iter().map(|x| format!("{x:.2}")).collect();
            println!(
                "{:<12} {:>10.3} {:>24} {:>7.3}",
                a.name(),
                s.aggregate_mbps,
                lim.join(" / "),
                s.jain
            );
        }
    }
    println!("wrote {} files to {}", files.len(), out.display());
    Ok(std::process::ExitCode::SUCCESS)
}
