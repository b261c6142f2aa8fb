//! Helpers shared by the interop tests: an in-process broker on 127.0.0.1 with ephemeral
//! ports (AMQP and STOMP), the URLs clients connect with, and a small STOMP test client
//! ([`stomp`]). Each test starts its own broker, so tests never share state or ports.

pub mod cluster;
pub mod stomp;
pub mod tls;

pub mod process;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use warren::Server;
use warren_config::Settings;

/// A directory of its own under the system temp dir, removed when dropped. Every test
/// broker gets one as its `data_dir`, so parallel tests never share a message store.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, empty directory whose name starts with `warren-<label>-`.
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "warren-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temporary directory");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Every listening endpoint of the broker on 127.0.0.1 port 0, as `(key, value)` settings, so
/// that parallel tests never collide with each other or with a broker on the standard ports.
pub const TEST_LISTENERS: &[(&str, &str)] = &[
    ("listeners.tcp.default", "127.0.0.1:0"),
    ("mqtt.listeners.tcp.default", "127.0.0.1:0"),
    ("stomp.listeners.tcp.default", "127.0.0.1:0"),
    ("stream.listeners.tcp.default", "127.0.0.1:0"),
    ("management.tcp.ip", "127.0.0.1"),
    ("management.tcp.port", "0"),
    ("prometheus.tcp.ip", "127.0.0.1"),
    ("prometheus.tcp.port", "0"),
];

/// `--set KEY=VALUE` arguments for every [`TEST_LISTENERS`] setting, for tests that spawn
/// the `warren` binary.
pub fn test_listener_args() -> Vec<String> {
    TEST_LISTENERS
        .iter()
        .flat_map(|(key, value)| ["--set".to_owned(), format!("{key}={value}")])
        .collect()
}

/// A response from the management API or the metrics endpoint.
pub use warren_management::http::ClientResponse as HttpResponse;

/// A broker started for one test.
pub struct TestBroker {
    server: Server,
    /// Declared after `server`, so it is removed after the server is dropped.
    data_dir: TempDir,
}

impl TestBroker {
    /// Starts a broker with the embedded defaults on 127.0.0.1, port 0.
    pub async fn start() -> TestBroker {
        Self::start_with(&[]).await
    }

    /// Starts a broker with extra `KEY=VALUE` settings applied after the test defaults.
    /// Its `data_dir` is a fresh temporary directory (removed when the broker is dropped)
    /// unless `settings` give one.
    pub async fn start_with(settings: &[(&str, &str)]) -> TestBroker {
        let data_dir = TempDir::new("test-broker");
        let mut config = Settings::default();
        for (key, value) in TEST_LISTENERS {
            config.set(key, value).expect("valid test listener");
        }
        config
            .set("data_dir", &data_dir.path().display().to_string())
            .expect("valid data_dir");
        for (key, value) in settings {
            config
                .set(key, value)
                .unwrap_or_else(|e| panic!("test setting {key}={value}: {e}"));
        }
        let server = Server::start(config).await.expect("broker starts");
        TestBroker { server, data_dir }
    }

    /// The broker's data directory.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The AMQP listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.server.amqp_addr()
    }

    /// The STOMP listener's address.
    pub fn stomp_addr(&self) -> SocketAddr {
        self.server
            .stomp_addr()
            .expect("the test broker listens for STOMP")
    }

    /// The stream protocol listener's address.
    pub fn stream_addr(&self) -> SocketAddr {
        self.server
            .stream_addr()
            .expect("the test broker listens for the stream protocol")
    }

    /// The MQTT listener's address.
    pub fn mqtt_addr(&self) -> SocketAddr {
        self.server
            .mqtt_addr()
            .expect("the MQTT listener is enabled in tests")
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        self.url_for("guest", "guest", "%2f")
    }

    /// An AMQP URL for a user and an (already URL-encoded) vhost.
    pub fn url_for(&self, user: &str, password: &str, vhost: &str) -> String {
        format!("amqp://{user}:{password}@{}/{vhost}", self.addr())
    }

    /// The management HTTP API's address (`HOST:PORT`).
    pub fn management_addr(&self) -> String {
        self.server
            .management_addr()
            .expect("management API enabled")
            .to_string()
    }

    /// The Prometheus endpoint's address (`HOST:PORT`).
    pub fn prometheus_addr(&self) -> String {
        self.server
            .prometheus_addr()
            .expect("Prometheus endpoint enabled")
            .to_string()
    }

    /// Sends one request to the management API as `user:password`, with an optional JSON
    /// body, and returns the response.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        credentials: Option<(&str, &str)>,
        body: Option<&str>,
    ) -> HttpResponse {
        warren_management::http::send(
            &self.management_addr(),
            method,
            path,
            credentials,
            body.map(str::as_bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// `api` as guest/guest.
    pub async fn api_as_guest(&self, method: &str, path: &str, body: Option<&str>) -> HttpResponse {
        self.api(method, path, Some(("guest", "guest")), body).await
    }

    /// The running server, for adding users or inspecting the core.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The broker model.
    pub fn broker(&self) -> &std::sync::Arc<warren_core::Broker> {
        self.server.broker()
    }

    /// Adds user `user` (password `password`) with full permissions in `/` and a topic
    /// permission on `amq.topic` with the `write` and `read` patterns (which may use
    /// `{username}`, `{vhost}` and `{client_id}`).
    pub fn add_topic_user(&self, user: &str, password: &str, write: &str, read: &str) {
        let core = self.broker();
        core.add_user(user, password, vec![]);
        let root = core.vhost("/").expect("default vhost");
        root.set_permissions(user, warren_core::access::Permissions::full());
        root.set_topic_permission(
            user,
            warren_core::topic_access::TopicPermission::new(user, "/", "amq.topic", write, read)
                .expect("valid patterns"),
        );
    }

    /// Shuts the broker down (connections get 320 CONNECTION_FORCED).
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
/// For conditions on broker state that settle asynchronously; never a bare sleep.
pub async fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`wait_for`] for a condition that needs `.await` (an HTTP API call): polled every 20 ms
/// until it holds or `limit` passes; returns whether it held.
pub async fn wait_for_async<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The definitions.json exported from RabbitMQ 3.10 that the definitions tests load
/// (`interop-tests/fixtures`).
pub fn rabbitmq_definitions_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/rabbitmq-3.10-definitions.json")
}
