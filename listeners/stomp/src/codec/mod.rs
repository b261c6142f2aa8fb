//! Sans-IO STOMP 1.0/1.1/1.2 codec.
