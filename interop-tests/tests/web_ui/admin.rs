//! The Admin pages beyond adding things: a user's tags and password changed through the form
//! (the new password logs in, the old one no longer does), a user, a virtual host, a
//! permission and a policy deleted, an operator policy added that caps a queue, the exported
//! file's content; and what each tag may see, as in RabbitMQ: management users see no nodes
//! and no Admin, monitoring users see nodes, policymakers see the Policies tab only (and can
//! use it), administrators every tab.

use std::path::Path;
use std::time::Duration;

use fantoccini::{Client, Locator};
use warren_interop_tests::TestBroker;

use crate::browser::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_changes_and_deletes_users_and_shows_each_tag_its_pages() {
    let _one_browser = BROWSER.lock().await;
    let Some((driver, chromium)) = driver_or_skip("web UI admin test").await else {
        return;
    };
    tokio::time::timeout(Duration::from_secs(180), administer(&driver, &chromium))
        .await
        .expect("the browser test finishes in time");
}

/// The texts of the elements `css` finds.
async fn texts(client: &Client, css: &str) -> Vec<String> {
    let script = format!(
        "return Array.from(document.querySelectorAll(\"{css}\")).map((el) => el.textContent.trim());"
    );
    run_script(client, &script)
        .await
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|value| value.as_str().map(str::to_string))
        .collect()
}

async fn log_out(client: &Client) {
    click(client, "#logout").await;
    client
        .wait()
        .at_most(LIMIT)
        .for_element(Locator::Css("#login-form"))
        .await
        .expect("back at the form");
}

