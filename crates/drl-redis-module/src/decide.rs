//! The whole of `DRL.DECIDE` without Redis: given the keys, their stored
//! values and a parsed [`Spec`], the reply and the writes. The FFI layer
//! (`command.rs`) only reads the keys, calls [`run`] and applies the
//! result, so everything here is testable without a server.

use std::collections::HashMap;

use drl_core::state_text::{self, push_u64};
use drl_core::{Limiter, Nanos};

use crate::spec::{Clock, Spec};

/// Ceiling for a key's expiry in ms (about 35 700 years): far beyond any
/// time-until-fresh (u64 ns is 584 years) yet small enough that Redis never
/// refuses `PX` for overflow, however large the grace.
pub const MAX_TTL_MS: u64 = 1 << 50;

/// One item of the reply array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An integer (the verdict: 1 admitted, 0 denied).
    Int(i64),
    /// A bulk string (`now` in decimal, or a state text; empty: fresh).
    Bulk(Vec<u8>),
}

/// One key to write: `SET key value PX ttl_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The key's position among the command's keys (its first occurrence).
    pub key: usize,
    /// The new state text.
    pub value: Vec<u8>,
    /// The expiry in ms (>= 1).
    pub ttl_ms: u64,
}

/// The result of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The flat reply: per decision, verdict, now, each quota's state
    /// before the decision.
    pub reply: Vec<Reply>,
    /// The keys to write, each once with its last state, in the order they
    /// were first written.
    pub writes: Vec<Write>,
}

/// For each key position, the position of the first key with the same
/// name (a key named twice shares one state).
pub fn first_occurrences(keys: &[&[u8]]) -> Vec<usize> {
    if keys.len() <= 16 {
        return (0..keys.len())
            .map(|i| (0..=i).find(|&j| keys[j] == keys[i]).expect("i itself"))
            .collect();
    }
    let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(keys.len());
    (0..keys.len())
        .map(|i| *seen.entry(keys[i]).or_insert(i))
        .collect()
}

/// The expiry of a key whose state is fresh again in `fresh_in` ns:
/// `ceil(fresh_in / 1 ms) + grace`, at least 1, at most [`MAX_TTL_MS`].
pub fn ttl_ms(fresh_in: Nanos, grace_ms: u64) -> u64 {
    fresh_in
        .div_ceil(1_000_000)
        .saturating_add(grace_ms)
        .clamp(1, MAX_TTL_MS)
}

/// Decides `spec`. `keys` are the command's keys, `first` is
/// [`first_occurrences`] of them, `values[i]` the stored value of key `i`
/// (empty when missing; only first occurrences are read) and `server_now`
/// reads the server clock (called at most once). Errors (the reason for
/// `ERR drl: ...`) leave nothing to write.
pub fn run(
    spec: &Spec,
    keys: &[&[u8]],
    first: &[usize],
    mut values: Vec<Vec<u8>>,
    server_now: impl FnOnce() -> Nanos,
) -> Result<Outcome, String> {
    let mut server_now = Some(server_now);
    let mut tnow: Option<Nanos> = None;
    let mut reply = Vec::with_capacity(spec.decisions.len() * 3);
    let mut ttl: Vec<Option<u64>> = vec![None; keys.len()];
    let mut order = Vec::new();
    let mut states = Vec::new();
    let mut decisions = Vec::new();
    let mut ki = 0;
    for d in &spec.decisions {
        let now = match d.clock {
            Clock::Caller(now) => now,
            Clock::Server => *tnow.get_or_insert_with(|| (server_now.take().expect("once"))()),
        };
        let nq = d.quotas.len();
        reply.push(Reply::Int(0));
        let verdict = reply.len() - 1;
        let mut text = Vec::with_capacity(20);
        push_u64(&mut text, now);
        reply.push(Reply::Bulk(text));
        states.clear();
        decisions.clear();
        let mut admitted = true;
        for (i, q) in d.quotas.iter().enumerate() {
            let slot = first[ki + i];
            let raw = &values[slot];
            let limiter = Limiter::new(d.algorithm, *q);
            let state = state_text::parse(&limiter, raw).map_err(|e| {
                format!(
                    "corrupt state at key {:?}: {e}",
                    String::from_utf8_lossy(keys[slot])
                )
            })?;
            reply.push(Reply::Bulk(raw.clone()));
            let decision = limiter.check(&state, now, d.cost);
            admitted &= decision.allowed;
            states.push(state);
            decisions.push(decision);
        }
        if admitted {
            reply[verdict] = Reply::Int(1);
            if d.cost > 0 {
                for (i, q) in d.quotas.iter().enumerate() {
                    let slot = first[ki + i];
                    let limiter = Limiter::new(d.algorithm, *q);
                    limiter.commit(&mut states[i], now, d.cost);
                    let v = &mut values[slot];
                    v.clear();
                    state_text::format(&states[i], v);
                    if ttl[slot].is_none() {
                        order.push(slot);
                    }
                    ttl[slot] = Some(ttl_ms(decisions[i].reset_after, spec.grace_ms));
                }
            }
        }
        ki += nq;
    }
    let writes = order
        .into_iter()
        .map(|slot| Write {
            key: slot,
            value: std::mem::take(&mut values[slot]),
            ttl_ms: ttl[slot].expect("written"),
        })
        .collect();
    Ok(Outcome { reply, writes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Decision;
    use drl_core::{Algorithm, Quota};

    fn spec(decisions: Vec<Decision>) -> Spec {
        Spec {
            grace_ms: 5,
            decisions,
        }
    }

    #[test]
    fn ttl_rounds_up_and_clamps() {
        assert_eq!(ttl_ms(0, 0), 1);
        assert_eq!(ttl_ms(1, 0), 1);
        assert_eq!(ttl_ms(1_000_000, 0), 1);
        assert_eq!(ttl_ms(1_000_001, 2), 4);
        assert_eq!(ttl_ms(u64::MAX, u64::MAX), MAX_TTL_MS);
    }

    #[test]
    fn repeated_keys_share_state_and_write_once() {
        let d = Decision {
            clock: Clock::Caller(1_000_000),
            algorithm: Algorithm::FixedWindow,
            cost: 1,
            quotas: vec![Quota::new(2, 1_000_000_000).unwrap()],
        };
        let s = spec(vec![d.clone(), d.clone(), d]);
        let keys: Vec<&[u8]> = vec![b"k", b"k", b"k"];
        let first = first_occurrences(&keys);
        assert_eq!(first, [0, 0, 0]);
        let out = run(&s, &keys, &first, vec![Vec::new(); 3], || unreachable!()).unwrap();
        let b = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        assert_eq!(
            out.reply,
            [
                Reply::Int(1),
                b("1000000"),
                b(""),
                Reply::Int(1),
                b("1000000"),
                b("1000000 0 1"),
                Reply::Int(0),
                b("1000000"),
                b("1000000 0 2"),
            ]
        );
        assert_eq!(
            out.writes,
            [Write {
                key: 0,
                value: b"1000000 0 2".to_vec(),
                ttl_ms: 999 + 5
            }]
        );
    }

    #[test]
    fn corrupt_state_is_an_error() {
        let d = Decision {
            clock: Clock::Server,
            algorithm: Algorithm::Gcra,
            cost: 1,
            quotas: vec![Quota::new(2, 1_000).unwrap()],
        };
        let keys: Vec<&[u8]> = vec![b"bad"];
        let err = run(&spec(vec![d]), &keys, &[0], vec![b"1 x".to_vec()], || 7).unwrap_err();
        assert_eq!(
            err,
            "corrupt state at key \"bad\": state field \"x\" is not a u64"
        );
    }
}
