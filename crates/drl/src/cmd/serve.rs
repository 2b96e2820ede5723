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
    /// Worker threads (default: one per core); every connection is a task
    /// the threads share (docs/server.md, "Runtime threads").
    #[arg(long)]
    pub threads: Option<usize>,
    /// Log as JSON lines (default: human-readable). Filter with RUST_LOG.
    #[arg(long)]
    pub log_json: bool,
}

/// Runs `drl serve` until SIGTERM/SIGINT.
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
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build()?;
    rt.block_on(drl_server::serve(drl_server::ServeOptions {
        config: args.config,
        http: args.http,
        grpc: args.grpc,
        watch: !args.no_watch,
    }))?;
    Ok(ExitCode::SUCCESS)
}
