//! `drl serve`: run the rate-limit service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `drl serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Config file: drl's YAML, an envoyproxy/ratelimit or a limitador
    /// file; or a directory of them (every *.yaml/*.yml, one domain per
    /// envoyproxy/ratelimit file, at most one drl file). Without it, the
    /// embedded default (limit `default`: gcra 100/s, burst 20).
    #[arg(long, short = 'c', env = "DRL_CONFIG")]
    pub config: Option<PathBuf>,
    /// HTTP listen address (overrides `listen.http`), e.g. 127.0.0.1:8080.
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// gRPC listen address (overrides `listen.grpc`), e.g. 127.0.0.1:8081.
    #[arg(long)]
    pub grpc: Option<SocketAddr>,
    /// Do not reload when the config file changes (SIGHUP still reloads).
    #[arg(long)]
    pub no_watch: bool,
    /// Start even when the --config file or directory cannot be loaded
    /// (unreadable, invalid, or refused by the checks `drl config check`
    /// makes), as envoyproxy/ratelimit does: the error is logged, the
    /// service listens on --http/--grpc (else 127.0.0.1:8080 and :8081)
    /// with every other setting at its default, answers every decision on
    /// every API with an error ("no rate limit configuration loaded"; gRPC
    /// UNAVAILABLE, HTTP 503), never an allow, and reports not serving
    /// (gRPC health, /readyz) until a reload (file change or SIGHUP) loads
    /// the config; from then on it serves as if started with it. Without
    /// it, a config that cannot be loaded stops the start. Needs --config.
    #[arg(
        long,
        env = "DRL_WAIT_FOR_CONFIG",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub wait_for_config: bool,
    /// Threads (default: one per core): as many connection threads, each
    /// serving the connections handed to it on a runtime of its own, and
    /// as many worker threads for everything else (docs/server.md,
    /// "Runtime threads").
    #[arg(long)]
    pub threads: Option<usize>,
    /// How connections are scheduled: `per-thread` (default) hands each
    /// connection to one connection thread for its life; `shared` runs
    /// every connection as a task the worker threads steal from each other.
    #[arg(long, value_enum, default_value_t = Scheduler::PerThread)]
    pub scheduler: Scheduler,
    /// Log as JSON lines (default: human-readable). Filter with RUST_LOG.
    #[arg(long)]
    pub log_json: bool,
}

/// Runs `drl serve` until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Without a file, the embedded default always loads: nothing to wait for.
    if args.wait_for_config && args.config.is_none() {
        anyhow::bail!(
            "--wait-for-config (DRL_WAIT_FOR_CONFIG) needs --config (DRL_CONFIG): the embedded default always loads"
        );
    }
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
    let threads = match args.threads {
        Some(n) => n.max(1),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all().worker_threads(threads);
    let rt = rt.build()?;
    if args.scheduler == Scheduler::PerThread {
        drl_server::conn_threads::start(threads)?;
    }
    rt.block_on(drl_server::serve(drl_server::ServeOptions {
        config: args.config,
        http: args.http,
        grpc: args.grpc,
        watch: !args.no_watch,
        wait_for_config: args.wait_for_config,
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// How `drl serve` schedules its connections (`--scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduler {
    /// Each connection lives on one connection thread (a single-threaded
    /// runtime), handed out in turn.
    PerThread,
    /// Every connection is a task on the shared work-stealing runtime.
    Shared,
}
