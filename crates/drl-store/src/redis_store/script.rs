//! The decision script: its source, the keys and arguments of one call, and
//! the decoding of its answer into a drl-core [`Decision`].
//!
//! The script (`lua/*.lua`) runs the admission rule and the state update of
//! every quota atomically and returns the state each quota had *before* the
//! decision. The decision's fields (remaining, retry_after, reset_after,
//! delay, reason) are then computed here by drl-core's own `check` on that
//! state at the script's `now`, so they are the in-memory limiter's bit for
//! bit; the script's verdict must agree with drl-core's, and a disagreement
//! is reported as an error rather than silently trusted.

use std::collections::VecDeque;

use drl_core::algo;
use drl_core::{Algorithm, Decision, Limiter, Nanos, State};
use redis::Value;

use crate::{LimitSpec, StoreError};

/// The whole script: exact-arithmetic prelude, the seven algorithms, main.
pub(crate) const SOURCE: &str = concat!(
    include_str!("../../lua/prelude.lua"),
    "\n",
    include_str!("../../lua/algorithms.lua"),
    "\n",
    include_str!("../../lua/main.lua"),
);

/// The fast path for the bucket algorithms (`lua/fast_bucket.lua`): same
/// keys, states and reply as [`SOURCE`].
pub(crate) const FAST_BUCKET: &str = include_str!("../../lua/fast_bucket.lua");

/// The fast path for the window algorithms (`lua/fast_window.lua`).
pub(crate) const FAST_WINDOW: &str = include_str!("../../lua/fast_window.lua");

const TWO_53: u128 = 1 << 53;

/// Which script decides a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// [`SOURCE`]: exact integers, everything.
    General = 0,
    /// [`FAST_BUCKET`].
    FastBucket = 1,
    /// [`FAST_WINDOW`].
    FastWindow = 2,
}

/// The scripts, indexed by [`Kind`].
pub(crate) const SCRIPTS: [&str; 3] = [SOURCE, FAST_BUCKET, FAST_WINDOW];

/// The fastest script that decides `spec` exactly (see the conditions at
/// the top of each fast script).
pub(crate) fn kind(spec: &LimitSpec) -> Kind {
    let qs = &spec.quotas;
    let small = |q: &drl_core::Quota| (q.window() as u128) < TWO_53 && (q.limit() as u128) < TWO_53;
    let seconds = |q: &drl_core::Quota| q.window() % 1_000_000_000 == 0;
    match spec.algorithm {
        Algorithm::TokenBucket
        | Algorithm::LeakyBucket
        | Algorithm::Gcra
        | Algorithm::LeakyQueue
            if qs.iter().all(|q| (q.capacity_ns() as u128) < TWO_53) =>
        {
            Kind::FastBucket
        }
        Algorithm::FixedWindow if qs.iter().all(|q| small(q) && seconds(q)) => Kind::FastWindow,
        Algorithm::SlidingWindow
            if qs.iter().all(|q| {
                small(q) && seconds(q) && 3 * q.limit() as u128 * (q.window() as u128) < TWO_53
            }) =>
        {
            Kind::FastWindow
        }
        Algorithm::SlidingLog if qs.iter().all(small) => Kind::FastWindow,
        _ => Kind::General,
    }
}

/// The Redis keys of `key` under `spec`, one per quota.
///
/// Layout: `PREFIX{LEN:NAME:KEY}:ALGO:LIMIT/WINDOW/BURST`. The braces are a
/// Redis Cluster hash tag: only the part between the first `{` and the first
/// `}` after it is hashed, and since every key of one request starts with the
/// same `PREFIX{LEN:NAME:KEY` (a key containing `}` just ends the tag earlier,
/// equally for all of them), all of a request's keys share one slot. The
/// name's length keeps `a` + `b:c` apart from `a:b` + `c`. The quota is part
/// of the key, so a changed limit starts from fresh state.
pub(crate) fn keys(prefix: &str, spec: &LimitSpec, key: &str) -> Vec<String> {
    spec.quotas
        .iter()
        .map(|q| {
            format!(
                "{prefix}{{{}:{}:{key}}}:{}:{}/{}/{}",
                spec.name.len(),
                spec.name,
                spec.algorithm,
                q.limit(),
                q.window(),
                q.burst()
            )
        })
        .collect()
}

