//! STOMP destinations as RabbitMQ's STOMP plugin defines them, and the way back from an
//! exchange and routing key to the `destination` header of a MESSAGE.
//!
//! | destination | SEND publishes to | SUBSCRIBE consumes from |
//! | --- | --- | --- |
//! | `/exchange/X[/K]` | exchange `X`, key `K` (or empty) | a new queue bound to `X` with `K` |
//! | `/queue/Q` (or plain `Q`) | default exchange, key `Q`; `Q` declared on first use | `Q`, declared on first use |
//! | `/amq/queue/Q` | default exchange, key `Q`; never declared | `Q`, which must exist |
//! | `/topic/T` | `amq.topic`, key `T` | a queue per subscription bound to `amq.topic` with `T` |
//! | `/temp-queue/N` | (only in `reply-to`) | (implicit: replies arrive on subscription `/temp-queue/N`) |
//! | `/reply-queue/Q` | default exchange, key `Q` | `Q`, which must exist |
//!
//! `%2F` in a name stands for `/`, so names with slashes can be written.

use crate::error::StompError;

/// A parsed destination header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `/exchange/<name>[/<pattern>]`.
    Exchange {
        /// The exchange.
        name: String,
        /// The routing key (SEND) or binding pattern (SUBSCRIBE); `None` when absent.
        pattern: Option<String>,
    },
    /// `/queue/<name>`, or a bare name: a queue declared on first use.
    Queue(String),
    /// `/amq/queue/<name>`: an existing queue, never declared.
    AmqQueue(String),
    /// `/topic/<name>`: `amq.topic` with this routing key.
    Topic(String),
    /// `/temp-queue/<name>`: a reply queue private to the connection.
    TempQueue(String),
    /// `/reply-queue/<name>`: a reply queue another connection created.
    ReplyQueue(String),
}

/// The destination prefixes, in the order RabbitMQ lists them in its error text.
pub const PREFIXES: &str = "/temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/";

/// The exchange STOMP topics live on.
pub const TOPIC_EXCHANGE: &str = "amq.topic";

impl Destination {
    /// Parses a `destination` (or `reply-to`) header the way RabbitMQ's STOMP plugin does:
    /// split on `/`, the first segments name the kind, the rest must be one non-empty name
    /// (two for an exchange with a pattern). An invalid name is reported by the part after
    /// the prefix (`/queue/bah/baz`: `'/bah/baz' is not a valid queue destination`).
    pub fn parse(text: &str) -> Result<Destination, StompError> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [""] => Err(StompError::blank_destination()),
            [name] => Ok(Destination::Queue(unescape(name))),
            ["", "exchange", rest @ ..] => match rest {
                [name] if !name.is_empty() => Ok(Destination::Exchange {
                    name: unescape(name),
                    pattern: None,
                }),
                [name, pattern] if !name.is_empty() => Ok(Destination::Exchange {
                    name: unescape(name),
                    pattern: Some(unescape(pattern)),
                }),
                _ => Err(StompError::invalid_destination("exchange", &to_url(rest))),
            },
            ["", "queue", rest @ ..] => single("queue", rest).map(Destination::Queue),
            ["", "topic", rest @ ..] => single("topic", rest).map(Destination::Topic),
            ["", "temp-queue", rest @ ..] => single("temp_queue", rest).map(Destination::TempQueue),
            ["", "amq", "queue", rest @ ..] => single("amqqueue", rest).map(Destination::AmqQueue),
            // Reply queue names may contain slashes: everything after the prefix is the name.
            ["", "reply-queue", _, ..] => match &text["/reply-queue/".len()..] {
                "" => Err(StompError::invalid_destination("reply_queue", "/")),
                name => Ok(Destination::ReplyQueue(name.to_string())),
            },
            _ => Err(StompError::unknown_destination(text, PREFIXES)),
        }
    }

    /// The exchange and routing key a SEND to this destination publishes with, or a
    /// SUBSCRIBE binds with.
    pub fn routing(&self) -> (&str, &str) {
        match self {
            Destination::Exchange { name, pattern } => (name, pattern.as_deref().unwrap_or("")),
            Destination::Topic(key) => (TOPIC_EXCHANGE, key),
            Destination::Queue(name)
            | Destination::AmqQueue(name)
            | Destination::ReplyQueue(name)
            | Destination::TempQueue(name) => ("", name),
        }
    }
}

/// The one name after a destination's prefix, or the error naming what was there instead.
fn single(kind: &str, rest: &[&str]) -> Result<String, StompError> {
    match rest {
        [name] if !name.is_empty() => Ok(unescape(name)),
        _ => Err(StompError::invalid_destination(kind, &to_url(rest))),
    }
}

/// The segments after a prefix as RabbitMQ prints them in an error: `/a/b`, or nothing.
fn to_url(rest: &[&str]) -> String {
    if rest.is_empty() {
        String::new()
    } else {
        format!("/{}", rest.join("/"))
    }
}

/// `%2F` back to `/`; any other `%` sequence is kept as written, as RabbitMQ does.
fn unescape(text: &str) -> String {
    text.replace("%2F", "/")
}

/// Whether a `reply-to` value already names a destination (and is passed on unchanged).
pub fn has_destination_prefix(text: &str) -> bool {
    [
        "/exchange",
        "/topic",
        "/queue",
        "/amq/queue",
        "/reply-queue/",
    ]
    .iter()
    .any(|prefix| text.starts_with(prefix))
}

