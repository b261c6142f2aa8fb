//! Topic names, topic filters (section 4.7) and their translation to AMQP routing and binding
//! keys. Pure functions, no state.
//!
//! Warren routes MQTT messages through a topic exchange, as RabbitMQ does through
//! `amq.topic`, so MQTT and AMQP clients see each other's messages. The translation is
//! RabbitMQ's (3.8 and later, `rabbit_mqtt_util:mqtt_to_amqp/1` and `amqp_to_mqtt/1`): the
//! level separators are swapped, so a `.` inside an MQTT topic level survives the round trip.
//!
//! | MQTT | AMQP | meaning |
//! | --- | --- | --- |
//! | `/` | `.` | level separator |
//! | `.` | `/` | an ordinary character inside a level |
//! | `+` | `*` | exactly one level |
//! | `#` | `#` | zero or more levels |
//!
//! An MQTT publish on `devices/42/temp` reaches an AMQP queue bound with `devices.*.temp`;
//! `spBv1.0/group` becomes `spBv1/0.group` and comes back to MQTT subscribers unchanged. A
//! `*` in an AMQP routing key reaches MQTT subscribers as `+`.

use std::borrow::Cow;
use std::fmt;

/// Why a topic name or filter is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicError {
    /// Topic names and filters must be at least one character long (MQTT-4.7.3-1).
    Empty,
    /// Longer than 65535 bytes, the most a UTF-8 string field can carry (MQTT-4.7.3-3).
    TooLong {
        /// The length in bytes.
        len: usize,
    },
    /// Contains U+0000 (MQTT-4.7.3-2).
    ContainsNul,
    /// A topic name (as published) contains `+` or `#` (MQTT-3.3.2-2, MQTT-4.7.1-1).
    WildcardInName,
    /// `#` that is not alone in the last level of a filter, as in `a/#/b` or `a/b#`
    /// (MQTT-4.7.1-2).
    MisplacedMultiLevelWildcard,
    /// `+` that does not occupy a whole level of a filter, as in `a+` or `a/+b`
    /// (MQTT-4.7.1-3).
    MisplacedSingleLevelWildcard,
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicError::Empty => f.write_str("topic is empty (MQTT-4.7.3-1)"),
            TopicError::TooLong { len } => {
                write!(
                    f,
                    "topic of {len} bytes is longer than 65535 bytes (MQTT-4.7.3-3)"
                )
            }
            TopicError::ContainsNul => {
                f.write_str("topic contains the null character U+0000 (MQTT-4.7.3-2)")
            }
            TopicError::WildcardInName => {
                f.write_str("topic name contains a wildcard '+' or '#' (MQTT-3.3.2-2)")
            }
            TopicError::MisplacedMultiLevelWildcard => {
                f.write_str("'#' must be alone in the last level of a topic filter (MQTT-4.7.1-2)")
            }
            TopicError::MisplacedSingleLevelWildcard => {
                f.write_str("'+' must occupy a whole level of a topic filter (MQTT-4.7.1-3)")
            }
        }
    }
}

impl std::error::Error for TopicError {}

/// Checks what every topic string must satisfy: non-empty, not too long, no U+0000.
fn validate_common(topic: &str) -> Result<(), TopicError> {
    if topic.is_empty() {
        return Err(TopicError::Empty);
    }
    if topic.len() > usize::from(u16::MAX) {
        return Err(TopicError::TooLong { len: topic.len() });
    }
    if topic.contains('\0') {
        return Err(TopicError::ContainsNul);
    }
    Ok(())
}

