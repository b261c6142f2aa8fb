//! The broker: the set of vhosts and users, authentication, and connection ids.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::access::{Permissions, User};
use crate::error::{CoreError, CoreResult};
use crate::password::PasswordHash;
use crate::vhost::VHost;

/// Broker-wide limits every listener enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest message body accepted, in bytes.
    pub max_message_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size: 16 * 1024 * 1024,
        }
    }
}

/// Why a login failed. Listeners answer every variant with the same refusal (as RabbitMQ
/// does, so as not to tell an attacker which part was wrong) and log the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// No such user.
    UnknownUser,
    /// Wrong password, or a user without a password.
    BadPassword,
    /// A loopback-only user connected from another address.
    LoopbackOnly,
}

impl std::fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuthFailure::UnknownUser => "user does not exist",
            AuthFailure::BadPassword => "invalid credentials",
            AuthFailure::LoopbackOnly => "user can only connect via localhost",
        })
    }
}

/// The whole broker model.
pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    users: RwLock<HashMap<String, Arc<User>>>,
    loopback_users: RwLock<HashSet<String>>,
    limits: Limits,
    next_connection_id: AtomicU64,
}

impl Broker {
    /// An empty broker: no vhosts, no users.
    pub fn new(limits: Limits) -> Arc<Broker> {
        Arc::new(Broker {
            vhosts: RwLock::new(HashMap::new()),
            users: RwLock::new(HashMap::new()),
            loopback_users: RwLock::new(HashSet::new()),
            limits,
            next_connection_id: AtomicU64::new(1),
        })
    }

    /// Broker-wide limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A fresh connection id, unique for the broker's lifetime.
    pub fn next_connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Creates a vhost, or returns the existing one.
    pub fn add_vhost(&self, name: &str) -> Arc<VHost> {
        let mut vhosts = self.vhosts.write();
        Arc::clone(
            vhosts
                .entry(name.to_string())
                .or_insert_with(|| VHost::new(name)),
        )
    }

    /// Deletes a vhost and everything in it.
    pub fn delete_vhost(&self, name: &str) -> bool {
        self.vhosts.write().remove(name).is_some()
    }

    /// The vhost called `name`.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// All vhost names, sorted.
    pub fn vhost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vhosts.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// Adds or replaces a user.
    pub fn put_user(&self, user: User) {
        self.users.write().insert(user.name.clone(), Arc::new(user));
    }

    /// Adds or replaces a user with a plain-text password (hashed here).
    pub fn add_user(&self, name: &str, password: &str, tags: Vec<String>) {
        self.put_user(User {
            name: name.to_string(),
            password: Some(PasswordHash::new(password)),
            tags,
        });
    }

    /// The user called `name`.
    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    /// Makes `user` loopback-only (RabbitMQ's `loopback_users`).
    pub fn set_loopback_users(&self, users: impl IntoIterator<Item = String>) {
        *self.loopback_users.write() = users.into_iter().collect();
    }

    /// Grants `user` permissions in `vhost`.
    pub fn set_permissions(
        &self,
        user: &str,
        vhost: &str,
        permissions: Permissions,
    ) -> CoreResult<()> {
        let vhost = self
            .vhost(vhost)
            .ok_or_else(|| CoreError::not_found(format!("no vhost '{vhost}'")))?;
        vhost.set_permissions(user, permissions);
        Ok(())
    }

    /// Checks a user name and password. `from_loopback` tells whether the peer address is a
    /// loopback address.
    pub fn authenticate(
        &self,
        username: &str,
        password: &str,
        from_loopback: bool,
    ) -> Result<Arc<User>, AuthFailure> {
        let user = self.user(username).ok_or(AuthFailure::UnknownUser)?;
        let valid = user
            .password
            .as_ref()
            .is_some_and(|hash| hash.verify(password));
        if !valid {
            return Err(AuthFailure::BadPassword);
        }
        if !from_loopback && self.loopback_users.read().contains(username) {
            return Err(AuthFailure::LoopbackOnly);
        }
        Ok(user)
    }

    /// Opens `vhost` for `user`: the vhost must exist and the user must have permissions
    /// there (any, as RabbitMQ requires). Errors carry RabbitMQ's 530 texts.
    pub fn open_vhost(&self, user: &str, vhost: &str) -> CoreResult<Arc<VHost>> {
        let found = self
            .vhost(vhost)
            .ok_or_else(|| CoreError::not_allowed(format!("vhost {vhost} not found")))?;
        if found.permissions(user).is_none() {
            return Err(CoreError::not_allowed(format!(
                "access to vhost '{vhost}' refused for user '{user}'"
            )));
        }
        Ok(found)
    }
}
