//! Exchanges and their bindings.
//!
//! Each exchange keeps the bindings where it is the source, as an authoritative list plus a
//! routing index shaped for its type (a hash map for direct, a list for fanout, a trie for
//! topic). Routing takes the exchange's read lock only; declares and binds take the write lock
//! briefly, so publishers never wait on each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::message::Message;
use crate::queue::Queue;
use crate::routing::headers::headers_match;
use crate::routing::topic::TopicTrie;
use crate::value::Table;

/// The built-in exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Routes on exact routing key equality.
    Direct,
    /// Routes to every binding.
    Fanout,
    /// Routes on dot-separated patterns with `*` and `#`.
    Topic,
    /// Routes on message headers (`x-match`).
    Headers,
    /// A type provided by a plugin ([`ExchangeType`]); see [`ExchangeConfig::plugin`].
    Plugin,
}

/// An exchange type provided by a plugin (e.g. `x-consistent-hash`). The core asks it to
/// check bindings and to build one router per exchange; the router keeps its own index.
pub trait ExchangeType: Send + Sync + std::fmt::Debug {
    /// The type name clients declare (`x-...`).
    fn name(&self) -> &str;
    /// Checks a binding before it is added; the error is a 406 text.
    fn validate_binding(&self, routing_key: &str, arguments: &Table) -> Result<(), String>;
    /// A router for a new exchange declared with `arguments`.
    fn router(&self, exchange_arguments: &Table) -> Box<dyn ExchangeRouter>;
}

/// The routing index of one plugin exchange. Called with the exchange's bindings lock held.
pub trait ExchangeRouter: Send + Sync {
    /// A binding was added.
    fn bind(&mut self, routing_key: &str, arguments: &Table, target: &Target);
    /// A binding was removed.
    fn unbind(&mut self, routing_key: &str, arguments: &Table, target: &Target);
    /// Appends the targets for a message published with `routing_key`.
    fn route(&self, routing_key: &str, message: &Message, out: &mut Vec<Target>);
}

impl ExchangeKind {
    /// The type from its AMQP name; `None` for unknown types.
    pub fn from_name(name: &str) -> Option<ExchangeKind> {
        Some(match name {
            "direct" => ExchangeKind::Direct,
            "fanout" => ExchangeKind::Fanout,
            "topic" => ExchangeKind::Topic,
            "headers" => ExchangeKind::Headers,
            _ => return None,
        })
    }

    /// The type's AMQP name.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::Plugin => "plugin",
        }
    }
}

/// Declared properties of an exchange.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// The exchange's name.
    pub name: String,
    /// Its type.
    pub kind: ExchangeKind,
    /// Survives a restart (recorded; persisted with the persistence feature).
    pub durable: bool,
    /// Deleted when its last binding as a source is removed.
    pub auto_delete: bool,
    /// Clients may not publish to it directly; only exchange-to-exchange bindings feed it.
    pub internal: bool,
    /// Arguments, e.g. `alternate-exchange`.
    pub arguments: Table,
    /// The plugin type, for `ExchangeKind::Plugin`.
    pub plugin: Option<Arc<dyn ExchangeType>>,
}

impl ExchangeConfig {
    /// The type name as declared: a built-in name or the plugin's.
    pub fn type_name(&self) -> &str {
        match &self.plugin {
            Some(plugin) => plugin.name(),
            None => self.kind.name(),
        }
    }

    /// The alternate exchange named in the arguments, if any.
    pub fn alternate_exchange(&self) -> Option<&str> {
        self.arguments
            .get("alternate-exchange")
            .and_then(|v| v.as_str())
    }
}

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

/// A binding as an exchange keeps it in its list: what [`Binding`] says, without repeating
/// what the exchange and the target already hold. Every idle MQTT subscription has one in
/// `amq.topic`, so the common case (source is this exchange, destination is the target's own
/// name, no arguments) stores only the routing key.
struct StoredBinding {
    /// The source, when it is not this exchange's name.
    other_source: Option<Box<str>>,
    /// The destination, when it is not the target's own name.
    other_destination: Option<Box<DestinationName>>,
    routing_key: Box<str>,
    /// The arguments, when there are any.
    arguments: Option<Box<Table>>,
}

/// No arguments, for bindings stored without any.
static NO_ARGUMENTS: Table = Table(Vec::new());

