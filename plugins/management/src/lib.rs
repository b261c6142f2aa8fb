//! # warren-management
//!
//! Warren's operator surface, as a plugin of the core:
//!
//! - [`api`]: the RabbitMQ-compatible management HTTP API (`/api/...`, port 15672), served
//!   from the core's state with RabbitMQ's JSON field names, basic auth and tag-based access;
//! - [`metrics`]: Prometheus text exposition with RabbitMQ's metric names (port 15692);
//! - [`ctl`]: `warrenctl`, rabbitmqctl's verbs over the HTTP API;
//! - [`rates`]: message rates, sampled from the core's counters by [`serve_rates`].
//!
//! Requests flow through [`http`] (a small sans-IO HTTP/1.1 parser and encoder) and
//! [`server`] (the tokio accept loop) to a handler that only reads or changes the core.

pub mod api;
pub mod ctl;
pub mod http;
pub mod metrics;
pub mod rates;
pub mod server;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use api::{DefinitionsImporter, ListenerInfo, Management, NodeResources, ResourceReader};

/// Serves the management API on `listener` until `shutdown` turns true; over HTTPS when
/// `tls` is given.
pub async fn serve_api(
    listener: TcpListener,
    management: Arc<Management>,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) {
    let store = management
        .broker
        .message_store()
        .map(|store| store.subscribe_durable());
    let handler: server::Handler = Arc::new(move |request, peer| management.handle(request, peer));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    server::serve(listener, handler, acceptor, store, shutdown).await;
}

/// Serves Prometheus metrics (`/metrics`, `/metrics/per-object`) on `listener` until
/// `shutdown` turns true.
pub async fn serve_metrics(
    listener: TcpListener,
    management: Arc<Management>,
    shutdown: watch::Receiver<bool>,
) {
    serve_metrics_tls(listener, management, None, shutdown).await;
}

/// Serves Prometheus metrics as [`serve_metrics`] does, over TLS when `tls` is set
/// (`prometheus.ssl.*`).
pub async fn serve_metrics_tls(
    listener: TcpListener,
    management: Arc<Management>,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) {
    let handler: server::Handler =
        Arc::new(move |request, _peer| metrics::handle(&management, &request));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    server::serve(listener, handler, acceptor, None, shutdown).await;
}

/// Samples the message counters every `management.statistics_interval` for the API's rates,
/// until `shutdown` turns true.
pub async fn serve_rates(management: Arc<Management>, mut shutdown: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(management.statistics_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => management.rates.sample(&management.broker),
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}
