//! Prometheus metrics placeholder.
use crate::http::{Request, Response};
use crate::Management;

/// Answers `/metrics` and `/metrics/per-object`.
pub fn handle(_management: &Management, _request: &Request) -> Response {
    Response::empty(404)
}
