//! STOMP destinations as RabbitMQ defines them, driven over a socket: `/queue/`,
//! `/amq/queue/`, `/exchange/`, `/topic/` (plain and durable), `/temp-queue/` with
//! `/reply-queue/`, and `x-` headers passed to queue declaration. Also header escaping and
//! bodies with NUL bytes.

use std::time::Duration;

use warren_core::value::Value;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

const QUIET: Duration = Duration::from_millis(200);

#[tokio::test]
async fn queue_destinations_are_declared_on_first_use_and_round_trip() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.send("/queue/orders", "first", &[]).await;
    let queue = broker.broker().vhost("/").unwrap().queue("orders").unwrap();
    assert!(
        queue.config().durable,
        "a /queue/ destination is durable by default"
    );
    assert_eq!(queue.message_count(), 1);
    client.subscribe("/queue/orders", "s1", "auto", &[]).await;
    let message = client.expect_message().await;
    assert_eq!(message.text(), "first");
    assert_eq!(message.header("destination"), Some("/queue/orders"));
    assert_eq!(message.header("subscription"), Some("s1"));
    assert_eq!(message.header("redelivered"), Some("false"));
    assert!(message.header("message-id").is_some());
    // A bare name is a queue too.
    client.send("orders", "second", &[]).await;
    assert_eq!(client.expect_message().await.text(), "second");
}

#[tokio::test]
async fn amq_queue_destinations_need_an_existing_queue() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client
        .write_frame(
            "SUBSCRIBE",
            &[
                ("destination", "/amq/queue/missing"),
                ("id", "s"),
                ("receipt", "r"),
            ],
            b"",
        )
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("not_found"));
    assert_eq!(error.header("receipt-id"), Some("r"));
    assert_eq!(error.text(), "no queue 'missing' in vhost '/'");
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("missing")
        .is_none());

    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.send("/queue/existing", "x", &[]).await;
    client
        .subscribe("/amq/queue/existing", "s", "auto", &[])
        .await;
    let message = client.expect_message().await;
    assert_eq!(message.text(), "x");
    assert_eq!(message.header("destination"), Some("/queue/existing"));
    client.send("/amq/queue/existing", "y", &[]).await;
    assert_eq!(client.expect_message().await.text(), "y");
}

#[tokio::test]
async fn exchange_destinations_bind_a_private_queue_with_the_pattern() {
    let broker = TestBroker::start().await;
    let mut consumer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    consumer
        .subscribe("/exchange/amq.direct/green", "s", "auto", &[])
        .await;
    let mut producer = StompClient::connect(broker.stomp_addr(), "1.1").await;
    producer.send("/exchange/amq.direct/red", "no", &[]).await;
    producer
        .send("/exchange/amq.direct/green", "yes", &[])
        .await;
    let message = consumer.expect_message().await;
    assert_eq!(message.text(), "yes");
    assert_eq!(
        message.header("destination"),
        Some("/exchange/amq.direct/green")
    );
    assert!(consumer.no_frame_within(QUIET).await);
    // The subscription's queue is exclusive and goes with the connection.
    let vhost = broker.broker().vhost("/").unwrap();
    let private: Vec<_> = vhost
        .queues()
        .into_iter()
        .filter(|q| q.name().starts_with("stomp-subscription-"))
        .collect();
    assert_eq!(private.len(), 1);
    assert!(private[0].config().exclusive_owner.is_some());
    consumer.disconnect().await;
    assert!(vhost.queue(private[0].name()).is_none());

    // A missing exchange is a not_found error.
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client
        .write_frame("SEND", &[("destination", "/exchange/nope/k")], b"x")
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("not_found"));
    assert_eq!(error.text(), "no exchange 'nope' in vhost '/'");
}

#[tokio::test]
async fn topic_destinations_give_each_subscription_its_own_copy() {
    let broker = TestBroker::start().await;
    let mut first = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let mut second = StompClient::connect(broker.stomp_addr(), "1.0").await;
    first.subscribe("/topic/news.*", "a", "auto", &[]).await;
    second.subscribe("/topic/news.#", "b", "auto", &[]).await;
    let mut producer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    producer.send("/topic/news.sport", "goal", &[]).await;
    producer.send("/topic/weather", "rain", &[]).await;
    for client in [&mut first, &mut second] {
        let message = client.expect_message().await;
        assert_eq!(message.text(), "goal");
        assert_eq!(message.header("destination"), Some("/topic/news.sport"));
        assert!(client.no_frame_within(QUIET).await);
    }
}

#[tokio::test]
async fn durable_topic_subscriptions_keep_messages_across_reconnects() {
    let broker = TestBroker::start().await;
    let durable = [("durable", "true"), ("auto-delete", "false")];
    let mut subscriber = StompClient::connect(broker.stomp_addr(), "1.2").await;
    subscriber
        .subscribe("/topic/audit", "audit-sub", "client-individual", &durable)
        .await;
    subscriber.disconnect().await;

    let mut producer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    producer.send("/topic/audit", "while away", &[]).await;

    let mut subscriber = StompClient::connect(broker.stomp_addr(), "1.2").await;
    subscriber
        .subscribe("/topic/audit", "audit-sub", "client-individual", &durable)
        .await;
    let message = subscriber.expect_message().await;
    assert_eq!(message.text(), "while away");
    let (header, value) = subscriber.ack_headers(&message);
    let value = value.to_string();
    subscriber.request("ACK", &[(header, &value)]).await;
    // Unsubscribing with durable:true ends the subscription and deletes its queue.
    let vhost = broker.broker().vhost("/").unwrap();
    let durable_queues = || {
        vhost
            .queues()
            .into_iter()
            .filter(|q| q.config().durable && q.name().starts_with("stomp-subscription-"))
            .count()
    };
    assert_eq!(durable_queues(), 1);
    subscriber
        .request("UNSUBSCRIBE", &[("id", "audit-sub"), ("durable", "true")])
        .await;
    assert_eq!(durable_queues(), 0);

    // A durable subscription needs an id.
    subscriber
        .write_frame(
            "SUBSCRIBE",
            &[("destination", "/topic/audit"), ("durable", "true")],
            b"",
        )
        .await;
    let error = subscriber.expect_error().await;
    assert_eq!(error.header("message"), Some("Missing Header"));
}

