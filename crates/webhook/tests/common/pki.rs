//! A throwaway CA and loopback serving certificates (rcgen), for the webhook's TLS listeners.

#![allow(dead_code)]

use std::net::Ipv4Addr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A CA that signs serving certificates.
pub struct TestCa {
    /// The CA certificate (PEM).
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate and key (PEM) for 127.0.0.1 and localhost.
    pub fn serving_pair(&self) -> (String, String) {
        let key = KeyPair::generate().expect("a serving key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "captf-webhook");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a serving certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a serving pair as `tls.crt` and `tls.key` into `dir`.
    pub fn write_serving_pair(&self, dir: &std::path::Path) {
        let (cert, key) = self.serving_pair();
        std::fs::write(dir.join("tls.crt"), cert).expect("writing tls.crt");
        std::fs::write(dir.join("tls.key"), key).expect("writing tls.key");
    }
}
