//! `drl sim faults`: run a protocol's deterministic fault harness over many
//! seeds (`drl_sim::faults`), stop at the first broken invariant and print
//! the command that replays that one seed.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use drl_core::Nanos;
use drl_sim::faults::{self, Failure, Protocol, Totals};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Arguments of `drl sim faults`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each seed draws a whole scenario (ring size, protocol configuration, \
workload and faults) and runs the real protocol state machines on virtual time: \
messages go through the wire codec and are lost, delayed (hence reordered) and \
duplicated; nodes crash and restart; the network partitions and heals; the failure \
detector lags and wrongly suspects live peers. The protocol's invariant (for orbit: \
admitted <= cap for every key and window, capacity conserved, at most one live table \
per window and lane) is checked after every event. For gossip (Cloud Control nodes, \
the `scope: gossip` node): 3-12 nodes, loss up to 20 %, kills and restarts, \
partitions and heals, membership that lags and wrongly suspects live peers; every \
1 s window must admit at most the limit + 10 % (each partition side k/N + 10 %, the \
survivors of a kill (N-1)/N + 10 %) and, in steady state with the peer table or Flow \
Updating, at least the limit - 10 %. Half the seeds run Flow Updating (the default \
aggregation), a quarter each the peer table and push-sum.\n\n\
Seeds --first-seed .. --first-seed + --seeds - 1 run in order. On success one line \
sums them up (seeds, admitted cost, crashes, partitions, simulated and wall time) \
and the exit status is 0. The first failing seed stops the run: the violation, the \
scenario and the command that reproduces that seed alone (drl sim faults --protocol P \
--first-seed S --seeds 1) are printed, and the exit status is 1. The same seed always \
gives the same run."
)]
pub struct Args {
    /// Protocol whose fault harness to run.
    #[arg(long, value_parser = protocol_parser())]
    protocol: Protocol,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed of the range.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `--protocol`: one of the names in `Protocol::ALL` (listed in `--help`
/// and in the error for any other value).
fn protocol_parser() -> impl TypedValueParser<Value = Protocol> {
    PossibleValuesParser::new(Protocol::ALL.iter().map(|p| p.name())).map(|name: String| {
        name.parse::<Protocol>()
            .expect("the parser accepts only names from Protocol::ALL")
    })
}

/// Runs `drl sim faults`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.seeds >= 1, "--seeds must be at least 1");
    anyhow::ensure!(
        args.first_seed.checked_add(args.seeds - 1).is_some(),
        "--first-seed {} + --seeds {} goes past the largest seed ({})",
        args.first_seed,
        args.seeds,
        u64::MAX
    );
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(args.seeds), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} seeds",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let started = Instant::now();
    let mut passed = 0u64;
    let result = faults::run_seeds(args.protocol, args.first_seed, args.seeds, &mut |done| {
        passed = done;
        bar.set_position(done);
    });
    bar.finish_and_clear();
    match result {
        Ok(totals) => {
            println!(
                "{}",
                summary(args.protocol, args.first_seed, &totals, started.elapsed())
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            eprintln!("{}", failure_report(&failure, passed));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The one-line summary of a passing run.
fn summary(protocol: Protocol, first: u64, t: &Totals, wall: Duration) -> String {
    let last = first + t.seeds.saturating_sub(1);
    format!(
        "{protocol}: {} seeds ({first}..={last}) passed: admitted {}, {} crashes, \
         {} partitions, {} events, {} simulated in {:.2} s",
        t.seeds,
        t.admitted,
        t.crashes,
        t.partitions,
        t.events,
        secs(t.simulated),
        wall.as_secs_f64()
    )
}

/// Virtual time in seconds, for the summary.
fn secs(ns: Nanos) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

/// What to print for the first failing seed: the violation, the scenario,
/// and the command that replays that seed alone (last, easy to copy).
fn failure_report(f: &Failure, passed: u64) -> String {
    format!(
        "{p}: seed {seed} FAILED ({passed} seeds passed before it)\n\
         violation: {violation}\n\
         scenario: {scenario}\n\
         reproduce: drl sim faults --protocol {p} --first-seed {seed} --seeds 1",
        p = f.protocol,
        seed = f.seed,
        violation = f.violation,
        scenario = f.scenario,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_every_total() {
        let t = Totals {
            seeds: 3,
            admitted: 120,
            crashes: 2,
            partitions: 1,
            events: 900,
            messages: 400,
            simulated: 1_500_000_000,
        };
        assert_eq!(
            summary(Protocol::Orbit, 7, &t, Duration::from_millis(250)),
            "orbit: 3 seeds (7..=9) passed: admitted 120, 2 crashes, 1 partitions, \
             900 events, 1.5 s simulated in 0.25 s"
        );
    }

    #[test]
    fn failure_report_ends_with_the_reproduce_command() {
        let f = Failure {
            protocol: Protocol::Orbit,
            seed: 42,
            violation: "invariant violated at t=5ns (event 3): boom".into(),
            scenario: "SimConfig { .. }".into(),
        };
        let r = failure_report(&f, 12);
        assert!(r.starts_with("orbit: seed 42 FAILED (12 seeds passed before it)\n"));
        assert!(r.contains("violation: invariant violated at t=5ns (event 3): boom\n"));
        assert!(
            r.ends_with("reproduce: drl sim faults --protocol orbit --first-seed 42 --seeds 1")
        );
    }
}
