//! STOMP certificate login (`stomp.ssl_cert_login = true`, `ssl_cert_login_from`), as
//! RabbitMQ's STOMP plugin: over TLS with a verified client certificate, a CONNECT without
//! a `login` header logs in as the user the certificate names, with no passcode; a `login`
//! header takes priority; a certificate naming no existing user is refused with RabbitMQ's
//! ERROR; with the key off, the default login applies as before. Driven with the repository's
//! STOMP test client over TLS (tokio-rustls, the shared rcgen CA).

use rcgen::DnType;
use warren_core::access::Permissions;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::tls::{connect, Identity, Pki};
use warren_interop_tests::TestBroker;

/// A broker with a STOMP-over-TLS listener requiring client certificates from the test CA,
/// users named by the certificate's common name, certificate login as `ssl_cert_login`
/// says, and the user `app-1` (full permissions in `/`).
async fn broker(pki: &Pki, ssl_cert_login: bool) -> TestBroker {
    let options = pki.ssl_options(true);
    let mut settings: Vec<(&str, &str)> = vec![
        ("stomp.listeners.ssl.default", "127.0.0.1:0"),
        ("ssl_cert_login_from", "common_name"),
        (
            "stomp.ssl_cert_login",
            if ssl_cert_login { "true" } else { "false" },
        ),
    ];
    settings.extend(options.iter().map(|(k, v)| (*k, v.as_str())));
    let broker = TestBroker::start_with(&settings).await;
    broker.broker().add_user("app-1", "secret", vec![]);
    broker
        .broker()
        .vhost("/")
        .expect("default vhost")
        .set_permissions("app-1", Permissions::full());
    broker
}

/// A STOMP client over TLS presenting `identity`, nothing sent yet.
async fn client(broker: &TestBroker, pki: &Pki, identity: Identity) -> StompClient {
    let addr = broker
        .server()
        .stomps_addr()
        .expect("STOMP over TLS listener");
    let stream = connect(addr, pki.client_config(Some(identity)))
        .await
        .expect("TLS handshake");
    StompClient::over(Box::new(stream))
}

/// The users of the open STOMP connections, with whether each runs over TLS.
fn stomp_users(broker: &TestBroker) -> Vec<(String, bool)> {
    broker
        .broker()
        .connections()
        .list()
        .into_iter()
        .filter(|c| c.info.protocol.starts_with("STOMP"))
        .map(|c| (c.info.user, c.info.tls))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_without_login_uses_the_certificate_user() {
    let pki = Pki::new("stomp-cert-login");
    let broker = broker(&pki, true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let (mut stomp, connected) = StompClient::connect_over(
        client(&broker, &pki, identity).await,
        &[("accept-version", "1.2"), ("host", "/")],
    )
    .await;
    assert_eq!(connected.header("version"), Some("1.2"));
    assert_eq!(stomp_users(&broker), vec![("app-1".to_string(), true)]);
    // The user works: subscribe and receive its own message.
    stomp
        .subscribe("/queue/cert-login", "sub-1", "auto", &[])
        .await;
    stomp.send("/queue/cert-login", "signed", &[]).await;
    let message = stomp.expect_message().await;
    assert_eq!(message.text(), "signed");
    stomp.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_header_takes_priority_over_the_certificate() {
    let pki = Pki::new("stomp-cert-login-header");
    let broker = broker(&pki, true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let (stomp, _) = StompClient::connect_over(
        client(&broker, &pki, identity).await,
        &[
            ("accept-version", "1.2"),
            ("host", "/"),
            ("login", "guest"),
            ("passcode", "guest"),
        ],
    )
    .await;
    assert_eq!(stomp_users(&broker), vec![("guest".to_string(), true)]);
    stomp.disconnect().await;
    // A wrong passcode is still refused although the certificate names a user.
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let mut stomp = client(&broker, &pki, identity).await;
    stomp
        .write_frame(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("login", "app-1"),
                ("passcode", "wrong"),
            ],
            b"",
        )
        .await;
    let error = stomp.expect_error().await;
    assert_eq!(error.header("message"), Some("Bad CONNECT"));
    assert_eq!(error.text(), "Access refused for user 'app-1'");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_naming_no_user_is_refused() {
    let pki = Pki::new("stomp-cert-login-ghost");
    let broker = broker(&pki, true).await;
    let identity = pki.client_named(&[(DnType::CommonName, "ghost")], true);
    let mut stomp = client(&broker, &pki, identity).await;
    stomp
        .write_frame("CONNECT", &[("accept-version", "1.2")], b"")
        .await;
    let error = stomp.expect_error().await;
    assert_eq!(error.header("message"), Some("Bad CONNECT"));
    assert_eq!(error.text(), "Access refused for user 'ghost'");
    assert!(stomp_users(&broker).is_empty());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ssl_cert_login_the_default_login_applies() {
    let pki = Pki::new("stomp-no-cert-login");
    let broker = broker(&pki, false).await;
    let identity = pki.client_named(&[(DnType::CommonName, "app-1")], true);
    let (stomp, _) = StompClient::connect_over(
        client(&broker, &pki, identity).await,
        &[("accept-version", "1.2"), ("host", "/")],
    )
    .await;
    // stomp.default_user (guest), not the certificate's user.
    assert_eq!(stomp_users(&broker), vec![("guest".to_string(), true)]);
    stomp.disconnect().await;
    broker.shutdown().await;
}
