//! `drl relay`: the packet-level limiter (NFQUEUE; docs/relay.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use drl_relay::RelayConfig;
use drl_relay::iptables::Rules;

/// Arguments of `drl relay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The relay's config (relay.yaml: queue, chain, classes with quotas,
    /// algorithm, scope, cluster). See docs/relay.md.
    #[arg(long, short = 'c')]
    pub config: PathBuf,
    /// Check the config and exit (prints the iptables rules it would add).
    #[arg(long)]
    pub check: bool,
    /// Print the iptables commands that capture the config's packets (for
    /// `install_rules: false`) and exit.
    #[arg(long)]
    pub print_rules: bool,
    /// Remove the rules a relay of this config's queue left (after a
    /// SIGKILL) and exit.
    #[arg(long)]
    pub cleanup: bool,
    /// Benchmark baseline: accept every queued packet without parsing,
    /// classifying or deciding (same queue, same batching).
    #[arg(long, hide = true)]
    pub accept_all: bool,
    /// Log as JSON lines (default: human-readable). Filter with RUST_LOG.
    #[arg(long)]
    pub log_json: bool,
}

/// Runs `drl relay` until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
    let mut cfg = RelayConfig::load(&args.config)?;
    cfg.accept_all = args.accept_all;
    let rules = Rules::plan(&cfg);
    if args.check || args.print_rules {
        if args.check {
            println!(
                "{}: ok ({} classes, algorithm {}, scope {:?}, queue {})",
                args.config.display(),
                cfg.classes.len(),
                cfg.algorithm,
                cfg.scope,
                cfg.queue
            );
        }
        for cmd in rules.commands(&cfg) {
            println!("{}", shell_join(&cmd));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.cleanup {
        let mut rules = rules;
        let removed = rules.cleanup();
        println!(
            "{}: {}",
            rules.chain(),
            if removed {
                "rules removed"
            } else {
                "no rules found"
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let stop = Arc::new(AtomicBool::new(false));
    drl_relay::run(cfg, stop, |listen| match listen {
        Some(a) => eprintln!("drl relay: running; metrics on http://{a}/metrics"),
        None => eprintln!("drl relay: running"),
    })?;
    eprintln!("drl relay: stopped, rules removed");
    Ok(ExitCode::SUCCESS)
}

fn shell_join(cmd: &[String]) -> String {
    cmd.iter()
        .map(|a| {
            if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
