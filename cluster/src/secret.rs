//! The shared cluster secret (`cluster.secret_file`), RabbitMQ's Erlang cookie: created with
//! 32 random bytes and mode 0600 when absent; a file that group or others may read is refused.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::RngCore;

/// How many random bytes a new secret has.
pub const SECRET_LENGTH: usize = 32;

/// Why the secret could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretError {
    /// Group or others may read the file.
    Readable {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is empty.
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read or created.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's explanation.
        reason: String,
    },
}

impl std::fmt::Display for SecretError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretError::Readable { path, mode } => write!(
                f,
                "cluster secret file {} has mode {mode:04o}: it must be readable by its owner only (chmod 600 {})",
                path.display(),
                path.display()
            ),
            SecretError::Empty { path } => {
                write!(f, "cluster secret file {} is empty", path.display())
            }
            SecretError::Io { path, reason } => {
                write!(f, "cluster secret file {}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for SecretError {}

/// The secret every node of a cluster shares. Its bytes are never logged.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret from its bytes (tests, and nodes given one by other means).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The bytes, for the HMAC.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Reads the secret at `path`, creating it (32 random bytes, mode 0600) when absent.
    /// A file group or others may read is refused, naming the file and its mode.
    pub fn load_or_create(path: &Path) -> Result<Secret, SecretError> {
        let io = |error: std::io::Error| SecretError::Io {
            path: path.to_owned(),
            reason: error.to_string(),
        };
        match std::fs::metadata(path) {
            Ok(metadata) => {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = metadata.permissions().mode() & 0o777;
                    if mode & 0o077 != 0 {
                        return Err(SecretError::Readable {
                            path: path.to_owned(),
                            mode,
                        });
                    }
                }
                #[cfg(not(unix))]
                let _ = metadata;
                let bytes = std::fs::read(path).map_err(io)?;
                if bytes.is_empty() {
                    return Err(SecretError::Empty {
                        path: path.to_owned(),
                    });
                }
                Ok(Secret(bytes))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let mut bytes = vec![0u8; SECRET_LENGTH];
                rand::thread_rng().fill_bytes(&mut bytes);
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    options.mode(0o600);
                }
                let mut file = options.open(path).map_err(io)?;
                file.write_all(&bytes).map_err(io)?;
                file.sync_all().map_err(io)?;
                tracing::info!(path = %path.display(), "created a new cluster secret");
                Ok(Secret(bytes))
            }
            Err(error) => Err(io(error)),
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "warren-secret-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_missing_secret_is_created_owner_only_and_read_back() {
        let dir = temporary_dir("create");
        let path = dir.join("sub").join("cluster.secret");
        let created = Secret::load_or_create(&path).unwrap();
        assert_eq!(created.bytes().len(), SECRET_LENGTH);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let read = Secret::load_or_create(&path).unwrap();
        assert_eq!(read.bytes(), created.bytes());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_world_readable_secret_is_refused_naming_file_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temporary_dir("readable");
        let path = dir.join("cluster.secret");
        std::fs::write(&path, b"0123456789").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = Secret::load_or_create(&path).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("0644"), "{text}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
