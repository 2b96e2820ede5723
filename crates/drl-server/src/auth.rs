//! Who may ask: optional bearer tokens.
//!
//! `auth.tokens_file` guards every API (`/v1/check`, forward-auth, gRPC
//! native and Envoy RLS, and the status page); `auth.metrics_tokens_file`
//! guards `/metrics` separately (a Prometheus scraper gets its own token
//! and cannot spend quota). Without `metrics_tokens_file`, `/metrics`
//! takes the API tokens when there are some (what a service guards, its
//! metrics do not give away: limit names, rates, peers), unless
//! `auth.metrics_open: true`. `/healthz` and `/readyz` stay open for probes.
//! Without a file the corresponding routes are open, which is the default
//! and fine on loopback; `drl serve` warns at startup when it listens
//! beyond loopback without tokens or TLS.
//!
//! A token file holds one token per line; blank lines and lines starting
//! with `#` are ignored; each token is at least [`MIN_TOKEN_LEN`] bytes.
//! Several tokens may be valid at once, which is how tokens rotate: add the
//! new one, reload (SIGHUP or a config change re-reads the files), move
//! the clients, remove the old one, reload. Only SHA-256 digests of the
//! tokens are kept, and a presented token is compared with every digest in
//! constant time, without an early exit.
//!
//! A denied caller gets HTTP 401 `application/problem+json` with
//! `WWW-Authenticate: Bearer`, or gRPC `UNAUTHENTICATED`; each denial is
//! counted in `drl_auth_denied_total{api, reason}`.

pub use drl_config::sections::AuthConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use arc_swap::ArcSwap;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The shortest token accepted in a token file, bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// A set of accepted tokens (their digests only).
#[derive(Clone)]
pub struct Tokens(Vec<[u8; 32]>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} accepted)", self.0.len())
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// Parses a token file's text; `what` names it in errors.
    pub fn parse(text: &str, what: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "{what}:{}: token shorter than {MIN_TOKEN_LEN} bytes",
                    i + 1
                ));
            }
            if t.chars().any(char::is_whitespace) {
                return Err(format!("{what}:{}: a token cannot contain spaces", i + 1));
            }
            out.push(digest(t.as_bytes()));
        }
        if out.is_empty() {
            return Err(format!(
                "{what}: no tokens (one token per line; '#' starts a comment)"
            ));
        }
        Ok(Self(out))
    }

    /// Reads a token file.
    pub fn load(path: &Path, field: &str) -> Result<Self, String> {
        let what = format!("auth.{field} {}", path.display());
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{what}: cannot read: {e}"))?;
        Self::parse(&text, &what)
    }

    /// True if `presented` is one of the tokens; the time taken does not
    /// depend on which token matches or where a wrong one differs.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let d = digest(presented);
        let mut ok = subtle::Choice::from(0);
        for t in &self.0 {
            ok |= t.ct_eq(&d);
        }
        ok.into()
    }
}

/// Which token set a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Health probes: always open.
    Open,
    /// `/metrics`.
    Metrics,
    /// Everything else.
    Api,
}

impl Class {
    /// The class of an HTTP request path.
    pub fn of_http_path(path: &str) -> Self {
        match path {
            "/healthz" | "/readyz" => Class::Open,
            "/metrics" => Class::Metrics,
            _ => Class::Api,
        }
    }

    /// The class of a gRPC method path: the health service is open to
    /// probes (Kubernetes gRPC probes and Envoy health checks send no
    /// token), every other method is an API.
    pub fn of_grpc_path(path: &str) -> Self {
        if path.starts_with("/grpc.health.v1.Health/") {
            Class::Open
        } else {
            Class::Api
        }
    }
}

/// Why a request was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token that is not accepted.
    Invalid,
}

impl Denied {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Denied::Missing => "missing",
            Denied::Invalid => "invalid",
        }
    }

    fn detail(self) -> &'static str {
        match self {
            Denied::Missing => {
                "this endpoint needs a bearer token: send 'Authorization: Bearer <token>'"
            }
            Denied::Invalid => "the bearer token is not accepted",
        }
    }

    /// The HTTP answer: 401 problem+json with `WWW-Authenticate`.
    pub fn http_response(self) -> axum::response::Response {
        let mut r = crate::http::problem(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            self.detail(),
        );
        let www = match self {
            Denied::Missing => HeaderValue::from_static("Bearer realm=\"drl\""),
            Denied::Invalid => {
                HeaderValue::from_static("Bearer realm=\"drl\", error=\"invalid_token\"")
            }
        };
        r.headers_mut().insert(header::WWW_AUTHENTICATE, www);
        r
    }

    /// The gRPC answer: status `UNAUTHENTICATED`.
    pub fn grpc_response(self) -> axum::http::Response<tonic::body::Body> {
        tonic::Status::unauthenticated(self.detail()).into_http()
    }
}

#[derive(Debug, Default)]
struct Sets {
    api: Option<Tokens>,
    metrics: Option<Tokens>,
}

