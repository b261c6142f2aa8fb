//! AMQP 1.0 on the AMQPS port (`listeners.ssl.default`): after the TLS handshake the
//! protocol header decides, as on the plain port, so fe2o3-amqp over TLS (with the shared
//! rcgen CA) logs in with SASL PLAIN and publishes and consumes. SASL EXTERNAL
//! (`auth_mechanisms.N = EXTERNAL`, `ssl_cert_login_from`) logs in as the user the client
//! certificate names: fe2o3 has no EXTERNAL profile, so the SASL exchange is driven by hand
//! and fe2o3 carries on over the same TLS stream from the AMQP header. A certificate the CA
//! did not sign is refused, and so is EXTERNAL for a user that does not exist.
//!
//! Every test that sends unsettled runs on a current-thread runtime (fe2o3 0.14's
//! disposition race, see durable_settlement.rs).

mod amqp10_common;

use std::time::Duration;

use amqp10_common::{declare_queue, ready};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::Outcome;
use fe2o3_amqp::types::sasl::SaslInit;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use rcgen::DnType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use warren_core::access::Permissions;
use warren_interop_tests::tls::{connect, Identity, Pki};
use warren_interop_tests::TestBroker;

/// How long to wait for any one answer of the broker.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker with an AMQPS listener. With `verify_peer`, client certificates from the test CA
/// are required, EXTERNAL is offered after PLAIN, users are named by the certificate's
/// common name, and the user `app-1` exists with full permissions in `/`.
async fn broker(pki: &Pki, verify_peer: bool) -> TestBroker {
    let options = pki.ssl_options(verify_peer);
    let mut settings: Vec<(&str, &str)> = vec![("listeners.ssl.default", "127.0.0.1:0")];
    settings.extend(options.iter().map(|(k, v)| (*k, v.as_str())));
    if verify_peer {
        settings.extend([
            ("auth_mechanisms.1", "PLAIN"),
            ("auth_mechanisms.2", "EXTERNAL"),
            ("ssl_cert_login_from", "common_name"),
        ]);
    }
    let broker = TestBroker::start_with(&settings).await;
    broker.broker().add_user("app-1", "not-used", vec![]);
    broker
        .broker()
        .vhost("/")
        .expect("default vhost")
        .set_permissions("app-1", Permissions::full());
    declare_queue(&broker, "over-tls");
    broker
}

/// A TLS connection to the AMQPS port presenting `identity`.
async fn tls(broker: &TestBroker, pki: &Pki, identity: Option<Identity>) -> TlsStream<TcpStream> {
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    connect(addr, pki.client_config(identity))
        .await
        .expect("TLS handshake")
}

/// The body of the next SASL frame from the broker (after its 8-byte frame header).
async fn sasl_frame(stream: &mut TlsStream<TcpStream>) -> Vec<u8> {
    let mut size = [0u8; 4];
    tokio::time::timeout(REPLY_TIMEOUT, stream.read_exact(&mut size))
        .await
        .expect("the broker answers in time")
        .expect("read");
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize - 4];
    stream.read_exact(&mut rest).await.expect("read");
    rest.split_off(4)
}

/// SASL driven by hand: the SASL header, the mechanisms the broker offers (as text, for
/// `contains`), sasl-init with `mechanism` and no response, and the outcome's code (0 ok,
/// 1 auth).
async fn sasl(stream: &mut TlsStream<TcpStream>, mechanism: &str) -> (String, u8) {
    stream
        .write_all(b"AMQP\x03\x01\x00\x00")
        .await
        .expect("write");
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).await.expect("read");
    assert_eq!(&header, b"AMQP\x03\x01\x00\x00");
    let mechanisms = String::from_utf8_lossy(&sasl_frame(stream).await).into_owned();
    let mut init = bytes::BytesMut::new();
    warren_amqp10::codec::encode_sasl_frame(
        &mut init,
        &SaslInit {
            mechanism: mechanism.into(),
            initial_response: Some(Vec::new().into()),
            hostname: None,
        },
    );
    stream.write_all(&init).await.expect("write");
    let outcome = sasl_frame(stream).await;
    // sasl-outcome: described by 0x44, a list8 (0xc0, size, count) whose first field is the
    // code as a ubyte (0x50, code).
    let at = outcome
        .windows(3)
        .position(|w| w == [0x53, 0x44, 0xc0])
        .unwrap_or_else(|| panic!("not a sasl-outcome: {outcome:?}"));
    assert_eq!(outcome[at + 5], 0x50, "{outcome:?}");
    (mechanisms, outcome[at + 6])
}

/// The users of the open AMQP 1.0 connections.
fn amqp10_users(broker: &TestBroker) -> Vec<(String, bool)> {
    broker
        .broker()
        .connections()
        .list()
        .into_iter()
        .filter(|c| c.info.protocol == "AMQP 1.0")
        .map(|c| (c.info.user, c.info.tls))
        .collect()
}

