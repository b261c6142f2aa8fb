//! Consuming through amqprs: ordering, acknowledgements (ack, nack, reject, multiple, unknown
//! tags), recovery, requeue on channel close, prefetch (per consumer and global), server-sent
//! cancel, round-robin, consumer priorities, exclusive consumers, basic.get, large messages
//! and the message size limit.
//!
//! "Exactly N arrived" is checked after a synchronous round trip on the consumer's channel:
//! the broker hands deliveries to its outbox while it handles the publish or the settlement,
//! so everything sent before the round trip's reply is buffered in the client by then.

mod amqprs_common;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicGetArguments, BasicNackArguments,
    BasicPublishArguments, BasicQosArguments, BasicRejectArguments, QueueDeleteArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use amqprs_common::{
    connect, drain_buffered, next_delivery, stats, Chan, ChannelEvent, Conn, LIMIT,
};
use warren_interop_tests::{wait_for, TestBroker};

async fn consume(ch: &Chan, queue: &str, tag: &str) -> amqprs_common::Receiver {
    let (_, rx) = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new(queue, tag))
        .await
        .expect("basic.consume");
    rx
}

async fn ack(ch: &Chan, tag: u64, multiple: bool) {
    ch.channel
        .basic_ack(BasicAckArguments::new(tag, multiple))
        .await
        .expect("basic.ack");
}

