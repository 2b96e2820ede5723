//! `drl sim`: the deterministic simulator and the Cloud Control figures.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::alloc::dither::GrdDraws;
use drl_cluster::alloc::fps::FlowRateEstimator;
use drl_cluster::cloud_control::Aggregation;
use drl_cluster::gossip::LossCompensation;
use drl_sim::experiment::{Experiment, Progress};
use drl_sim::report;
use drl_sim::scenario::{FaultEvent, MS, SEC, Scenario};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Arguments of `drl sim`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Deterministic discrete-event simulation of distributed rate limiting \
(Raghavan et al., SIGCOMM 2007). Long-lived TCP NewReno+SACK flows cross policing \
limiters that share one global limit through gossip. Each limiter is the Cloud Control \
node `drl serve` runs for `scope: gossip` (drl_cluster::cloud_control::Node), with the \
same settings (--aggregation, --branching, --interval-ms, ...); kills, restarts and \
partitions (--kill, --restart, --partition) reach it as membership events.\n\n\
Every experiment writes to --out: rates.csv (per-limiter and aggregate forwarding \
rate), flows.csv (per-flow goodput and TCP counters), limiters.csv (limiter state per \
estimate interval, first run), histograms.csv (short-timescale rate histograms), \
summary.json (means over t >= warm-up, averaged over runs) and fig3.svg, fig4.svg, \
fig5.svg. Same flags and seed give byte-identical output.\n\n\
Algorithms: ctb (central token bucket, the reference), crd (central random drop), \
gtb (global token bucket), grd (global random drop as in the paper), grd-smooth \
(GRD with an integral controller on the global forwarded rate), fps (flow \
proportional share as in the paper), fps-mean (experimental: FPS with a mean-based estimate of an \
unbottlenecked flow's rate), fps-lrd (FPS enforcing its share by local random drop instead of a \
token bucket, the paper's footnote 3), static (static 1/N: a token bucket at limit/N per limiter, \
the paper's §5.7 baseline)."
)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, clap::Subcommand)]
enum Which {
    /// The paper's baseline (§5.1) with every parameter adjustable.
    Baseline(Box<Flags>),
    /// Figure 3: forwarding-rate time series of each algorithm (3 vs 7 flows).
    Fig3(Box<Flags>),
    /// Figure 4: histograms of the aggregate rate at short timescales.
    Fig4(Box<Flags>),
    /// Figure 5: Jain's fairness index over 10 runs, quantiles against CTB.
    Fig5(Box<Flags>),
    /// Figure 6: flows join 5 limiters one every 10 s, then leave (CTB, GRD at
    /// 500 and 50 ms, FPS at 500 ms).
    Fig6(FigureFlags),
    /// Figure 7: a 2 Mbps upstream bottleneck on the 7-flow limiter at 15 s,
    /// an unbottlenecked flow joining it at 31 s (limiter 2 should reach 40 %).
    Fig7(FigureFlags),
    /// Figure 8: rate, fairness and control bytes against the number of
    /// limiters (10-490), gossip branching 1-7, 5 % gossip loss.
    Fig8(super::sim_fig8::Args),
    /// Figure 9: 10 sites at 5 Mbps, demand moving to 4 sites every 30 s
    /// (static 1/N against FPS; branching 4, 0.47 % gossip loss).
    Fig9(FigureFlags),
    /// Table 1: 10 bulk flows against Poisson Web requests (15/s, lognormal
    /// object sizes with a Pareto tail, handshakes with 3 s SYN timeouts);
    /// CTB, GRD, FPS, and GRD with the SYN-ACKs unpoliced.
    Table1(FigureFlags),
    /// Table 2: 3 flows with a 100 ms RTT against 7 with a 10 ms RTT.
    Table2(FigureFlags),
    /// Fault harness: a protocol's invariant over many seeded fault scenarios.
    ///
    /// Runs the protocol's state machines (orbit) on virtual time with loss,
    /// delay, duplication, crashes and partitions, checking its invariant
    /// after every event.
    Faults(super::sim_faults::Args),
}

