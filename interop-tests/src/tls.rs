//! A test certificate authority generated with rcgen for the TLS tests (AMQPS, MQTTS, STOMP
//! over TLS, SASL EXTERNAL): a CA, a server certificate for `localhost` written as PEM files
//! the broker's `ssl_options.*` point at, client certificates with a chosen common name, and
//! rustls client configurations that trust the CA.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use tokio_rustls::TlsConnector;

/// A client certificate and its private key.
pub type Identity = (CertificateDer<'static>, PrivateKeyDer<'static>);

/// A test CA and the server's certificate, as PEM files in a temporary directory (removed
/// when dropped).
pub struct Pki {
    dir: PathBuf,
    ca: Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A fresh CA and a server certificate for `localhost`; `name` keeps parallel tests'
    /// directories apart.
    pub fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("warren-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Warren test CA");
        let ca = params.self_signed(&ca_key).expect("CA");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write CA");
        let server_key = KeyPair::generate().expect("key");
        let server = CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .signed_by(&server_key, &ca, &ca_key)
            .expect("server certificate");
        std::fs::write(dir.join("server.pem"), server.pem()).expect("write");
        std::fs::write(dir.join("server-key.pem"), server_key.serialize_pem()).expect("write");
        Pki { dir, ca, ca_key }
    }

    /// The path of one of the PEM files: `ca.pem`, `server.pem`, `server-key.pem`.
    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `ssl_options.*` settings serving the server certificate; with `verify_peer`, client
    /// certificates are checked against the CA and required.
    pub fn ssl_options(&self, verify_peer: bool) -> Vec<(&'static str, String)> {
        let mut options = vec![
            ("ssl_options.certfile", self.path("server.pem")),
            ("ssl_options.keyfile", self.path("server-key.pem")),
        ];
        if verify_peer {
            options.extend([
                ("ssl_options.cacertfile", self.path("ca.pem")),
                ("ssl_options.verify", "verify_peer".to_string()),
                ("ssl_options.fail_if_no_peer_cert", "true".to_string()),
            ]);
        }
        options
    }

    /// A client certificate with common name `client`, signed by the test CA or
    /// self-signed (which the broker must refuse).
    pub fn client(&self, signed_by_ca: bool) -> Identity {
        self.client_named(&[(DnType::CommonName, "client")], signed_by_ca)
    }

    /// A client certificate whose subject is `subject` (in certificate order).
    pub fn client_named(&self, subject: &[(DnType, &str)], signed_by_ca: bool) -> Identity {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        // Not rcgen's default subject (`CN=rcgen self signed cert`): exactly `subject`.
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let certificate = if signed_by_ca {
            params.signed_by(&key, &self.ca, &self.ca_key)
        } else {
            params.self_signed(&key)
        }
        .expect("client certificate");
        (
            certificate.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }

    /// A client certificate with common name `common_name` signed by the test CA, written as
    /// `<stem>.pem` and `<stem>-key.pem` for clients that read PEM files. Returns both paths.
    pub fn client_files(&self, stem: &str, common_name: &str) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let certificate = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("client certificate");
        let (cert, key_path) = (format!("{stem}.pem"), format!("{stem}-key.pem"));
        std::fs::write(self.dir.join(&cert), certificate.pem()).expect("write");
        std::fs::write(self.dir.join(&key_path), key.serialize_pem()).expect("write");
        (self.path(&cert), self.path(&key_path))
    }

    /// A cluster node's certificate for `host` (an IP or DNS subject alternative name, usable
    /// to serve and to dial), written as `<stem>.pem` and `<stem>-key.pem`; signed by the
    /// test CA or self-signed (which the other nodes must refuse). Returns both paths.
    pub fn node_certificate(&self, stem: &str, host: &str, signed_by_ca: bool) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec![host.to_string()]).expect("params");
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let certificate = if signed_by_ca {
            params.signed_by(&key, &self.ca, &self.ca_key)
        } else {
            params.self_signed(&key)
        }
        .expect("node certificate");
        let (cert, key_path) = (format!("{stem}.pem"), format!("{stem}-key.pem"));
        std::fs::write(self.dir.join(&cert), certificate.pem()).expect("write");
        std::fs::write(self.dir.join(&key_path), key.serialize_pem()).expect("write");
        (self.path(&cert), self.path(&key_path))
    }

    /// A client configuration that trusts the test CA and presents `identity`, if any.
    pub fn client_config(&self, identity: Option<Identity>) -> Arc<ClientConfig> {
        self.client_config_for(&[&TLS13, &TLS12], identity)
    }

    /// A client configuration offering only the TLS `versions` given.
    pub fn client_config_for(
        &self,
        versions: &[&'static SupportedProtocolVersion],
        identity: Option<Identity>,
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).expect("trust the CA");
        let builder = ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots);
        Arc::new(match identity {
            Some((certificate, key)) => builder
                .with_client_auth_cert(vec![certificate], key)
                .expect("client auth"),
            None => builder.with_no_client_auth(),
        })
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Connects to `addr` and completes a TLS handshake for `localhost` with `config`.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    TlsConnector::from(config)
        .connect(
            ServerName::try_from("localhost").expect("a valid name"),
            stream,
        )
        .await
}
