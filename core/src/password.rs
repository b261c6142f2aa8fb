//! Password hashing compatible with RabbitMQ's `rabbit_password_hashing_*` modules.
