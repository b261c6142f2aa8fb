//! Routing algorithms shared by exchange types: topic pattern matching and header matching.

pub mod headers;
pub mod target_set;
pub mod topic;

pub use headers::{headers_match, validate_x_match};
pub use target_set::TargetSet;
pub use topic::TopicTrie;