impl StoredBinding {
    fn new(binding: Binding, target: &Target, exchange: &str) -> StoredBinding {
        StoredBinding {
            other_source: (binding.source != exchange).then(|| binding.source.into_boxed_str()),
            other_destination: (!Self::names_target(&binding.destination, target))
                .then(|| Box::new(binding.destination)),
            routing_key: binding.routing_key.into_boxed_str(),
            arguments: (!binding.arguments.0.is_empty()).then(|| Box::new(binding.arguments)),
        }
    }

    /// Whether `destination` is `target`'s own name (true for every binding the vhost makes).
    fn names_target(destination: &DestinationName, target: &Target) -> bool {
        match (destination, target) {
            (DestinationName::Queue(name), Target::Queue(queue)) => *name == queue.name(),
            (DestinationName::Exchange(name), Target::Exchange(exchange)) => **name == **exchange,
            _ => false,
        }
    }

    fn arguments(&self) -> &Table {
        self.arguments.as_deref().unwrap_or(&NO_ARGUMENTS)
    }

    fn source<'a>(&'a self, exchange: &'a str) -> &'a str {
        self.other_source.as_deref().unwrap_or(exchange)
    }

    fn is_to(&self, destination: &DestinationName, target: &Target) -> bool {
        match &self.other_destination {
            Some(other) => **other == *destination,
            None => Self::names_target(destination, target),
        }
    }

    /// Whether this is `binding` (as [`Binding`]'s equality compares them).
    fn is(&self, binding: &Binding, target: &Target, exchange: &str) -> bool {
        *self.routing_key == *binding.routing_key
            && self.source(exchange) == binding.source
            && self.is_to(&binding.destination, target)
            && *self.arguments() == binding.arguments
    }

    fn to_binding(&self, target: &Target, exchange: &str) -> Binding {
        let destination = match (&self.other_destination, target) {
            (Some(other), _) => (**other).clone(),
            (None, Target::Queue(queue)) => DestinationName::Queue(queue.name().to_string()),
            (None, Target::Exchange(name)) => DestinationName::Exchange(name.to_string()),
        };
        Binding {
            source: self.source(exchange).to_string(),
            destination,
            routing_key: self.routing_key.to_string(),
            arguments: self.arguments().clone(),
        }
    }
}

#[derive(Default)]
struct Bindings {
    /// The index of a plugin exchange type.
    plugin: Option<Box<dyn ExchangeRouter>>,
    /// Authoritative list, in bind order.
    list: Vec<(StoredBinding, Target)>,
    direct: HashMap<String, Vec<Target>>,
    fanout: Vec<Target>,
    topic: TopicTrie<Target>,
}

/// An exchange's lifetime message counts, RabbitMQ's `publish_in` and `publish_out`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Messages published into the exchange by a client.
    pub published_in: u64,
    /// Queue deliveries of those messages: one per queue a message reached, through this
    /// exchange's bindings, exchange-to-exchange bindings and alternate exchanges.
    pub published_out: u64,
}

/// An exchange with its bindings.
pub struct Exchange {
    config: ExchangeConfig,
    bindings: RwLock<Bindings>,
    /// `publish_in`: bumped with a relaxed add by [`Exchange::record_publish`] on the publish
    /// path, next to the bindings read lock the same publish has just taken.
    published_in: AtomicU64,
    /// `publish_out`.
    published_out: AtomicU64,
    /// The alternate exchange a policy sets (the declared argument wins over it).
    policy_alternate: RwLock<Option<String>>,
}

impl Exchange {
    /// A new exchange without bindings.
    pub fn new(config: ExchangeConfig) -> Arc<Exchange> {
        let plugin = config.plugin.as_ref().map(|p| p.router(&config.arguments));
        Arc::new(Exchange {
            config,
            bindings: RwLock::new(Bindings {
                plugin,
                ..Bindings::default()
            }),
            policy_alternate: RwLock::new(None),
            published_in: AtomicU64::new(0),
            published_out: AtomicU64::new(0),
        })
    }

    /// Counts one message published into this exchange that reached `queues` queues. Called
    /// once per publish by [`crate::vhost::VHost::route`]; dead letters and trace copies are
    /// not counted, as in RabbitMQ.
    pub fn record_publish(&self, queues: usize) {
        self.published_in.fetch_add(1, Ordering::Relaxed);
        if queues > 0 {
            self.published_out
                .fetch_add(queues as u64, Ordering::Relaxed);
        }
    }