#[tokio::test]
async fn fe2o3_logs_in_with_plain_over_tls_and_publishes_and_consumes() {
    let pki = Pki::new("amqp10-plain");
    let broker = broker(&pki, false).await;
    let stream = tls(&broker, &pki, None).await;
    let mut connection = Connection::builder()
        .container_id("amqp10-over-tls")
        .sasl_profile(SaslProfile::Plain {
            username: "guest".into(),
            password: "guest".into(),
        })
        .open_with_stream(stream)
        .await
        .expect("AMQP 1.0 opens over TLS");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "tls-sender", "/queues/over-tls")
        .await
        .expect("sender attaches");
    for body in ["one", "two"] {
        let outcome = sender.send(body).await.expect("sent");
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    assert_eq!(ready(&broker, "over-tls"), 2);
    assert_eq!(amqp10_users(&broker), vec![("guest".to_string(), true)]);
    let mut receiver = Receiver::attach(&mut session, "tls-receiver", "/queues/over-tls")
        .await
        .expect("receiver attaches");
    for expected in ["one", "two"] {
        let delivery = tokio::time::timeout(REPLY_TIMEOUT, receiver.recv::<String>())
            .await
            .expect("delivered in time")
            .expect("delivery");
        assert_eq!(delivery.body(), expected);
        receiver.accept(&delivery).await.expect("accepted");
    }
    receiver.close().await.expect("receiver closes");
    sender.close().await.expect("sender closes");
    session.end().await.expect("session ends");
    connection.close().await.expect("connection closes");
    broker.shutdown().await;
}

#[tokio::test]
async fn external_logs_in_as_the_user_the_certificate_names() {
    let pki = Pki::new("amqp10-external");
    let broker = broker(&pki, true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let mut stream = tls(&broker, &pki, Some(identity)).await;
    let (mechanisms, code) = sasl(&mut stream, "EXTERNAL").await;
    assert!(
        mechanisms.contains("PLAIN") && mechanisms.contains("EXTERNAL"),
        "{mechanisms}"
    );
    assert_eq!(code, 0, "EXTERNAL login succeeds");
    // fe2o3 carries on from the AMQP header over the authenticated stream.
    let mut connection = Connection::builder()
        .container_id("amqp10-external")
        .open_with_stream(stream)
        .await
        .expect("AMQP 1.0 opens after EXTERNAL");
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "external-sender", "/queues/over-tls")
        .await
        .expect("sender attaches");
    let outcome = sender.send("from app-1").await.expect("sent");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    assert_eq!(ready(&broker, "over-tls"), 1);
    assert_eq!(amqp10_users(&broker), vec![("app-1".to_string(), true)]);
    sender.close().await.expect("sender closes");
    session.end().await.expect("session ends");
    connection.close().await.expect("connection closes");
    broker.shutdown().await;
}

#[tokio::test]
async fn external_for_a_user_that_does_not_exist_is_refused() {
    let pki = Pki::new("amqp10-external-unknown");
    let broker = broker(&pki, true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "nobody")], true);
    let mut stream = tls(&broker, &pki, Some(identity)).await;
    let (_, code) = sasl(&mut stream, "EXTERNAL").await;
    assert_eq!(code, 1, "sasl-outcome auth");
    // The broker closes the connection after the outcome.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(REPLY_TIMEOUT, stream.read_to_end(&mut rest))
        .await
        .expect("closed in time");
    assert!(read.is_err() || rest.is_empty(), "{rest:?}");
    assert!(amqp10_users(&broker).is_empty());
    broker.shutdown().await;
}

#[tokio::test]
async fn external_is_not_offered_without_auth_mechanisms_external() {
    let pki = Pki::new("amqp10-no-external");
    // verify_peer, but auth_mechanisms left at its default (no EXTERNAL).
    let options = pki.ssl_options(true);
    let mut settings: Vec<(&str, &str)> = vec![("listeners.ssl.default", "127.0.0.1:0")];
    settings.extend(options.iter().map(|(k, v)| (*k, v.as_str())));
    let broker = TestBroker::start_with(&settings).await;
    broker.broker().add_user("client", "not-used", vec![]);
    let mut stream = tls(&broker, &pki, Some(pki.client(true))).await;
    let (mechanisms, code) = sasl(&mut stream, "EXTERNAL").await;
    assert!(!mechanisms.contains("EXTERNAL"), "{mechanisms}");
    assert_eq!(code, 1, "sasl-outcome auth");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_client_certificate_the_ca_did_not_sign_is_refused() {
    let pki = Pki::new("amqp10-untrusted");
    let broker = broker(&pki, true).await;
    let addr = broker.server().amqps_addr().expect("AMQPS listener");
    // With TLS 1.3 the client finishes its side of the handshake before the broker checks
    // the certificate, so the refusal may surface at the handshake or at the first read.
    let refused = match connect(addr, pki.client_config(Some(pki.client(false)))).await {
        Err(_) => true,
        Ok(stream) => {
            let open = Connection::builder()
                .container_id("untrusted")
                .sasl_profile(SaslProfile::Plain {
                    username: "guest".into(),
                    password: "guest".into(),
                })
                .open_with_stream(stream);
            tokio::time::timeout(REPLY_TIMEOUT, open)
                .await
                .expect("refused in time")
                .is_err()
        }
    };
    assert!(refused, "a self-signed client certificate must be refused");
    assert!(amqp10_users(&broker).is_empty());
    // A CA-signed certificate still gets in with PLAIN.
    let stream = tls(&broker, &pki, Some(pki.client(true))).await;
    let mut connection = Connection::builder()
        .container_id("trusted")
        .sasl_profile(SaslProfile::Plain {
            username: "guest".into(),
            password: "guest".into(),
        })
        .open_with_stream(stream)
        .await
        .expect("a CA-signed client certificate is accepted");
    connection.close().await.expect("closes");
    broker.shutdown().await;
}
