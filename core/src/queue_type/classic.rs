//! Classic queues as a [`QueueType`]: the queue in `crate::queue`, one process-local FIFO per
//! priority level with the message store behind it.

use std::sync::Arc;

use super::{Capabilities, QueueInstance, QueueType};
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::{CoreError, CoreResult};
use crate::message::Message;
use crate::queue::{ConsumerRemoval, EnqueueOutcome, Queue, QueueLimits, QueueStats, Settlement};
use crate::value::Table;

/// The classic queue type.
pub struct Classic;

/// The classic queue type, for [`super::BUILT_IN`].
pub const CLASSIC: Classic = Classic;

const CAPABILITIES: Capabilities = Capabilities {
    arguments: &[
        "x-expires",
        "x-message-ttl",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-queue-type",
        "x-single-active-consumer",
        "x-delivery-limit",
        "x-queue-mode",
        "x-queue-version",
    ],
    policy_keys: &[
        "expires",
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "delivery-limit",
        "queue-mode",
        "queue-version",
    ],
    global_qos: true,
    priorities: true,
    per_message_ttl: true,
    exclusive: true,
    auto_delete: true,
    prefetch_cap: None,
    consumers_need_offset: false,
    server_named: true,
};

impl QueueType for Classic {
    fn name(&self) -> &'static str {
        "classic"
    }

    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn validate_arguments(&self, arguments: &Table) -> Result<(), String> {
        QueueLimits::from_arguments(arguments).map(|_| ())
    }

    fn equivalence_arguments(&self) -> &'static [&'static str] {
        // As RabbitMQ compares them on redeclaration.
        &[
            "x-expires",
            "x-message-ttl",
            "x-max-length",
            "x-max-length-bytes",
            "x-max-priority",
            "x-overflow",
            "x-dead-letter-exchange",
            "x-dead-letter-routing-key",
            "x-queue-type",
            "x-single-active-consumer",
            "x-delivery-limit",
        ]
    }
}

impl QueueInstance for Queue {
    fn name(&self) -> &str {
        Queue::name(self)
    }

    fn queue_type(&self) -> &'static dyn QueueType {
        &CLASSIC
    }

    fn enqueue(&self, message: Arc<Message>, store_id: u64) -> EnqueueOutcome {
        match self.arc() {
            Some(queue) => queue.enqueue_stored(message, store_id),
            None => EnqueueOutcome::Enqueued,
        }
    }

    fn local_consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        // Consumers attached for other nodes (forwarding's proxies) have no connection
        // here: their own node lists them through its stand-in.
        let mut consumers = Queue::consumers(self);
        consumers.retain(|(spec, _)| spec.connection_id != crate::vhost::BROKER_CONNECTION);
        consumers
    }

    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64> {
        match self.arc() {
            Some(queue) => queue.add_consumer(spec, sink),
            None => Err(CoreError::not_found(format!("no {}", self.describe()))),
        }
    }

    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval {
        match self.arc() {
            Some(queue) => queue.remove_consumer(consumer_id),
            None => ConsumerRemoval::NotAttached,
        }
    }

    fn settle(&self, ids: &[u64], settlement: Settlement) {
        if let Some(queue) = self.arc() {
            Queue::settle(&queue, ids, settlement);
        }
    }

    fn dispatch(&self) {
        if let Some(queue) = self.arc() {
            Queue::dispatch(&queue);
        }
    }

    fn get(&self, needs_settlement: bool) -> Option<(Delivery, u64)> {
        Queue::get(&self.arc()?, needs_settlement)
    }

    fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        Queue::browse(self, limit)
    }

    fn peek(&self, skip: usize, limit: usize) -> Vec<(Arc<Message>, bool)> {
        Queue::peek(self, skip, limit)
    }

    fn purge(&self) -> u64 {
        Queue::purge(self)
    }

    fn info(&self) -> QueueStats {
        self.stats()
    }

    fn arguments(&self) -> Table {
        self.config().arguments.clone()
    }

    fn durable(&self) -> bool {
        self.config().durable
    }

    fn auto_delete(&self) -> bool {
        self.config().auto_delete
    }

    fn exclusive_owner(&self) -> Option<u64> {
        self.config().exclusive_owner
    }

    fn check_exclusive_access(&self, connection_id: u64) -> CoreResult<()> {
        Queue::check_exclusive_access(self, connection_id)
    }

    fn delete(&self) -> u64 {
        self.mark_deleted()
    }
}
