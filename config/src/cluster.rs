//! Clustering settings: `node_name`, `cluster_name`, the `cluster.` keys and RabbitMQ's seed
//! list `cluster_formation.classic_config.nodes.N` (docs/clustering.md).

use std::path::PathBuf;
use std::time::Duration;

use crate::listen_addr::ListenAddr;
use crate::settings::parse::required;
use crate::settings::Setting;

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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub change_timeout: Duration,
    /// `cluster.ssl_options.*`: TLS on the inter-node links.
    pub ssl: ClusterSsl,
}

impl Default for ClusterSettings {
    fn default() -> ClusterSettings {
        ClusterSettings {
            node_name: None,
            cluster_name: None,
            listener: None,
            secret_file: None,
            seeds: Vec::new(),
            change_timeout: Duration::from_secs(5),
            ssl: ClusterSsl::default(),
        }
    }
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

/// A non-empty file path.
fn file_path(value: &str) -> Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(required(value, "a file path")?)))
}

/// The clustering keys: each key's default, `--help` line and parser (see [`Setting`]).
pub const CLUSTER_SETTINGS: &[Setting] = &[
    Setting {
        key: "node_name",
        default: "",
        help: "warren@HOST: this node's name; HOST is the address peers use (warren@<hostname>)",
        apply: |s, _, v| {
            let node = NodeAddress::parse(v)?;
            if node.port != CLUSTER_PORT || v.trim().ends_with(&format!(":{CLUSTER_PORT}")) {
                return Err(
                    "warren@HOST without a port (set cluster.listeners.tcp.default)".into(),
                );
            }
            s.cluster.node_name = Some(node.name);
            Ok(())
        },
    },
    Setting {
        key: "cluster_name",
        default: "",
        help: "the cluster's name shown by the management API (the first seed's name)",
        apply: |s, _, v| {
            s.cluster.cluster_name = Some(required(v, "a non-empty name")?);
            Ok(())
        },
    },
    Setting {
        key: "cluster.listeners.tcp.default",
        default: "",
        help: "inter-node listener HOST:PORT (the node name's host, port 25672)",
        apply: |s, _, v| {
            let addr =
                ListenAddr::parse(v).map_err(|reason| format!("HOST:PORT or PORT ({reason})"))?;
            s.cluster.listener = Some(addr);
            Ok(())
        },
    },
    Setting {
        key: "cluster.secret_file",
        default: "",
        help: "shared secret file, mode 0600 (<data_dir>/cluster.secret, created when absent)",
        apply: |s, _, v| {
            s.cluster.secret_file = file_path(v)?;
            Ok(())
        },
    },
    Setting {
        key: "cluster.change_timeout",
        default: "5000",
        help: "ms a metadata change waits for a majority before it is refused, <= 10000",
        apply: |s, _, v| {
            const EXPECTED: &str = "milliseconds between 100 and 10000";
            let timeout = Duration::from_millis(v.parse().map_err(|_| EXPECTED)?);
            if timeout < Duration::from_millis(100) || timeout > CHANGE_TIMEOUT_LIMIT {
                return Err(EXPECTED.to_owned());
            }
            s.cluster.change_timeout = timeout;
            Ok(())
        },
    },
    Setting {
        key: "cluster.ssl_options.certfile",
        default: "",
        help: "PEM certificate of this node for TLS on inter-node links (with keyfile, cacertfile)",
        apply: |s, _, v| {
            s.cluster.ssl.certfile = file_path(v)?;
            Ok(())
        },
    },
    Setting {
        key: "cluster.ssl_options.keyfile",
        default: "",
        help: "PEM private key for inter-node TLS",
        apply: |s, _, v| {
            s.cluster.ssl.keyfile = file_path(v)?;
            Ok(())
        },
    },
    Setting {
        key: "cluster.ssl_options.cacertfile",
        default: "",
        help: "PEM CA certificates every node's certificate is checked against",
        apply: |s, _, v| {
            s.cluster.ssl.cacertfile = file_path(v)?;
            Ok(())
        },
    },
    Setting {
        key: "cluster.ssl_options.verify",
        default: "verify_peer",
        help: "verify_peer (the only value: inter-node TLS always checks peers)",
        apply: |_, _, v| match v {
            "verify_peer" => Ok(()),
            _ => Err("verify_peer (inter-node TLS always checks the peer's certificate)".into()),
        },
    },
    Setting {
        key: "cluster.ssl_options.fail_if_no_peer_cert",
        default: "true",
        help: "true (the only value: a node without a certificate is refused)",
        apply: |_, _, v| match v {
            "true" => Ok(()),
            _ => Err("true (inter-node TLS refuses a node without a certificate)".into()),
        },
    },
    Setting {
        key: "cluster_formation.classic_config.nodes.<N>",
        default: "",
        help: "a seed node: warren@HOST or warren@HOST:PORT; any seed turns clustering on",
        apply: |s, index, v| {
            let node = NodeAddress::parse(v)?;
            let seeds = &mut s.cluster.seeds;
            match seeds.iter_mut().find(|(existing, _)| existing == index) {
                Some(entry) => entry.1 = node,
                None => seeds.push((index.to_owned(), node)),
            }
            Ok(())
        },
    },
];

