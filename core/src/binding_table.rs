//! The bindings of one exchange, found by hashing rather than by scanning.
//!
//! Every MQTT subscription is a binding on `amq.topic`, so an exchange may hold a million
//! bindings and gain or lose thousands a second as devices come and go. Binding, unbinding,
//! the duplicate check and removing every binding of a deleted queue each cost one or two hash
//! lookups here, whatever the exchange holds.
//!
//! Bindings are grouped by destination (one [`Destination`] per bound queue or exchange, in a
//! table hashed by the destination's kind and name), then by routing key, then by arguments.
//! The common case, a destination bound once with no arguments, is one 40-byte table slot
//! holding the target and its key: nothing is stored twice, and names stay shared with the
//! queue or exchange they belong to.
//!
//! A binding whose source is not this exchange's name, or whose destination is not the
//! target's own name, cannot be found by the target's name; such bindings (the vhost never
//! makes them) are kept as given in a list scanned only when it is not empty.

use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use hashbrown::HashTable;

use crate::binding::{Binding, DestinationName, Target};
use crate::value::{Table, Value};

/// No arguments, for bindings stored without any.
static NO_ARGUMENTS: Table = Table(Vec::new());

/// Bytes one destination's slot takes in the table (one control byte aside).
#[cfg(test)]
pub(crate) const SLOT_SIZE: usize = std::mem::size_of::<Destination>();

/// The bindings of one exchange.
#[derive(Default)]
pub(crate) struct BindingTable {
    /// Keyed per table (randomly) since binding keys and names come from clients.
    hasher: RandomState,
    destinations: HashTable<Destination>,
    /// Bindings that do not name their own source and target (see the module doc).
    unusual: Vec<(Binding, Target)>,
}

/// Every binding from this exchange to one target, named by the target's own name.
struct Destination {
    target: Target,
    keys: Keys,
}

/// The routing keys a destination is bound with.
enum Keys {
    /// One key (nearly every destination).
    One(KeyBindings),
    /// Several, hashed by key.
    Many(Box<HashTable<KeyBindings>>),
}

/// The bindings of one destination with one routing key.
struct KeyBindings {
    routing_key: Box<str>,
    /// `None`: one binding without arguments. Otherwise the arguments of each binding (one of
    /// them may be empty); never empty.
    arguments: Option<Box<ArgumentVariants>>,
}

/// Largest number of argument tables kept in a list; more are hashed (a headers exchange
/// may bind one queue with one key under thousands of header sets).
const FEW_ARGUMENTS: usize = 8;

/// The argument tables of the bindings of one (destination, key).
enum ArgumentVariants {
    Few(Vec<Table>),
    Many(HashTable<Table>),
}

