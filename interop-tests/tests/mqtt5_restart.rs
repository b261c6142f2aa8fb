//! MQTT 5 session expiry against the real `warren` binary across a restart: a session
//! with a long expiry interval keeps its subscription and its acknowledged message, one
//! whose interval ran out is gone (its queue deleted by `x-expires`).
//!
//! Uses its own temporary `data_dir` and port 0, and is bounded in time.

mod mqtt5_common;
mod mqtt_common;

use std::path::Path;
use std::time::Duration;

use mqtt5_common::{connect5, options5};
use rumqttc::v5::mqttbytes::v5::{ConnectProperties, Packet};
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
