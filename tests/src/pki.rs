//! A private CA and a broker certificate for `127.0.0.1` / `localhost` (rcgen), and the broker
//! JVM properties (`TlsSystemConfig`) that make a real broker enforce TLS with them.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

/// The CA's certificate (PEM) and where the broker's certificate chain and key were written.
pub struct Pki {
    /// The CA certificate clients trust.
    pub ca_pem: String,
    /// The broker's certificate, then the CA's (PEM).
    pub cert_path: PathBuf,
    /// The broker's private key (PKCS#8 PEM, what Netty expects).
    pub key_path: PathBuf,
    dir: PathBuf,
}

/// A new self-signed CA named `name` (certificate and issuer).
///
/// # Panics
/// When rcgen fails (test setup).
pub fn ca(name: &str) -> (rcgen::Certificate, rcgen::Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("CA key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = p.self_signed(&key).expect("CA cert");
    (cert, rcgen::Issuer::new(p, key))
}

impl Pki {
    /// A CA and a server certificate for `localhost` and 127.0.0.1, written under `dir`.
    ///
    /// # Panics
    /// When rcgen fails or `dir` cannot be written (test setup).
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("cert dir");
        let (ca, issuer) = ca("rmq test CA");
        let key = KeyPair::generate().expect("server key");
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).expect("server params");
        p.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        p.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        let cert = p.signed_by(&key, &issuer).expect("server cert");
        let cert_path = dir.join("server.pem");
        let key_path = dir.join("server.key");
        // The chain: server certificate, then the CA.
        std::fs::write(&cert_path, format!("{}{}", cert.pem(), ca.pem())).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        Pki {
            ca_pem: ca.pem(),
            cert_path,
            key_path,
            dir: dir.to_path_buf(),
        }
    }

    /// The broker JVM properties of `TlsSystemConfig` for a broker that enforces TLS with this
    /// certificate and asks for no client certificate (NameServers stay plain TCP).
    pub fn broker_jvm_args(&self) -> Vec<String> {
        vec![
            "-Dtls.server.mode=enforcing".into(),
            "-Dtls.test.mode.enable=false".into(),
            "-Dtls.server.need.client.auth=none".into(),
            format!("-Dtls.server.certPath={}", self.cert_path.display()),
            format!("-Dtls.server.keyPath={}", self.key_path.display()),
            // Keep a machine-wide /etc/rocketmq/tls.properties out of the test.
            format!(
                "-Dtls.config.file={}",
                self.dir.join("none.properties").display()
            ),
        ]
    }
}
