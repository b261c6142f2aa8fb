//! MQTT 5 sessions against the real `warren` binary across a restart: a session with a
//! long expiry interval keeps its subscription and its acknowledged message, one whose
//! interval ran out is gone (its queue deleted by `x-expires`); a persistent member of a
//! shared subscription group is still a member after the restart; a delayed will pending
//! when the broker stops is published after the restart once its delay is over, unless
//! its client came back first.
//!
//! Uses its own temporary `data_dir` and port 0, and is bounded in time.

mod mqtt5_common;
mod mqtt_common;

use std::path::Path;
use std::time::Duration;

use mqtt5_common::{connect5, options5};
use rumqttc::v5::mqttbytes::v5::{ConnectProperties, LastWill, LastWillProperties, Packet};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::MqttOptions;
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::TempDir;

/// A bound on the whole test.
const TEST_LIMIT: Duration = Duration::from_secs(120);

async fn start(dir: &Path) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, &[]))
        .await
        .expect("start task")
}

/// Options of a client resuming its session, which lasts `expiry` seconds.
fn persistent(addr: std::net::SocketAddr, client_id: &str, expiry: u32) -> MqttOptions {
    let mut options = options5(addr, client_id);
    options.set_clean_start(false);
    let mut properties = ConnectProperties::new();
    properties.session_expiry_interval = Some(expiry);
    options.set_connect_properties(properties);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_decides_what_survives_a_restart() {
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt5-session-expiry");
        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        for (client_id, expiry, filter) in [("lasting", 3600, "keep/#"), ("brief", 1, "drop/#")] {
            let mut client = connect5(persistent(addr, client_id, expiry)).await;
            client.subscribe(filter, QoS::AtLeastOnce).await;
            client.disconnect().await;
        }
        let mut publisher = connect5(options5(addr, "publisher")).await;
        for topic in ["keep/a", "drop/a"] {
            publisher
                .publish(topic, QoS::AtLeastOnce, topic.as_bytes())
                .await;
            assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        }
        publisher.disconnect().await;
        assert!(warren.terminate().success());

        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let mut lasting = connect5(persistent(addr, "lasting", 3600)).await;
        assert!(lasting.connack.session_present);
        let publish = lasting.next_publish().await;
        assert_eq!(&publish.topic[..], b"keep/a");
        lasting.disconnect().await;
        // The brief session's queue goes once unused for its second (`x-expires`, swept
        // by the broker's expiry pass).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let brief = connect5(persistent(addr, "brief", 1)).await;
        assert!(!brief.connack.session_present, "the brief session expired");
        brief.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_shared_subscription_member_is_one_again_after_a_restart() {
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt5-shared-restart");
        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let mut member = connect5(persistent(addr, "collector", 3600)).await;
        member
            .subscribe("$share/g/readings/#", QoS::AtLeastOnce)
            .await;
        member.disconnect().await;
        assert!(warren.terminate().success());

        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        // Another member joins and leaves: the stored member still counts, so the group's
        // queue stays and keeps collecting the group's messages.
        let mut passer_by = connect5(options5(addr, "passer-by")).await;
        passer_by
            .subscribe("$share/g/readings/#", QoS::AtLeastOnce)
            .await;
        passer_by
            .client
            .unsubscribe("$share/g/readings/#")
            .await
            .expect("unsubscribe");
        match passer_by.next().await {
            Packet::UnsubAck(_) => {}
            other => panic!("expected UNSUBACK, got {other:?}"),
        }
        passer_by.disconnect().await;
        let mut publisher = connect5(options5(addr, "publisher")).await;
        publisher
            .publish("readings/b", QoS::AtLeastOnce, b"after")
            .await;
        assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        publisher.disconnect().await;

        // The member comes back: its session is present and it consumes the group again,
        // the message the group's queue kept for it first.
        let mut member = connect5(persistent(addr, "collector", 3600)).await;
        assert!(member.connack.session_present, "the membership survived");
        let publish = member.next_publish().await;
        assert_eq!(&publish.topic[..], b"readings/b");
        assert_eq!(&publish.payload[..], b"after");
        // Leaving the group (the last member) ends it; a new member finds nothing waiting.
        let unsuback = member.unsubscribe("$share/g/readings/#").await;
        assert_eq!(unsuback.reasons.len(), 1);
        member.disconnect().await;
        assert!(warren.terminate().success());

        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let member = connect5(persistent(addr, "collector", 3600)).await;
        assert!(
            !member.connack.session_present,
            "the membership left before the restart stays gone"
        );
        member.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}

/// An MQTT 5 will on `topic` delayed `delay` seconds.
fn delayed_will(topic: &str, payload: &str, delay: u32) -> LastWill {
    let properties = LastWillProperties {
        delay_interval: Some(delay),
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: Some("text/plain".into()),
        response_topic: None,
        correlation_data: None,
        user_properties: vec![("reason".into(), "offline".into())],
    };
    LastWill::new(
        topic,
        payload.to_string(),
        QoS::AtLeastOnce,
        false,
        Some(properties),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_will_pending_at_a_broker_stop_is_published_after_the_restart() {
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt5-will-restart");
        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        // A persistent watcher: its queue collects the wills while it is away.
        let mut watcher = connect5(persistent(addr, "watcher", 3600)).await;
        watcher.subscribe("wills/#", QoS::AtLeastOnce).await;
        watcher.disconnect().await;
        // Two devices with a 3 s will delay are connected when the broker stops.
        let mut gone = persistent(addr, "gone", 3600);
        gone.set_last_will(delayed_will("wills/gone", "gone is offline", 3));
        let gone = connect5(gone).await;
        let mut back = persistent(addr, "back", 3600);
        back.set_last_will(delayed_will("wills/back", "back is offline", 3));
        let mut back = connect5(back).await;
        back.subscribe("commands/back", QoS::AtLeastOnce).await;
        assert!(warren.terminate().success());
        gone.abort();
        back.abort();

        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        // One device is back within its delay: its will is cancelled.
        let back = connect5(persistent(addr, "back", 3600)).await;
        assert!(back.connack.session_present);
        // The other's delay runs out after the restart: its will is published.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut watcher = connect5(persistent(addr, "watcher", 3600)).await;
        assert!(watcher.connack.session_present);
        let will = watcher.next_publish().await;
        assert_eq!(&will.topic[..], b"wills/gone");
        assert_eq!(&will.payload[..], b"gone is offline");
        let properties = will.properties.expect("will properties");
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            properties.user_properties,
            vec![("reason".to_string(), "offline".to_string())]
        );
        assert!(
            watcher
                .publish_within(Duration::from_secs(1))
                .await
                .is_none(),
            "one will: the device that came back sends none"
        );
        watcher.disconnect().await;
        back.disconnect().await;
        assert!(warren.terminate().success());

        // A will published once is not published again after another restart.
        let warren = start(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let mut watcher = connect5(persistent(addr, "watcher", 3600)).await;
        assert!(
            watcher
                .publish_within(Duration::from_secs(4))
                .await
                .is_none(),
            "no will again"
        );
        watcher.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
