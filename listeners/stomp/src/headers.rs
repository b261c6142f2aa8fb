//! STOMP headers to and from the core's AMQP properties (see docs/protocol-mapping.md).
//!
//! On SEND, the headers RabbitMQ's STOMP plugin maps become properties, and every other
//! header (except the frame-control ones: `destination`, `content-length`, `receipt`,
//! `transaction`) becomes an AMQP header with a string value. On delivery the properties
//! come back as the same headers, and AMQP headers with string, integer or boolean values
//! become STOMP headers; other value types have no STOMP form and are left out.

use std::borrow::Cow;

use warren_core::message::{parse_expiration, Properties};
use warren_core::value::{Table, Value};

use crate::codec::Frame;
use crate::destination::has_destination_prefix;
use crate::error::StompError;

/// Headers that map onto a property (or control the frame) and never become AMQP headers.
const NOT_USER_HEADERS: &[&str] = &[
    "content-type",
    "content-encoding",
    "persistent",
    "priority",
    "correlation-id",
    "reply-to",
    "expiration",
    "amqp-message-id",
    "timestamp",
    "type",
    "user-id",
    "app-id",
    "destination",
    "content-length",
    "receipt",
    "transaction",
];

/// Whether a STOMP boolean header says true (`true` or `True`, as RabbitMQ reads them).
pub fn is_true(value: Option<&str>) -> bool {
    matches!(value, Some("true" | "True"))
}

fn integer<T: std::str::FromStr>(
    frame: &Frame,
    name: &str,
    expected: &str,
) -> Result<Option<T>, StompError> {
    match frame.header(name) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| StompError::invalid_header(name, expected, text)),
    }
}

/// The properties a SEND frame's headers ask for. `reply_to` is passed in because a
/// `/temp-queue/` reply-to has already been rewritten to a queue name.
pub fn properties_from_send(
    frame: &Frame,
    reply_to: Option<String>,
) -> Result<Properties, StompError> {
    let text = |name: &str| frame.header(name).map(str::to_string);
    let priority = integer::<u8>(frame, "priority", "an integer from 0 to 255")?;
    let timestamp = integer::<u64>(frame, "timestamp", "a non-negative integer (seconds)")?;
    let expiration = text("expiration");
    if let Some(expiration) = &expiration {
        parse_expiration(expiration).map_err(StompError::invalid_header_value)?;
    }
    let mut headers = Table::new();
    for (name, value) in &frame.headers {
        if NOT_USER_HEADERS.contains(&name.as_str()) || headers.get(name).is_some() {
            continue;
        }
        headers.insert(name.clone(), Value::string(value.clone()));
    }
    Ok(Properties {
        content_type: text("content-type"),
        content_encoding: text("content-encoding"),
        headers: (!headers.is_empty()).then_some(headers),
        delivery_mode: is_true(frame.header("persistent")).then_some(2),
        priority,
        correlation_id: text("correlation-id"),
        reply_to,
        expiration,
        message_id: text("amqp-message-id"),
        timestamp,
        message_type: text("type"),
        user_id: text("user-id"),
        app_id: text("app-id"),
        cluster_id: None,
    })
}