/// The live token sets, replaced by reloads.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    // Read on every guarded request: loading writes only this thread's
    // slot (a lock's reader count would move between the cores).
    sets: ArcSwap<Sets>,
    // Which classes have a token set (`API` | `METRICS`): an open class
    // passes on one load of a line no request writes.
    guarded: AtomicU8,
    // One `set` at a time (the bits are raised before and lowered after
    // the sets change, so no request passes a guard it should not).
    setting: parking_lot::Mutex<()>,
}

const API: u8 = 1;
const METRICS: u8 = 2;

impl Sets {
    /// The set guarding the class of `bit` (`API` or `METRICS`).
    fn tokens(&self, bit: u8) -> Option<&Tokens> {
        if bit == API {
            self.api.as_ref()
        } else {
            self.metrics.as_ref()
        }
    }

    fn guarded(&self) -> u8 {
        (if self.api.is_some() { API } else { 0 })
            | (if self.metrics.is_some() { METRICS } else { 0 })
    }
}

/// Token sets loaded from files, ready to be installed.
#[derive(Debug)]
pub struct PreparedAuth(Sets);

impl PreparedAuth {
    /// True if the APIs need a token.
    pub fn guards_api(&self) -> bool {
        self.0.api.is_some()
    }
}

/// Loads the token files of `cfg`.
pub fn prepare(cfg: &AuthConfig) -> Result<PreparedAuth, String> {
    let load =
        |p: &Option<PathBuf>, field| p.as_deref().map(|p| Tokens::load(p, field)).transpose();
    let api = load(&cfg.tokens_file, "tokens_file")?;
    let metrics = match &cfg.metrics_tokens_file {
        Some(_) => load(&cfg.metrics_tokens_file, "metrics_tokens_file")?,
        None if cfg.metrics_open => None,
        None => api.clone(),
    };
    Ok(PreparedAuth(Sets { api, metrics }))
}

/// The token in an `Authorization: Bearer` header value, if any.
fn bearer(authorization: Option<&[u8]>) -> Option<&[u8]> {
    let v = authorization?;
    let (scheme, rest) = v.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    Some(rest.trim_ascii())
}

impl Auth {
    /// Installs loaded token sets.
    pub fn set(&self, p: PreparedAuth) {
        let s = &self.shared;
        let _one = s.setting.lock();
        let new = p.0.guarded();
        // A guard being added is raised before the sets change, one being
        // removed is lowered after: a request that sees a class open sees
        // sets (old or new) that leave it open.
        s.guarded.fetch_or(new, Ordering::AcqRel);
        s.sets.store(Arc::new(p.0));
        s.guarded.store(new, Ordering::Release);
    }

    /// True if the APIs need a token.
    pub fn guards_api(&self) -> bool {
        self.shared.guarded.load(Ordering::Acquire) & API != 0
    }

    /// Decides whether a request of `class` with `headers` may pass;
    /// counts denials under `api`.
    pub fn check(
        &self,
        class: Class,
        headers: &HeaderMap,
        api: &'static str,
    ) -> Result<(), Denied> {
        let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        self.check_authorization(class, authorization, api)
    }

