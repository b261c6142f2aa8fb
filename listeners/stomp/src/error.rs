//! The one table of STOMP errors: what goes in an ERROR frame's `message` header and body.
//!
//! STOMP has no error codes, only a short `message` header and a free-text body. Where
//! RabbitMQ's STOMP plugin has the same error, the header and body are its words (for
//! example `message:not_found` with `no queue 'q' in vhost '/'`), so clients and operators
//! that match on them keep working. Every error closes the connection after the ERROR frame,
//! as the STOMP spec requires.

use std::fmt;

use warren_core::{CoreError, ErrorKind};

use crate::codec::FrameError;

/// A STOMP error: the ERROR frame's `message` header and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StompError {
    /// The short `message` header, e.g. `Invalid destination` or `not_found`.
    pub message: String,
    /// The body: what went wrong and, where it helps, what to do instead.
    pub detail: String,
}

impl StompError {
    /// An error with a `message` header and a body.
    pub fn new(message: impl Into<String>, detail: impl Into<String>) -> StompError {
        StompError {
            message: message.into(),
            detail: detail.into(),
        }
    }

    /// A required header is missing.
    pub fn missing_header(command: &str, header: &str) -> StompError {
        StompError::new(
            "Missing header",
            format!("{command} must include a '{header}' header"),
        )
    }

    /// A header has a value the broker cannot use.
    pub fn invalid_header(header: &str, expected: &str, value: &str) -> StompError {
        StompError::new(
            "Invalid header",
            format!("header '{header}' must be {expected}, got '{value}'"),
        )
    }

    /// The peer's bytes could not be framed.
    pub fn malformed(error: &FrameError) -> StompError {
        StompError::new("Malformed frame", error.to_string())
    }
}

/// The name RabbitMQ gives an AMQP error (its `amqp_exception` atom), which its STOMP plugin
/// puts in the `message` header when a broker operation fails.
pub fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "not_found",
        ErrorKind::AccessRefused => "access_refused",
        ErrorKind::PreconditionFailed => "precondition_failed",
        ErrorKind::ResourceLocked => "resource_locked",
        ErrorKind::NotAllowed => "not_allowed",
        ErrorKind::ResourceError => "resource_error",
        ErrorKind::NotImplemented => "not_implemented",
        ErrorKind::CommandInvalid => "command_invalid",
        ErrorKind::InternalError => "internal_error",
        ErrorKind::Unavailable => "unavailable",
    }
}

impl From<CoreError> for StompError {
    fn from(error: CoreError) -> StompError {
        StompError::new(kind_name(error.kind), error.message)
    }
}

impl fmt::Display for StompError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message, self.detail)
    }
}

impl std::error::Error for StompError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_keep_their_text_under_rabbitmq_names() {
        let error = StompError::from(CoreError::not_found("no queue 'q' in vhost '/'"));
        assert_eq!(error.message, "not_found");
        assert_eq!(error.detail, "no queue 'q' in vhost '/'");
        let refused = StompError::from(CoreError::access_refused("nope"));
        assert_eq!(refused.message, "access_refused");
    }
}
