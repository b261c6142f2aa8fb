//! Page loads with 10,000 queues and 1,000 AMQP connections, timed in the browser
//! (docs/benchmarks.md records the figures).

use std::path::Path;
use std::time::Duration;

use fantoccini::Client;
use warren_interop_tests::TestBroker;

use crate::browser::*;
use crate::raw_common;

/// How long a page may take to load: the target, held by the median of three loads
/// so that one slow load on a busy machine does not fail the test. The figures are printed
/// (docs/benchmarks.md records them).
const LOAD_LIMIT: Duration = Duration::from_secs(1);

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
    let Some((driver, chromium)) = driver_or_skip("web UI load test").await else {
        return;
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
        // The first load warms chromium's cache of the UI's files; the next three are
        // measured.
        load_time(&client, &format!("{base}/{hash}"), ready).await;
        let mut loads = Vec::new();
        for _ in 0..3 {
            loads.push(load_time(&client, &format!("{base}/{hash}"), ready).await);
        }
        loads.sort();
        let took = loads[1];
        report.push(format!(
            "{name} {} ms ({}-{})",
            took.as_millis(),
            loads[0].as_millis(),
            loads[2].as_millis()
        ));
        assert!(
            took < LOAD_LIMIT,
            "the {name} page took {took:?} (median of {loads:?}) with {QUEUES} queues and {CONNECTIONS} connections"
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
