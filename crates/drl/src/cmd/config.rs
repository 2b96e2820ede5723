//! `drl config`: check configuration files, print the default.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `drl config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Check a config file (drl's, envoyproxy/ratelimit's or a limitador
    /// limits file, or a directory of them) as `drl serve` checks it at
    /// start: the file, its
    /// limits, TLS files, token files and cluster keys. Errors name the
    /// line and column; warnings (secrets readable by every user,
    /// certificates expired or expiring within 14 days) go to stderr.
    /// Exit status 1 if `drl serve` would refuse it.
    Check {
        /// The file.
        file: PathBuf,
        /// Do not read the files the config names (TLS keys and
        /// certificates, token files, cluster keys): to lint a config away
        /// from the secrets it is deployed with. `drl serve` reads them.
        #[arg(long)]
        skip_files: bool,
    },
    /// Print the embedded default configuration.
    Default,
}

/// Runs `drl config`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Sub::Check { file, skip_files } => match drl_server::preflight::check_file(
            &file,
            if skip_files {
                drl_server::preflight::Files::Skip
            } else {
                drl_server::preflight::Files::Read
            },
        ) {
            Ok(checked) => {
                for w in &checked.warnings {
                    eprintln!("warning: {w}");
                }
                let cfg = checked.config;
                println!(
                    "{}: ok ({} limits, {} envoy domains, {} limitador limits)",
                    file.display(),
                    cfg.limits.len(),
                    cfg.envoy.len(),
                    cfg.limitador.iter().map(|s| s.limits.len()).sum::<usize>()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(ExitCode::from(1))
            }
        },
        Sub::Default => {
            print!("{}", drl_config::EMBEDDED_DEFAULT);
            Ok(ExitCode::SUCCESS)
        }
    }
}
