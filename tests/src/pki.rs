//! A test certificate authority: a CA, a server certificate for 127.0.0.1 and
//! localhost, and client certificates, as PEM files in a temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

/// The files of a test PKI.
pub struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("pki dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "chorus test CA");
        let ca = params.self_signed(&ca_key).expect("CA certificate");
        let ca_path = write(dir.path(), "ca.pem", &ca.pem());
        let issuer = Issuer::new(params, ca_key);
        let mut pki = Self {
            ca: ca_path,
            server_cert: PathBuf::new(),
            server_key: PathBuf::new(),
            issuer,
            dir,
        };
        let (cert, key) = pki.issue("server", |p| {
            p.subject_alt_names = vec![
                SanType::DnsName("localhost".try_into().expect("dns name")),
                SanType::IpAddress("127.0.0.1".parse().expect("ip")),
            ];
        });
        pki.server_cert = cert;
        pki.server_key = key;
        pki
    }

    /// A client certificate whose subject CN is `name`; (cert, key) paths.
    pub fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        self.issue(name, |_| {})
    }

    fn issue(&self, name: &str, adjust: impl FnOnce(&mut CertificateParams)) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        adjust(&mut params);
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        (
            write(self.dir.path(), &format!("{name}.pem"), &cert.pem()),
            write(
                self.dir.path(),
                &format!("{name}.key"),
                &key.serialize_pem(),
            ),
        )
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write pem");
    path
}
