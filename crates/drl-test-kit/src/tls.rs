//! Test certificates made with rcgen: a CA, a server certificate for
//! 127.0.0.1 / localhost (also used by cluster nodes to talk to each
//! other), a client certificate, and a second, unrelated CA with its own
//! client certificate (the "wrong" ones). PEM files in a temp dir.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM files of a test PKI (see the module docs).
pub struct Pki {
    dir: tempfile::TempDir,
}

/// One CA and what it signed.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ca {
            params,
            key: KeyPair::generate().unwrap(),
        }
    }

    /// The CA's own certificate (PEM).
    fn pem(&self) -> String {
        self.params.self_signed(&self.key).unwrap().pem()
    }

    /// A leaf certificate and its key (PEM) for `names`, for `uses`.
    fn sign(&self, cn: &str, names: &[&str], uses: &[ExtendedKeyUsagePurpose]) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = uses.to_vec();
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().unwrap();
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

impl Pki {
    /// Generates everything into a fresh temp dir.
    pub fn generate() -> Pki {
        drl_store::redis_store::tls::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let ca = Ca::new("drl test CA");
        write("ca.pem", &ca.pem());
        let (cert, key) = ca.sign(
            "redis",
            &["127.0.0.1", "localhost"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        write("server.pem", &cert);
        write("server.key", &key);
        let (cert, key) = ca.sign("drl", &[], &[ExtendedKeyUsagePurpose::ClientAuth]);
        write("client.pem", &cert);
        write("client.key", &key);
        let other = Ca::new("some other CA");
        write("other-ca.pem", &other.pem());
        let (cert, key) = other.sign("intruder", &[], &[ExtendedKeyUsagePurpose::ClientAuth]);
        write("other-client.pem", &cert);
        write("other-client.key", &key);
        Pki { dir }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file of the PKI by name: `ca.pem`, `server.pem`, `server.key`,
    /// `client.pem`, `client.key`, `other-ca.pem`, `other-client.pem`,
    /// `other-client.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        assert!(p.exists(), "no such test PKI file {name}");
        p
    }

    /// The `redis.tls` section that trusts this CA and presents the client
    /// certificate.
    pub fn client_tls(&self) -> drl_store::RedisTls {
        drl_store::RedisTls {
            ca_file: Some(self.path("ca.pem")),
            cert_file: Some(self.path("client.pem")),
            key_file: Some(self.path("client.key")),
        }
    }

    /// The redis-server arguments for TLS on `port` (plain TCP off) with
    /// client certificates `auth_clients` (`yes`, `optional`, `no`).
    pub fn server_args(&self, port: u16, auth_clients: &str) -> Vec<String> {
        let s = |p: PathBuf| p.to_str().expect("utf-8 path").to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            s(self.path("server.pem")),
            "--tls-key-file".into(),
            s(self.path("server.key")),
            "--tls-ca-cert-file".into(),
            s(self.path("ca.pem")),
            "--tls-auth-clients".into(),
            auth_clients.into(),
        ]
    }

    /// `redis-cli` arguments to speak TLS with the client certificate.
    pub fn cli_args(&self) -> Vec<String> {
        let s = |p: PathBuf| p.to_str().expect("utf-8 path").to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            s(self.path("ca.pem")),
            "--cert".into(),
            s(self.path("client.pem")),
            "--key".into(),
            s(self.path("client.key")),
        ]
    }

    /// A sync redis client for `url` (rediss://) that trusts this CA and
    /// presents the client certificate.
    pub fn client(&self, url: &str) -> redis::Client {
        let read = |n: &str| std::fs::read(self.path(n)).unwrap();
        redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: read("client.pem"),
                    client_key: read("client.key"),
                }),
                root_cert: Some(read("ca.pem")),
            },
        )
        .unwrap()
    }
}
