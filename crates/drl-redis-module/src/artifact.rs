//! Builds the module's shared library and returns its path, for tests and
//! benchmarks that start `redis-server --loadmodule PATH`.
//!
//! [`path`] runs `$CARGO build -p drl-redis-module` (the `cargo` that runs
//! the current test or bench, else `cargo` on `PATH`) with the same profile
//! and target directory as the running executable, so it reuses that
//! build's artifacts. Cargo holds no lock while a test binary runs, so
//! calling it from inside `cargo test` does not deadlock.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of the module's shared library (`libdrl_redis_module.so` on
/// Linux), built (once per process) if needed. The error says what failed.
pub fn path() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

/// Where the running executable's profile directory is (`target/debug`,
/// `target/release`, or `target/<triple>/<profile>`).
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))?;
    // Test and bench binaries live in PROFILE/deps, examples in PROFILE/examples.
    if matches!(
        dir.file_name().and_then(|n| n.to_str()),
        Some("deps" | "examples")
    ) {
        dir = dir.parent().unwrap_or(dir);
    }
    Ok(dir.to_path_buf())
}

fn build() -> Result<PathBuf, String> {
    let profile_dir = profile_dir()?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("no profile in {}", profile_dir.display()))?
        .to_string();
    let mut target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("no target dir above {}", profile_dir.display()))?
        .to_path_buf();
    // target/<triple>/<profile>: the root has Cargo's CACHEDIR.TAG.
    let mut triple = None;
    if !target_dir.join("CACHEDIR.TAG").exists()
        && let Some(parent) = target_dir.parent()
        && parent.join("CACHEDIR.TAG").exists()
    {
        triple = target_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string);
        target_dir = parent.to_path_buf();
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("-p")
        .arg("drl-redis-module")
        .arg("--lib")
        .arg("--target-dir")
        .arg(&target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.arg("--profile").arg(other);
        }
    }
    if let Some(t) = &triple {
        cmd.arg("--target").arg(t);
    }
    let out = cmd.output().map_err(|e| {
        format!(
            "could not run {} to build the drl Redis module: {e}",
            Path::new(&cargo).display()
        )
    })?;
    if !out.status.success() {
        return Err(format!(
            "building the drl Redis module failed ({:?}):\n{}",
            cmd,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let so = profile_dir.join(format!(
        "{}drl_redis_module{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    if !so.exists() {
        return Err(format!(
            "cargo built the drl Redis module but {} does not exist",
            so.display()
        ));
    }
    Ok(so)
}
