//! The web UI in a real browser: Debian's chromium, headless, driven through chromium-driver
//! (WebDriver, with the fantoccini client) against a broker this test starts. It logs in
//! through the form, visits every page, checks each shows the broker's real objects, and uses
//! every form (declare, bind, publish, get, purge, delete, add user, set permissions, add a
//! policy, export and import definitions); a user without tags cannot log in. Screenshots are
//! kept under `target/tmp/web-ui-screenshots/`.
//!
//! Without chromium and chromium-driver the test prints why it was skipped (CI installs them,
//! and there a missing browser is a failure).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use warren_interop_tests::TestBroker;

mod raw_common;

/// One browser at a time: the tests in this file would otherwise start two chromiums at
/// once on a two-core machine.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long one expected change on a page may take.
const LIMIT: Duration = Duration::from_secs(30);

/// The chromium flags that work on the CI machine.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// A chromium-driver process and the chromium it starts, killed when dropped: a failing
/// step panics without ending the WebDriver session, and chromium must not outlive the test.
/// chromium-driver runs in a process group of its own, which chromium inherits; the group
/// is killed, and so is any process still naming this test's profile directory.
struct Driver {
    child: Child,
    port: u16,
    profile: warren_interop_tests::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = self.child.id() as libc::pid_t;
        // SAFETY: kill only sends a signal; the negative pid names the group this test made.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in processes_naming(self.profile.path()) {
            // SAFETY: as above, to a process started (through the driver) by this test.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// The processes whose command line names `path` (this test's chromium profile).
fn processes_naming(path: &Path) -> Vec<libc::pid_t> {
    let needle = path.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

fn find(candidates: &[&str]) -> Option<PathBuf> {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

/// Starts chromium-driver, or says why the browser tests cannot run here.
async fn start_driver() -> Result<(Driver, PathBuf), String> {
    let driver = find(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"])
        .ok_or("chromedriver not found (apt-get install chromium-driver)")?;
    let browser = find(&["/usr/bin/chromium", "/usr/lib/chromium/chromium"])
        .ok_or("chromium not found (apt-get install chromium)")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new(&driver)
        .process_group(0)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", driver.display()))?;
    let driver = Driver {
        child,
        port,
        profile: warren_interop_tests::TempDir::new("chromium-profile"),
    };
    let deadline = tokio::time::Instant::now() + LIMIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if tokio::time::Instant::now() > deadline {
            return Err("chromedriver did not start listening".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((driver, browser))
}

async fn browser(driver: &Driver, chromium: &Path) -> Client {
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!(
        "--user-data-dir={}",
        driver.profile.path().display()
    ));
    args.push("--window-size=1280,800".into());
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"binary": chromium.display().to_string(), "args": args}),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session")
}

fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// Waits until the element at `css` exists and its text contains `needle`.
async fn wait_for_text(client: &Client, css: &str, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut last = String::new();
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await {
            if let Ok(text) = element.text().await {
                if text.contains(needle) {
                    return text;
                }
                last = text;
            }
        }
        if tokio::time::Instant::now() > deadline {
            screenshot(client, "failure").await;
            let source = client.source().await.unwrap_or_default();
            panic!("'{css}' never showed '{needle}'; last text: {last}\npage: {source}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `check` holds for the broker (what a form did reached the core).
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn fill(client: &Client, css: &str, text: &str) {
    let element = client.find(Locator::Css(css)).await.expect(css);
    element.clear().await.expect("clear");
    element.send_keys(text).await.expect("type");
}

async fn click(client: &Client, css: &str) {
    client
        .wait()
        .at_most(LIMIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn select(client: &Client, css: &str, value: &str) {
    client
        .find(Locator::Css(css))
        .await
        .expect(css)
        .select_by_value(value)
        .await
        .unwrap_or_else(|e| panic!("select {value} in {css}: {e}"));
}

async fn goto(client: &Client, base: &str, hash: &str, title: &str) {
    client
        .goto(&format!("{base}/{hash}"))
        .await
        .expect("navigate");
    wait_for_text(client, "#page-title", title).await;
}

async fn log_in(client: &Client, base: &str, user: &str, password: &str) {
    client.goto(&format!("{base}/")).await.expect("open the UI");
    client
        .wait()
        .at_most(LIMIT)
        .for_element(Locator::Css("#login-username"))
        .await
        .expect("the login form");
    fill(client, "#login-username", user).await;
    // Submitted from the keyboard: Enter in the password field.
    fill(client, "#login-password", &format!("{password}\u{E007}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_logs_in_shows_every_page_and_its_forms_change_the_broker() {
    let _one_browser = BROWSER.lock().await;
    let (driver, chromium) = match start_driver().await {
        Ok(found) => found,
        Err(reason) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "browser tests must run in CI: {reason}"
            );
            eprintln!("web UI browser tests skipped: {reason}");
            return;
        }
    };
    tokio::time::timeout(Duration::from_secs(180), drive(&driver, &chromium))
        .await
        .expect("the browser test finishes in time");
}

async fn drive(driver: &Driver, chromium: &Path) {
    let broker = TestBroker::start().await;
    let base = format!("http://{}", broker.management_addr());
    let api = |method: &'static str, path: &'static str, body: &'static str| {
        let broker = &broker;
        async move {
            let response = broker.api_as_guest(method, path, Some(body)).await;
            assert!(
                response.status < 300,
                "{method} {path}: {}",
                response.text()
            );
        }
    };
    api("PUT", "/api/users/notags", r#"{"password":"pw","tags":""}"#).await;
    api("PUT", "/api/queues/%2F/orders", r#"{"durable":true}"#).await;
    // A live AMQP connection for the Connections page.
    let amqp = broker.addr();
    let connection =
        amqprs::connection::Connection::open(&amqprs::connection::OpenConnectionArguments::new(
            &amqp.ip().to_string(),
            amqp.port(),
            "guest",
            "guest",
        ))
        .await
        .expect("AMQP connects");
    let _channel = connection.open_channel(None).await.expect("channel");

    let client = browser(driver, chromium).await;
    let vhost = broker.broker().vhost("/").expect("default vhost");

    // A user without management tags is refused at the form.
    log_in(&client, &base, "notags", "pw").await;
    wait_for_text(&client, "#login-error", "no management tag").await;
    screenshot(&client, "login-refused").await;
    log_in(&client, &base, "guest", "wrong").await;
    wait_for_text(&client, "#login-error", "Login failed").await;

    // Overview: totals, node, listeners of every protocol.
    log_in(&client, &base, "guest", "guest").await;
    wait_for_text(&client, "#page-title", "Overview").await;
    let page = wait_for_text(&client, "#page", "Listeners").await;
    for expected in [
        "amqp",
        "mqtt",
        "stomp",
        "http",
        "Queued messages",
        "Message rates",
    ] {
        assert!(page.contains(expected), "overview shows {expected}: {page}");
    }
    let node = wait_for_text(&client, "#page", "warren@").await;
    assert!(node.contains("ok"), "no alarm badge: {node}");
    screenshot(&client, "overview").await;

    // Connections: the AMQP client is listed and closed from the page.
    click(&client, "nav a[data-page=connections]").await;
    wait_for_text(&client, "#page-title", "Connections").await;
    wait_for_text(&client, "#page table", "AMQP 0-9-1").await;
    screenshot(&client, "connections").await;
    click(&client, "#page table button.danger").await;
    eventually("the connection was closed from the UI", || {
        broker.broker().connections().list().is_empty()
    })
    .await;

    goto(&client, &base, "#/channels", "Channels").await;
    screenshot(&client, "channels").await;

    // Exchanges: declare one, bind it, publish through it.
    goto(&client, &base, "#/exchanges", "Exchanges").await;
    wait_for_text(&client, "#page table", "amq.topic").await;
    fill(&client, "#exchange-name", "ui.fanout").await;
    select(&client, "#exchange-type", "fanout").await;
    click(
        &client,
        "form[aria-label='Add an exchange'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#page table", "ui.fanout").await;
    assert!(
        vhost.exchange("ui.fanout").is_some(),
        "declared from the UI"
    );
    screenshot(&client, "exchanges").await;
    goto(
        &client,
        &base,
        "#/exchanges/%2F/ui.fanout",
        "Exchange ui.fanout",
    )
    .await;
    select(&client, "#binding-destination", "orders").await;
    click(
        &client,
        "form[aria-label='Add a binding'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#page table", "queue orders").await;
    fill(&client, "#publish-payload", "hello from the UI").await;
    click(
        &client,
        "form[aria-label='Publish a message'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#publish-result", "routed").await;
    eventually("the message reached orders", || {
        vhost
            .queue("orders")
            .is_some_and(|queue| queue.stats().ready == 1)
    })
    .await;
    screenshot(&client, "exchange").await;

    // Queues: filter by regex, declare, open one, get, purge, delete.
    goto(&client, &base, "#/queues", "Queues").await;
    fill(&client, "#queue-name", "ui.queue").await;
    fill(&client, "#queue-arguments", r#"{"x-max-length": 7}"#).await;
    click(
        &client,
        "form[aria-label='Add a queue'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#page table", "ui.queue").await;
    assert!(vhost.queue("ui.queue").is_some(), "declared from the UI");
    fill(&client, "#queue-filter", "^ord").await;
    click(&client, "#queue-regex").await;
    click(
        &client,
        "form[aria-label='Filter queues'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#queue-page", "1 of 2 queues").await;
    let listed = wait_for_text(&client, "#page table", "orders").await;
    assert!(
        !listed.contains("ui.queue"),
        "the regex filter hides ui.queue: {listed}"
    );
    screenshot(&client, "queues").await;
    goto(&client, &base, "#/queues/%2F/orders", "Queue orders").await;
    wait_for_text(&client, "#queue-messages", "1 total").await;
    wait_for_text(&client, "#page", "ui.fanout").await;
    select(&client, "#get-ackmode", "ack_requeue_true").await;
    click(
        &client,
        "form[aria-label='Get messages'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#get-result", "hello from the UI").await;
    screenshot(&client, "queue").await;
    // Browse: the message is shown in place and stays in the queue.
    fill(&client, "#browse-from", "1").await;
    click(
        &client,
        "form[aria-label='Browse messages'] button[type=submit]",
    )
    .await;
    let browsed = wait_for_text(&client, "#browse-result", "hello from the UI").await;
    assert!(browsed.contains("Position 1"), "{browsed}");
    assert_eq!(
        vhost.queue("orders").map(|q| q.stats().ready),
        Some(1),
        "browsing took nothing"
    );
    screenshot(&client, "queue-browse").await;
    fill(&client, "#publish-payload", "second").await;
    click(
        &client,
        "form[aria-label='Publish a message'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#publish-result", "routed").await;
    eventually("two messages in orders", || {
        vhost.queue("orders").is_some_and(|q| q.stats().ready == 2)
    })
    .await;
    click(&client, "#queue-purge").await;
    eventually("orders purged from the UI", || {
        vhost.queue("orders").is_some_and(|q| q.stats().ready == 0)
    })
    .await;
    goto(&client, &base, "#/queues/%2F/ui.queue", "Queue ui.queue").await;
    wait_for_text(&client, "#queue-arguments-shown", "x-max-length").await;
    click(&client, "#queue-delete").await;
    eventually("ui.queue deleted from the UI", || {
        vhost.queue("ui.queue").is_none()
    })
    .await;
    // The page goes back to the list once the DELETE is answered; navigating before that
    // would be overtaken by it.
    wait_for_text(&client, "#page-title", "Queues").await;

    // A stream is browsed from an offset.
    api(
        "PUT",
        "/api/queues/%2F/ui.stream",
        r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#,
    )
    .await;
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
        .expect("producer");
    for body in ["record zero", "record one", "record two"] {
        let message = rabbitmq_stream_client::types::Message::builder()
            .body(body.as_bytes().to_vec())
            .build();
        assert!(producer
            .send_with_confirm(message)
            .await
            .expect("sent")
            .confirmed());
    }
    producer.close().await.expect("producer closed");
    goto(&client, &base, "#/queues/%2F/ui.stream", "Queue ui.stream").await;
    fill(&client, "#browse-from", "1").await;
    fill(&client, "#browse-count", "1").await;
    click(
        &client,
        "form[aria-label='Browse messages'] button[type=submit]",
    )
    .await;
    let browsed = wait_for_text(&client, "#browse-result", "record one").await;
    assert!(browsed.contains("Offset 1"), "{browsed}");
    assert!(
        !browsed.contains("record two"),
        "one record asked for: {browsed}"
    );
    screenshot(&client, "stream-browse").await;

    // A quorum queue declared from the form: its type in the list, its leader and members on
    // its page, browsed by position through the queue-type interface.
    let node = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json()["node"]
        .as_str()
        .expect("the node's name")
        .to_string();
    goto(&client, &base, "#/queues", "Queues").await;
    // The list keeps the regex filter from above: filter for the new queue first.
    fill(&client, "#queue-filter", "quorum").await;
    click(
        &client,
        "form[aria-label='Filter queues'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#queue-page", "(0 of").await;
    fill(&client, "#queue-name", "ui.quorum").await;
    select(&client, "#queue-type", "quorum").await;
    fill(&client, "#queue-arguments", "").await;
    click(
        &client,
        "form[aria-label='Add a queue'] button[type=submit]",
    )
    .await;
    let listed = wait_for_text(&client, "#page table", "ui.quorum").await;
    assert!(listed.contains("quorum"), "{listed}");
    assert!(
        listed.contains(&node),
        "the Node column shows the leader: {listed}"
    );
    eventually("ui.quorum is a quorum queue", || {
        vhost
            .typed_queue("ui.quorum")
            .is_some_and(|q| q.queue_type().name() == "quorum")
    })
    .await;
    goto(&client, &base, "#/queues/%2F/ui.quorum", "Queue ui.quorum").await;
    wait_for_text(&client, "#queue-leader", &node).await;
    wait_for_text(&client, "#queue-members", &node).await;
    fill(&client, "#publish-payload", "quorum from the UI").await;
    click(
        &client,
        "form[aria-label='Publish a message'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#publish-result", "routed").await;
    eventually("the message reached ui.quorum", || {
        vhost
            .typed_queue("ui.quorum")
            .is_some_and(|q| q.info().ready == 1)
    })
    .await;
    fill(&client, "#browse-from", "1").await;
    click(
        &client,
        "form[aria-label='Browse messages'] button[type=submit]",
    )
    .await;
    let browsed = wait_for_text(&client, "#browse-result", "quorum from the UI").await;
    assert!(browsed.contains("Position 1"), "{browsed}");
    screenshot(&client, "quorum-queue").await;

    // Admin: users, virtual hosts, permissions, topic permissions, policies, definitions.
    goto(&client, &base, "#/admin/users", "Admin").await;
    wait_for_text(&client, "[role=tabpanel] table", "notags").await;
    fill(&client, "#user-name", "ui-user").await;
    fill(&client, "#user-password", "secret").await;
    fill(&client, "#user-tags", "monitoring").await;
    click(&client, "form[aria-label='Add a user'] button[type=submit]").await;
    wait_for_text(&client, "[role=tabpanel] table", "ui-user").await;
    let user = broker
        .broker()
        .user("ui-user")
        .expect("user added from the UI");
    assert_eq!(user.tags, ["monitoring"]);
    screenshot(&client, "admin-users").await;

    goto(&client, &base, "#/admin/vhosts", "Admin").await;
    fill(&client, "#vhost-name", "ui-vhost").await;
    click(
        &client,
        "form[aria-label='Add a virtual host'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "[role=tabpanel] table", "ui-vhost").await;
    assert!(broker.broker().vhost("ui-vhost").is_some());

    goto(&client, &base, "#/admin/permissions", "Admin").await;
    select(&client, "#permission-user", "ui-user").await;
    fill(&client, "#permission-write", "^ui").await;
    click(
        &client,
        "form[aria-label='Set permissions'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "[role=tabpanel] table", "^ui").await;
    let permissions = vhost
        .permissions("ui-user")
        .expect("permission set from the UI");
    assert_eq!(permissions.patterns().1, "^ui");

    goto(&client, &base, "#/admin/topic-permissions", "Admin").await;
    select(&client, "#topic-user", "ui-user").await;
    fill(&client, "#topic-write", "^orders").await;
    click(
        &client,
        "form[aria-label='Set a topic permission'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "[role=tabpanel] table", "^orders").await;

    goto(&client, &base, "#/admin/policies", "Admin").await;
    fill(&client, "#policy-name", "ui-policy").await;
    fill(&client, "#policy-pattern", "^orders$").await;
    fill(&client, "#policy-definition", r#"{"max-length": 3}"#).await;
    click(
        &client,
        "form[aria-label='Add a policy'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "[role=tabpanel] table", "ui-policy").await;
    assert!(
        vhost.policies(false).iter().any(|p| p.name == "ui-policy"),
        "policy added from the UI"
    );
    screenshot(&client, "admin-policies").await;
    goto(&client, &base, "#/admin/operator-policies", "Admin").await;
    wait_for_text(&client, "[role=tabpanel] h2", "Operator policies").await;

    goto(&client, &base, "#/admin/limits", "Admin").await;
    select(&client, "#vhost-limit-name", "max-queues").await;
    fill(&client, "#vhost-limit-value", "500").await;
    click(
        &client,
        "form[aria-label='Set a virtual host limit'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "[role=tabpanel] table", "max-queues").await;
    let limits = broker
        .api_as_guest("GET", "/api/vhost-limits/%2F", None)
        .await;
    assert_eq!(
        limits.json()[0]["value"]["max-queues"],
        500,
        "{}",
        limits.text()
    );
    select(&client, "#user-limit-user", "ui-user").await;
    select(&client, "#user-limit-name", "max-channels").await;
    fill(&client, "#user-limit-value", "8").await;
    click(
        &client,
        "form[aria-label='Set a user limit'] button[type=submit]",
    )
    .await;
    wait_for_text(
        &client,
        "[role=tabpanel] table[aria-label='User limits']",
        "ui-user",
    )
    .await;
    let limits = broker
        .api_as_guest("GET", "/api/user-limits/ui-user", None)
        .await;
    assert_eq!(
        limits.json()[0]["value"]["max-channels"],
        8,
        "{}",
        limits.text()
    );
    screenshot(&client, "admin-limits").await;

    goto(&client, &base, "#/admin/definitions", "Admin").await;
    click(&client, "#definitions-export").await;
    wait_for_text(&client, "#definitions-result", "warren-definitions.json").await;
    let definitions =
        std::env::temp_dir().join(format!("warren-ui-definitions-{}.json", std::process::id()));
    std::fs::write(
        &definitions,
        r#"{"queues":[{"name":"imported.queue","vhost":"/","durable":true,"auto_delete":false,"arguments":{}}]}"#,
    )
    .unwrap();
    client
        .find(Locator::Css("#definitions-file"))
        .await
        .expect("file input")
        .send_keys(&definitions.display().to_string())
        .await
        .expect("choose the file");
    click(
        &client,
        "form[aria-label='Import definitions'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "#definitions-result", "Definitions imported").await;
    let _ = std::fs::remove_file(&definitions);
    assert!(
        vhost.queue("imported.queue").is_some(),
        "imported from the UI"
    );
    screenshot(&client, "admin-definitions").await;

    // Log out; a monitoring user sees no Admin page.
    click(&client, "#logout").await;
    client
        .wait()
        .at_most(LIMIT)
        .for_element(Locator::Css("#login-form"))
        .await
        .expect("back at the form");
    log_in(&client, &base, "ui-user", "secret").await;
    wait_for_text(&client, "#page-title", "Overview").await;
    let navigation = wait_for_text(&client, "#nav", "Queues").await;
    assert!(!navigation.contains("Admin"), "{navigation}");

    // Phone width: the same pages stay readable.
    client
        .set_window_size(390, 844)
        .await
        .expect("phone-width window");
    goto(&client, &base, "#/queues", "Queues").await;
    screenshot(&client, "phone-queues").await;
    goto(&client, &base, "#/overview", "Overview").await;
    screenshot(&client, "phone-overview").await;

    client.close().await.expect("end the session");
    let _ = connection.close().await;
}

/// How long a page may take to load in this test. The issue's target is 1 s; the assertion
/// is looser so that a debug build on a loaded CI machine does not fail for noise, and the
/// figures are printed (docs/benchmarks.md records them).
const LOAD_LIMIT: Duration = Duration::from_secs(5);

/// Opens `url` (a full page load: the UI's files, the login from the session, the API
/// calls) and waits until `ready` (a JavaScript expression) holds; the time it took. The
/// page is left for `about:blank` first, so that the same URL twice is a new load and not
/// a same-document fragment change.
async fn load_time(client: &Client, url: &str, ready: &str) -> Duration {
    let script = format!("return Boolean({ready});");
    client.goto("about:blank").await.expect("leave the page");
    let started = std::time::Instant::now();
    client.goto(url).await.expect("navigate");
    loop {
        let done = client
            .execute(&script, Vec::new())
            .await
            .ok()
            .and_then(|value| value.as_bool())
            .unwrap_or(false);
        if done {
            return started.elapsed();
        }
        if started.elapsed() > LIMIT {
            screenshot(client, "load-failure").await;
            panic!("{url} never became ready ({ready})");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_pages_load_quickly_with_10000_queues_and_1000_connections() {
    let _one_browser = BROWSER.lock().await;
    let (driver, chromium) = match start_driver().await {
        Ok(found) => found,
        Err(reason) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "browser tests must run in CI: {reason}"
            );
            eprintln!("web UI load test skipped: {reason}");
            return;
        }
    };
    tokio::time::timeout(Duration::from_secs(180), measure_loads(&driver, &chromium))
        .await
        .expect("the load test finishes in time");
}

async fn measure_loads(driver: &Driver, chromium: &Path) {
    const QUEUES: usize = 10_000;
    const CONNECTIONS: usize = 1_000;
    let broker = TestBroker::start().await;
    let vhost = broker.broker().vhost("/").expect("default vhost");
    for i in 0..QUEUES {
        vhost
            .declare_queue(
                warren_core::vhost::Actor {
                    user: "guest",
                    connection_id: warren_core::vhost::BROKER_CONNECTION,
                },
                warren_core::vhost::QueueDeclare {
                    name: format!("load-{i:05}"),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Default::default(),
                },
            )
            .expect("declare");
    }
    // Real AMQP 0-9-1 connections (hand-driven, so that 1,000 of them cost the test little).
    let addr = broker.addr();
    let mut connections = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS / 50 {
        let batch = (0..50).map(|_| raw_common::Raw::open(addr));
        connections.extend(futures_util::future::join_all(batch).await);
    }
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(20), || {
            broker.broker().connections().list().len() == CONNECTIONS
        })
        .await,
        "{CONNECTIONS} connections open"
    );

    let client = browser(driver, chromium).await;
    let base = format!("http://{}", broker.management_addr());
    log_in(&client, &base, "guest", "guest").await;
    wait_for_text(&client, "#page-title", "Overview").await;
    let title = |name: &str| {
        format!("document.getElementById('page-title') && document.getElementById('page-title').textContent === '{name}'")
    };
    let pages = [
        (
            "overview",
            "#/overview".to_string(),
            format!("{} && document.querySelector('table[aria-label=Listeners]')", title("Overview")),
        ),
        (
            "connections",
            "#/connections".to_string(),
            format!("document.querySelectorAll('table[aria-label=Connections] tbody tr').length === 100 && document.getElementById('connection-page').textContent.includes('({CONNECTIONS} connections)')"),
        ),
        (
            "channels",
            "#/channels".to_string(),
            format!("{} && document.querySelector('table[aria-label=Channels]')", title("Channels")),
        ),
        (
            "exchanges",
            "#/exchanges".to_string(),
            "document.querySelectorAll('table[aria-label=Exchanges] tbody tr').length >= 7".to_string(),
        ),
        (
            "queues",
            "#/queues".to_string(),
            format!("document.getElementById('queue-page') && document.getElementById('queue-page').textContent.includes('of {QUEUES} queues')"),
        ),
        (
            "queue",
            "#/queues/%2F/load-04242".to_string(),
            "document.getElementById('queue-messages')".to_string(),
        ),
        (
            "admin",
            "#/admin/users".to_string(),
            "document.querySelector('table[aria-label=Users]')".to_string(),
        ),
    ];
    let mut report = Vec::new();
    for (name, hash, ready) in &pages {
        // The first load warms chromium's cache of the UI's files; the second is measured.
        load_time(&client, &format!("{base}/{hash}"), ready).await;
        let took = load_time(&client, &format!("{base}/{hash}"), ready).await;
        report.push(format!("{name} {} ms", took.as_millis()));
        assert!(
            took < LOAD_LIMIT,
            "the {name} page took {took:?} with {QUEUES} queues and {CONNECTIONS} connections"
        );
    }
    // The next page of connections is there too.
    goto(&client, &base, "#/connections", "Connections").await;
    click(
        &client,
        "nav[aria-label='Pages of connections'] button:last-child",
    )
    .await;
    wait_for_text(&client, "#connection-page", "Page 2 of 10").await;
    screenshot(&client, "load-connections").await;
    eprintln!(
        "web UI page loads with {QUEUES} queues and {CONNECTIONS} connections: {}",
        report.join(", ")
    );
    client.close().await.expect("end the session");
    drop(connections);
}
