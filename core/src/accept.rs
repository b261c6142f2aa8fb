//! What a listener does when `accept` fails: every listener's accept loop calls
//! [`accept_failed`] and sleeps for the time it returns, so running out of file descriptors
//! never spins a core or stops the connections already open from being served.
//!
//! Protocol-free and runtime-free: the caller sleeps with its own runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `EMFILE`: the process is out of file descriptors (the same number on Linux, the BSDs
/// and macOS).
const EMFILE: i32 = 24;
/// `ENFILE`: the system is out of file descriptors.
const ENFILE: i32 = 23;

/// How long to stop accepting after running out of file descriptors: long enough for some
/// connections to close, short enough that new clients wait in the backlog rather than
/// time out.
pub const OUT_OF_DESCRIPTORS_BACKOFF: Duration = Duration::from_millis(200);

/// How long to stop accepting after any other accept error.
pub const OTHER_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// When the last out-of-descriptors line was logged (seconds since the epoch), so a
/// sustained shortage logs once a second, not on every retry.
static LAST_LOGGED: AtomicU64 = AtomicU64::new(0);

/// Whether an accept error means the process or system ran out of file descriptors.
pub fn is_out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(EMFILE | ENFILE))
}

/// Logs a failed accept on `protocol`'s listener and returns how long to back off before
/// accepting again. Existing connections are not touched.
pub fn accept_failed(protocol: &str, error: &std::io::Error) -> Duration {
    if is_out_of_descriptors(error) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if LAST_LOGGED.swap(now, Ordering::Relaxed) != now {
            tracing::warn!(
                protocol,
                %error,
                "out of file descriptors: refusing new connections for now, serving the open \
                 ones (raise the open-file limit, `ulimit -n`, to accept more)"
            );
        }
        OUT_OF_DESCRIPTORS_BACKOFF
    } else {
        tracing::warn!(protocol, %error, "accept failed");
        OTHER_ERROR_BACKOFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_backs_off_longer_than_other_errors() {
        let emfile = std::io::Error::from_raw_os_error(EMFILE);
        let enfile = std::io::Error::from_raw_os_error(ENFILE);
        let other = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert!(is_out_of_descriptors(&emfile) && is_out_of_descriptors(&enfile));
        assert!(!is_out_of_descriptors(&other));
        assert_eq!(accept_failed("amqp", &emfile), OUT_OF_DESCRIPTORS_BACKOFF);
        assert_eq!(accept_failed("mqtt", &enfile), OUT_OF_DESCRIPTORS_BACKOFF);
        assert_eq!(accept_failed("mqtt", &other), OTHER_ERROR_BACKOFF);
    }
}
