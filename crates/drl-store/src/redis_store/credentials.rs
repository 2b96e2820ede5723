//! Credentials for Redis, and URLs as shown in logs and errors.
//!
//! A password comes either from the URL (`rediss://user:pass@host`) or from
//! `password_file` (its whole content, trimmed); a user name from the URL
//! or `username` (an ACL user; none: Redis's `default` user). Nothing here
//! ever formats a password: [`redact`] replaces it in every URL drl shows,
//! and [`Credentials`]'s `Debug` prints `***`.

use std::path::Path;

use crate::StoreError;

/// What replaces a password wherever a URL is shown.
pub(crate) const MASK: &str = "***";

/// `url` with its password (the part of the user info after `:`, and any
/// `pass=` / `password=` query value) replaced by `***`. Works on any
/// string, parseable or not; the user name and the address stay.
pub(crate) fn redact(url: &str) -> String {
    let mut out = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s + 3 => {
            let userinfo = &url[s + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:{MASK}{}",
                    &url[..s + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    };
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}={MASK}")
                }
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// The user name and password drl authenticates with beyond what the URL
/// says. `Debug` never shows the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// An ACL user (`AUTH username password`).
    pub username: Option<String>,
    /// The password (from `password_file`).
    pub password: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| MASK))
            .finish()
    }
}

impl Credentials {
    /// True if nothing overrides the URL.
    pub fn is_empty(&self) -> bool {
        self.username.is_none() && self.password.is_none()
    }
}

/// The password in `path`: the whole file, surrounding whitespace (a
/// trailing newline) trimmed. An unreadable or empty file is an error
/// naming the file (never its content).
pub(crate) fn read_password_file(path: &Path) -> Result<String, StoreError> {
    let bad = |what: String| {
        StoreError::Invalid(format!(
            "redis config: `password_file` {}: {what}",
            path.display()
        ))
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("is not UTF-8 text".into()))?;
    let password = text.trim();
    if password.is_empty() {
        return Err(bad("is empty (a password file holds the password)".into()));
    }
    if password.contains(['\n', '\r']) {
        return Err(bad(
            "holds more than one line (a password file holds the password alone)".into(),
        ));
    }
    Ok(password.to_string())
}

/// True if others than the owner and group may read `path` (Unix).
#[cfg(unix)]
pub(crate) fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

/// Not checked off Unix.
#[cfg(not(unix))]
pub(crate) fn world_readable(_path: &Path) -> bool {
    false
}

/// The user name and password in a URL's user info, if any (as written,
/// still percent-encoded).
pub(crate) fn url_userinfo(url: &str) -> (Option<&str>, Option<&str>) {
    let Some(s) = url.find("://") else {
        return (None, None);
    };
    let rest = &url[s + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return (None, None);
    };
    let userinfo = &rest[..at];
    let (user, pass) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (userinfo, None),
    };
    ((!user.is_empty()).then_some(user), pass)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("redis://u@h:1"), "redis://u@h:1");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=pw"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn userinfo_is_found() {
        assert_eq!(url_userinfo("redis://u:p@h"), (Some("u"), Some("p")));
        assert_eq!(url_userinfo("redis://:p@h"), (None, Some("p")));
        assert_eq!(url_userinfo("redis://u@h"), (Some("u"), None));
        assert_eq!(url_userinfo("redis://h:1/0"), (None, None));
        assert_eq!(url_userinfo("redis://h:1/0?x=a@b"), (None, None));
    }

    #[test]
    fn credentials_debug_hides_the_password() {
        let c = Credentials {
            username: Some("drl".into()),
            password: Some("hunter2-secret".into()),
        };
        let s = format!("{c:?}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("drl") && s.contains(MASK), "{s}");
    }

    #[test]
    fn password_files_are_trimmed_and_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "  s3cret\n").unwrap();
        assert_eq!(read_password_file(&p).unwrap(), "s3cret");
        std::fs::write(&p, " \n\t\n").unwrap();
        let e = read_password_file(&p).unwrap_err().to_string();
        assert!(e.contains("is empty") && e.contains("pw"), "{e}");
        std::fs::write(&p, "a\nb\n").unwrap();
        let e = read_password_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("more than one line") && !e.contains("a\nb"),
            "{e}"
        );
        let e = read_password_file(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing") && e.contains("password_file"), "{e}");
    }

    proptest! {
        /// Whatever the password (any characters a URL's user info can
        /// hold, percent-encoded or not), the redacted URL is the URL with
        /// exactly the password replaced: user, host and port stay.
        #[test]
        fn a_redacted_url_never_holds_the_password(
            user in "[a-z0-9_-]{0,8}",
            password in "[A-Za-z0-9!$&'()*+,;=%._~-]{6,24}",
            host in "[a-z]{1,8}(\\.[a-z]{1,8}){0,2}",
            port in 1u16..,
            tls in any::<bool>(),
        ) {
            let scheme = if tls { "rediss" } else { "redis" };
            let url = format!("{scheme}://{user}:{password}@{host}:{port}/0");
            prop_assert_eq!(
                redact(&url),
                format!("{scheme}://{user}:***@{host}:{port}/0")
            );
        }
    }
}
