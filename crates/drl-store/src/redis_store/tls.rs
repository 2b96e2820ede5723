//! TLS to Redis (`rediss://`): the `redis.tls` section, its files checked
//! at config load, and the rustls crypto provider.
//!
//! drl speaks TLS to Redis through the redis crate's rustls support (ring
//! provider, no OpenSSL). Without a `tls:` section a `rediss://` server is
//! verified against the system's trust store; `ca_file` replaces that with
//! a private CA, and `cert_file` + `key_file` present a client certificate
//! (for Redis's `tls-auth-clients yes`). Host names (or IP addresses) in
//! the URLs must match the server certificate's subject alternative names:
//! there is no switch that turns verification off.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// The `tls:` part of the `redis:` section (only with `rediss://` URLs).
///
/// Relative paths are relative to the process's working directory. The
/// files are read when the config is loaded (so a missing or malformed one
/// is a config error naming it) and again when drl connects.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisTls {
    /// PEM file of the CA certificate(s) that signed the Redis server's
    /// certificate; replaces the system trust store. Default: the system's.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate chain drl presents (Redis
    /// `tls-auth-clients yes`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1 or
    /// SEC1); needs `cert_file`.
    pub key_file: Option<PathBuf>,
}

fn invalid(msg: String) -> StoreError {
    StoreError::Invalid(format!("redis config: {msg}"))
}

/// Reads `path` for the key `field`; the error names both.
fn read(field: &str, path: &Path) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|e| invalid(format!("`{field}` {}: {e}", path.display())))
}

/// The certificates in a PEM file (at least one).
fn certs(field: &str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("`{field}` {}: not valid PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "`{field}` {}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The private key in a PEM file.
fn key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, StoreError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        invalid(format!(
            "`tls.key_file` {}: holds no usable PEM private key ({e})",
            path.display()
        ))
    })
}

impl RedisTls {
    /// Reads and checks every file: each exists, is PEM, the CA file holds
    /// certificates, the client certificate goes with its key. Errors name
    /// the key and the file.
    pub fn validate(&self) -> Result<(), StoreError> {
        self.load().map(|_| ())
    }

    /// The files' contents for the redis crate, after [`RedisTls::validate`]'s
    /// checks.
    pub(crate) fn certificates(&self) -> Result<TlsCertificates, StoreError> {
        self.load()
    }

    fn load(&self) -> Result<TlsCertificates, StoreError> {
        install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        let root_cert = match &self.ca_file {
            Some(path) => {
                let pem = read("tls.ca_file", path)?;
                for c in certs("tls.ca_file", path, &pem)? {
                    roots.add(c).map_err(|e| {
                        invalid(format!(
                            "`tls.ca_file` {}: not a usable CA certificate: {e}",
                            path.display()
                        ))
                    })?;
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (None, None) => None,
            (Some(_), None) => return Err(invalid("`tls.cert_file` needs `tls.key_file`".into())),
            (None, Some(_)) => return Err(invalid("`tls.key_file` needs `tls.cert_file`".into())),
            (Some(cert_path), Some(key_path)) => {
                let client_cert = read("tls.cert_file", cert_path)?;
                let client_key = read("tls.key_file", key_path)?;
                let chain = certs("tls.cert_file", cert_path, &client_cert)?;
                let key = key(key_path, &client_key)?;
                // What the connection will build: a key that does not go
                // with the certificate fails here, not at the handshake.
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(format!("TLS: {e}")))?
                .with_root_certificates(roots)
                .with_client_auth_cert(chain, key)
                .map_err(|e| {
                    invalid(format!(
                        "`tls.cert_file` {} and `tls.key_file` {} do not make a client \
                         certificate: {e}",
                        cert_path.display(),
                        key_path.display()
                    ))
                })?;
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
        };
        Ok(TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// Installs rustls's ring provider as the process default, if no provider
/// is installed yet (the redis crate builds its TLS configs with the
/// process default). Idempotent; another provider installed first stays.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// True for a `rediss://` URL (TLS).
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}
