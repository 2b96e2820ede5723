//! `drl`: the one binary. Each subcommand lives in `cmd/<name>.rs`.

mod cmd;

use clap::{Parser, Subcommand};

/// drl: a distributed rate limiter.
#[derive(Debug, Parser)]
#[command(name = "drl", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decide a CSV trace of requests offline, as a limit would have.
    Replay(cmd::replay::Args),
    /// Run the rate-limit service (HTTP, gRPC, Envoy RLS).
    Serve(cmd::serve::Args),
    /// Work with configuration files (`drl config check FILE`).
    Config(cmd::config::Args),
    /// Simulate distributed rate limiters; reproduce the paper's figures.
    Sim(cmd::sim::Args),
    /// Limit real packets (NFQUEUE) with Cloud Control, locally or by gossip.
    Relay(cmd::relay::Args),
    /// The Cloud Control testbed: sites in network namespaces on real TCP.
    Testbed(cmd::testbed::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => cmd::replay::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Config(args) => cmd::config::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Relay(args) => cmd::relay::run(args),
        Command::Testbed(args) => cmd::testbed::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("drl: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
