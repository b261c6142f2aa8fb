//! Clustering settings: `node_name`, `cluster_name`, the `cluster.` keys and RabbitMQ's seed
//! list `cluster_formation.classic_config.nodes.N` (docs/clustering.md).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

/// The inter-node port unless configured: 25672, RabbitMQ's distribution port.
pub const CLUSTER_PORT: u16 = 25672;

/// The longest a metadata change may wait for a majority before it is refused
/// (`cluster.change_timeout`): the bound of 10 seconds.
pub const CHANGE_TIMEOUT_LIMIT: Duration = Duration::from_secs(10);

/// A node as the seed list names it: `warren@HOST` or `warren@HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeAddress {
    /// The node name, `warren@HOST` (without the port): what the node calls itself.
    pub name: String,
    /// The host peers reach it on.
    pub host: String,
    /// Its cluster port (25672 unless given).
    pub port: u16,
}

impl NodeAddress {
    /// Parses `NAME@HOST` or `NAME@HOST:PORT` (IPv6 hosts in brackets when a port follows).
    /// On failure, says what is wrong.
    pub fn parse(text: &str) -> Result<NodeAddress, String> {
        let text = text.trim();
        let (prefix, rest) = text
            .split_once('@')
            .ok_or_else(|| format!("'{text}' has no '@' (expected warren@HOST)"))?;
        if prefix.is_empty() || prefix.contains(char::is_whitespace) {
            return Err(format!("'{text}' has no name before '@'"));
        }
        if rest.is_empty() {
            return Err(format!("'{text}' has no host after '@'"));
        }
        let (host, port) = match ListenAddr::parse(rest) {
            Ok(addr) if rest.contains(':') => (addr.host, addr.port),
            _ => {
                if rest.contains(':')
                    && !rest.starts_with('[')
                    && rest.parse::<std::net::Ipv6Addr>().is_err()
                {
                    return Err(format!("'{rest}' is not HOST or HOST:PORT"));
                }
                (
                    rest.trim_matches(|c| c == '[' || c == ']').to_owned(),
                    CLUSTER_PORT,
                )
            }
        };
        if host.is_empty() || host.contains(char::is_whitespace) {
            return Err(format!("'{text}' has no usable host"));
        }
        Ok(NodeAddress {
            name: format!("{prefix}@{host}"),
            host,
            port,
        })
    }

    /// `HOST:PORT`, for connecting.
    pub fn socket_addr_string(&self) -> String {
        ListenAddr::new(self.host.clone(), self.port).to_socket_addr_string()
    }
}

impl std::fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)?;
        if self.port != CLUSTER_PORT {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Everything clustering reads at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSettings {
    /// `node_name`: `warren@HOST`, the name peers and operators know this node by; HOST is
    /// the address peers and clients use. Default `warren@<hostname>`.
    pub node_name: Option<String>,
    /// `cluster_name`: the name `/api/overview` shows. Default: the first seed's name.
    pub cluster_name: Option<String>,
    /// `cluster.listeners.tcp.default`: where the inter-node listener binds. Default: the
    /// node name's host on port 25672.
    pub listener: Option<ListenAddr>,
    /// `cluster.secret_file`: the shared secret every node of the cluster holds. Default
    /// `<data_dir>/cluster.secret`, created with 32 random bytes (mode 0600) when absent.
    pub secret_file: Option<PathBuf>,
    /// `cluster_formation.classic_config.nodes.N`: the seed list, in key order of first
    /// appearance.
    pub seeds: Vec<(String, NodeAddress)>,
    /// `cluster.change_timeout`: milliseconds a metadata change waits for a majority before
    /// it is refused; at most 10 s. Default 5 s.
    pub change_timeout: Option<Duration>,
    /// `cluster.ssl_options.*`: TLS on the inter-node links.
    pub ssl: ClusterSsl,
}

/// `cluster.ssl_options.*`: TLS on every inter-node link. Both ends present a certificate
/// and check the other's against `cacertfile` (there is no unverified inter-node TLS:
/// `verify` only takes `verify_peer` and `fail_if_no_peer_cert` only `true`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSsl {
    /// `cluster.ssl_options.certfile`: this node's PEM certificate chain; naming the host of
    /// its node name (an IP or DNS subject alternative name), which peers check.
    pub certfile: Option<PathBuf>,
    /// `cluster.ssl_options.keyfile`: its PEM private key.
    pub keyfile: Option<PathBuf>,
    /// `cluster.ssl_options.cacertfile`: the PEM CA certificates that sign the nodes'.
    pub cacertfile: Option<PathBuf>,
}

impl ClusterSsl {
    /// Whether inter-node TLS is on (any of its files is set).
    pub fn enabled(&self) -> bool {
        self.certfile.is_some() || self.keyfile.is_some() || self.cacertfile.is_some()
    }
}

