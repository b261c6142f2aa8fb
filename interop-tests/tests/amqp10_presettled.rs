//! Pre-settled AMQP 1.0 transfers with fe2o3-amqp's default connection, which does not set
//! TCP_NODELAY: the broker must not leave the client's Nagle algorithm waiting on its
//! delayed ACKs (a 40 ms stall per round trip, ~2,850 msg/s before the fix).

mod amqp10_common;

use std::time::{Duration, Instant};

use amqp10_common::*;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::Data;
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::{Receiver, Sender};
use warren_interop_tests::TestBroker;

/// Messages sent and received.
const MESSAGES: usize = 10_000;

/// Far more than the transfer takes (about 2.5 s in a debug build on a loaded machine,
/// twice that with the stall); the figures are in docs/benchmarks.md.
const BOUND: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_pre_settled_messages_arrive_without_nodelay_stalls() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "presettled");
    let (mut receiving, mut receiver_session) = connect(&broker).await;
    let mut receiver = Receiver::builder()
        .name("r")
        .source("/queues/presettled")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut receiver_session)
        .await
        .expect("receiver attaches");
    let (mut sending, mut sender_session) = connect(&broker).await;
    let mut sender = Sender::builder()
        .name("s")
        .target("/queues/presettled")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut sender_session)
        .await
        .expect("sender attaches");
    let started = Instant::now();
    let send = tokio::spawn(async move {
        for index in 0..MESSAGES {
            let body = Data(Binary::from(format!("{index:016}").into_bytes()));
            sender.send(body).await.expect("pre-settled send");
        }
        sender
    });
    let deadline = tokio::time::Instant::now() + BOUND;
    for index in 0..MESSAGES {
        let delivery = tokio::time::timeout_at(deadline, receiver.recv::<Data>())
            .await
            .unwrap_or_else(|_| panic!("message {index} did not arrive within {BOUND:?}"))
            .expect("delivery");
        assert_eq!(
            delivery.body().0.as_ref(),
            format!("{index:016}").as_bytes()
        );
        // Settled already: no disposition goes out, but fe2o3 counts it to top up credit.
        receiver.accept(&delivery).await.expect("accept");
    }
    let elapsed = started.elapsed();
    let sender = send.await.expect("sender task");
    eprintln!("{MESSAGES} pre-settled messages in {elapsed:?}");
    drop(sender);
    drop(receiver);
    let _ = sending.close().await;
    let _ = receiving.close().await;
    broker.shutdown().await;
}
