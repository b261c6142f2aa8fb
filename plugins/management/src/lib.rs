//! # warren-management
//!
//! Warren's operator surface, as a plugin of the core:
//!
//! - [`api`]: the RabbitMQ-compatible management HTTP API (`/api/...`, port 15672), served
//!   from the core's state with RabbitMQ's JSON field names, basic auth and tag-based access;
//! - [`metrics`]: Prometheus text exposition with RabbitMQ's metric names (port 15692);
//! - [`ctl`]: `warrenctl`, rabbitmqctl's verbs over the HTTP API;
//! - [`rates`]: message rates, sampled from the core's counters by [`serve_rates`];
//! - [`octets`]: connections' socket byte counts and rates, read from the kernel on request.
//!
//! Requests flow through [`server`] (hyper 1 under tower layers: gzip, authentication from
//! the head before any body is read, the body limit) to a handler that only reads or
//! changes the core, run on the blocking pool. [`http`] holds the handler-facing request and
//! response types and the client side warrenctl and the tests use.

pub mod api;
pub mod client;
pub mod ctl;
pub mod http;
pub mod metrics;
pub mod octets;
pub mod rates;
pub mod server;
mod ui;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use warren_config::HttpLimits;

pub use api::{
    ClusterView, DefinitionsImporter, JoinError, JoinOutcome, ListenerInfo, ListingKind,
    Management, NodeResources, QuorumOpError, QuorumView, RaftFigures, RaftMember, ReplicaChange,
    ResourceReader,
};

/// Serves the management API and the web UI on `listener` until `shutdown` turns true;
/// over HTTPS when `tls` is given. `limits` are the listener's `management.http.*`,
/// `management.tcp.*` (or `management.ssl.*`) settings.
pub async fn serve_api(
    listener: TcpListener,
    management: Arc<Management>,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    limits: HttpLimits,
    shutdown: watch::Receiver<bool>,
) {
    let protocol = if tls.is_some() { "https" } else { "http" };
    let store = management
        .broker
        .message_store()
        .map(|store| store.subscribe_durable());
    let authenticating = Arc::clone(&management);
    let endpoint = server::HttpEndpoint {
        handler: Arc::new(move |request, context: &server::RequestContext| {
            management.handle_with(request, context.user.clone())
        }),
        is_heavy: api::is_heavy,
        authenticator: Some(Arc::new(move |head, peer| {
            authenticating.authenticate_head(head, peer)
        })),
        limits,
        protocol,
        store,
    };
    server::serve(listener, endpoint, tls, shutdown).await;
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
    let protocol = if tls.is_some() {
        "https/prometheus"
    } else {
        "http/prometheus"
    };
    let endpoint = server::HttpEndpoint {
        handler: Arc::new(move |request, _: &server::RequestContext| {
            metrics::handle(&management, &request)
        }),
        is_heavy: |_| true,
        authenticator: None,
        limits: HttpLimits::default(),
        protocol,
        store: None,
    };
    server::serve(listener, endpoint, tls, shutdown).await;
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