/// The script's ARGV for one decision (see `lua/main.lua`).
pub(crate) fn args(spec: &LimitSpec, now: Option<Nanos>, cost: u64, grace_ms: u64) -> Vec<String> {
    let mut out = Vec::with_capacity(4 + 5 * spec.quotas.len());
    out.push(now.map_or_else(|| "t".to_string(), |n| n.to_string()));
    out.push(spec.algorithm.name().to_string());
    out.push(cost.to_string());
    out.push(grace_ms.to_string());
    for q in &spec.quotas {
        let capacity = if spec.algorithm.is_windowed() {
            q.limit()
        } else {
            q.burst()
        };
        out.push(q.limit().to_string());
        out.push(q.window().to_string());
        out.push(q.capacity_ns().to_string());
        if cost > capacity {
            out.push("x".to_string());
        } else {
            out.push((cost as u128 * q.emission_interval() as u128).to_string());
        }
        out.push((q.limit() as u128 * q.window() as u128).to_string());
    }
    out
}

/// ARGV of [`FAST_BUCKET`]: now, algorithm, cost, grace, then per quota
/// cap and need.
pub(crate) fn fast_args(
    spec: &LimitSpec,
    now: Option<Nanos>,
    cost: u64,
    grace_ms: u64,
) -> Vec<String> {
    let mut out = Vec::with_capacity(4 + 2 * spec.quotas.len());
    out.push(now.map_or_else(|| "t".to_string(), |n| n.to_string()));
    out.push(spec.algorithm.name().to_string());
    out.push(cost.to_string());
    out.push(grace_ms.to_string());
    for q in &spec.quotas {
        out.push(q.capacity_ns().to_string());
        if cost > q.burst() {
            out.push("x".to_string());
        } else {
            // cost <= burst, so cost * T <= burst * T < 2^53.
            out.push((cost * q.emission_interval()).to_string());
        }
    }
    out
}

/// ARGV of [`FAST_WINDOW`]: now, algorithm, cost, grace, then per quota
/// limit, window and need ("x" when cost > limit).
pub(crate) fn fast_window_args(
    spec: &LimitSpec,
    now: Option<Nanos>,
    cost: u64,
    grace_ms: u64,
) -> Vec<String> {
    let mut out = Vec::with_capacity(4 + 3 * spec.quotas.len());
    out.push(now.map_or_else(|| "t".to_string(), |n| n.to_string()));
    out.push(spec.algorithm.name().to_string());
    out.push(cost.to_string());
    out.push(grace_ms.to_string());
    for q in &spec.quotas {
        out.push(q.limit().to_string());
        out.push(q.window().to_string());
        out.push(if cost > q.limit() { "x" } else { "1" }.to_string());
    }
    out
}

fn bad(why: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("unexpected answer from the decision script: {why}"))
}

fn text(v: &Value) -> Result<&[u8], StoreError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(bad(format!("expected a string, got {other:?}"))),
    }
}

fn fields(raw: &[u8]) -> Result<Vec<u64>, StoreError> {
    std::str::from_utf8(raw)
        .map_err(bad)?
        .split_ascii_whitespace()
        .map(|f| {
            f.parse::<u64>()
                .map_err(|e| bad(format!("state field {f:?}: {e}")))
        })
        .collect()
}

/// Parses a stored state string (empty: fresh) into drl-core's state.
pub(crate) fn parse_state(limiter: &Limiter, raw: &[u8]) -> Result<State, StoreError> {
    if raw.is_empty() {
        return Ok(limiter.new_state());
    }
    let f = fields(raw)?;
    let need = |n: usize| {
        if f.len() == n {
            Ok(())
        } else {
            Err(bad(format!(
                "{} state with {} fields",
                limiter.algorithm(),
                f.len()
            )))
        }
    };
    Ok(match limiter.algorithm() {
        Algorithm::TokenBucket => {
            need(2)?;
            State::TokenBucket(algo::token_bucket::State {
                last: f[0],
                credit: f[1],
            })
        }
        Algorithm::LeakyBucket => {
            need(2)?;
            State::LeakyBucket(algo::leaky_bucket::State {
                last: f[0],
                level: f[1],
            })
        }
        Algorithm::Gcra => {
            need(2)?;
            State::Gcra(algo::gcra::State {
                last: f[0],
                ahead: f[1],
            })
        }
        Algorithm::LeakyQueue => {
            need(2)?;
            State::LeakyQueue(algo::gcra::State {
                last: f[0],
                ahead: f[1],
            })
        }
        Algorithm::FixedWindow => {
            need(3)?;
            State::FixedWindow(algo::fixed_window::State {
                last: f[0],
                index: f[1],
                count: f[2],
            })
        }
        Algorithm::SlidingLog => {
            if f.is_empty() || f.len() % 2 == 0 {
                return Err(bad(format!("sliding-log state with {} fields", f.len())));
            }
            let log: VecDeque<(Nanos, u64)> = f[1..].chunks(2).map(|c| (c[0], c[1])).collect();
            State::SlidingLog(algo::sliding_log::State { last: f[0], log })
        }
        Algorithm::SlidingWindow => {
            need(4)?;
            State::SlidingWindow(algo::sliding_window::State {
                last: f[0],
                index: f[1],
                prev: f[2],
                curr: f[3],
            })
        }
    })
}

