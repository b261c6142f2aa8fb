//! The one publish path of the broker. Every listener (AMQP 0-9-1, AMQP 1.0, MQTT, STOMP) and
//! the management API publish through [`VHost::publish`] (or its two halves,
//! [`VHost::authorize_publish`] and [`VHost::publish_authorized`], where a protocol must do
//! something between them), so the write and topic permission checks, the `user_id` rule,
//! alternate exchanges, CC/BCC, routing, the store write for persistent messages in durable
//! queues and the enqueue are written once, and no listener enqueues to a queue itself.
//!
//! What a publisher waits for before telling its client the message is safe comes back as
//! [`AwaitSettlement`]: nothing, or the store sequence number that must be on disk. A
//! replicated queue type adds its own variant (a majority of replicas) without the listeners
//! changing how they wait.

use std::sync::Arc;

use super::{Actor, Enqueued, VHost};
use crate::access::{Access, ResourceKind};
use crate::error::CoreError;
use crate::message::Message;
use crate::queue::Queue;
use crate::queue_type::QueueInstance;
use crate::topic_access::TopicVariables;

/// How many exchanges a [`Publisher`] remembers the write permission for. A channel rarely
/// publishes to more; past it the oldest is checked again.
const ALLOWED_EXCHANGES_KEPT: usize = 16;

/// A publishing channel's (link's, connection's) state on the publish path: the exchanges
/// its user was found allowed to write to. Kept small (no heap until the first publish, one
/// slot for a channel publishing to one exchange) because MQTT holds one per connection.
#[derive(Debug, Default)]
pub struct Publisher {
    allowed: Vec<Arc<str>>,
}

thread_local! {
    /// The queues a publish was routed to, reused from publish to publish on this thread so
    /// routing allocates nothing and no connection holds a list of its own. Taken out while
    /// in use, so a nested publish (dead-lettering) only finds it empty.
    static ROUTED: std::cell::RefCell<Vec<Arc<Queue>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The same for queues of other types (quorum), reached through the queue-type
    /// interface.
    static ROUTED_TYPED: std::cell::RefCell<Vec<Arc<dyn QueueInstance>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Publisher {
    /// A publisher that has checked nothing yet.
    pub fn new() -> Publisher {
        Publisher::default()
    }

    /// Forgets the cached write permissions (the user's permissions changed).
    pub fn forget_permissions(&mut self) {
        self.allowed.clear();
    }
}

/// What a publish asks for beyond the message itself.
#[derive(Debug, Clone, Copy)]
pub struct PublishOptions<'a> {
    /// Values for topic permission patterns (`{client_id}` for MQTT).
    pub variables: &'a TopicVariables<'a>,
    /// AMQP 0-9-1 `mandatory`: hand the message back when it reaches no queue.
    pub mandatory: bool,
}

impl Default for PublishOptions<'_> {
    fn default() -> Self {
        PublishOptions {
            variables: &TopicVariables::NONE,
            mandatory: false,
        }
    }
}

/// Which check refused a publish, so each protocol answers as RabbitMQ does for it (AMQP
/// 1.0 rejects a message for some and ends the session for others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishStage {
    /// The user may not write to the exchange.
    Write,
    /// The user's topic permission does not allow this routing key.
    Topic,
    /// The message's `user_id` is not the authenticated user.
    UserId,
    /// Routing failed: the exchange does not exist or is internal.
    Route,
}

/// A refused publish: the stage that refused it and the error, worded as RabbitMQ words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    /// Which check refused it.
    pub stage: PublishStage,
    /// The error, with its kind and text.
    pub error: CoreError,
}

impl From<PublishError> for CoreError {
    fn from(error: PublishError) -> CoreError {
        error.error
    }
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PublishError {}

/// What a publisher must wait for before telling its client that a message is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwaitSettlement {
    /// Nothing: the message is as safe as it will get (transient, or no durable queue took
    /// it).
    Nothing,
    /// The message store's sequence number that must be durable (see
    /// [`crate::store::MessageStore::subscribe_durable`]).
    Disk(u64),
}

impl AwaitSettlement {
    /// The store sequence number to wait for, if any.
    pub fn durable_seq(self) -> Option<u64> {
        match self {
            AwaitSettlement::Nothing => None,
            AwaitSettlement::Disk(seq) => Some(seq),
        }
    }
}

/// What a publish did.
#[derive(Debug, Clone)]
pub struct PublishOutcome {
    /// How many queues the message reached.
    pub queues: usize,
    /// Every queue took it (false: a queue refused it with `x-overflow = reject-publish`; a
    /// publisher with confirms gets a nack).
    pub accepted: bool,
    /// What to wait for before confirming it.
    pub settlement: AwaitSettlement,
    /// The message (without its `BCC` header) when it was mandatory and reached no queue,
    /// for the publisher's protocol to return it.
    pub returned: Option<Arc<Message>>,
}