impl ClusterSettings {
    /// Whether this node runs clustered: it has a seed list or an explicit cluster listener.
    /// Otherwise it runs exactly as a single node, with no inter-node listener.
    pub fn enabled(&self) -> bool {
        !self.seeds.is_empty() || self.listener.is_some()
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
        self.change_timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ConfigError;

    #[test]
    fn inter_node_tls_takes_three_files_and_only_verifying_modes() {
        let mut settings = crate::Settings::default();
        assert!(!settings.cluster.ssl.enabled());
        settings
            .set("cluster.ssl_options.certfile", "/etc/warren/node.pem")
            .unwrap();
        settings
            .set("cluster.ssl_options.keyfile", "/etc/warren/node.key")
            .unwrap();
        settings
            .set("cluster.ssl_options.cacertfile", "/etc/warren/ca.pem")
            .unwrap();
        settings
            .set("cluster.ssl_options.verify", "verify_peer")
            .unwrap();
        settings
            .set("cluster.ssl_options.fail_if_no_peer_cert", "true")
            .unwrap();
        assert!(settings.cluster.ssl.enabled());
        assert_eq!(
            settings.cluster.ssl.keyfile.as_deref(),
            Some(std::path::Path::new("/etc/warren/node.key"))
        );
        assert!(settings
            .set("cluster.ssl_options.verify", "verify_none")
            .is_err());
        assert!(settings
            .set("cluster.ssl_options.fail_if_no_peer_cert", "false")
            .is_err());
        assert!(settings.set("cluster.ssl_options.certfile", "").is_err());
        assert!(matches!(
            settings.set("cluster.ssl_options.password", "x"),
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
        let mut settings = crate::Settings::default();
        assert!(!settings.cluster.enabled());
        settings
            .set(
                "cluster_formation.classic_config.nodes.2",
                "warren@127.0.0.2",
            )
            .unwrap();
        settings
            .set(
                "cluster_formation.classic_config.nodes.1",
                "warren@127.0.0.1:30000",
            )
            .unwrap();
        assert!(settings.cluster.enabled());
        let names: Vec<&str> = settings
            .cluster
            .seed_nodes()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["warren@127.0.0.2", "warren@127.0.0.1"]);
        assert!(matches!(
            settings.set("cluster_formation.classic_config.nodes.3", "nobody"),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            settings.set("cluster_formation.peer_discovery_backend", "classic_config"),
            Err(ConfigError::UnknownKey { .. })
        ));
    }

    #[test]
    fn node_name_and_change_timeout_are_checked() {
        let mut settings = crate::Settings::default();
        settings.set("node_name", "warren@127.0.0.1").unwrap();
        assert_eq!(settings.cluster.node_name_or("ignored"), "warren@127.0.0.1");
        assert!(settings.set("node_name", "warren@127.0.0.1:30000").is_err());
        assert!(settings.set("cluster.change_timeout", "20000").is_err());
        settings.set("cluster.change_timeout", "2000").unwrap();
        assert_eq!(settings.cluster.change_timeout(), Duration::from_secs(2));
        settings
            .set("cluster.listeners.tcp.default", "127.0.0.1:30000")
            .unwrap();
        assert_eq!(
            settings.cluster.listener,
            Some(ListenAddr::new("127.0.0.1", 30000))
        );
    }
}
