//! `drl-soak`: see the library's documentation and RELIABILITY.md.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use drl_soak::run::{Options, run};
use drl_soak::topology::Broken;

/// drl's endurance run: real processes, mixed load, seeded faults, checks
/// every second from the clients' counts. Exits 1 if any check failed.
#[derive(Parser)]
#[command(name = "drl-soak")]
struct Args {
    /// How long the load runs, in minutes (fractions allowed).
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seed of the fault schedule and the flood keys.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the results (CSV, check log, summary, node logs).
    #[arg(long)]
    out: PathBuf,
    /// The `drl` binary (default: `drl` next to this executable).
    #[arg(long)]
    drl: Option<PathBuf>,
    /// Self-test: a deliberate misconfiguration the checks must catch
    /// (`orbit-local`: one Orbit node enforces the cap alone).
    #[arg(long)]
    broken: Option<String>,
    /// Report gossip (GRD) seconds over the limit + 10 % without failing
    /// the run (for clusters run with `grd_draws: independent`).
    #[arg(long)]
    gossip_advisory: bool,
}

fn main() {
    let a = Args::parse();
    let drl = a.drl.unwrap_or_else(|| {
        let me = std::env::current_exe().expect("current exe");
        me.with_file_name("drl")
    });
    if !drl.is_file() {
        eprintln!(
            "drl-soak: no drl binary at {} (build it: cargo build -p drl, or pass --drl)",
            drl.display()
        );
        std::process::exit(2);
    }
    let broken = match a.broken.as_deref().map(Broken::parse).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("drl-soak: {e}");
            std::process::exit(2);
        }
    };
    let opts = Options {
        duration: Duration::from_secs_f64(a.minutes * 60.0),
        seed: a.seed,
        out: a.out,
        drl,
        broken,
        gossip_advisory: a.gossip_advisory,
    };
    match run(&opts) {
        Ok(r) => {
            print!("{}", r.summary);
            println!("results: {}", opts.out.display());
            std::process::exit(if r.failures.is_empty() { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("drl-soak: {e:#}");
            std::process::exit(2);
        }
    }
}