async fn setup(broker: &TestBroker, queue: &str) -> (Conn, Chan) {
    let conn = connect(broker).await;
    let ch = conn.channel().await;
    ch.declare(queue).await;
    (conn, ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_receives_messages_in_order_with_increasing_delivery_tags() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "ordered").await;
    for i in 0..5 {
        ch.publish("ordered", format!("m{i}").as_bytes()).await;
    }
    let (tag, mut rx) = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("ordered", ""))
        .await
        .expect("consume");
    assert!(tag.starts_with("amq.ctag-"), "generated tag {tag}");
    for i in 0..5u64 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        assert_eq!(d.delivery_tag, i + 1);
        assert!(!d.redelivered);
        assert_eq!(d.consumer_tag, tag);
    }
    // Published after the consumer attached: same order, tags continue.
    for i in 5..8 {
        ch.publish("ordered", format!("m{i}").as_bytes()).await;
    }
    for i in 5..8u64 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        assert_eq!(d.delivery_tag, i + 1);
    }
    assert_eq!(stats(&broker, "ordered").unacknowledged, 8);
    for tag in 1..=8 {
        ack(&ch, tag, false).await;
    }
    ch.counts("ordered").await;
    let s = stats(&broker, "ordered");
    assert_eq!((s.ready, s.unacknowledged, s.acknowledged), (0, 0, 8));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_and_reject_with_requeue_redeliver_with_the_redelivered_flag() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "requeue").await;
    let mut rx = consume(&ch, "requeue", "c").await;
    ch.publish("requeue", b"once").await;
    let first = next_delivery(&mut rx).await;
    assert_eq!((first.delivery_tag, first.redelivered), (1, false));

    ch.channel
        .basic_nack(BasicNackArguments::new(1, false, true))
        .await
        .expect("nack");
    let second = next_delivery(&mut rx).await;
    assert_eq!(second.body, b"once");
    assert_eq!((second.delivery_tag, second.redelivered), (2, true));

    ch.channel
        .basic_reject(BasicRejectArguments::new(2, true))
        .await
        .expect("reject");
    let third = next_delivery(&mut rx).await;
    assert_eq!(third.body, b"once");
    assert_eq!((third.delivery_tag, third.redelivered), (3, true));

    ack(&ch, 3, false).await;
    ch.counts("requeue").await;
    let s = stats(&broker, "requeue");
    assert_eq!((s.ready, s.unacknowledged, s.acknowledged), (0, 0, 1));
    assert!(drain_buffered(&mut rx).is_empty());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_and_nack_without_requeue_drop_the_message() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "dropped").await;
    let mut rx = consume(&ch, "dropped", "c").await;
    ch.publish("dropped", b"a").await;
    ch.publish("dropped", b"b").await;
    assert_eq!(next_delivery(&mut rx).await.delivery_tag, 1);
    assert_eq!(next_delivery(&mut rx).await.delivery_tag, 2);
    ch.channel
        .basic_reject(BasicRejectArguments::new(1, false))
        .await
        .expect("reject");
    ch.channel
        .basic_nack(BasicNackArguments::new(2, false, false))
        .await
        .expect("nack");
    assert_eq!(ch.counts("dropped").await, (0, 1));
    let s = stats(&broker, "dropped");
    assert_eq!((s.ready, s.unacknowledged, s.dropped), (0, 0, 2));
    assert!(drain_buffered(&mut rx).is_empty(), "nothing redelivered");
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_multiple_settles_every_tag_up_to_the_given_one() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "multi").await;
    let mut rx = consume(&ch, "multi", "c").await;
    for i in 0..5u8 {
        ch.publish("multi", &[i]).await;
    }
    for tag in 1..=5 {
        assert_eq!(next_delivery(&mut rx).await.delivery_tag, tag);
    }
    ack(&ch, 3, true).await;
    ch.counts("multi").await;
    let s = stats(&broker, "multi");
    assert_eq!((s.unacknowledged, s.acknowledged), (2, 3));
    ack(&ch, 5, true).await;
    ch.counts("multi").await;
    let s = stats(&broker, "multi");
    assert_eq!((s.unacknowledged, s.acknowledged), (0, 5));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_multiple_requeues_every_tag_up_to_the_given_one_in_order() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "nack-multi").await;
    let mut rx = consume(&ch, "nack-multi", "c").await;
    for i in 0..4 {
        ch.publish("nack-multi", format!("m{i}").as_bytes()).await;
    }
    for tag in 1..=4 {
        assert_eq!(next_delivery(&mut rx).await.delivery_tag, tag);
    }
    // Leaves tag 4 unacked, requeues 1..=3.
    ch.channel
        .basic_nack(BasicNackArguments::new(3, true, true))
        .await
        .expect("nack");
    for (i, tag) in (0..3).zip(5..) {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        assert_eq!((d.delivery_tag, d.redelivered), (tag, true));
    }
    ch.counts("nack-multi").await;
    assert!(drain_buffered(&mut rx).is_empty());
    assert_eq!(stats(&broker, "nack-multi").unacknowledged, 4);
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_an_unknown_delivery_tag_closes_the_channel_with_406() {
    let broker = TestBroker::start().await;
    let (mut conn, mut ch) = setup(&broker, "unknown-tag").await;
    ch.publish("unknown-tag", b"x").await;
    ack(&ch, 42, false).await;
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 42".to_string()
        )
    );
    assert!(conn.connection.is_open());
    assert!(conn.closes.try_recv().is_err());
    let other = conn.channel().await;
    assert_eq!(other.counts("unknown-tag").await, (1, 0));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_the_same_tag_twice_closes_the_channel_with_406() {
    let broker = TestBroker::start().await;
    let (mut conn, mut ch) = setup(&broker, "double-ack").await;
    let mut rx = consume(&ch, "double-ack", "c").await;
    ch.publish("double-ack", b"x").await;
    assert_eq!(next_delivery(&mut rx).await.delivery_tag, 1);
    ack(&ch, 1, false).await;
    ack(&ch, 1, false).await;
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - unknown delivery tag 1".to_string()
        )
    );
    // The first ack counted; nothing was requeued by the channel close.
    let other = conn.channel().await;
    assert_eq!(other.counts("double-ack").await, (0, 0));
    let s = stats(&broker, "double-ack");
    assert_eq!((s.acknowledged, s.unacknowledged), (1, 0));
    assert!(conn.closes.try_recv().is_err());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_recover_with_requeue_redelivers_unacked_messages() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "recover").await;
    let mut rx = consume(&ch, "recover", "c").await;
    for i in 0..3 {
        ch.publish("recover", format!("m{i}").as_bytes()).await;
    }
    for tag in 1..=3 {
        assert_eq!(next_delivery(&mut rx).await.delivery_tag, tag);
    }
    ack(&ch, 2, false).await;
    ch.channel.basic_recover(true).await.expect("recover-ok");
    // m0 and m2 come back, in queue order, marked redelivered, with new tags.
    let a = next_delivery(&mut rx).await;
    let b = next_delivery(&mut rx).await;
    assert_eq!(
        (a.body.as_slice(), a.delivery_tag, a.redelivered),
        (&b"m0"[..], 4, true)
    );
    assert_eq!(
        (b.body.as_slice(), b.delivery_tag, b.redelivered),
        (&b"m2"[..], 5, true)
    );
    ch.counts("recover").await;
    assert!(drain_buffered(&mut rx).is_empty());
    // The old tags are gone: acking the new ones settles everything.
    ack(&ch, 5, true).await;
    ch.counts("recover").await;
    let s = stats(&broker, "recover");
    assert_eq!((s.unacknowledged, s.acknowledged, s.ready), (0, 3, 0));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_channel_requeues_its_unacked_messages_for_other_consumers() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "handover").await;
    let first = conn.channel().await;
    let mut rx1 = consume(&first, "handover", "first").await;
    for i in 0..3 {
        ch.publish("handover", format!("m{i}").as_bytes()).await;
    }
    for tag in 1..=3 {
        let d = next_delivery(&mut rx1).await;
        assert_eq!((d.delivery_tag, d.redelivered), (tag, false));
    }
    // A second consumer attaches while the queue is empty.
    let second = conn.channel().await;
    let mut rx2 = consume(&second, "handover", "second").await;
    assert_eq!(second.counts("handover").await, (0, 2));
    first.channel.close().await.expect("channel closes");
    for i in 0..3u64 {
        let d = next_delivery(&mut rx2).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        assert_eq!(d.consumer_tag, "second");
        assert_eq!((d.delivery_tag, d.redelivered), (i + 1, true));
    }
    assert_eq!(second.counts("handover").await, (0, 1));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_count_limits_unacked_deliveries_per_consumer() {
    const PREFETCH: usize = 3;
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "prefetch").await;
    for i in 0..10 {
        ch.publish("prefetch", format!("m{i}").as_bytes()).await;
    }
    assert_eq!(ch.counts("prefetch").await, (10, 0));

    let consumer = conn.channel().await;
    consumer
        .channel
        .basic_qos(BasicQosArguments::new(0, PREFETCH as u16, false))
        .await
        .expect("qos-ok");
    let mut rx = consume(&consumer, "prefetch", "limited").await;
    // The round trip after consume-ok: every delivery the broker made is buffered now.
    consumer.counts("prefetch").await;
    let got = drain_buffered(&mut rx);
    let tags: Vec<u64> = got.iter().map(|d| d.delivery_tag).collect();
    assert_eq!(tags, vec![1, 2, 3]);
    let s = stats(&broker, "prefetch");
    assert_eq!((s.ready, s.unacknowledged), (7, 3));

    // One ack frees one slot: exactly one more delivery.
    ack(&consumer, 1, false).await;
    let d = next_delivery(&mut rx).await;
    assert_eq!((d.delivery_tag, d.body.as_slice()), (4, &b"m3"[..]));
    consumer.counts("prefetch").await;
    assert!(drain_buffered(&mut rx).is_empty());
    let s = stats(&broker, "prefetch");
    assert_eq!((s.ready, s.unacknowledged), (6, 3));

    // Acking the rest with multiple frees three slots.
    ack(&consumer, 4, true).await;
    let more: Vec<u64> = [
        next_delivery(&mut rx).await,
        next_delivery(&mut rx).await,
        next_delivery(&mut rx).await,
    ]
    .iter()
    .map(|d| d.delivery_tag)
    .collect();
    assert_eq!(more, vec![5, 6, 7]);
    consumer.counts("prefetch").await;
    assert!(drain_buffered(&mut rx).is_empty());
    let s = stats(&broker, "prefetch");
    assert_eq!((s.ready, s.unacknowledged), (3, 3));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_qos_shares_one_limit_across_the_consumers_of_a_channel() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "g1").await;
    ch.declare("g2").await;
    for i in 0..5 {
        ch.publish("g1", format!("a{i}").as_bytes()).await;
        ch.publish("g2", format!("b{i}").as_bytes()).await;
    }
    let consumer = conn.channel().await;
    consumer
        .channel
        .basic_qos(BasicQosArguments::new(0, 3, true))
        .await
        .expect("qos-ok");
    let mut rx1 = consume(&consumer, "g1", "c1").await;
    let mut rx2 = consume(&consumer, "g2", "c2").await;
    consumer.counts("g1").await;
    let first = drain_buffered(&mut rx1);
    let second = drain_buffered(&mut rx2);
    // The first consumer filled the channel's limit before the second attached.
    assert_eq!(first.len() + second.len(), 3, "{first:?} {second:?}");
    assert_eq!(first.len(), 3);
    let (s1, s2) = (stats(&broker, "g1"), stats(&broker, "g2"));
    assert_eq!(s1.unacknowledged + s2.unacknowledged, 3);

    // Acking one on the first consumer frees one slot on the channel, which either
    // consumer may take; still 3 in flight in total.
    ack(&consumer, first[0].delivery_tag, false).await;
    assert!(
        wait_for(LIMIT, || {
            let (s1, s2) = (stats(&broker, "g1"), stats(&broker, "g2"));
            s1.acknowledged == 1 && s1.unacknowledged + s2.unacknowledged == 3
        })
        .await
    );
    consumer.counts("g1").await;
    let more = drain_buffered(&mut rx1).len() + drain_buffered(&mut rx2).len();
    assert_eq!(more, 1);
    let (s1, s2) = (stats(&broker, "g1"), stats(&broker, "g2"));
    assert_eq!(s1.ready + s2.ready, 10 - 4);
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_consumed_queue_sends_basic_cancel_to_the_consumer() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "vanishing").await;
    let mut consumer = conn.channel().await;
    let mut rx = consume(&consumer, "vanishing", "watcher").await;
    ch.publish("vanishing", b"x").await;
    assert_eq!(next_delivery(&mut rx).await.body, b"x");
    let deleted = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("vanishing"))
        .await
        .expect("delete")
        .expect("delete-ok");
    assert_eq!(deleted, 0);
    match consumer.next_event().await {
        ChannelEvent::Cancelled { consumer_tag } => assert_eq!(consumer_tag, "watcher"),
        other => panic!("expected basic.cancel, got {other:?}"),
    }
    // The channel stays open and usable.
    assert!(consumer.channel.is_open());
    consumer.declare("after").await;
    assert_eq!(consumer.counts("after").await, (0, 0));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_share_messages_round_robin() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "shared").await;
    let a = conn.channel().await;
    let b = conn.channel().await;
    let mut rx_a = consume(&a, "shared", "a").await;
    let mut rx_b = consume(&b, "shared", "b").await;
    for i in 0..10 {
        ch.publish("shared", format!("{i}").as_bytes()).await;
    }
    ch.counts("shared").await;
    let mut got_a = Vec::new();
    let mut got_b = Vec::new();
    for _ in 0..5 {
        got_a.push(String::from_utf8(next_delivery(&mut rx_a).await.body).unwrap());
        got_b.push(String::from_utf8(next_delivery(&mut rx_b).await.body).unwrap());
    }
    a.counts("shared").await;
    b.counts("shared").await;
    assert!(drain_buffered(&mut rx_a).is_empty());
    assert!(drain_buffered(&mut rx_b).is_empty());
    let evens: Vec<String> = (0..10).step_by(2).map(|i| i.to_string()).collect();
    let odds: Vec<String> = (1..10).step_by(2).map(|i| i.to_string()).collect();
    assert!(
        (got_a == evens && got_b == odds) || (got_a == odds && got_b == evens),
        "not alternating: a={got_a:?} b={got_b:?}"
    );
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_consumers_get_messages_first() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "prio").await;
    let low = conn.channel().await;
    let mut rx_low = consume(&low, "prio", "low").await;
    let high = conn.channel().await;
    high.channel
        .basic_qos(BasicQosArguments::new(0, 2, false))
        .await
        .expect("qos-ok");
    let mut args = FieldTable::new();
    args.insert("x-priority".try_into().unwrap(), FieldValue::I(10));
    let (_, mut rx_high) = high
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("prio", "high")
                .arguments(args)
                .finish(),
        )
        .await
        .expect("consume");
    for i in 0..5 {
        ch.publish("prio", format!("{i}").as_bytes()).await;
    }
    ch.counts("prio").await;
    high.counts("prio").await;
    low.counts("prio").await;
    let high_got: Vec<Vec<u8>> = drain_buffered(&mut rx_high)
        .into_iter()
        .map(|d| d.body)
        .collect();
    let low_got: Vec<Vec<u8>> = drain_buffered(&mut rx_low)
        .into_iter()
        .map(|d| d.body)
        .collect();
    // The high-priority consumer takes all it may (prefetch 2); only then the low one.
    assert_eq!(high_got, vec![b"0".to_vec(), b"1".to_vec()]);
    assert_eq!(low_got, vec![b"2".to_vec(), b"3".to_vec(), b"4".to_vec()]);
    // A freed slot goes to the high-priority consumer again.
    ack(&high, 1, false).await;
    ch.publish("prio", b"5").await;
    assert_eq!(next_delivery(&mut rx_high).await.body, b"5");
    low.counts("prio").await;
    assert!(drain_buffered(&mut rx_low).is_empty());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_consumer_locks_out_other_consumers_with_403() {
    let broker = TestBroker::start().await;
    let (mut conn, ch) = setup(&broker, "solo").await;
    let (_, _rx) = ch
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("solo", "only")
                .exclusive(true)
                .finish(),
        )
        .await
        .expect("exclusive consume");
    let mut other = conn.channel().await;
    let result = other
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("solo", "intruder"))
        .await;
    assert!(result.is_err());
    assert_eq!(
        other.expect_close().await,
        (
            403,
            "ACCESS_REFUSED - queue 'solo' in vhost '/' in exclusive use".to_string()
        )
    );
    assert!(conn.closes.try_recv().is_err());
    assert_eq!(ch.counts("solo").await, (0, 1));

    // And the other way round: an exclusive consumer on a queue that has consumers.
    ch.declare("busy").await;
    let (_, _rx2) = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("busy", "plain"))
        .await
        .expect("consume");
    let mut third = conn.channel().await;
    let result = third
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("busy", "greedy")
                .exclusive(true)
                .finish(),
        )
        .await;
    assert!(result.is_err());
    assert_eq!(
        third.expect_close().await,
        (
            403,
            "ACCESS_REFUSED - queue 'busy' in vhost '/' in exclusive use".to_string()
        )
    );
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_get_returns_messages_with_counts_then_get_empty() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "pull").await;
    let empty = ch
        .channel
        .basic_get(BasicGetArguments::new("pull"))
        .await
        .expect("get");
    assert!(empty.is_none(), "get-empty on an empty queue");
    ch.publish("pull", b"first").await;
    ch.publish("pull", b"second").await;
    let (get_ok, _, body) = ch
        .channel
        .basic_get(BasicGetArguments::new("pull"))
        .await
        .expect("get")
        .expect("get-ok");
    assert_eq!(body, b"first");
    assert_eq!(get_ok.delivery_tag(), 1);
    assert!(!get_ok.redelivered());
    assert_eq!(get_ok.message_count(), 1);
    assert_eq!(get_ok.exchange(), "");
    assert_eq!(get_ok.routing_key(), "pull");
    // Requeue it; the next get sees it again, redelivered, with a new tag.
    ch.channel
        .basic_reject(BasicRejectArguments::new(1, true))
        .await
        .expect("reject");
    let (get_ok, _, body) = ch
        .channel
        .basic_get(BasicGetArguments::new("pull"))
        .await
        .expect("get")
        .expect("get-ok");
    assert_eq!(body, b"first");
    assert_eq!(
        (
            get_ok.delivery_tag(),
            get_ok.redelivered(),
            get_ok.message_count()
        ),
        (2, true, 1)
    );
    ack(&ch, 2, false).await;
    let (get_ok, _, body) = ch
        .channel
        .basic_get(BasicGetArguments::new("pull").no_ack(true).finish())
        .await
        .expect("get")
        .expect("get-ok");
    assert_eq!(body, b"second");
    assert_eq!((get_ok.delivery_tag(), get_ok.message_count()), (3, 0));
    assert!(ch
        .channel
        .basic_get(BasicGetArguments::new("pull"))
        .await
        .expect("get")
        .is_none());
    let s = stats(&broker, "pull");
    assert_eq!((s.ready, s.unacknowledged, s.acknowledged), (0, 0, 1));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_megabyte_message_round_trips_intact() {
    let broker = TestBroker::start().await;
    let (conn, ch) = setup(&broker, "big").await;
    // Larger than frame_max (131072): split into several body frames both ways.
    let body: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut rx = consume(&ch, "big", "c").await;
    ch.channel
        .basic_publish(
            BasicProperties::default()
                .with_content_type("application/octet-stream")
                .finish(),
            body.clone(),
            BasicPublishArguments::new("", "big"),
        )
        .await
        .expect("publish");
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body.len(), body.len());
    assert!(d.body == body, "body differs");
    assert_eq!(
        d.properties.content_type().map(String::as_str),
        Some("application/octet-stream")
    );
    // And through basic.get.
    ch.channel
        .basic_cancel(amqprs::channel::BasicCancelArguments::new("c"))
        .await
        .expect("cancel-ok");
    ack(&ch, d.delivery_tag, false).await;
    ch.channel
        .basic_publish(
            BasicProperties::default(),
            body.clone(),
            BasicPublishArguments::new("", "big"),
        )
        .await
        .expect("publish");
    let got = ch.get_body("big").await.expect("get-ok");
    assert!(got == body, "body differs through basic.get");
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_message_size_closes_the_channel_with_406() {
    let broker = TestBroker::start_with(&[("max_message_size", "1024")]).await;
    let (mut conn, mut ch) = setup(&broker, "limited").await;
    ch.publish("limited", &[7u8; 1024]).await;
    assert_eq!(ch.counts("limited").await, (1, 0), "1024 bytes is allowed");
    ch.publish("limited", &[7u8; 1025]).await;
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - message size 1025 is larger than configured max size 1024"
    );
    assert!(conn.connection.is_open());
    assert!(conn.closes.try_recv().is_err());
    let other = conn.channel().await;
    assert_eq!(other.counts("limited").await, (1, 0));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}
