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

use drl_core::{Algorithm, Decision, Limiter, Mark, MultiLimiter, Nanos, Quota, State};
use drl_redis_wire::decide_spec::Op;
use redis::{Cmd, Value};

use crate::{LimitSpec, StoreError};

/// The whole script: exact-arithmetic prelude, the staged writes, the seven
/// algorithms, main.
pub(crate) const SOURCE: &str = concat!(
    include_str!("../../lua/prelude.lua"),
    "\n",
    include_str!("../../lua/writes.lua"),
    "\n",
    include_str!("../../lua/algorithms.lua"),
    "\n",
    include_str!("../../lua/main.lua"),
);

/// The fast path for the bucket algorithms (`lua/fast_bucket.lua`): same
/// keys, states and reply as [`SOURCE`].
pub(crate) const FAST_BUCKET: &str = concat!(
    include_str!("../../lua/writes.lua"),
    "\n",
    include_str!("../../lua/fast_bucket.lua")
);

/// The fast path for the window algorithms (`lua/fast_window.lua`).
pub(crate) const FAST_WINDOW: &str = concat!(
    include_str!("../../lua/writes.lua"),
    "\n",
    include_str!("../../lua/fast_window.lua")
);

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

/// Writes the Redis key of `key` under `spec`'s quota `q` into `buf`.
///
/// Layout: `PREFIX{LEN:NAME:KEY}:ALGO:LIMIT/WINDOW/BURST`. The braces are a
/// Redis Cluster hash tag: only the part between the first `{` and the first
/// `}` after it is hashed, and since every key of one request starts with the
/// same `PREFIX{LEN:NAME:KEY` (a key containing `}` just ends the tag earlier,
/// equally for all of them), all of a request's keys share one slot. The
/// name's length keeps `a` + `b:c` apart from `a:b` + `c`. The quota is part
/// of the key, so a changed limit starts from fresh state.
fn write_key(buf: &mut Vec<u8>, prefix: &str, spec: &LimitSpec, key: &str, q: &Quota) {
    let mut n = itoa::Buffer::new();
    buf.extend_from_slice(prefix.as_bytes());
    buf.push(b'{');
    buf.extend_from_slice(n.format(spec.name.len()).as_bytes());
    buf.push(b':');
    buf.extend_from_slice(spec.name.as_bytes());
    buf.push(b':');
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"}:");
    buf.extend_from_slice(spec.algorithm.name().as_bytes());
    buf.push(b':');
    buf.extend_from_slice(n.format(q.limit()).as_bytes());
    buf.push(b'/');
    buf.extend_from_slice(n.format(q.window()).as_bytes());
    buf.push(b'/');
    buf.extend_from_slice(n.format(q.burst()).as_bytes());
}

/// The Redis keys of `key` under `spec`, one per quota (see [`write_key`]).
pub(crate) fn keys(prefix: &str, spec: &LimitSpec, key: &str) -> Vec<String> {
    let mut buf = Vec::new();
    spec.quotas
        .iter()
        .map(|q| {
            buf.clear();
            write_key(&mut buf, prefix, spec, key, q);
            String::from_utf8_lossy(&buf).into_owned()
        })
        .collect()
}

/// Appends the Redis keys of `key` under `spec` (one per quota) to `cmd`,
/// using `buf` as scratch space.
pub(crate) fn push_keys(
    cmd: &mut Cmd,
    buf: &mut Vec<u8>,
    prefix: &str,
    spec: &LimitSpec,
    key: &str,
) {
    for q in &spec.quotas {
        buf.clear();
        write_key(buf, prefix, spec, key, q);
        cmd.arg(&buf[..]);
    }
}