/// Checks a topic name, as carried by PUBLISH and a CONNECT will: non-empty and free of
/// wildcards. Empty levels (`a//b`, `/a`) and a leading `$` are allowed.
pub fn validate_topic_name(topic: &str) -> Result<(), TopicError> {
    validate_common(topic)?;
    if topic.contains(['+', '#']) {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Checks a topic filter, as carried by SUBSCRIBE and UNSUBSCRIBE: `#` only as the whole
/// last level, `+` only as a whole level.
pub fn validate_topic_filter(filter: &str) -> Result<(), TopicError> {
    validate_common(filter)?;
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        if level.contains('#') && (level != "#" || levels.peek().is_some()) {
            return Err(TopicError::MisplacedMultiLevelWildcard);
        }
        if level.contains('+') && level != "+" {
            return Err(TopicError::MisplacedSingleLevelWildcard);
        }
    }
    Ok(())
}

/// Whether a message published to `topic` matches the subscription `filter` (section
/// 4.7). Both are assumed valid ([`validate_topic_name`], [`validate_topic_filter`]).
///
/// `+` matches exactly one level, which may be empty; `#` matches the parent level and any
/// number of levels below it (`a/#` matches `a`, `a/b` and `a/b/c`). A filter starting with
/// a wildcard does not match a topic starting with `$` (MQTT-4.7.2-1), so `#` does not see
/// `$SYS/...`; `$SYS/#` does.
pub fn filter_matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut filter_levels = filter.split('/');
    let mut topic_levels = topic.split('/');
    loop {
        match (filter_levels.next(), topic_levels.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(filter_level), Some(topic_level)) if filter_level == topic_level => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Replaces ASCII characters, borrowing when there is nothing to replace (the common case
/// for single-level topics), so a translation costs no allocation then.
fn replace_ascii<'a>(text: &'a str, pairs: &[(char, char)]) -> Cow<'a, str> {
    if !text.contains(|c| pairs.iter().any(|&(from, _)| c == from)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                pairs
                    .iter()
                    .find(|&&(from, _)| from == c)
                    .map_or(c, |&(_, to)| to)
            })
            .collect(),
    )
}

/// The AMQP routing key for an MQTT topic name: `/` becomes `.` and `.` becomes `/`
/// (RabbitMQ's `mqtt_to_amqp`).
pub fn mqtt_topic_to_routing_key(topic: &str) -> Cow<'_, str> {
    // RabbitMQ runs topic names and filters through the same function; a valid topic name
    // has no '+', so the last pair never applies to one.
    replace_ascii(topic, &[('/', '.'), ('.', '/'), ('+', '*')])
}

/// The AMQP binding key for an MQTT topic filter: `/` becomes `.`, `.` becomes `/`, `+`
/// becomes `*`, `#` stays `#` (RabbitMQ's `mqtt_to_amqp`).
pub fn mqtt_filter_to_binding_key(filter: &str) -> Cow<'_, str> {
    replace_ascii(filter, &[('/', '.'), ('.', '/'), ('+', '*')])
}

/// The MQTT topic name for an AMQP routing key, for deliveries to MQTT subscribers: `.`
/// becomes `/`, `/` becomes `.` and `*` becomes `+` (RabbitMQ's `amqp_to_mqtt`).
pub fn routing_key_to_mqtt_topic(routing_key: &str) -> Cow<'_, str> {
    replace_ascii(routing_key, &[('.', '/'), ('/', '.'), ('*', '+')])
}

