//! TLS of the HTTP and gRPC listeners (rustls, ring provider; no OpenSSL).
//!
//! `listen.http_tls` / `listen.grpc_tls` name a PEM certificate chain, its
//! private key and, for mutual TLS, the CA that client certificates must
//! chain to. The files are read when the config is loaded (any error
//! refuses the load or reload), again on every reload (SIGHUP or a config
//! change), and whenever one of them changes on disk ([`watch`] polls their
//! metadata once a second, which also sees Kubernetes' symlink swaps).
//! A new certificate is served to new connections; open connections keep
//! the one they were made with and are never dropped by a rotation.

pub use drl_config::sections::TlsConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why a listener's TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{field} {path}: cannot read: {why}")]
    Read {
        /// `cert_file`, `key_file` or `client_ca_file`.
        field: &'static str,
        /// The path.
        path: String,
        /// The I/O error.
        why: String,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("{field} {path}: {why}")]
    Pem {
        /// `cert_file`, `key_file` or `client_ca_file`.
        field: &'static str,
        /// The path.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the combination (e.g. the key does not match the
    /// certificate).
    #[error("{0}")]
    Rustls(String),
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        field,
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

fn certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(field, path)?;
    let pem = |why: String| TlsError::Pem {
        field,
        path: path.display().to_string(),
        why,
    };
    let certs = rustls_pemfile::certs(&mut bytes.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem(
            "no certificate found (expected a PEM block 'BEGIN CERTIFICATE')".into(),
        ));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read("key_file", path)?;
    let pem = |why: String| TlsError::Pem {
        field: "key_file",
        path: path.display().to_string(),
        why,
    };
    rustls_pemfile::private_key(&mut bytes.as_slice())
        .map_err(|e| pem(format!("not valid PEM: {e}")))?
        .ok_or_else(|| pem("no private key found (expected a PEM block 'BEGIN PRIVATE KEY', 'BEGIN RSA PRIVATE KEY' or 'BEGIN EC PRIVATE KEY')".into()))
}

/// The crypto provider of every drl TLS endpoint.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the rustls server config of `cfg`, offering `alpn` protocols.
pub fn server_config(
    cfg: &TlsConfig,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs("cert_file", &cfg.cert_file)?;
    let key = key(&cfg.key_file)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &cfg.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("client_ca_file", ca)? {
                roots.add(c).map_err(|e| TlsError::Pem {
                    field: "client_ca_file",
                    path: ca.display().to_string(),
                    why: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.into(),
                provider(),
            )
            .build()
            .map_err(|e| TlsError::Rustls(format!("client_ca_file {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsError::Rustls(format!(
            "cert_file {} and key_file {}: {e}",
            cfg.cert_file.display(),
            cfg.key_file.display()
        ))
    })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The live TLS acceptor of one listener: `None` serves plain TCP. Swapped
/// by reloads and certificate rotations; each new connection takes the
/// current one.
#[derive(Clone, Default)]
pub struct TlsSlot {
    inner: Arc<RwLock<Option<Live>>>,
}

#[derive(Clone)]
struct Live {
    config: TlsConfig,
    acceptor: TlsAcceptor,
    stamp: Vec<Stamp>,
}

impl std::fmt::Debug for TlsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner.read() {
            Some(l) => write!(f, "TlsSlot({})", l.config.cert_file.display()),
            None => f.write_str("TlsSlot(plain)"),
        }
    }
}

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64)>);

fn stamp(p: &Path) -> Stamp {
    Stamp(
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len()))),
    )
}

/// Loaded TLS material, ready to be put in a [`TlsSlot`].
#[derive(Clone)]
pub struct Prepared(Option<Live>);

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Prepared(tls)"
        } else {
            "Prepared(plain)"
        })
    }
}

/// Loads `cfg` (none: plain) for a listener offering `alpn`.
pub fn prepare(cfg: Option<&TlsConfig>, alpn: &[&[u8]]) -> Result<Prepared, TlsError> {
    let Some(cfg) = cfg else {
        return Ok(Prepared(None));
    };
    let stamps = cfg.files().iter().map(|p| stamp(p)).collect();
    let sc = server_config(cfg, alpn)?;
    Ok(Prepared(Some(Live {
        config: cfg.clone(),
        acceptor: TlsAcceptor::from(sc),
        stamp: stamps,
    })))
}

impl TlsSlot {
    /// The acceptor for a new connection (`None`: plain TCP).
    pub fn acceptor(&self) -> Option<TlsAcceptor> {
        self.inner.read().as_ref().map(|l| l.acceptor.clone())
    }

    /// True if this listener serves TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.read().is_some()
    }

    /// Installs prepared material.
    pub fn set(&self, p: Prepared) {
        *self.inner.write() = p.0;
    }

    /// Reloads the files if any of them changed since they were loaded.
    /// Returns `Some(Ok)` on a reload, `Some(Err)` when the changed files
    /// are not usable (the old certificate keeps serving), `None` if
    /// nothing changed.
    fn refresh(&self, alpn: &[&[u8]]) -> Option<Result<PathBuf, TlsError>> {
        let live = self.inner.read().clone()?;
        let now: Vec<Stamp> = live.config.files().iter().map(|p| stamp(p)).collect();
        if now == live.stamp {
            return None;
        }
        let r = prepare(Some(&live.config), alpn);
        let mut w = self.inner.write();
        match (r, w.as_mut()) {
            // Another reload replaced the config meanwhile: leave it.
            (_, Some(cur)) if cur.config != live.config => None,
            (Ok(Prepared(Some(new))), _) => {
                let path = new.config.cert_file.clone();
                *w = Some(new);
                Some(Ok(path))
            }
            (Ok(Prepared(None)), _) => None,
            (Err(e), Some(cur)) => {
                // Do not report the same broken files every second.
                cur.stamp = now;
                Some(Err(e))
            }
            (Err(e), None) => Some(Err(e)),
        }
    }
}

/// Polls the files of `slot` every `period` and reloads them when they
/// change, until `stop` is set. `listener` names it in logs.
pub async fn watch(
    slot: TlsSlot,
    alpn: &'static [&'static [u8]],
    listener: &'static str,
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = stop.wait_for(|s| *s) => { drop(r); return }
        }
        match slot.refresh(alpn) {
            None => {}
            Some(Ok(cert)) => {
                metrics::counter!("drl_tls_reloads_total", "listener" => listener, "result" => "ok")
                    .increment(1);
                tracing::info!(listener, cert = %cert.display(), "TLS certificate reloaded; new connections use it");
            }
            Some(Err(e)) => {
                metrics::counter!("drl_tls_reloads_total", "listener" => listener, "result" => "error")
                    .increment(1);
                tracing::error!(listener, error = %e, "TLS files changed but cannot be used; the previous certificate keeps serving");
            }
        }
    }
}
