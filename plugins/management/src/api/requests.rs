//! Typed request bodies of the management API. Each handler parses its body into one of these
//! structs; a body that does not fit is answered 400 with RabbitMQ's error shape
//! (`{"error": "bad_request", "reason": ...}`) and a reason naming the field and what it
//! should be (`durable: expected true or false ...`), instead of a default silently taking
//! the place of a value the client got wrong.
//!
//! RabbitMQ accepts booleans and numbers as JSON values or as their text (`"true"`, `"10"`):
//! `rabbitmqadmin` sends `durable=false` and `count=5` as strings. These types accept both.
//! Fields RabbitMQ ignores (such as `vhost` in a queue body, which rabbitmqadmin sends) are
//! ignored here too.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value as Json};

use super::bad_request;
use crate::http::{Request, Response};

/// Parses a request's JSON body into `T`; an empty body is an empty object (so a struct whose
/// fields all have defaults accepts it).
pub(crate) fn parse<T: DeserializeOwned>(request: &Request) -> Result<T, Response> {
    parse_bytes(&request.body).map_err(bad_request)
}

/// [`parse`] on bytes, with the reason a user can act on.
pub(crate) fn parse_bytes<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            format!("body is not valid JSON: {inner}")
        } else if path == "." {
            format!("body: {inner}")
        } else {
            format!("{path}: {inner}")
        }
    })?;
    deserializer
        .end()
        .map_err(|error| format!("body is not valid JSON: {error}"))?;
    Ok(parsed)
}

/// A boolean given as JSON `true`/`false` or as the text `"true"`/`"false"`.
pub(crate) fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    struct FlagVisitor;
    impl Visitor<'_> for FlagVisitor {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("true or false (a JSON boolean or the text \"true\"/\"false\")")
        }
        fn visit_bool<E: de::Error>(self, value: bool) -> Result<bool, E> {
            Ok(value)
        }
        fn visit_str<E: de::Error>(self, value: &str) -> Result<bool, E> {
            match value {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
            }
        }
    }
    deserializer.deserialize_any(FlagVisitor)
}

fn yes() -> bool {
    true
}

/// A whole number given as a JSON number or as its text (`10`, `"10"`).
fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    struct IntegerVisitor;
    impl Visitor<'_> for IntegerVisitor {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number (a JSON number or its text, such as 10 or \"10\")")
        }
        fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
            Ok(value)
        }
        fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
            i64::try_from(value)
                .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(value), &self))
        }
        fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
            Err(E::invalid_value(de::Unexpected::Float(value), &self))
        }
        fn visit_str<E: de::Error>(self, value: &str) -> Result<i64, E> {
            value
                .trim()
                .parse()
                .map_err(|_| E::invalid_value(de::Unexpected::Str(value), &self))
        }
    }
    deserializer.deserialize_any(IntegerVisitor)
}

/// A count: a whole number that is not negative, as a JSON number or its text.
fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = integer(deserializer)?;
    u64::try_from(value).map_err(|_| {
        de::Error::invalid_value(de::Unexpected::Signed(value), &"a count of 0 or more")
    })
}

fn optional_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    count(deserializer).map(Some)
}

fn optional_flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    flag(deserializer).map(Some)
}

/// `arguments`, `headers`, `definition`: a JSON object; `null` or absent is empty.
fn object<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Map<String, Json>, D::Error> {
    Option::<Map<String, Json>>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// `PUT /api/exchanges/VHOST/NAME`.
#[derive(Debug, Deserialize)]
pub(crate) struct ExchangeBody {
    /// `direct`, `fanout`, `topic`, `headers`, or a plugin's type.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default = "yes", deserialize_with = "flag")]
    pub durable: bool,
    #[serde(default, deserialize_with = "flag")]
    pub auto_delete: bool,
    #[serde(default, deserialize_with = "flag")]
    pub internal: bool,
    #[serde(default, deserialize_with = "object")]
    pub arguments: Map<String, Json>,
}

/// `PUT /api/queues/VHOST/NAME`.
#[derive(Debug, Deserialize)]
pub(crate) struct QueueBody {
    #[serde(default = "yes", deserialize_with = "flag")]
    pub durable: bool,
    #[serde(default, deserialize_with = "flag")]
    pub auto_delete: bool,
    #[serde(default, deserialize_with = "object")]
    pub arguments: Map<String, Json>,
    /// `classic`, `quorum` or `stream`; `x-queue-type` in the arguments wins.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// `POST /api/bindings/VHOST/e/SOURCE/q|e/DESTINATION`.
#[derive(Debug, Deserialize)]
pub(crate) struct BindingBody {
    #[serde(default)]
    pub routing_key: String,
    #[serde(default, deserialize_with = "object")]
    pub arguments: Map<String, Json>,
}

/// How a published payload is written.
#[derive(Debug, Default, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PayloadEncoding {
    /// The payload is the body's text.
    #[default]
    String,
    /// The payload is the body in base64.
    Base64,
}

/// The `properties` of a message published through the API (AMQP 0-9-1's basic properties).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PropertiesBody {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    #[serde(default, deserialize_with = "optional_object")]
    pub headers: Option<Map<String, Json>>,
    #[serde(default, deserialize_with = "optional_octet")]
    pub delivery_mode: Option<u8>,
    #[serde(default, deserialize_with = "optional_octet")]
    pub priority: Option<u8>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    /// The per-message TTL in milliseconds, as text (AMQP 0-9-1 carries it as a string).
    pub expiration: Option<String>,
    pub message_id: Option<String>,
    #[serde(default, deserialize_with = "optional_count")]
    pub timestamp: Option<u64>,
    #[serde(rename = "type")]
    pub message_type: Option<String>,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub cluster_id: Option<String>,
}