    /// [`check`](Self::check) given the first `Authorization` header's
    /// value (the HTTP/1.1 fast path has no header map).
    pub fn check_authorization(
        &self,
        class: Class,
        authorization: Option<&[u8]>,
        api: &'static str,
    ) -> Result<(), Denied> {
        let bit = match class {
            Class::Open => return Ok(()),
            Class::Metrics => METRICS,
            Class::Api => API,
        };
        if self.shared.guarded.load(Ordering::Acquire) & bit == 0 {
            return Ok(());
        }
        let r = {
            let sets = self.shared.sets.load();
            let Some(tokens) = sets.tokens(bit) else {
                return Ok(());
            };
            match bearer(authorization) {
                None => Err(Denied::Missing),
                Some(t) if tokens.accepts(t) => Ok(()),
                Some(_) => Err(Denied::Invalid),
            }
        };
        if let Err(d) = r {
            let api = if class == Class::Metrics {
                "metrics"
            } else {
                api
            };
            metrics::counter!("drl_auth_denied_total", "api" => api, "reason" => d.reason())
                .increment(1);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "a-token-of-twenty-bytes";
    const B: &str = "another-token-0123456789";

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    fn auth(api: &str) -> Auth {
        let a = Auth::default();
        a.set(PreparedAuth(Sets {
            api: Some(Tokens::parse(api, "t").unwrap()),
            metrics: None,
        }));
        a
    }

    #[test]
    fn token_files_are_parsed_with_comments_and_checked() {
        let t = Tokens::parse(&format!("# ops\n\n  {A}  \n{B}\n"), "f").unwrap();
        assert!(t.accepts(A.as_bytes()) && t.accepts(B.as_bytes()));
        assert!(!t.accepts(b"a-token-of-twenty-byteZ"));
        let e = Tokens::parse("# nothing\n\n", "f").unwrap_err();
        assert!(e.contains("no tokens"), "{e}");
        let e = Tokens::parse(&format!("{A}\nshort\n"), "f").unwrap_err();
        assert_eq!(e, "f:2: token shorter than 16 bytes");
        let e = Tokens::parse("two words in one token\n", "f").unwrap_err();
        assert!(e.contains("spaces"), "{e}");
    }

    #[test]
    fn missing_wrong_and_right_tokens() {
        let a = auth(A);
        assert_eq!(
            a.check(Class::Api, &HeaderMap::new(), "http"),
            Err(Denied::Missing)
        );
        assert_eq!(
            a.check(Class::Api, &headers("Basic abc"), "http"),
            Err(Denied::Missing)
        );
        assert_eq!(
            a.check(Class::Api, &headers(&format!("Bearer {B}")), "http"),
            Err(Denied::Invalid)
        );
        assert_eq!(
            a.check(Class::Api, &headers(&format!("Bearer {A}")), "http"),
            Ok(())
        );
        assert_eq!(
            a.check(Class::Api, &headers(&format!("bearer  {A} ")), "http"),
            Ok(())
        );
        // Probes stay open; /metrics has its own set (none here).
        assert_eq!(a.check(Class::Open, &HeaderMap::new(), "http"), Ok(()));
        assert_eq!(a.check(Class::Metrics, &HeaderMap::new(), "http"), Ok(()));
        // Rotation: a new set replaces the old one.
        a.set(PreparedAuth(Sets {
            api: Some(Tokens::parse(B, "t").unwrap()),
            metrics: Some(Tokens::parse(A, "t").unwrap()),
        }));
        assert_eq!(
            a.check(Class::Api, &headers(&format!("Bearer {A}")), "http"),
            Err(Denied::Invalid)
        );
        assert_eq!(
            a.check(Class::Api, &headers(&format!("Bearer {B}")), "http"),
            Ok(())
        );
        assert_eq!(
            a.check(Class::Metrics, &headers(&format!("Bearer {B}")), "http"),
            Err(Denied::Invalid)
        );
        assert_eq!(
            a.check(Class::Metrics, &headers(&format!("Bearer {A}")), "http"),
            Ok(())
        );
    }

    #[test]
    fn metrics_take_the_api_tokens_unless_they_have_their_own_or_are_opened() {
        let dir = std::env::temp_dir().join(format!("drl-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (api, scrape) = (dir.join("api"), dir.join("scrape"));
        std::fs::write(&api, A).unwrap();
        std::fs::write(&scrape, B).unwrap();
        let with = |metrics_tokens_file: Option<PathBuf>, metrics_open| {
            let a = Auth::default();
            a.set(
                prepare(&AuthConfig {
                    tokens_file: Some(api.clone()),
                    metrics_tokens_file,
                    metrics_open,
                })
                .unwrap(),
            );
            let m = |h: &HeaderMap| a.check(Class::Metrics, h, "http");
            (
                m(&HeaderMap::new()),
                m(&headers(&format!("Bearer {A}"))),
                m(&headers(&format!("Bearer {B}"))),
            )
        };
        assert_eq!(
            with(None, false),
            (Err(Denied::Missing), Ok(()), Err(Denied::Invalid))
        );
        assert_eq!(with(None, true), (Ok(()), Ok(()), Ok(())));
        assert_eq!(
            with(Some(scrape.clone()), false),
            (Err(Denied::Missing), Err(Denied::Invalid), Ok(()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotation_never_opens_a_guarded_class_and_removal_opens_it() {
        let a = auth(A);
        assert!(a.guards_api());
        // While the API's set rotates between two guarded ones, a request
        // without a token never passes.
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..2_000 {
                    let t = if i % 2 == 0 { B } else { A };
                    a.set(PreparedAuth(Sets {
                        api: Some(Tokens::parse(t, "t").unwrap()),
                        metrics: None,
                    }));
                }
            });
            for _ in 0..20_000 {
                assert_eq!(
                    a.check_authorization(Class::Api, None, "http"),
                    Err(Denied::Missing)
                );
            }
        });
        a.set(PreparedAuth(Sets::default()));
        assert!(!a.guards_api());
        assert_eq!(a.check(Class::Api, &HeaderMap::new(), "http"), Ok(()));
        assert_eq!(a.check(Class::Metrics, &HeaderMap::new(), "http"), Ok(()));
    }

    proptest! {
        /// Only a listed token passes; any other byte string is refused.
        #[test]
        fn only_listed_tokens_pass(t in "[A-Za-z0-9._~+/=-]{16,40}", other in proptest::collection::vec(any::<u8>(), 0..64)) {
            let tokens = Tokens::parse(&t, "p").unwrap();
            prop_assert!(tokens.accepts(t.as_bytes()));
            prop_assert_eq!(tokens.accepts(&other), other == t.as_bytes());
        }
    }
}
