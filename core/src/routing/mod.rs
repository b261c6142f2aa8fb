//! Routing algorithms shared by exchange types: topic pattern matching and header matching.

pub mod headers;
pub mod topic;

pub use headers::{headers_match, validate_x_match};
pub use topic::TopicTrie;
