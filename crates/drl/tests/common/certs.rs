//! Test certificates made with rcgen: a CA, server certificates for
//! 127.0.0.1/localhost, client certificates, written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A certificate authority that signs test certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// PEM files of one certificate and its key.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
    /// The certificate's DER bytes (to compare with what a peer presents).
    pub der: Vec<u8>,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.issuer.pem()).unwrap();
        path.to_path_buf()
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn sign(&self, dir: &Path, stem: &str, cn: &str, sans: Vec<String>, client: bool) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        Pair {
            cert: c,
            key: k,
            der: cert.der().to_vec(),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost, as `stem.crt` /
    /// `stem.key` in `dir`.
    pub fn server(&self, dir: &Path, stem: &str, cn: &str) -> Pair {
        self.sign(
            dir,
            stem,
            cn,
            vec!["127.0.0.1".into(), "localhost".into()],
            false,
        )
    }

    /// A client certificate named `cn`.
    pub fn client(&self, dir: &Path, stem: &str, cn: &str) -> Pair {
        self.sign(dir, stem, cn, Vec::new(), true)
    }
}