impl PublishOutcome {
    /// The message reached at least one queue.
    pub fn routed(&self) -> bool {
        self.queues > 0
    }

    /// The store sequence number to wait for before confirming, if any.
    pub fn durable_seq(&self) -> Option<u64> {
        self.settlement.durable_seq()
    }
}

impl VHost {
    /// Publishes `message` (its `exchange` and `routing_key` say where) for `actor`: checks
    /// that the actor may write to the exchange (cached in `publisher`), that its topic
    /// permission allows the routing key, and that the message's `user_id`, if set, is the
    /// actor; then routes it (exchange-to-exchange bindings, alternate exchanges, CC and BCC
    /// keys), drops its `BCC` header, writes it to the message store when it is persistent
    /// and reached a durable queue, and enqueues it.
    pub fn publish(
        &self,
        publisher: &mut Publisher,
        actor: Actor<'_>,
        message: Arc<Message>,
        options: PublishOptions<'_>,
    ) -> Result<PublishOutcome, PublishError> {
        self.authorize_publish(
            publisher,
            actor,
            &message.exchange,
            &message.routing_key,
            message.properties.user_id.as_deref(),
            options.variables,
        )?;
        self.publish_authorized(message, options.mandatory)
    }

    /// The checks of [`VHost::publish`], for a protocol that must do work between them and
    /// routing (AMQP 0-9-1 checks at `basic.publish` and routes a transaction's messages at
    /// `tx.commit`; MQTT retains the message only once it may be published).
    pub fn authorize_publish(
        &self,
        publisher: &mut Publisher,
        actor: Actor<'_>,
        exchange: &str,
        routing_key: &str,
        user_id: Option<&str>,
        variables: &TopicVariables<'_>,
    ) -> Result<(), PublishError> {
        if !publisher.allowed.iter().any(|x| **x == *exchange) {
            self.check(actor.user, Access::Write, ResourceKind::Exchange, exchange)
                .map_err(|error| PublishError {
                    stage: PublishStage::Write,
                    error,
                })?;
            if publisher.allowed.len() >= ALLOWED_EXCHANGES_KEPT {
                publisher.allowed.remove(0);
            } else if publisher.allowed.is_empty() {
                publisher.allowed.reserve_exact(1);
            }
            publisher.allowed.push(Arc::from(exchange));
        }
        // Topic permissions depend on the routing key: checked per publish (one atomic load
        // while the vhost has none).
        self.check_topic(actor.user, Access::Write, exchange, routing_key, variables)
            .map_err(|error| PublishError {
                stage: PublishStage::Topic,
                error,
            })?;
        if let Some(user_id) = user_id {
            if user_id != actor.user {
                return Err(PublishError {
                    stage: PublishStage::UserId,
                    error: CoreError::precondition_failed(format!(
                        "user_id property set to '{user_id}' but authenticated user was '{}'",
                        actor.user
                    )),
                });
            }
        }
        Ok(())
    }

    /// The rest of [`VHost::publish`] for a message [`VHost::authorize_publish`] allowed:
    /// routes, drops `BCC`, stores and enqueues.
    pub fn publish_authorized(
        &self,
        message: Arc<Message>,
        mandatory: bool,
    ) -> Result<PublishOutcome, PublishError> {
        let mut routed = ROUTED.with(|routed| std::mem::take(&mut *routed.borrow_mut()));
        routed.clear();
        let mut typed = ROUTED_TYPED.with(|typed| std::mem::take(&mut *typed.borrow_mut()));
        typed.clear();
        if let Err(error) = self.route_all(&message.exchange, &message, &mut routed, &mut typed) {
            ROUTED.with(|scratch| *scratch.borrow_mut() = routed);
            ROUTED_TYPED.with(|scratch| *scratch.borrow_mut() = typed);
            return Err(PublishError {
                stage: PublishStage::Route,
                error,
            });
        }
        let message = match message.without_bcc() {
            Some(stripped) => Arc::new(stripped),
            None => message,
        };
        let outcome = if routed.is_empty() && typed.is_empty() {
            PublishOutcome {
                queues: 0,
                accepted: true,
                settlement: AwaitSettlement::Nothing,
                returned: mandatory.then_some(message),
            }
        } else {
            let Enqueued {
                accepted,
                durable_seq,
            } = self.enqueue_routed_all(message, &routed, &typed);
            PublishOutcome {
                queues: routed.len() + typed.len(),
                accepted,
                settlement: durable_seq.map_or(AwaitSettlement::Nothing, AwaitSettlement::Disk),
                returned: None,
            }
        };
        routed.clear();
        ROUTED.with(|scratch| *scratch.borrow_mut() = routed);
        typed.clear();
        ROUTED_TYPED.with(|scratch| *scratch.borrow_mut() = typed);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Permissions;
    use crate::message::Properties;
    use crate::topic_access::TopicPermission;
    use crate::value::{Table, Value};
    use crate::vhost::QueueDeclare;

    const ALICE: Actor<'static> = Actor {
        user: "alice",
        connection_id: 1,
    };

