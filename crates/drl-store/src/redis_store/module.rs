//! The `module` engine: decisions made by drl's native Redis module
//! (`crates/drl-redis-module`, loaded with `redis-server --loadmodule
//! libdrl_redis_module.so`) instead of the Lua scripts.
//!
//! One batch is one `DRL.DECIDE key_1 ... key_K spec` call: the keys are
//! the same as the scripts' (every decision's keys in order), `spec` is one
//! binary string in the format of [`drl_redis_wire::decide_spec`] (protocol v3),
//! the one definition the module parses with: the magic, the expiry grace
//! in ms, then per decision `mode` (clock; take, charge or refund),
//! `now`, `algorithm`, `cost`, `nq` and `nq` x (`limit`, `window`,
//! `burst`, and a refund's mark).
//! The reply is exactly the scripts' reply, so [`super::script::finish`]
//! decodes it. States are stored as the same text as the scripts write, so
//! both engines can serve the same keys.
//!
//! A server without the module answers `unknown command`; that becomes a
//! [`StoreError::Backend`] that names the server and says what to do, never
//! a silent fallback to Lua. `DRL.VERSION` is checked before the first
//! decision (on a cluster: on every primary, at connect).

use drl_core::{Mark, Nanos};
use drl_redis_wire::decide_spec::{self, Clock, Op};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisError, Value};

use super::conn::{Conn, backend};
use crate::{LimitSpec, StoreError};

/// The protocol version `DRL.VERSION` must answer.
pub(crate) const VERSION: i64 = decide_spec::VERSION as i64;

/// One decision's record of the spec (everything after the two header
/// words): `now` is `None` for the server's clock.
pub(crate) fn record(
    spec: &LimitSpec,
    now: Option<Nanos>,
    op: Op,
    cost: u64,
    marks: &[Mark],
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(8 * (5 + 4 * spec.quotas.len()));
    let clock = now.map_or(Clock::Server, Clock::Caller);
    let marks: Vec<u64> = marks.iter().map(|m| m.0).collect();
    decide_spec::write_record(
        &mut buf,
        clock,
        op,
        spec.algorithm,
        cost,
        &spec.quotas,
        &marks,
    );
    buf
}

/// The header of a spec: magic and expiry grace.
pub(crate) fn header(grace_ms: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(16 + 64);
    decide_spec::write_header(&mut buf, grace_ms);
    buf
}

/// Does `e` say the server does not know a `DRL.*` command?
pub(crate) fn is_unknown_command(e: &RedisError) -> bool {
    let text = e.to_string();
    text.contains("unknown command") && text.to_ascii_lowercase().contains("drl.")
}

/// The error for a server that lacks the module.
pub(crate) fn missing(server: &str) -> StoreError {
    StoreError::Backend(format!(
        "Redis at {server} has no drl module (DRL.* is an unknown command), which the \
         module engine needs: start redis-server with \
         `--loadmodule /path/to/libdrl_redis_module.so` (built by \
         `cargo build --release -p drl-redis-module`), or use the scripts (`engine: lua`)"
    ))
}

/// The error for a module that speaks another protocol version.
pub(crate) fn mismatch(server: &str, got: &Value) -> StoreError {
    StoreError::Backend(format!(
        "Redis at {server} runs a drl module of another protocol version (DRL.VERSION \
         answered {got:?}, this drl needs {VERSION}): load the libdrl_redis_module.so built \
         from this drl release, or use the scripts (`engine: lua`)"
    ))
}

/// Checks one node's `DRL.VERSION` answer.
fn check_answer(server: &str, answer: Result<Value, RedisError>) -> Result<(), StoreError> {
    match answer {
        Ok(Value::Int(VERSION)) => Ok(()),
        Ok(Value::ServerError(e)) => {
            let e: RedisError = e.into();
            if is_unknown_command(&e) || e.to_string().contains("unknown command") {
                Err(missing(server))
            } else {
                Err(backend(e))
            }
        }
        Ok(other) => Err(mismatch(server, &other)),
        Err(e) if e.to_string().contains("unknown command") => Err(missing(server)),
        Err(e) => Err(backend(e)),
    }
}

/// `DRL.VERSION` on the server (on a cluster: on every primary). `server`
/// names a single server in errors.
pub(crate) async fn check_version(conn: &Conn, server: &str) -> Result<(), StoreError> {
    let cmd = redis::cmd("DRL.VERSION");
    match conn {
        Conn::Single(_) => check_answer(server, conn.query(&cmd).await),
        Conn::Cluster(c) => {
            let all = c
                .clone()
                .route_command(
                    cmd,
                    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                )
                .await
                .map_err(backend)?;
            match all {
                Value::Map(nodes) => {
                    for (addr, answer) in nodes {
                        let addr = match &addr {
                            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            other => format!("{other:?}"),
                        };
                        check_answer(&addr, Ok(answer))?;
                    }
                    Ok(())
                }
                other => check_answer(server, Ok(other)),
            }
        }
    }
}

