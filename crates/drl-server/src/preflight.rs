//! What `drl serve` checks of a config before it binds anything, shared
//! with `drl config check`, so that the two refuse exactly the same
//! files: the config itself (an empty file is refused), its limits
//! compiled, the TLS certificates and keys, the token files, the cluster
//! keys. Also the warnings an operator should see at both: secrets
//! readable by every user, certificates expired or about to expire.

use std::path::Path;
use std::time::{Duration, SystemTime};

use drl_config::{Config, Scope};

/// A certificate expiring within this long is warned about.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// A config that passed every check `drl serve` makes before binding.
#[derive(Debug)]
pub struct Checked {
    /// The config.
    pub config: Config,
    /// What is unsafe but not refused, one line each.
    pub warnings: Vec<String>,
}

/// Whether the files a config names (keys, certificates, token files) are
/// read and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    /// Read and check them, as `drl serve` does at start.
    Read,
    /// Leave them out: for linting a config away from the secrets it will
    /// be deployed with (a Kubernetes ConfigMap without its Secret).
    Skip,
}

/// Loads `path` and checks it as `drl serve` would at start.
pub fn check_file(path: &Path, files: Files) -> Result<Checked, String> {
    let config = drl_service::engine::load_config_file(path).map_err(|e| e.to_string())?;
    // The limits compile, as `drl serve` compiles them when it builds its
    // engine (those on stores compile once the store is up).
    let all_local = config.limits.iter().all(|l| l.scope == Scope::Local);
    if all_local && config.cluster.is_none() && config.orbit.is_none() && config.redis.is_none() {
        drl_service::engine::Engine::new(&config, Some(path.to_path_buf()))
            .map_err(|e| e.to_string())?;
    }
    let warnings = check(&config, SystemTime::now(), files)?;
    Ok(Checked { config, warnings })
}

/// The checks of [`check_file`] on a loaded `config` but for compiling its
/// limits (`drl serve` does that once, building its engine), with
/// certificate expiry judged at `now`. Returns the warnings.
pub fn check(config: &Config, now: SystemTime, files: Files) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    // A gossip algorithm at a cluster size where the simulator showed it
    // does not hold its limit within 10 % (EXPERIMENTS.md, "Scale matrix").
    if let Some(c) = &config.cluster
        && let Some(w) =
            drl_cluster::cloud_control::scale_warning(c.algorithm, c.aggregation, c.cluster_size())
    {
        warnings.push(format!("cluster: {w}"));
    }
    if files == Files::Skip {
        return Ok(warnings);
    }
    for (field, tls) in [
        ("listen.http_tls", &config.listen.http_tls),
        ("listen.grpc_tls", &config.listen.grpc_tls),
    ] {
        let Some(tls) = tls else { continue };
        crate::tls::prepare(Some(tls), &[b"h2"]).map_err(|e| format!("{field}: {e}"))?;
        secret_mode(&mut warnings, &format!("{field}.key_file"), &tls.key_file);
        if let Some(w) = cert_expiry(&tls.cert_file, now) {
            warnings.push(format!("{field}.cert_file: {w}"));
        }
    }
    crate::auth::prepare(&config.auth)?;
    for (field, p) in [
        ("auth.tokens_file", &config.auth.tokens_file),
        ("auth.metrics_tokens_file", &config.auth.metrics_tokens_file),
    ] {
        if let Some(p) = p {
            secret_mode(&mut warnings, field, p);
        }
    }
    if let Some(c) = &config.cluster {
        c.load_keys().map_err(|e| format!("cluster: {e}"))?;
        if let Some(p) = &c.key_file {
            secret_mode(&mut warnings, "cluster.key_file", p);
        }
        for p in &c.previous_key_files {
            secret_mode(&mut warnings, "cluster.previous_key_files", p);
        }
    }
    Ok(warnings)
}

/// Warns if the file at `path` (a key, a token list) is readable by every
/// user of the machine.
fn secret_mode(warnings: &mut Vec<String>, field: &str, path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o004 != 0
        {
            warnings.push(format!(
                "{field}: {} is readable by every user (mode {:o}); chmod o-r it",
                path.display(),
                m.permissions().mode() & 0o777
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (warnings, field, path);
}

/// A warning if the first certificate of the PEM file at `path` has
/// expired at `now` or expires within [`EXPIRY_WARNING`].
pub fn cert_expiry(path: &Path, now: SystemTime) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let der = rustls_pemfile::certs(&mut &bytes[..]).next()?.ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let not_after = cert.validity().not_after.timestamp();
    let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs() as i64;
    if not_after <= now {
        Some(format!(
            "{}: the certificate expired {} days ago",
            path.display(),
            (now - not_after) / 86_400
        ))
    } else if not_after - now < EXPIRY_WARNING.as_secs() as i64 {
        Some(format!(
            "{}: the certificate expires in {} days",
            path.display(),
            (not_after - now) / 86_400
        ))
    } else {
        None
    }
}
