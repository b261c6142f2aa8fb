//! STOMP acknowledgement and flow control against the real listener: ack modes `auto`,
//! `client` (cumulative) and `client-individual`, NACK requeueing or dead-lettering,
//! `prefetch-count`, transactions grouping SENDs and ACKs, and receipts.

use std::time::Duration;

use warren_interop_tests::stomp::{ReceivedFrame, StompClient};
use warren_interop_tests::{wait_for, TestBroker};

const QUIET: Duration = Duration::from_millis(200);

fn stats(broker: &TestBroker, queue: &str) -> (u64, u64) {
    let stats = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue(queue)
        .unwrap()
        .stats();
    (stats.ready, stats.unacknowledged)
}

async fn fill(client: &mut StompClient, queue: &str, bodies: &[&str]) {
    for body in bodies {
        client.send(&format!("/queue/{queue}"), body, &[]).await;
    }
}

async fn ack(
    client: &mut StompClient,
    command: &str,
    message: &ReceivedFrame,
    extra: &[(&str, &str)],
) {
    let (header, value) = client.ack_headers(message);
    let value = value.to_string();
    let mut headers = vec![(header, value.as_str())];
    headers.extend_from_slice(extra);
    client.request(command, &headers).await;
}

#[tokio::test]
async fn auto_ack_settles_on_delivery() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    fill(&mut client, "auto", &["a", "b"]).await;
    client.subscribe("/queue/auto", "s", "auto", &[]).await;
    let first = client.expect_message().await;
    assert_eq!(first.text(), "a");
    assert_eq!(first.header("ack"), None, "auto mode needs no ack header");
    assert_eq!(client.expect_message().await.text(), "b");
    assert_eq!(stats(&broker, "auto"), (0, 0));
}

#[tokio::test]
async fn client_ack_is_cumulative_and_unacked_messages_return_on_disconnect() {
    let broker = TestBroker::start().await;
    for version in ["1.1", "1.2"] {
        let queue = format!("cumulative-{version}");
        let mut client = StompClient::connect(broker.stomp_addr(), version).await;
        fill(&mut client, &queue, &["1", "2", "3"]).await;
        client
            .subscribe(&format!("/queue/{queue}"), "s", "client", &[])
            .await;
        let messages = [
            client.expect_message().await,
            client.expect_message().await,
            client.expect_message().await,
        ];
        assert_eq!(stats(&broker, &queue), (0, 3));
        ack(&mut client, "ACK", &messages[1], &[]).await;
        assert_eq!(stats(&broker, &queue), (0, 1), "{version}: 1 and 2 acked");
        client.disconnect().await;
        assert_eq!(stats(&broker, &queue), (1, 0), "{version}: 3 requeued");

        let mut again = StompClient::connect(broker.stomp_addr(), version).await;
        again
            .subscribe(&format!("/queue/{queue}"), "s", "auto", &[])
            .await;
        let redelivered = again.expect_message().await;
        assert_eq!(redelivered.text(), "3");
        assert_eq!(redelivered.header("redelivered"), Some("true"));
    }
}

#[tokio::test]
async fn client_individual_ack_settles_one_message() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    fill(&mut client, "single", &["1", "2", "3"]).await;
    client
        .subscribe("/queue/single", "s", "client-individual", &[])
        .await;
    let mut messages = Vec::new();
    for _ in 0..3 {
        messages.push(client.expect_message().await);
    }
    ack(&mut client, "ACK", &messages[2], &[]).await;
    assert_eq!(stats(&broker, "single"), (0, 2));
    ack(&mut client, "ACK", &messages[0], &[]).await;
    assert_eq!(stats(&broker, "single"), (0, 1));
}

#[tokio::test]
async fn nack_requeues_by_default_and_dead_letters_with_requeue_false() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let dead_letter = [
        ("x-dead-letter-exchange", ""),
        ("x-dead-letter-routing-key", "graveyard"),
    ];
    client.send("/queue/graveyard", "setup", &[]).await;
    client
        .subscribe("/queue/graveyard", "dead", "auto", &[])
        .await;
    assert_eq!(client.expect_message().await.text(), "setup");
    client.send("/queue/risky", "m", &dead_letter).await;
    client
        .subscribe("/queue/risky", "s", "client-individual", &dead_letter)
        .await;
    let first = client.expect_message().await;
    ack(&mut client, "NACK", &first, &[]).await;
    let again = client.expect_message().await;
    assert_eq!(again.text(), "m");
    assert_eq!(again.header("redelivered"), Some("true"));
    ack(&mut client, "NACK", &again, &[("requeue", "false")]).await;
    let dead = client.expect_message().await;
    assert_eq!(dead.header("subscription"), Some("dead"));
    assert_eq!(dead.text(), "m");
    assert_eq!(stats(&broker, "risky"), (0, 0));
}

