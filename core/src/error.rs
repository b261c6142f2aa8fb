//! The one error type of the core. Each listener maps an [`ErrorKind`] to its wire code
//! (AMQP 0-9-1 reply code and scope, AMQP 1.0 condition, STOMP ERROR frame, MQTT return code).

use std::fmt;

/// What went wrong, independent of any protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The named entity does not exist (0-9-1: 404).
    NotFound,
    /// The user may not do this, or the name is reserved (0-9-1: 403).
    AccessRefused,
    /// The request conflicts with existing state (0-9-1: 406).
    PreconditionFailed,
    /// Another connection holds the entity exclusively (0-9-1: 405).
    ResourceLocked,
    /// The operation is not allowed at all, e.g. an unknown vhost (0-9-1: 530).
    NotAllowed,
    /// A server resource limit was reached (0-9-1: 506).
    ResourceError,
    /// The feature exists in the protocol but not in Warren (0-9-1: 540).
    NotImplemented,
    /// The client sent something invalid for the state it is in (0-9-1: 503).
    CommandInvalid,
    /// A bug or an invariant broken inside the broker (0-9-1: 541).
    InternalError,
    /// The cluster cannot commit the change: no majority of its nodes is reachable (0-9-1:
    /// 506, HTTP 503). See [`crate::replication::no_majority`].
    Unavailable,
}

/// A core error: a kind for the wire code and a text that tells the user what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreError {
    /// The kind, mapped to a protocol code by each listener.
    pub kind: ErrorKind,
    /// Human-readable text, worded as RabbitMQ words it where RabbitMQ has the same error.
    pub message: String,
}

impl CoreError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CoreError {
            kind,
            message: message.into(),
        }
    }

    /// 404-style error.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// 403-style error.
    pub fn access_refused(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::AccessRefused, message)
    }

    /// 406-style error.
    pub fn precondition_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::PreconditionFailed, message)
    }

    /// 405-style error.
    pub fn resource_locked(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ResourceLocked, message)
    }

    /// 530-style error.
    pub fn not_allowed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotAllowed, message)
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CoreError {}

/// Result type of core operations.
pub type CoreResult<T> = Result<T, CoreError>;

/// Formats a resource the way RabbitMQ's `rabbit_misc:rs/1` does: `queue 'q' in vhost '/'`.
pub fn resource(kind: &str, name: &str, vhost: &str) -> String {
    format!("{kind} '{name}' in vhost '{vhost}'")
}
