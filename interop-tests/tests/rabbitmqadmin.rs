//! RabbitMQ's own CLI, `rabbitmqadmin` (the Python script Debian's `rabbitmq-server` package
//! ships as /usr/bin/rabbitmqadmin), against Warren's management API: declare, list, publish,
//! get, vhost limits, export and import, each answer checked against the core; and a quorum
//! queue declared (`queue_type=quorum`), listed, published into, got from, purged and deleted.
//!
//! The script is found at `$RABBITMQADMIN`, on the PATH, or in /usr/local/bin or /usr/bin.
//! `.ci/run` extracts it from the Debian package without installing the server (no Erlang,
//! no service). Without it (or python3) a developer's run prints why the test was skipped;
//! under CI a missing script is a failure.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value as Json;
use warren_interop_tests::TestBroker;

fn find_rabbitmqadmin() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("RABBITMQADMIN") {
        return Ok(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("rabbitmqadmin"))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            "rabbitmqadmin not found (set RABBITMQADMIN, or extract usr/bin/rabbitmqadmin \
             from Debian's rabbitmq-server package as .ci/run does)"
                .to_string()
        })
}

/// Says why the test did not run, on the process's stderr: libtest hides what a passing
/// test prints with eprintln!, and a developer's plain `cargo test` should show this.
fn skipped(reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "rabbitmqadmin test skipped: {reason}");
}

/// Runs the script as guest against `broker`; `Ok(stdout)` on exit status 0, else the
/// script's stderr and stdout.
struct Admin {
    script: PathBuf,
    host: String,
    port: String,
}

