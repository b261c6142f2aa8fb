//! The streams of one vhost, each in its own directory under the broker's data directory
//! (`streams/<vhost>/<stream>/`, names percent-encoded), with a `stream.meta` file keeping
//! its name and arguments so a restart finds it again.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::log::StreamLog;
use super::retention::StreamSettings;
use super::super_streams::SuperStreams;

const META_FILE: &str = "stream.meta";

/// Percent-encodes everything but `[A-Za-z0-9._-]`, so any name is a safe file name.
pub fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(..1, "%2E");
    }
    out
}

/// The inverse of [`encode_name`].
pub fn decode_name(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether a create made the stream or found it.
#[derive(Debug, Clone)]
pub enum StreamCreated {
    /// A new stream.
    Created(Arc<StreamLog>),
    /// A stream of that name already existed (left as it was).
    Existed(Arc<StreamLog>),
}

/// The streams of one vhost.
#[derive(Default)]
pub struct StreamRegistry {
    root: Option<PathBuf>,
    streams: RwLock<HashMap<String, Arc<StreamLog>>>,
    super_streams: SuperStreams,
}

impl std::fmt::Debug for StreamRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRegistry")
            .field("root", &self.root)
            .finish()
    }
}

fn write_meta(dir: &Path, name: &str, arguments: &[(String, String)]) -> io::Result<()> {
    let mut text = format!("name {}\n", encode_name(name));
    for (key, value) in arguments {
        text.push_str(&format!(
            "arg {} {}\n",
            encode_name(key),
            encode_name(value)
        ));
    }
    let temporary = dir.join("stream.meta.new");
    std::fs::write(&temporary, text)?;
    std::fs::File::open(&temporary)?.sync_all()?;
    std::fs::rename(temporary, dir.join(META_FILE))
}

fn read_meta(dir: &Path) -> Option<(String, Vec<(String, String)>)> {
    let text = std::fs::read_to_string(dir.join(META_FILE)).ok()?;
    let mut name = None;
    let mut arguments = Vec::new();
    for line in text.lines() {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some("name"), Some(value), None) => name = decode_name(value),
            (Some("arg"), Some(key), Some(value)) => {
                arguments.push((decode_name(key)?, decode_name(value)?));
            }
            _ => return None,
        }
    }
    Some((name?, arguments))
}

impl StreamRegistry {
    /// The streams kept under `root` (none when `root` is `None`: streams then cannot be
    /// created, because they live on disk). Streams found there are opened and recovered.
    pub fn open(root: Option<PathBuf>) -> StreamRegistry {
        let registry = StreamRegistry {
            super_streams: SuperStreams::open(root.as_deref()),
            root,
            streams: RwLock::default(),
        };
        if let Some(root) = &registry.root {
            if let Ok(entries) = std::fs::read_dir(root) {
                let mut streams = registry.streams.write();
                for entry in entries.flatten() {
                    let dir = entry.path();
                    if !dir.is_dir() {
                        continue;
                    }
                    let Some((name, arguments)) = read_meta(&dir) else {
                        continue;
                    };
                    let settings = StreamSettings::from_arguments(&arguments).unwrap_or_default();
                    match StreamLog::open(&name, &dir, settings) {
                        Ok(log) => {
                            streams.insert(name, log);
                        }
                        Err(error) => {
                            tracing::error!(stream = %name, %error, "cannot recover stream");
                        }
                    }
                }
            }
        }
        registry
    }

    /// The vhost's super streams.
    pub fn super_streams(&self) -> &SuperStreams {
        &self.super_streams
    }

    /// The stream called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<StreamLog>> {
        self.streams.read().get(name).cloned()
    }

    /// Every stream, sorted by name.
    pub fn list(&self) -> Vec<Arc<StreamLog>> {
        let mut streams: Vec<_> = self.streams.read().values().cloned().collect();
        streams.sort_by(|a, b| a.name().cmp(b.name()));
        streams
    }

    /// Creates stream `name` with `arguments` (or finds it). No permission check: see
    /// `VHost::create_stream`.
    pub fn create(
        &self,
        name: &str,
        arguments: &[(String, String)],
    ) -> Result<StreamCreated, String> {
        let settings = StreamSettings::from_arguments(arguments)?;
        let Some(root) = &self.root else {
            return Err(
                "streams need the broker's data directory (no message store is attached)".into(),
            );
        };
        let mut streams = self.streams.write();
        if let Some(existing) = streams.get(name) {
            return Ok(StreamCreated::Existed(Arc::clone(existing)));
        }
        let dir = root.join(encode_name(name));
        let open = || -> io::Result<Arc<StreamLog>> {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            write_meta(&dir, name, arguments)?;
            StreamLog::open(name, &dir, settings.clone())
        };
        let log = open().map_err(|error| format!("cannot create stream '{name}': {error}"))?;
        if settings.unbounded() {
            tracing::warn!(
                stream = %name,
                "stream has no retention (x-max-length-bytes or x-max-age): it grows until the disk is full"
            );
        }
        streams.insert(name.to_owned(), Arc::clone(&log));
        Ok(StreamCreated::Created(log))
    }

    /// Deletes every stream and super stream and their files (the vhost is deleted).
    pub fn delete_all(&self) {
        let names: Vec<String> = self.streams.read().keys().cloned().collect();
        for name in names {
            self.delete(&name);
        }
        if let Some(root) = &self.root {
            let _ = std::fs::remove_dir_all(root);
        }
    }

    /// Deletes stream `name` and its files; `false` when there is none.
    pub fn delete(&self, name: &str) -> bool {
        let Some(log) = self.streams.write().remove(name) else {
            return false;
        };
        if let Err(error) = log.delete() {
            tracing::warn!(stream = %name, %error, "stream files not all removed");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_survive_encoding_into_file_names() {
        for name in ["orders", "a/b", "..", "é 1%", ".hidden"] {
            let encoded = encode_name(name);
            assert!(
                !encoded.contains('/') && !encoded.starts_with('.'),
                "{encoded}"
            );
            assert_eq!(decode_name(&encoded).as_deref(), Some(name));
        }
    }
}
