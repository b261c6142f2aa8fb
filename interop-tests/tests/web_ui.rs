//! The web UI in a real browser: Debian's chromium, headless, driven through chromium-driver
//! (WebDriver, with the fantoccini client) against a broker this test starts. It logs in
//! through the form, visits every page, checks each shows the broker's real objects, and uses
//! every form (declare, bind, publish, get, purge, delete, add user, set permissions, add a
//! policy, export and import definitions); a user without tags cannot log in. Screenshots are
//! kept under `target/tmp/web-ui-screenshots/`.
//!
//! Without chromium and chromium-driver the test prints why it was skipped (CI installs them,
//! and there a missing browser is a failure).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use warren_interop_tests::TestBroker;

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

/// A chromium-driver process, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
    profile: warren_interop_tests::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
