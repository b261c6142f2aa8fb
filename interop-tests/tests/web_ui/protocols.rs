//! What the UI shows of a broker in use: connections of every protocol (AMQP 0-9-1, AMQP
//! 1.0, MQTT, STOMP, the stream protocol) with their protocol, user, vhost, client,
//! channels and byte rates, two of them closed from the page; the AMQP channels; a queue's
//! consumer and rates; the overview's totals, listeners of every protocol, its charts drawn
//! from the API's rate history, and the memory and disk alarms raised by the resource
//! monitor and cleared again.

use std::path::Path;
use std::time::Duration;

use amqprs::channel::{BasicConsumeArguments, BasicPublishArguments};
use warren_config::{DiskFreeLimit, MemoryHighWatermark};
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

use crate::browser::*;

/// How long rates and charts may take to show: the overview asks for 5 s buckets, so a rate
/// needs two of them.
const RATES_LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_shows_every_protocol_its_rates_charts_and_alarms() {
    let _one_browser = BROWSER.lock().await;
    let Some((driver, chromium)) = driver_or_skip("web UI protocols test").await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(240), every_protocol(&driver, &chromium))
        .await
        .expect("the browser test finishes in time");
}

/// The connections' protocols as the core names them.
fn protocols(broker: &TestBroker) -> Vec<String> {
    let mut protocols: Vec<String> = broker
        .broker()
        .connections()
        .list()
        .into_iter()
        .map(|snapshot| snapshot.info.protocol)
        .collect();
    protocols.sort();
    protocols
}

/// XPath of the Close button in the Connections table's row whose protocol is `protocol`.
fn close_button(protocol: &str) -> String {
    format!(
        "//table[@aria-label='Connections']//tr[td[2][normalize-space(.)='{protocol}']]//button"
    )
}