/// The STOMP headers a delivered message carries for its properties, in RabbitMQ's order,
/// then its AMQP headers.
pub fn message_headers(properties: &Properties) -> Vec<(&str, Cow<'_, str>)> {
    let mut out: Vec<(&str, Cow<'_, str>)> = Vec::new();
    for (name, value) in [
        ("content-type", &properties.content_type),
        ("content-encoding", &properties.content_encoding),
        ("correlation-id", &properties.correlation_id),
        ("expiration", &properties.expiration),
        ("amqp-message-id", &properties.message_id),
        ("type", &properties.message_type),
        ("user-id", &properties.user_id),
        ("app-id", &properties.app_id),
    ] {
        if let Some(value) = value {
            out.push((name, Cow::Borrowed(value.as_str())));
        }
    }
    if properties.delivery_mode == Some(2) {
        out.push(("persistent", Cow::Borrowed("true")));
    }
    if let Some(priority) = properties.priority {
        out.push(("priority", Cow::Owned(priority.to_string())));
    }
    if let Some(timestamp) = properties.timestamp {
        out.push(("timestamp", Cow::Owned(timestamp.to_string())));
    }
    if let Some(reply_to) = &properties.reply_to {
        // A bare queue name (an AMQP client's reply queue) is turned into a destination a
        // STOMP client can SEND to.
        let value = if has_destination_prefix(reply_to) {
            Cow::Borrowed(reply_to.as_str())
        } else {
            Cow::Owned(format!("/reply-queue/{reply_to}"))
        };
        out.push(("reply-to", value));
    }
    if let Some(headers) = &properties.headers {
        for (name, value) in headers.iter() {
            let value = match value {
                Value::LongString(_) => match value.as_str() {
                    Some(text) => Cow::Borrowed(text),
                    None => continue,
                },
                Value::Bool(b) => Cow::Owned(b.to_string()),
                other => match other.as_i64() {
                    Some(number) => Cow::Owned(number.to_string()),
                    None => continue,
                },
            };
            out.push((name, value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Command;

    fn send(headers: &[(&str, &str)]) -> Frame {
        headers
            .iter()
            .fold(Frame::new(Command::Send), |frame, (name, value)| {
                frame.with_header(*name, *value)
            })
    }

    #[test]
    fn send_headers_become_properties_and_the_rest_amqp_headers() {
        let frame = send(&[
            ("destination", "/queue/q"),
            ("content-type", "text/plain"),
            ("persistent", "true"),
            ("priority", "5"),
            ("expiration", "60000"),
            ("amqp-message-id", "m1"),
            ("timestamp", "1700000000"),
            ("receipt", "r1"),
            ("x-custom", "v"),
            ("x-custom", "ignored repeat"),
        ]);
        let properties = properties_from_send(&frame, Some("reply".into())).unwrap();
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        assert_eq!(properties.delivery_mode, Some(2));
        assert_eq!(properties.priority, Some(5));
        assert_eq!(properties.expiration.as_deref(), Some("60000"));
        assert_eq!(properties.message_id.as_deref(), Some("m1"));
        assert_eq!(properties.timestamp, Some(1_700_000_000));
        assert_eq!(properties.reply_to.as_deref(), Some("reply"));
        let headers = properties.headers.unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(headers.get("x-custom").and_then(Value::as_str), Some("v"));
    }

    #[test]
    fn invalid_numeric_headers_are_refused() {
        for (name, value) in [
            ("priority", "high"),
            ("timestamp", "-1"),
            ("expiration", "x"),
        ] {
            let error = properties_from_send(&send(&[(name, value)]), None).unwrap_err();
            assert_eq!(error.message, "Invalid header", "{name}");
        }
    }

    #[test]
    fn properties_come_back_as_the_same_headers() {
        let mut headers = Table::new();
        headers.insert("s", Value::string("text"));
        headers.insert("n", Value::I32(-3));
        headers.insert("b", Value::Bool(true));
        headers.insert("dropped", Value::Array(vec![]));
        let properties = Properties {
            content_type: Some("application/json".into()),
            delivery_mode: Some(2),
            priority: Some(1),
            reply_to: Some("amq.gen-x".into()),
            timestamp: Some(7),
            headers: Some(headers),
            ..Properties::default()
        };
        let out: Vec<(&str, String)> = message_headers(&properties)
            .into_iter()
            .map(|(k, v)| (k, v.into_owned()))
            .collect();
        let get = |name: &str| {
            out.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("content-type"), Some("application/json"));
        assert_eq!(get("persistent"), Some("true"));
        assert_eq!(get("priority"), Some("1"));
        assert_eq!(get("timestamp"), Some("7"));
        assert_eq!(get("reply-to"), Some("/reply-queue/amq.gen-x"));
        assert_eq!(get("s"), Some("text"));
        assert_eq!(get("n"), Some("-3"));
        assert_eq!(get("b"), Some("true"));
        assert_eq!(get("dropped"), None);
    }
}
