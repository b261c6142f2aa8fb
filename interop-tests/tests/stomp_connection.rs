//! STOMP CONNECT: version negotiation, login, vhosts, heart-beats, DISCONNECT and shutdown,
//! against the real listener over a socket.

use std::time::Duration;

use warren_core::broker::Alarm;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

#[tokio::test]
async fn connect_picks_the_highest_common_version_and_reports_the_session() {
    let broker = TestBroker::start().await;
    for (accept, chosen) in [
        ("1.0,1.1,1.2", "1.2"),
        ("1.1", "1.1"),
        ("1.0,1.1,9.9", "1.1"),
    ] {
        let (client, connected) = StompClient::connect_with(
            broker.stomp_addr(),
            &[
                ("accept-version", accept),
                ("host", "/"),
                ("login", "guest"),
                ("passcode", "guest"),
            ],
        )
        .await;
        assert_eq!(connected.header("version"), Some(chosen));
        assert!(connected
            .header("session")
            .is_some_and(|s| s.starts_with("session-")));
        assert!(connected
            .header("server")
            .is_some_and(|s| s.starts_with("Warren/")));
        client.disconnect().await;
    }
    // No accept-version: a STOMP 1.0 client, which may also use the default login.
    let (client, connected) = StompClient::connect_with(broker.stomp_addr(), &[]).await;
    assert_eq!(connected.header("version"), Some("1.0"));
    client.disconnect().await;
}

#[tokio::test]
async fn no_common_version_is_a_version_mismatch_error() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::open(broker.stomp_addr()).await;
    client
        .write_frame("CONNECT", &[("accept-version", "2.0")], b"")
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("Version mismatch"));
    assert_eq!(error.text(), "Supported versions are 1.0,1.1,1.2\n");
}

#[tokio::test]
async fn bad_credentials_and_unknown_vhosts_are_refused() {
    let broker = TestBroker::start().await;
    let cases: [(&[(&str, &str)], &str); 3] = [
        (
            &[("login", "guest"), ("passcode", "nope")],
            "Access refused for user 'guest'",
        ),
        (
            &[("login", "who"), ("passcode", "x")],
            "Access refused for user 'who'",
        ),
        (
            &[
                ("login", "guest"),
                ("passcode", "guest"),
                ("host", "elsewhere"),
            ],
            "Virtual host 'elsewhere' access denied",
        ),
    ];
    for (headers, detail) in cases {
        let mut client = StompClient::open(broker.stomp_addr()).await;
        let mut all = vec![("accept-version", "1.2")];
        all.extend_from_slice(headers);
        client.write_frame("CONNECT", &all, b"").await;
        let error = client.expect_error().await;
        assert_eq!(error.header("message"), Some("Bad CONNECT"));
        assert_eq!(error.text(), detail);
    }
}

#[tokio::test]
async fn frames_before_connect_are_refused_unless_implicit_connect_is_on() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::open(broker.stomp_addr()).await;
    client
        .write_frame("SEND", &[("destination", "/queue/q")], b"x")
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("Illegal command"));
    broker.shutdown().await;

    let broker = TestBroker::start_with(&[("stomp.implicit_connect", "true")]).await;
    let mut client = StompClient::open(broker.stomp_addr()).await;
    client
        .write_frame(
            "SEND",
            &[("destination", "/queue/q"), ("receipt", "r")],
            b"x",
        )
        .await;
    client.expect_receipt("r").await;
    let queue = broker.broker().vhost("/").unwrap().queue("q").unwrap();
    assert_eq!(queue.message_count(), 1);
}

#[tokio::test]
async fn server_sends_heart_beats_at_the_agreed_interval() {
    let broker = TestBroker::start().await;
    let (mut client, connected) = StompClient::connect_with(
        broker.stomp_addr(),
        &[
            ("accept-version", "1.2"),
            ("host", "/"),
            ("heart-beat", "0,200"),
        ],
    )
    .await;
    // The broker sends no more often than once a second, and expects nothing from us.
    assert_eq!(connected.header("heart-beat"), Some("1000,0"));
    assert!(client.no_frame_within(Duration::from_millis(2600)).await);
    assert!(
        client.heartbeats_received >= 2,
        "got {} heart-beats in 2.6 s",
        client.heartbeats_received
    );
}

#[tokio::test]
async fn a_client_that_stops_sending_heart_beats_is_disconnected() {
    let broker = TestBroker::start().await;
    let (mut client, connected) = StompClient::connect_with(
        broker.stomp_addr(),
        &[
            ("accept-version", "1.2"),
            ("host", "/"),
            ("heart-beat", "300,0"),
        ],
    )
    .await;
    assert_eq!(connected.header("heart-beat"), Some("0,1000"));
    // Keep the promise for a while: the connection stays up.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.write_raw(b"\n").await;
    }
    client.send("/queue/alive", "still here", &[]).await;
    // Then fall silent: the broker closes within twice the interval (plus slack).
    let started = std::time::Instant::now();
    assert!(client.is_closed_by_server().await);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn disconnect_with_receipt_is_acknowledged_then_closed() {
    let broker = TestBroker::start().await;
    let client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.disconnect().await;
}

#[tokio::test]
async fn frames_after_a_disconnect_are_dropped_and_the_receipt_still_arrives() {
    // As with AMQP 0-9-1's connection.close: a client may still be writing when its
    // DISCONNECT goes out. The RECEIPT arrives, then a clean end of stream; what followed the
    // DISCONNECT is not acted on.
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let mut bytes = b"DISCONNECT\nreceipt:bye\n\n\0".to_vec();
    for index in 0..200 {
        bytes.extend_from_slice(
            format!("SEND\ndestination:/queue/after-disconnect\n\nlate {index}\0").as_bytes(),
        );
    }
    client.write_raw(&bytes).await;
    client.expect_receipt("bye").await;
    assert!(client.is_closed_by_server().await);
    let vhost = broker.broker().vhost("/").expect("vhost");
    assert!(
        vhost.queue("after-disconnect").is_none(),
        "SENDs after DISCONNECT are dropped"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn broker_shutdown_ends_stomp_connections_with_an_error_frame() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    broker.shutdown().await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("connection_forced"));
}

#[tokio::test]
async fn a_resource_alarm_holds_back_publishers_until_it_clears() {
    let broker = TestBroker::start().await;
    let mut consumer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    consumer.subscribe("/queue/alarmed", "s", "auto", &[]).await;
    let mut publisher = StompClient::connect(broker.stomp_addr(), "1.2").await;
    publisher.send("/queue/alarmed", "before", &[]).await;
    assert_eq!(consumer.expect_message().await.text(), "before");

    broker.broker().set_alarm(Alarm::Memory, true);
    publisher
        .write_frame(
            "SEND",
            &[("destination", "/queue/alarmed"), ("receipt", "held")],
            b"during",
        )
        .await;
    assert!(
        publisher.no_frame_within(Duration::from_millis(300)).await,
        "a blocked publisher is not read, so gets no receipt"
    );
    assert!(consumer.no_frame_within(Duration::from_millis(100)).await);
    broker.broker().set_alarm(Alarm::Memory, false);
    publisher.expect_receipt("held").await;
    assert_eq!(consumer.expect_message().await.text(), "during");
}
