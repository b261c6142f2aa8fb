//! Queues of a vhost: declare (validated and compared through the queue's type), delete,
//! purge, exclusive ownership, direct reply-to queues, consume and cancel.

use super::*;

impl VHost {
    /// queue.declare.
    pub fn declare_queue(
        &self,
        actor: Actor<'_>,
        request: QueueDeclare,
    ) -> CoreResult<QueueDeclared> {
        if request.passive && request.name == DIRECT_REPLY_TO {
            return Ok(QueueDeclared {
                name: request.name,
                message_count: 0,
                consumer_count: 0,
            });
        }
        if request.passive {
            if let Some(queue) = self.typed_queue(&request.name) {
                queue.check_exclusive_access(actor.connection_id)?;
                let info = queue.info();
                return Ok(QueueDeclared {
                    name: request.name,
                    message_count: info.ready,
                    consumer_count: info.consumers,
                });
            }
            let queue = self.queue_or_404(&request.name)?;
            queue.check_exclusive_access(actor.connection_id)?;
            return Ok(QueueDeclared {
                name: request.name,
                message_count: queue.message_count(),
                consumer_count: queue.consumer_count(),
            });
        }
        let name = if request.name.is_empty() {
            server_generated_queue_name()
        } else if request.name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                request.name
            )));
        } else {
            request.name.clone()
        };
        self.check(actor.user, Access::Configure, ResourceKind::Queue, &name)?;
        self.validate_queue_arguments(&name, &request.arguments)?;
        // A client's new queue counts against `max-queues`; boot-time definitions and
        // changes committed elsewhere (applied here) were counted where they were asked.
        if actor.connection_id != BROKER_CONNECTION && !crate::replication::applying() {
            self.check_queue_limit(&name)?;
        }
        let default_type = (actor.connection_id != BROKER_CONNECTION
            && request.durable
            && !request.exclusive
            && request.arguments.get("x-queue-type").is_none())
        .then(|| self.default_queue_type())
        .flatten()
        .filter(|t| t != "classic");
        let queue_type = match &default_type {
            // RabbitMQ 4.x applies a vhost's default queue type to durable, non-exclusive
            // queues declared without a type.
            Some(default) => match crate::queue_type::lookup(default) {
                Some(queue_type) => queue_type,
                None => {
                    return Err(CoreError::precondition_failed(format!(
                        "queue type '{default}' (the default queue type of vhost '{}') is not supported yet; declare {} with x-queue-type = classic",
                        self.name,
                        self.describe("queue", &name)
                    )))
                }
            },
            None => queue_type_of(&request.arguments),
        };
        if self.queue(&name).is_none()
            && (queue_type.name() != "classic" || self.typed_queue(&name).is_some())
        {
            return self.declare_typed_queue(actor, name, request, queue_type);
        }
        let _replicated = match self.queue(&name) {
            // A redeclaration is answered under the lock below, not replicated. Exclusive
            // and auto-delete queues are replicated too (other nodes route to them), and
            // only this node drops them (`transient.rs`).
            Some(_) => crate::replication::ReplicationPermit::none(),
            None => self.durability.replicate(|| TopologyChange::DeclareQueue {
                vhost: self.name.clone(),
                user: actor.user.to_string(),
                request: QueueDeclare {
                    name: name.clone(),
                    ..request.clone()
                },
            })?,
        };
        let _topology = self.topology.lock();
        if let Some(existing) = self.queue(&name) {
            existing.check_exclusive_access(actor.connection_id)?;
            self.check_queue_equivalence(&existing, &request)?;
            existing.touch();
            return Ok(QueueDeclared {
                name,
                message_count: existing.message_count(),
                consumer_count: existing.consumer_count(),
            });
        }
        let forwarding = self.durability.forwarding();
        if let Some(forwarding) = forwarding {
            if let Some(home) = forwarding.remote_home(&self.name, &name) {
                // Declared on another node (its home, from the metadata log): this node
                // forwards to it.
                let remote = crate::remote::RemoteQueue::new(
                    forwarding,
                    &self.name,
                    &name,
                    home,
                    crate::remote::StandInProperties {
                        durable: request.durable,
                        exclusive: request.exclusive,
                        auto_delete: request.auto_delete,
                    },
                    request.arguments,
                );
                self.insert_typed_queue_locked(remote);
                self.durability.topology_changed();
                return Ok(QueueDeclared {
                    name,
                    message_count: 0,
                    consumer_count: 0,
                });
            }
        }
        let mut owner = actor.connection_id;
        if self.is_replayed_transient(actor, &request) {
            if !self.replayed_transient(&name, forwarding) {
                return Ok(QueueDeclared {
                    name,
                    message_count: 0,
                    consumer_count: 0,
                });
            }
            // Until maintenance knows its home: no connection of this node owns it.
            owner = crate::remote::REMOTE_OWNER;
        }
        let config = QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable: request.durable,
            exclusive_owner: request.exclusive.then_some(owner),
            auto_delete: request.auto_delete,
            arguments: request.arguments,
        };
        let persistent = config.durable && config.exclusive_owner.is_none();
        let queue = Queue::in_vhost(config, self.me.clone());
        if persistent {
            if let Some(store) = self.durability.store() {
                queue.link_store(Arc::clone(store));
            }
        }
        self.apply_policies_to(&queue);
        self.queues.write().insert(name.clone(), queue);
        if persistent {
            self.durability.topology_changed();
        }
        Ok(QueueDeclared {
            name,
            message_count: 0,
            consumer_count: 0,
        })
    }

    /// Refuses a new queue called `name` when the vhost has `max-queues` queues already (of
    /// every type; on a cluster every node's), with RabbitMQ's 406 text; a queue that exists
    /// is no new queue. The management API calls this before declaring, as queue.declare does.
    pub fn check_queue_limit(&self, name: &str) -> CoreResult<()> {
        let Some(limit) = self
            .durability
            .resource_limits()
            .vhost(&self.name)
            .max_queues
        else {
            return Ok(());
        };
        if self.queue(name).is_some() || self.typed_queue(name).is_some() {
            return Ok(());
        }
        let count = self.queues.read().len() + self.typed.read().len();
        if count as u64 >= limit {
            return Err(crate::resource_limits::queue_limit_reached(
                name, &self.name, limit,
            ));
        }
        Ok(())
    }

    /// queue.declare of a queue of a type other than classic (quorum): the type's refusals
    /// (RabbitMQ's texts), equivalence with an existing queue, and the queue made by the
    /// type's [`crate::queue_type::QueueType::declare`].
    fn declare_typed_queue(
        &self,
        actor: Actor<'_>,
        name: String,
        request: QueueDeclare,
        queue_type: &'static dyn crate::queue_type::QueueType,
    ) -> CoreResult<QueueDeclared> {
        let user = actor.user;
        let what = self.describe("queue", &name);
        // A new queue is committed through the cluster first (outside the topology lock, as
        // for classic queues), with its type written out: the other nodes must not apply
        // their own default queue type to it. A redeclaration is answered below.
        let _replicated = if self.typed_queue(&name).is_none() && self.queue(&name).is_none() {
            check_typed_properties(&what, &request, queue_type)?;
            let mut arguments = request.arguments.clone();
            if arguments.get("x-queue-type").is_none() {
                arguments.insert("x-queue-type", Value::string(queue_type.name()));
            }
            self.durability.replicate(|| TopologyChange::DeclareQueue {
                vhost: self.name.clone(),
                user: user.to_string(),
                request: QueueDeclare {
                    name: name.clone(),
                    arguments,
                    ..request.clone()
                },
            })?
        } else {
            crate::replication::ReplicationPermit::none()
        };
        let _topology = self.topology.lock();
        if let Some(existing) = self.typed_queue(&name) {
            existing.check_exclusive_access(actor.connection_id)?;
            if request.exclusive {
                return Err(CoreError::resource_locked(format!(
                    "cannot obtain exclusive access to locked {what}. It could be originally declared \
                     on another connection or the exclusive property value does not match that of the \
                     original declaration."
                )));
            }
            if existing.durable() != request.durable {
                return Err(CoreError::precondition_failed(format!(
                    "inequivalent arg 'durable' for {what}: received '{}' but current is '{}'",
                    request.durable,
                    existing.durable()
                )));
            }
            let mut current = existing.arguments();
            if current.get("x-queue-type").is_none() {
                // A classic queue's stand-in keeps its arguments as declared, without a type.
                current.insert("x-queue-type", Value::string(existing.queue_type().name()));
            }
            let mut received = request.arguments.clone();
            if received.get("x-queue-type").is_none() {
                // Declared without a type (the vhost's default applied, or a client that
                // names none): compared as the type it has.
                received.insert("x-queue-type", Value::string(existing.queue_type().name()));
            }
            check_args_equivalence(
                &what,
                existing.queue_type().equivalence_arguments(),
                &received,
                &current,
            )?;
            let info = existing.info();
            return Ok(QueueDeclared {
                name,
                message_count: info.ready,
                consumer_count: info.consumers,
            });
        }
        if let Some(existing) = self.queue(&name) {
            // A classic queue has the name: its type is part of equivalence.
            self.check_queue_equivalence(&existing, &request)?;
        }
        check_typed_properties(&what, &request, queue_type)?;
        let mut arguments = request.arguments;
        if arguments.get("x-queue-type").is_none() {
            arguments.insert("x-queue-type", Value::string(queue_type.name()));
        }
        let (policy, operator_policy) = {
            let policies = self.policies.read();
            let operators = self.operator_policies.read();
            (
                select(&policies, |p| {
                    p.matches_typed_queue(queue_type.name(), &name)
                })
                .map(|p| p.definition.clone()),
                select(&operators, |p| {
                    p.matches_typed_queue(queue_type.name(), &name)
                })
                .map(|p| p.definition.clone()),
            )
        };
        let queue = queue_type.declare(
            &self.durability,
            crate::queue_type::Declaration {
                name: name.clone(),
                vhost: self.me.clone(),
                vhost_name: self.name.clone(),
                durable: true,
                arguments,
                policy,
                operator_policy,
            },
        )?;
        let info = queue.info();
        self.insert_typed_queue_locked(queue);
        self.durability.topology_changed();
        Ok(QueueDeclared {
            name,
            message_count: info.ready,
            consumer_count: info.consumers,
        })
    }

    /// Turns the classic queues this node holds but another node is home to (made at boot
    /// from the saved definitions, before the metadata log said where they live) into
    /// forwarding stand-ins, keeping their bindings. Only empty queues without consumers
    /// are turned: anything else is left as it is and logged.
    pub fn rehome_classic_queues(&self, forwarding: &Arc<crate::remote::Forwarding>) {
        let candidates: Vec<(Arc<Queue>, String)> = self
            .queues
            .read()
            .values()
            .filter(|q| q.config().exclusive_owner.is_none() && !q.config().auto_delete)
            .filter_map(|q| {
                forwarding
                    .remote_home(&self.name, q.name())
                    .map(|home| (Arc::clone(q), home))
            })
            .collect();
        for (queue, home) in candidates {
            let _topology = self.topology.lock();
            let current = self.queue(queue.name());
            if !current.is_some_and(|c| Arc::ptr_eq(&c, &queue)) {
                continue;
            }
            let stats = queue.stats();
            if stats.ready > 0 || stats.unacknowledged > 0 || stats.consumers > 0 {
                tracing::warn!(queue = %queue.name(), vhost = %self.name, %home, ready = stats.ready, "a classic queue homed on another node holds messages or consumers here; it stays local");
                continue;
            }
            let name = queue.name().to_string();
            let destination = DestinationName::Queue(name.clone());
            let bindings: Vec<(Arc<Exchange>, Binding)> = self
                .exchanges()
                .into_iter()
                .flat_map(|exchange| {
                    exchange
                        .bindings_to(&destination)
                        .into_iter()
                        .map(move |binding| (Arc::clone(&exchange), binding))
                })
                .collect();
            for exchange in self.exchanges() {
                exchange.unbind_destination(&destination);
            }
            self.queues.write().remove(&name);
            let remote = crate::remote::RemoteQueue::new(
                forwarding,
                &self.name,
                &name,
                home.clone(),
                crate::remote::StandInProperties {
                    durable: queue.config().durable,
                    exclusive: false,
                    auto_delete: false,
                },
                queue.config().arguments.clone(),
            );
            self.insert_typed_queue_locked(remote);
            if let Some(stand_in) = self.stand_ins.read().get(&name).cloned() {
                for (exchange, binding) in bindings {
                    exchange.bind(binding, Target::Queue(Arc::clone(&stand_in)));
                }
            }
            tracing::info!(queue = %name, vhost = %self.name, %home, "classic queue forwarded to its home node");
        }
    }

    /// Adds a queue of another type and its stand-in in bindings. Caller holds the topology
    /// lock.
    pub(super) fn insert_typed_queue_locked(&self, queue: Arc<dyn QueueInstance>) {
        let name = queue.name().to_string();
        self.stand_ins.write().insert(
            name.clone(),
            Queue::stand_in(Arc::clone(&queue), &self.name),
        );
        self.typed.write().insert(name, queue);
        self.typed_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes stream `log` a queue of the vhost (once: a stream already known is left as it
    /// is), for streams created by the stream protocol and recovered at boot; `changed`
    /// says whether the durable definitions must be written again.
    pub(crate) fn add_stream_queue(&self, log: Arc<crate::stream_log::StreamLog>, changed: bool) {
        let _topology = self.topology.lock();
        if self.typed.read().contains_key(log.name()) {
            return;
        }
        let queue: Arc<dyn QueueInstance> = crate::queue_type::stream::StreamQueue::new(log, self);
        // Retention set by a policy applies to streams made outside `queue.declare` too.
        self.apply_policies_to_typed(&queue);
        self.insert_typed_queue_locked(queue);
        if changed {
            self.durability.topology_changed();
        }
    }

    /// Removes a queue of another type (quorum queue, stream), its bindings and its state
    /// (a stream's log too). Returns `None` when there is no such queue.
    pub(crate) fn remove_typed_queue(&self, name: &str) -> Option<u64> {
        let _topology = self.topology.lock();
        self.remove_typed_queue_locked(name)
    }

    /// Removes a queue of another type (quorum), its bindings and its state. Caller holds
    /// the topology lock.
    pub(super) fn remove_typed_queue_locked(&self, name: &str) -> Option<u64> {
        let queue = self.typed.write().remove(name)?;
        self.stand_ins.write().remove(name);
        self.typed_count
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.remove_bindings_to_locked(&DestinationName::Queue(name.to_string()));
        let count = queue.delete();
        self.retired.lock().add_queue(&queue.info());
        self.durability.topology_changed();
        Some(count)
    }

    pub(super) fn validate_queue_arguments(&self, name: &str, arguments: &Table) -> CoreResult<()> {
        let queue_type = queue_type_of(arguments);
        queue_type
            .validate_arguments(arguments)
            .map_err(|problem| {
                CoreError::precondition_failed(format!(
                    "{problem} (queue '{name}' in vhost '{}')",
                    self.name
                ))
            })?;
        if let Some(queue_type) = arguments.get("x-queue-type") {
            match queue_type.as_str() {
                // Each type validates its own arguments.
                Some(name) if crate::queue_type::lookup(name).is_some() => {}
                Some(other @ ("quorum" | "stream")) => {
                    return Err(CoreError::precondition_failed(format!(
                        "invalid arg 'x-queue-type' for {}: queue type '{other}' is not supported yet",
                        self.describe("queue", name)
                    )))
                }
                _ => {
                    return Err(CoreError::precondition_failed(format!(
                        "invalid arg 'x-queue-type' for {}: unknown queue type {}",
                        self.describe("queue", name),
                        queue_type
                    )))
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_queue_equivalence(
        &self,
        existing: &Queue,
        request: &QueueDeclare,
    ) -> CoreResult<()> {
        let config = existing.config();
        let what = existing.describe();
        if config.exclusive_owner.is_some() != request.exclusive {
            // RabbitMQ reports an exclusive mismatch as a lock conflict.
            return Err(CoreError::resource_locked(format!(
                "cannot obtain exclusive access to locked {what}. It could be originally declared \
                 on another connection or the exclusive property value does not match that of the \
                 original declaration."
            )));
        }
        if config.durable != request.durable {
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg 'durable' for {what}: received '{}' but current is '{}'",
                request.durable, config.durable
            )));
        }
        if config.auto_delete != request.auto_delete {
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg 'auto_delete' for {what}: received '{}' but current is '{}'",
                request.auto_delete, config.auto_delete
            )));
        }
        check_args_equivalence(
            &what,
            queue_type_of(&config.arguments).equivalence_arguments(),
            &request.arguments,
            &config.arguments,
        )
    }

    /// queue.delete: returns the number of ready messages deleted. Deleting a missing queue
    /// succeeds with 0, as in RabbitMQ.
    pub fn delete_queue(
        &self,
        actor: Actor<'_>,
        name: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> CoreResult<u64> {
        self.check(actor.user, Access::Configure, ResourceKind::Queue, name)?;
        if let Some(queue) = self.typed_queue(name) {
            let check = |queue: &Arc<dyn crate::queue_type::QueueInstance>| {
                let info = queue.info();
                // A stream's reads take nothing, so it is never "empty" or "unused" in the
                // queue sense: RabbitMQ deletes it whatever the flags say.
                if queue.queue_type().capabilities().consumers_need_offset {
                    return Ok(());
                }
                if if_unused && info.consumers > 0 {
                    return Err(CoreError::precondition_failed(format!(
                        "{} in use",
                        self.describe("queue", name)
                    )));
                }
                if if_empty && info.ready > 0 {
                    return Err(CoreError::precondition_failed(format!(
                        "{} not empty",
                        self.describe("queue", name)
                    )));
                }
                Ok(())
            };
            check(&queue)?;
            let _replicated = self.durability.replicate(|| TopologyChange::DeleteQueue {
                vhost: self.name.clone(),
                user: actor.user.to_string(),
                name: name.to_string(),
                if_unused,
                if_empty,
            })?;
            let _topology = self.topology.lock();
            let Some(queue) = self.typed_queue(name) else {
                return Ok(0);
            };
            check(&queue)?;
            return Ok(self.remove_typed_queue_locked(name).unwrap_or(0));
        }
        let _replicated = match self.queue(name) {
            None => return Ok(0),
            Some(queue) if queue.is_node_local() => {
                queue.check_exclusive_access(actor.connection_id)?;
                self.replicate_transient_drop(&queue)
            }
            Some(_) => self.durability.replicate(|| TopologyChange::DeleteQueue {
                vhost: self.name.clone(),
                user: actor.user.to_string(),
                name: name.to_string(),
                if_unused,
                if_empty,
            })?,
        };
        let _topology = self.topology.lock();
        let Some(queue) = self.queue(name) else {
            return Ok(0);
        };
        queue.check_exclusive_access(actor.connection_id)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(CoreError::precondition_failed(format!(
                "{} in use",
                queue.describe()
            )));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(CoreError::precondition_failed(format!(
                "{} not empty",
                queue.describe()
            )));
        }
        Ok(self.remove_queue_locked(&queue))
    }

    /// Removes a queue, its bindings and consumers. Caller holds the topology lock.
    pub(super) fn remove_queue_locked(&self, queue: &Arc<Queue>) -> u64 {
        {
            let mut queues = self.queues.write();
            match queues.get(queue.name()) {
                Some(current) if Arc::ptr_eq(current, queue) => {
                    queues.remove(queue.name());
                }
                _ => return 0,
            }
        }
        self.remove_bindings_to_locked(&DestinationName::Queue(queue.name().to_string()));
        let count = queue.mark_deleted();
        // Keep its lifetime counters so node-wide totals do not drop with the queue.
        self.retired.lock().add_queue(&queue.stats());
        if queue.config().durable && queue.config().exclusive_owner.is_none() {
            self.durability.topology_changed();
        }
        count
    }

    /// Deletes a queue on behalf of the broker (exclusive owner gone, auto-delete), with no
    /// permission check.
    pub fn remove_queue(&self, queue: &Arc<Queue>) -> u64 {
        let _replicated = self.replicate_transient_drop(queue);
        let _topology = self.topology.lock();
        self.remove_queue_locked(queue)
    }

    /// Deletes a queue of any type (found with [`VHost::queue_instance`]) on behalf of the
    /// broker, with no permission check: an MQTT clean session's subscription queues, or a
    /// persistent one's once its session expired. Returns the ready messages dropped.
    pub fn remove_queue_instance(&self, queue: &Arc<dyn QueueInstance>) -> u64 {
        if let Some(classic) = self.queue(queue.name()) {
            if std::ptr::addr_eq(Arc::as_ptr(&classic), Arc::as_ptr(queue)) {
                return self.remove_queue(&classic);
            }
            return 0;
        }
        let _topology = self.topology.lock();
        match self.typed_queue(queue.name()) {
            Some(current) if std::ptr::addr_eq(Arc::as_ptr(&current), Arc::as_ptr(queue)) => {
                self.remove_typed_queue_locked(queue.name()).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Creates the queue behind a direct reply-to consumer (`amq.rabbitmq.reply-to`): an
    /// exclusive, auto-delete queue named `amq.rabbitmq.reply-to.<random>`, so replies
    /// published to that name through the default exchange reach the consumer, only the
    /// owning connection can consume it, and it disappears with its consumer.
    pub fn declare_reply_queue(&self, connection_id: u64) -> Arc<Queue> {
        let name = format!(
            "{DIRECT_REPLY_TO}.{}",
            server_generated_queue_name().trim_start_matches("amq.gen-")
        );
        let queue = Queue::new(QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable: false,
            exclusive_owner: Some(connection_id),
            auto_delete: true,
            arguments: Table::new(),
        });
        let _topology = self.topology.lock();
        self.queues.write().insert(name, Arc::clone(&queue));
        queue
    }

    /// Deletes the exclusive queues `connection_id` owned, named by the listener that tracked
    /// them.
    pub fn remove_exclusive_queues(&self, connection_id: u64, names: &[String]) {
        for name in names {
            if let Some(queue) = self.queue(name) {
                if queue.config().exclusive_owner == Some(connection_id) {
                    self.remove_queue(&queue);
                }
            }
        }
    }

    /// queue.purge: returns the number of messages purged.
    pub fn purge_queue(&self, actor: Actor<'_>, name: &str) -> CoreResult<u64> {
        let queue = self.queue_instance_for(actor, name, Access::Read)?;
        queue.check_purge()?;
        Ok(queue.purge())
    }

    /// The queue `name` of any type for an operation needing `access`,
    /// through the queue-type interface: checks permission, existence and exclusive
    /// ownership. Listeners that consume through the interface use it with
    /// [`VHost::consume_instance`] and [`VHost::cancel_instance`].
    pub fn queue_instance_for(
        &self,
        actor: Actor<'_>,
        name: &str,
        access: Access,
    ) -> CoreResult<Arc<dyn QueueInstance>> {
        self.check(actor.user, access, ResourceKind::Queue, name)?;
        let queue = self
            .queue_instance(name)
            .ok_or_else(|| CoreError::not_found(format!("no {}", self.describe("queue", name))))?;
        queue.check_exclusive_access(actor.connection_id)?;
        Ok(queue)
    }

    /// Attaches a consumer to a queue of any type (found with
    /// [`VHost::queue_instance_for`]).
    pub fn consume_instance(
        &self,
        queue: &Arc<dyn QueueInstance>,
        spec: ConsumerSpec,
        sink: Arc<dyn DeliverySink>,
    ) -> CoreResult<u64> {
        queue.consume(spec, sink)
    }

    /// Detaches a consumer from a queue of any type, deleting an auto-delete classic queue
    /// that lost its last consumer.
    pub fn cancel_instance(&self, queue: &Arc<dyn QueueInstance>, consumer_id: u64) {
        if queue.cancel(consumer_id) == ConsumerRemoval::LastOfAutoDelete {
            if let Some(classic) = self.queue(queue.name()) {
                if std::ptr::addr_eq(Arc::as_ptr(&classic), Arc::as_ptr(queue)) {
                    self.remove_queue(&classic);
                }
            }
        }
    }

    /// The queue `name` for an operation needing `access` (basic.get, basic.consume,
    /// queue.purge): checks permission, existence and exclusive ownership.
    pub fn queue_for(
        &self,
        actor: Actor<'_>,
        name: &str,
        access: Access,
    ) -> CoreResult<Arc<Queue>> {
        self.check(actor.user, access, ResourceKind::Queue, name)?;
        let queue = self.queue_or_404(name)?;
        queue.check_exclusive_access(actor.connection_id)?;
        Ok(queue)
    }

    /// Attaches a consumer to `queue` (found with [`VHost::queue_for`]).
    pub fn consume(
        &self,
        queue: &Arc<Queue>,
        spec: ConsumerSpec,
        sink: Arc<dyn DeliverySink>,
    ) -> CoreResult<u64> {
        queue.add_consumer(spec, sink)
    }

    /// Detaches a consumer, deleting an auto-delete queue that lost its last consumer.
    pub fn cancel(&self, queue: &Arc<Queue>, consumer_id: u64) {
        if queue.remove_consumer(consumer_id) == ConsumerRemoval::LastOfAutoDelete {
            self.remove_queue(queue);
        }
    }
}

/// The queue type a declaration's `x-queue-type` names; classic when it names none this
/// broker has (the declaration is refused before a queue is made).
pub(super) fn queue_type_of(arguments: &Table) -> &'static dyn crate::queue_type::QueueType {
    arguments
        .get("x-queue-type")
        .and_then(Value::as_str)
        .and_then(crate::queue_type::lookup)
        .unwrap_or(&crate::queue_type::CLASSIC)
}

/// `amq.gen-` followed by 22 URL-safe base64 characters of 16 random bytes, like RabbitMQ.
pub(super) fn server_generated_queue_name() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!(
        "amq.gen-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The properties a queue type refuses (RabbitMQ's order of checks, with its texts).
fn check_typed_properties(
    what: &str,
    request: &QueueDeclare,
    queue_type: &'static dyn crate::queue_type::QueueType,
) -> CoreResult<()> {
    let capabilities = queue_type.capabilities();
    if request.auto_delete && !capabilities.auto_delete {
        return Err(CoreError::precondition_failed(format!(
            "invalid property 'auto-delete' for {what}"
        )));
    }
    if request.exclusive && !capabilities.exclusive {
        return Err(CoreError::precondition_failed(format!(
            "invalid property 'exclusive-owner' for {what}"
        )));
    }
    if !request.durable {
        return Err(CoreError::precondition_failed(format!(
            "invalid property 'non-durable' for {what}"
        )));
    }
    Ok(())
}