/// One `DRL.DECIDE` call: every part's keys, then the spec (header and
/// every part's record). `parts` yields (nkeys, args) where args holds
/// `nkeys` keys then the record.
pub(crate) fn build_call<'a>(grace_ms: u64, parts: impl Iterator<Item = (usize, &'a Cmd)>) -> Cmd {
    let mut cmd = redis::cmd("DRL.DECIDE");
    let mut spec = header(grace_ms);
    for (n, p) in parts {
        for (i, a) in p.args_iter().enumerate() {
            if let redis::Arg::Simple(b) = a {
                if i < n {
                    cmd.arg(b);
                } else {
                    spec.extend_from_slice(b);
                }
            }
        }
    }
    cmd.arg(spec);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::{Algorithm, Quota};
    use drl_redis_wire::decide_spec::MAGIC;

    fn words(b: &[u8]) -> Vec<u64> {
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn record_follows_the_protocol() {
        let spec = LimitSpec::new(
            "a",
            Algorithm::SlidingWindow,
            vec![
                Quota::new(3, 10).unwrap(),
                Quota::with_burst(5, 20, 7).unwrap(),
            ],
        );
        assert_eq!(
            words(&record(&spec, Some(42), Op::Take, 2, &[])),
            [0, 42, 6, 2, 2, 3, 10, 3, 5, 20, 7]
        );
        assert_eq!(
            words(&record(&spec, None, Op::Take, 0, &[]))[..5],
            [1, 0, 6, 0, 2]
        );
        assert_eq!(
            words(&record(&spec, Some(42), Op::Charge, 9, &[]))[..5],
            [2, 42, 6, 9, 2]
        );
        assert_eq!(
            words(&record(&spec, None, Op::Charge, 9, &[]))[..5],
            [3, 0, 6, 9, 2]
        );
        assert_eq!(
            words(&record(&spec, Some(42), Op::Refund, 9, &[Mark(4), Mark(5)])),
            [4, 42, 6, 9, 2, 3, 10, 3, 4, 5, 20, 7, 5]
        );
        assert_eq!(words(&header(1000)), [MAGIC, 1000]);
        assert_eq!(&MAGIC.to_le_bytes()[..4], b"1LRD");
    }

    /// What the engine sends, the module's parser (the same
    /// `drl_redis_wire::decide_spec`) reads back as the same requests.
    #[test]
    fn records_parse_back_with_the_shared_definition() {
        let spec = LimitSpec::new(
            "a",
            Algorithm::Gcra,
            vec![Quota::new(3, 10).unwrap(), Quota::new(30, 1_000).unwrap()],
        );
        for a in Algorithm::ALL {
            let spec = LimitSpec::new("a", a, spec.quotas.clone());
            let mut raw = header(7);
            raw.extend(record(&spec, Some(5), Op::Take, 1, &[]));
            raw.extend(record(&spec, None, Op::Charge, 0, &[]));
            raw.extend(record(&spec, Some(6), Op::Refund, 2, &[Mark(8), Mark(9)]));
            let parsed = decide_spec::parse(&raw, 6).unwrap();
            assert_eq!(parsed.grace_ms, 7);
            let got: Vec<_> = parsed
                .decisions
                .iter()
                .map(|d| {
                    (
                        d.clock,
                        d.op,
                        d.algorithm,
                        d.cost,
                        d.quotas.clone(),
                        d.marks.clone(),
                    )
                })
                .collect();
            assert_eq!(
                got,
                [
                    (
                        Clock::Caller(5),
                        Op::Take,
                        a,
                        1,
                        spec.quotas.clone(),
                        vec![]
                    ),
                    (Clock::Server, Op::Charge, a, 0, spec.quotas.clone(), vec![]),
                    (
                        Clock::Caller(6),
                        Op::Refund,
                        a,
                        2,
                        spec.quotas.clone(),
                        vec![8, 9]
                    ),
                ]
            );
        }
    }

    #[test]
    fn calls_put_keys_first_and_one_spec_last() {
        let mut a = Cmd::new();
        a.arg("k1").arg("k2").arg(vec![1u8; 8]);
        let mut b = Cmd::new();
        b.arg("k3").arg(vec![2u8; 8]);
        let cmd = build_call(5, [(2, &a), (1, &b)].into_iter());
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|x| match x {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(args[0], b"DRL.DECIDE");
        assert_eq!(args[1..4], [b"k1".to_vec(), b"k2".to_vec(), b"k3".to_vec()]);
        let spec = words(&args[4]);
        assert_eq!(spec.len(), 4);
        assert_eq!(spec[..2], [MAGIC, 5]);
        assert_eq!(args.len(), 5);
    }

    #[test]
    fn version_answers_are_checked() {
        assert!(check_answer("s", Ok(Value::Int(VERSION))).is_ok());
        // v1 (no debts) and v2 (no refunds) are refused at connect.
        for old in [1, 2] {
            let e = check_answer("redis://h:1", Ok(Value::Int(old))).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("redis://h:1") && text.contains("another protocol version"),
                "{text}"
            );
        }
        let unknown = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "unknown command 'DRL.VERSION', with args beginning with: ".to_string(),
        ));
        let text = check_answer("redis://h:1", Err(unknown))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("has no drl module") && text.contains("--loadmodule"),
            "{text}"
        );
    }
}
