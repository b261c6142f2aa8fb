//! Listener addresses as rabbitmq.conf writes them: `5672`, `127.0.0.1:5672`, `::1:5672`,
//! `[::1]:5672`, `localhost:5672`.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The host every interface is reached through when only a port is given.
const ALL_INTERFACES: &str = "0.0.0.0";

/// A host and port to listen on. The host is kept as text so names such as `localhost` resolve
/// at bind time; IPv6 literals are stored without brackets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListenAddr {
    /// An IPv4 or IPv6 literal (no brackets) or a host name.
    pub host: String,
    /// The TCP port; 0 asks the operating system for a free one (useful in tests).
    pub port: u16,
}

impl ListenAddr {
    /// An address from its parts.
    pub fn new(host: impl Into<String>, port: u16) -> ListenAddr {
        ListenAddr {
            host: host.into(),
            port,
        }
    }

    /// Parses `PORT` (all interfaces, `0.0.0.0`), `HOST:PORT`, `[IPV6]:PORT`, or RabbitMQ's
    /// unbracketed `IPV6:PORT` (as in `::1:5672` or `:::5672`, where the last colon separates
    /// the port). On failure, returns what is wrong with the text, such as
    /// `'1.2.3.999' is not an IPv4 address`.
    pub fn parse(text: &str) -> Result<ListenAddr, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the address is empty".to_owned());
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(ListenAddr::new(ALL_INTERFACES, parse_port(text)?));
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| "no closing ']' after the IPv6 address".to_owned())?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| "no ':PORT' after ']'".to_owned())?;
            if host.parse::<Ipv6Addr>().is_err() {
                return Err(format!("'{host}' is not an IPv6 address"));
            }
            (host, port)
        } else {
            let (host, port) = text
                .rsplit_once(':')
                .ok_or_else(|| format!("no ':PORT' after '{text}'"))?;
            validate_host(host)?;
            (host, port)
        };
        Ok(ListenAddr::new(host, parse_port(port)?))
    }

    /// Whether the host is an IPv6 literal.
    pub fn is_ipv6(&self) -> bool {
        self.host.parse::<Ipv6Addr>().is_ok()
    }

    /// The address in the form `TcpListener::bind` and `ToSocketAddrs` accept:
    /// `host:port`, with IPv6 literals in brackets.
    pub fn to_socket_addr_string(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_ipv6() {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Default for ListenAddr {
    /// All IPv4 interfaces on AMQP's port, 5672.
    fn default() -> ListenAddr {
        ListenAddr::new(ALL_INTERFACES, 5672)
    }
}

/// A port number, 0 to 65535.
fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() {
        return Err("the port is missing".to_owned());
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{port}' is not a port number"));
    }
    port.parse()
        .map_err(|_| format!("port {port} is above 65535"))
}

/// Accepts IPv6 literals, dotted IPv4 literals and DNS-style host names.
fn validate_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("the host is missing before ':PORT'".to_owned());
    }
    if host.contains(':') {
        return match host.parse::<Ipv6Addr>() {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("'{host}' is not an IPv6 address")),
        };
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return match host.parse::<Ipv4Addr>() {
            Ok(_) => Ok(()),
            Err(_) => Err(format!("'{host}' is not an IPv4 address")),
        };
    }
    let is_name = host.split('.').all(|label| {
        !label.is_empty()
            && !label.starts_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if is_name {
        Ok(())
    } else {
        Err(format!("'{host}' is not a host name or IP address"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (String, u16) {
        let addr = ListenAddr::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        (addr.host, addr.port)
    }

    #[test]
    fn bare_port_listens_on_all_ipv4_interfaces() {
        assert_eq!(parsed("5672"), ("0.0.0.0".into(), 5672));
        assert_eq!(parsed(" 0 "), ("0.0.0.0".into(), 0));
    }

    #[test]
    fn host_and_port_forms() {
        assert_eq!(parsed("127.0.0.1:5673"), ("127.0.0.1".into(), 5673));
        assert_eq!(parsed("localhost:5672"), ("localhost".into(), 5672));
        assert_eq!(
            parsed("broker-1.example.com:1"),
            ("broker-1.example.com".into(), 1)
        );
        assert_eq!(parsed("[::1]:5672"), ("::1".into(), 5672));
        assert_eq!(parsed("::1:5672"), ("::1".into(), 5672));
        assert_eq!(parsed(":::5672"), ("::".into(), 5672));
        assert_eq!(parsed("fe80::1:0"), ("fe80::1".into(), 0));
    }

    #[test]
    fn socket_addr_string_brackets_ipv6() {
        assert_eq!(
            ListenAddr::parse("::1:5672").map(|a| a.to_socket_addr_string()),
            Ok("[::1]:5672".into())
        );
        assert_eq!(
            ListenAddr::default().to_socket_addr_string(),
            "0.0.0.0:5672"
        );
        assert_eq!(ListenAddr::new("localhost", 0).to_string(), "localhost:0");
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        let cases = [
            ("", "the address is empty"),
            ("65536", "port 65536 is above 65535"),
            ("localhost:70000", "port 70000 is above 65535"),
            ("abc", "no ':PORT' after 'abc'"),
            ("host:", "the port is missing"),
            (":5672", "the host is missing before ':PORT'"),
            ("host:port", "'port' is not a port number"),
            ("1.2.3.999:5672", "'1.2.3.999' is not an IPv4 address"),
            ("[::1]5672", "no ':PORT' after ']'"),
            ("[::1:5672", "no closing ']' after the IPv6 address"),
            ("[nothost]:5672", "'nothost' is not an IPv6 address"),
            ("::1", "':' is not an IPv6 address"),
            (
                "bad host:5672",
                "'bad host' is not a host name or IP address",
            ),
            ("-x:1", "'-x' is not a host name or IP address"),
        ];
        for (text, reason) in cases {
            assert_eq!(ListenAddr::parse(text), Err(reason.to_owned()), "{text}");
        }
    }
}
