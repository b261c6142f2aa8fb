//! Subscriptions: Subscribe, Credit, Unsubscribe, offsets (StoreOffset, QueryOffset,
//! ResolveOffsetSpec), and [`Session::pump`], which turns credit into `Deliver` frames of
//! whole chunks.

use std::sync::Arc;

use warren_core::access::Access;
use warren_core::stream_clients::{StreamConsumer, StreamConsumerInfo};
use warren_core::stream_log::single_active::GroupMember;
use warren_core::stream_log::{ChunkFilter, OffsetSpec, StreamLog, StreamReader};

use super::{counted, error_code, Control, Session, SubscriptionChange};
use crate::codec::{code, encode, key, OffsetSpecification, Request};

/// One subscription.
pub(super) struct Subscription {
    pub stream: String,
    pub log: Arc<StreamLog>,
    pub reader: StreamReader,
    /// The chunk filter, kept to read again from where a single active consumer resumes.
    pub filter: Option<ChunkFilter>,
    /// Chunks the client will still take.
    pub credit: u32,
    /// Caught up with the stream's end when last read.
    pub caught_up: bool,
    /// Its single-active-consumer group, for a subscription that joined one.
    pub group: Option<Group>,
    /// Its listing for operators, with its counters.
    pub registration: StreamConsumer,
}

/// A subscription's place in its single-active-consumer group.
pub(super) struct Group {
    member: GroupMember,
    phase: Phase,
}

/// Where a single active consumer is: it is sent chunks only once active and told so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not the active one (or not yet told it is).
    Waiting,
    /// Told it is active (ConsumerUpdate with this correlation id); waits for the client
    /// to answer where to start.
    Asked(u32),
    /// Active: chunks flow while it has credit.
    Active,
    /// Told to step down (ConsumerUpdate with active false and this correlation id): no
    /// chunks; once the client answered, the group makes another member active.
    SteppingDown(u32),
}

impl Subscription {
    /// Whether chunks may be sent (always, unless a single active consumer not active).
    fn delivering(&self) -> bool {
        self.group.as_ref().is_none_or(|g| g.phase == Phase::Active)
    }
}

fn offset_spec(offset: OffsetSpecification) -> OffsetSpec {
    match offset {
        OffsetSpecification::First => OffsetSpec::First,
        OffsetSpecification::Last => OffsetSpec::Last,
        OffsetSpecification::Next => OffsetSpec::Next,
        OffsetSpecification::Offset(offset) => OffsetSpec::Offset(offset),
        OffsetSpecification::Timestamp(timestamp) => OffsetSpec::Timestamp(timestamp),
    }
}

/// The chunk filter of `filter.N` / `match-unfiltered` properties, if any.
fn chunk_filter(properties: &[(String, String)]) -> Option<ChunkFilter> {
    let values: Vec<String> = properties
        .iter()
        .filter(|(k, _)| k.starts_with("filter."))
        .map(|(_, v)| v.clone())
        .collect();
    let match_unfiltered = properties
        .iter()
        .any(|(k, v)| k == "match-unfiltered" && v == "true");
    (!values.is_empty()).then_some(ChunkFilter {
        values,
        match_unfiltered,
    })
}

impl Session {
    pub(super) fn handle_subscription_command(&mut self, request: Request) -> Control {
        match request {
            Request::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                let answer = self.subscribe(subscription_id, &stream, offset, credit, &properties);
                encode::response(
                    &mut self.out,
                    key::SUBSCRIBE,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::Credit {
                subscription_id,
                credit,
            } => match self.subscriptions.get_mut(&subscription_id) {
                Some(subscription) => {
                    subscription.credit = subscription.credit.saturating_add(u32::from(credit));
                    subscription
                        .registration
                        .set_credits(u64::from(subscription.credit));
                }
                None => encode::credit_response(
                    &mut self.out,
                    counted(&self.broker, code::SUBSCRIPTION_ID_DOES_NOT_EXIST),
                    subscription_id,
                ),
            },
            Request::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                let answer = match self.subscriptions.remove(&subscription_id) {
                    Some(_) => {
                        self.changes
                            .push(SubscriptionChange::Ended(subscription_id));
                        code::OK
                    }
                    None => code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                };
                encode::response(
                    &mut self.out,
                    key::UNSUBSCRIBE,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                // No response in the protocol: a refused store is only logged.
                let (vhost, user) = self.vhost();
                match vhost.stream_for(user, Access::Read, &stream) {
                    Ok(log) if !reference.is_empty() => log.store_offset(&reference, offset),
                    Ok(_) => tracing::debug!(%stream, "StoreOffset without a reference ignored"),
                    Err(error) => tracing::info!(%stream, %error, "StoreOffset refused"),
                }
            }
            Request::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                let (vhost, user) = self.vhost();
                let (answer, offset) = match vhost.stream_for(user, Access::Read, &stream) {
                    Ok(log) => match log.query_offset(&reference) {
                        Some(offset) => (code::OK, offset),
                        None => (code::NO_OFFSET, 0),
                    },
                    Err(error) => (error_code(&error), 0),
                };
                encode::response_u64(
                    &mut self.out,
                    key::QUERY_OFFSET,
                    correlation_id,
                    counted(&self.broker, answer),
                    offset,
                );
            }
            Request::ResolveOffsetSpec {
                correlation_id,
                stream,
                offset,
                ..
            } => {
                let (vhost, user) = self.vhost();
                let (answer, resolved) = match vhost.stream_for(user, Access::Read, &stream) {
                    Ok(log) => match log.resolve(offset_spec(offset)) {
                        Ok(resolved) => (code::OK, resolved),
                        Err(error) => {
                            tracing::warn!(%stream, %error, "cannot resolve an offset");
                            (code::INTERNAL_ERROR, 0)
                        }
                    },
                    Err(error) => (error_code(&error), 0),
                };
                encode::resolved_offset(
                    &mut self.out,
                    correlation_id,
                    counted(&self.broker, answer),
                    resolved,
                );
            }
            other => {
                tracing::debug!(peer = %self.peer, request = ?other, "unexpected stream command");
                self.close(code::UNKNOWN_FRAME, "unexpected command");
                return Control::Close;
            }
        }
        Control::Continue
    }