/// Appends one decision's ARGV record for the script of `kind` to `cmd`:
/// now (`t`: Redis `TIME`), algorithm (`+algorithm` for a charge,
/// `-algorithm` for a refund, which only [`Kind::General`] decides), cost,
/// number of quotas, then per quota what that script needs (see the top of
/// each `lua/*.lua`; a refund's `marks`, one per quota, take the place of
/// `lw`).
pub(crate) fn push_args(
    cmd: &mut Cmd,
    kind: Kind,
    spec: &LimitSpec,
    now: Option<Nanos>,
    op: Op,
    cost: u64,
    marks: &[Mark],
) {
    match now {
        Some(n) => cmd.arg(n),
        None => cmd.arg(b"t".as_slice()),
    };
    match op {
        Op::Take => cmd.arg(spec.algorithm.name()),
        Op::Charge | Op::Refund => {
            assert_eq!(
                kind,
                Kind::General,
                "only the general script charges and refunds"
            );
            let sign = if op == Op::Charge { '+' } else { '-' };
            cmd.arg(format!("{sign}{}", spec.algorithm.name()))
        }
    };
    cmd.arg(cost).arg(spec.quotas.len());
    let x = b"x".as_slice();
    for (i, q) in spec.quotas.iter().enumerate() {
        match kind {
            // cap (burst*T), need (cost*T; cost <= burst, so < 2^53).
            Kind::FastBucket => {
                cmd.arg(q.capacity_ns());
                if cost > q.burst() {
                    cmd.arg(x);
                } else {
                    cmd.arg(cost * q.emission_interval());
                }
            }
            // limit, window, need.
            Kind::FastWindow => {
                cmd.arg(q.limit()).arg(q.window());
                cmd.arg(if cost > q.limit() { x } else { b"1".as_slice() });
            }
            // limit, window, cap, need, limit*window.
            Kind::General => {
                let capacity = if spec.algorithm.is_windowed() {
                    q.limit()
                } else {
                    q.burst()
                };
                cmd.arg(q.limit()).arg(q.window()).arg(q.capacity_ns());
                if op != Op::Take {
                    // A charge consumes any cost, a refund gives back up
                    // to any: its need in full.
                    cmd.arg(cost as u128 * q.emission_interval() as u128);
                } else if cost > capacity {
                    cmd.arg(x);
                } else {
                    cmd.arg(cost as u128 * q.emission_interval() as u128);
                }
                if op == Op::Refund {
                    cmd.arg(marks[i].0);
                } else {
                    cmd.arg(q.limit() as u128 * q.window() as u128);
                }
            }
        }
    }
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

/// Parses a stored state string (empty: fresh) into drl-core's state (the
/// text form is `drl_redis_wire::state_text`, shared with the native module).
pub(crate) fn parse_state(limiter: &Limiter, raw: &[u8]) -> Result<State, StoreError> {
    drl_redis_wire::state_text::parse(limiter, raw).map_err(bad)
}

/// A script's verdict on one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Admitted (and, for cost > 0, committed); for a charge: charged.
    Admitted,
    /// Denied: nothing written.
    Denied,
    /// Not decided (a fast script met a debt state): nothing written; the
    /// general script must decide it.
    Undecided,
}

/// What one script call answered for one decision.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The script's verdict.
    pub verdict: Verdict,
    /// The `now` the script decided at (the caller's or Redis `TIME`).
    pub now: Nanos,
    /// The pre-decision state of every quota.
    pub states: Vec<State>,
}

/// How many reply items one decision of `spec` takes: verdict, now, one
/// state per quota.
pub(crate) fn reply_len(spec: &LimitSpec) -> usize {
    2 + spec.quotas.len()
}

/// Decodes one decision's part of the script's reply (`items` is exactly
/// [`reply_len`] long).
pub(crate) fn decode(limiter: &MultiLimiter, items: &[Value]) -> Result<Answer, StoreError> {
    if items.len() != 2 + limiter.parts().len() {
        return Err(bad(format!(
            "{} items for {} quotas",
            items.len(),
            limiter.parts().len()
        )));
    }
    let verdict = match &items[0] {
        Value::Int(1) => Verdict::Admitted,
        Value::Int(0) => Verdict::Denied,
        Value::Int(2) => Verdict::Undecided,
        other => return Err(bad(format!("verdict {other:?}"))),
    };
    let raw_now = text(&items[1])?;
    let now = drl_redis_wire::state_text::parse_u64(raw_now)
        .ok_or_else(|| bad(format!("now {:?}", String::from_utf8_lossy(raw_now))))?;
    let states = limiter
        .parts()
        .iter()
        .zip(&items[2..])
        .map(|(l, v)| parse_state(l, text(v)?))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Answer {
        verdict,
        now,
        states,
    })
}

/// What the caller asks of one decision sent to a script (or the module):
/// each maps to a wire [`Op`] ([`Ask::op`]) and is answered from the
/// returned pre-decision states by drl-core ([`answer`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask<'a> {
    /// A take.
    Take,
    /// A check: sent as a query (cost 0, which writes nothing); drl-core
    /// decides the real cost on the returned states.
    Check,
    /// A reserve: sent as a take; drl-core computes the marks.
    Reserve,
    /// A charge.
    Charge,
    /// A refund with these marks, one per quota.
    Refund(&'a [Mark]),
}

impl<'a> Ask<'a> {
    /// The operation sent.
    pub(crate) fn op(self) -> Op {
        match self {
            Ask::Take | Ask::Check | Ask::Reserve => Op::Take,
            Ask::Charge => Op::Charge,
            Ask::Refund(_) => Op::Refund,
        }
    }