    /// The exchange's message counts since it was declared.
    pub fn stats(&self) -> ExchangeStats {
        ExchangeStats {
            published_in: self.published_in.load(Ordering::Relaxed),
            published_out: self.published_out.load(Ordering::Relaxed),
        }
    }

    /// The alternate exchange in effect: the declared argument, else the policy's.
    pub fn alternate_exchange(&self) -> Option<String> {
        match self.config.alternate_exchange() {
            Some(declared) => Some(declared.to_string()),
            None => self.policy_alternate.read().clone(),
        }
    }

    /// Sets (or clears) the alternate exchange a policy gives this exchange.
    pub fn set_policy_alternate(&self, alternate: Option<String>) {
        *self.policy_alternate.write() = alternate;
    }

    /// The exchange's declared properties.
    pub fn config(&self) -> &ExchangeConfig {
        &self.config
    }

    /// The exchange's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Adds a binding; returns false when an identical one existed already.
    pub fn bind(&self, binding: Binding, target: Target) -> bool {
        let mut bindings = self.bindings.write();
        let exchange = self.config.name.as_str();
        if bindings
            .list
            .iter()
            .any(|(b, t)| b.is(&binding, t, exchange))
        {
            return false;
        }
        // Several bindings may share (key, target) with different arguments: the index keeps
        // one entry per (key, target), added by the first and removed with the last.
        let shared = bindings
            .list
            .iter()
            .any(|(b, t)| *b.routing_key == *binding.routing_key && *t == target);
        if !shared {
            match self.config.kind {
                ExchangeKind::Direct => {
                    bindings
                        .direct
                        .entry(binding.routing_key.clone())
                        .or_default()
                        .push(target.clone());
                }
                ExchangeKind::Fanout => bindings.fanout.push(target.clone()),
                ExchangeKind::Topic => bindings.topic.insert(&binding.routing_key, target.clone()),
                ExchangeKind::Headers | ExchangeKind::Plugin => {}
            }
        }
        if let Some(router) = bindings.plugin.as_mut() {
            router.bind(&binding.routing_key, &binding.arguments, &target);
        }
        let stored = StoredBinding::new(binding, &target, exchange);
        bindings.list.push((stored, target));
        true
    }

    /// Removes the binding equal to `binding`; returns whether it existed.
    pub fn unbind(&self, binding: &Binding) -> bool {
        let mut bindings = self.bindings.write();
        let exchange = self.config.name.as_str();
        let Some(position) = bindings
            .list
            .iter()
            .position(|(b, t)| b.is(binding, t, exchange))
        else {
            return false;
        };
        let (removed, target) = bindings.list.remove(position);
        if let Some(router) = bindings.plugin.as_mut() {
            router.unbind(&removed.routing_key, removed.arguments(), &target);
        }
        Self::unindex(
            &mut bindings,
            self.config.kind,
            &removed.routing_key,
            &target,
        );
        true
    }

    fn unindex(bindings: &mut Bindings, kind: ExchangeKind, key: &str, target: &Target) {
        let still_shared = bindings
            .list
            .iter()
            .any(|(b, t)| *b.routing_key == *key && t == target);
        if still_shared {
            return;
        }
        match kind {
            ExchangeKind::Direct => {
                if let Some(targets) = bindings.direct.get_mut(key) {
                    targets.retain(|t| t != target);
                    if targets.is_empty() {
                        bindings.direct.remove(key);
                    }
                }
            }
            ExchangeKind::Fanout => {
                if let Some(i) = bindings.fanout.iter().position(|t| t == target) {
                    bindings.fanout.remove(i);
                }
            }
            ExchangeKind::Topic => {
                bindings.topic.remove(key, target);
            }
            ExchangeKind::Headers | ExchangeKind::Plugin => {}
        }
    }

    /// Removes every binding to `destination`; returns how many there were.
    pub fn unbind_destination(&self, destination: &DestinationName) -> usize {
        let mut bindings = self.bindings.write();
        let mut removed = Vec::new();
        bindings.list.retain(|(b, t)| {
            if b.is_to(destination, t) {
                removed.push((b.routing_key.to_string(), b.arguments().clone(), t.clone()));
                false
            } else {
                true
            }
        });
        for (key, arguments, target) in &removed {
            Self::unindex(&mut bindings, self.config.kind, key, target);
            if let Some(router) = bindings.plugin.as_mut() {
                router.unbind(key, arguments, target);
            }
        }
        removed.len()
    }