    fn subscribe(
        &mut self,
        subscription_id: u8,
        stream: &str,
        offset: OffsetSpecification,
        credit: u16,
        properties: &[(String, String)],
    ) -> u16 {
        if self.subscriptions.contains_key(&subscription_id) {
            return code::SUBSCRIPTION_ID_ALREADY_EXISTS;
        }
        let single_active = properties
            .iter()
            .any(|(k, v)| k == "single-active-consumer" && v == "true");
        // The group is named by the consumer's name, which a single active consumer must
        // give (RabbitMQ refuses it without).
        let group_name = properties
            .iter()
            .find(|(k, _)| k == "name")
            .map(|(_, v)| v.clone());
        if single_active && group_name.as_deref().is_none_or(str::is_empty) {
            tracing::info!(%stream, "single active consumer without a name refused");
            return code::PRECONDITION_FAILED;
        }
        let (vhost, user) = self.vhost();
        let vhost_name = vhost.name().to_owned();
        let log = match vhost.stream_for(user, Access::Read, stream) {
            Ok(log) => log,
            Err(error) => return error_code(&error),
        };
        // A super stream partition's group spreads its members over the partitions by the
        // partition's index (RabbitMQ's `partition_index`; none when the stream is not one
        // of the super stream's partitions).
        let partition = properties
            .iter()
            .find(|(k, _)| k == "super-stream")
            .and_then(|(_, super_stream)| vhost.streams().super_streams().get(super_stream))
            .and_then(|found| found.partitions.iter().position(|(p, _)| p == stream));
        let filter = chunk_filter(properties);
        let reader = match log.reader(offset_spec(offset)) {
            Ok(reader) => reader.with_filter(filter.clone()),
            Err(error) => {
                tracing::warn!(%stream, %error, "cannot read stream");
                return code::INTERNAL_ERROR;
            }
        };
        let registration = self.broker.stream_clients().add_consumer(
            StreamConsumerInfo {
                connection: self.connection_id,
                subscription_id,
                vhost: vhost_name,
                stream: stream.to_owned(),
                properties: properties.to_vec(),
                single_active,
            },
            u64::from(credit),
            reader.start_offset(),
        );
        let group = match group_name {
            Some(name) if single_active => {
                match log
                    .consumer_groups()
                    .join_partition(&name, partition, Arc::clone(&self.wake))
                {
                    Ok(member) => Some(Group {
                        member,
                        phase: Phase::Waiting,
                    }),
                    Err(_) => {
                        tracing::info!(%stream, group = %name, "single active consumer refused: another partition index than its group's");
                        return code::PRECONDITION_FAILED;
                    }
                }
            }
            _ => None,
        };
        self.changes.push(SubscriptionChange::Started(
            subscription_id,
            log.subscribe(),
        ));
        self.subscriptions.insert(
            subscription_id,
            Subscription {
                stream: stream.to_owned(),
                log,
                reader,
                filter,
                credit: u32::from(credit),
                caught_up: false,
                group,
                registration,
            },
        );
        code::OK
    }