impl ArgumentVariants {
    fn len(&self) -> usize {
        match self {
            ArgumentVariants::Few(few) => few.len(),
            ArgumentVariants::Many(many) => many.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Table> {
        let (few, many) = match self {
            ArgumentVariants::Few(few) => (Some(few.iter()), None),
            ArgumentVariants::Many(many) => (None, Some(many.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }
}

/// Hashes a table consistently with its equality (entries in order; `0.0` and `-0.0` alike).
fn hash_table(hasher: &RandomState, table: &Table) -> u64 {
    let mut state = hasher.build_hasher();
    write_table(table, &mut state);
    state.finish()
}

fn write_table(table: &Table, state: &mut impl Hasher) {
    state.write_usize(table.0.len());
    for (name, value) in &table.0 {
        name.hash(state);
        write_value(value, state);
    }
}

fn write_value(value: &Value, state: &mut impl Hasher) {
    std::mem::discriminant(value).hash(state);
    match value {
        Value::Bool(v) => v.hash(state),
        Value::I8(v) => v.hash(state),
        Value::U8(v) => v.hash(state),
        Value::I16(v) => v.hash(state),
        Value::U16(v) => v.hash(state),
        Value::I32(v) => v.hash(state),
        Value::U32(v) => v.hash(state),
        Value::I64(v) => v.hash(state),
        // Equal floats hash alike: +0.0 == -0.0 (NaN equals nothing, so any hash will do).
        Value::F32(v) => (if *v == 0.0 { 0.0f32 } else { *v }).to_bits().hash(state),
        Value::F64(v) => (if *v == 0.0 { 0.0f64 } else { *v }).to_bits().hash(state),
        Value::Decimal { scale, value } => (scale, value).hash(state),
        Value::LongString(v) | Value::ByteArray(v) => v.hash(state),
        Value::Array(items) => {
            state.write_usize(items.len());
            for item in items {
                write_value(item, state);
            }
        }
        Value::Timestamp(v) => v.hash(state),
        Value::Table(table) => write_table(table, state),
        Value::Void => {}
    }
}

/// A destination's kind and name, as hashed.
fn destination_of(target: &Target) -> (bool, &str) {
    match target {
        Target::Queue(queue) => (true, queue.name()),
        Target::Exchange(name) => (false, name),
    }
}

fn destination_name(destination: &DestinationName) -> (bool, &str) {
    match destination {
        DestinationName::Queue(name) => (true, name),
        DestinationName::Exchange(name) => (false, name),
    }
}

impl KeyBindings {
    fn new(routing_key: String, arguments: Table) -> KeyBindings {
        KeyBindings {
            routing_key: routing_key.into_boxed_str(),
            arguments: (!arguments.0.is_empty())
                .then(|| Box::new(ArgumentVariants::Few(vec![arguments]))),
        }
    }

    fn arguments(&self) -> impl Iterator<Item = &Table> {
        let (none, some) = match &self.arguments {
            None => (Some(&NO_ARGUMENTS), None),
            Some(variants) => (None, Some(variants.iter())),
        };
        none.into_iter().chain(some.into_iter().flatten())
    }

    fn contains(&self, hasher: &RandomState, arguments: &Table) -> bool {
        match self.arguments.as_deref() {
            None => arguments.0.is_empty(),
            Some(ArgumentVariants::Few(few)) => few.contains(arguments),
            Some(ArgumentVariants::Many(many)) => many
                .find(hash_table(hasher, arguments), |a| a == arguments)
                .is_some(),
        }
    }

    /// Adds a binding with `arguments`, known not to be here yet.
    fn add(&mut self, hasher: &RandomState, arguments: Table) {
        let hash_of = |t: &Table| hash_table(hasher, t);
        let variants = self
            .arguments
            .get_or_insert_with(|| Box::new(ArgumentVariants::Few(vec![Table::new()])));
        match &mut **variants {
            ArgumentVariants::Few(few) if few.len() < FEW_ARGUMENTS => few.push(arguments),
            ArgumentVariants::Few(few) => {
                let mut many = HashTable::with_capacity(few.len() + 1);
                for table in std::mem::take(few).into_iter().chain([arguments]) {
                    many.insert_unique(hash_of(&table), table, hash_of);
                }
                **variants = ArgumentVariants::Many(many);
            }
            ArgumentVariants::Many(many) => {
                many.insert_unique(hash_of(&arguments), arguments, hash_of);
            }
        }
    }

    /// Removes the binding with `arguments`: `None` when there was none, else whether this
    /// key has no bindings left.
    fn remove(&mut self, hasher: &RandomState, arguments: &Table) -> Option<bool> {
        let Some(variants) = &mut self.arguments else {
            return arguments.0.is_empty().then_some(true);
        };
        match &mut **variants {
            ArgumentVariants::Few(few) => {
                let index = few.iter().position(|a| a == arguments)?;
                few.remove(index);
            }
            ArgumentVariants::Many(many) => {
                let entry = many
                    .find_entry(hash_table(hasher, arguments), |a| a == arguments)
                    .ok()?;
                entry.remove();
                if many.len() <= FEW_ARGUMENTS / 2 {
                    **variants = ArgumentVariants::Few(many.drain().collect());
                }
            }
        }
        match variants.len() {
            0 => Some(true),
            1 if variants.iter().all(|a| a.0.is_empty()) => {
                self.arguments = None;
                Some(false)
            }
            _ => Some(false),
        }
    }
}

impl Keys {
    fn get(&self, hasher: &RandomState, routing_key: &str) -> Option<&KeyBindings> {
        match self {
            Keys::One(one) => (*one.routing_key == *routing_key).then_some(one),
            Keys::Many(many) => many.find(hasher.hash_one(routing_key), |k| {
                *k.routing_key == *routing_key
            }),
        }
    }

    fn get_mut(&mut self, hasher: &RandomState, routing_key: &str) -> Option<&mut KeyBindings> {
        match self {
            Keys::One(one) => (*one.routing_key == *routing_key).then_some(one),
            Keys::Many(many) => many.find_mut(hasher.hash_one(routing_key), |k| {
                *k.routing_key == *routing_key
            }),
        }
    }

    fn insert(&mut self, hasher: &RandomState, key: KeyBindings) {
        let hash_of = |k: &KeyBindings| hasher.hash_one(&*k.routing_key);
        match self {
            Keys::Many(many) => {
                many.insert_unique(hash_of(&key), key, hash_of);
            }
            Keys::One(_) => {
                let Keys::One(first) = std::mem::replace(self, Keys::Many(Box::default())) else {
                    unreachable!("matched One above");
                };
                let Keys::Many(many) = self else {
                    unreachable!("just replaced");
                };
                many.insert_unique(hash_of(&first), first, hash_of);
                many.insert_unique(hash_of(&key), key, hash_of);
            }
        }
    }

    /// Removes `routing_key`'s entry; returns whether no key is left.
    fn remove(&mut self, hasher: &RandomState, routing_key: &str) -> bool {
        match self {
            Keys::One(_) => true,
            Keys::Many(many) => {
                if let Ok(entry) = many.find_entry(hasher.hash_one(routing_key), |k| {
                    *k.routing_key == *routing_key
                }) {
                    entry.remove();
                }
                match many.len() {
                    0 => true,
                    1 => {
                        let last = many.drain().next();
                        if let Some(last) = last {
                            *self = Keys::One(last);
                        }
                        false
                    }
                    _ => false,
                }
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = &KeyBindings> {
        let (one, many) = match self {
            Keys::One(one) => (Some(one), None),
            Keys::Many(many) => (None, Some(many.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

impl BindingTable {
    fn hash(&self, destination: (bool, &str)) -> u64 {
        self.hasher.hash_one(destination)
    }

    fn destination(&self, destination: (bool, &str)) -> Option<&Destination> {
        self.destinations.find(self.hash(destination), |d| {
            destination_of(&d.target) == destination
        })
    }

    /// Whether `binding` is here (compared as [`Binding`]'s equality does).
    pub(crate) fn contains(&self, exchange: &str, binding: &Binding) -> bool {
        let stored = binding.source == exchange
            && self
                .destination(destination_name(&binding.destination))
                .and_then(|d| d.keys.get(&self.hasher, &binding.routing_key))
                .is_some_and(|k| k.contains(&self.hasher, &binding.arguments));
        stored || self.unusual.iter().any(|(b, _)| b == binding)
    }

    /// Whether any binding has `routing_key` and `target` (whatever its arguments).
    pub(crate) fn shares(&self, routing_key: &str, target: &Target) -> bool {
        let stored = self.destination(destination_of(target)).is_some_and(|d| {
            d.target == *target && d.keys.get(&self.hasher, routing_key).is_some()
        });
        stored
            || self
                .unusual
                .iter()
                .any(|(b, t)| b.routing_key == routing_key && t == target)
    }

    /// Adds `binding`, known not to be here ([`contains`](Self::contains) is false).
    pub(crate) fn insert(&mut self, exchange: &str, binding: Binding, target: Target) {
        let destination = destination_name(&binding.destination);
        if binding.source != exchange || destination != destination_of(&target) {
            self.unusual.push((binding, target));
            return;
        }
        let hash = self.hash(destination);
        let hasher = &self.hasher;
        match self
            .destinations
            .find_mut(hash, |d| destination_of(&d.target) == destination)
        {
            // The same name bound to another object (only when a caller passes stale
            // targets): kept apart so that each entry has one target.
            Some(found) if found.target != target => self.unusual.push((binding, target)),
            Some(found) => match found.keys.get_mut(hasher, &binding.routing_key) {
                Some(key) => key.add(hasher, binding.arguments),
                None => found.keys.insert(
                    hasher,
                    KeyBindings::new(binding.routing_key, binding.arguments),
                ),
            },
            None => {
                let entry = Destination {
                    keys: Keys::One(KeyBindings::new(binding.routing_key, binding.arguments)),
                    target,
                };
                self.destinations
                    .insert_unique(hash, entry, |d| hasher.hash_one(destination_of(&d.target)));
            }
        }
    }

    /// Removes the binding equal to `binding` and returns its target.
    pub(crate) fn remove(&mut self, exchange: &str, binding: &Binding) -> Option<Target> {
        if binding.source == exchange {
            let destination = destination_name(&binding.destination);
            let hash = self.hash(destination);
            let hasher = &self.hasher;
            if let Ok(mut entry) = self
                .destinations
                .find_entry(hash, |d| destination_of(&d.target) == destination)
            {
                let found = entry.get_mut();
                let key_emptied = found
                    .keys
                    .get_mut(hasher, &binding.routing_key)
                    .and_then(|key| key.remove(hasher, &binding.arguments));
                if let Some(key_emptied) = key_emptied {
                    let target = found.target.clone();
                    if key_emptied && found.keys.remove(hasher, &binding.routing_key) {
                        entry.remove();
                    }
                    return Some(target);
                }
            }
        }
        let index = self.unusual.iter().position(|(b, _)| b == binding)?;
        Some(self.unusual.remove(index).1)
    }

    /// Removes every binding to `destination` and returns them as (routing key, arguments,
    /// target).
    pub(crate) fn remove_destination(
        &mut self,
        destination: &DestinationName,
    ) -> Vec<(String, Table, Target)> {
        let mut removed = Vec::new();
        let name = destination_name(destination);
        if let Ok(entry) = self
            .destinations
            .find_entry(self.hash(name), |d| destination_of(&d.target) == name)
        {
            let (found, _) = entry.remove();
            for key in found.keys.iter() {
                for arguments in key.arguments() {
                    removed.push((
                        key.routing_key.to_string(),
                        arguments.clone(),
                        found.target.clone(),
                    ));
                }
            }
        }
        if !self.unusual.is_empty() {
            self.unusual.retain(|(b, t)| {
                if b.destination == *destination {
                    removed.push((b.routing_key.clone(), b.arguments.clone(), t.clone()));
                    false
                } else {
                    true
                }
            });
        }
        removed
    }

    /// Whether there are no bindings.
    pub(crate) fn is_empty(&self) -> bool {
        self.destinations.is_empty() && self.unusual.is_empty()
    }

    /// Each distinct target once, then the unusual bindings' targets (which may repeat).
    pub(crate) fn targets(&self) -> impl Iterator<Item = &Target> {
        self.destinations
            .iter()
            .map(|d| &d.target)
            .chain(self.unusual.iter().map(|(_, t)| t))
    }

    /// Every binding's arguments with its target.
    pub(crate) fn arguments(&self) -> impl Iterator<Item = (&Table, &Target)> {
        self.destinations
            .iter()
            .flat_map(|d| {
                d.keys
                    .iter()
                    .flat_map(|k| k.arguments())
                    .map(move |a| (a, &d.target))
            })
            .chain(self.unusual.iter().map(|(b, t)| (&b.arguments, t)))
    }

    /// Every binding, sorted as `rabbitmqctl list_bindings` lists them (see [`sorted_bindings`]).
    pub(crate) fn list(&self, exchange: &str) -> Vec<Binding> {
        let mut rows = Vec::with_capacity(self.destinations.len());
        for found in &self.destinations {
            found.rows_into(exchange, &mut rows);
        }
        rows.extend(self.unusual.iter().map(|(b, _)| Row::of(b)));
        sorted_bindings(rows)
    }

    /// The bindings to `destination`, sorted as [`list`](Self::list) sorts them.
    pub(crate) fn list_to(&self, exchange: &str, destination: &DestinationName) -> Vec<Binding> {
        let mut rows = Vec::new();
        if let Some(found) = self.destination(destination_name(destination)) {
            found.rows_into(exchange, &mut rows);
        }
        rows.extend(
            self.unusual
                .iter()
                .filter(|(b, _)| b.destination == *destination)
                .map(|(b, _)| Row::of(b)),
        );
        sorted_bindings(rows)
    }

    /// Whether any binding leads to `destination`.
    pub(crate) fn has_destination(&self, destination: &DestinationName) -> bool {
        self.destination(destination_name(destination)).is_some()
            || self
                .unusual
                .iter()
                .any(|(b, _)| b.destination == *destination)
    }
}

impl Destination {
    fn rows_into<'a>(&'a self, exchange: &'a str, rows: &mut Vec<Row<'a>>) {
        for key in self.keys.iter() {
            for arguments in key.arguments() {
                rows.push(Row {
                    source: exchange,
                    routing_key: &key.routing_key,
                    destination: destination_of(&self.target),
                    arguments,
                });
            }
        }
    }
}

/// A binding as listed, borrowed from the table: sorted before anything is copied.
struct Row<'a> {
    source: &'a str,
    routing_key: &'a str,
    destination: (bool, &'a str),
    arguments: &'a Table,
}

impl Row<'_> {
    fn of(binding: &Binding) -> Row<'_> {
        Row {
            source: &binding.source,
            routing_key: &binding.routing_key,
            destination: destination_name(&binding.destination),
            arguments: &binding.arguments,
        }
    }
}

/// Sorts bindings as `rabbitmqctl list_bindings` lists them: by source, routing key,
/// destination kind (exchanges first), destination name, then arguments (none first, then
/// entry by entry by name, value type and value text); then copies them out.
fn sorted_bindings(mut rows: Vec<Row<'_>>) -> Vec<Binding> {
    fn arguments_order(a: &Table, b: &Table) -> std::cmp::Ordering {
        let entries = |t: &Table| -> Vec<(String, &'static str, String)> {
            t.0.iter()
                .map(|(name, value)| (name.clone(), value.type_name(), value.to_string()))
                .collect()
        };
        entries(a).cmp(&entries(b))
    }
    rows.sort_by(|a, b| {
        (a.source, a.routing_key, a.destination)
            .cmp(&(b.source, b.routing_key, b.destination))
            .then_with(|| {
                if a.arguments.0.is_empty() && b.arguments.0.is_empty() {
                    std::cmp::Ordering::Equal
                } else {
                    arguments_order(a.arguments, b.arguments)
                }
            })
    });
    rows.into_iter()
        .map(|row| Binding {
            source: row.source.to_string(),
            destination: match row.destination {
                (true, name) => DestinationName::Queue(name.to_string()),
                (false, name) => DestinationName::Exchange(name.to_string()),
            },
            routing_key: row.routing_key.to_string(),
            arguments: row.arguments.clone(),
        })
        .collect()
}
