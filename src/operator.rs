//! The operator endpoints: the management HTTP API and the Prometheus metrics endpoint, over
//! HTTP and HTTPS.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_config::Settings;
use warren_core::Broker;
use warren_management::{ListenerInfo, Management, NodeResources};

use crate::resource_monitor::ResourceMonitor;

use crate::{bind, cluster, import_definitions, quorum_view, tls, StartError};

/// Starts the management API and the Prometheus endpoint when enabled; returns their
/// addresses.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start_operator_endpoints(
    broker: &Arc<Broker>,
    quorum: &Arc<warren_raft::QuorumBackend>,
    cluster: Option<&cluster::ClusterNode>,
    management_slot: Arc<std::sync::OnceLock<Arc<Management>>>,
    resource_monitor: &Arc<ResourceMonitor>,
    settings: &Settings,
    protocol_listeners: Vec<ListenerInfo>,
    listeners: &mut JoinSet<()>,
    shutdown: &watch::Receiver<bool>,
) -> Result<OperatorAddrs, StartError> {
    let management_listener = match settings.management_enabled {
        true => Some(bind("http", &settings.management_listener).await?.0),
        false => None,
    };
    let management_tls = match (
        &settings.management_tls_listener,
        settings.management_enabled,
    ) {
        (Some(addr), true) => {
            let (Some(certfile), Some(keyfile)) = (
                &settings.management_tls_certfile,
                &settings.management_tls_keyfile,
            ) else {
                return Err(StartError::Tls(
                    "management.ssl.port needs management.ssl.certfile and management.ssl.keyfile"
                        .to_string(),
                ));
            };
            let config =
                tls::server_config(certfile, keyfile, &settings.management_tls_verification)
                    .map_err(StartError::Tls)?;
            Some((bind("https", addr).await?.0, config))
        }
        _ => None,
    };
    let management_tls_addr = management_tls
        .as_ref()
        .and_then(|(listener, _)| listener.local_addr().ok());
    let prometheus_listener = match settings.prometheus_enabled {
        true => Some(bind("prometheus", &settings.prometheus_listener).await?.0),
        false => None,
    };
    let prometheus_tls = match (
        &settings.prometheus_tls_listener,
        settings.prometheus_enabled,
    ) {
        (Some(addr), true) => {
            let (Some(certfile), Some(keyfile)) = (
                &settings.prometheus_tls_certfile,
                &settings.prometheus_tls_keyfile,
            ) else {
                return Err(StartError::Tls(
                    "prometheus.ssl.port needs prometheus.ssl.certfile and prometheus.ssl.keyfile"
                        .to_string(),
                ));
            };
            let config =
                tls::prometheus_config(certfile, keyfile, &settings.prometheus_tls_verification)
                    .map_err(StartError::Tls)?;
            Some((bind("https/prometheus", addr).await?.0, config))
        }
        _ => None,
    };
    let prometheus_tls_addr = prometheus_tls
        .as_ref()
        .and_then(|(listener, _)| listener.local_addr().ok());
    let address = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
    let (management_addr, prometheus_addr) =
        (address(&management_listener), address(&prometheus_listener));
    let mut endpoints = protocol_listeners;
    endpoints.extend(management_addr.map(|addr| ListenerInfo {
        protocol: "http".into(),
        addr,
    }));
    endpoints.extend(management_tls_addr.map(|addr| ListenerInfo {
        protocol: "https".into(),
        addr,
    }));
    endpoints.extend(prometheus_addr.map(|addr| ListenerInfo {
        protocol: "http/prometheus".into(),
        addr,
    }));
    endpoints.extend(prometheus_tls_addr.map(|addr| ListenerInfo {
        protocol: "https/prometheus".into(),
        addr,
    }));
    let importer = {
        let broker = Arc::clone(broker);
        let settings = settings.clone();
        Arc::new(move |json: &[u8]| import_definitions(&broker, json, &settings, "definitions"))
    };
    let monitor = Arc::clone(resource_monitor);
    let node_name = cluster::node_name(settings);
    endpoints.extend(cluster.map(|node| ListenerInfo {
        protocol: "clustering".into(),
        addr: node.addr,
    }));
    let management = Arc::new(Management {
        broker: Arc::clone(broker),
        // RabbitMQ names a cluster after its first node: here the first seed, which every
        // node of one seed list agrees on.
        cluster_name: settings
            .cluster
            .cluster_name
            .clone()
            .or_else(|| settings.cluster.seed_nodes().next().map(|n| n.name.clone()))
            .unwrap_or_else(|| node_name.clone()),
        node_name,
        listeners: endpoints,
        import_definitions: importer,
        resources: Arc::new(move || {
            let reading = monitor.check();
            NodeResources {
                memory_used: reading.memory_used.unwrap_or(0),
                memory_limit: reading.memory_limit,
                disk_free: reading.disk_free.unwrap_or(0),
                disk_free_limit: reading.disk_free_limit,
            }
        }),
        started: std::time::Instant::now(),
        rates: warren_management::rates::RateSampler::new(settings.management_sample_retention),
        statistics_interval: settings.collect_statistics_interval,
        cluster: cluster.map(|node| {
            Arc::new(cluster::View(
                Arc::clone(&node.metadata),
                Arc::clone(&node.join),
            )) as Arc<dyn warren_management::ClusterView>
        }),
        quorum: Some(Arc::new(quorum_view::View(Arc::clone(quorum)))
            as Arc<dyn warren_management::QuorumView>),
        octets: Default::default(),
    });
    let _ = management_slot.set(Arc::clone(&management));
    if management_listener.is_some() || management_tls.is_some() {
        listeners.spawn(warren_management::serve_rates(
            Arc::clone(&management),
            shutdown.clone(),
        ));
    }
    if let Some(listener) = management_listener {
        listeners.spawn(warren_management::serve_api(
            listener,
            Arc::clone(&management),
            None,
            settings.management_http.clone(),
            shutdown.clone(),
        ));
    }
    if let Some((listener, config)) = management_tls {
        listeners.spawn(warren_management::serve_api(
            listener,
            Arc::clone(&management),
            Some(config),
            settings.management_https.clone(),
            shutdown.clone(),
        ));
    }
    if let Some((listener, config)) = prometheus_tls {
        listeners.spawn(warren_management::serve_metrics_tls(
            listener,
            Arc::clone(&management),
            Some(config),
            shutdown.clone(),
        ));
    }
    if let Some(listener) = prometheus_listener {
        listeners.spawn(warren_management::serve_metrics(
            listener,
            management,
            shutdown.clone(),
        ));
    }
    Ok(OperatorAddrs {
        management: management_addr,
        management_tls: management_tls_addr,
        prometheus: prometheus_addr,
        prometheus_tls: prometheus_tls_addr,
    })
}

/// Bound addresses of the management API (HTTP, HTTPS) and the metrics endpoint (HTTP,
/// HTTPS).
pub(crate) struct OperatorAddrs {
    pub(crate) management: Option<SocketAddr>,
    pub(crate) management_tls: Option<SocketAddr>,
    pub(crate) prometheus: Option<SocketAddr>,
    pub(crate) prometheus_tls: Option<SocketAddr>,
}
