//! What a binding is and where it leads: [`Binding`] as listed and compared,
//! [`DestinationName`] by name, and [`Target`], the resolved destination routing indexes keep.
//! They live apart from the exchanges so the binding table and the routing indexes need
//! nothing from `exchange.rs` (re-exported there).

use std::sync::Arc;

use crate::queue::Queue;
use crate::value::Table;

/// Where a binding leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DestinationName {
    /// A queue, by name.
    Queue(String),
    /// An exchange, by name.
    Exchange(String),
}

impl DestinationName {
    /// The destination's name.
    pub fn name(&self) -> &str {
        match self {
            DestinationName::Queue(n) | DestinationName::Exchange(n) => n,
        }
    }
}

/// One binding, as listed and compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The source exchange.
    pub source: String,
    /// The destination.
    pub destination: DestinationName,
    /// The binding (routing) key.
    pub routing_key: String,
    /// Binding arguments (used by the headers exchange).
    pub arguments: Table,
}

/// A resolved binding destination, as kept in routing indexes. Queues are held by `Arc` so
/// routing needs no name lookup; exchanges by name, so cycles hold no reference loops.
#[derive(Clone, Debug)]
pub enum Target {
    /// A queue.
    Queue(Arc<Queue>),
    /// An exchange.
    Exchange(Arc<str>),
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Target::Queue(a), Target::Queue(b)) => Arc::ptr_eq(a, b),
            (Target::Exchange(a), Target::Exchange(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Target {}

impl Ord for Target {
    /// Queues before exchanges; queues by identity, exchanges by name. Consistent with `Eq`.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Target::Queue(a), Target::Queue(b)) => Arc::as_ptr(a).cmp(&Arc::as_ptr(b)),
            (Target::Exchange(a), Target::Exchange(b)) => a.cmp(b),
            (Target::Queue(_), Target::Exchange(_)) => std::cmp::Ordering::Less,
            (Target::Exchange(_), Target::Queue(_)) => std::cmp::Ordering::Greater,
        }
    }
}

impl PartialOrd for Target {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