/// Flags of the figure commands (fig6, fig7, fig9, table1, table2): the
/// scenario is the figure's (see `drl sim <figure> --help` and EXPERIMENTS.md).
#[derive(Debug, Clone, clap::Args)]
struct FigureFlags {
    /// Seed of the first run (run k uses seed + k).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per variant [default: 10 for the tables, 1 for the figures].
    #[arg(long)]
    runs: Option<u32>,
    /// Simulated seconds per run [default: the figure's: fig6 90, fig7 60,
    /// fig9 120, table1 60, table2 60].
    #[arg(long)]
    duration: Option<f64>,
    /// How limiters aggregate each other's values: flow-updating (what
    /// `drl serve` runs by default), peer-table or push-sum.
    #[arg(long, default_value_t = Aggregation::default())]
    aggregation: Aggregation,
    /// How GRD draws its drops: independent (the paper's: one draw per
    /// packet) or dithered (the service's default: each draw tilted so that
    /// the count forwarded stays at its expectation).
    #[arg(long, default_value = "independent")]
    grd_draws: GrdDraws,
    /// Window of the rate time series (rates.csv and the SVG), ms.
    #[arg(long, default_value_t = 500)]
    series_ms: u64,
    /// Output directory [default: sim-out/<figure>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct Flags {
    /// Algorithms to compare (ctb, crd, gtb, grd, grd-smooth, fps, fps-mean,
    /// fps-lrd, static) [default: ctb,gtb,grd,fps; fig5 adds crd].
    /// grd-smooth is not a default: beyond two limiters its drop
    /// probabilities drift apart (EXPERIMENTS.md).
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
    /// Round-trip time of the flows, ms: one value for all, or one per
    /// limiter (`100,10`: the paper's Table 2).
    #[arg(long, value_delimiter = ',', default_value = "40")]
    flow_rtt_ms: Vec<f64>,
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
    /// How limiters aggregate each other's values: flow-updating (what
    /// `drl serve` runs by default: averaging by idempotent per-link
    /// flows), peer-table (each node's latest value, per peer) or push-sum
    /// (the paper's mass-conserving averaging).
    #[arg(long, default_value_t = Aggregation::default())]
    aggregation: Aggregation,
    /// How GRD draws its drops: independent (the paper's: one draw per
    /// packet) or dithered (the service's default: each draw tilted so that
    /// the count forwarded stays at its expectation).
    #[arg(long, default_value = "independent")]
    grd_draws: GrdDraws,
    /// Extra random gossip delay, uniform in [0, ms) per message (reorders).
    #[arg(long, default_value_t = 0.0)]
    gossip_jitter_ms: f64,
    /// Probability that a gossip message is delivered twice.
    #[arg(long, default_value_t = 0.0)]
    gossip_duplicate: f64,
    /// Membership's failure-detection time, ms: a killed or cut-off limiter
    /// is declared down this long after; a heal or restart is learnt within
    /// it (at a random moment per limiter).
    #[arg(long, default_value_t = 1200.0)]
    detection_ms: f64,
    /// Peer values older than this count as 0, ms [default: the service's,
    /// max(2 x detection, 10 x ceil((N-1)/branching) intervals)].
    #[arg(long)]
    stale_after_ms: Option<f64>,
    /// The 1/N rule raises the limit in force at most from 0 to the whole
    /// limit in this time, ms [default: 2 x ceil((N-1)/branching)
    /// intervals, at most 1 s].
    #[arg(long)]
    rise_ms: Option<f64>,
    /// fps: most flows in the sample set.
    #[arg(long, default_value_t = 128)]
    fps_sample_capacity: usize,
    /// fps: probability that an arrival of an unsampled flow adds it.
    #[arg(long, default_value_t = 0.1)]
    fps_resample_probability: f64,
    /// fps: sampled flows idle this long are dropped, ms.
    #[arg(long, default_value_t = 3000.0)]
    fps_flow_expiry_ms: f64,
    /// fps: upper bound on a published weight, in flows (a safety net).
    #[arg(long, default_value_t = 1_000_000.0)]
    fps_max_weight: f64,
    /// grd-smooth: upper bound on the drop probability.
    #[arg(long, default_value_t = 0.5)]
    grd_max_probability: f64,
    /// Kill limiter N (0-based) at time T: `--kill 1@30s` (repeatable).
    #[arg(long, value_name = "N@T")]
    kill: Vec<String>,
    /// Restart limiter N with fresh state at time T: `--restart 1@40s`.
    #[arg(long, value_name = "N@T")]
    restart: Vec<String>,
    /// Cut gossip between groups of limiters from T1 to T2:
    /// `--partition 0,1/2@20s-40s` (limiters not listed join the first
    /// group; repeatable, one partition at a time).
    #[arg(long, value_name = "A,B/C@T1-T2")]
    partition: Vec<String>,
    /// Random loss probability on each flow's path to its limiter.
    #[arg(long, default_value_t = 0.0)]
    data_loss: f64,
    /// Flows start uniformly at random within this many ms.
    #[arg(long, default_value_t = 500.0)]
    start_spread_ms: f64,
    /// Per-packet host jitter, µs (uniform in [0, jitter)): one tick of the
    /// paper's senders' kernel clock; under ~1 ms all flows phase-lock
    /// (EXPERIMENTS.md, "Phase lock").
    #[arg(long, default_value_t = drl_sim::scenario::DEFAULT_JITTER as f64 / 1e3)]
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

/// `30s`, `1500ms`, `2m`: a time for fault flags (a bare number is seconds).
fn parse_time(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let ms_per = match unit {
        "ms" => 1.0,
        "s" => 1e3,
        "m" | "min" => 60e3,
        other => anyhow::bail!("unknown time unit {other:?} (ms, s, m)"),
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("{num:?} is not a number"))?;
    ns(v * ms_per, "a time")
}

/// `N@T`.
fn parse_node_at(s: &str) -> anyhow::Result<(u32, u64)> {
    let (n, t) = s
        .split_once('@')
        .context("expected NODE@TIME, e.g. 1@30s")?;
    let node = n
        .trim()
        .parse()
        .with_context(|| format!("{n:?} is not a limiter number"))?;
    Ok((node, parse_time(t)?))
}

/// `A,B/C@T1-T2`.
fn parse_partition(s: &str) -> anyhow::Result<FaultEvent> {
    let (groups, span) = s
        .split_once('@')
        .context("expected GROUPS@FROM-UNTIL, e.g. 0,1/2@20s-40s")?;
    let (from, until) = span
        .split_once('-')
        .context("expected a span FROM-UNTIL, e.g. 20s-40s")?;
    let groups: Vec<Vec<u32>> = groups
        .split('/')
        .map(|g| {
            g.split(',')
                .filter(|x| !x.trim().is_empty())
                .map(|x| {
                    x.trim()
                        .parse::<u32>()
                        .with_context(|| format!("{x:?} is not a limiter number"))
                })
                .collect::<anyhow::Result<Vec<u32>>>()
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        groups.len() >= 2,
        "a partition needs at least two groups separated by '/'"
    );
    Ok(FaultEvent::Partition {
        groups,
        from: parse_time(from)?,
        until: parse_time(until)?,
    })
}

fn build(which: &str, f: &Flags) -> anyhow::Result<Experiment> {
    use AlgorithmKind::*;
    let default_algs = drl_sim::experiment::default_algorithms(which);
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
    let rtts = f
        .flow_rtt_ms
        .iter()
        .map(|&ms| ns(ms, "--flow-rtt-ms"))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    match rtts.as_slice() {
        [one] => base.flow_rtt = *one,
        many => {
            anyhow::ensure!(
                many.len() == f.flows.len(),
                "--flow-rtt-ms takes one value or one per limiter ({} limiters, {} values)",
                f.flows.len(),
                many.len()
            );
            base.limiter_flow_rtts = many.to_vec();
        }
    }
    base.limiter_rtt = ns(f.limiter_rtt_ms, "--limiter-rtt-ms")?;
    base.estimate_interval = ns(f.interval_ms, "--interval-ms")?;
    base.ewma = f.ewma;
    base.depth_bytes = f.depth_bytes;
    base.branching = f.branching;
    base.gossip_loss = f.gossip_loss;
    base.compensation = compensation;
    base.data_loss = f.data_loss;
    base.aggregation = f.aggregation;
    base.grd_draws = f.grd_draws;
    base.gossip_jitter = ns(f.gossip_jitter_ms, "--gossip-jitter-ms")?;
    base.gossip_duplicate = f.gossip_duplicate;
    base.detection = ns(f.detection_ms, "--detection-ms")?;
    base.stale_after = f
        .stale_after_ms
        .map(|ms| ns(ms, "--stale-after-ms"))
        .transpose()?;
    for k in &f.kill {
        let (node, at) = parse_node_at(k).with_context(|| format!("--kill {k:?}"))?;
        base.faults.push(FaultEvent::Kill { node, at });
    }
    for k in &f.restart {
        let (node, at) = parse_node_at(k).with_context(|| format!("--restart {k:?}"))?;
        base.faults.push(FaultEvent::Restart { node, at });
    }
    for p in &f.partition {
        base.faults
            .push(parse_partition(p).with_context(|| format!("--partition {p:?}"))?);
    }
    base.start_spread = ns(f.start_spread_ms, "--start-spread-ms")?;
    base.jitter = ns(f.jitter_us / 1e3, "--jitter-us")?;
    base.packet_bytes = f.packet_bytes;
    base.link_bps = (f.link_mbps * 1e6).round() as u64;
    base.grd_smooth.gain = f.grd_gain;
    base.grd_smooth.max_probability = f.grd_max_probability;
    base.rise = f.rise_ms.map(|ms| ns(ms, "--rise-ms")).transpose()?;
    for fps in [&mut base.fps, &mut base.fps_mean] {
        fps.sample_capacity = f.fps_sample_capacity;
        fps.resample_probability = f.fps_resample_probability;
        fps.flow_expiry = ns(f.fps_flow_expiry_ms, "--fps-flow-expiry-ms")?;
        fps.max_weight = f.fps_max_weight;
    }
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

fn progress_bar(quiet: bool, total: u64) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    b.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// Runs one of the figure commands.
fn run_figure(
    fig: drl_sim::figures::catalog::Figure,
    f: &FigureFlags,
) -> anyhow::Result<std::process::ExitCode> {
    let opts = drl_sim::figures::common::FigureOptions {
        seed: f.seed,
        runs: f.runs,
        aggregation: f.aggregation,
        grd_draws: f.grd_draws,
        duration: f
            .duration
            .map(|d| {
                anyhow::ensure!(d > 0.0, "--duration must be positive");
                ns(d * 1e3, "--duration")
            })
            .transpose()?,
    };
    anyhow::ensure!(f.runs != Some(0), "--runs must be at least 1");
    anyhow::ensure!(f.series_ms > 0, "--series-ms must be positive");
    let plan = fig.plan(&opts);
    for v in &plan.variants {
        v.scenario
            .validate()
            .with_context(|| format!("invalid parameters for {}", v.label))?;
    }
    let out = f
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sim-out").join(fig.name()));
    let secs = plan
        .variants
        .first()
        .map_or(1, |v| (v.scenario.duration / SEC).max(1));
    let bar = progress_bar(
        f.quiet,
        plan.variants.len() as u64 * plan.runs as u64 * secs,
    );
    let started = Instant::now();
    let runs = plan.run(&mut |p: Progress| {
        bar.set_position(p.runs_done as u64 * secs + (p.current * secs as f64) as u64);
        bar.set_message(format!(
            "run {}/{}",
            (p.runs_done + 1).min(p.runs_total),
            p.runs_total
        ));
    })?;
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let files = fig
        .write(&plan, &runs, &out, f.series_ms * MS)
        .with_context(|| format!("writing results to {}", out.display()))?;
    println!(
        "{}: {} variant(s) x {} run(s) x {} s simulated in {:.2} s",
        fig.name(),
        plan.variants.len(),
        plan.runs,
        secs,
        elapsed.as_secs_f64()
    );
    for line in fig.report(&runs) {
        println!("{line}");
    }
    println!("wrote {} files to {}", files.len(), out.display());
    Ok(std::process::ExitCode::SUCCESS)
}

/// Runs `drl sim`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let (which, flags) = match &args.which {
        Which::Baseline(f) => ("baseline", f),
        Which::Fig3(f) => ("fig3", f),
        Which::Fig4(f) => ("fig4", f),
        Which::Fig5(f) => ("fig5", f),
        Which::Fig6(f) => return run_figure(drl_sim::figures::catalog::Figure::Fig6, f),
        Which::Fig7(f) => return run_figure(drl_sim::figures::catalog::Figure::Fig7, f),
        Which::Fig8(a) => return super::sim_fig8::run(a),
        Which::Fig9(f) => return run_figure(drl_sim::figures::catalog::Figure::Fig9, f),
        Which::Table1(f) => return run_figure(drl_sim::figures::catalog::Figure::Table1, f),
        Which::Table2(f) => return run_figure(drl_sim::figures::catalog::Figure::Table2, f),
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
