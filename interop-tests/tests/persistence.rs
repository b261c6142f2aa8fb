//! Persistence against the real `warren` binary: SIGKILL at seeded points while several
//! connections publish persistent messages with confirms and a consumer takes some of them;
//! durable versus transient topology and messages across a clean restart; a truncated segment
//! tail; a backlog drained after a restart with its segments deleted afterwards. And, in
//! process, users, vhosts, permissions and policies across a restart.
//!
//! Every test uses its own temporary `data_dir` and port 0, and is bounded in message count
//! and time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind, ExchangeKind};
use warren_core::access::Permissions;
use warren_core::policy::Policy;
use warren_core::value::{Table, Value};
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{wait_for, TempDir, TestBroker};

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(120);

async fn start(dir: &Path, settings: &'static [&'static str]) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, settings))
        .await
        .expect("start task")
}

async fn connect(url: &str) -> (Connection, Channel) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

async fn declare_durable(channel: &Channel, name: &str) -> u32 {
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("queue.declare")
        .message_count()
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// Publishes persistent `bodies` to `queue` with confirms and a window of 100; panics on a
/// nack.
async fn publish_confirmed(channel: &Channel, queue: &str, bodies: impl Iterator<Item = Vec<u8>>) {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let mut window = VecDeque::new();
    for body in bodies {
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &body,
                persistent(),
            )
            .await
            .expect("publish");
        window.push_back(confirm);
        if window.len() >= 100 {
            let confirmation = window.pop_front().expect("one").await.expect("confirm");
            assert!(confirmation.is_ack(), "nacked");
        }
    }
    for confirm in window {
        assert!(confirm.await.expect("confirm").is_ack(), "nacked");
    }
}

/// Takes every message of `queue` with basic.get (auto-ack): (body, redelivered).
async fn drain(channel: &Channel, queue: &str) -> Vec<(String, bool)> {
    let mut taken = Vec::new();
    while let Some(message) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        taken.push((
            String::from_utf8_lossy(&message.delivery.data).into_owned(),
            message.delivery.redelivered,
        ));
    }
    taken
}

/// A small deterministic generator, so every kill point is reproducible from its seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// What the clients saw before the kill. `clock` orders events across tasks.
#[derive(Default)]
struct Observed {
    clock: AtomicU64,
    /// Bodies whose publish was confirmed.
    confirmed: Mutex<HashSet<String>>,
    /// The latest clock value at which a publish was sent that was later confirmed: every
    /// store record submitted before it was on disk at the kill.
    last_confirmed_sent: AtomicU64,
    /// Bodies the consumer received: (clock when received, acked).
    delivered: Mutex<HashMap<String, (u64, bool)>>,
    stop: AtomicBool,
}

async fn publisher(url: String, id: usize, observed: Arc<Observed>) {
    let Ok(connection) = Connection::connect(&url, ConnectionProperties::default()).await else {
        return;
    };
    let Ok(channel) = connection.create_channel().await else {
        return;
    };
    if channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .is_err()
    {
        return;
    }
    let mut window = VecDeque::new();
    for i in 0..20_000u32 {
        if observed.stop.load(Ordering::Relaxed) {
            break;
        }
        let body = format!("p{id}-{i:06}");
        let sent_at = observed.clock.fetch_add(1, Ordering::SeqCst);
        let Ok(confirm) = channel
            .basic_publish(
                "".into(),
                "crash".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                persistent(),
            )
            .await
        else {
            break;
        };
        window.push_back((body, sent_at, confirm));
        if window.len() >= 64 {
            let (body, sent_at, confirm) = window.pop_front().expect("one");
            match confirm.await {
                Ok(c) if c.is_ack() => note_confirmed(&observed, body, sent_at),
                _ => return,
            }
        }
    }
    for (body, sent_at, confirm) in window {
        match confirm.await {
            Ok(c) if c.is_ack() => note_confirmed(&observed, body, sent_at),
            _ => return,
        }
    }
}