    fn vhost_with_queue(name: &str) -> Arc<VHost> {
        let vhost = VHost::new("/");
        vhost.set_permissions("alice", Permissions::full());
        vhost
            .declare_queue(
                ALICE,
                QueueDeclare {
                    name: name.into(),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Table::new(),
                },
            )
            .unwrap();
        vhost
    }

    fn message(exchange: &str, key: &str) -> Message {
        Message {
            exchange: exchange.into(),
            routing_key: key.into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: bytes::Bytes::from_static(b"m"),
        }
    }

    fn publish(
        vhost: &VHost,
        actor: Actor<'_>,
        message: Message,
    ) -> Result<PublishOutcome, PublishError> {
        vhost.publish(
            &mut Publisher::new(),
            actor,
            Arc::new(message),
            PublishOptions::default(),
        )
    }

    #[test]
    fn each_refusal_names_the_check_that_refused_it() {
        let vhost = vhost_with_queue("q");
        vhost.set_permissions("bob", Permissions::new("", "^amq\\.topic$", "").unwrap());
        let bob = Actor {
            user: "bob",
            connection_id: 2,
        };
        let refused = publish(&vhost, bob, message("", "q")).unwrap_err();
        assert_eq!(refused.stage, PublishStage::Write);
        assert_eq!(
            refused.error.message,
            "write access to exchange 'amq.default' in vhost '/' refused for user 'bob'"
        );

        vhost.set_topic_permission(
            "bob",
            TopicPermission::new("bob", "/", "amq.topic", "^allowed\\.", ".*").unwrap(),
        );
        assert!(publish(&vhost, bob, message("amq.topic", "allowed.x")).is_ok());
        let refused = publish(&vhost, bob, message("amq.topic", "other")).unwrap_err();
        assert_eq!(refused.stage, PublishStage::Topic);
        assert_eq!(refused.error.kind, crate::ErrorKind::AccessRefused);

        let mut spoofed = message("amq.topic", "allowed.x");
        spoofed.properties.user_id = Some("alice".into());
        let refused = publish(&vhost, bob, spoofed).unwrap_err();
        assert_eq!(refused.stage, PublishStage::UserId);
        assert_eq!(
            refused.error.message,
            "user_id property set to 'alice' but authenticated user was 'bob'"
        );

        let refused = publish(&vhost, ALICE, message("missing", "q")).unwrap_err();
        assert_eq!(refused.stage, PublishStage::Route);
        assert_eq!(refused.error.kind, crate::ErrorKind::NotFound);
    }

    #[test]
    fn the_write_check_is_cached_per_publisher_and_forgotten_on_request() {
        let vhost = vhost_with_queue("q");
        let mut publisher = Publisher::new();
        vhost
            .publish(
                &mut publisher,
                ALICE,
                Arc::new(message("", "q")),
                PublishOptions::default(),
            )
            .unwrap();
        vhost.clear_permissions("alice");
        // Cached, as RabbitMQ caches it per channel.
        assert!(vhost
            .publish(
                &mut publisher,
                ALICE,
                Arc::new(message("", "q")),
                PublishOptions::default()
            )
            .is_ok());
        publisher.forget_permissions();
        let refused = vhost
            .publish(
                &mut publisher,
                ALICE,
                Arc::new(message("", "q")),
                PublishOptions::default(),
            )
            .unwrap_err();
        assert_eq!(refused.stage, PublishStage::Write);
        assert_eq!(vhost.queue("q").unwrap().message_count(), 2);
    }

    #[test]
    fn bcc_routes_but_is_not_delivered_and_a_mandatory_miss_is_handed_back() {
        let vhost = vhost_with_queue("q");
        let mut copied = message("", "nowhere");
        let mut headers = Table::new();
        headers.insert("BCC", Value::LongString(b"q".to_vec()));
        copied.properties.headers = Some(headers);
        let outcome = publish(&vhost, ALICE, copied).unwrap();
        assert_eq!((outcome.queues, outcome.accepted), (1, true));
        assert_eq!(outcome.settlement, AwaitSettlement::Nothing);
        let (delivery, _) = vhost.queue("q").unwrap().get(false).unwrap();
        let headers = delivery.message.properties.headers.as_ref().unwrap();
        assert!(headers.get("BCC").is_none());

        let outcome = vhost
            .publish(
                &mut Publisher::new(),
                ALICE,
                Arc::new(message("", "nowhere")),
                PublishOptions {
                    mandatory: true,
                    ..PublishOptions::default()
                },
            )
            .unwrap();
        assert!(!outcome.routed());
        assert_eq!(&*outcome.returned.unwrap().routing_key, "nowhere");
    }
}
