//! Helpers shared by the lapin tests (a subdirectory module, so cargo does not build it as a
//! test of its own).

use lapin::ErrorKind;

/// The reply code and text of a broker-sent close carried by a lapin error.
pub fn amqp_error(error: &lapin::Error) -> (u16, String) {
    match error.kind() {
        ErrorKind::ProtocolError(e) => (e.get_id(), e.get_message().as_str().to_string()),
        other => panic!("expected an AMQP error from the broker, got {other:?}"),
    }
}