    /// The client answered a ConsumerUpdate: its subscription is active from the offset it
    /// gave (or, without one, from where it subscribed).
    pub(super) fn consumer_update_response(
        &mut self,
        correlation_id: u32,
        offset: Option<OffsetSpecification>,
    ) {
        if let Some(group) = self
            .subscriptions
            .values_mut()
            .filter_map(|s| s.group.as_mut())
            .find(|g| g.phase == Phase::SteppingDown(correlation_id))
        {
            // It stepped down: the group makes another member active.
            group.phase = Phase::Waiting;
            group.member.stepped_down();
            return;
        }
        let Some(subscription) = self.subscriptions.values_mut().find(|s| {
            s.group
                .as_ref()
                .is_some_and(|g| g.phase == Phase::Asked(correlation_id))
        }) else {
            tracing::debug!(peer = %self.peer, correlation_id, "ConsumerUpdate answer for no subscription");
            return;
        };
        if let Some(offset) = offset {
            match subscription.log.reader(offset_spec(offset)) {
                Ok(reader) => {
                    subscription.registration.moved_to(reader.start_offset());
                    subscription.reader = reader.with_filter(subscription.filter.clone());
                }
                Err(error) => {
                    tracing::warn!(stream = %subscription.stream, %error, "cannot read stream from the offset a consumer resumes at");
                }
            }
        }
        if let Some(group) = subscription.group.as_mut() {
            group.phase = Phase::Active;
        }
        subscription.registration.set_active(true);
        subscription.caught_up = false;
    }

    /// Tells each single active consumer that became active so (ConsumerUpdate); it is sent
    /// chunks once its client answered where to start. One asked to step down stops being
    /// sent chunks and is told so (ConsumerUpdate with active false).
    fn announce_active(&mut self) {
        let mut updates: Vec<(u8, bool)> = Vec::new();
        for (id, subscription) in &mut self.subscriptions {
            let Some(group) = subscription.group.as_mut() else {
                continue;
            };
            match group.phase {
                Phase::Waiting if group.member.is_active() => updates.push((*id, true)),
                // Asked to step down before it was told it is active: nothing to tell.
                Phase::Waiting if group.member.must_step_down() => group.member.stepped_down(),
                Phase::Asked(_) | Phase::Active if group.member.must_step_down() => {
                    updates.push((*id, false))
                }
                _ => {}
            }
        }
        for (id, active) in updates {
            let correlation_id = self.correlation_id();
            if let Some(subscription) = self.subscriptions.get_mut(&id) {
                if let Some(group) = subscription.group.as_mut() {
                    group.phase = if active {
                        Phase::Asked(correlation_id)
                    } else {
                        Phase::SteppingDown(correlation_id)
                    };
                }
                if !active {
                    subscription.registration.set_active(false);
                }
            }
            encode::consumer_update(&mut self.out, correlation_id, id, active);
        }
    }

    /// Marks every subscription as worth reading again (the driver calls it when a
    /// watched stream committed something).
    pub fn streams_moved(&mut self) {
        for subscription in self.subscriptions.values_mut() {
            subscription.caught_up = false;
        }
    }

    /// Writes `Deliver` frames for subscriptions with credit until the output holds
    /// `budget` bytes. Returns whether some subscription could send more right away.
    /// Subscriptions and publishers of deleted streams get a `MetadataUpdate` and end.
    pub fn pump(&mut self, budget: usize) -> bool {
        self.announce_active();
        let mut gone = Vec::new();
        let mut more = false;
        for (id, subscription) in self.subscriptions.iter_mut() {
            if subscription.reader.is_deleted() {
                gone.push((*id, subscription.stream.clone()));
                continue;
            }
            while subscription.credit > 0 && !subscription.caught_up && subscription.delivering() {
                if self.out.len() >= budget {
                    more = true;
                    break;
                }
                match subscription.reader.next_chunk() {
                    Ok(Some(chunk)) => {
                        let committed = subscription
                            .log
                            .stats()
                            .last_chunk_offset
                            .unwrap_or(chunk.header.first_offset);
                        encode::deliver_chunk(
                            &mut self.out,
                            self.deliver_version,
                            *id,
                            committed,
                            &chunk,
                        );
                        subscription.credit -= 1;
                        let records = u64::from(chunk.header.records);
                        subscription
                            .registration
                            .delivered(records, chunk.header.first_offset + records);
                        subscription
                            .registration
                            .set_credits(u64::from(subscription.credit));
                    }
                    Ok(None) => subscription.caught_up = true,
                    Err(error) => {
                        tracing::error!(stream = %subscription.stream, %error, "stream read failed");
                        gone.push((*id, subscription.stream.clone()));
                        break;
                    }
                }
            }
        }
        for (id, stream) in gone {
            self.subscriptions.remove(&id);
            self.changes.push(SubscriptionChange::Ended(id));
            encode::metadata_update(&mut self.out, code::STREAM_NOT_AVAILABLE, &stream);
        }
        let deleted: Vec<(u8, String)> = self
            .publishers
            .iter()
            .filter(|(_, p)| p.log.is_deleted())
            .map(|(id, p)| (*id, p.log.name().to_owned()))
            .collect();
        for (id, stream) in deleted {
            self.publishers.remove(&id);
            encode::metadata_update(&mut self.out, code::STREAM_NOT_AVAILABLE, &stream);
        }
        more
    }
}
