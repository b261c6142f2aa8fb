//! Routing algorithms shared by exchange types: topic pattern matching and header matching.
