//! Publishers: DeclarePublisher, Publish, QueryPublisherSequence, DeletePublisher, and the
//! confirms coming back from the stream's writer thread.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::access::Access;
use warren_core::stream_clients::{StreamPublisher, StreamPublisherInfo};
use warren_core::stream_log::{Publish, Record, StreamLog};

use super::{counted, error_code, Control, Session};
use crate::codec::{code, encode, key, Request};

/// A declared publisher.
pub(super) struct Publisher {
    pub log: Arc<StreamLog>,
    pub reference: Option<String>,
    /// Its listing for operators, with its counters.
    pub registration: StreamPublisher,
}

/// What the writer thread reports for one Publish frame.
pub(super) enum Outcome {
    Confirmed(u8, Vec<u64>),
    Failed(u8, Vec<u64>, u16),
}

/// Confirms and errors from the stream writers, waiting for the connection's driver.
pub struct ConfirmQueue {
    outcomes: Mutex<Vec<Outcome>>,
    wake: Arc<Notify>,
}

impl ConfirmQueue {
    pub(super) fn new(wake: Arc<Notify>) -> ConfirmQueue {
        ConfirmQueue {
            outcomes: Mutex::new(Vec::new()),
            wake,
        }
    }

    fn push(&self, outcome: Outcome) {
        self.outcomes.lock().push(outcome);
        self.wake.notify_one();
    }
}

impl Session {
    /// Writes `PublishConfirm` / `PublishError` frames for what the stream writers reported.
    pub fn take_confirms(&mut self) {
        let outcomes = std::mem::take(&mut *self.confirms.outcomes.lock());
        for outcome in outcomes {
            match outcome {
                Outcome::Confirmed(publisher_id, ids) => {
                    encode::publish_confirm(&mut self.out, publisher_id, &ids)
                }
                Outcome::Failed(publisher_id, ids, error) => encode::publish_error(
                    &mut self.out,
                    publisher_id,
                    &ids,
                    counted(&self.broker, error),
                ),
            }
        }
    }

    pub(super) fn handle_stream_command(&mut self, request: Request) -> Control {
        match request {
            Request::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                // A publisher id in use, or a reference longer than RabbitMQ allows.
                let refused = self.publishers.contains_key(&publisher_id)
                    || reference.as_ref().is_some_and(|r| {
                        r.len() > warren_core::stream_log::tracking::MAX_REFERENCE_LENGTH
                    });
                let answer = if refused {
                    code::PRECONDITION_FAILED
                } else {
                    let (vhost, user) = self.vhost();
                    match vhost.stream_for(user, Access::Write, &stream) {
                        Ok(log) => {
                            let registration =
                                self.broker
                                    .stream_clients()
                                    .add_publisher(StreamPublisherInfo {
                                        connection: self.connection_id,
                                        publisher_id,
                                        vhost: vhost.name().to_owned(),
                                        stream: stream.clone(),
                                        reference: reference.clone().unwrap_or_default(),
                                    });
                            self.publishers.insert(
                                publisher_id,
                                Publisher {
                                    log,
                                    reference,
                                    registration,
                                },
                            );
                            code::OK
                        }
                        Err(error) => error_code(&error),
                    }
                };
                encode::response(
                    &mut self.out,
                    key::DECLARE_PUBLISHER,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::Publish {
                publisher_id,
                messages,
                ..
            } => self.publish(publisher_id, messages),
            Request::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            } => {
                let (vhost, user) = self.vhost();
                let (answer, sequence) = match vhost.stream_for(user, Access::Read, &stream) {
                    Ok(log) => (code::OK, log.producer_sequence(&reference)),
                    Err(error) => (error_code(&error), 0),
                };
                encode::response_u64(
                    &mut self.out,
                    key::QUERY_PUBLISHER_SEQUENCE,
                    correlation_id,
                    counted(&self.broker, answer),
                    sequence,
                );
            }
            Request::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                let answer = match self.publishers.remove(&publisher_id) {
                    Some(_) => code::OK,
                    None => code::PUBLISHER_DOES_NOT_EXIST,
                };
                encode::response(
                    &mut self.out,
                    key::DELETE_PUBLISHER,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            other => return self.handle_subscription_command(other),
        }
        Control::Continue
    }

    fn publish(&mut self, publisher_id: u8, messages: Vec<crate::codec::PublishedMessage>) {
        let ids: Vec<u64> = messages.iter().map(|m| m.publishing_id).collect();
        let Some(publisher) = self.publishers.get(&publisher_id) else {
            encode::publish_error(
                &mut self.out,
                publisher_id,
                &ids,
                counted(&self.broker, code::PUBLISHER_DOES_NOT_EXIST),
            );
            return;
        };
        if messages.is_empty() {
            return;
        }
        let counters = Arc::clone(publisher.registration.counters());
        counters.published(ids.len() as u64);
        let records = messages
            .into_iter()
            .map(|message| Record {
                body: message.message,
                publishing_id: message.publishing_id,
                filter: message.filter_value,
            })
            .collect();
        let confirms = Arc::clone(&self.confirms);
        publisher.log.publish(Publish {
            producer: publisher.reference.clone(),
            records,
            on_written: Box::new(move |result| match result {
                Ok(written) => {
                    counters.confirmed(written.confirmed.len() as u64);
                    confirms.push(Outcome::Confirmed(publisher_id, written.confirmed))
                }
                Err(error) => {
                    tracing::warn!(%error, "stream publish failed");
                    counters.errored(ids.len() as u64);
                    confirms.push(Outcome::Failed(
                        publisher_id,
                        ids,
                        code::STREAM_NOT_AVAILABLE,
                    ))
                }
            }),
        });
    }
}
