//! SASL mechanisms' wire formats that every listener shares (AMQP 0-9-1 `connection.start-ok`,
//! AMQP 1.0 `sasl-init`), so a login is parsed the same strict way whatever the protocol.

/// The credentials of a SASL PLAIN response (RFC 4616).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainCredentials {
    /// The authorization identity; empty when the client gave none. Warren logs in as the
    /// authentication identity, as RabbitMQ does.
    pub authzid: String,
    /// The authentication identity: the user name.
    pub user: String,
    /// The password.
    pub password: String,
}

/// Parses a SASL PLAIN response, `[authzid] NUL authcid NUL password`, strictly: exactly
/// two NULs and UTF-8 text in every part. `None` for anything else (the login is refused,
/// never guessed at).
pub fn parse_plain(response: &[u8]) -> Option<PlainCredentials> {
    let mut parts = response.split(|b| *b == 0);
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).ok();
    Some(PlainCredentials {
        authzid: text(authzid)?,
        user: text(user)?,
        password: text(password)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_responses_parse_with_and_without_authzid() {
        let parsed = parse_plain(b"\0guest\0secret").unwrap();
        assert_eq!(
            (parsed.user.as_str(), parsed.password.as_str()),
            ("guest", "secret")
        );
        assert_eq!(parsed.authzid, "");
        let parsed = parse_plain(b"admin\0guest\0secret").unwrap();
        assert_eq!(parsed.authzid, "admin");
        assert_eq!(parsed.user, "guest");
    }

    #[test]
    fn anything_but_three_utf8_parts_is_refused() {
        assert_eq!(parse_plain(b"guest"), None);
        assert_eq!(parse_plain(b"\0guest"), None);
        assert_eq!(parse_plain(b"\0a\0b\0c"), None);
        assert_eq!(parse_plain(b"\0gu\xffest\0secret"), None);
        assert_eq!(parse_plain(b"\0guest\0sec\xc3"), None);
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_round_trips_three_parts(
            authzid in "[^\u{0}]{0,8}",
            user in "[^\u{0}]{0,12}",
            password in "[^\u{0}]{0,12}",
            noise in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let _ = parse_plain(&noise);
            let response = format!("{authzid}\0{user}\0{password}");
            let parsed = parse_plain(response.as_bytes()).unwrap();
            prop_assert_eq!(parsed, PlainCredentials { authzid, user, password });
        }
    }
}