    /// Whether any binding has this exchange as its source.
    pub fn has_bindings(&self) -> bool {
        !self.bindings.read().list.is_empty()
    }

    /// The bindings with this exchange as source.
    pub fn bindings(&self) -> Vec<Binding> {
        self.bindings
            .read()
            .list
            .iter()
            .map(|(b, t)| b.to_binding(t, &self.config.name))
            .collect()
    }

    /// Appends the targets `message` routes to with `routing_key` (its own, or a CC/BCC
    /// key) through this exchange's own bindings.
    pub fn route(&self, routing_key: &str, message: &Message, out: &mut Vec<Target>) {
        let bindings = self.bindings.read();
        match self.config.kind {
            ExchangeKind::Direct => {
                if let Some(targets) = bindings.direct.get(routing_key) {
                    out.extend(targets.iter().cloned());
                }
            }
            ExchangeKind::Fanout => out.extend(bindings.fanout.iter().cloned()),
            ExchangeKind::Topic => bindings.topic.matches(routing_key, out),
            ExchangeKind::Headers => {
                let headers = message.properties.headers.as_ref();
                for (binding, target) in &bindings.list {
                    if headers_match(binding.arguments(), headers) && !out.contains(target) {
                        out.push(target.clone());
                    }
                }
            }
            ExchangeKind::Plugin => {
                if let Some(router) = &bindings.plugin {
                    router.route(routing_key, message, out);
                }
            }
        }
    }
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("name", &self.config.name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueConfig;
    use crate::value::Value;

    fn exchange(name: &str, kind: ExchangeKind) -> Arc<Exchange> {
        Exchange::new(ExchangeConfig {
            name: name.into(),
            kind,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: Table::new(),
            plugin: None,
        })
    }

    fn queue(name: &str) -> Arc<Queue> {
        Queue::new(QueueConfig {
            name: name.into(),
            vhost: "/".into(),
            durable: false,
            exclusive_owner: None,
            auto_delete: false,
            arguments: Table::new(),
        })
    }

    fn binding(source: &str, destination: DestinationName, key: &str, arguments: Table) -> Binding {
        Binding {
            source: source.into(),
            destination,
            routing_key: key.into(),
            arguments,
        }
    }

    #[test]
    fn stored_bindings_list_compare_and_unbind_as_registered() {
        let topic = exchange("amq.topic", ExchangeKind::Topic);
        let sensors = queue("sensors");
        let mut arguments = Table::new();
        arguments.insert("x-match", Value::string("all"));
        let registered = [
            binding(
                "amq.topic",
                DestinationName::Queue("sensors".into()),
                "devices.*.temp",
                Table::new(),
            ),
            binding(
                "amq.topic",
                DestinationName::Queue("sensors".into()),
                "devices.#",
                arguments.clone(),
            ),
            // Neither the exchange's name nor the target's: kept as given.
            binding(
                "elsewhere",
                DestinationName::Queue("renamed".into()),
                "devices.#",
                Table::new(),
            ),
            binding(
                "amq.topic",
                DestinationName::Exchange("fan".into()),
                "devices.42.temp",
                Table::new(),
            ),
        ];
        let targets = [
            Target::Queue(Arc::clone(&sensors)),
            Target::Queue(Arc::clone(&sensors)),
            Target::Queue(Arc::clone(&sensors)),
            Target::Exchange(Arc::from("fan")),
        ];
        for (b, t) in registered.iter().zip(&targets) {
            assert!(topic.bind(b.clone(), t.clone()));
            assert!(!topic.bind(b.clone(), t.clone()), "a duplicate is refused");
        }
        assert_eq!(topic.bindings(), registered.to_vec());
        assert_eq!(
            topic.unbind_destination(&DestinationName::Queue("renamed".into())),
            1
        );
        assert!(topic.unbind(&registered[1]));
        assert!(!topic.unbind(&registered[1]));
        assert_eq!(
            topic.bindings(),
            vec![registered[0].clone(), registered[3].clone()]
        );
        assert_eq!(
            topic.unbind_destination(&DestinationName::Queue("sensors".into())),
            1
        );
        assert_eq!(topic.bindings(), vec![registered[3].clone()]);
    }
}
