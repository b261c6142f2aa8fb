//! The browser side of the web UI tests: chromium-driver and its chromium (started, and
//! killed with their process group when a test ends or fails), a WebDriver session at
//! 1280x800, and the small steps the tests are written in (fill, click, wait for a text).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

/// One browser at a time: the tests in this file would otherwise start two chromiums at
/// once on a two-core machine.
pub(crate) static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long one expected change on a page may take.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

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
pub(crate) struct Driver {
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
pub(crate) async fn start_driver() -> Result<(Driver, PathBuf), String> {
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

impl Driver {
    /// Where chromium saves downloaded files.
    pub(crate) fn downloads(&self) -> PathBuf {
        self.profile.path().join("downloads")
    }
}

/// A WebDriver session in a 1280x800 window, downloading into [`Driver::downloads`].
pub(crate) async fn browser(driver: &Driver, chromium: &Path) -> Client {
    let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
    args.push(format!(
        "--user-data-dir={}",
        driver.profile.path().display()
    ));
    args.push("--window-size=1280,800".into());
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium.display().to_string(),
            "args": args,
            // Files the UI offers for download (the definitions export) land here unasked.
            "prefs": {
                "download.default_directory": driver.downloads().display().to_string(),
                "download.prompt_for_download": false,
                "download.directory_upgrade": true,
            },
        }),
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

pub(crate) async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// Waits until the element at `css` exists and its text contains `needle`.
pub(crate) async fn wait_for_text(client: &Client, css: &str, needle: &str) -> String {
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
pub(crate) async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn fill(client: &Client, css: &str, text: &str) {
    let element = client.find(Locator::Css(css)).await.expect(css);
    element.clear().await.expect("clear");
    element.send_keys(text).await.expect("type");
}

/// Clicks the element `css` finds, waiting for it to appear.
pub(crate) async fn click(client: &Client, css: &str) {
    click_located(client, Locator::Css(css), css).await;
}

/// Clicks the first element `xpath` finds, waiting for it to appear.
pub(crate) async fn click_xpath(client: &Client, xpath: &str) {
    click_located(client, Locator::XPath(xpath), xpath).await;
}

/// Pages redraw their tables on a timer, so an element found just before a redraw can be
/// gone by the click ("stale element"): it is then found again, within `LIMIT`.
async fn click_located(client: &Client, locator: Locator<'_>, what: &str) {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let clicked = client
            .wait()
            .at_most(LIMIT)
            .for_element(locator)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .click()
            .await;
        match clicked {
            Ok(()) => return,
            Err(e)
                if e.to_string().contains("stale element")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("click {what}: {e}"),
        }
    }
}

pub(crate) async fn select(client: &Client, css: &str, value: &str) {
    client
        .find(Locator::Css(css))
        .await
        .expect(css)
        .select_by_value(value)
        .await
        .unwrap_or_else(|e| panic!("select {value} in {css}: {e}"));
}

pub(crate) async fn goto(client: &Client, base: &str, hash: &str, title: &str) {
    client
        .goto(&format!("{base}/{hash}"))
        .await
        .expect("navigate");
    wait_for_text(client, "#page-title", title).await;
}

pub(crate) async fn log_in(client: &Client, base: &str, user: &str, password: &str) {
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

/// chromium-driver and chromium for one test, or `None` after printing why the browser
/// tests cannot run here (under CI, where `.ci/run` installs them, that is a failure).
pub(crate) async fn driver_or_skip(test: &str) -> Option<(Driver, PathBuf)> {
    match start_driver().await {
        Ok(found) => Some(found),
        Err(reason) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "browser tests must run in CI: {reason}"
            );
            // Straight to the process's stderr: libtest hides what a passing test prints
            // with eprintln!, and a developer's plain `cargo test` should show this.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{test} skipped: {reason}");
            None
        }
    }
}

/// Runs `script` (the body of a function) in the page and returns its answer.
pub(crate) async fn run_script(client: &Client, script: &str) -> serde_json::Value {
    client
        .execute(script, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
}

/// The visible form controls and buttons on the page that have no accessible name: an
/// input, select or textarea without a `<label for>` (or wrapping label) or `aria-label`, a
/// button without text or `aria-label`. Each is described by its tag and id.
pub(crate) async fn unlabelled_controls(client: &Client) -> Vec<String> {
    let answer = run_script(
        client,
        r#"
        const visible = (el) => el.offsetParent !== null || el.getClientRects().length > 0;
        const named = (el) => {
          if ((el.getAttribute('aria-label') || '').trim()) return true;
          if (el.tagName === 'BUTTON' || el.tagName === 'A') return el.textContent.trim().length > 0;
          return Array.from(el.labels || []).some((label) => label.textContent.trim().length > 0);
        };
        return Array.from(document.querySelectorAll('input, select, textarea, button, a[href]'))
          .filter((el) => visible(el) && el.type !== 'hidden' && !named(el))
          .map((el) => `${el.tagName.toLowerCase()}#${el.id || '?'}`);
        "#,
    )
    .await;
    answer
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|value| value.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// How much wider than the window the page is, in CSS pixels (0: no horizontal scrolling of
/// the page; wide tables scroll inside their own box).
pub(crate) async fn horizontal_overflow(client: &Client) -> i64 {
    run_script(
        client,
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
    )
    .await
    .as_i64()
    .expect("a number")
}

/// Types `keys` as a keyboard would, into whatever element has the focus (WebDriver key
/// codes: Tab is `\u{E004}`, Enter `\u{E007}`).
pub(crate) async fn press(client: &Client, keys: &str) {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    let mut actions = KeyActions::new("keyboard".to_string());
    for key in keys.chars() {
        actions = actions
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
    }
    client
        .perform_actions(actions)
        .await
        .unwrap_or_else(|e| panic!("keys {keys:?}: {e}"));
}

/// The id (or, without one, the `aria-label` or the text) of the element that has the focus.
pub(crate) async fn focused(client: &Client) -> String {
    run_script(
        client,
        "const el = document.activeElement; \
     return el ? (el.id || el.getAttribute('aria-label') || el.textContent.trim()) : '';",
    )
    .await
    .as_str()
    .unwrap_or_default()
    .to_string()
}

/// Waits up to `limit` until the JavaScript expression `condition` holds in the page (it is
/// evaluated as it stands, every 100 ms); panics with `what` and the page's text otherwise.
pub(crate) async fn wait_for_script(client: &Client, what: &str, condition: &str, limit: Duration) {
    let script = format!("try {{ return Boolean({condition}); }} catch (_) {{ return false; }}");
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let holds = client
            .execute(&script, Vec::new())
            .await
            .ok()
            .and_then(|value| value.as_bool())
            .unwrap_or(false);
        if holds {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            screenshot(client, "failure").await;
            let text = run_script(client, "return document.body.innerText;").await;
            panic!("{what} never held ({condition}); page: {text}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reloads the page (a page that does not refresh itself) once a second until the
/// JavaScript expression `condition` holds, for up to `limit`.
pub(crate) async fn reload_until(client: &Client, what: &str, condition: &str, limit: Duration) {
    let script = format!("try {{ return Boolean({condition}); }} catch (_) {{ return false; }}");
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let holds = client
            .execute(&script, Vec::new())
            .await
            .ok()
            .and_then(|value| value.as_bool())
            .unwrap_or(false);
        if holds {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            screenshot(client, "failure").await;
            let text = run_script(client, "return document.body.innerText;").await;
            panic!("{what} never held ({condition}); page: {text}");
        }
        client.refresh().await.expect("reload");
    }
}
