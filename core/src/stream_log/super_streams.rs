//! Super streams: a name routing to N partition streams, each with a binding key, as
//! RabbitMQ's direct exchange bound to its partitions routes. Kept per vhost in
//! `super_streams.meta` beside the vhost's stream directories.
//!
//! Not yet an exchange of the vhost: AMQP publishers cannot route through a super stream
//! until streams are queues of the core's queue-type interface.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;

use super::registry::{decode_name, encode_name};

const META_FILE: &str = "super_streams.meta";

/// One super stream: its partitions in order, each with its binding key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperStream {
    /// `(partition stream, binding key)` in partition order.
    pub partitions: Vec<(String, String)>,
}

impl SuperStream {
    /// The partition streams, in order.
    pub fn partition_names(&self) -> Vec<String> {
        self.partitions.iter().map(|(p, _)| p.clone()).collect()
    }

    /// The partitions a routing key goes to (binding keys compared as a direct exchange
    /// compares them).
    pub fn route(&self, routing_key: &str) -> Vec<String> {
        self.partitions
            .iter()
            .filter(|(_, key)| key == routing_key)
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// The super streams of one vhost.
#[derive(Debug, Default)]
pub struct SuperStreams {
    path: Option<PathBuf>,
    entries: RwLock<BTreeMap<String, SuperStream>>,
}

fn parse(text: &str) -> Option<BTreeMap<String, SuperStream>> {
    let mut entries: BTreeMap<String, SuperStream> = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split(' ');
        let (Some(name), Some(partition), Some(key), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return None;
        };
        entries
            .entry(decode_name(name)?)
            .or_insert_with(|| SuperStream {
                partitions: Vec::new(),
            })
            .partitions
            .push((decode_name(partition)?, decode_name(key)?));
    }
    Some(entries)
}

impl SuperStreams {
    /// The super streams saved under `root` (none without a root).
    pub fn open(root: Option<&Path>) -> SuperStreams {
        let path = root.map(|root| root.join(META_FILE));
        let entries = path
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| parse(&text))
            .unwrap_or_default();
        SuperStreams {
            path,
            entries: RwLock::new(entries),
        }
    }

    fn save(&self, entries: &BTreeMap<String, SuperStream>) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut text = String::new();
        for (name, super_stream) in entries {
            for (partition, key) in &super_stream.partitions {
                text.push_str(&format!(
                    "{} {} {}\n",
                    encode_name(name),
                    encode_name(partition),
                    encode_name(key)
                ));
            }
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let temporary = path.with_extension("new");
        std::fs::write(&temporary, text)?;
        std::fs::File::open(&temporary)?.sync_all()?;
        std::fs::rename(temporary, path)
    }

    /// The super stream called `name`.
    pub fn get(&self, name: &str) -> Option<SuperStream> {
        self.entries.read().get(name).cloned()
    }

    /// Adds a super stream; `false` when one of that name exists.
    pub fn insert(&self, name: &str, super_stream: SuperStream) -> io::Result<bool> {
        let mut entries = self.entries.write();
        if entries.contains_key(name) {
            return Ok(false);
        }
        entries.insert(name.to_owned(), super_stream);
        self.save(&entries)?;
        Ok(true)
    }

    /// Removes a super stream, returning it.
    pub fn remove(&self, name: &str) -> io::Result<Option<SuperStream>> {
        let mut entries = self.entries.write();
        let removed = entries.remove(name);
        if removed.is_some() {
            self.save(&entries)?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_streams_route_by_binding_key_and_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("warren-super-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let partitions = vec![
            ("orders-0".to_string(), "eu".to_string()),
            ("orders-1".to_string(), "us".to_string()),
        ];
        {
            let supers = SuperStreams::open(Some(&dir));
            assert!(supers
                .insert(
                    "orders",
                    SuperStream {
                        partitions: partitions.clone()
                    }
                )
                .unwrap());
            assert!(!supers
                .insert("orders", SuperStream { partitions: vec![] })
                .unwrap());
        }
        let supers = SuperStreams::open(Some(&dir));
        let found = supers.get("orders").unwrap();
        assert_eq!(found.partitions, partitions);
        assert_eq!(found.route("us"), vec!["orders-1".to_string()]);
        assert!(found.route("asia").is_empty());
        assert!(supers.remove("orders").unwrap().is_some());
        assert!(SuperStreams::open(Some(&dir)).get("orders").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
