//! Log in through the form, visit every page and use every form: each change is checked
//! in the core (declare, bind, publish, get, browse every queue type, purge, delete, add a
//! user, set permissions and topic permissions, add a policy, set limits, export and import
//! definitions); a user without tags cannot log in; a monitoring user sees no Admin page.

use std::path::Path;
use std::time::Duration;

use fantoccini::Locator;
use warren_interop_tests::TestBroker;

use crate::browser::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_logs_in_shows_every_page_and_its_forms_change_the_broker() {
    let _one_browser = BROWSER.lock().await;
    let Some((driver, chromium)) = driver_or_skip("web UI browser test").await else {
        return;
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
