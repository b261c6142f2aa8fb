//! AMQP 0-9-1 transactions and the disk: tx.commit-ok for persistent messages routed to a
//! durable queue is sent only once the message store has them on disk, as publisher confirms
//! are. The store's writer is held (its definitions writer blocks) so "not on disk yet" lasts
//! as long as the test needs.

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::TestBroker;

async fn publish(channel: &Channel, queue: &str, body: &[u8], persistent: bool) {
    let properties = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("publish sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_commit_ok_waits_until_persistent_messages_are_on_disk() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        let store = broker
            .broker()
            .message_store()
            .expect("the test broker has a store")
            .clone();
        // The writer persists definitions before it fsyncs messages: a definitions writer
        // that blocks until `release` is dropped holds every fsync back.
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        store.set_definitions_writer(Box::new(move || {
            let _ = gate.lock().expect("gate").recv();
            Ok(())
        }));

        let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
            .await
            .expect("connects");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .queue_declare(
                "tx.durable".into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("declare");
        channel.tx_select().await.expect("tx.select");
        publish(&channel, "tx.durable", b"safe", true).await;
        let committing = {
            let channel = channel.clone();
            tokio::spawn(async move { channel.tx_commit().await })
        };
        let queue = broker
            .broker()
            .vhost("/")
            .expect("vhost")
            .queue("tx.durable")
            .expect("queue");
        assert!(
            warren_interop_tests::wait_for(Duration::from_secs(10), || queue.stats().ready == 1)
                .await,
            "the commit was processed: the message is in the queue"
        );

        // A transaction with only a transient message commits at once on another channel,
        // while the disk is still held.
        let transient = connection.create_channel().await.expect("channel");
        transient.tx_select().await.expect("tx.select");
        publish(&transient, "tx.durable", b"transient", false).await;
        tokio::time::timeout(Duration::from_secs(5), transient.tx_commit())
            .await
            .expect("a transient commit is not held")
            .expect("tx.commit-ok");

        // Absence can only be observed over a window.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !committing.is_finished(),
            "tx.commit-ok must wait for the disk"
        );
        let held_at = store.durable_seq();

        drop(release);
        tokio::time::timeout(Duration::from_secs(10), committing)
            .await
            .expect("tx.commit-ok once the message is on disk")
            .expect("task")
            .expect("tx.commit-ok");
        assert!(store.durable_seq() > held_at);
        assert_eq!(queue.stats().ready, 2);
        broker.shutdown().await;
    })
    .await
    .expect("bounded in time");
}
