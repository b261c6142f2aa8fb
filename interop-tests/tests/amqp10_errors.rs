//! AMQP 1.0 error conditions against the real server: links to missing or forbidden objects,
//! logins, vhosts, and malformed input (raw bytes). Each error ends only what it must: the
//! link, the session or the connection, and other connections carry on.

mod amqp10_common;

use amqp10_common::*;
use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::definitions::{
    AmqpError, ConnectionError, ErrorCondition, Handle, SessionError,
};
use fe2o3_amqp::types::messaging::Outcome;
use fe2o3_amqp::types::performatives::{Begin, Close, End, Performative, Transfer};
use fe2o3_amqp::types::sasl::SaslCode;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use warren_core::access::Permissions;
use warren_interop_tests::TestBroker;

fn condition(condition: impl Into<ErrorCondition>) -> ErrorCondition {
    condition.into()
}

#[tokio::test]
async fn links_to_missing_objects_detach_with_not_found() {
    let broker = TestBroker::start().await;
    let (mut connection, mut session) = connect(&broker).await;
    match Receiver::attach(&mut session, "r", "/queues/missing").await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::NotFound));
            assert_eq!(
                error.description.as_deref(),
                Some("no queue 'missing' in vhost '/'")
            );
        }
        other => panic!("expected not-found, got {other:?}"),
    }
    match Sender::attach(&mut session, "s", "/exchanges/nope/key").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::NotFound));
            assert_eq!(
                error.description.as_deref(),
                Some("no exchange 'nope' in vhost '/'")
            );
        }
        other => panic!("expected not-found, got {other:?}"),
    }
    match Sender::attach(&mut session, "s2", "/queues/absent").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::NotFound));
            assert_eq!(
                error.description.as_deref(),
                Some("no queue 'absent' in vhost '/'")
            );
        }
        other => panic!("expected not-found, got {other:?}"),
    }
    match Sender::attach(&mut session, "s3", "/no/such/address").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::InvalidField));
        }
        other => panic!("expected invalid-field, got {other:?}"),
    }
    // The session survives refused links.
    declare_queue(&broker, "present");
    let mut sender = Sender::attach(&mut session, "ok", "/queues/present")
        .await
        .unwrap();
    assert!(matches!(
        sender.send("x").await.unwrap(),
        Outcome::Accepted(_)
    ));
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn forbidden_links_detach_with_unauthorized_access() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "guarded");
    broker.broker().add_user("limited", "secret", vec![]);
    broker.broker().vhost("/").unwrap().set_permissions(
        "limited",
        Permissions::new("", "^nothing$", "^nothing$").unwrap(),
    );
    let mut connection = Connection::open(
        "limited",
        format!("amqp://limited:secret@{}", broker.addr()).as_str(),
    )
    .await
    .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    match Receiver::attach(&mut session, "r", "/queues/guarded").await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::UnauthorizedAccess));
            assert_eq!(
                error.description.as_deref(),
                Some("read access to queue 'guarded' in vhost '/' refused for user 'limited'")
            );
        }
        other => panic!("expected unauthorized-access, got {other:?}"),
    }
    match Sender::attach(&mut session, "s", "/exchanges/amq.direct/k").await {
        Err(SenderAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(error.condition, condition(AmqpError::UnauthorizedAccess));
            assert_eq!(
                error.description.as_deref(),
                Some(
                    "write access to exchange 'amq.direct' in vhost '/' refused for user 'limited'"
                )
            );
        }
        other => panic!("expected unauthorized-access, got {other:?}"),
    }
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn logins_plain_and_anonymous() {
    let broker = TestBroker::start().await;
    let refused = Connection::open(
        "bad",
        format!("amqp://guest:wrong@{}", broker.addr()).as_str(),
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(OpenError::SaslError {
                code: SaslCode::Auth,
                ..
            })
        ),
        "{refused:?}"
    );
    // ANONYMOUS is not offered unless configured.
    let anonymous = Connection::builder()
        .container_id("anon")
        .sasl_profile(SaslProfile::Anonymous)
        .open(format!("amqp://{}", broker.addr()).as_str())
        .await;
    assert!(anonymous.is_err());
    broker.shutdown().await;

    let broker = TestBroker::start_with(&[("anonymous_login_user", "guest")]).await;
    declare_queue(&broker, "anon");
    let mut connection = Connection::builder()
        .container_id("anon")
        .sasl_profile(SaslProfile::Anonymous)
        .open(format!("amqp://{}", broker.addr()).as_str())
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    let mut sender = Sender::attach(&mut session, "s", "/queues/anon")
        .await
        .unwrap();
    assert!(matches!(
        sender.send("x").await.unwrap(),
        Outcome::Accepted(_)
    ));
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn the_vhost_comes_from_the_open_hostname() {
    let broker = TestBroker::start().await;
    let other = broker.broker().add_vhost("other");
    other.set_permissions("guest", Permissions::full());
    let mut connection = Connection::builder()
        .container_id("vhost")
        .hostname("vhost:other")
        .open(url(&broker).as_str())
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    // The queue exists only in the default vhost: not found in "other".
    declare_queue(&broker, "only-in-default");
    match Receiver::attach(&mut session, "r", "/queues/only-in-default").await {
        Err(ReceiverAttachError::RemoteClosedWithError(error)) => {
            assert_eq!(
                error.description.as_deref(),
                Some("no queue 'only-in-default' in vhost 'other'")
            );
        }
        other => panic!("expected not-found, got {other:?}"),
    }
    connection.close().await.unwrap();

    let mut raw = RawClient::connect(&broker).await;
    raw.open(Some("vhost:missing")).await;
    match raw.next().await {
        Some(Performative::Close(close)) => {
            let error = close.error.unwrap();
            assert_eq!(error.condition, condition(AmqpError::NotAllowed));
            assert_eq!(
                error.description.as_deref(),
                Some("vhost missing not found")
            );
        }
        other => panic!("expected close, got {other:?}"),
    }
    broker.shutdown().await;
}