fn note_confirmed(observed: &Observed, body: String, sent_at: u64) {
    observed.confirmed.lock().expect("lock").insert(body);
    observed
        .last_confirmed_sent
        .fetch_max(sent_at, Ordering::SeqCst);
}

async fn consumer(url: String, seed: u64, observed: Arc<Observed>) {
    let mut rng = SplitMix(seed ^ 0xc0ff_ee00);
    let Ok(connection) = Connection::connect(&url, ConnectionProperties::default()).await else {
        return;
    };
    let Ok(channel) = connection.create_channel().await else {
        return;
    };
    while !observed.stop.load(Ordering::Relaxed) {
        let Ok(got) = channel
            .basic_get("crash".into(), BasicGetOptions { no_ack: false })
            .await
        else {
            return;
        };
        let Some(message) = got else {
            tokio::task::yield_now().await;
            continue;
        };
        let body = String::from_utf8_lossy(&message.delivery.data).into_owned();
        let at = observed.clock.fetch_add(1, Ordering::SeqCst);
        let ack = rng.below(2) == 0;
        observed
            .delivered
            .lock()
            .expect("lock")
            .insert(body, (at, ack));
        if ack
            && channel
                .basic_ack(message.delivery.delivery_tag, BasicAckOptions::default())
                .await
                .is_err()
        {
            return;
        }
        // Take only every few messages, so a backlog remains.
        for _ in 0..rng.below(4) {
            tokio::task::yield_now().await;
        }
    }
}

