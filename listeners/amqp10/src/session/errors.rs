//! AMQP 1.0 error conditions: the one table mapping core error kinds to conditions, and
//! constructors for the errors the listener raises itself.

use fe2o3_amqp_types::definitions::{
    AmqpError, ConnectionError, Error, ErrorCondition, LinkError, SessionError,
};
use warren_core::{CoreError, ErrorKind};

/// The condition for a core error kind.
pub fn condition_for(kind: ErrorKind) -> ErrorCondition {
    ErrorCondition::AmqpError(match kind {
        ErrorKind::NotFound => AmqpError::NotFound,
        ErrorKind::AccessRefused => AmqpError::UnauthorizedAccess,
        ErrorKind::PreconditionFailed => AmqpError::PreconditionFailed,
        ErrorKind::ResourceLocked => AmqpError::ResourceLocked,
        ErrorKind::NotAllowed => AmqpError::NotAllowed,
        ErrorKind::ResourceError | ErrorKind::Unavailable => AmqpError::ResourceLimitExceeded,
        ErrorKind::NotImplemented => AmqpError::NotImplemented,
        ErrorKind::CommandInvalid => AmqpError::IllegalState,
        ErrorKind::InternalError => AmqpError::InternalError,
    })
}

/// A core error as an AMQP 1.0 error with the core's text.
pub fn from_core(error: &CoreError) -> Error {
    Error::new(condition_for(error.kind), error.message.clone(), None)
}

/// An `amqp:*` error.
pub fn amqp(condition: AmqpError, description: impl Into<String>) -> Error {
    Error::new(condition, description.into(), None)
}

/// An `amqp:connection:*` error.
pub fn connection(condition: ConnectionError, description: impl Into<String>) -> Error {
    Error::new(condition, description.into(), None)
}

/// An `amqp:session:*` error.
pub fn session(condition: SessionError, description: impl Into<String>) -> Error {
    Error::new(condition, description.into(), None)
}

/// An `amqp:link:*` error.
pub fn link(condition: LinkError, description: impl Into<String>) -> Error {
    Error::new(condition, description.into(), None)
}