async fn administer(driver: &Driver, chromium: &Path) {
    let broker = TestBroker::start().await;
    let setup = [
        (
            "PUT",
            "/api/users/ops-monitor",
            r#"{"password":"pw","tags":"monitoring"}"#,
        ),
        (
            "PUT",
            "/api/users/ops-manage",
            r#"{"password":"pw","tags":"management"}"#,
        ),
        (
            "PUT",
            "/api/users/ops-policy",
            r#"{"password":"pw","tags":"policymaker"}"#,
        ),
        (
            "PUT",
            "/api/users/ops-gone",
            r#"{"password":"pw","tags":"management"}"#,
        ),
        ("PUT", "/api/vhosts/old-vhost", "{}"),
        ("PUT", "/api/queues/%2F/capped.q", r#"{"durable":false}"#),
        (
            "PUT",
            "/api/policies/%2F/old-policy",
            r#"{"pattern":"^nothing$","definition":{"max-length":1}}"#,
        ),
        (
            "PUT",
            "/api/permissions/old-vhost/ops-monitor",
            r#"{"configure":".*","write":".*","read":".*"}"#,
        ),
    ];
    for (method, path, body) in setup {
        let answer = broker.api_as_guest(method, path, Some(body)).await;
        assert!(answer.status < 300, "{method} {path}: {}", answer.text());
    }
    for user in ["ops-monitor", "ops-manage", "ops-policy"] {
        let answer = broker
            .api_as_guest(
                "PUT",
                &format!("/api/permissions/%2F/{user}"),
                Some(r#"{"configure":".*","write":".*","read":".*"}"#),
            )
            .await;
        assert!(answer.status < 300, "{}", answer.text());
    }

    let client = browser(driver, chromium).await;
    let base = format!("http://{}", broker.management_addr());
    log_in(&client, &base, "guest", "guest").await;
    wait_for_text(&client, "#page-title", "Overview").await;

    // An administrator sees every Admin tab.
    goto(&client, &base, "#/admin/users", "Admin").await;
    let tabs = texts(&client, "[role=tab]").await;
    assert_eq!(
        tabs,
        [
            "Users",
            "Virtual hosts",
            "Permissions",
            "Topic permissions",
            "Policies",
            "Operator policies",
            "Limits",
            "Definitions"
        ]
    );

    // Users: add one, then change its tags and password with the same form.
    fill(&client, "#user-name", "ui-alice").await;
    fill(&client, "#user-password", "first").await;
    fill(&client, "#user-tags", "management").await;
    click(&client, "form[aria-label='Add a user'] button[type=submit]").await;
    wait_for_text(&client, "table[aria-label=Users]", "ui-alice").await;
    let whoami = |password: &'static str| {
        let broker = &broker;
        async move {
            broker
                .api("GET", "/api/whoami", Some(("ui-alice", password)), None)
                .await
                .status
        }
    };
    assert_eq!(whoami("first").await, 200);
    fill(&client, "#user-name", "ui-alice").await;
    fill(&client, "#user-password", "second").await;
    fill(&client, "#user-tags", "policymaker, monitoring").await;
    click(&client, "form[aria-label='Add a user'] button[type=submit]").await;
    wait_for_text(
        &client,
        "table[aria-label=Users]",
        "policymaker, monitoring",
    )
    .await;
    let alice = broker.broker().user("ui-alice").expect("ui-alice");
    assert_eq!(alice.tags, ["policymaker", "monitoring"]);
    assert_eq!(whoami("second").await, 200, "the new password logs in");
    assert_eq!(
        whoami("first").await,
        401,
        "the old password no longer does"
    );
    // Tags changed without a password keep the password.
    fill(&client, "#user-name", "ui-alice").await;
    fill(&client, "#user-password", "").await;
    fill(&client, "#user-tags", "management").await;
    click(&client, "form[aria-label='Add a user'] button[type=submit]").await;
    eventually("ui-alice's tags changed again", || {
        broker
            .broker()
            .user("ui-alice")
            .is_some_and(|u| u.tags == ["management"])
    })
    .await;
    assert_eq!(whoami("second").await, 200, "the password was kept");
    // Delete a user.
    click(&client, "button[aria-label='Delete user ops-gone']").await;
    eventually("ops-gone deleted from the UI", || {
        broker.broker().user("ops-gone").is_none()
    })
    .await;
    wait_for_script(
        &client,
        "ops-gone left the table",
        "!document.querySelector('table[aria-label=Users]').textContent.includes('ops-gone')",
        LIMIT,
    )
    .await;
    screenshot(&client, "admin-users-changed").await;

    // A virtual host and a permission deleted.
    goto(&client, &base, "#/admin/permissions", "Admin").await;
    click(
        &client,
        "button[aria-label='Clear permissions of ops-monitor in old-vhost']",
    )
    .await;
    eventually("the permission was cleared from the UI", || {
        broker
            .broker()
            .vhost("old-vhost")
            .is_some_and(|v| v.permissions("ops-monitor").is_none())
    })
    .await;
    goto(&client, &base, "#/admin/vhosts", "Admin").await;
    click(
        &client,
        "button[aria-label='Delete virtual host old-vhost']",
    )
    .await;
    eventually("old-vhost deleted from the UI", || {
        broker.broker().vhost("old-vhost").is_none()
    })
    .await;

    // Policies: one deleted; an operator policy added, and it caps the queue it matches.
    goto(&client, &base, "#/admin/policies", "Admin").await;
    click(&client, "button[aria-label='Delete policy old-policy']").await;
    let vhost = broker.broker().vhost("/").expect("default vhost");
    eventually("old-policy deleted from the UI", || {
        !vhost.policies(false).iter().any(|p| p.name == "old-policy")
    })
    .await;
    goto(&client, &base, "#/admin/operator-policies", "Admin").await;
    fill(&client, "#operator-policy-name", "ui-cap").await;
    fill(&client, "#operator-policy-pattern", "^capped").await;
    fill(
        &client,
        "#operator-policy-definition",
        r#"{"max-length": 2}"#,
    )
    .await;
    click(
        &client,
        "form[aria-label='Add an operator policy'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "table[aria-label='Operator policies']", "ui-cap").await;
    assert!(
        vhost.policies(true).iter().any(|p| p.name == "ui-cap"),
        "operator policy added from the UI"
    );
    for _ in 0..5 {
        let published = broker
            .api_as_guest(
                "POST",
                "/api/exchanges/%2F/amq.default/publish",
                Some(
                    r#"{"routing_key":"capped.q","payload":"m","payload_encoding":"string","properties":{}}"#,
                ),
            )
            .await;
        assert_eq!(published.json()["routed"], true, "{}", published.text());
    }
    eventually("the operator policy caps capped.q at 2", || {
        vhost
            .queue("capped.q")
            .is_some_and(|q| q.stats().ready == 2)
    })
    .await;
    screenshot(&client, "admin-operator-policies").await;

    // The exported file holds the broker's definitions.
    goto(&client, &base, "#/admin/definitions", "Admin").await;
    click(&client, "#definitions-export").await;
    wait_for_text(&client, "#definitions-result", "warren-definitions.json").await;
    // Saved by the browser as a user's click on the link saves it.
    click(&client, "#definitions-download").await;
    let saved = driver.downloads().join("warren-definitions.json");
    eventually("the browser saved warren-definitions.json", || {
        saved.is_file()
    })
    .await;
    let exported: serde_json::Value = {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            // The file may still be being written: retry until it parses.
            let text = std::fs::read_to_string(&saved).unwrap_or_default();
            match serde_json::from_str(&text) {
                Ok(json) => break json,
                Err(error) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the saved file is not JSON: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    let names = |key: &str| -> Vec<String> {
        exported[key]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|item| item["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        names("queues").contains(&"capped.q".to_string()),
        "{exported}"
    );
    assert!(
        names("users").contains(&"ui-alice".to_string()),
        "{exported}"
    );
    assert!(
        !names("users").contains(&"ops-gone".to_string()),
        "{exported}"
    );
    assert!(
        !names("vhosts").contains(&"old-vhost".to_string()),
        "{exported}"
    );
    assert!(
        names("operator_policies").contains(&"ui-cap".to_string()),
        "{exported}"
    );
    log_out(&client).await;

    // management: no Admin, no nodes; the queues it may see.
    log_in(&client, &base, "ops-manage", "pw").await;
    wait_for_text(&client, "#page", "Listeners").await;
    let navigation = texts(&client, "#nav a").await;
    assert_eq!(
        navigation,
        ["Overview", "Connections", "Channels", "Exchanges", "Queues"]
    );
    assert!(
        client
            .find(Locator::Css("table[aria-label=Nodes]"))
            .await
            .is_err(),
        "a management user sees no nodes"
    );
    goto(&client, &base, "#/queues", "Queues").await;
    wait_for_text(&client, "table[aria-label=Queues]", "capped.q").await;
    // Asking for the Admin page directly shows the overview instead.
    client
        .goto(&format!("{base}/#/admin/users"))
        .await
        .expect("navigate");
    wait_for_script(
        &client,
        "no Admin page for a management user",
        "document.getElementById('page-title').textContent !== 'Admin' \
         && !document.querySelector('table[aria-label=Users]')",
        LIMIT,
    )
    .await;
    log_out(&client).await;

    // monitoring: nodes, no Admin.
    log_in(&client, &base, "ops-monitor", "pw").await;
    wait_for_text(&client, "table[aria-label=Nodes]", "warren@").await;
    assert!(!texts(&client, "#nav a")
        .await
        .contains(&"Admin".to_string()));
    log_out(&client).await;

    // policymaker: the Policies tab only, and it works.
    log_in(&client, &base, "ops-policy", "pw").await;
    wait_for_text(&client, "#page-title", "Overview").await;
    assert!(texts(&client, "#nav a")
        .await
        .contains(&"Admin".to_string()));
    goto(&client, &base, "#/admin/users", "Admin").await;
    assert_eq!(texts(&client, "[role=tab]").await, ["Policies"]);
    fill(&client, "#policy-name", "from-policymaker").await;
    fill(&client, "#policy-pattern", "^pm").await;
    fill(&client, "#policy-definition", r#"{"max-length": 9}"#).await;
    click(
        &client,
        "form[aria-label='Add a policy'] button[type=submit]",
    )
    .await;
    wait_for_text(&client, "table[aria-label=Policies]", "from-policymaker").await;
    assert!(vhost
        .policies(false)
        .iter()
        .any(|p| p.name == "from-policymaker"));
    screenshot(&client, "policymaker-admin").await;

    client.close().await.expect("end the session");
}
