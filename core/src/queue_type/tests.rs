use super::*;
use crate::message::Properties;
use crate::queue::{Queue, QueueConfig};
use crate::value::Value;

fn classic(name: &str) -> Arc<dyn QueueInstance> {
    Queue::new(QueueConfig {
        name: name.into(),
        vhost: "/".into(),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    })
}

fn message(body: &'static str) -> Arc<Message> {
    Arc::new(Message {
        exchange: "".into(),
        routing_key: "q".into(),
        properties: Properties::default(),
        encoded_properties: None,
        body: bytes::Bytes::from_static(body.as_bytes()),
    })
}

#[test]
fn types_are_found_by_their_x_queue_type_name() {
    assert_eq!(lookup("classic").map(|t| t.name()), Some("classic"));
    assert!(lookup("no-such-type").is_none());
    let classic = lookup("classic").unwrap();
    assert!(classic.capabilities().priorities);
    assert!(!classic.capabilities().consumers_need_offset);
    assert!(classic.equivalence_arguments().contains(&"x-max-length"));
    let mut arguments = Table::new();
    arguments.insert("x-max-length", Value::LongString(b"ten".to_vec()));
    let problem = classic.validate_arguments(&arguments).unwrap_err();
    assert!(problem.contains("x-max-length"), "{problem}");
}

#[test]
fn a_classic_queue_is_driven_through_the_interface() {
    let queue = classic("q");
    assert_eq!(queue.name(), "q");
    assert_eq!(queue.queue_type().name(), "classic");
    for body in ["a", "b", "c"] {
        assert_eq!(queue.enqueue(message(body), 0), EnqueueOutcome::Enqueued);
    }
    // Browsing takes nothing.
    let browsed: Vec<_> = queue.browse(2).iter().map(|m| m.body.clone()).collect();
    assert_eq!(browsed, [&b"a"[..], &b"b"[..]]);
    assert_eq!(queue.info().ready, 3);
    let (delivery, remaining) = queue.get(true).unwrap();
    assert_eq!((&delivery.message.body[..], remaining), (&b"a"[..], 2));
    assert_eq!(delivery.queue.name(), "q");
    // The delivery names its queue through the interface, and settles through it.
    delivery.queue.settle(&[delivery.id], Settlement::Requeue);
    let (again, _) = queue.get(true).unwrap();
    assert!(again.redelivered);
    assert_eq!(again.delivery_count, 1);
    again.queue.settle(&[again.id], Settlement::Ack);
    assert_eq!(queue.purge(), 2);
    assert_eq!(queue.info().ready, 0);
    assert_eq!(
        format!("{queue:?}"),
        r#"Queue { name: "q", type: "classic" }"#
    );
}
