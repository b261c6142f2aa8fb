//! Client certificates on the HTTPS endpoints: `management.ssl.cacertfile`,
//! `management.ssl.verify = verify_peer`, `management.ssl.fail_if_no_peer_cert = true`, and
//! the same under `prometheus.ssl.*`, checked as the listeners' `ssl_options` are. A client
//! without a certificate, or with one the test CA (rcgen) did not sign, is refused; one with
//! a CA-signed certificate gets a 200. Without `fail_if_no_peer_cert`, a client without a
//! certificate still gets in. `verify_peer` without a CA file stops start-up naming the key.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::ClientConfig;
use warren::Server;
use warren_config::Settings;
use warren_interop_tests::tls::{connect, Pki};
use warren_interop_tests::{TempDir, TestBroker, TEST_LISTENERS};
use warren_management::http::{encode_request, parse_response};

/// The settings of HTTPS management and Prometheus endpoints with the test CA's server
/// certificate, asking for client certificates and requiring them when
/// `fail_if_no_peer_cert`.
fn https_settings(pki: &Pki, fail_if_no_peer_cert: bool) -> Vec<(String, String)> {
    let fail = if fail_if_no_peer_cert {
        "true"
    } else {
        "false"
    };
    let mut settings = Vec::new();
    for endpoint in ["management", "prometheus"] {
        for (key, value) in [
            ("ip", "127.0.0.1".to_string()),
            ("port", "0".to_string()),
            ("certfile", pki.path("server.pem")),
            ("keyfile", pki.path("server-key.pem")),
            ("cacertfile", pki.path("ca.pem")),
            ("verify", "verify_peer".to_string()),
            ("fail_if_no_peer_cert", fail.to_string()),
        ] {
            settings.push((format!("{endpoint}.ssl.{key}"), value));
        }
    }
    settings
}

async fn broker(pki: &Pki, fail_if_no_peer_cert: bool) -> TestBroker {
    let settings = https_settings(pki, fail_if_no_peer_cert);
    let settings: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    TestBroker::start_with(&settings).await
}

/// GET `path` over TLS with `config` (as guest); the status, or the error that refused the
/// client. With TLS 1.3 the client's side of the handshake completes before the server
/// checks its certificate, so a refusal may surface at the handshake or at the first read.
async fn get(addr: SocketAddr, config: Arc<ClientConfig>, path: &str) -> std::io::Result<u16> {
    let mut tls = connect(addr, config).await?;
    tls.write_all(&encode_request(
        "GET",
        path,
        "localhost",
        Some(("guest", "guest")),
        None,
    ))
    .await?;
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).await?;
    match parse_response(&raw) {
        Ok(Some(response)) => Ok(response.status),
        _ => Err(std::io::Error::other(format!(
            "no HTTP response: {} bytes",
            raw.len()
        ))),
    }
}

/// The HTTPS endpoints of `broker`: the management API and the Prometheus metrics, with a
/// path each answers with 200.
fn endpoints(broker: &TestBroker) -> [(SocketAddr, &'static str); 2] {
    let server = broker.server();
    [
        (
            server.management_tls_addr().expect("HTTPS API"),
            "/api/whoami",
        ),
        (
            server.prometheus_tls_addr().expect("HTTPS metrics"),
            "/metrics",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_if_no_peer_cert_refuses_clients_without_a_ca_signed_certificate() {
    let pki = Pki::new("https-client-certs");
    let broker = broker(&pki, true).await;
    for (addr, path) in endpoints(&broker) {
        let without = get(addr, pki.client_config(None), path).await;
        assert!(
            without.is_err(),
            "{path}: a client without a certificate is refused, got {without:?}"
        );
        let self_signed = get(addr, pki.client_config(Some(pki.client(false))), path).await;
        assert!(
            self_signed.is_err(),
            "{path}: a certificate the CA did not sign is refused, got {self_signed:?}"
        );
        let signed = get(addr, pki.client_config(Some(pki.client(true))), path)
            .await
            .expect("a CA-signed client certificate is accepted");
        assert_eq!(signed, 200, "{path}");
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_peer_alone_lets_clients_without_a_certificate_in() {
    let pki = Pki::new("https-client-certs-optional");
    let broker = broker(&pki, false).await;
    for (addr, path) in endpoints(&broker) {
        let without = get(addr, pki.client_config(None), path)
            .await
            .expect("no certificate is needed");
        assert_eq!(without, 200, "{path}");
        // A certificate that is presented is still checked.
        let self_signed = get(addr, pki.client_config(Some(pki.client(false))), path).await;
        assert!(
            self_signed.is_err(),
            "{path}: a certificate the CA did not sign is refused, got {self_signed:?}"
        );
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_peer_without_a_ca_file_stops_start_up_naming_the_key() {
    let pki = Pki::new("https-client-certs-no-ca");
    for endpoint in ["management", "prometheus"] {
        let data_dir = TempDir::new("https-no-ca");
        let mut settings = Settings::default();
        for (key, value) in TEST_LISTENERS {
            settings.set(key, value).expect("test listener");
        }
        settings
            .set("data_dir", &data_dir.path().display().to_string())
            .expect("data dir");
        for (key, value) in [
            ("port", "0".to_string()),
            ("certfile", pki.path("server.pem")),
            ("keyfile", pki.path("server-key.pem")),
            ("verify", "verify_peer".to_string()),
        ] {
            settings
                .set(&format!("{endpoint}.ssl.{key}"), &value)
                .expect("valid key");
        }
        let error = match Server::start(settings).await {
            Ok(server) => {
                server.shutdown().await;
                panic!("{endpoint}: started with verify_peer and no CA file");
            }
            Err(error) => error.to_string(),
        };
        assert_eq!(
            error,
            format!("{endpoint}.ssl.verify = verify_peer needs {endpoint}.ssl.cacertfile")
        );
    }
}