fn begin() -> Performative {
    Performative::Begin(Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Handle(10),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

async fn expect_close(raw: &mut RawClient, expected: ErrorCondition) -> String {
    loop {
        match raw.next().await {
            Some(Performative::Close(close)) => {
                let error = close.error.expect("close carries an error");
                assert_eq!(error.condition, expected);
                return error.description.unwrap_or_default();
            }
            Some(_) => continue,
            None => panic!("socket closed without a close frame"),
        }
    }
}

#[tokio::test]
async fn malformed_input_closes_only_the_offending_connection() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "bystander");
    let (mut bystander, mut bystander_session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut bystander_session, "s", "/queues/bystander")
        .await
        .unwrap();

    // A performative that does not decode: amqp:decode-error.
    let mut raw = RawClient::connect(&broker).await;
    raw.open(None).await;
    raw.send_raw(&[0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x12, 0x45])
        .await;
    expect_close(&mut raw, condition(AmqpError::DecodeError)).await;
    // The broker waits for our close, then ends the socket.
    raw.send(0, Performative::Close(Close { error: None }))
        .await;
    assert!(raw.next().await.is_none());

    // A frame header smaller than 8 bytes: amqp:connection:framing-error.
    let mut raw = RawClient::connect(&broker).await;
    raw.open(None).await;
    raw.send_raw(&[0, 0, 0, 4, 2, 0, 0, 0]).await;
    expect_close(&mut raw, condition(ConnectionError::FramingError)).await;

    // A frame larger than the max-frame-size the broker announced.
    let mut raw = RawClient::connect(&broker).await;
    let open = raw.open(None).await;
    let too_big = open.max_frame_size.0 + 1;
    let mut header = too_big.to_be_bytes().to_vec();
    header.extend_from_slice(&[2, 0, 0, 0]);
    raw.send_raw(&header).await;
    expect_close(&mut raw, condition(ConnectionError::FramingError)).await;

    // A frame on a channel with no session.
    let mut raw = RawClient::connect(&broker).await;
    raw.open(None).await;
    raw.send(7, Performative::End(End { error: None })).await;
    let text = expect_close(&mut raw, condition(ConnectionError::FramingError)).await;
    assert!(text.contains("channel 7"), "{text}");

    // Nothing of that reached the bystander.
    assert!(matches!(
        sender.send("still fine").await.unwrap(),
        Outcome::Accepted(_)
    ));
    bystander.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_transfer_on_an_unattached_handle_ends_only_its_session() {
    let broker = TestBroker::start().await;
    let mut raw = RawClient::connect(&broker).await;
    raw.open(None).await;
    raw.send(0, begin()).await;
    assert!(matches!(raw.next().await, Some(Performative::Begin(_))));
    raw.send(1, begin()).await;
    assert!(matches!(raw.next().await, Some(Performative::Begin(_))));
    let transfer = Transfer {
        handle: Handle(5),
        delivery_id: Some(0),
        delivery_tag: Some(vec![1].into()),
        message_format: Some(0),
        settled: Some(true),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    raw.send(0, Performative::Transfer(transfer)).await;
    match raw.next().await {
        Some(Performative::End(end)) => {
            let error = end.error.unwrap();
            assert_eq!(error.condition, condition(SessionError::UnattachedHandle));
        }
        other => panic!("expected end, got {other:?}"),
    }
    raw.send(0, Performative::End(End { error: None })).await;
    // The other session is still there: ending it is answered with an end.
    raw.send(1, Performative::End(End { error: None })).await;
    match raw.next().await {
        Some(Performative::End(end)) => assert!(end.error.is_none()),
        other => panic!("expected end, got {other:?}"),
    }
    raw.send(0, Performative::Close(Close { error: None }))
        .await;
    assert!(matches!(raw.next().await, Some(Performative::Close(_))));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_client_silent_past_the_idle_timeout_is_closed() {
    // heartbeat (seconds) is the idle-time-out the broker announces to AMQP 1.0 clients.
    let broker = TestBroker::start_with(&[("heartbeat", "1")]).await;
    let mut raw = RawClient::connect(&broker).await;
    let open = raw.open(None).await;
    assert_eq!(open.idle_time_out, Some(1000));
    // Time passing is the behaviour under test: the raw client sends nothing more.
    let text = expect_close(&mut raw, condition(AmqpError::ResourceLimitExceeded)).await;
    assert_eq!(text, "local-idle-timeout expired");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_plain_amqp_1_0_header_without_sasl_needs_anonymous_logins() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Without ANONYMOUS configured the broker answers with the SASL header and closes.
    let broker = TestBroker::start().await;
    let mut stream = tokio::net::TcpStream::connect(broker.addr()).await.unwrap();
    stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"AMQP\x03\x01\x00\x00");
    broker.shutdown().await;

    // With it, the connection proceeds without SASL as the anonymous login user.
    let broker = TestBroker::start_with(&[("anonymous_login_user", "guest")]).await;
    let mut stream = tokio::net::TcpStream::connect(broker.addr()).await.unwrap();
    stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).await.unwrap();
    assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
    drop(stream);
    broker.shutdown().await;
}
