//! Link addresses as RabbitMQ 4.x reads them.
//!
//! Version 2 (RabbitMQ 4.x): targets `/exchanges/:exchange/:routing-key`,
//! `/exchanges/:exchange` (routing key from each message's `subject`), `/queues/:queue` and
//! the null target (each message's `to` is a v2 target address); sources `/queues/:queue`.
//! Segments are percent-encoded. Version 1 (the 3.x plugin): `/exchange/X/K`, `/exchange/X`,
//! `/queue/Q`, `/queue` (key from `subject`), `/amq/queue/Q`, `/topic/K` (amq.topic).

/// Where a link (or a message of a null-target link) publishes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetAddress {
    /// An exchange, with a fixed routing key or the message `subject`.
    Exchange {
        /// The exchange name ("" is the default exchange).
        exchange: String,
        /// The routing key; `None` takes it from the message subject.
        routing_key: Option<String>,
    },
    /// A queue, through the default exchange; the queue must exist.
    Queue(String),
    /// The default exchange with the key taken from `subject` (v1 `/queue`).
    DefaultExchangeBySubject,
}

/// Why an address could not be used. The text names the address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressError(pub String);

fn invalid(address: &str) -> AddressError {
    AddressError(format!("invalid address '{address}'"))
}

/// Decodes one percent-encoded path segment. Characters that RFC 3986 does not allow
/// unencoded in a path segment (space, `%` without two hex digits, non-ASCII) make the
/// address invalid, as in RabbitMQ 4.x.
pub fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte == b'%' {
            let hex = segment.get(index + 1..index + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&byte) {
            out.push(byte);
            index += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes a name for use in a v2 address (RFC 3986 unreserved characters stay).
pub fn percent_encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Parses a target address (of a link, or the `to` of a message).
pub fn parse_target(address: &str) -> Result<TargetAddress, AddressError> {
    let segments: Vec<&str> = address.split('/').collect();
    let decode = |segment: &str| percent_decode(segment).ok_or_else(|| invalid(address));
    match segments.as_slice() {
        ["", "exchanges", exchange] if !exchange.is_empty() => {
            let exchange = decode(exchange)?;
            check_not_default(&exchange, address)?;
            Ok(TargetAddress::Exchange {
                exchange,
                routing_key: None,
            })
        }
        ["", "exchanges", exchange, key] if !exchange.is_empty() => {
            let exchange = decode(exchange)?;
            check_not_default(&exchange, address)?;
            Ok(TargetAddress::Exchange {
                exchange,
                routing_key: Some(decode(key)?),
            })
        }
        ["", "queues", queue] if !queue.is_empty() => Ok(TargetAddress::Queue(decode(queue)?)),
        // Version 1 addresses: names are not percent-encoded there.
        ["", "exchange", exchange] if !exchange.is_empty() => Ok(TargetAddress::Exchange {
            exchange: exchange.to_string(),
            routing_key: None,
        }),
        ["", "exchange", exchange, key] if !exchange.is_empty() => Ok(TargetAddress::Exchange {
            exchange: exchange.to_string(),
            routing_key: Some(key.to_string()),
        }),
        ["", "topic", key] => Ok(TargetAddress::Exchange {
            exchange: "amq.topic".to_string(),
            routing_key: Some(key.to_string()),
        }),
        ["", "queue"] => Ok(TargetAddress::DefaultExchangeBySubject),
        ["", "queue", queue] if !queue.is_empty() => Ok(TargetAddress::Queue(queue.to_string())),
        ["", "amq", "queue", queue] if !queue.is_empty() => {
            Ok(TargetAddress::Queue(queue.to_string()))
        }
        _ => Err(invalid(address)),
    }
}

fn check_not_default(exchange: &str, address: &str) -> Result<(), AddressError> {
    // RabbitMQ 4.x: the default exchange is addressed through /queues/:queue only.
    if exchange == "amq.default" {
        return Err(AddressError(format!(
            "invalid address '{address}': use /queues/:queue for the default exchange"
        )));
    }
    Ok(())
}

/// Parses a source address; sources are queues.
pub fn parse_source(address: &str) -> Result<String, AddressError> {
    let segments: Vec<&str> = address.split('/').collect();
    match segments.as_slice() {
        ["", "queues", queue] if !queue.is_empty() => {
            percent_decode(queue).ok_or_else(|| invalid(address))
        }
        ["", "queue", queue] | ["", "amq", "queue", queue] if !queue.is_empty() => {
            Ok(queue.to_string())
        }
        _ => Err(invalid(address)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exchange(name: &str, key: Option<&str>) -> TargetAddress {
        TargetAddress::Exchange {
            exchange: name.to_string(),
            routing_key: key.map(str::to_string),
        }
    }

    #[test]
    fn version_2_targets() {
        assert_eq!(
            parse_target("/exchanges/amq.direct/k").unwrap(),
            exchange("amq.direct", Some("k"))
        );
        assert_eq!(
            parse_target("/exchanges/my%20ex").unwrap(),
            exchange("my ex", None)
        );
        assert_eq!(
            parse_target("/exchanges/x/a%2Fb").unwrap(),
            exchange("x", Some("a/b"))
        );
        assert_eq!(
            parse_target("/exchanges/x/").unwrap(),
            exchange("x", Some(""))
        );
        assert_eq!(
            parse_target("/queues/q%2F1").unwrap(),
            TargetAddress::Queue("q/1".into())
        );
        assert!(parse_target("/exchanges/amq.default/k").is_err());
        assert!(parse_target("/queues/").is_err());
        assert!(parse_target("/queues/%zz").is_err());
        assert!(parse_target("queues/q").is_err());
        assert!(parse_target("/exchanges/x/k/extra").is_err());
        assert!(parse_target("/exchanges//mykey").is_err());
        assert!(parse_target("/queues/missing%encoding").is_err());
        assert!(parse_target("/queues/not encoded").is_err());
        assert!(parse_target("/queues/\u{270b}").is_err());
        assert!(parse_target("/exchanges/%2B").is_ok());
    }

    #[test]
    fn version_1_targets() {
        assert_eq!(
            parse_target("/exchange/x/k").unwrap(),
            exchange("x", Some("k"))
        );
        assert_eq!(parse_target("/exchange/x").unwrap(), exchange("x", None));
        assert_eq!(
            parse_target("/topic/a.b").unwrap(),
            exchange("amq.topic", Some("a.b"))
        );
        assert_eq!(
            parse_target("/queue/q").unwrap(),
            TargetAddress::Queue("q".into())
        );
        assert_eq!(
            parse_target("/amq/queue/q").unwrap(),
            TargetAddress::Queue("q".into())
        );
        assert_eq!(
            parse_target("/queue").unwrap(),
            TargetAddress::DefaultExchangeBySubject
        );
    }

    #[test]
    fn sources() {
        assert_eq!(parse_source("/queues/a%20b").unwrap(), "a b");
        assert_eq!(parse_source("/queue/q").unwrap(), "q");
        assert_eq!(parse_source("/amq/queue/q").unwrap(), "q");
        assert!(parse_source("/exchanges/x").is_err());
    }

    proptest! {
        #[test]
        fn encoded_names_round_trip(name in "\\PC{1,20}") {
            let address = format!("/queues/{}", percent_encode(&name));
            prop_assert_eq!(parse_source(&address).unwrap(), name);
        }

        #[test]
        fn arbitrary_addresses_never_panic(address in "\\PC{0,40}") {
            let _ = parse_target(&address);
            let _ = parse_source(&address);
        }
    }
}
