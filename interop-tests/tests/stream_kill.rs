//! SIGKILL of the real `warren` binary while a `rabbitmq-stream-client` producer publishes:
//! after a restart on the same data directory, every message that was confirmed is in the
//! stream, in order (the stream confirms only after the chunk is fdatasynced).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{wait_for, TempDir};

async fn environment(process: &WarrenProcess) -> Environment {
    let addr = process.listener_addr("stream");
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("connects")
}

// Multi-threaded: dropping a rabbitmq-stream-client `Producer` runs a blocking
// `block_on(close)` inside its `Drop`. On a current-thread runtime that blocks the only thread
// that could drive the connection's reader, so after the kill the drop waited forever (the
// hang once seen in CI, connection in CLOSE-WAIT). With a second worker the close fails fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_publishing_loses_no_confirmed_message() {
    tokio::time::timeout(Duration::from_secs(90), sigkill_during_publishing())
        .await
        .expect("the test finishes within 90 s");
}

async fn sigkill_during_publishing() {
    let data_dir = TempDir::new("stream-kill");
    let process = WarrenProcess::start(data_dir.path(), &[]);
    let env = environment(&process).await;
    env.stream_creator()
        .create("journal")
        .await
        .expect("created");
    let producer = env.producer().build("journal").await.expect("producer");
    let confirmed = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = {
        let confirmed = Arc::clone(&confirmed);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            for i in 0u64..1_000_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let confirmed = Arc::clone(&confirmed);
                let message = Message::builder()
                    .body(format!("{i:08}").into_bytes())
                    .build();
                let sent = producer
                    .send(message, move |status| {
                        if let Ok(status) = status {
                            if status.confirmed() {
                                let body = status
                                    .message()
                                    .data()
                                    .map(|b| String::from_utf8_lossy(b).into_owned());
                                if let Some(body) = body {
                                    confirmed.lock().unwrap().insert(body);
                                }
                            }
                        }
                        async {}
                    })
                    .await;
                if sent.is_err() {
                    return;
                }
            }
        })
    };
    let enough = wait_for(Duration::from_secs(20), || {
        confirmed.lock().unwrap().len() >= 3_000
    })
    .await;
    assert!(enough, "only {} confirmed", confirmed.lock().unwrap().len());
    process.kill();
    let confirmed: BTreeSet<String> = confirmed.lock().unwrap().clone();
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(20), publishing)
        .await
        .expect("the producer stops after the kill")
        .expect("the publishing task did not panic");

    let process = WarrenProcess::start(data_dir.path(), &[]);
    let env = environment(&process).await;
    let mut consumer = env
        .consumer()
        .offset(OffsetSpecification::First)
        .build("journal")
        .await
        .expect("the stream survived");
    let mut read = Vec::new();
    while let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_millis(700), consumer.next()).await
    {
        read.push(
            String::from_utf8_lossy(delivery.message().data().unwrap_or_default()).into_owned(),
        );
    }
    assert!(
        read.len() >= confirmed.len(),
        "read {} of {} confirmed",
        read.len(),
        confirmed.len()
    );
    let mut sorted = read.clone();
    sorted.sort();
    assert_eq!(read, sorted, "the stream keeps publishing order");
    let kept: BTreeSet<String> = read.into_iter().collect();
    let lost: Vec<&String> = confirmed.difference(&kept).take(5).collect();
    assert!(
        lost.is_empty(),
        "confirmed but lost after SIGKILL: {lost:?}"
    );
    process.kill();
}
