//! Streams: append-only, replayable logs that consumers read from an offset of their choice.
//! (Not to be confused with [`crate::stream`], the client socket type.)
//!
//! A stream is a directory of segment files ([`segment`]) holding chunks ([`chunk`]): a
//! publisher's records are queued for the stream's writer thread, which groups everything
//! queued since its last write into chunks (the unit of writing, indexing and delivery),
//! writes them, fdatasyncs once, and only then calls each publisher back to confirm (group
//! commit). Each chunk carries CRCs and, when records have filter values, a Bloom filter.
//! Consumer offsets and producer sequences (deduplication) are kept in the log itself
//! ([`tracking`]). Retention ([`retention`]) deletes whole old segments. Single active
//! consumer groups ([`single_active`]) are kept with each stream. After a crash the
//! newest segment is scanned and a torn tail cut off.
//!
//! The streams of a vhost are in its [`StreamRegistry`]; [`vhost_streams`] has the
//! permission-checked entry points.

pub mod chunk;
pub mod format;
mod log;
pub mod reader;
pub mod registry;
mod replica;
pub mod replication;
pub mod retention;
pub mod segment;
pub mod single_active;
pub mod super_streams;
pub mod tracking;
pub mod vhost_streams;

#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod tests;

pub use format::MessageFormat;
pub(crate) use log::now_ms;
pub use log::{LogStats, OnWritten, Publish, Record, StreamLog, Written};
pub use reader::{ChunkFilter, OffsetSpec, StreamReader};
pub use registry::{StreamCreated, StreamRegistry};
pub use replica::{OnAppended, ReplicaTail};
pub use replication::{Placement, Role};
pub use retention::{parse_max_age, PolicyLimits, StreamSettings};
pub use super_streams::SuperStream;