fn optional_object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Map<String, Json>>, D::Error> {
    Option::<Map<String, Json>>::deserialize(deserializer)
}

/// `delivery_mode`, `priority`: 0 to 255.
fn optional_octet<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u8>, D::Error> {
    let value = integer(deserializer)?;
    u8::try_from(value).map(Some).map_err(|_| {
        de::Error::invalid_value(de::Unexpected::Signed(value), &"a number from 0 to 255")
    })
}

/// `POST /api/exchanges/VHOST/NAME/publish`.
#[derive(Debug, Deserialize)]
pub(crate) struct PublishBody {
    #[serde(default)]
    pub routing_key: String,
    #[serde(default)]
    pub payload: String,
    #[serde(default)]
    pub payload_encoding: PayloadEncoding,
    #[serde(default)]
    pub properties: Option<PropertiesBody>,
}

/// What `POST /api/queues/VHOST/NAME/get` does with the messages it took.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AckMode {
    /// Back in the queue, marked redelivered.
    AckRequeueTrue,
    /// Acknowledged: gone.
    AckRequeueFalse,
    /// Rejected and requeued.
    RejectRequeueTrue,
    /// Rejected: dead-lettered or dropped.
    RejectRequeueFalse,
}

/// How fetched payloads are written: as text when they are UTF-8 (`auto`), or always base64.
#[derive(Debug, Default, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Encoding {
    /// Text when the body is UTF-8, else base64.
    #[default]
    Auto,
    /// Always base64.
    Base64,
}

impl Encoding {
    /// Reads `?encoding=` of a browse request.
    pub(crate) fn from_query(value: Option<&str>) -> Result<Encoding, String> {
        match value {
            None | Some("auto") => Ok(Encoding::Auto),
            Some("base64") => Ok(Encoding::Base64),
            Some(other) => Err(format!(
                "encoding: unknown variant `{other}`, expected `auto` or `base64`"
            )),
        }
    }
}

/// `POST /api/queues/VHOST/NAME/get`.
#[derive(Debug, Deserialize)]
pub(crate) struct GetBody {
    #[serde(default = "one", deserialize_with = "count")]
    pub count: u64,
    pub ackmode: AckMode,
    #[serde(default)]
    pub encoding: Encoding,
    /// Payloads longer than this many bytes are cut.
    #[serde(default, deserialize_with = "optional_count")]
    pub truncate: Option<u64>,
}

fn one() -> u64 {
    1
}

/// `PUT /api/vhosts/NAME`.
#[derive(Debug, Deserialize)]
pub(crate) struct VhostBody {
    #[serde(default)]
    pub default_queue_type: Option<String>,
    #[serde(default, deserialize_with = "optional_flag")]
    pub tracing: Option<bool>,
}

/// `PUT /api/users/NAME`.
#[derive(Debug, Deserialize)]
pub(crate) struct UserBody {
    pub password: Option<String>,
    pub password_hash: Option<String>,
    pub hashing_algorithm: Option<String>,
    /// `"administrator,monitoring"` or `["administrator", "monitoring"]`.
    #[serde(default)]
    pub tags: Tags,
}

/// A user's tags, as a comma-separated string or a list.
#[derive(Debug, Default)]
pub(crate) struct Tags(pub Vec<String>);

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Tags, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Text(String),
            List(Vec<String>),
            Nothing(()),
        }
        let given = Given::deserialize(deserializer).map_err(|_| {
            de::Error::custom("expected the tags as a comma-separated string or a list of strings")
        })?;
        Ok(Tags(match given {
            Given::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            Given::List(list) => list,
            Given::Nothing(()) => Vec::new(),
        }))
    }
}

