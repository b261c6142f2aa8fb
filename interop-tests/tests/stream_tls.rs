//! The stream protocol over TLS (`stream.listeners.ssl.default`) with the real
//! `rabbitmq-stream-client`: the client verifies the broker's certificate, and Metadata
//! advertises `stream.advertised_host`, the name the certificate is for.

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::{Environment, TlsConfiguration};
use warren_interop_tests::tls::Pki;
use warren_interop_tests::TestBroker;

// Two worker threads: on a current-thread runtime the client's TLS connect never completes
// while the in-process broker shares its thread (it passes on a runtime with workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_publishes_and_consumes_through_the_advertised_host() {
    let _ = tokio_rustls::rustls::crypto::aws_lc_rs::default_provider().install_default();
    let pki = Pki::new("stream-tls");
    let mut settings: Vec<(&str, String)> = pki.ssl_options(false);
    settings.push(("stream.listeners.ssl.default", "127.0.0.1:0".into()));
    settings.push(("stream.advertised_host", "localhost".into()));
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let broker = TestBroker::start_with(&settings).await;
    let port = broker
        .server()
        .stream_tls_addr()
        .expect("TLS listener")
        .port();
    let tls = TlsConfiguration::builder()
        .add_root_certificates(pki.path("ca.pem"))
        .build()
        .expect("TLS configuration");
    let environment = tokio::time::timeout(
        Duration::from_secs(10),
        Environment::builder()
            .host("localhost")
            .port(port)
            .tls(tls)
            .build(),
    )
    .await
    .expect("TLS connection in time")
    .expect("connects over TLS");
    environment
        .stream_creator()
        .create("secure")
        .await
        .expect("created");
    let producer = environment
        .producer()
        .build("secure")
        .await
        .expect("producer");
    let status = producer
        .send_with_confirm(Message::builder().body(b"sealed".to_vec()).build())
        .await
        .expect("sent");
    assert!(status.confirmed());
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("secure")
        .await
        .expect("consumer");
    let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("a delivery in time")
        .expect("open")
        .expect("delivered");
    assert_eq!(delivery.message().data(), Some(&b"sealed"[..]));
}
