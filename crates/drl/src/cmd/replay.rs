//! `drl replay`: decide a CSV trace offline.

/// Arguments of `drl replay`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `drl replay`.
pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not yet implemented")
}