/// What one script call answered.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The script admitted (and, for cost > 0, committed) the request.
    pub admitted: bool,
    /// The `now` the script decided at (the caller's or Redis `TIME`).
    pub now: Nanos,
    /// The pre-decision state of every quota.
    pub states: Vec<State>,
}

/// Decodes the script's reply.
pub(crate) fn decode(spec: &LimitSpec, v: &Value) -> Result<Answer, StoreError> {
    let Value::Array(items) = v else {
        return Err(bad(format!("expected an array, got {v:?}")));
    };
    if items.len() != 2 + spec.quotas.len() {
        return Err(bad(format!(
            "{} items for {} quotas",
            items.len(),
            spec.quotas.len()
        )));
    }
    let admitted = match &items[0] {
        Value::Int(1) => true,
        Value::Int(0) => false,
        other => return Err(bad(format!("verdict {other:?}"))),
    };
    let now = std::str::from_utf8(text(&items[1])?)
        .map_err(bad)?
        .parse::<u64>()
        .map_err(|e| bad(format!("now: {e}")))?;
    let limiter = spec.limiter();
    let states = limiter
        .parts()
        .iter()
        .zip(&items[2..])
        .map(|(l, v)| parse_state(l, text(v)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Answer {
        admitted,
        now,
        states,
    })
}

/// The decision drl-core makes on the script's pre-decision states; an error
/// if the script's verdict differs (it never should: both implement
/// `SEMANTICS.md`, and the differential tests check it).
pub(crate) fn decision(
    spec: &LimitSpec,
    answer: Answer,
    cost: u64,
) -> Result<Decision, StoreError> {
    let mut states = answer.states;
    let d = spec.limiter().decide(&mut states, answer.now, cost);
    if d.allowed != answer.admitted {
        metrics::counter!("drl_store_redis_verdict_mismatch_total").increment(1);
        return Err(StoreError::Backend(format!(
            "the Redis script {} but drl-core {} (limit {:?}, now {}, cost {cost})",
            if answer.admitted {
                "admitted"
            } else {
                "denied"
            },
            if d.allowed { "admits" } else { "denies" },
            spec.name,
            answer.now
        )));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::Quota;

    #[test]
    fn keys_share_a_hash_tag_and_differ_per_quota() {
        let spec = LimitSpec::new(
            "api",
            Algorithm::Gcra,
            vec![
                Quota::new(10, 1_000).unwrap(),
                Quota::new(100, 60_000).unwrap(),
            ],
        );
        let k = keys("drl:", &spec, "tenant}x{y");
        assert_eq!(k.len(), 2);
        assert_ne!(k[0], k[1]);
        let tag = |s: &str| {
            let open = s.find('{').unwrap();
            let close = s[open + 1..].find('}').unwrap() + open + 1;
            s[open + 1..close].to_string()
        };
        assert_eq!(tag(&k[0]), tag(&k[1]));
        assert_eq!(tag(&k[0]), "3:api:tenant");
    }

    #[test]
    fn args_mark_impossible_costs() {
        let spec = LimitSpec::new(
            "a",
            Algorithm::TokenBucket,
            vec![Quota::new(3, 10).unwrap()],
        );
        let a = args(&spec, Some(5), 4, 0);
        assert_eq!(a[..4], ["5", "token-bucket", "4", "0"]);
        assert_eq!(a[4..], ["3", "10", "12", "x", "30"]);
        let a = args(&spec, None, 2, 7);
        assert_eq!(a[0], "t");
        assert_eq!(a[7], "8");
    }
}
