//! Publishing through amqprs: publisher confirms (coalesced acks, returns before confirms),
//! mandatory and non-mandatory unroutable messages, transactions (publishes and acks take
//! effect on commit, rollback discards them), mode switching errors and user_id checks.

mod amqprs_common;

use amqprs::channel::{
    BasicAckArguments, BasicGetArguments, BasicPublishArguments, ConfirmSelectArguments,
};
use amqprs::BasicProperties;
use amqprs_common::{connect, stats, Chan, ChannelEvent, Conn};
use warren_interop_tests::TestBroker;

async fn setup(broker: &TestBroker, queue: &str) -> (Conn, Chan) {
    let conn = connect(broker).await;
    let ch = conn.channel().await;
    ch.declare(queue).await;
    (conn, ch)
}

async fn confirm_select(ch: &Chan) {
    ch.channel
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirm.select-ok");
}

async fn publish_to(ch: &Chan, exchange: &str, routing_key: &str, mandatory: bool, body: &[u8]) {
    ch.channel
        .basic_publish(
            BasicProperties::default()
                .with_message_id(&String::from_utf8_lossy(body))
                .finish(),
            body.to_vec(),
            BasicPublishArguments::new(exchange, routing_key)
                .mandatory(mandatory)
                .finish(),
        )
        .await
        .expect("basic.publish");
}

