//! Use without a mouse and on small screens: every visible control on every page has a
//! label (or an accessible name), the UI is used from the keyboard alone (log in, move between
//! pages, declare a queue, sort and page the queue list), and no page is wider than the
//! window at 1280x800 or at phone width (390x844): wide tables scroll inside their own box.

use std::path::Path;
use std::time::Duration;

use fantoccini::Client;
use warren_interop_tests::TestBroker;

use crate::browser::*;

const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_is_labelled_keyboard_usable_and_fits_desktop_and_phone_widths() {
    let _one_browser = BROWSER.lock().await;
    let Some((driver, chromium)) = driver_or_skip("web UI layout test").await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(240), lay_out(&driver, &chromium))
        .await
        .expect("the browser test finishes in time");
}

/// Presses Tab until the element named `target` (see [`focused`]) has the focus; panics
/// after 100 presses.
async fn tab_to(client: &Client, target: &str) {
    let mut seen = Vec::new();
    for _ in 0..100 {
        press(client, TAB).await;
        let now = focused(client).await;
        if now == target {
            return;
        }
        seen.push(now);
    }
    panic!("Tab never reached {target}; the focus went through {seen:?}");
}

/// The queue names in the Queues table, in order.
async fn listed_queues(client: &Client) -> Vec<String> {
    run_script(
        client,
        "return Array.from(document.querySelectorAll('table[aria-label=Queues] tbody tr'))\
         .map((row) => row.cells[1].textContent);",
    )
    .await
    .as_array()
    .expect("rows")
    .iter()
    .filter_map(|cell| cell.as_str().map(str::to_string))
    .collect()
}

/// Every page of the UI, with the title it shows.
const PAGES: &[(&str, &str)] = &[
    ("#/overview", "Overview"),
    ("#/connections", "Connections"),
    ("#/channels", "Channels"),
    ("#/exchanges", "Exchanges"),
    ("#/exchanges/%2F/amq.direct", "Exchange amq.direct"),
    ("#/queues", "Queues"),
    ("#/queues/%2F/kb-0000", "Queue kb-0000"),
    ("#/queues/%2F/kb.stream", "Queue kb.stream"),
    ("#/admin/users", "Admin"),
    ("#/admin/vhosts", "Admin"),
    ("#/admin/permissions", "Admin"),
    ("#/admin/topic-permissions", "Admin"),
    ("#/admin/policies", "Admin"),
    ("#/admin/operator-policies", "Admin"),
    ("#/admin/limits", "Admin"),
    ("#/admin/definitions", "Admin"),
];