#[tokio::test]
async fn temp_queue_reply_to_is_rewritten_and_replies_come_back() {
    let broker = TestBroker::start().await;
    let mut server = StompClient::connect(broker.stomp_addr(), "1.2").await;
    server
        .subscribe("/queue/rpc", "requests", "auto", &[])
        .await;
    let mut requester = StompClient::connect(broker.stomp_addr(), "1.2").await;
    requester
        .send(
            "/queue/rpc",
            "ping",
            &[
                ("reply-to", "/temp-queue/answers"),
                ("correlation-id", "c1"),
            ],
        )
        .await;
    let request = server.expect_message().await;
    let reply_to = request.header("reply-to").expect("reply-to").to_string();
    assert!(
        reply_to.starts_with("/reply-queue/stomp.gen-"),
        "{reply_to}"
    );
    assert_eq!(request.header("correlation-id"), Some("c1"));
    server
        .send(&reply_to, "pong", &[("correlation-id", "c1")])
        .await;
    let reply = requester.expect_message().await;
    assert_eq!(reply.text(), "pong");
    assert_eq!(reply.header("subscription"), Some("/temp-queue/answers"));
    assert_eq!(reply.header("correlation-id"), Some("c1"));
    // The reply queue belongs to the requester and goes with it.
    let vhost = broker.broker().vhost("/").unwrap();
    let name = reply_to.trim_start_matches("/reply-queue/").to_string();
    assert!(vhost.queue(&name).is_some());
    requester.disconnect().await;
    assert!(vhost.queue(&name).is_none());
}

#[tokio::test]
async fn x_headers_are_queue_arguments() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let arguments = [
        ("x-max-length", "2"),
        ("x-queue-type", "classic"),
        ("x-message-ttl", "60000"),
    ];
    for body in ["1", "2", "3"] {
        client.send("/queue/bounded", body, &arguments).await;
    }
    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("bounded")
        .unwrap();
    let args = &queue.config().arguments;
    assert_eq!(args.get("x-max-length").and_then(Value::as_i64), Some(2));
    assert_eq!(
        args.get("x-queue-type").and_then(Value::as_str),
        Some("classic")
    );
    assert_eq!(queue.message_count(), 2, "x-max-length dropped the oldest");
    client
        .subscribe("/queue/bounded", "s", "auto", &arguments)
        .await;
    assert_eq!(client.expect_message().await.text(), "2");
    assert_eq!(client.expect_message().await.text(), "3");

    // A SUBSCRIBE to an existing queue with other arguments is refused as in AMQP.
    let mut other = StompClient::connect(broker.stomp_addr(), "1.2").await;
    other
        .write_frame(
            "SUBSCRIBE",
            &[
                ("destination", "/queue/bounded"),
                ("id", "s"),
                ("x-max-length", "5"),
                ("x-queue-type", "classic"),
                ("x-message-ttl", "60000"),
            ],
            b"",
        )
        .await;
    let error = other.expect_error().await;
    assert_eq!(error.header("message"), Some("precondition_failed"));
    assert!(
        error.text().contains("inequivalent arg 'x-max-length'"),
        "{}",
        error.text()
    );
}

#[tokio::test]
async fn headers_are_escaped_per_version_and_bodies_may_hold_nul() {
    let broker = TestBroker::start().await;
    for version in ["1.1", "1.2"] {
        let mut client = StompClient::connect(broker.stomp_addr(), version).await;
        let queue = format!("/queue/escape-{version}");
        client.subscribe(&queue, "s", "auto", &[]).await;
        let tricky = "colon: newline\n backslash\\ end";
        client
            .write_frame(
                "SEND",
                &[
                    ("destination", &queue),
                    ("x-tricky", tricky),
                    ("weird:name", "v"),
                ],
                b"a\0b\0c",
            )
            .await;
        let message = client.expect_message().await;
        assert_eq!(message.header("x-tricky"), Some(tricky), "{version}");
        assert_eq!(message.header("weird:name"), Some("v"), "{version}");
        assert_eq!(message.body, b"a\0b\0c");
        assert_eq!(message.header("content-length"), Some("5"));
    }
    // STOMP 1.0 has no escapes: a backslash is a backslash.
    let mut client = StompClient::connect(broker.stomp_addr(), "1.0").await;
    client
        .subscribe("/queue/escape-1.0", "s", "auto", &[])
        .await;
    client
        .write_frame(
            "SEND",
            &[
                ("destination", "/queue/escape-1.0"),
                ("x-path", "C:\\dir\\n"),
            ],
            b"",
        )
        .await;
    let message = client.expect_message().await;
    assert_eq!(message.header("x-path"), Some("C:\\dir\\n"));
}