/// The clustering keys, with what they set; shown by `--help`.
pub const CLUSTER_KEYS: &[(&str, &str)] = &[
    (
        "node_name",
        "warren@HOST: this node's name; HOST is the address peers use (warren@<hostname>)",
    ),
    (
        "cluster_name",
        "the cluster's name shown by the management API (the first seed's name)",
    ),
    (
        "cluster.listeners.tcp.default",
        "inter-node listener HOST:PORT (the node name's host, port 25672)",
    ),
    (
        "cluster.secret_file",
        "shared secret file, mode 0600 (<data_dir>/cluster.secret, created when absent)",
    ),
    (
        "cluster.change_timeout",
        "ms a metadata change waits for a majority before it is refused, <= 10000 (5000)",
    ),
    (
        "cluster.ssl_options.certfile",
        "PEM certificate of this node for TLS on inter-node links (with keyfile, cacertfile)",
    ),
    (
        "cluster.ssl_options.keyfile",
        "PEM private key for inter-node TLS",
    ),
    (
        "cluster.ssl_options.cacertfile",
        "PEM CA certificates every node's certificate is checked against",
    ),
    (
        "cluster.ssl_options.verify",
        "verify_peer (the only value: inter-node TLS always checks peers)",
    ),
    (
        "cluster.ssl_options.fail_if_no_peer_cert",
        "true (the only value: a node without a certificate is refused)",
    ),
    (
        "cluster_formation.classic_config.nodes.<N>",
        "a seed node: warren@HOST or warren@HOST:PORT; any seed turns clustering on",
    ),
];

impl ClusterSettings {
    /// Whether this node runs clustered: it has a seed list or an explicit cluster listener.
    /// Otherwise it runs exactly as a single node, with no inter-node listener.
    pub fn enabled(&self) -> bool {
        !self.seeds.is_empty() || self.listener.is_some()
    }

    /// Whether `key` is one of the clustering keys.
    pub(crate) fn owns(key: &str) -> bool {
        matches!(key, "node_name" | "cluster_name")
            || key.starts_with("cluster.")
            || key.starts_with("cluster_formation.")
    }

    /// The node name, with `host` (this machine's host name) as the default host.
    pub fn node_name_or(&self, host: &str) -> String {
        self.node_name
            .clone()
            .unwrap_or_else(|| format!("warren@{host}"))
    }

    /// The seed nodes, in the order they were given.
    pub fn seed_nodes(&self) -> impl Iterator<Item = &NodeAddress> {
        self.seeds.iter().map(|(_, node)| node)
    }

    /// How long a metadata change waits for a majority.
    pub fn change_timeout(&self) -> Duration {
        self.change_timeout.unwrap_or(Duration::from_secs(5))
    }

