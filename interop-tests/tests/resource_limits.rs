//! Vhost limits (`max-connections`, `max-queues`) and user limits (`max-connections`,
//! `max-channels`) set through the management API and enforced by the core for every
//! protocol, with real clients: lapin and amqprs (AMQP 0-9-1), rumqttc (MQTT), a raw AMQP 1.0
//! client and a STOMP client. Each refusal carries RabbitMQ 4.x's code and text; a limit
//! takes effect at once, also when lowered below the current count (what is open stays), and
//! -1 means no limit.

mod amqp10_common;
mod lapin_common;
mod mqtt_common;

use std::time::Duration;

use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::performatives::Performative;
use lapin::{Connection, ConnectionProperties};
use lapin_common::amqp_error;
use rumqttc::ConnectReturnCode;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::{wait_for, TestBroker};

const SETTLE: Duration = Duration::from_secs(5);

async fn api_ok(broker: &TestBroker, method: &str, path: &str, body: Option<&str>) {
    let response = broker.api_as_guest(method, path, body).await;
    assert!(
        response.status < 300,
        "{method} {path}: {} {}",
        response.status,
        response.text()
    );
}

async fn set_vhost_limit(broker: &TestBroker, vhost: &str, name: &str, value: i64) {
    let body = format!(r#"{{"value": {value}}}"#);
    api_ok(
        broker,
        "PUT",
        &format!("/api/vhost-limits/{vhost}/{name}"),
        Some(&body),
    )
    .await;
}

async fn set_user_limit(broker: &TestBroker, user: &str, name: &str, value: i64) {
    let body = format!(r#"{{"value": {value}}}"#);
    api_ok(
        broker,
        "PUT",
        &format!("/api/user-limits/{user}/{name}"),
        Some(&body),
    )
    .await;
}

async fn lapin_connect(url: &str) -> lapin::Result<Connection> {
    Connection::connect(url, ConnectionProperties::default()).await
}

/// A user with full permissions in `/`, made through the API.
async fn add_user(broker: &TestBroker, user: &str) {
    api_ok(
        broker,
        "PUT",
        &format!("/api/users/{user}"),
        Some(r#"{"password":"secret","tags":""}"#),
    )
    .await;
    api_ok(
        broker,
        "PUT",
        &format!("/api/permissions/%2F/{user}"),
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
}

fn connections_in(broker: &TestBroker, vhost: &str) -> u64 {
    broker.broker().connections().count_in_vhost(vhost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_max_connections_refuses_amqp_091_with_530_and_applies_at_once_when_lowered() {
    let broker = TestBroker::start().await;
    set_vhost_limit(&broker, "%2F", "max-connections", 1).await;
    let first = lapin_connect(&broker.url()).await.expect("first connects");
    let error = lapin_connect(&broker.url())
        .await
        .expect_err("second refused");
    assert_eq!(
        amqp_error(&error),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached"
                .to_string()
        )
    );
    assert_eq!(connections_in(&broker, "/"), 1);
    // The place comes back when the first connection closes.
    first.close(200, "done".into()).await.expect("close");
    assert!(wait_for(SETTLE, || connections_in(&broker, "/") == 0).await);
    let again = lapin_connect(&broker.url()).await.expect("connects again");

    // Raised, two more connect; lowered below the count, the open ones stay and a new one
    // is refused at once.
    set_vhost_limit(&broker, "%2F", "max-connections", 3).await;
    let second = lapin_connect(&broker.url()).await.expect("second");
    let third = lapin_connect(&broker.url()).await.expect("third");
    assert_eq!(connections_in(&broker, "/"), 3);
    set_vhost_limit(&broker, "%2F", "max-connections", 1).await;
    let error = lapin_connect(&broker.url())
        .await
        .expect_err("over the lowered limit");
    assert_eq!(amqp_error(&error).0, 530);
    assert!(amqp_error(&error)
        .1
        .contains("connection limit (1) is reached"));
    for connection in [&again, &second, &third] {
        let channel = connection
            .create_channel()
            .await
            .expect("open connections stay usable");
        lapin_common::declare(&channel, "still-open", Default::default()).await;
    }
    // -1 is no limit.
    set_vhost_limit(&broker, "%2F", "max-connections", -1).await;
    let fourth = lapin_connect(&broker.url()).await.expect("unlimited");
    assert_eq!(connections_in(&broker, "/"), 4);
    // Deleting the limit lifts it too; 0 refuses every connection.
    set_vhost_limit(&broker, "%2F", "max-connections", 0).await;
    assert_eq!(
        amqp_error(&lapin_connect(&broker.url()).await.expect_err("0")).0,
        530
    );
    api_ok(
        &broker,
        "DELETE",
        "/api/vhost-limits/%2F/max-connections",
        None,
    )
    .await;
    let fifth = lapin_connect(&broker.url()).await.expect("no limit");
    for connection in [again, second, third, fourth, fifth] {
        connection.close(200, "done".into()).await.ok();
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_max_connections_refuses_amqprs_over_the_limit() {
    let broker = TestBroker::start().await;
    add_user(&broker, "alice").await;
    set_user_limit(&broker, "alice", "max-connections", 2).await;
    let arguments = amqprs::connection::OpenConnectionArguments::new(
        &broker.addr().ip().to_string(),
        broker.addr().port(),
        "alice",
        "secret",
    );
    let first = amqprs::connection::Connection::open(&arguments)
        .await
        .expect("first");
    let second = amqprs::connection::Connection::open(&arguments)
        .await
        .expect("second");
    let Err(refused) = amqprs::connection::Connection::open(&arguments).await else {
        panic!("a third connection of alice was accepted");
    };
    let text = refused.to_string();
    assert!(
        text.contains("530")
            && text.contains(
                "connection refused for user 'alice': user connection limit (2) is reached"
            ),
        "{text}"
    );
    assert_eq!(broker.broker().connections().count_of_user("alice"), 2);
    // Another user is not limited by alice's limit.
    let guest = lapin_connect(&broker.url()).await.expect("guest connects");
    first.close().await.expect("close");
    assert!(
        wait_for(SETTLE, || broker
            .broker()
            .connections()
            .count_of_user("alice")
            == 1)
        .await
    );
    let third = amqprs::connection::Connection::open(&arguments)
        .await
        .expect("a place again");
    second.close().await.ok();
    third.close().await.ok();
    guest.close(200, "done".into()).await.ok();
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_max_queues_refuses_a_new_queue_with_406_and_rabbitmqs_text() {
    let broker = TestBroker::start().await;
    api_ok(&broker, "PUT", "/api/vhosts/capped", None).await;
    api_ok(
        &broker,
        "PUT",
        "/api/permissions/capped/guest",
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
    set_vhost_limit(&broker, "capped", "max-queues", 2).await;
    let connection = lapin_connect(&broker.url_for("guest", "guest", "capped"))
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    lapin_common::declare(&channel, "q1", Default::default()).await;
    lapin_common::declare(&channel, "q2", Default::default()).await;
    // A redeclaration is no new queue.
    lapin_common::declare(&channel, "q1", Default::default()).await;
    let error = channel
        .queue_declare("q3".into(), Default::default(), Default::default())
        .await
        .expect_err("over max-queues");
    assert_eq!(
        amqp_error(&error),
        (
            406,
            "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost 'capped' (2) is reached"
                .to_string()
        )
    );
    // The management API is refused the same way.
    let put = broker
        .api_as_guest("PUT", "/api/queues/capped/q4", Some(r#"{"durable":false}"#))
        .await;
    assert_eq!(put.status, 400, "{}", put.text());
    assert!(put
        .text()
        .contains("queue limit in vhost 'capped' (2) is reached"));
    let vhost = broker.broker().vhost("capped").expect("vhost");
    assert!(vhost.queue("q3").is_none() && vhost.queue("q4").is_none());
    // A quorum queue counts too, and is refused as a classic one.
    let channel = connection.create_channel().await.expect("channel");
    let error = channel
        .queue_declare(
            "qq".into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            lapin_common::args(&[("x-queue-type", lapin_common::text("quorum"))]),
        )
        .await
        .expect_err("quorum over max-queues");
    assert_eq!(amqp_error(&error).0, 406);
    // A deleted queue frees its place; -1 lifts the limit.
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_delete("q1".into(), Default::default())
        .await
        .expect("delete");
    lapin_common::declare(&channel, "q3", Default::default()).await;
    set_vhost_limit(&broker, "capped", "max-queues", -1).await;
    lapin_common::declare(&channel, "q5", Default::default()).await;
    assert_eq!(vhost.queues().len(), 3);
    connection.close(200, "done".into()).await.ok();
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_max_channels_counts_channels_over_all_the_users_connections() {
    let broker = TestBroker::start().await;
    set_user_limit(&broker, "guest", "max-channels", 2).await;
    let first = lapin_connect(&broker.url()).await.expect("first");
    let second = lapin_connect(&broker.url()).await.expect("second");
    let one = first.create_channel().await.expect("channel 1");
    let _two = second.create_channel().await.expect("channel 2");
    assert_eq!(broker.broker().connections().channels_of_user("guest"), 2);
    let error = second
        .create_channel()
        .await
        .expect_err("a third channel of guest");
    assert_eq!(
        amqp_error(&error),
        (
            530,
            "NOT_ALLOWED - number of channels opened for user 'guest' has reached the maximum allowed user limit of (2)"
                .to_string()
        )
    );
    // 530 closes that connection, as in RabbitMQ; its channel is given back.
    assert!(
        wait_for(SETTLE, || broker
            .broker()
            .connections()
            .channels_of_user("guest")
            == 1)
        .await
    );
    let third = lapin_connect(&broker.url()).await.expect("third");
    let _replacement = third.create_channel().await.expect("the freed place");
    // A closed channel gives its place back too.
    one.close(200, "done".into()).await.expect("channel close");
    assert!(
        wait_for(SETTLE, || broker
            .broker()
            .connections()
            .channels_of_user("guest")
            == 1)
        .await
    );
    let _again = first.create_channel().await.expect("after a close");
    set_user_limit(&broker, "guest", "max-channels", -1).await;
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(third.create_channel().await.expect("unlimited"));
    }
    assert_eq!(broker.broker().connections().channels_of_user("guest"), 5);
    first.close(200, "done".into()).await.ok();
    third.close(200, "done".into()).await.ok();
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_over_a_connection_limit_gets_connack_not_authorized() {
    let broker = TestBroker::start().await;
    let addr = broker.mqtt_addr();
    set_vhost_limit(&broker, "%2F", "max-connections", 1).await;
    let first = mqtt_common::connect(mqtt_common::options(addr, "first")).await;
    assert_eq!(
        mqtt_common::refused(mqtt_common::options(addr, "second")).await,
        ConnectReturnCode::NotAuthorized
    );
    // The same client identifier does not take the connection over: refused before that.
    assert_eq!(
        mqtt_common::refused(mqtt_common::options(addr, "first")).await,
        ConnectReturnCode::NotAuthorized
    );
    assert_eq!(connections_in(&broker, "/"), 1);
    set_vhost_limit(&broker, "%2F", "max-connections", -1).await;
    add_user(&broker, "sensor").await;
    set_user_limit(&broker, "sensor", "max-connections", 1).await;
    let mut sensor = mqtt_common::options(addr, "sensor-1");
    sensor.set_credentials("sensor", "secret");
    let sensor_connection = mqtt_common::connect(sensor).await;
    let mut another = mqtt_common::options(addr, "sensor-2");
    another.set_credentials("sensor", "secret");
    assert_eq!(
        mqtt_common::refused(another).await,
        ConnectReturnCode::NotAuthorized
    );
    // A subscription needs a queue: over max-queues its SUBACK says failure.
    set_vhost_limit(&broker, "%2F", "max-queues", 0).await;
    let mut first = first;
    let suback = first
        .subscribe("sensors/#", rumqttc::QoS::AtLeastOnce)
        .await;
    assert_eq!(
        suback.return_codes,
        [rumqttc::SubscribeReasonCode::Failure],
        "{suback:?}"
    );
    first.disconnect().await;
    sensor_connection.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_over_a_connection_limit_gets_an_error_frame() {
    let broker = TestBroker::start().await;
    set_user_limit(&broker, "guest", "max-connections", 1).await;
    let first = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let mut second = StompClient::open(broker.stomp_addr()).await;
    second
        .write_frame(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("host", "/"),
                ("login", "guest"),
                ("passcode", "guest"),
            ],
            b"",
        )
        .await;
    let error = second.expect_error().await;
    assert_eq!(error.header("message"), Some("Bad CONNECT"), "{error:?}");
    assert!(
        error
            .text()
            .contains("connection refused for user 'guest': user connection limit (1) is reached"),
        "{error:?}"
    );
    assert_eq!(broker.broker().connections().count_of_user("guest"), 1);
    first.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_vhost_limit_counts_every_protocol_and_amqp_10_is_closed_with_resource_limit_exceeded()
{
    let broker = TestBroker::start().await;
    set_vhost_limit(&broker, "%2F", "max-connections", 2).await;
    let amqp = lapin_connect(&broker.url()).await.expect("AMQP 0-9-1");
    let mqtt = mqtt_common::connect(mqtt_common::options(broker.mqtt_addr(), "counted")).await;
    assert_eq!(connections_in(&broker, "/"), 2);
    let mut raw = amqp10_common::RawClient::connect(&broker).await;
    raw.open(None).await;
    match raw.next().await {
        Some(Performative::Close(close)) => {
            let error = close.error.expect("an error");
            assert_eq!(
                error.condition,
                ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)
            );
            assert_eq!(
                error.description.as_deref(),
                Some(
                    "access to vhost '/' refused for user 'guest': vhost connection limit (2) is reached"
                )
            );
        }
        other => panic!("expected close, got {other:?}"),
    }
    let mut stomp = StompClient::open(broker.stomp_addr()).await;
    stomp
        .write_frame(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("login", "guest"),
                ("passcode", "guest"),
            ],
            b"",
        )
        .await;
    let error = stomp.expect_error().await;
    assert!(
        error.text().contains("connection limit (2) is reached"),
        "{error:?}"
    );
    assert_eq!(connections_in(&broker, "/"), 2);
    mqtt.disconnect().await;
    amqp.close(200, "done".into()).await.ok();
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_protocol_client_over_the_limit_is_refused_at_open() {
    let broker = TestBroker::start().await;
    set_vhost_limit(&broker, "%2F", "max-connections", 0).await;
    let addr = broker.stream_addr();
    let refused = rabbitmq_stream_client::Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await;
    assert!(
        refused.is_err(),
        "the stream client connected over the limit"
    );
    assert_eq!(connections_in(&broker, "/"), 0);
    set_vhost_limit(&broker, "%2F", "max-connections", -1).await;
    let environment = rabbitmq_stream_client::Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("connects without a limit");
    drop(environment);
    broker.shutdown().await;
}