    /// The cost sent for a call of `cost`.
    pub(crate) fn wire_cost(self, cost: u64) -> u64 {
        match self {
            Ask::Check => 0,
            _ => cost,
        }
    }

    /// The marks sent (a refund's only).
    pub(crate) fn marks(self) -> &'a [Mark] {
        match self {
            Ask::Refund(m) => m,
            _ => &[],
        }
    }
}

/// A decision and, for an admitted reserve, its marks.
pub(crate) type Answered = (Decision, Option<Box<[Mark]>>);

/// The answer to `ask` of `cost` from one decision's part of the reply:
/// drl-core decides (checks, reserves, charges, refunds) on the script's
/// pre-decision states at the script's `now`, and the script's verdict
/// must agree. `None`: a fast script left it undecided (see
/// [`Verdict::Undecided`]). The marks are a reserve's, when admitted.
pub(crate) fn answer(
    spec: &LimitSpec,
    items: &[Value],
    ask: Ask<'_>,
    cost: u64,
) -> Result<Option<Answered>, StoreError> {
    let limiter = spec.limiter();
    let answer = decode(&limiter, items)?;
    let mut states = answer.states;
    let now = answer.now;
    let admitted = match (ask, answer.verdict) {
        (Ask::Charge, Verdict::Admitted) => {
            return Ok(Some((limiter.charge(&mut states, now, cost), None)));
        }
        (Ask::Refund(marks), Verdict::Admitted) => {
            return Ok(Some((limiter.refund(&mut states, now, marks, cost), None)));
        }
        (Ask::Charge | Ask::Refund(_), v) => {
            return Err(bad(format!("a charge or refund answered {v:?}")));
        }
        (_, Verdict::Undecided) => return Ok(None),
        (_, v) => v == Verdict::Admitted,
    };
    let (sent, d, marks) = match ask {
        Ask::Check => {
            let sent = limiter.check(&states, now, 0);
            (sent, limiter.check(&states, now, cost), None)
        }
        Ask::Reserve => {
            let (d, marks) = limiter.reserve(&mut states, now, cost);
            (d, d, marks)
        }
        _ => {
            let d = limiter.decide(&mut states, now, cost);
            (d, d, None)
        }
    };
    if sent.allowed != admitted {
        metrics::counter!("drl_store_redis_verdict_mismatch_total").increment(1);
        return Err(StoreError::Backend(format!(
            "the Redis script {} but drl-core {} (limit {:?}, now {}, cost {})",
            if admitted { "admitted" } else { "denied" },
            if sent.allowed { "admits" } else { "denies" },
            spec.name,
            now,
            ask.wire_cost(cost)
        )));
    }
    Ok(Some((d, marks)))
}

/// The decision for one decision's part of the reply: drl-core decides on
/// the script's pre-decision states at the script's `now`; an error if the
/// script's verdict differs (it never should: both implement
/// `docs/semantics.md`, and the differential tests check it). `None`: the
/// script left it undecided (see [`Verdict::Undecided`]), nothing was
/// written, and the general script must decide it.
///
/// For a charge, drl-core charges the pre-decision states and answers the
/// query right after (`MultiLimiter::charge`); the script must have
/// charged (verdict 1).
pub(crate) fn finish(
    spec: &LimitSpec,
    items: &[Value],
    op: Op,
    cost: u64,
) -> Result<Option<Decision>, StoreError> {
    let ask = match op {
        Op::Take => Ask::Take,
        Op::Charge => Ask::Charge,
        Op::Refund => return Err(bad("a refund needs its marks")),
    };
    Ok(answer(spec, items, ask, cost)?.map(|(d, _)| d))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let args = |now, op, cost| {
            let mut cmd = Cmd::new();
            push_args(&mut cmd, Kind::General, &spec, now, op, cost, &[]);
            cmd.args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8(b.to_vec()).unwrap(),
                    _ => unreachable!("no cursor arguments"),
                })
                .collect::<Vec<_>>()
        };
        let a = args(Some(5), Op::Take, 4);
        assert_eq!(a[..4], ["5", "token-bucket", "4", "1"]);
        assert_eq!(a[4..], ["3", "10", "12", "x", "30"]);
        // A charge has no impossible cost: its need in full.
        let a = args(Some(5), Op::Charge, 4);
        assert_eq!(a[..4], ["5", "+token-bucket", "4", "1"]);
        assert_eq!(a[4..], ["3", "10", "12", "16", "30"]);
        let a = args(None, Op::Take, 2);
        assert_eq!(a[0], "t");
        assert_eq!(a[7], "8");
    }
}