async fn every_protocol(driver: &Driver, chromium: &Path) {
    let broker = TestBroker::start_with(&[("collect_statistics_interval", "500")]).await;
    for (queue, body) in [
        ("watched", r#"{"durable":false}"#),
        ("piling", r#"{"durable":false}"#),
        (
            "ui.stream",
            r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#,
        ),
    ] {
        let created = broker
            .api_as_guest("PUT", &format!("/api/queues/%2F/{queue}"), Some(body))
            .await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let bound = broker
        .api_as_guest(
            "POST",
            "/api/bindings/%2F/e/amq.fanout/q/watched",
            Some(r#"{"routing_key":""}"#),
        )
        .await;
    assert_eq!(bound.status, 201, "{}", bound.text());
    let bound = broker
        .api_as_guest(
            "POST",
            "/api/bindings/%2F/e/amq.fanout/q/piling",
            Some(r#"{"routing_key":""}"#),
        )
        .await;
    assert_eq!(bound.status, 201, "{}", bound.text());

    // AMQP 0-9-1: a consumer on `watched`, and a publisher to amq.fanout (both queues) that
    // keeps going so that rates and charts have something to show.
    let amqp = broker.addr();
    let open = amqprs::connection::OpenConnectionArguments::new(
        &amqp.ip().to_string(),
        amqp.port(),
        "guest",
        "guest",
    );
    let consuming = amqprs::connection::Connection::open(&open)
        .await
        .expect("AMQP 0-9-1 connects");
    let consumer_channel = consuming.open_channel(None).await.expect("channel");
    let (_tag, mut deliveries) = consumer_channel
        .basic_consume_rx(
            BasicConsumeArguments::new("watched", "ui-consumer")
                .auto_ack(true)
                .finish(),
        )
        .await
        .expect("consume");
    let drain = tokio::spawn(async move { while deliveries.recv().await.is_some() {} });
    let publishing = amqprs::connection::Connection::open(&open)
        .await
        .expect("AMQP 0-9-1 connects");
    let publisher_channel = publishing.open_channel(None).await.expect("channel");
    let publisher = tokio::spawn(async move {
        loop {
            let sent = publisher_channel
                .basic_publish(
                    amqprs::BasicProperties::default(),
                    b"tick".to_vec(),
                    BasicPublishArguments::new("amq.fanout", ""),
                )
                .await;
            if sent.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // AMQP 1.0, MQTT, STOMP and the stream protocol.
    let mut amqp10 =
        fe2o3_amqp::Connection::open("ui-amqp10", format!("amqp://guest:guest@{amqp}").as_str())
            .await
            .expect("AMQP 1.0 connects");
    let mqtt_addr = broker.mqtt_addr();
    let mut options =
        rumqttc::MqttOptions::new("ui-mqtt", mqtt_addr.ip().to_string(), mqtt_addr.port());
    options.set_credentials("guest", "guest");
    options.set_keep_alive(Duration::from_secs(30));
    let (mqtt, mut event_loop) = rumqttc::AsyncClient::new(options, 10);
    let mqtt_ended = tokio::spawn(async move {
        loop {
            if event_loop.poll().await.is_err() {
                return;
            }
        }
    });
    let stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
    let stream_addr = broker.stream_addr();
    let environment = rabbitmq_stream_client::Environment::builder()
        .host(&stream_addr.ip().to_string())
        .port(stream_addr.port())
        .build()
        .await
        .expect("stream client connects");
    let producer = environment
        .producer()
        .build("ui.stream")
        .await
        .expect("stream producer");
    let every = [
        "AMQP 0-9-1",
        "AMQP 1.0",
        "MQTT 3.1.1",
        "RabbitMQ Stream",
        "STOMP 1.2",
    ];
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(10), || {
            let open = protocols(&broker);
            every.iter().all(|p| open.iter().any(|o| o == p))
        })
        .await,
        "every protocol connected: {:?}",
        protocols(&broker)
    );

    let client = browser(driver, chromium).await;
    let base = format!("http://{}", broker.management_addr());
    log_in(&client, &base, "guest", "guest").await;
    wait_for_text(&client, "#page-title", "Overview").await;

    // Connections: one row per connection, each with its protocol, user and vhost.
    goto(&client, &base, "#/connections", "Connections").await;
    let listed = wait_for_text(&client, "table[aria-label=Connections]", "STOMP 1.2").await;
    for protocol in every {
        assert!(listed.contains(protocol), "{protocol} listed: {listed}");
    }
    let rows = run_script(
        &client,
        "return Array.from(document.querySelectorAll('table[aria-label=Connections] tbody tr'))\
         .map((row) => Array.from(row.cells).map((cell) => cell.textContent));",
    )
    .await;
    let rows = rows.as_array().expect("rows").clone();
    assert_eq!(rows.len(), protocols(&broker).len(), "{rows:?}");
    for row in &rows {
        assert_eq!(row[2], "guest", "user column: {row:?}");
        assert_eq!(row[3], "/", "vhost column: {row:?}");
        if row[1] == "AMQP 0-9-1" {
            // The client's properties: amqprs names itself.
            let client = row[4].as_str().unwrap_or_default().to_ascii_lowercase();
            assert!(client.contains("amqprs"), "client column: {row:?}");
            assert_eq!(row[5], "1", "channels column: {row:?}");
        }
    }
    // Byte counts for every connection from the API, and a rate on the page for the
    // publishing one once the page has refreshed (rates need two readings).
    for connection in broker
        .api_as_guest("GET", "/api/connections", None)
        .await
        .json()
        .as_array()
        .expect("connections")
    {
        assert!(
            connection["recv_oct"].as_u64().is_some_and(|n| n > 0)
                && connection["send_oct"].as_u64().is_some_and(|n| n > 0),
            "{connection}"
        );
    }
    wait_for_script(
        &client,
        "a From client rate above zero for the AMQP 0-9-1 publisher",
        "Array.from(document.querySelectorAll('table[aria-label=Connections] tbody tr'))\
         .some((row) => row.cells[1].textContent === 'AMQP 0-9-1' \
         && parseFloat(row.cells[7].textContent) > 0 && parseFloat(row.cells[8].textContent) >= 0)",
        RATES_LIMIT,
    )
    .await;
    screenshot(&client, "every-protocol-connections").await;
    // Close the MQTT and the STOMP connection from the page.
    click_xpath(&client, &close_button("MQTT 3.1.1")).await;
    eventually("the MQTT connection was closed from the UI", || {
        !protocols(&broker).iter().any(|p| p.starts_with("MQTT"))
    })
    .await;
    tokio::time::timeout(LIMIT, mqtt_ended)
        .await
        .expect("the MQTT client saw its connection end")
        .expect("event loop task");
    wait_for_script(
        &client,
        "the MQTT row went",
        "!document.querySelector('table[aria-label=Connections]').textContent.includes('MQTT')",
        LIMIT,
    )
    .await;
    click_xpath(&client, &close_button("STOMP 1.2")).await;
    eventually("the STOMP connection was closed from the UI", || {
        !protocols(&broker).iter().any(|p| p.starts_with("STOMP"))
    })
    .await;
    let mut stomp = stomp;
    assert!(
        stomp.is_closed_by_server().await,
        "the STOMP client saw its connection end"
    );
    assert!(protocols(&broker).iter().any(|p| p == "AMQP 1.0"));

    // Channels: the two AMQP 0-9-1 connections' channels.
    goto(&client, &base, "#/channels", "Channels").await;
    wait_for_script(
        &client,
        "the two AMQP 0-9-1 channels",
        "Array.from(document.querySelectorAll('table[aria-label=Channels] tbody tr'))\
         .filter((row) => row.cells[0].textContent.endsWith(' (1)') && row.cells[2].textContent === 'guest' \
         && row.cells[3].textContent === '/' && row.cells[4].textContent === 'running').length === 2",
        LIMIT,
    )
    .await;
    screenshot(&client, "channels-in-use").await;

    // A queue's page: its consumer and a publish rate above zero.
    goto(&client, &base, "#/queues/%2F/watched", "Queue watched").await;
    let consumers = wait_for_text(&client, "table[aria-label=Consumers]", "ui-consumer").await;
    assert!(
        consumers.contains(" -> "),
        "the consumer's connection: {consumers}"
    );
    reload_until(
        &client,
        "the queue's publish rate",
        "/^publish [1-9]/.test(document.getElementById('queue-rates').textContent)",
        RATES_LIMIT,
    )
    .await;
    screenshot(&client, "queue-rates").await;

    // Overview: the totals, every listener the API reports, and charts with lines from the
    // history.
    goto(&client, &base, "#/overview", "Overview").await;
    let open_now = protocols(&broker).len();
    wait_for_script(
        &client,
        "the Connections total",
        &format!(
            "Array.from(document.querySelectorAll('.card')).some((card) => \
             card.querySelector('.label').textContent === 'Connections' \
             && card.querySelector('.value').textContent === '{open_now}')"
        ),
        LIMIT,
    )
    .await;
    let overview = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json();
    let listeners: Vec<String> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| l["protocol"].as_str().unwrap_or_default().to_string())
        .collect();
    for protocol in ["amqp", "mqtt", "stomp", "stream", "http", "http/prometheus"] {
        assert!(
            listeners.iter().any(|l| l == protocol),
            "the API lists {protocol}: {listeners:?}"
        );
    }
    let shown = run_script(
        &client,
        "return Array.from(document.querySelectorAll('table[aria-label=Listeners] tbody tr'))\
         .map((row) => row.cells[0].textContent);",
    )
    .await;
    let mut shown: Vec<String> = shown
        .as_array()
        .expect("listener rows")
        .iter()
        .filter_map(|cell| cell.as_str().map(str::to_string))
        .collect();
    let mut expected = listeners.clone();
    shown.sort();
    expected.sort();
    assert_eq!(shown, expected, "the Listeners table shows every listener");
    let chart = |caption: &str, series: &str| {
        format!(
            "(() => {{ const figure = Array.from(document.querySelectorAll('figure'))\
             .find((f) => f.querySelector('figcaption').textContent === '{caption}'); \
             const svg = figure.querySelector('svg'); \
             const value = Number((svg.getAttribute('aria-label').match(/{series} ([0-9.]+)/) || [])[1]); \
             return svg.querySelectorAll('polyline').length >= 1 \
             && svg.querySelector('polyline').getAttribute('points').split(' ').length >= 2 \
             && value > 0; }})()"
        )
    };
    wait_for_script(
        &client,
        "the message-rate chart draws the publish rate",
        &chart("Message rates", "Publish"),
        RATES_LIMIT,
    )
    .await;
    wait_for_script(
        &client,
        "the queued-messages chart draws the queued total",
        &chart("Queued messages", "Total"),
        RATES_LIMIT,
    )
    .await;
    screenshot(&client, "overview-charts").await;

    // Alarms: the resource monitor raises both; the Nodes table shows them, then their end.
    publisher.abort();
    let monitor = broker.server().resource_monitor();
    monitor.set_memory_high_watermark(MemoryHighWatermark::Absolute(1024));
    monitor.set_disk_free_limit(DiskFreeLimit::Absolute(u64::MAX / 4));
    monitor.check();
    let nodes = wait_for_text(&client, "table[aria-label=Nodes]", "memory alarm").await;
    assert!(nodes.contains("disk alarm"), "{nodes}");
    screenshot(&client, "overview-alarms").await;
    monitor.set_memory_high_watermark(MemoryHighWatermark::Relative(0.6));
    monitor.set_disk_free_limit(DiskFreeLimit::Absolute(1));
    monitor.check();
    wait_for_script(
        &client,
        "the alarms cleared",
        "!document.querySelector('table[aria-label=Nodes]').textContent.includes('alarm')",
        LIMIT,
    )
    .await;

    client.close().await.expect("end the session");
    drop(producer);
    drop(environment);
    let _ = amqp10.close().await;
    drop(mqtt);
    drain.abort();
    let _ = consuming.close().await;
    let _ = publishing.close().await;
}
