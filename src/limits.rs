//! Process limits set at start-up.

/// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit, so the broker can
/// hold as many connections as the system allows without the operator tuning `ulimit -n`,
/// and logs both. Returns the (soft, hard) limits in force afterwards, `None` where the
/// platform has no such limit or it could not be read.
#[cfg(unix)]
// `rlim_t` is 64 bits on most platforms but not all: the casts are needed somewhere.
#[allow(clippy::unnecessary_cast)]
pub fn raise_open_file_limit() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own; no other memory is touched.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot read the open file limit"
        );
        return None;
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        } else {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "cannot raise the open file limit"
            );
        }
    }
    let (soft, hard) = (limit.rlim_cur as u64, limit.rlim_max as u64);
    tracing::info!(
        soft_limit = soft,
        hard_limit = hard,
        soft_limit_before = before as u64,
        "open file limit (each client connection takes one)"
    );
    Some((soft, hard))
}

/// Non-Unix platforms have no RLIMIT_NOFILE.
#[cfg(not(unix))]
pub fn raise_open_file_limit() -> Option<(u64, u64)> {
    None
}

#[cfg(all(test, unix))]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let (soft, hard) = super::raise_open_file_limit().expect("readable limits");
        assert_eq!(soft, hard);
    }
}
