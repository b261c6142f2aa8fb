//! Topic permissions on AMQP 1.0 publishes, as RabbitMQ 4.x's rabbit_amqp_session checks
//! them: a message to a topic exchange needs `write` on its routing key (the target
//! address's key or the message `subject`); a refused one ends the session with
//! `amqp:unauthorized-access` and RabbitMQ's text, while the connection and other sessions
//! carry on. fe2o3-amqp on a current-thread runtime (its disposition race).
//!
//! AMQP 1.0 sources are queues here (v2 `/queues/:queue`, v1 `/queue/:queue`), so an
//! attaching receiver creates no binding and RabbitMQ 4.x's read check (made only for v1
//! `/exchange/X/K` and `/topic/K` sources, which bind) has nothing to apply to.

mod amqp10_common;

use std::time::Duration;

use amqp10_common::{bind, declare_queue, ready};
use fe2o3_amqp::session::Error as SessionError;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{Message, Outcome, Properties};
use fe2o3_amqp::{Connection, Sendable, Sender, Session};
use warren_interop_tests::TestBroker;

/// How long to wait for the broker to end a session.
const END_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker where `bob` (password `bobpw`) has full permissions in `/` but may only publish
/// to `amq.topic` with keys starting `bob.`; queue `inbox` is bound to `amq.topic` with `#`.
async fn broker_with_bob() -> TestBroker {
    let broker = TestBroker::start().await;
    broker.add_topic_user("bob", "bobpw", "^{username}\\.", "^$");
    declare_queue(&broker, "inbox");
    bind(&broker, "amq.topic", "inbox", "#");
    broker
}

async fn connect_as_bob(broker: &TestBroker) -> fe2o3_amqp::connection::ConnectionHandle<()> {
    Connection::open(
        "topic-permissions",
        format!("amqp://bob:bobpw@{}", broker.addr()).as_str(),
    )
    .await
    .expect("bob connects")
}

fn refusal(key: &str) -> String {
    format!(
        "write access to topic '{key}' in exchange 'amq.topic' in vhost '/' refused for user 'bob'"
    )
}

/// Ends `session` and returns the error the broker ended it with.
async fn ended_with(
    session: &mut fe2o3_amqp::session::SessionHandle<()>,
) -> (ErrorCondition, String) {
    match tokio::time::timeout(END_TIMEOUT, session.end())
        .await
        .expect("the session ends in time")
    {
        Err(SessionError::RemoteEndedWithError(error)) => {
            (error.condition, error.description.unwrap_or_default())
        }
        other => panic!("expected the broker to end the session with an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_routing_key_in_the_target_address_is_checked_against_topic_write() {
    let broker = broker_with_bob().await;
    let mut connection = connect_as_bob(&broker).await;

    // Allowed: bob.* keys are accepted and routed.
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "allowed", "/exchanges/amq.topic/bob.news")
        .await
        .expect("attach");
    let outcome = sender.send("allowed").await.expect("sent");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    assert_eq!(ready(&broker, "inbox"), 1);
    sender.close().await.expect("detach");
    session.end().await.expect("session ends");

    // Refused: the v1 /topic/ address too; sent settled, the broker ends the session.
    for address in ["/exchanges/amq.topic/alice.news", "/topic/alice.news"] {
        let mut session = Session::begin(&mut connection).await.expect("session");
        let mut sender = Sender::attach(&mut session, "refused", address)
            .await
            .expect("attach (the link itself is allowed)");
        let settled = Sendable::builder()
            .message(Message::from("refused"))
            .settled(true)
            .build();
        sender
            .send(settled)
            .await
            .expect("a settled send completes");
        let (condition, text) = ended_with(&mut session).await;
        assert_eq!(condition, AmqpError::UnauthorizedAccess.into());
        assert_eq!(text, refusal("alice.news"));
        drop(sender);
    }
    assert_eq!(
        ready(&broker, "inbox"),
        1,
        "refused messages are not routed"
    );

    // The connection is still usable.
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "again", "/exchanges/amq.topic/bob.more")
        .await
        .expect("attach");
    assert!(matches!(
        sender.send("again").await.expect("sent"),
        Outcome::Accepted(_)
    ));
    assert_eq!(ready(&broker, "inbox"), 2);
    sender.close().await.expect("detach");
    session.end().await.expect("session ends");
    connection.close().await.expect("close");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_routing_key_from_the_subject_is_checked_against_topic_write() {
    let broker = broker_with_bob().await;
    let mut connection = connect_as_bob(&broker).await;
    let mut session = Session::begin(&mut connection).await.expect("session");
    let mut sender = Sender::attach(&mut session, "by-subject", "/exchanges/amq.topic")
        .await
        .expect("attach");
    let with_subject = |subject: &str| {
        Message::builder()
            .properties(Properties {
                subject: Some(subject.to_string()),
                ..Properties::default()
            })
            .value("body".to_string())
            .build()
    };
    let outcome = sender.send(with_subject("bob.a")).await.expect("sent");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    assert_eq!(ready(&broker, "inbox"), 1);
    let refused = Sendable::builder()
        .message(with_subject("carol.a"))
        .settled(true)
        .build();
    sender
        .send(refused)
        .await
        .expect("a settled send completes");
    let (condition, text) = ended_with(&mut session).await;
    assert_eq!(condition, AmqpError::UnauthorizedAccess.into());
    assert_eq!(text, refusal("carol.a"));
    assert_eq!(ready(&broker, "inbox"), 1);
    drop(sender);
    connection.close().await.expect("close");
    broker.shutdown().await;
}

#[tokio::test]
async fn other_exchange_types_and_users_without_topic_permissions_are_not_restricted() {
    let broker = broker_with_bob().await;
    bind(&broker, "amq.direct", "inbox", "alice.news");
    let mut connection = connect_as_bob(&broker).await;
    let mut session = Session::begin(&mut connection).await.expect("session");
    // amq.direct is not a topic exchange: the topic permission does not apply.
    let mut sender = Sender::attach(&mut session, "direct", "/exchanges/amq.direct/alice.news")
        .await
        .expect("attach");
    assert!(matches!(
        sender.send("direct").await.expect("sent"),
        Outcome::Accepted(_)
    ));
    sender.close().await.expect("detach");
    session.end().await.expect("session ends");
    connection.close().await.expect("close");
    // guest has no topic permission on amq.topic.
    let mut guest = Connection::open(
        "guest",
        format!("amqp://guest:guest@{}", broker.addr()).as_str(),
    )
    .await
    .expect("guest connects");
    let mut session = Session::begin(&mut guest).await.expect("session");
    let mut sender = Sender::attach(&mut session, "guest", "/exchanges/amq.topic/alice.news")
        .await
        .expect("attach");
    assert!(matches!(
        sender.send("guest").await.expect("sent"),
        Outcome::Accepted(_)
    ));
    assert_eq!(ready(&broker, "inbox"), 2);
    sender.close().await.expect("detach");
    session.end().await.expect("session ends");
    guest.close().await.expect("close");
    broker.shutdown().await;
}