/// `PUT /api/permissions/VHOST/USER`.
#[derive(Debug, Deserialize)]
pub(crate) struct PermissionBody {
    pub configure: String,
    pub write: String,
    pub read: String,
}

/// `PUT /api/topic-permissions/VHOST/USER`.
#[derive(Debug, Deserialize)]
pub(crate) struct TopicPermissionBody {
    pub exchange: String,
    pub write: String,
    pub read: String,
}

/// `PUT /api/policies/VHOST/NAME` and `/api/operator-policies/VHOST/NAME`.
#[derive(Debug, Deserialize)]
pub(crate) struct PolicyBody {
    pub pattern: String,
    pub definition: Map<String, Json>,
    #[serde(default, deserialize_with = "integer")]
    pub priority: i64,
    #[serde(default = "all", rename = "apply-to")]
    pub apply_to: String,
}

fn all() -> String {
    "all".to_string()
}

/// `PUT /api/parameters/...`, `/api/global-parameters/NAME`: any JSON value.
#[derive(Debug, Deserialize)]
pub(crate) struct ValueBody {
    pub value: Json,
}

/// `PUT /api/vhost-limits/VHOST/NAME` and `/api/user-limits/USER/NAME`: a whole number (a
/// negative one means no limit, as in RabbitMQ).
#[derive(Debug, Deserialize)]
pub(crate) struct LimitBody {
    #[serde(deserialize_with = "integer")]
    pub value: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_booleans_and_numbers_are_accepted_as_rabbitmqadmin_sends_them() {
        let queue: QueueBody =
            parse_bytes(br#"{"durable":"false","auto_delete":"true","vhost":"/"}"#).unwrap();
        assert!(!queue.durable && queue.auto_delete);
        let get: GetBody = parse_bytes(br#"{"count":"5","ackmode":"ack_requeue_false"}"#).unwrap();
        assert_eq!((get.count, get.ackmode), (5, AckMode::AckRequeueFalse));
        let empty: QueueBody = parse_bytes(b"  ").unwrap();
        assert!(empty.durable, "durable by default, as in RabbitMQ");
    }

    #[test]
    fn a_wrong_field_is_named_in_the_reason() {
        let reason = parse_bytes::<QueueBody>(br#"{"durable":"yes"}"#).unwrap_err();
        assert!(reason.starts_with("durable: invalid value"), "{reason}");
        assert!(reason.contains("true or false"), "{reason}");
        let reason = parse_bytes::<ExchangeBody>(br#"{"durable":true}"#).unwrap_err();
        assert!(reason.contains("missing field `type`"), "{reason}");
        let reason = parse_bytes::<GetBody>(br#"{"ackmode":"ack"}"#).unwrap_err();
        assert!(
            reason.starts_with("ackmode: unknown variant `ack`"),
            "{reason}"
        );
        assert!(reason.contains("ack_requeue_true"), "{reason}");
        let reason =
            parse_bytes::<PublishBody>(br#"{"properties":{"delivery_mode":300}}"#).unwrap_err();
        assert!(
            reason.starts_with("properties.delivery_mode: invalid value"),
            "{reason}"
        );
        let reason = parse_bytes::<LimitBody>(br#"{"value":"ten"}"#).unwrap_err();
        assert!(reason.starts_with("value: invalid value"), "{reason}");
        let reason = parse_bytes::<LimitBody>(br#"{"value":1} trailing"#).unwrap_err();
        assert!(reason.starts_with("body is not valid JSON"), "{reason}");
        let reason = parse_bytes::<UserBody>(br#"{"tags":7}"#).unwrap_err();
        assert!(reason.starts_with("tags: expected the tags"), "{reason}");
    }

    proptest! {
        /// No body, however malformed, panics a parser; each answer is a value or a reason.
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_bytes::<PublishBody>(&body);
            let _ = parse_bytes::<GetBody>(&body);
            let _ = parse_bytes::<UserBody>(&body);
            let _ = parse_bytes::<PolicyBody>(&body);
        }

        #[test]
        fn counts_round_trip_as_numbers_and_as_text(n in 0u64..=i64::MAX as u64) {
            let as_number: GetBody = parse_bytes(
                format!(r#"{{"count":{n},"ackmode":"ack_requeue_true"}}"#).as_bytes()).unwrap();
            let as_text: GetBody = parse_bytes(
                format!(r#"{{"count":"{n}","ackmode":"ack_requeue_true"}}"#).as_bytes()).unwrap();
            prop_assert_eq!(as_number.count, n);
            prop_assert_eq!(as_text.count, n);
        }
    }
}
