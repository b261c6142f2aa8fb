//! warren-perf: a load tool for any AMQP 0-9-1 broker.
fn main() {}