async fn lay_out(driver: &Driver, chromium: &Path) {
    let broker = TestBroker::start().await;
    // 60 queues: more than one page of 50.
    for i in 0..60 {
        let created = broker
            .api_as_guest(
                "PUT",
                &format!("/api/queues/%2F/kb-{i:04}"),
                Some(r#"{"durable":false}"#),
            )
            .await;
        assert_eq!(created.status, 201);
    }
    let stream = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/kb.stream",
            Some(r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#),
        )
        .await;
    assert_eq!(stream.status, 201);
    // Rows in every table: a connection with a channel, a policy, limits, permissions.
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
    for (path, body) in [
        (
            "/api/policies/%2F/kb-policy",
            r#"{"pattern":"^kb","definition":{"max-length":100}}"#,
        ),
        ("/api/vhost-limits/%2F/max-queues", r#"{"value":1000}"#),
        (
            "/api/topic-permissions/%2F/guest",
            r#"{"exchange":"amq.topic","write":".*","read":".*"}"#,
        ),
    ] {
        let answer = broker.api_as_guest("PUT", path, Some(body)).await;
        assert!(answer.status < 300, "{path}: {}", answer.text());
    }

    let client = browser(driver, chromium).await;
    let base = format!("http://{}", broker.management_addr());

    // The keyboard alone: the form has the focus when the page opens; type, Tab, type, Enter.
    client.goto(&format!("{base}/")).await.expect("open the UI");
    wait_for_script(
        &client,
        "the username field has the focus",
        "document.activeElement && document.activeElement.id === 'login-username'",
        LIMIT,
    )
    .await;
    press(&client, "guest").await;
    press(&client, TAB).await;
    assert_eq!(focused(&client).await, "login-password");
    press(&client, &format!("guest{ENTER}")).await;
    wait_for_text(&client, "#page-title", "Overview").await;

    // To the Queues page through the navigation links.
    tab_to(&client, "Queues").await;
    press(&client, ENTER).await;
    wait_for_text(&client, "#page-title", "Queues").await;
    wait_for_text(&client, "#queue-page", "(61 of 61 queues)").await;
    assert_eq!(listed_queues(&client).await.len(), 50, "one page of 50");

    // Sort by name the other way, from the keyboard: kb.stream sorts after kb-0059.
    tab_to(&client, "Sort by Name").await;
    press(&client, ENTER).await;
    wait_for_script(
        &client,
        "the list sorted by name, descending",
        "document.querySelector('table[aria-label=Queues] tbody tr').cells[1].textContent === 'kb.stream'",
        LIMIT,
    )
    .await;
    let descending = listed_queues(&client).await;
    assert_eq!(descending[1], "kb-0059", "{descending:?}");
    // Page 2 holds the rest, in the same order.
    tab_to(&client, "Next page").await;
    press(&client, ENTER).await;
    wait_for_text(&client, "#queue-page", "Page 2 of 2").await;
    let second = listed_queues(&client).await;
    assert_eq!(second.len(), 11, "{second:?}");
    assert_eq!(second.last().map(String::as_str), Some("kb-0000"));
    // Sorted by another column: messages, then back to name ascending.
    tab_to(&client, "Sort by Total").await;
    press(&client, ENTER).await;
    wait_for_text(&client, "table[aria-label=Queues] thead", "Total ▲").await;

    // Declare a queue from the keyboard: Tab to the name, type it, Enter submits the form.
    tab_to(&client, "queue-name").await;
    press(&client, &format!("typed.queue{ENTER}")).await;
    let vhost = broker.broker().vhost("/").expect("default vhost");
    eventually("the queue typed at the keyboard was declared", || {
        vhost.queue("typed.queue").is_some()
    })
    .await;

    // Every page: every control labelled, nothing wider than the window.
    for (width, height) in [(1280, 800), (390, 844)] {
        client
            .set_window_size(width, height)
            .await
            .expect("window size");
        for (hash, title) in PAGES {
            goto(&client, &base, hash, title).await;
            // Let the page's API calls finish and its tables fill in.
            wait_for_script(
                &client,
                "the page rendered",
                "document.querySelectorAll('#page table, #page form').length > 0",
                LIMIT,
            )
            .await;
            let unlabelled = unlabelled_controls(&client).await;
            assert!(
                unlabelled.is_empty(),
                "{hash} at {width}x{height}: controls without a label: {unlabelled:?}"
            );
            let overflow = horizontal_overflow(&client).await;
            if overflow > 0 {
                screenshot(&client, "overflow").await;
            }
            assert!(
                overflow <= 0,
                "{hash} at {width}x{height} is {overflow} px wider than the window"
            );
        }
        screenshot(&client, &format!("layout-{width}x{height}-definitions")).await;
    }
    goto(&client, &base, "#/queues/%2F/kb-0000", "Queue kb-0000").await;
    screenshot(&client, "phone-queue").await;
    // The checks above can fail: an unlabelled field and a too-wide box are caught.
    run_script(
        &client,
        "const probe = document.createElement('input'); probe.id = 'probe'; \
         document.getElementById('page').append(probe); \
         const wide = document.createElement('div'); wide.style.width = '2000px'; wide.textContent = 'x'; \
         document.getElementById('page').append(wide); return true;",
    )
    .await;
    assert_eq!(unlabelled_controls(&client).await, ["input#probe"]);
    assert!(horizontal_overflow(&client).await > 0);

    client.close().await.expect("end the session");
    let _ = connection.close().await;
}