/// Collects confirms until every tag up to `last` is covered; fails on a nack, on a confirm
/// for a tag already confirmed or beyond `last`, and on any other event.
async fn await_confirms(ch: &mut Chan, last: u64) {
    let mut confirmed = 0u64;
    while confirmed < last {
        match ch.next_event().await {
            ChannelEvent::Ack {
                delivery_tag,
                multiple,
            } => {
                assert!(
                    delivery_tag > confirmed && delivery_tag <= last,
                    "ack {delivery_tag} (multiple={multiple}) after {confirmed} of {last}"
                );
                if !multiple {
                    assert_eq!(
                        delivery_tag,
                        confirmed + 1,
                        "single ack {delivery_tag} skips unconfirmed tags after {confirmed}"
                    );
                }
                confirmed = delivery_tag;
            }
            other => panic!("expected basic.ack, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_publish_is_confirmed_without_nacks() {
    const N: u64 = 200;
    let broker = TestBroker::start().await;
    let (conn, mut ch) = setup(&broker, "confirmed").await;
    confirm_select(&ch).await;
    for i in 0..N {
        publish_to(&ch, "", "confirmed", false, format!("m{i}").as_bytes()).await;
    }
    await_confirms(&mut ch, N).await;
    assert!(ch.events.try_recv().is_err(), "nothing after the last ack");
    assert_eq!(ch.counts("confirmed").await, (N as u32, 0));
    // The sequence continues on the same channel.
    publish_to(&ch, "", "confirmed", false, b"one more").await;
    match ch.next_event().await {
        ChannelEvent::Ack {
            delivery_tag,
            multiple,
        } => assert_eq!((delivery_tag, multiple), (N + 1, false)),
        other => panic!("expected basic.ack, got {other:?}"),
    }
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_unroutable_message_is_returned_with_312_then_confirmed() {
    let broker = TestBroker::start().await;
    let (conn, mut ch) = setup(&broker, "routable").await;
    confirm_select(&ch).await;
    publish_to(&ch, "", "routable", true, b"first").await;
    await_confirms(&mut ch, 1).await;

    ch.channel
        .basic_publish(
            BasicProperties::default()
                .with_content_type("text/plain")
                .with_correlation_id("lost-1")
                .finish(),
            b"nobody wants me".to_vec(),
            BasicPublishArguments::new("amq.direct", "no-such-binding")
                .mandatory(true)
                .finish(),
        )
        .await
        .expect("publish");
    match ch.next_event().await {
        ChannelEvent::Returned {
            code,
            text,
            exchange,
            routing_key,
            properties,
            body,
        } => {
            assert_eq!((code, text.as_str()), (312, "NO_ROUTE"));
            assert_eq!(exchange, "amq.direct");
            assert_eq!(routing_key, "no-such-binding");
            assert_eq!(body, b"nobody wants me");
            assert_eq!(
                properties.content_type().map(String::as_str),
                Some("text/plain")
            );
            assert_eq!(
                properties.correlation_id().map(String::as_str),
                Some("lost-1")
            );
        }
        other => panic!("expected basic.return before the confirm, got {other:?}"),
    }
    match ch.next_event().await {
        ChannelEvent::Ack {
            delivery_tag,
            multiple,
        } => assert_eq!((delivery_tag, multiple), (2, false)),
        other => panic!("expected basic.ack 2, got {other:?}"),
    }
    assert_eq!(ch.counts("routable").await, (1, 0));
    assert!(ch.events.try_recv().is_err());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_unroutable_message_without_confirms_is_returned() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    publish_to(&ch, "", "no-such-queue", true, b"bounce").await;
    match ch.next_event().await {
        ChannelEvent::Returned {
            code,
            text,
            exchange,
            routing_key,
            body,
            ..
        } => {
            assert_eq!((code, text.as_str()), (312, "NO_ROUTE"));
            assert_eq!(
                (exchange.as_str(), routing_key.as_str()),
                ("", "no-such-queue")
            );
            assert_eq!(body, b"bounce");
        }
        other => panic!("expected basic.return, got {other:?}"),
    }
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_mandatory_unroutable_message_is_dropped_silently_and_confirmed() {
    let broker = TestBroker::start().await;
    let (conn, mut ch) = setup(&broker, "kept").await;
    confirm_select(&ch).await;
    publish_to(&ch, "amq.direct", "no-such-binding", false, b"dropped").await;
    publish_to(&ch, "", "no-such-queue", false, b"dropped too").await;
    publish_to(&ch, "", "kept", false, b"kept").await;
    await_confirms(&mut ch, 3).await;
    assert_eq!(ch.counts("kept").await, (1, 0));
    assert!(ch.events.try_recv().is_err(), "no basic.return");
    assert_eq!(ch.get_body("kept").await.as_deref(), Some(&b"kept"[..]));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_publishes_appear_only_after_commit() {
    let broker = TestBroker::start().await;
    let (conn, observer) = setup(&broker, "txq").await;
    let tx = conn.channel().await;
    tx.channel.tx_select().await.expect("tx.select-ok");
    for i in 0..3 {
        publish_to(&tx, "", "txq", false, format!("m{i}").as_bytes()).await;
    }
    // A round trip on the tx channel proves the publishes reached the broker.
    assert_eq!(tx.counts("txq").await, (0, 0));
    assert_eq!(observer.counts("txq").await, (0, 0));
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    assert_eq!(observer.counts("txq").await, (3, 0));
    for i in 0..3 {
        assert_eq!(
            observer.get_body("txq").await,
            Some(format!("m{i}").into_bytes())
        );
    }
    // The channel stays transactional: the next publish waits for the next commit.
    publish_to(&tx, "", "txq", false, b"later").await;
    assert_eq!(tx.counts("txq").await, (0, 0));
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    assert_eq!(observer.get_body("txq").await, Some(b"later".to_vec()));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_discards_transactional_publishes() {
    let broker = TestBroker::start().await;
    let (conn, observer) = setup(&broker, "rolled").await;
    let tx = conn.channel().await;
    tx.channel.tx_select().await.expect("tx.select-ok");
    publish_to(&tx, "", "rolled", false, b"discarded-1").await;
    publish_to(&tx, "", "rolled", false, b"discarded-2").await;
    tx.channel.tx_rollback().await.expect("tx.rollback-ok");
    assert_eq!(observer.counts("rolled").await, (0, 0));
    // A commit after the rollback publishes nothing of the rolled-back work.
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    assert_eq!(observer.counts("rolled").await, (0, 0));
    publish_to(&tx, "", "rolled", false, b"kept").await;
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    assert_eq!(observer.counts("rolled").await, (1, 0));
    assert_eq!(observer.get_body("rolled").await, Some(b"kept".to_vec()));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_inside_a_transaction_take_effect_on_commit_and_rollback_restores_them() {
    let broker = TestBroker::start().await;
    let (conn, observer) = setup(&broker, "txacks").await;
    observer.publish("txacks", b"a").await;
    observer.publish("txacks", b"b").await;
    let tx = conn.channel().await;
    tx.channel.tx_select().await.expect("tx.select-ok");
    for expected in [&b"a"[..], &b"b"[..]] {
        let (_, _, body) = tx
            .channel
            .basic_get(BasicGetArguments::new("txacks"))
            .await
            .expect("get")
            .expect("get-ok");
        assert_eq!(body, expected);
    }
    tx.channel
        .basic_ack(BasicAckArguments::new(1, false))
        .await
        .expect("ack");
    tx.counts("txacks").await;
    let s = stats(&broker, "txacks");
    assert_eq!(
        (s.unacknowledged, s.acknowledged),
        (2, 0),
        "ack before commit"
    );
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    let s = stats(&broker, "txacks");
    assert_eq!(
        (s.unacknowledged, s.acknowledged),
        (1, 1),
        "ack after commit"
    );

    // An ack rolled back leaves the delivery unacked; it can be acked again.
    tx.channel
        .basic_ack(BasicAckArguments::new(2, false))
        .await
        .expect("ack");
    tx.channel.tx_rollback().await.expect("tx.rollback-ok");
    let s = stats(&broker, "txacks");
    assert_eq!((s.unacknowledged, s.acknowledged), (1, 1), "after rollback");
    tx.channel
        .basic_ack(BasicAckArguments::new(2, false))
        .await
        .expect("ack");
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    let s = stats(&broker, "txacks");
    assert_eq!((s.ready, s.unacknowledged, s.acknowledged), (0, 0, 2));
    assert!(tx.channel.is_open());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_unroutable_publish_in_a_transaction_is_returned_at_commit() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let mut tx = conn.channel().await;
    tx.channel.tx_select().await.expect("tx.select-ok");
    publish_to(&tx, "", "nowhere", true, b"returned at commit").await;
    tx.declare("sync").await;
    assert!(tx.events.try_recv().is_err(), "no return before commit");
    tx.channel.tx_commit().await.expect("tx.commit-ok");
    match tx.next_event().await {
        ChannelEvent::Returned {
            code,
            routing_key,
            body,
            ..
        } => {
            assert_eq!(code, 312);
            assert_eq!(routing_key, "nowhere");
            assert_eq!(body, b"returned at commit");
        }
        other => panic!("expected basic.return, got {other:?}"),
    }
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_select_on_a_transactional_channel_is_406() {
    let broker = TestBroker::start().await;
    let mut conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    ch.channel.tx_select().await.expect("tx.select-ok");
    let result = ch
        .channel
        .confirm_select(ConfirmSelectArguments::default())
        .await;
    assert!(result.is_err());
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - cannot switch from tx to confirm mode".to_string()
        )
    );
    // And the other way round.
    let mut ch = conn.channel().await;
    confirm_select(&ch).await;
    assert!(ch.channel.tx_select().await.is_err());
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - cannot switch from confirm to tx mode".to_string()
        )
    );
    assert!(conn.connection.is_open());
    assert!(conn.closes.try_recv().is_err());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_rollback_on_a_non_transactional_channel_are_406() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    assert!(ch.channel.tx_commit().await.is_err());
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - channel is not transactional".to_string()
        )
    );
    let mut ch = conn.channel().await;
    assert!(ch.channel.tx_rollback().await.is_err());
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - channel is not transactional".to_string()
        )
    );
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_with_another_users_user_id_is_406() {
    let broker = TestBroker::start().await;
    let (mut conn, mut ch) = setup(&broker, "impostor").await;
    // The authenticated user's own name is accepted.
    ch.channel
        .basic_publish(
            BasicProperties::default().with_user_id("guest").finish(),
            b"honest".to_vec(),
            BasicPublishArguments::new("", "impostor"),
        )
        .await
        .expect("publish");
    assert_eq!(ch.counts("impostor").await, (1, 0));
    ch.channel
        .basic_publish(
            BasicProperties::default().with_user_id("bob").finish(),
            b"forged".to_vec(),
            BasicPublishArguments::new("", "impostor"),
        )
        .await
        .expect("publish");
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - user_id property set to 'bob' but authenticated user was \
             'guest'"
                .to_string()
        )
    );
    assert!(conn.connection.is_open());
    assert!(conn.closes.try_recv().is_err());
    let other = conn.channel().await;
    assert_eq!(
        other.counts("impostor").await,
        (1, 0),
        "forged message dropped"
    );
    assert_eq!(other.get_body("impostor").await, Some(b"honest".to_vec()));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}