impl Admin {
    async fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut command = tokio::process::Command::new("python3");
        command
            .arg(&self.script)
            .args([
                "-H", &self.host, "-P", &self.port, "-u", "guest", "-p", "guest",
            ])
            .args(args)
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .map_err(|_| format!("rabbitmqadmin {args:?} took over 30 s"))?
            .map_err(|e| format!("cannot run python3 {}: {e}", self.script.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "rabbitmqadmin {args:?} failed ({}): {}{stdout}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        self.run(args)
            .await
            .unwrap_or_else(|failure| panic!("{failure}"))
    }

    async fn json(&self, args: &[&str]) -> Json {
        let mut all = vec!["-f", "raw_json"];
        all.extend_from_slice(args);
        let out = self.ok(&all).await;
        serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("rabbitmqadmin {args:?} printed no JSON ({e}): {out}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_declares_lists_publishes_gets_exports_and_imports() {
    let script = match find_rabbitmqadmin() {
        Ok(script) => script,
        Err(reason) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "the rabbitmqadmin test must run in CI: {reason}"
            );
            skipped(&reason);
            return;
        }
    };
    let broker = TestBroker::start().await;
    let addr = broker.management_addr();
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let admin = Admin {
        script,
        host: host.to_string(),
        port: port.to_string(),
    };
    let vhost = broker.broker().vhost("/").expect("default vhost");

    // Declare: rabbitmqadmin sends booleans as text ("false"), which must be honoured.
    admin
        .ok(&["declare", "queue", "name=admin.q", "durable=false"])
        .await;
    let queue = vhost.queue("admin.q").expect("declared by rabbitmqadmin");
    assert!(!queue.config().durable, "durable=false honoured");
    admin
        .ok(&["declare", "exchange", "name=admin.x", "type=fanout"])
        .await;
    assert_eq!(
        vhost
            .exchange("admin.x")
            .expect("exchange")
            .config()
            .type_name(),
        "fanout"
    );
    admin
        .ok(&[
            "declare",
            "binding",
            "source=admin.x",
            "destination=admin.q",
            "routing_key=any",
        ])
        .await;
    admin
        .ok(&[
            "declare",
            "queue",
            "name=admin.args",
            r#"arguments={"x-max-length": 5}"#,
        ])
        .await;
    assert!(vhost
        .queue("admin.args")
        .expect("declared")
        .config()
        .arguments
        .get("x-max-length")
        .is_some());

    // List, in its table formats and as JSON.
    let queues = admin
        .ok(&["-f", "tsv", "list", "queues", "name", "messages"])
        .await;
    let mut lines = queues.lines();
    assert_eq!(lines.next(), Some("name\tmessages"), "{queues}");
    let rows: Vec<&str> = lines.collect();
    assert!(rows.iter().any(|r| r.starts_with("admin.q\t")), "{queues}");
    // With columns, rabbitmqadmin asks the API for only those fields (`?columns=`).
    let narrow = admin.json(&["list", "queues", "name", "messages"]).await;
    for queue in narrow.as_array().expect("a list") {
        let keys: Vec<&String> = queue.as_object().expect("an object").keys().collect();
        assert!(
            keys.iter().all(|k| *k == "name" || *k == "messages")
                && keys.contains(&&"name".to_string()),
            "only the columns asked for: {queue}"
        );
    }
    let exchanges = admin.json(&["list", "exchanges"]).await;
    let names: Vec<&str> = exchanges
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    for expected in ["admin.x", "amq.direct", "amq.fanout", "amq.topic"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let bindings = admin
        .ok(&["-f", "tsv", "list", "bindings", "source", "destination"])
        .await;
    assert!(bindings.contains("admin.x\tadmin.q"), "{bindings}");
    let overview = admin.ok(&["-f", "kvp", "show", "overview"]).await;
    assert!(overview.contains("rabbitmq_version="), "{overview}");

    // Publish through the exchange and the default exchange, then get.
    let published = admin
        .ok(&[
            "publish",
            "exchange=admin.x",
            "routing_key=any",
            "payload=through fanout",
        ])
        .await;
    assert!(published.contains("Message published"), "{published}");
    assert!(!published.contains("NOT routed"), "{published}");
    admin
        .ok(&[
            "publish",
            "routing_key=admin.q",
            "payload=direct",
            r#"properties={"message_id":"m-2","delivery_mode":2}"#,
        ])
        .await;
    let unrouted = admin
        .ok(&["publish", "routing_key=nowhere", "payload=lost"])
        .await;
    assert!(unrouted.contains("NOT routed"), "{unrouted}");
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || queue.stats().ready == 2).await
    );
    // Peek with requeue first: nothing is taken.
    let peeked = admin
        .json(&[
            "get",
            "queue=admin.q",
            "ackmode=ack_requeue_true",
            "count=2",
        ])
        .await;
    let peeked = peeked.as_array().expect("a list");
    assert_eq!(peeked.len(), 2, "{peeked:?}");
    assert_eq!(peeked[0]["payload"], "through fanout");
    assert_eq!(peeked[1]["properties"]["message_id"], "m-2");
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || queue.stats().ready == 2).await
    );
    let taken = admin
        .json(&["get", "queue=admin.q", "ackmode=ack_requeue_false"])
        .await;
    assert_eq!(taken[0]["payload"], "through fanout");
    assert_eq!(taken[0]["redelivered"], true);
    assert_eq!(taken[0]["message_count"], 1);
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || queue.stats().ready == 1).await
    );

    // A vhost limit through its own verbs.
    admin
        .ok(&[
            "declare",
            "vhost_limit",
            "vhost=/",
            "name=max-queues",
            "value=50",
        ])
        .await;
    let limits = admin.json(&["list", "vhost_limits"]).await;
    assert_eq!(limits[0]["vhost"], "/", "{limits}");
    assert_eq!(limits[0]["value"]["max-queues"], 50, "{limits}");

    // A refusal comes back as RabbitMQ's reason, which rabbitmqadmin prints.
    let refused = admin
        .run(&["declare", "queue", "name=admin.bad", "durable=maybe"])
        .await
        .expect_err("durable=maybe is refused");
    assert!(refused.contains("durable: invalid value"), "{refused}");

    // Export, change, import.
    let dir = warren_interop_tests::TempDir::new("rabbitmqadmin");
    let file = dir.path().join("definitions.json");
    let file_arg = file.display().to_string();
    admin.ok(&["export", &file_arg]).await;
    let exported: Json =
        serde_json::from_slice(&std::fs::read(&file).expect("exported file")).expect("JSON");
    assert!(exported["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .any(|q| q["name"] == "admin.args"));
    admin.ok(&["delete", "queue", "name=admin.args"]).await;
    admin.ok(&["delete", "exchange", "name=admin.x"]).await;
    assert!(vhost.queue("admin.args").is_none() && vhost.exchange("admin.x").is_none());
    admin.ok(&["import", &file_arg]).await;
    assert!(vhost.queue("admin.args").is_some(), "re-imported queue");
    assert!(vhost.exchange("admin.x").is_some(), "re-imported exchange");
    admin.ok(&["purge", "queue", "name=admin.q"]).await;
    assert_eq!(queue.stats().ready, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_declares_lists_publishes_gets_purges_and_deletes_a_quorum_queue() {
    let script = match find_rabbitmqadmin() {
        Ok(script) => script,
        Err(reason) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "the rabbitmqadmin test must run in CI: {reason}"
            );
            skipped(&reason);
            return;
        }
    };
    let broker = TestBroker::start().await;
    let addr = broker.management_addr();
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let admin = Admin {
        script,
        host: host.to_string(),
        port: port.to_string(),
    };
    let vhost = broker.broker().vhost("/").expect("default vhost");

    // rabbitmqadmin's `queue_type=quorum` becomes the `x-queue-type` argument.
    admin
        .ok(&[
            "declare",
            "queue",
            "name=admin.qq",
            "durable=true",
            "queue_type=quorum",
        ])
        .await;
    let queue = vhost
        .typed_queue("admin.qq")
        .expect("a quorum queue declared by rabbitmqadmin");
    assert_eq!(queue.queue_type().name(), "quorum");
    for payload in ["first", "second"] {
        let published = admin
            .ok(&[
                "publish",
                "routing_key=admin.qq",
                &format!("payload={payload}"),
            ])
            .await;
        assert!(!published.contains("NOT routed"), "{published}");
    }
    let listed = admin
        .ok(&["-f", "tsv", "list", "queues", "name", "type", "messages"])
        .await;
    assert!(
        listed.lines().any(|row| row == "admin.qq\tquorum\t2"),
        "{listed}"
    );
    let got = admin
        .json(&["get", "queue=admin.qq", "ackmode=ack_requeue_false"])
        .await;
    assert_eq!(got[0]["payload"], "first", "{got}");
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || queue.info().ready == 1).await,
        "the get took one: {:?}",
        queue.info()
    );
    admin.ok(&["purge", "queue", "name=admin.qq"]).await;
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || queue.info().ready == 0).await,
        "purged: {:?}",
        queue.info()
    );
    admin.ok(&["delete", "queue", "name=admin.qq"]).await;
    assert!(vhost.typed_queue("admin.qq").is_none(), "deleted");
    broker.shutdown().await;
}
