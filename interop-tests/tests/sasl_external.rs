//! SASL EXTERNAL for AMQP 0-9-1 over TLS (`auth_mechanisms.N = EXTERNAL`,
//! `ssl_cert_login_from`): the client's verified certificate names the user, whose password
//! is not checked. amqprs logs in with EXTERNAL and uses the connection; a hand-driven client
//! checks what connection.start offers and RabbitMQ's refusal (403 ACCESS_REFUSED) when the
//! user the certificate names does not exist.

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::security::SecurityCredentials;
use amqprs::tls::TlsAdaptor;
use amqprs::BasicProperties;
use bytes::BytesMut;
use rcgen::DnType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;
use warren_amqp091::codec::{decode_frame, write_method_frame, Method, FRAME_METHOD};
use warren_core::access::Permissions;
use warren_core::value::Table;
use warren_interop_tests::tls::{connect, Pki};
use warren_interop_tests::TestBroker;

/// How long to wait for any one frame.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A broker with an AMQPS listener that requires client certificates from the test CA,
/// offers PLAIN, AMQPLAIN and EXTERNAL, and has the users `app-1` and `CN=app-2,O=Example`.
async fn broker(pki: &Pki, login_from: &str, fail_if_no_peer_cert: bool) -> TestBroker {
    let options = pki.ssl_options(true);
    let mut settings: Vec<(&str, &str)> = vec![
        ("listeners.ssl.default", "127.0.0.1:0"),
        ("ssl_cert_login_from", login_from),
        ("auth_mechanisms.1", "PLAIN"),
        ("auth_mechanisms.2", "AMQPLAIN"),
        ("auth_mechanisms.3", "EXTERNAL"),
    ];
    settings.extend(options.iter().map(|(k, v)| (*k, v.as_str())));
    if !fail_if_no_peer_cert {
        settings.push(("ssl_options.fail_if_no_peer_cert", "false"));
    }
    let broker = TestBroker::start_with(&settings).await;
    let vhost = broker.broker().vhost("/").expect("default vhost");
    for user in ["app-1", "CN=app-2,O=Example"] {
        broker.broker().add_user(user, "not-used", vec![]);
        vhost.set_permissions(user, Permissions::full());
    }
    broker
}

/// The handshake driven by hand over TLS: the protocol header, connection.start, and
/// start-ok with `mechanism`; returns the mechanisms offered and the broker's answer.
async fn start_ok(
    broker: &TestBroker,
    config: Arc<ClientConfig>,
    mechanism: &str,
) -> (String, Method) {
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    let mut stream = connect(addr, config).await.expect("TLS handshake");
    stream
        .write_all(b"AMQP\x00\x00\x09\x01")
        .await
        .expect("write");
    let mut buffer = BytesMut::new();
    let Method::ConnectionStart { mechanisms, .. } = next_method(&mut stream, &mut buffer).await
    else {
        panic!("expected connection.start");
    };
    let mut out = BytesMut::new();
    write_method_frame(
        &mut out,
        0,
        &Method::ConnectionStartOk {
            client_properties: Table::new(),
            mechanism: mechanism.to_string(),
            response: Vec::new(),
            locale: "en_US".to_string(),
        },
    )
    .expect("encodes");
    stream.write_all(&out).await.expect("write");
    let answer = next_method(&mut stream, &mut buffer).await;
    (String::from_utf8(mechanisms).expect("text"), answer)
}

/// The next method the broker sends.
async fn next_method(stream: &mut TlsStream<TcpStream>, buffer: &mut BytesMut) -> Method {
    loop {
        if let Some(frame) = decode_frame(buffer, 0).expect("valid frames") {
            assert_eq!(frame.frame_type, FRAME_METHOD);
            return Method::decode(&frame.payload).expect("valid method");
        }
        let read = tokio::time::timeout(REPLY_TIMEOUT, stream.read_buf(buffer))
            .await
            .expect("the broker answers in time")
            .expect("read");
        assert!(read > 0, "the broker closed the connection without a word");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqprs_logs_in_with_external_as_the_certificate_common_name() {
    let pki = Pki::new("external-cn");
    let broker = broker(&pki, "common_name", true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let adaptor = TlsAdaptor::new(
        TlsConnector::from(pki.client_config(Some(identity))),
        "localhost".to_string(),
    );
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    let mut arguments =
        OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), "ignored", "ignored");
    arguments
        .credentials(SecurityCredentials::new_external())
        .tls_adaptor(adaptor);
    let connection = Connection::open(&arguments)
        .await
        .expect("EXTERNAL login as app-1");
    let channel = connection.open_channel(None).await.expect("channel");
    channel
        .queue_declare(QueueDeclareArguments::new("external-q"))
        .await
        .expect("declare");
    channel
        .basic_publish(
            BasicProperties::default(),
            b"signed in by certificate".to_vec(),
            BasicPublishArguments::new("", "external-q"),
        )
        .await
        .expect("publish");
    // Methods on one channel are handled in order: the publish is routed before the get.
    let got = channel
        .basic_get(BasicGetArguments::new("external-q").no_ack(true).finish())
        .await
        .expect("get");
    let (_, _, body) = got.expect("the message published over the EXTERNAL connection");
    assert_eq!(body, b"signed in by certificate");
    let users: Vec<String> = broker
        .broker()
        .connections()
        .list()
        .into_iter()
        .map(|connection| connection.info.user)
        .collect();
    assert_eq!(users, vec!["app-1".to_string()]);
    connection.close().await.expect("close");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_uses_the_distinguished_name_by_default() {
    let pki = Pki::new("external-dn");
    let broker = broker(&pki, "distinguished_name", true).await;
    let identity = pki.client_named(
        &[
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "app-2"),
        ],
        true,
    );
    let (mechanisms, answer) =
        start_ok(&broker, pki.client_config(Some(identity)), "EXTERNAL").await;
    assert_eq!(mechanisms, "PLAIN AMQPLAIN EXTERNAL");
    assert!(
        matches!(answer, Method::ConnectionTune { .. }),
        "CN=app-2,O=Example logs in: {answer:?}"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_is_refused_when_the_certificate_names_no_user() {
    let pki = Pki::new("external-refused");
    let broker = broker(&pki, "common_name", true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "ghost")], true);
    let (_, answer) = start_ok(&broker, pki.client_config(Some(identity)), "EXTERNAL").await;
    let Method::ConnectionClose {
        reply_code,
        reply_text,
        ..
    } = answer
    else {
        panic!("expected connection.close, got {answer:?}");
    };
    assert_eq!(reply_code, 403);
    assert_eq!(
        reply_text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For details \
         see the broker logfile."
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_is_offered_only_to_clients_with_a_certificate() {
    let pki = Pki::new("external-offer");
    let broker = broker(&pki, "common_name", false).await;
    let (mechanisms, answer) = start_ok(&broker, pki.client_config(None), "EXTERNAL").await;
    assert_eq!(mechanisms, "PLAIN AMQPLAIN");
    let Method::ConnectionClose { reply_code, .. } = answer else {
        panic!("expected connection.close, got {answer:?}");
    };
    // As RabbitMQ: a mechanism that was not offered is a 503 COMMAND_INVALID.
    assert_eq!(reply_code, 503);
    broker.shutdown().await;
}
