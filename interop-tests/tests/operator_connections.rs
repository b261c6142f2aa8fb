//! STOMP and AMQP 1.0 connections in the operator surface: listed by the management API with
//! their protocol, user, vhost and client properties, and closed the protocol's way when an
//! operator closes them (STOMP: ERROR then close; AMQP 1.0: close with
//! `amqp:connection:forced` and the reason).

mod amqp10_common;

use std::time::Duration;

use amqp10_common::RawClient;
use fe2o3_amqp::types::definitions::{ConnectionError, ErrorCondition};
use fe2o3_amqp::types::performatives::Performative;
use serde_json::Value;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::{wait_for, TestBroker};

/// The listed connection whose protocol is `protocol`, once there is one.
async fn listed(broker: &TestBroker, protocol: &str) -> Value {
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .list()
            .iter()
            .any(|c| c.info.protocol == protocol))
        .await,
        "no {protocol} connection registered: {:?}",
        broker
            .broker()
            .connections()
            .list()
            .iter()
            .map(|c| c.info.protocol.clone())
            .collect::<Vec<_>>()
    );
    let connections = broker
        .api_as_guest("GET", "/api/connections", None)
        .await
        .json();
    connections
        .as_array()
        .and_then(|list| list.iter().find(|c| c["protocol"] == protocol).cloned())
        .unwrap_or_else(|| panic!("no {protocol} connection listed: {connections}"))
}

async fn close_through_api(broker: &TestBroker, name: &str, reason: &str) {
    let path = format!(
        "/api/connections/{}",
        warren_management::http::percent_encode(name)
    );
    let response = warren_management::http::send_with(
        &broker.management_addr(),
        "DELETE",
        &path,
        Some(("guest", "guest")),
        &[("x-reason", reason)],
        None,
    )
    .await
    .expect("DELETE answered");
    assert_eq!(response.status, 204);
}

#[tokio::test]
async fn stomp_connections_are_listed_and_closed_with_an_error_frame() {
    let broker = TestBroker::start().await;
    let (mut client, _) = StompClient::connect_with(
        broker.stomp_addr(),
        &[
            ("accept-version", "1.1,1.2"),
            ("host", "/"),
            ("login", "guest"),
            ("passcode", "guest"),
            ("heart-beat", "0,0"),
        ],
    )
    .await;
    let connection = listed(&broker, "STOMP 1.2").await;
    assert_eq!(connection["user"], "guest");
    assert_eq!(connection["vhost"], "/");
    assert_eq!(connection["channels"], 1);
    assert_eq!(connection["port"], broker.stomp_addr().port());
    let name = connection["name"].as_str().expect("name").to_string();
    assert!(
        name.ends_with(&format!("-> {}", broker.stomp_addr())),
        "{name}"
    );

    close_through_api(&broker, &name, "maintenance window").await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("connection_forced"));
    assert!(
        error.text().contains("maintenance window"),
        "{}",
        error.text()
    );
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/connections", None)
            .await
            .json(),
        Value::Array(vec![])
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn stomp_1_0_connections_report_their_version() {
    let broker = TestBroker::start().await;
    let (client, _) = StompClient::connect_with(broker.stomp_addr(), &[]).await;
    let connection = listed(&broker, "STOMP 1.0").await;
    assert_eq!(connection["user"], "guest");
    client.disconnect().await;
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn amqp10_connections_are_listed_and_closed_with_connection_forced() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(&broker).await;
    client.open(None).await;
    let connection = listed(&broker, "AMQP 1.0").await;
    assert_eq!(connection["user"], "guest");
    assert_eq!(connection["vhost"], "/");
    assert_eq!(connection["client_properties"]["container_id"], "raw");
    assert_eq!(connection["port"], broker.addr().port());
    let name = connection["name"].as_str().expect("name").to_string();

    close_through_api(&broker, &name, "maintenance window").await;
    match client.next().await {
        Some(Performative::Close(close)) => {
            let error = close.error.expect("close carries an error");
            assert_eq!(
                error.condition,
                ErrorCondition::from(ConnectionError::ConnectionForced)
            );
            assert_eq!(error.description.as_deref(), Some("maintenance window"));
        }
        other => panic!("expected close, got {other:?}"),
    }
    client
        .send(
            0,
            Performative::Close(fe2o3_amqp::types::performatives::Close { error: None }),
        )
        .await;
    assert!(client.next().await.is_none(), "socket closed after close");
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn amqp10_sessions_count_as_channels() {
    let broker = TestBroker::start().await;
    let (connection, session) = amqp10_common::connect(&broker).await;
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .channel_count()
            == 1)
        .await
    );
    let listed = listed(&broker, "AMQP 1.0").await;
    assert_eq!(listed["channels"], 1);
    assert_eq!(listed["client_properties"]["container_id"], "warren-test");
    drop(session);
    drop(connection);
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    broker.shutdown().await;
}
