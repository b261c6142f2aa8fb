//! Exchanges and their bindings.
//!
//! Each exchange keeps the bindings where it is the source in a hash table grouped by
//! destination ([`crate::binding_table`]), which also serves fanout and headers routing, plus a
//! routing index shaped for its type (a hash map for direct, a trie for topic). Binding,
//! unbinding and the duplicate check cost O(1) expected whatever the exchange holds. Routing takes the exchange's read lock only; declares and binds take the write lock
//! briefly, so publishers never wait on each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

pub use crate::binding::{Binding, DestinationName, Target};
use crate::binding_table::BindingTable;
use crate::message::Message;
use crate::routing::headers::headers_match;
use crate::routing::target_set::TargetSet;
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

#[derive(Default)]
struct Bindings {
    /// The index of a plugin exchange type.
    plugin: Option<Box<dyn ExchangeRouter>>,
    /// Authoritative: every binding, found by hashing (also the fanout and headers index).
    table: BindingTable,
    /// Direct routing: one entry per (key, target), whatever the bindings' arguments.
    direct: HashMap<Box<str>, TargetSet<Target>>,
    /// Topic routing: one entry per (pattern, target).
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
        if bindings.table.contains(exchange, &binding) {
            return false;
        }
        // Several bindings may share (key, target) with different arguments: the index keeps
        // one entry per (key, target), added by the first and removed with the last.
        if !bindings.table.shares(&binding.routing_key, &target) {
            match self.config.kind {
                ExchangeKind::Direct => {
                    let key = binding.routing_key.as_str();
                    match bindings.direct.get_mut(key) {
                        Some(targets) => {
                            targets.insert(target.clone());
                        }
                        None => {
                            let mut targets = TargetSet::default();
                            targets.insert(target.clone());
                            bindings.direct.insert(Box::from(key), targets);
                        }
                    }
                }
                ExchangeKind::Topic => bindings.topic.insert(&binding.routing_key, target.clone()),
                // Fanout and headers route from the binding table itself.
                ExchangeKind::Fanout | ExchangeKind::Headers | ExchangeKind::Plugin => {}
            }
        }
        if let Some(router) = bindings.plugin.as_mut() {
            router.bind(&binding.routing_key, &binding.arguments, &target);
        }
        bindings.table.insert(exchange, binding, target);
        true
    }

    /// Removes the binding equal to `binding`; returns whether it existed.
    pub fn unbind(&self, binding: &Binding) -> bool {
        let mut bindings = self.bindings.write();
        let Some(target) = bindings.table.remove(&self.config.name, binding) else {
            return false;
        };
        if let Some(router) = bindings.plugin.as_mut() {
            router.unbind(&binding.routing_key, &binding.arguments, &target);
        }
        Self::unindex(
            &mut bindings,
            self.config.kind,
            &binding.routing_key,
            &target,
        );
        true
    }

    fn unindex(bindings: &mut Bindings, kind: ExchangeKind, key: &str, target: &Target) {
        if bindings.table.shares(key, target) {
            return;
        }
        match kind {
            ExchangeKind::Direct => {
                if let Some(targets) = bindings.direct.get_mut(key) {
                    targets.remove(target);
                    if targets.is_empty() {
                        bindings.direct.remove(key);
                    }
                }
            }
            ExchangeKind::Topic => {
                bindings.topic.remove(key, target);
            }
            ExchangeKind::Fanout | ExchangeKind::Headers | ExchangeKind::Plugin => {}
        }
    }

    /// Removes every binding to `destination`; returns how many there were.
    pub fn unbind_destination(&self, destination: &DestinationName) -> usize {
        let mut bindings = self.bindings.write();
        let removed = bindings.table.remove_destination(destination);
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
        !self.bindings.read().table.is_empty()
    }

    /// The bindings with this exchange as source, sorted as `rabbitmqctl list_bindings`
    /// lists them: by routing key, then destination (exchanges before queues, then by name),
    /// then arguments.
    pub fn bindings(&self) -> Vec<Binding> {
        self.bindings.read().table.list(&self.config.name)
    }

    /// The bindings from this exchange to `destination`, in the order of [`bindings`]; costs
    /// what `destination` has, not what the exchange has.
    ///
    /// [`bindings`]: Self::bindings
    pub fn bindings_to(&self, destination: &DestinationName) -> Vec<Binding> {
        self.bindings
            .read()
            .table
            .list_to(&self.config.name, destination)
    }

    /// Whether any binding from this exchange leads to `destination`.
    pub fn has_bindings_to(&self, destination: &DestinationName) -> bool {
        self.bindings.read().table.has_destination(destination)
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
            ExchangeKind::Fanout => out.extend(bindings.table.targets().cloned()),
            ExchangeKind::Topic => bindings.topic.matches(routing_key, out),
            ExchangeKind::Headers => {
                let headers = message.properties.headers.as_ref();
                for (arguments, target) in bindings.table.arguments() {
                    if headers_match(arguments, headers) && !out.contains(target) {
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
    use crate::queue::{Queue, QueueConfig};
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
        // Listed by source, then key, then destination.
        let listed = [1, 0, 3, 2].map(|i| registered[i].clone());
        assert_eq!(topic.bindings(), listed.to_vec());
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

    fn target_name(target: &Target) -> &str {
        match target {
            Target::Queue(queue) => queue.name(),
            Target::Exchange(name) => name,
        }
    }

    fn message_with(headers: Option<Table>) -> Message {
        let mut message = Message {
            exchange: Arc::from(""),
            routing_key: Arc::from(""),
            properties: Default::default(),
            encoded_properties: None,
            body: Default::default(),
        };
        message.properties.headers = headers;
        message
    }

    /// The queue names `exchange` routes `key` (and `headers`) to, sorted, each once.
    fn routed(exchange: &Exchange, key: &str, headers: Option<Table>) -> Vec<String> {
        let mut out = Vec::new();
        exchange.route(key, &message_with(headers), &mut out);
        let mut names: Vec<String> = out.iter().map(|t| target_name(t).to_string()).collect();
        names.sort();
        names.dedup();
        names
    }

    fn queue_binding(exchange: &str, queue: &str, key: &str, arguments: Table) -> Binding {
        binding(
            exchange,
            DestinationName::Queue(queue.into()),
            key,
            arguments,
        )
    }

    fn argument(name: &str, value: &str) -> Table {
        let mut table = Table::new();
        table.insert(name, Value::string(value));
        table
    }

    #[test]
    fn bindings_sharing_key_and_target_route_until_the_last_is_removed_for_every_kind() {
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Fanout,
            ExchangeKind::Topic,
            ExchangeKind::Headers,
        ] {
            let x = exchange("x", kind);
            let q = queue("q");
            let target = Target::Queue(Arc::clone(&q));
            let mut any = argument("x-match", "any");
            any.insert("colour", Value::string("red"));
            let variants = [Table::new(), argument("colour", "red"), any];
            for arguments in &variants {
                let b = queue_binding("x", "q", "k", arguments.clone());
                assert!(x.bind(b.clone(), target.clone()), "{kind:?}");
                assert!(!x.bind(b, target.clone()), "{kind:?}: duplicate refused");
            }
            let red = Some(argument("colour", "red"));
            assert_eq!(routed(&x, "k", red.clone()), ["q"], "{kind:?}");
            // Remove the first, then the last made: the one left still routes.
            for arguments in [&variants[0], &variants[2]] {
                assert!(x.unbind(&queue_binding("x", "q", "k", arguments.clone())));
                assert!(!x.unbind(&queue_binding("x", "q", "k", arguments.clone())));
                assert_eq!(routed(&x, "k", red.clone()), ["q"], "{kind:?}");
                assert!(x.has_bindings());
            }
            assert_eq!(
                x.bindings(),
                vec![queue_binding("x", "q", "k", variants[1].clone())]
            );
            assert!(x.unbind(&queue_binding("x", "q", "k", variants[1].clone())));
            assert!(routed(&x, "k", red).is_empty(), "{kind:?}");
            assert!(!x.has_bindings());
            assert!(x.bindings().is_empty());
        }
    }

    #[test]
    fn a_destination_bound_with_many_keys_unbinds_each_and_all() {
        for kind in [
            ExchangeKind::Direct,
            ExchangeKind::Topic,
            ExchangeKind::Fanout,
        ] {
            let x = exchange("x", kind);
            let q = queue("q");
            let other = queue("other");
            for i in 0..50 {
                let key = format!("k{i}");
                assert!(x.bind(
                    queue_binding("x", "q", &key, Table::new()),
                    Target::Queue(Arc::clone(&q))
                ));
            }
            x.bind(
                queue_binding("x", "other", "k7", Table::new()),
                Target::Queue(Arc::clone(&other)),
            );
            for i in 0..49 {
                assert!(x.unbind(&queue_binding("x", "q", &format!("k{i}"), Table::new())));
            }
            let expected: &[&str] = match kind {
                ExchangeKind::Fanout => &["other", "q"],
                _ => &["q"],
            };
            assert_eq!(routed(&x, "k49", None), expected);
            assert_eq!(x.bindings().len(), 2);
            let q_name = DestinationName::Queue("q".into());
            assert_eq!(
                x.bindings_to(&q_name),
                vec![queue_binding("x", "q", "k49", Table::new())]
            );
            assert!(x.has_bindings_to(&q_name));
            assert!(!x.has_bindings_to(&DestinationName::Exchange("q".into())));
            x.bind(
                queue_binding("x", "q", "k7", argument("a", "b")),
                Target::Queue(Arc::clone(&q)),
            );
            assert_eq!(x.unbind_destination(&DestinationName::Queue("q".into())), 2);
            assert_eq!(routed(&x, "k7", None), ["other"]);
            assert_eq!(
                x.bindings(),
                vec![queue_binding("x", "other", "k7", Table::new())]
            );
        }
    }

    #[test]
    fn bindings_are_listed_as_rabbitmqctl_lists_them() {
        let x = exchange("x", ExchangeKind::Direct);
        let (a, b) = (queue("a"), queue("b"));
        let made = [
            (
                queue_binding("x", "b", "2", Table::new()),
                Target::Queue(Arc::clone(&b)),
            ),
            (
                queue_binding("x", "a", "2", Table::new()),
                Target::Queue(Arc::clone(&a)),
            ),
            (
                binding(
                    "x",
                    DestinationName::Exchange("z".into()),
                    "2",
                    Table::new(),
                ),
                Target::Exchange(Arc::from("z")),
            ),
            (
                queue_binding("x", "b", "1", Table::new()),
                Target::Queue(Arc::clone(&b)),
            ),
            (
                queue_binding("x", "a", "2", argument("v", "2")),
                Target::Queue(Arc::clone(&a)),
            ),
            (
                queue_binding("x", "a", "2", argument("v", "1")),
                Target::Queue(Arc::clone(&a)),
            ),
        ];
        for (b, t) in &made {
            assert!(x.bind(b.clone(), t.clone()));
        }
        // As rabbitmqctl list_bindings (RabbitMQ 3.10) lists the same bindings.
        let expected = [3, 2, 1, 5, 4, 0].map(|i| made[i].0.clone());
        assert_eq!(x.bindings(), expected.to_vec());
    }

    #[test]
    fn one_queue_bound_under_many_header_sets_finds_each_by_hash() {
        let x = exchange("x", ExchangeKind::Headers);
        let q = queue("q");
        let target = Target::Queue(Arc::clone(&q));
        let device = |i: u32| {
            let mut table = argument("x-match", "all");
            table.insert("device", Value::U32(i));
            table
        };
        for i in 0..100 {
            assert!(x.bind(queue_binding("x", "q", "", device(i)), target.clone()));
            assert!(!x.bind(queue_binding("x", "q", "", device(i)), target.clone()));
        }
        let mut zero = Table::new();
        zero.insert("weight", Value::F64(0.0));
        let mut negative_zero = Table::new();
        negative_zero.insert("weight", Value::F64(-0.0));
        assert!(x.bind(queue_binding("x", "q", "", zero), target.clone()));
        assert!(
            !x.bind(
                queue_binding("x", "q", "", negative_zero.clone()),
                target.clone()
            ),
            "-0.0 == 0.0, so this is the same binding"
        );
        let headers = |i: u32| {
            let mut table = Table::new();
            table.insert("device", Value::U32(i));
            Some(table)
        };
        assert_eq!(routed(&x, "", headers(42)), ["q"]);
        for i in (0..100).filter(|i| i % 10 != 0) {
            assert!(x.unbind(&queue_binding("x", "q", "", device(i))));
            assert!(!x.unbind(&queue_binding("x", "q", "", device(i))));
        }
        assert!(routed(&x, "", headers(42)).is_empty());
        assert_eq!(routed(&x, "", headers(40)), ["q"]);
        assert!(x.unbind(&queue_binding("x", "q", "", negative_zero)));
        let listed = x.bindings();
        assert_eq!(listed.len(), 10);
        let expected: Vec<Binding> = (0..100)
            .step_by(10)
            .map(|i| queue_binding("x", "q", "", device(i)))
            .collect();
        assert_eq!(listed, expected, "sorted by argument values");
        for i in (0..100).step_by(10) {
            assert!(x.unbind(&queue_binding("x", "q", "", device(i))));
        }
        assert!(!x.has_bindings());
    }

    #[test]
    fn fanout_of_many_queues_routes_to_those_still_bound() {
        let x = exchange("x", ExchangeKind::Fanout);
        let queues: Vec<_> = (0..200).map(|i| queue(&format!("q{i:03}"))).collect();
        for q in &queues {
            x.bind(
                queue_binding("x", q.name(), "", Table::new()),
                Target::Queue(Arc::clone(q)),
            );
        }
        for q in queues.iter().skip(1).step_by(2) {
            assert_eq!(
                x.unbind_destination(&DestinationName::Queue(q.name().into())),
                1
            );
        }
        let expected: Vec<String> = (0..200).step_by(2).map(|i| format!("q{i:03}")).collect();
        assert_eq!(routed(&x, "anything", None), expected);
    }

    /// Records the calls a plugin router gets.
    struct RecordingRouter(Arc<parking_lot::Mutex<Vec<String>>>);

    impl ExchangeRouter for RecordingRouter {
        fn bind(&mut self, routing_key: &str, arguments: &Table, target: &Target) {
            let call = format!(
                "bind {routing_key} {} {}",
                arguments.0.len(),
                target_name(target)
            );
            self.0.lock().push(call);
        }
        fn unbind(&mut self, routing_key: &str, arguments: &Table, target: &Target) {
            let call = format!(
                "unbind {routing_key} {} {}",
                arguments.0.len(),
                target_name(target)
            );
            self.0.lock().push(call);
        }
        fn route(&self, _: &str, _: &Message, _: &mut Vec<Target>) {}
    }

    #[derive(Debug)]
    struct RecordingType(Arc<parking_lot::Mutex<Vec<String>>>);

    impl ExchangeType for RecordingType {
        fn name(&self) -> &str {
            "x-recording"
        }
        fn validate_binding(&self, _: &str, _: &Table) -> Result<(), String> {
            Ok(())
        }
        fn router(&self, _: &Table) -> Box<dyn ExchangeRouter> {
            Box::new(RecordingRouter(Arc::clone(&self.0)))
        }
    }

    #[test]
    fn a_plugin_router_sees_every_binding_once_even_when_key_and_target_are_shared() {
        let calls = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let x = Exchange::new(ExchangeConfig {
            name: "p".into(),
            kind: ExchangeKind::Plugin,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: Table::new(),
            plugin: Some(Arc::new(RecordingType(Arc::clone(&calls)))),
        });
        let q = queue("q");
        let t = Target::Queue(Arc::clone(&q));
        assert!(x.bind(queue_binding("p", "q", "1", Table::new()), t.clone()));
        assert!(!x.bind(queue_binding("p", "q", "1", Table::new()), t.clone()));
        assert!(x.bind(queue_binding("p", "q", "1", argument("a", "b")), t.clone()));
        assert!(x.bind(queue_binding("p", "q", "2", Table::new()), t.clone()));
        assert!(x.unbind(&queue_binding("p", "q", "1", Table::new())));
        assert_eq!(x.unbind_destination(&DestinationName::Queue("q".into())), 2);
        let mut calls = calls.lock().clone();
        calls[4..].sort();
        assert_eq!(
            calls,
            [
                "bind 1 0 q",
                "bind 1 1 q",
                "bind 2 0 q",
                "unbind 1 0 q",
                "unbind 1 1 q",
                "unbind 2 0 q"
            ]
        );
    }

    #[test]
    fn a_stored_destination_with_its_key_takes_no_more_than_the_old_list_entry() {
        // The list this replaced held (StoredBinding, Target): 48 + 16 bytes per binding,
        // plus the Vec's spare capacity.
        assert_eq!(std::mem::size_of::<Target>(), 16);
        assert_eq!(crate::binding_table::SLOT_SIZE, 40);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        /// One operation on an exchange: bind/unbind (queue, key, arguments) or drop a queue.
        #[derive(Debug, Clone)]
        enum Operation {
            Bind(usize, usize, usize),
            Unbind(usize, usize, usize),
            DeleteQueue(usize),
        }

        fn operation() -> impl Strategy<Value = Operation> {
            prop_oneof![
                6 => (0..3usize, 0..3usize, 0..12usize).prop_map(|(q, k, a)| Operation::Bind(q, k, a)),
                3 => (0..3usize, 0..3usize, 0..12usize).prop_map(|(q, k, a)| Operation::Unbind(q, k, a)),
                1 => (0..3usize).prop_map(Operation::DeleteQueue),
            ]
        }

        proptest! {
            /// Every kind behaves as the list it replaced: the same answers to bind and
            /// unbind, the same bindings listed, the same queues routed to.
            #[test]
            fn exchanges_agree_with_a_plain_list(operations in prop::collection::vec(operation(), 0..120)) {
                let keys = ["a", "b", ""];
                // Enough argument variants of one (queue, key) to pass from a list to a hash table.
                let variants: Vec<Table> = [Table::new(), argument("x-match", "any")]
                    .into_iter()
                    .chain((0..10).map(|i| argument("k", &if i == 0 { "v".into() } else { format!("v{i}") })))
                    .collect();
                let queues: Vec<_> = (0..3).map(|i| queue(&format!("q{i}"))).collect();
                for kind in [ExchangeKind::Direct, ExchangeKind::Fanout, ExchangeKind::Topic, ExchangeKind::Headers] {
                    let x = exchange("x", kind);
                    let mut list: Vec<Binding> = Vec::new();
                    for operation in &operations {
                        match *operation {
                            Operation::Bind(q, k, a) => {
                                let b = queue_binding("x", queues[q].name(), keys[k], variants[a].clone());
                                let new = !list.contains(&b);
                                if new {
                                    list.push(b.clone());
                                }
                                prop_assert_eq!(x.bind(b, Target::Queue(Arc::clone(&queues[q]))), new);
                            }
                            Operation::Unbind(q, k, a) => {
                                let b = queue_binding("x", queues[q].name(), keys[k], variants[a].clone());
                                let present = list.contains(&b);
                                list.retain(|l| *l != b);
                                prop_assert_eq!(x.unbind(&b), present);
                            }
                            Operation::DeleteQueue(q) => {
                                let destination = DestinationName::Queue(queues[q].name().into());
                                let before = list.len();
                                list.retain(|l| l.destination != destination);
                                prop_assert_eq!(x.unbind_destination(&destination), before - list.len());
                            }
                        }
                        let mut listed = x.bindings();
                        prop_assert_eq!(listed.len(), list.len());
                        let mut expected = list.clone();
                        let order = |b: &Binding| format!("{}|{}|{:?}", b.routing_key, b.destination.name(), b.arguments);
                        listed.sort_by_key(order);
                        expected.sort_by_key(order);
                        prop_assert_eq!(listed, expected);
                        prop_assert_eq!(x.has_bindings(), !list.is_empty());
                        for key in keys {
                            let headers = Some(argument("k", "v"));
                            let mut want: Vec<String> = list
                                .iter()
                                .filter(|b| match kind {
                                    ExchangeKind::Direct | ExchangeKind::Topic => b.routing_key == key,
                                    ExchangeKind::Fanout => true,
                                    _ => headers_match(&b.arguments, headers.as_ref()),
                                })
                                .map(|b| b.destination.name().to_string())
                                .collect();
                            want.sort();
                            want.dedup();
                            prop_assert_eq!(routed(&x, key, headers), want, "{:?} key {:?}", kind, key);
                        }
                    }
                }
            }
        }
    }
}
