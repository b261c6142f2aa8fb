//! Helpers shared by the interop tests: an in-process broker on 127.0.0.1 with an ephemeral
//! port, and the URLs clients connect with. Each test starts its own broker, so tests never
//! share state or ports.

use std::net::SocketAddr;
use std::time::Duration;

use warren::Server;
use warren_config::Settings;

/// A response from the management API or the metrics endpoint.
pub use warren_management::http::ClientResponse as HttpResponse;

/// A broker started for one test.
pub struct TestBroker {
    server: Server,
}

impl TestBroker {
    /// Starts a broker with the embedded defaults on 127.0.0.1, port 0.
    pub async fn start() -> TestBroker {
        Self::start_with(&[]).await
    }

    /// Starts a broker with extra `KEY=VALUE` settings applied after the test defaults.
    pub async fn start_with(settings: &[(&str, &str)]) -> TestBroker {
        let mut config = Settings::default();
        for (key, value) in [
            ("listeners.tcp.default", "127.0.0.1:0"),
            ("management.tcp.ip", "127.0.0.1"),
            ("management.tcp.port", "0"),
            ("prometheus.tcp.ip", "127.0.0.1"),
            ("prometheus.tcp.port", "0"),
        ] {
            config.set(key, value).expect("valid test listener");
        }
        for (key, value) in settings {
            config
                .set(key, value)
                .unwrap_or_else(|e| panic!("test setting {key}={value}: {e}"));
        }
        let server = Server::start(config).await.expect("broker starts");
        TestBroker { server }
    }

    /// The AMQP listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.server.amqp_addr()
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