#[tokio::test]
async fn prefetch_count_limits_unacked_deliveries() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    fill(&mut client, "prefetch", &["1", "2", "3", "4", "5"]).await;
    client
        .subscribe(
            "/queue/prefetch",
            "s",
            "client-individual",
            &[("prefetch-count", "2")],
        )
        .await;
    let first = client.expect_message().await;
    let second = client.expect_message().await;
    assert!(client.no_frame_within(QUIET).await, "only 2 in flight");
    assert_eq!(stats(&broker, "prefetch"), (3, 2));
    ack(&mut client, "ACK", &first, &[]).await;
    assert_eq!(client.expect_message().await.text(), "3");
    assert!(client.no_frame_within(QUIET).await);
    ack(&mut client, "ACK", &second, &[]).await;
    assert_eq!(client.expect_message().await.text(), "4");
}

/// A persistent SEND to a durable queue inside a transaction: its RECEIPT comes after
/// COMMIT, once the message store has the message on disk.
async fn persistent_transactional_receipts_wait_for_the_disk(broker: &TestBroker) {
    let store = broker
        .broker()
        .message_store()
        .expect("a message store")
        .clone();
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.request("BEGIN", &[("transaction", "d1")]).await;
    client
        .write_frame(
            "SEND",
            &[
                ("destination", "/queue/tx-durable"),
                ("persistent", "true"),
                ("transaction", "d1"),
                ("receipt", "durable-send"),
            ],
            b"on disk",
        )
        .await;
    assert!(
        client.no_frame_within(QUIET).await,
        "no RECEIPT before COMMIT"
    );
    let before_commit = store.durable_seq();
    client
        .write_frame("COMMIT", &[("transaction", "d1")], b"")
        .await;
    client.expect_receipt("durable-send").await;
    assert!(
        store.durable_seq() > before_commit,
        "the RECEIPT came once the committed message was on disk"
    );
    assert_eq!(stats(broker, "tx-durable"), (1, 0));
}

#[tokio::test]
async fn transactions_hold_sends_and_acks_until_commit() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.send("/queue/tx", "setup", &[]).await;
    client.request("BEGIN", &[("transaction", "t1")]).await;
    for (body, receipt) in [("in tx 1", "s1"), ("in tx 2", "s2")] {
        client
            .write_frame(
                "SEND",
                &[
                    ("destination", "/queue/tx"),
                    ("transaction", "t1"),
                    ("receipt", receipt),
                ],
                body.as_bytes(),
            )
            .await;
    }
    // A transactional SEND's RECEIPT waits for COMMIT.
    assert!(client.no_frame_within(QUIET).await);
    assert_eq!(stats(&broker, "tx"), (1, 0), "nothing sent before COMMIT");
    client
        .write_frame("COMMIT", &[("transaction", "t1"), ("receipt", "c1")], b"")
        .await;
    for receipt in ["s1", "s2", "c1"] {
        client.expect_receipt(receipt).await;
    }
    assert_eq!(stats(&broker, "tx"), (3, 0));

    client.request("BEGIN", &[("transaction", "t2")]).await;
    client
        .write_frame(
            "SEND",
            &[
                ("destination", "/queue/tx"),
                ("transaction", "t2"),
                ("receipt", "aborted"),
            ],
            b"aborted",
        )
        .await;
    // An aborted SEND is never receipted: the next RECEIPT is ABORT's.
    client.request("ABORT", &[("transaction", "t2")]).await;
    assert_eq!(stats(&broker, "tx"), (3, 0));

    client
        .subscribe("/queue/tx", "s", "client-individual", &[])
        .await;
    let message = client.expect_message().await;
    client.request("BEGIN", &[("transaction", "t3")]).await;
    ack(&mut client, "ACK", &message, &[("transaction", "t3")]).await;
    assert_eq!(stats(&broker, "tx").1, 3, "ACK held until COMMIT");
    client.request("COMMIT", &[("transaction", "t3")]).await;
    let vhost = broker.broker().vhost("/").unwrap();
    let queue = vhost.queue("tx").unwrap();
    assert!(wait_for(Duration::from_secs(2), || queue.stats().acknowledged == 1).await);
    drop(queue);
    persistent_transactional_receipts_wait_for_the_disk(&broker).await;

    // A transaction that does not exist is an error.
    client
        .write_frame("COMMIT", &[("transaction", "nope")], b"")
        .await;
    // Messages still in flight to this client may come first.
    let error = loop {
        let frame = client.expect_frame().await;
        if frame.command != "MESSAGE" {
            break frame;
        }
    };
    assert_eq!(error.command, "ERROR");
    assert_eq!(error.header("message"), Some("Bad transaction"));
}
