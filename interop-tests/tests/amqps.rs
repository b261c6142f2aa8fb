//! AMQPS (`listeners.ssl.default`, `ssl_options.*`): AMQP 0-9-1 over TLS with a test CA
//! generated here with rcgen. A client that trusts the CA gets connection.start after the
//! protocol header; with `verify = verify_peer` and `fail_if_no_peer_cert = true`, a client
//! certificate signed by the CA is accepted and a client without one, or with one the CA did
//! not sign, is refused.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::ClientConfig;
use warren_interop_tests::tls::{connect, Pki};
use warren_interop_tests::TestBroker;

/// Connects over TLS, sends the AMQP 0-9-1 protocol header and returns the first 11 bytes
/// the broker sends (a method frame header and the class and method ids), or the error.
async fn amqp_over_tls(broker: &TestBroker, config: Arc<ClientConfig>) -> std::io::Result<Vec<u8>> {
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    let mut tls = connect(addr, config).await?;
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
