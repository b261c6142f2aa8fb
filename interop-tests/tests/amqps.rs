//! AMQPS (`listeners.ssl.default`, `ssl_options.*`): AMQP 0-9-1 over TLS with a test CA
//! generated here with rcgen. A client that trusts the CA gets connection.start after the
//! protocol header; with `verify = verify_peer` and `fail_if_no_peer_cert = true`, a client
//! certificate signed by the CA is accepted and a client without one, or with one the CA did
//! not sign, is refused.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use warren_interop_tests::TestBroker;

struct Pki {
    dir: PathBuf,
    ca: Certificate,
    ca_key: KeyPair,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("warren-amqps-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca_key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
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

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// A client certificate and key, signed by the test CA or self-signed.
    fn client(&self, signed_by_ca: bool) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["client".to_string()]).expect("params");
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

    fn client_config(
        &self,
        identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).expect("trust the CA");
        let builder = ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
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

/// Connects over TLS, sends the AMQP 0-9-1 protocol header and returns the first 11 bytes
/// the broker sends (a method frame header and the class and method ids), or the error.
async fn amqp_over_tls(broker: &TestBroker, config: Arc<ClientConfig>) -> std::io::Result<Vec<u8>> {
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), stream)
        .await?;
    tls.write_all(b"AMQP\x00\x00\x09\x01").await?;
    let mut start = vec![0u8; 11];
    tls.read_exact(&mut start).await?;
    Ok(start)
}

fn is_connection_start(bytes: &[u8]) -> bool {
    // Frame type 1 (method) on channel 0, then class 10 (connection), method 10 (start).
    bytes[0] == 1 && bytes[1..3] == [0, 0] && bytes[7..11] == [0, 10, 0, 10]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_is_served_over_tls() {
    let pki = Pki::new("plain");
    let broker = TestBroker::start_with(&[
        ("listeners.ssl.default", "127.0.0.1:0"),
        ("ssl_options.certfile", &pki.path("server.pem")),
        ("ssl_options.keyfile", &pki.path("server-key.pem")),
    ])
    .await;
    let start = amqp_over_tls(&broker, pki.client_config(None))
        .await
        .expect("TLS and protocol header");
    assert!(is_connection_start(&start), "{start:?}");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_verified_against_the_ca() {
    let pki = Pki::new("verify");
    let broker = TestBroker::start_with(&[
        ("listeners.ssl.default", "127.0.0.1:0"),
        ("ssl_options.certfile", &pki.path("server.pem")),
        ("ssl_options.keyfile", &pki.path("server-key.pem")),
        ("ssl_options.cacertfile", &pki.path("ca.pem")),
        ("ssl_options.verify", "verify_peer"),
        ("ssl_options.fail_if_no_peer_cert", "true"),
    ])
    .await;
    let trusted = amqp_over_tls(&broker, pki.client_config(Some(pki.client(true))))
        .await
        .expect("a CA-signed client certificate is accepted");
    assert!(is_connection_start(&trusted));
    // TLS 1.3 reports a refused client certificate after the handshake: the first read fails.
    assert!(
        amqp_over_tls(&broker, pki.client_config(None))
            .await
            .is_err(),
        "a client without a certificate is refused"
    );
    assert!(
        amqp_over_tls(&broker, pki.client_config(Some(pki.client(false))))
            .await
            .is_err(),
        "a certificate the CA did not sign is refused"
    );
    broker.shutdown().await;
}
