//! Topic permissions of a vhost (`crate::topic_access`): storing them and the one check every
//! listener's publish and bind go through.

use std::sync::Arc;

use super::VHost;
use crate::access::Access;
use crate::error::CoreResult;
use crate::exchange::{Exchange, ExchangeKind};
use crate::topic_access::{topic_access_refused, TopicPermission, TopicVariables};

impl VHost {
    /// Sets `user`'s topic permission on its exchange here, replacing an earlier one for the
    /// same exchange; true if it is new.
    pub fn set_topic_permission(&self, user: &str, permission: TopicPermission) -> bool {
        let created = self.topic_permissions.set(user, permission);
        self.durability.topology_changed();
        created
    }

    /// Removes `user`'s topic permission on `exchange`, or all of them here when `exchange`
    /// is `None`; true if anything was removed.
    pub fn clear_topic_permissions(&self, user: &str, exchange: Option<&str>) -> bool {
        let removed = self.topic_permissions.clear(user, exchange);
        if removed {
            self.durability.topology_changed();
        }
        removed
    }

    /// Every topic permission here as (user, permission), sorted by user then exchange.
    pub fn topic_permission_entries(&self) -> Vec<(String, Arc<TopicPermission>)> {
        self.topic_permissions.entries()
    }

    /// Checks a routing key (`Access::Write`, publishing) or a binding key (`Access::Read`,
    /// binding) against `user`'s topic permission on `exchange`, with RabbitMQ's refusal
    /// text. Only topic exchanges are checked; a user without a topic permission on the
    /// exchange is not restricted. Costs one atomic load while the vhost has no topic
    /// permissions, so listeners call it on every publish.
    pub fn check_topic(
        &self,
        user: &str,
        access: Access,
        exchange: &str,
        key: &str,
        variables: &TopicVariables<'_>,
    ) -> CoreResult<()> {
        let Some(permission) = self.topic_permissions.lookup(user, exchange) else {
            return Ok(());
        };
        let is_topic = self
            .exchange(exchange)
            .is_some_and(|x| x.config().kind == ExchangeKind::Topic);
        if !is_topic || permission.allows(access, key, variables) {
            return Ok(());
        }
        Err(topic_access_refused(
            access, key, exchange, &self.name, user,
        ))
    }

    /// [`VHost::check_topic`] for an exchange already looked up.
    pub(super) fn check_topic_on(
        &self,
        exchange: &Arc<Exchange>,
        user: &str,
        access: Access,
        key: &str,
        variables: &TopicVariables<'_>,
    ) -> CoreResult<()> {
        if exchange.config().kind != ExchangeKind::Topic {
            return Ok(());
        }
        match self.topic_permissions.lookup(user, exchange.name()) {
            Some(permission) if !permission.allows(access, key, variables) => Err(
                topic_access_refused(access, key, exchange.name(), &self.name, user),
            ),
            _ => Ok(()),
        }
    }
}