/// The MQTT topic filter an AMQP binding key stands for: the inverse of
/// [`mqtt_filter_to_binding_key`], used to rebuild a session's subscriptions from bindings.
pub fn binding_key_to_mqtt_filter(binding_key: &str) -> Cow<'_, str> {
    replace_ascii(binding_key, &[('.', '/'), ('/', '.'), ('*', '+')])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_section_4_7() {
        for ok in [
            "a",
            "a/b",
            "/",
            "//",
            "/a",
            "a/",
            "$SYS/broker",
            "sport/tennis player1",
        ] {
            assert_eq!(validate_topic_name(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(validate_topic_name(""), Err(TopicError::Empty));
        assert_eq!(validate_topic_name("a/+"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic_name("a/#"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic_name("a#b"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic_name("a\0b"), Err(TopicError::ContainsNul));
        let long = "x".repeat(65_536);
        assert_eq!(
            validate_topic_name(&long),
            Err(TopicError::TooLong { len: 65_536 })
        );
        assert_eq!(validate_topic_name(&long[1..]), Ok(()));
    }

    #[test]
    fn topic_filters_follow_section_4_7_1() {
        for ok in [
            "#", "+", "a/#", "a/+", "+/+", "+/a/#", "/#", "a//+", "$SYS/#", "a/b", "/",
        ] {
            assert_eq!(validate_topic_filter(ok), Ok(()), "{ok:?}");
        }
        for (bad, error) in [
            ("a/#/b", TopicError::MisplacedMultiLevelWildcard),
            ("a/b#", TopicError::MisplacedMultiLevelWildcard),
            ("#/", TopicError::MisplacedMultiLevelWildcard),
            ("##", TopicError::MisplacedMultiLevelWildcard),
            ("a+", TopicError::MisplacedSingleLevelWildcard),
            ("a/+b", TopicError::MisplacedSingleLevelWildcard),
            ("++", TopicError::MisplacedSingleLevelWildcard),
            ("", TopicError::Empty),
            ("a/\0", TopicError::ContainsNul),
        ] {
            assert_eq!(validate_topic_filter(bad), Err(error), "{bad:?}");
        }
    }

    #[test]
    fn filter_matching_table() {
        // (filter, topic, matches): the examples of sections 4.7.1 and 4.7.2 and more.
        let table = [
            ("sport/tennis/player1/#", "sport/tennis/player1", true),
            (
                "sport/tennis/player1/#",
                "sport/tennis/player1/ranking",
                true,
            ),
            (
                "sport/tennis/player1/#",
                "sport/tennis/player1/score/wimbledon",
                true,
            ),
            ("sport/#", "sport", true),
            ("#", "sport", true),
            ("#", "/", true),
            ("sport/tennis/+", "sport/tennis/player1", true),
            ("sport/tennis/+", "sport/tennis/player1/ranking", false),
            ("sport/+", "sport", false),
            ("sport/+", "sport/", true),
            ("+/+", "/finance", true),
            ("/+", "/finance", true),
            ("+", "/finance", false),
            ("+", "finance", true),
            ("a/b", "a/b", true),
            ("a/b", "a/b/", false),
            ("a/b", "a", false),
            ("a/+/c", "a/b/c", true),
            ("a/+/c", "a//c", true),
            ("a/+/c", "a/b/d", false),
            ("+/b/#", "a/b", true),
            ("Sport", "sport", false),
            // $-topics are not matched by a leading wildcard (MQTT-4.7.2-1).
            ("#", "$SYS/broker/clients", false),
            ("+/monitor/Clients", "$SYS/monitor/Clients", false),
            ("$SYS/#", "$SYS/monitor/Clients", true),
            ("$SYS/monitor/+", "$SYS/monitor/Clients", true),
            ("$SYS", "$SYS", true),
            // Only a leading '$' is special.
            ("a/#", "a/$SYS", true),
            ("+/x", "a$/x", true),
        ];
        for (filter, topic, expected) in table {
            assert_eq!(
                filter_matches(filter, topic),
                expected,
                "filter {filter:?} topic {topic:?}"
            );
        }
    }

    #[test]
    fn mqtt_topics_translate_to_rabbitmq_routing_keys() {
        assert_eq!(mqtt_topic_to_routing_key("cities/london"), "cities.london");
        assert_eq!(mqtt_topic_to_routing_key("/a/b/"), ".a.b.");
        // Dots and slashes swap, as in RabbitMQ 3.8+.
        assert_eq!(mqtt_topic_to_routing_key("spBv1.0/g"), "spBv1/0.g");
        assert_eq!(
            mqtt_topic_to_routing_key("devices/42/temp"),
            "devices.42.temp"
        );
        assert!(matches!(
            mqtt_topic_to_routing_key("plain"),
            Cow::Borrowed("plain")
        ));

        assert_eq!(mqtt_filter_to_binding_key("a/+/c/#"), "a.*.c.#");
        assert_eq!(mqtt_filter_to_binding_key("#"), "#");
        assert_eq!(mqtt_filter_to_binding_key("+"), "*");
        assert_eq!(mqtt_filter_to_binding_key("$SYS/#"), "$SYS.#");

        assert_eq!(routing_key_to_mqtt_topic("cities.london"), "cities/london");
        assert_eq!(routing_key_to_mqtt_topic("a.*.#"), "a/+/#");
        assert_eq!(routing_key_to_mqtt_topic("v1/0.x"), "v1.0/x");
        assert_eq!(mqtt_filter_to_binding_key("v1.0/+"), "v1/0.*");
        assert_eq!(binding_key_to_mqtt_filter("v1/0.*.#"), "v1.0/+/#");
        assert!(matches!(
            routing_key_to_mqtt_topic("plain"),
            Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn translation_round_trips() {
        for topic in ["a/b/c", "/a", "a//b", "x", "€/ü", "a.b/c", "spBv1.0/g/./x"] {
            let key = mqtt_topic_to_routing_key(topic);
            assert_eq!(routing_key_to_mqtt_topic(&key), topic);
        }
        for filter in ["a/+/c.d/#", "+", "#", "x.y"] {
            let key = mqtt_filter_to_binding_key(filter);
            assert_eq!(binding_key_to_mqtt_filter(&key), filter);
        }
    }
}