    /// Applies one clustering key.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        match key {
            "node_name" => {
                let node = NodeAddress::parse(value).map_err(|e| invalid(&e))?;
                if node.port != CLUSTER_PORT || value.trim().ends_with(&format!(":{CLUSTER_PORT}"))
                {
                    return Err(invalid(
                        "warren@HOST without a port (set cluster.listeners.tcp.default)",
                    ));
                }
                self.node_name = Some(node.name);
            }
            "cluster_name" => {
                if value.is_empty() {
                    return Err(invalid("a non-empty name"));
                }
                self.cluster_name = Some(value.to_owned());
            }
            "cluster.listeners.tcp.default" => {
                let addr = ListenAddr::parse(value)
                    .map_err(|reason| invalid(&format!("HOST:PORT or PORT ({reason})")))?;
                self.listener = Some(addr);
            }
            "cluster.secret_file" => {
                if value.is_empty() {
                    return Err(invalid("a file path"));
                }
                self.secret_file = Some(PathBuf::from(value));
            }
            "cluster.ssl_options.certfile"
            | "cluster.ssl_options.keyfile"
            | "cluster.ssl_options.cacertfile" => {
                if value.is_empty() {
                    return Err(invalid("a file path"));
                }
                let path = Some(PathBuf::from(value));
                match key.rsplit('.').next() {
                    Some("certfile") => self.ssl.certfile = path,
                    Some("keyfile") => self.ssl.keyfile = path,
                    _ => self.ssl.cacertfile = path,
                }
            }
            "cluster.ssl_options.verify" => {
                if value != "verify_peer" {
                    return Err(invalid(
                        "verify_peer (inter-node TLS always checks the peer's certificate)",
                    ));
                }
            }
            "cluster.ssl_options.fail_if_no_peer_cert" => {
                if value != "true" {
                    return Err(invalid(
                        "true (inter-node TLS refuses a node without a certificate)",
                    ));
                }
            }
            "cluster.change_timeout" => {
                let millis: u64 = value
                    .parse()
                    .map_err(|_| invalid("milliseconds between 100 and 10000"))?;
                let timeout = Duration::from_millis(millis);
                if timeout < Duration::from_millis(100) || timeout > CHANGE_TIMEOUT_LIMIT {
                    return Err(invalid("milliseconds between 100 and 10000"));
                }
                self.change_timeout = Some(timeout);
            }
            _ => {
                let Some(index) = key
                    .strip_prefix("cluster_formation.classic_config.nodes.")
                    .filter(|n| !n.is_empty() && !n.contains('.'))
                else {
                    return Err(ConfigError::UnknownKey {
                        key: key.to_owned(),
                    });
                };
                let node = NodeAddress::parse(value).map_err(|e| invalid(&e))?;
                match self
                    .seeds
                    .iter_mut()
                    .find(|(existing, _)| existing == index)
                {
                    Some(entry) => entry.1 = node,
                    None => self.seeds.push((index.to_owned(), node)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inter_node_tls_takes_three_files_and_only_verifying_modes() {
        let mut cluster = ClusterSettings::default();
        assert!(!cluster.ssl.enabled());
        cluster
            .set("cluster.ssl_options.certfile", "/etc/warren/node.pem")
            .unwrap();
        cluster
            .set("cluster.ssl_options.keyfile", "/etc/warren/node.key")
            .unwrap();
        cluster
            .set("cluster.ssl_options.cacertfile", "/etc/warren/ca.pem")
            .unwrap();
        cluster
            .set("cluster.ssl_options.verify", "verify_peer")
            .unwrap();
        cluster
            .set("cluster.ssl_options.fail_if_no_peer_cert", "true")
            .unwrap();
        assert!(cluster.ssl.enabled());
        assert_eq!(
            cluster.ssl.keyfile.as_deref(),
            Some(std::path::Path::new("/etc/warren/node.key"))
        );
        assert!(cluster
            .set("cluster.ssl_options.verify", "verify_none")
            .is_err());
        assert!(cluster
            .set("cluster.ssl_options.fail_if_no_peer_cert", "false")
            .is_err());
        assert!(cluster.set("cluster.ssl_options.certfile", "").is_err());
        assert!(matches!(
            cluster.set("cluster.ssl_options.password", "x"),
            Err(ConfigError::UnknownKey { .. })
        ));
    }

    #[test]
    fn node_addresses_take_an_optional_port() {
        let plain = NodeAddress::parse("warren@127.0.0.2").unwrap();
        assert_eq!(plain.name, "warren@127.0.0.2");
        assert_eq!(plain.port, CLUSTER_PORT);
        let with_port = NodeAddress::parse("warren@127.0.0.3:30001").unwrap();
        assert_eq!(with_port.name, "warren@127.0.0.3");
        assert_eq!(with_port.host, "127.0.0.3");
        assert_eq!(with_port.port, 30001);
        assert_eq!(with_port.to_string(), "warren@127.0.0.3:30001");
        assert_eq!(with_port.socket_addr_string(), "127.0.0.3:30001");
        let named = NodeAddress::parse("rabbit@node-a").unwrap();
        assert_eq!(named.host, "node-a");
        assert!(NodeAddress::parse("127.0.0.1").is_err());
        assert!(NodeAddress::parse("@host").is_err());
        assert!(NodeAddress::parse("warren@").is_err());
        assert!(NodeAddress::parse("warren@host:notaport").is_err());
    }

    #[test]
    fn seed_keys_fill_the_list_in_order_and_turn_clustering_on() {
        let mut cluster = ClusterSettings::default();
        assert!(!cluster.enabled());
        cluster
            .set(
                "cluster_formation.classic_config.nodes.2",
                "warren@127.0.0.2",
            )
            .unwrap();
        cluster
            .set(
                "cluster_formation.classic_config.nodes.1",
                "warren@127.0.0.1:30000",
            )
            .unwrap();
        assert!(cluster.enabled());
        let names: Vec<&str> = cluster.seed_nodes().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["warren@127.0.0.2", "warren@127.0.0.1"]);
        assert!(matches!(
            cluster.set("cluster_formation.classic_config.nodes.3", "nobody"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            cluster.set("cluster_formation.peer_discovery_backend", "classic_config"),
            Err(ConfigError::UnknownKey { .. })
        ));
    }

    #[test]
    fn node_name_and_change_timeout_are_checked() {
        let mut cluster = ClusterSettings::default();
        cluster.set("node_name", "warren@127.0.0.1").unwrap();
        assert_eq!(cluster.node_name_or("ignored"), "warren@127.0.0.1");
        assert!(cluster.set("node_name", "warren@127.0.0.1:30000").is_err());
        assert!(cluster.set("cluster.change_timeout", "20000").is_err());
        cluster.set("cluster.change_timeout", "2000").unwrap();
        assert_eq!(cluster.change_timeout(), Duration::from_secs(2));
        cluster
            .set("cluster.listeners.tcp.default", "127.0.0.1:30000")
            .unwrap();
        assert_eq!(cluster.listener, Some(ListenAddr::new("127.0.0.1", 30000)));
    }
}
