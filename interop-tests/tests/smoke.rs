//! The shortest end-to-end check: a real client publishes and gets a message back.

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::BasicProperties;
use warren_interop_tests::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqprs_publishes_and_gets_a_message() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let args = OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), "guest", "guest");
    let connection = Connection::open(&args).await.expect("connects");
    let channel = connection.open_channel(None).await.expect("channel opens");
    let (queue, _, _) = channel
        .queue_declare(QueueDeclareArguments::new("smoke"))
        .await
        .expect("declares")
        .expect("declare-ok");
    channel
        .basic_publish(
            BasicProperties::default()
                .with_content_type("text/plain")
                .finish(),
            b"hello".to_vec(),
            BasicPublishArguments::new("", &queue),
        )
        .await
        .expect("publishes");
    let mut got = None;
    for _ in 0..100 {
        got = channel
            .basic_get(BasicGetArguments::new(&queue).no_ack(true).finish())
            .await
            .expect("get");
        if got.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (_get_ok, properties, body) = got.expect("the message arrives");
    assert_eq!(body, b"hello");
    assert_eq!(
        properties.content_type().map(String::as_str),
        Some("text/plain")
    );
    connection.close().await.expect("closes");
    broker.shutdown().await;
}
