//! The management API over HTTPS (`management.ssl.*`): a client that trusts the test
//! certificate (generated here with rcgen) gets answers over TLS; a certificate file that
//! does not exist stops start-up naming the file.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use warren::Server;
use warren_config::Settings;
use warren_interop_tests::{TestBroker, TEST_LISTENERS};
use warren_management::http::{encode_request, parse_response};

struct TestCertificate {
    dir: std::path::PathBuf,
    der: tokio_rustls::rustls::pki_types::CertificateDer<'static>,
}

fn certificate(name: &str) -> TestCertificate {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("rcgen");
    let dir = std::env::temp_dir().join(format!("warren-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("cert.pem"), generated.cert.pem()).expect("cert");
    std::fs::write(dir.join("key.pem"), generated.key_pair.serialize_pem()).expect("key");
    TestCertificate {
        dir,
        der: generated.cert.der().clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_over_https_with_the_configured_certificate() {
    let certificate = certificate("ok");
    let certfile = certificate.dir.join("cert.pem").display().to_string();
    let keyfile = certificate.dir.join("key.pem").display().to_string();
    let broker = TestBroker::start_with(&[
        ("management.ssl.ip", "127.0.0.1"),
        ("management.ssl.port", "0"),
        ("management.ssl.certfile", &certfile),
        ("management.ssl.keyfile", &keyfile),
    ])
    .await;
    let addr = broker
        .server()
        .management_tls_addr()
        .expect("HTTPS listener");

    let mut roots = RootCertStore::empty();
    roots
        .add(certificate.der.clone())
        .expect("trust the test certificate");
    let config = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), stream)
        .await
        .expect("TLS handshake");
    tls.write_all(&encode_request(
        "GET",
        "/api/whoami",
        "localhost",
        Some(("guest", "guest")),
        None,
    ))
    .await
    .expect("request");
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).await.expect("response");
    let response = parse_response(&raw).expect("HTTP").expect("complete");
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["name"], "guest");

    // Plain HTTP on the HTTPS port gets no HTTP answer.
    let plain =
        warren_management::http::send(&addr.to_string(), "GET", "/api/whoami", None, None).await;
    assert!(plain.is_err() || plain.unwrap().status != 200);
    broker.shutdown().await;
    std::fs::remove_dir_all(&certificate.dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_certificate_file_stops_start_up_naming_it() {
    let mut settings = Settings::default();
    for (key, value) in TEST_LISTENERS {
        settings.set(key, value).expect("test listener");
    }
    for (key, value) in [
        ("management.ssl.port", "0"),
        ("management.ssl.certfile", "/nonexistent/warren-cert.pem"),
        ("management.ssl.keyfile", "/nonexistent/warren-key.pem"),
    ] {
        settings.set(key, value).expect("setting");
    }
    let error = match Server::start(settings).await {
        Ok(server) => {
            server.shutdown().await;
            panic!("start-up must fail");
        }
        Err(error) => error.to_string(),
    };
    assert!(error.contains("/nonexistent/warren-cert.pem"), "{error}");
}
