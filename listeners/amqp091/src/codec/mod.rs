//! Sans-IO AMQP 0-9-1 codec.
