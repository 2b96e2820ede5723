//! Test harness: real `redis-server` processes on free loopback ports (with
//! the module loaded, or without it for a replica), killed on drop
//! (drl-test-kit's launcher), and the module's calls and replies.
//!
//! Needs the Debian package `redis-server`; without it the tests FAIL with
//! an explanation, they never skip.
#![allow(dead_code)]

pub mod trace;

use drl_redis_module::spec::{self, Clock, Decision, Op};
use redis::Value;

#[allow(unused_imports)]
pub use drl_test_kit::redis::{RedisServer as Redis, module_path, wait_until};

/// Calls `DRL.DECIDE keys... spec`.
pub fn decide(
    c: &mut redis::Connection,
    keys: &[String],
    grace_ms: u64,
    decisions: &[Decision],
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("DRL.DECIDE");
    for k in keys {
        cmd.arg(k);
    }
    cmd.arg(spec::encode(grace_ms, decisions));
    cmd.query(c)
}

/// A caller-time decision.
pub fn at(
    now: u64,
    algorithm: drl_core::Algorithm,
    cost: u64,
    quotas: &[drl_core::Quota],
) -> Decision {
    Decision {
        clock: Clock::Caller(now),
        op: Op::Take,
        algorithm,
        cost,
        quotas: quotas.to_vec(),
        marks: vec![],
    }
}

/// The items of an array reply as (verdict, now, states) per decision of
/// `nqs` quotas each.
pub fn items(v: &Value, nqs: &[usize]) -> Vec<(i64, u64, Vec<Vec<u8>>)> {
    let Value::Array(items) = v else {
        panic!("expected an array, got {v:?}")
    };
    assert_eq!(
        items.len(),
        nqs.iter().map(|n| n + 2).sum::<usize>(),
        "{v:?}"
    );
    let mut it = items.iter();
    nqs.iter()
        .map(|&nq| {
            let Some(Value::Int(verdict)) = it.next() else {
                panic!("verdict in {v:?}")
            };
            let bulk = |x: Option<&Value>| match x {
                Some(Value::BulkString(b)) => b.clone(),
                other => panic!("expected a bulk string, got {other:?}"),
            };
            let now = String::from_utf8(bulk(it.next())).unwrap().parse().unwrap();
            let states = (0..nq).map(|_| bulk(it.next())).collect();
            (*verdict, now, states)
        })
        .collect()
}