/// The `destination` header of a MESSAGE for a message published to `exchange` with
/// `routing_key`: `/queue/K` for the default exchange, `/topic/K` for `amq.topic`,
/// `/exchange/X` or `/exchange/X/K` otherwise. `/`, `%` and bytes outside printable ASCII
/// are percent-encoded, so the header parses back to the same names.
pub fn format_destination(exchange: &str, routing_key: &str) -> String {
    let mut out = String::with_capacity(exchange.len() + routing_key.len() + 12);
    match (exchange, routing_key) {
        ("", key) => {
            out.push_str("/queue/");
            escape_into(&mut out, key);
        }
        (TOPIC_EXCHANGE, key) => {
            out.push_str("/topic/");
            escape_into(&mut out, key);
        }
        (name, "") => {
            out.push_str("/exchange/");
            escape_into(&mut out, name);
        }
        (name, key) => {
            out.push_str("/exchange/");
            escape_into(&mut out, name);
            out.push('/');
            escape_into(&mut out, key);
        }
    }
    out
}

fn escape_into(out: &mut String, text: &str) {
    for byte in text.bytes() {
        match byte {
            b'/' => out.push_str("%2F"),
            b'%' => out.push_str("%25"),
            32..=127 => out.push(char::from(byte)),
            other => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(HEX[usize::from(other >> 4)]));
                out.push(char::from(HEX[usize::from(other & 15)]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_destination_kind_parses() {
        assert_eq!(
            Destination::parse("/exchange/logs").unwrap(),
            Destination::Exchange {
                name: "logs".into(),
                pattern: None
            }
        );
        assert_eq!(
            Destination::parse("/exchange/amq.topic/a.*.c").unwrap(),
            Destination::Exchange {
                name: "amq.topic".into(),
                pattern: Some("a.*.c".into())
            }
        );
        assert_eq!(
            Destination::parse("/queue/a%2Fb").unwrap(),
            Destination::Queue("a/b".into())
        );
        assert_eq!(
            Destination::parse("plain").unwrap(),
            Destination::Queue("plain".into())
        );
        assert_eq!(
            Destination::parse("/amq/queue/q").unwrap(),
            Destination::AmqQueue("q".into())
        );
        assert_eq!(
            Destination::parse("/topic/x.y").unwrap(),
            Destination::Topic("x.y".into())
        );
        assert_eq!(
            Destination::parse("/temp-queue/r").unwrap(),
            Destination::TempQueue("r".into())
        );
        assert_eq!(
            Destination::parse("/reply-queue/stomp.gen-a/b").unwrap(),
            Destination::ReplyQueue("stomp.gen-a/b".into())
        );
    }

    #[test]
    fn malformed_and_unknown_destinations_are_refused_with_rabbitmq_texts() {
        let unknown = Destination::parse("/bogus/x").unwrap_err();
        assert_eq!(unknown.message, "Unknown destination");
        assert!(unknown
            .detail
            .starts_with("'/bogus/x' is not a valid destination."));
        for bad in [
            "/queue/",
            "/queue/a/b",
            "/exchange/",
            "/exchange/x/y/z",
            "/topic/",
            "",
        ] {
            let error = Destination::parse(bad).unwrap_err();
            assert_eq!(error.message, "Invalid destination", "{bad}");
        }
    }

    #[test]
    fn invalid_destinations_name_the_part_after_the_prefix_as_rabbitmq_does() {
        // The cases of RabbitMQ's STOMP test suite (errors.py), and a few more.
        for (destination, kind, after_prefix) in [
            ("/queue/bah/baz", "queue", "/bah/baz"),
            ("/queue", "queue", ""),
            ("/queue/", "queue", "/"),
            ("/topic/bah/baz", "topic", "/bah/baz"),
            ("/topic", "topic", ""),
            ("/exchange/bah/baz/boo", "exchange", "/bah/baz/boo"),
            ("/exchange", "exchange", ""),
            ("/exchange//foo", "exchange", "//foo"),
            ("/amq/queue/a/b", "amqqueue", "/a/b"),
            ("/temp-queue/", "temp_queue", "/"),
            ("/reply-queue/", "reply_queue", "/"),
        ] {
            let error = Destination::parse(destination).unwrap_err();
            assert_eq!(error.message, "Invalid destination", "{destination}");
            assert_eq!(
                error.detail,
                format!("'{after_prefix}' is not a valid {kind} destination\n"),
                "{destination}"
            );
        }
        let blank = Destination::parse("").unwrap_err();
        assert_eq!(
            (blank.message.as_str(), blank.detail.as_str()),
            ("Invalid destination", "Destination cannot be blank")
        );
        let unknown = Destination::parse("/something/interesting").unwrap_err();
        assert_eq!(unknown.message, "Unknown destination");
        assert_eq!(
            unknown.detail,
            "'/something/interesting' is not a valid destination.\nValid destination types are: /temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n"
        );
    }

    #[test]
    fn message_destinations_name_the_exchange_and_key() {
        assert_eq!(format_destination("", "q"), "/queue/q");
        assert_eq!(format_destination("amq.topic", "a.b"), "/topic/a.b");
        assert_eq!(format_destination("logs", ""), "/exchange/logs");
        assert_eq!(format_destination("x", "a/b%"), "/exchange/x/a%2Fb%25");
    }

    proptest! {
        #[test]
        fn formatted_destinations_parse_back_to_the_same_routing(
            exchange in "[a-z./%]{1,8}",
            key in "[a-z./%]{1,8}",
        ) {
            let formatted = format_destination(&exchange, &key);
            let parsed = Destination::parse(&formatted).unwrap();
            // %25 is not unescaped (as in RabbitMQ), so compare with '%' written back.
            let (x, k) = parsed.routing();
            prop_assert_eq!(x.replace("%25", "%"), exchange.clone());
            prop_assert_eq!(k.replace("%25", "%"), key.clone());
        }

        #[test]
        fn parsing_never_panics(text in ".{0,40}") {
            let _ = Destination::parse(&text);
        }
    }
}