async fn crash_and_recover(seed: u64, settings: &'static [&'static str]) {
    let mut rng = SplitMix(seed);
    let dir = TempDir::new("crash");
    let warren = start(dir.path(), settings).await;
    let url = warren.url();
    let (setup, channel) = connect(&url).await;
    declare_durable(&channel, "crash").await;
    let observed = Arc::new(Observed::default());
    let publishers = 2 + rng.below(3) as usize;
    let kill_after = 200 + rng.below(1500) as usize;
    let mut tasks = Vec::new();
    for id in 0..publishers {
        tasks.push(tokio::spawn(publisher(
            url.clone(),
            id,
            Arc::clone(&observed),
        )));
    }
    tasks.push(tokio::spawn(consumer(
        url.clone(),
        seed,
        Arc::clone(&observed),
    )));
    let reached = wait_for(Duration::from_secs(60), || {
        observed.confirmed.lock().expect("lock").len() >= kill_after
    })
    .await;
    assert!(reached, "seed {seed}: {kill_after} confirms never arrived");
    tokio::task::spawn_blocking(move || warren.kill())
        .await
        .expect("kill");
    observed.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
    drop(setup);

    let warren = start(dir.path(), settings).await;
    let (_connection, channel) = connect(&warren.url()).await;
    let recovered = drain(&channel, "crash").await;
    let confirmed = observed.confirmed.lock().expect("lock").clone();
    let delivered = observed.delivered.lock().expect("lock").clone();
    let horizon = observed.last_confirmed_sent.load(Ordering::SeqCst);
    let mut seen = HashSet::new();
    let mut last_index: HashMap<String, String> = HashMap::new();
    for (body, redelivered) in &recovered {
        assert!(
            seen.insert(body.clone()),
            "seed {seed}: {body} came back twice"
        );
        let (publisher, index) = body.split_once('-').expect("body format");
        if let Some(previous) = last_index.insert(publisher.to_string(), index.to_string()) {
            assert!(
                previous.as_str() < index,
                "seed {seed}: {body} came back out of order"
            );
        }
        match delivered.get(body) {
            Some((at, acked)) => {
                // A delivery the client saw before a later publish was confirmed was on disk
                // (its record precedes that publish's); later ones may not have been.
                if *at < horizon {
                    assert!(
                        redelivered,
                        "seed {seed}: {body} was delivered before the kill (at {at}, acked {acked}, horizon {horizon}) but is not flagged redelivered"
                    );
                }
            }
            None => assert!(!redelivered, "seed {seed}: {body} was never delivered"),
        }
    }
    let lost: Vec<&String> = confirmed
        .iter()
        .filter(|body| {
            !seen.contains(*body) && !delivered.get(*body).is_some_and(|(_, acked)| *acked)
        })
        .collect();
    assert!(
        lost.is_empty(),
        "seed {seed}: {} confirmed messages lost, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert!(confirmed.len() >= kill_after);
    warren.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_seeded_points_loses_no_confirmed_message() {
    tokio::time::timeout(TEST_LIMIT * 2, async {
        for seed in [11, 42] {
            crash_and_recover(seed, &[]).await;
        }
        // Most of the backlog paged out (bodies on disk only) while publishing and after the
        // restart.
        crash_and_recover(2026, &["queue_max_in_memory_messages=50"]).await;
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_topology_and_persistent_messages_survive_a_clean_restart_and_transient_ones_do_not(
) {
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("topology");
        let warren = start(dir.path(), &[]).await;
        let (connection, channel) = connect(&warren.url()).await;
        for (name, durable) in [("d.x", true), ("t.x", false)] {
            channel
                .exchange_declare(
                    name.into(),
                    ExchangeKind::Direct,
                    ExchangeDeclareOptions {
                        durable,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("exchange.declare");
        }
        for (name, durable, exclusive) in [
            ("d.q", true, false),
            ("t.q", false, false),
            ("x.q", true, true),
        ] {
            channel
                .queue_declare(
                    name.into(),
                    QueueDeclareOptions {
                        durable,
                        exclusive,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("queue.declare");
        }
        for (queue, exchange) in [("d.q", "d.x"), ("t.q", "d.x"), ("d.q", "t.x")] {
            channel
                .queue_bind(
                    queue.into(),
                    exchange.into(),
                    "k".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("queue.bind");
        }
        channel
            .exchange_bind(
                "d.x".into(),
                "t.x".into(),
                "e".into(),
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("exchange.bind");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        for (queue, body, properties) in [
            ("d.q", "persistent", persistent()),
            ("d.q", "transient", BasicProperties::default()),
            ("t.q", "in a transient queue", persistent()),
        ] {
            let confirm = channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    properties,
                )
                .await
                .expect("publish");
            assert!(confirm.await.expect("confirm").is_ack());
        }
        drop(connection);
        assert!(warren.terminate().success());

        let warren = start(dir.path(), &[]).await;
        let connection = Connection::connect(&warren.url(), ConnectionProperties::default())
            .await
            .expect("connects");
        let passive = |name: &'static str, exchange: bool| {
            let connection = &connection;
            async move {
                let channel = connection.create_channel().await.expect("channel");
                if exchange {
                    channel
                        .exchange_declare(
                            name.into(),
                            ExchangeKind::Direct,
                            ExchangeDeclareOptions {
                                passive: true,
                                ..ExchangeDeclareOptions::default()
                            },
                            FieldTable::default(),
                        )
                        .await
                        .map(|_| 0)
                } else {
                    channel
                        .queue_declare(
                            name.into(),
                            QueueDeclareOptions {
                                passive: true,
                                ..QueueDeclareOptions::default()
                            },
                            FieldTable::default(),
                        )
                        .await
                        .map(|q| q.message_count())
                }
            }
        };
        assert_eq!(passive("d.x", true).await.expect("durable exchange"), 0);
        assert_eq!(passive("d.q", false).await.expect("durable queue"), 1);
        for (name, exchange) in [("t.x", true), ("t.q", false), ("x.q", false)] {
            let error = passive(name, exchange)
                .await
                .expect_err("gone after restart");
            match error.kind() {
                ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 404, "{name}"),
                other => panic!("{name}: expected 404, got {other:?}"),
            }
        }
        let channel = connection.create_channel().await.expect("channel");
        // The binding d.x -> d.q survived: a publish through it lands next to the survivor.
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        let confirm = channel
            .basic_publish(
                "d.x".into(),
                "k".into(),
                BasicPublishOptions::default(),
                b"through the binding",
                persistent(),
            )
            .await
            .expect("publish");
        assert!(confirm.await.expect("confirm").is_ack());
        assert_eq!(
            drain(&channel, "d.q").await,
            vec![
                ("persistent".to_string(), false),
                ("through the binding".to_string(), false)
            ]
        );
        warren.terminate();
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_segment_tail_loses_only_the_cut_record() {
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("truncated");
        let warren = start(dir.path(), &[]).await;
        let (connection, channel) = connect(&warren.url()).await;
        declare_durable(&channel, "cut").await;
        publish_confirmed(
            &channel,
            "cut",
            (0..50).map(|i| format!("m{i:02}").into_bytes()),
        )
        .await;
        drop(connection);
        tokio::task::spawn_blocking(move || warren.kill())
            .await
            .expect("kill");
        let store = dir.path().join("msg_store");
        let mut segments: Vec<_> = std::fs::read_dir(&store)
            .expect("store dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
            .collect();
        segments.sort();
        let newest = segments.last().expect("a segment with data");
        let length = std::fs::metadata(newest).expect("metadata").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(newest)
            .expect("open");
        file.set_len(length - 7).expect("truncate");
        drop(file);

        let warren = start(dir.path(), &[]).await;
        let (connection, channel) = connect(&warren.url()).await;
        assert_eq!(declare_durable(&channel, "cut").await, 49);
        assert!(
            warren.log().iter().any(|l| l.contains("incomplete record")),
            "the cut is logged"
        );
        publish_confirmed(&channel, "cut", std::iter::once(b"after".to_vec())).await;
        drop(connection);
        assert!(warren.terminate().success());

        let warren = start(dir.path(), &[]).await;
        let (_connection, channel) = connect(&warren.url()).await;
        let bodies: Vec<String> = drain(&channel, "cut")
            .await
            .into_iter()
            .map(|(b, _)| b)
            .collect();
        let mut expected: Vec<String> = (0..49).map(|i| format!("m{i:02}")).collect();
        expected.push("after".into());
        assert_eq!(bodies, expected);
        warren.terminate();
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_is_drained_after_a_restart_and_its_segments_are_deleted() {
    tokio::time::timeout(TEST_LIMIT, async {
        const COUNT: usize = 5000;
        // Bodies past the first 1000 of the queue stay on disk and are read back on delivery.
        const SETTINGS: &[&str] = &[
            "msg_store_file_size_limit=262144",
            "queue_max_in_memory_messages=1000",
        ];
        let dir = TempDir::new("backlog");
        let warren = start(dir.path(), SETTINGS).await;
        let (connection, channel) = connect(&warren.url()).await;
        declare_durable(&channel, "backlog").await;
        let body = |i: usize| {
            let mut body = format!("{i:06}").into_bytes();
            body.resize(1024, b'.');
            body
        };
        publish_confirmed(&channel, "backlog", (0..COUNT).map(body)).await;
        drop(connection);
        tokio::task::spawn_blocking(move || warren.kill())
            .await
            .expect("kill");
        let store = dir.path().join("msg_store");
        let segments = || std::fs::read_dir(&store).map_or(0, |d| d.count());
        assert!(segments() >= 10, "5 MB in 256 KB segments: {}", segments());

        let warren = start(dir.path(), SETTINGS).await;
        let (_connection, channel) = connect(&warren.url()).await;
        assert_eq!(declare_durable(&channel, "backlog").await as usize, COUNT);
        let drained = drain(&channel, "backlog").await;
        assert_eq!(drained.len(), COUNT);
        for (i, (got, redelivered)) in drained.iter().enumerate() {
            assert_eq!(got.as_bytes(), body(i).as_slice(), "message {i} in order");
            assert!(!redelivered);
        }
        let freed = wait_for(Duration::from_secs(20), || segments() <= 2).await;
        assert!(freed, "acked segments deleted; {} left", segments());
        warren.terminate();
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_vhosts_permissions_and_policies_survive_a_restart() {
    let dir = TempDir::new("definitions");
    let data_dir = dir.path().display().to_string();
    let settings = [("data_dir", data_dir.as_str())];
    let broker = TestBroker::start_with(&settings).await;
    let core = broker.broker();
    core.add_user("alice", "secret", vec!["management".into()]);
    core.add_vhost("staging");
    core.set_permissions(
        "alice",
        "staging",
        Permissions::new("^a", ".*", ".*").expect("valid"),
    )
    .expect("permissions");
    let mut definition = Table::new();
    definition.insert("message-ttl", Value::I64(5000));
    core.vhost("staging").expect("vhost").set_policy(
        Policy::new("ttl", "^t\\.", "queues", 3, definition, false).expect("valid policy"),
        false,
    );
    broker.shutdown().await;

    let broker = TestBroker::start_with(&settings).await;
    let core = broker.broker();
    assert!(core.authenticate("alice", "secret", true).is_ok());
    assert_eq!(
        core.user("alice").expect("alice").tags,
        vec!["management".to_string()]
    );
    let staging = core.vhost("staging").expect("vhost restored");
    let granted = staging.permissions("alice").expect("permissions restored");
    assert_eq!(granted.patterns(), ("^a", ".*", ".*"));
    let policies = staging.policies(false);
    assert_eq!(policies.len(), 1);
    assert_eq!(
        (
            policies[0].name.as_str(),
            policies[0].pattern.as_str(),
            policies[0].priority
        ),
        ("ttl", "^t\\.", 3)
    );
    assert_eq!(
        policies[0]
            .definition
            .get("message-ttl")
            .and_then(Value::as_i64),
        Some(5000)
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishers_paused_by_a_writer_that_falls_behind_resume_and_lose_nothing() {
    // One unwritten byte is "behind": every persistent publish raises the flow signal, so
    // publishing connections are paused and resumed all the time.
    let broker = TestBroker::start_with(&[("msg_store_max_unwritten_bytes", "1")]).await;
    tokio::time::timeout(TEST_LIMIT, async {
        let (_setup, channel) = connect(&broker.url()).await;
        declare_durable(&channel, "flow").await;
        let mut flow = broker
            .broker()
            .message_store()
            .expect("a test broker has a store")
            .subscribe_flow();
        let raised = tokio::spawn(async move {
            while flow.changed().await.is_ok() {
                if *flow.borrow_and_update() {
                    return true;
                }
            }
            false
        });
        let mut publishers = Vec::new();
        for p in 0..2 {
            let url = broker.url();
            publishers.push(tokio::spawn(async move {
                let (_connection, channel) = connect(&url).await;
                publish_confirmed(
                    &channel,
                    "flow",
                    (0..1000).map(move |i| format!("{p}-{i:04}").into_bytes()),
                )
                .await;
            }));
        }
        for publisher in publishers {
            publisher.await.expect("publisher finished");
        }
        assert!(raised.await.expect("watcher"), "the flow signal was raised");
        let bodies = drain(&channel, "flow").await;
        assert_eq!(bodies.len(), 2000);
        for p in 0..2 {
            let mine: Vec<String> = bodies
                .iter()
                .map(|(b, _)| b.clone())
                .filter(|b| b.starts_with(&format!("{p}-")))
                .collect();
            let expected: Vec<String> = (0..1000).map(|i| format!("{p}-{i:04}")).collect();
            assert_eq!(mine, expected, "publisher {p}: every message, in order");
        }
    })
    .await
    .expect("bounded in time");
    broker.shutdown().await;
}
