//! Helpers shared by the interop tests: start a broker on 127.0.0.1 with an ephemeral port.
