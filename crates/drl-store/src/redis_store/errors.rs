//! Redis errors as one clear line: what went wrong and which config key
//! fixes it, for the failures an operator causes (TLS trust, client
//! certificates, passwords, ACL permissions, a plain port given as TLS).
//!
//! The redis crate's own text is kept after the explanation; it never
//! holds a password (the crate does not echo URLs or `AUTH` arguments).

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// One failure an operator can fix, recognised in a redis error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The server's certificate is not signed by a trusted CA.
    UntrustedCertificate,
    /// The server's certificate does not name the host of the URL.
    WrongName,
    /// The server's certificate has expired or is not valid yet.
    Expired,
    /// The server wants a client certificate, or refused ours.
    ClientCertificate,
    /// The port does not speak TLS (`rediss://` to a plain port).
    NotTls,
    /// User name or password refused.
    WrongPassword,
    /// The server needs a password and got none.
    NoPassword,
    /// The ACL user may not run a command drl needs, or touch its keys.
    NoPermission,
}

impl Cause {
    /// The cause `text` (a redis error's text) shows, if any.
    pub(crate) fn of(text: &str) -> Option<Cause> {
        let has = |s: &str| text.contains(s);
        Some(if has("WRONGPASS") || has("invalid password") {
            Cause::WrongPassword
        } else if has("NOAUTH") {
            Cause::NoPassword
        } else if has("NOPERM") || has("NoPerm") {
            Cause::NoPermission
        } else if has("NotValidForName") {
            Cause::WrongName
        } else if has("Expired") && has("certificate") {
            Cause::Expired
        } else if has("invalid peer certificate") || has("UnknownIssuer") {
            Cause::UntrustedCertificate
        } else if has("CertificateRequired")
            || has("BadCertificate")
            || has("UnknownCA")
            || has("HandshakeFailure")
        {
            Cause::ClientCertificate
        } else if has("InvalidContentType") || has("corrupt message") {
            Cause::NotTls
        } else {
            return None;
        })
    }

    /// What it means, and what to change.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Cause::UntrustedCertificate => {
                "TLS handshake with Redis failed: the server's certificate is not signed by a \
                 trusted CA (set `redis.tls.ca_file` to the CA that signed it)"
            }
            Cause::WrongName => {
                "TLS handshake with Redis failed: the server's certificate does not name the \
                 host of the URL (use a host or IP address the certificate lists)"
            }
            Cause::Expired => {
                "TLS handshake with Redis failed: the server's certificate has expired or is \
                 not valid yet"
            }
            Cause::ClientCertificate => {
                "TLS handshake with Redis failed: the server requires a client certificate it \
                 trusts (Redis `tls-auth-clients`; set `redis.tls.cert_file` and \
                 `redis.tls.key_file`)"
            }
            Cause::NotTls => {
                "TLS handshake with Redis failed: the port does not speak TLS (a rediss:// URL \
                 needs Redis's `tls-port`)"
            }
            Cause::WrongPassword => {
                "Redis refused the credentials (check the user name and the password in the \
                 URL or `redis.password_file`)"
            }
            Cause::NoPassword => {
                "Redis requires a password (give it in the URL or with `redis.password_file`)"
            }
            Cause::NoPermission => {
                "the Redis ACL user lacks a permission drl needs (see docs/redis.md, \
                 \"Credentials and ACL\")"
            }
        }
    }
}

/// The cause of `e`, if it is one an operator can fix.
pub(crate) fn cause(e: &RedisError) -> Option<Cause> {
    match e.kind() {
        ErrorKind::AuthenticationFailed => return Some(Cause::WrongPassword),
        ErrorKind::Server(ServerErrorKind::NoPerm) => return Some(Cause::NoPermission),
        _ => {}
    }
    Cause::of(&e.to_string())
}

/// `e` as one line: the explanation of its cause if it is one an operator
/// can fix, then the redis crate's text.
pub(crate) fn describe(e: &RedisError) -> String {
    let text = e.to_string().replace(['\n', '\r'], " ");
    match cause(e) {
        Some(cause) => format!("{}: {text}", cause.hint()),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_recognised() {
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                Cause::UntrustedCertificate,
            ),
            (
                "invalid peer certificate: NotValidForName",
                Cause::WrongName,
            ),
            (
                "received fatal alert: CertificateRequired",
                Cause::ClientCertificate,
            ),
            (
                "received corrupt message of type InvalidContentType",
                Cause::NotTls,
            ),
            (
                "WRONGPASS: invalid username-password pair or user is disabled.",
                Cause::WrongPassword,
            ),
            ("NOAUTH: Authentication required.", Cause::NoPassword),
            (
                "NOPERM: this user has no permissions to run the 'evalsha' command",
                Cause::NoPermission,
            ),
        ];
        for (text, cause) in cases {
            assert_eq!(Cause::of(text), Some(cause), "{text}");
        }
        assert_eq!(Cause::of("Connection refused (os error 111)"), None);
        let refused = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(cause(&refused), Some(Cause::WrongPassword));
    }

    #[test]
    fn a_description_is_one_line() {
        let e = RedisError::from(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer\nmore",
        ));
        let d = describe(&e);
        assert!(!d.contains('\n'), "{d}");
        assert!(
            d.contains("redis.tls.ca_file") && d.contains("UnknownIssuer"),
            "{d}"
        );
    }
}
