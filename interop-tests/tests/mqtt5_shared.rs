//! Durable MQTT 5 shared subscriptions through rumqttc's v5 client over a socket: a group's
//! messages spread across its members; a member with a persistent session stays in the
//! group while away (the group's queue keeps collecting when every member is away) and
//! gets the group's messages again when it resumes, without subscribing; the group's queue
//! goes once its last member session ends (clean start, or the session expiry interval).
//!
//! Every test uses its own broker on 127.0.0.1 port 0 and is bounded in time.

mod mqtt5_common;
mod mqtt_common;

use std::collections::BTreeSet;
use std::time::Duration;

use mqtt5_common::{connect5, options5, Mqtt5Client};
use rumqttc::v5::mqttbytes::v5::{Packet, SubscribeReasonCode};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::MqttOptions;
use warren_interop_tests::{wait_for, TestBroker};

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// The group's queue, as `shared_queue_name` names it.
const GROUP_QUEUE: &str = "mqtt-shared-workers-jobs/#";

/// Options for a member whose session outlives its connection by `expiry` seconds and is
/// resumed on reconnect (clean start 0).
fn persistent(addr: std::net::SocketAddr, client_id: &str, expiry: u32) -> MqttOptions {
    let mut options = options5(addr, client_id);
    options.set_clean_start(false);
    let mut properties = options.connect_properties().unwrap_or_default();
    properties.session_expiry_interval = Some(expiry);
    options.set_connect_properties(properties);
    options
}

async fn join(member: &mut Mqtt5Client) {
    let suback = member
        .subscribe("$share/workers/jobs/#", QoS::AtLeastOnce)
        .await;
    assert_eq!(
        suback.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
}

async fn publish_jobs(publisher: &mut Mqtt5Client, jobs: std::ops::Range<usize>) {
    for job in jobs {
        publisher
            .publish(
                &format!("jobs/{job}"),
                QoS::AtLeastOnce,
                format!("job-{job}").as_bytes(),
            )
            .await;
        assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
    }
}

/// The payloads `member` receives within `wait` of its last one.
async fn drain(member: &mut Mqtt5Client, wait: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(publish) = member.publish_within(wait).await {
        got.push(String::from_utf8_lossy(&publish.payload).into_owned());
    }
    got
}

fn group_queue_messages(broker: &TestBroker) -> Option<u64> {
    broker
        .broker()
        .vhost("/")
        .and_then(|vhost| vhost.queue(GROUP_QUEUE))
        .map(|queue| queue.message_count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_member_stays_in_the_group_while_away_and_resumes_its_share() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut durable = connect5(persistent(addr, "durable-worker", 300)).await;
        let mut clean = connect5(options5(addr, "clean-worker")).await;
        join(&mut durable).await;
        join(&mut clean).await;
        let mut publisher = connect5(options5(addr, "dispatcher")).await;

        // Both members share the group's messages.
        publish_jobs(&mut publisher, 0..4).await;
        let (first_durable, first_clean) = tokio::join!(
            drain(&mut durable, Duration::from_millis(300)),
            drain(&mut clean, Duration::from_millis(300))
        );
        assert!(
            !first_durable.is_empty() && !first_clean.is_empty(),
            "spread: {first_durable:?} / {first_clean:?}"
        );
        assert_eq!(first_durable.len() + first_clean.len(), 4);

        // The persistent member goes away: the other member gets everything meanwhile.
        durable.disconnect().await;
        publish_jobs(&mut publisher, 4..6).await;
        let got = drain(&mut clean, Duration::from_millis(300)).await;
        assert_eq!(got, vec!["job-4", "job-5"]);

        // The clean member leaves too: its session ends, the away one still holds the
        // group, so the queue stays and collects the group's messages.
        clean.disconnect().await;
        publish_jobs(&mut publisher, 6..9).await;
        assert!(
            wait_for(Duration::from_secs(5), || group_queue_messages(&broker)
                == Some(3))
            .await,
            "the group's queue holds what came while every member was away: {:?}",
            group_queue_messages(&broker)
        );
        let queue = broker
            .broker()
            .vhost("/")
            .and_then(|vhost| vhost.queue(GROUP_QUEUE))
            .expect("group queue");
        assert!(queue.config().durable, "the group's queue is durable");

        // The persistent member comes back without subscribing: session present, and the
        // group's messages come to it.
        let mut durable = connect5(persistent(addr, "durable-worker", 300)).await;
        assert!(durable.connack.session_present, "the session was kept");
        let got: BTreeSet<String> = drain(&mut durable, Duration::from_millis(500))
            .await
            .into_iter()
            .collect();
        let expected: BTreeSet<String> = (6..9).map(|job| format!("job-{job}")).collect();
        assert_eq!(got, expected);
        // And new ones, as a member again.
        publish_jobs(&mut publisher, 9..10).await;
        assert_eq!(
            drain(&mut durable, Duration::from_millis(300)).await,
            vec!["job-9"]
        );
        durable.disconnect().await;

        // Clean start discards the stored session: its last member gone, the group's queue
        // is deleted.
        let restart = connect5(options5(addr, "durable-worker")).await;
        assert!(!restart.connack.session_present);
        assert!(
            wait_for(Duration::from_secs(5), || group_queue_messages(&broker)
                .is_none())
            .await,
            "the group's queue went with its last member session"
        );
        restart.disconnect().await;
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_ends_when_its_last_member_session_expires_or_unsubscribes() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        // A member whose session expires 1 s after it goes away.
        let mut brief = connect5(persistent(addr, "brief-worker", 1)).await;
        join(&mut brief).await;
        brief.disconnect().await;
        assert!(
            group_queue_messages(&broker).is_some(),
            "the stored session still holds the group"
        );
        assert!(
            wait_for(Duration::from_secs(5), || group_queue_messages(&broker)
                .is_none())
            .await,
            "the group's queue went when the session expired"
        );
        // Coming back after that: no session, and no group to resume.
        let mut late = connect5(persistent(addr, "brief-worker", 1)).await;
        assert!(!late.connack.session_present);
        assert!(group_queue_messages(&broker).is_none());

        // UNSUBSCRIBE by the last member deletes the queue at once; another member keeps
        // it alive until then.
        let mut other = connect5(options5(addr, "other-worker")).await;
        join(&mut late).await;
        join(&mut other).await;
        late.unsubscribe("$share/workers/jobs/#").await;
        assert!(
            group_queue_messages(&broker).is_some(),
            "one member is left"
        );
        other.unsubscribe("$share/workers/jobs/#").await;
        assert!(
            wait_for(Duration::from_secs(5), || group_queue_messages(&broker)
                .is_none())
            .await,
            "the group's queue went with its last member"
        );
        late.disconnect().await;
        other.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}
