//! `drl sim fig8`: the paper's Figure 8 (§5.6) on the service's Cloud
//! Control node — delivered rate, fairness and control bytes against the
//! number of limiters, for several gossip branching factors, under loss.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use drl_cluster::alloc::AlgorithmKind;
use drl_cluster::cloud_control::Aggregation;
use drl_sim::figures::fig8::Fig8;
use drl_sim::scenario::{MS, SEC};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Arguments of `drl sim fig8`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "The paper's setup: a 50 Mbps global limit, 40 ms flow and \
inter-limiter RTTs, 0-5 long-lived TCP flows per limiter (the same draw for every \
algorithm and branching), one flow starting every 100 ms in random order, each living \
60 s. Control traffic is the node's payload plus 79 bytes per datagram (drl-cluster-net's \
encrypted frame, IPv4 and UDP). Writes fig8.csv, seconds.csv, summary.json and \
fig8.svg. EXPERIMENTS.md, \"Figure 8\"."
)]
pub struct Args {
    /// Numbers of limiters (the x axis).
    #[arg(long, value_delimiter = ',', default_value = "10,50,100,250,490")]
    limiters: Vec<usize>,
    /// Gossip branching factors (one line each).
    #[arg(long, value_delimiter = ',', default_value = "1,3,7")]
    branching: Vec<u32>,
    /// Algorithms.
    #[arg(long, value_delimiter = ',', default_value = "fps,grd")]
    algorithms: Vec<AlgorithmKind>,
    /// Gossip loss probability per datagram.
    #[arg(long, default_value_t = 0.05)]
    loss: f64,
    /// How limiters aggregate each other's values: flow-updating (what
    /// `drl serve` runs by default), peer-table or push-sum.
    #[arg(long, default_value_t = Aggregation::default())]
    aggregation: Aggregation,
    /// Simulated seconds per run.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Seconds excluded from the measurement window at the start.
    #[arg(long, default_value_t = 20)]
    warmup: u64,
    /// Most long-lived flows per limiter (uniform in 0..=max).
    #[arg(long, default_value_t = 5)]
    max_flows: u32,
    /// Milliseconds between flow starts (0: all start within the first 5 s
    /// and live to the end).
    #[arg(long, default_value_t = 100)]
    churn_every_ms: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory.
    #[arg(long, default_value = "sim-out/fig8")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `drl sim fig8`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        (0.0..1.0).contains(&a.loss),
        "--loss must be in [0, 1), got {}",
        a.loss
    );
    anyhow::ensure!(a.duration > 0, "--duration must be positive");
    anyhow::ensure!(
        a.warmup < a.duration,
        "--warmup ({} s) must be under --duration ({} s)",
        a.warmup,
        a.duration
    );
    let mut f = Fig8::paper(a.loss, a.duration, a.warmup);
    f.limiters.clone_from(&a.limiters);
    f.branchings.clone_from(&a.branching);
    f.algorithms.clone_from(&a.algorithms);
    f.max_flows = a.max_flows;
    f.base.aggregation = a.aggregation;
    f.base.seed = a.seed;
    if a.churn_every_ms == 0 {
        f.churn = None;
        f.base.start_spread = 5 * SEC;
    } else if let Some(c) = &mut f.churn {
        c.every = a.churn_every_ms * MS;
    }
    f.validate().context("invalid parameters for fig8")?;
    let total_runs = (f.limiters.len() * f.branchings.len() * f.algorithms.len()) as u64;
    let bar = if a.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(
            Some(total_runs * a.duration),
            ProgressDrawTarget::stderr(),
        );
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let started = Instant::now();
    let res = f.run(&mut |(done, total, frac)| {
        bar.set_position(done as u64 * a.duration + (frac * a.duration as f64) as u64);
        bar.set_message(format!("run {}/{}", (done + 1).min(total), total));
    })?;
    bar.finish_and_clear();
    let files = res
        .write_all(&a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    println!(
        "fig8: {total_runs} run(s) x {} s simulated in {:.1} s",
        a.duration,
        started.elapsed().as_secs_f64()
    );
    for p in &res.points {
        println!(
            "{:>8} br {} {:>5} limiters: {:7.2} Mbps (1 s: {:.1}-{:.1}), Jain {:.3}, \
             control {:.0} B/s per limiter ({:.2} % of the limit)",
            p.algorithm,
            p.branching,
            p.limiters,
            p.aggregate_mbps,
            p.min_1s_mbps,
            p.max_1s_mbps,
            p.jain,
            p.control_bytes_per_s_per_limiter,
            p.control_fraction_of_limit * 100.0
        );
    }
    println!("wrote {} files to {}", files.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}
