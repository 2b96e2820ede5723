//! The whole of `DRL.DECIDE` without Redis: given the keys, their stored
//! values and a parsed spec, the reply and the writes. The FFI layer
//! (`command.rs`) only reads the keys into a [`Call`], runs
//! [`Call::decide`] and applies the result, so everything here is testable
//! without a server. A [`Call`] keeps its buffers between calls, so a
//! steady stream of calls allocates nothing per decision.

use std::collections::HashMap;

use drl_core::{Limiter, Mark, Nanos, State};
use drl_redis_wire::state_text::{self, push_u64};

use crate::spec::{Clock, Op, Parsed};

/// Ceiling for a key's expiry in ms (about 35 700 years): far beyond any
/// time-until-fresh (u64 ns is 584 years) yet small enough that Redis never
/// refuses `PX` for overflow, however large the grace.
pub const MAX_TTL_MS: u64 = 1 << 50;

/// One item of the reply array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// An integer (the verdict: 1 admitted, 0 denied).
    Int(i64),
    /// A bulk string (`now` in decimal, or a state text; empty: fresh).
    Bulk(&'a [u8]),
}

#[derive(Debug, Clone, Copy)]
enum Item {
    Int(i64),
    Bulk(usize, usize),
}

/// The buffers of one `DRL.DECIDE` call, reusable for the next.
#[derive(Debug, Default)]
pub struct Call {
    /// The parsed spec (fill with [`crate::spec::parse_into`]).
    pub spec: Parsed,
    /// For each key position, the position of the first key with the same
    /// name (a key named twice shares one state).
    pub first: Vec<usize>,
    /// The stored value of each key (only first occurrences are read;
    /// empty: missing). After [`Call::decide`], written keys hold their new
    /// state.
    pub values: Vec<Vec<u8>>,
    n: usize,
    ttl: Vec<u64>,
    order: Vec<usize>,
    items: Vec<Item>,
    bytes: Vec<u8>,
    states: Vec<State>,
    resets: Vec<Nanos>,
    changed: Vec<bool>,
}

/// The expiry of a key whose state is fresh again in `fresh_in` ns:
/// `ceil(fresh_in / 1 ms) + grace`, at least 1, at most [`MAX_TTL_MS`].
pub fn ttl_ms(fresh_in: Nanos, grace_ms: u64) -> u64 {
    fresh_in
        .div_ceil(1_000_000)
        .saturating_add(grace_ms)
        .clamp(1, MAX_TTL_MS)
}

impl Call {
    /// Starts a call on `keys`: computes [`Call::first`] and empties
    /// [`Call::values`] (keeping their capacity).
    pub fn begin(&mut self, keys: &[&[u8]]) {
        let n = keys.len();
        self.n = n;
        self.first.clear();
        if n <= 16 {
            for i in 0..n {
                let f = (0..=i).find(|&j| keys[j] == keys[i]).expect("i itself");
                self.first.push(f);
            }
        } else {
            let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(n);
            self.first
                .extend((0..n).map(|i| *seen.entry(keys[i]).or_insert(i)));
        }
        if self.values.len() < n {
            self.values.resize_with(n, Vec::new);
        }
        for v in &mut self.values[..n] {
            v.clear();
        }
    }

    fn bulk(&mut self, b: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(b);
        self.items.push(Item::Bulk(start, self.bytes.len()));
    }

    /// Decides [`Call::spec`] on `keys` (the same as given to
    /// [`Call::begin`], with [`Call::values`] filled); `server_now` reads
    /// the server clock (called at most once). An error (the reason for
    /// `ERR drl: ...`) leaves nothing to write.
    pub fn decide(
        &mut self,
        keys: &[&[u8]],
        server_now: impl FnOnce() -> Nanos,
    ) -> Result<(), String> {
        assert_eq!(keys.len(), self.n, "begin() with the same keys");
        let mut server_now = Some(server_now);
        let mut tnow: Option<Nanos> = None;
        self.items.clear();
        self.bytes.clear();
        self.order.clear();
        self.ttl.clear();
        self.ttl.resize(self.n, 0);
        let grace_ms = self.spec.grace_ms;
        let mut ki = 0;
        let mut qi = 0;
        for h in 0..self.spec.heads.len() {
            let head = self.spec.heads[h];
            let now = match head.clock {
                Clock::Caller(now) => now,
                Clock::Server => *tnow.get_or_insert_with(|| (server_now.take().expect("once"))()),
            };
            let verdict = self.items.len();
            self.items.push(Item::Int(0));
            let start = self.bytes.len();
            push_u64(&mut self.bytes, now);
            self.items.push(Item::Bulk(start, self.bytes.len()));
            self.states.clear();
            self.resets.clear();
            let mut admitted = true;
            self.changed.clear();
            self.changed.resize(head.nq, true);
            for i in 0..head.nq {
                let slot = self.first[ki + i];
                let limiter = Limiter::new(head.algorithm, self.spec.quotas[qi + i]);
                let state = state_text::parse(&limiter, &self.values[slot]).map_err(|e| {
                    format!(
                        "corrupt state at key {:?}: {e}",
                        String::from_utf8_lossy(keys[slot])
                    )
                })?;
                let raw = std::mem::take(&mut self.values[slot]);
                self.bulk(&raw);
                self.values[slot] = raw;
                if head.op == Op::Charge {
                    // A charge consumes whatever the state holds; the
                    // query right after gives the time until fresh.
                    let mut state = state;
                    let after = limiter.charge(&mut state, now, head.cost);
                    self.states.push(state);
                    self.resets.push(after.reset_after);
                    continue;
                }
                if head.op == Op::Refund {
                    // A refund gives back what of the reservation still
                    // holds the state back; only a state it changed is
                    // written (as drl-core writes one).
                    let mut after = state.clone();
                    let mark = Mark(self.spec.marks[qi + i]);
                    let q = limiter.refund(&mut after, now, mark, head.cost);
                    self.changed[i] = after != state;
                    self.states.push(after);
                    self.resets.push(q.reset_after);
                    continue;
                }
                let decision = limiter.check(&state, now, head.cost);
                admitted &= decision.allowed;
                self.states.push(state);
                self.resets.push(decision.reset_after);
            }
            if admitted {
                self.items[verdict] = Item::Int(1);
                if head.cost > 0 {
                    for i in 0..head.nq {
                        if !self.changed[i] {
                            continue;
                        }
                        let slot = self.first[ki + i];
                        if head.op == Op::Take {
                            let limiter = Limiter::new(head.algorithm, self.spec.quotas[qi + i]);
                            limiter.commit(&mut self.states[i], now, head.cost);
                        }
                        let v = &mut self.values[slot];
                        v.clear();
                        state_text::format(&self.states[i], v);
                        if self.ttl[slot] == 0 {
                            self.order.push(slot);
                        }
                        self.ttl[slot] = ttl_ms(self.resets[i], grace_ms);
                    }
                }
            }
            ki += head.nq;
            qi += head.nq;
        }
        Ok(())
    }

    /// The number of reply items.
    pub fn reply_len(&self) -> usize {
        self.items.len()
    }

    /// The flat reply: per decision, verdict, now, each quota's state
    /// before the decision.
    pub fn reply(&self) -> impl Iterator<Item = Reply<'_>> {
        self.items.iter().map(|i| match *i {
            Item::Int(n) => Reply::Int(n),
            Item::Bulk(a, b) => Reply::Bulk(&self.bytes[a..b]),
        })
    }

    /// The keys to write, each once with its last state: (key position,
    /// state text, expiry in ms >= 1), in the order first written.
    pub fn writes(&self) -> impl Iterator<Item = (usize, &[u8], u64)> {
        self.order
            .iter()
            .map(|&k| (k, &self.values[k][..], self.ttl[k]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Decision, encode, parse_into};
    use drl_core::{Algorithm, Quota};

    fn call(
        keys: &[&[u8]],
        values: &[&[u8]],
        decisions: &[Decision],
    ) -> (Call, Result<(), String>) {
        let mut c = Call::default();
        parse_into(&mut c.spec, &encode(5, decisions), keys.len()).unwrap();
        c.begin(keys);
        for (v, x) in c.values.iter_mut().zip(values) {
            v.extend_from_slice(x);
        }
        let r = c.decide(keys, || 7);
        (c, r)
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
            op: Op::Take,
            algorithm: Algorithm::FixedWindow,
            cost: 1,
            quotas: vec![Quota::new(2, 1_000_000_000).unwrap()],
            marks: vec![],
        };
        let keys: Vec<&[u8]> = vec![b"k", b"k", b"k"];
        let (c, r) = call(&keys, &[b"", b"", b""], &[d.clone(), d.clone(), d]);
        r.unwrap();
        assert_eq!(c.first, [0, 0, 0]);
        let b = |s: &'static str| Reply::Bulk(s.as_bytes());
        assert_eq!(
            c.reply().collect::<Vec<_>>(),
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
            c.writes().collect::<Vec<_>>(),
            [(0, &b"1000000 0 2"[..], 999 + 5)]
        );
    }

    #[test]
    fn buffers_are_reused_without_leaking_state() {
        let d = |cost| Decision {
            clock: Clock::Server,
            op: Op::Take,
            algorithm: Algorithm::SlidingLog,
            cost,
            quotas: vec![Quota::new(5, 1_000).unwrap()],
            marks: vec![],
        };
        let keys: Vec<&[u8]> = vec![b"a", b"b"];
        let (mut c, r) = call(&keys, &[b"", b"3 3 1"], &[d(2), d(0)]);
        r.unwrap();
        assert_eq!(c.writes().collect::<Vec<_>>(), [(0, &b"7 7 2"[..], 6)]);
        // A second call on the same buffers.
        let keys: Vec<&[u8]> = vec![b"c"];
        parse_into(&mut c.spec, &encode(0, &[d(0)]), 1).unwrap();
        c.begin(&keys);
        c.decide(&keys, || 9).unwrap();
        assert_eq!(
            c.reply().collect::<Vec<_>>(),
            [Reply::Int(1), Reply::Bulk(b"9"), Reply::Bulk(b"")]
        );
        assert_eq!(c.writes().count(), 0);
    }

    #[test]
    fn corrupt_state_is_an_error() {
        let d = Decision {
            clock: Clock::Server,
            op: Op::Take,
            algorithm: Algorithm::Gcra,
            cost: 1,
            quotas: vec![Quota::new(2, 1_000).unwrap()],
            marks: vec![],
        };
        let (_, r) = call(&[b"bad"], &[b"1 x"], &[d]);
        assert_eq!(
            r.unwrap_err(),
            "corrupt state at key \"bad\": state field \"x\" is not a u64"
        );
    }
    fn bucket(op: Op, now: u64, cost: u64) -> Decision {
        Decision {
            clock: Clock::Caller(now),
            op,
            algorithm: Algorithm::TokenBucket,
            cost,
            // T = 1 s, capacity 2 s.
            quotas: vec![Quota::new(2, 2_000_000_000).unwrap()],
            marks: vec![],
        }
    }

    /// A token bucket's stored credit above its capacity is a debt
    /// (`credit - 2^64`), read as drl-core reads it: denied, queries
    /// included, until time has repaid it; never a full bucket.
    #[test]
    fn debt_states_decode_as_debt() {
        const S: u64 = 1_000_000_000;
        // One token of debt at 1000: level 3 s, capacity 2 s.
        let debt = format!("1000 {}", 0u64.wrapping_sub(S));
        let limiter = Limiter::new(Algorithm::TokenBucket, Quota::new(2, 2 * S).unwrap());
        let state = state_text::parse(&limiter, debt.as_bytes()).unwrap();
        for (at, cost, admitted) in [
            (1000, 0, false),
            (1000 + S - 1, 0, false),
            (1000 + S, 0, true),
            (1000 + S, 1, false),
            (1000 + 2 * S - 1, 1, false),
            (1000 + 2 * S, 1, true),
            (1000 + 3 * S, 2, true),
        ] {
            let (c, r) = call(&[b"k"], &[debt.as_bytes()], &[bucket(Op::Take, at, cost)]);
            r.unwrap();
            let verdict = c.reply().next().unwrap();
            assert_eq!(verdict, Reply::Int(admitted as i64), "at {at} cost {cost}");
            assert_eq!(limiter.check(&state, at, cost).allowed, admitted);
            let writes: Vec<_> = c.writes().map(|(_, v, _)| v.to_vec()).collect();
            if admitted && cost > 0 {
                let mut want = state.clone();
                limiter.decide(&mut want, at, cost);
                assert_eq!(writes, [state_text::to_text(&want)]);
            } else {
                assert!(writes.is_empty(), "a denial or a query writes nothing");
            }
        }
    }

    /// A charge consumes past the capacity and stores the debt as drl-core
    /// does; its verdict is 1, its expiry the time until fresh.
    #[test]
    fn charges_write_debt_states() {
        const S: u64 = 1_000_000_000;
        let (c, r) = call(&[b"k"], &[b""], &[bucket(Op::Charge, 7, 3)]);
        r.unwrap();
        assert_eq!(
            c.reply().collect::<Vec<_>>(),
            [Reply::Int(1), Reply::Bulk(b"7"), Reply::Bulk(b"")]
        );
        let text = format!("7 {}", 0u64.wrapping_sub(S));
        assert_eq!(
            c.writes().collect::<Vec<_>>(),
            [(0, text.as_bytes(), 3_000 + 5)]
        );
        // A charge of 0 writes nothing; charging twice in one call adds up.
        let (c, r) = call(
            &[b"k", b"k"],
            &[b"", b""],
            &[bucket(Op::Charge, 7, 0), bucket(Op::Charge, 7, 5)],
        );
        r.unwrap();
        let text = format!("7 {}", 0u64.wrapping_sub(3 * S));
        assert_eq!(
            c.writes().collect::<Vec<_>>(),
            [(0, text.as_bytes(), 5_000 + 5)]
        );
    }

    /// A refund gives back what drl-core's `refund` gives back, with
    /// verdict 1, and writes only a state it changed: a fixed window's
    /// count within the mark's window; nothing for another window's mark.
    #[test]
    fn refunds_write_what_drl_core_changes() {
        const S: u64 = 1_000_000_000;
        let quota = Quota::new(5, 10 * S).unwrap();
        let refund = |now, units, mark| Decision {
            clock: Clock::Caller(now),
            op: Op::Refund,
            algorithm: Algorithm::FixedWindow,
            cost: units,
            quotas: vec![quota],
            marks: vec![mark],
        };
        let limiter = Limiter::new(Algorithm::FixedWindow, quota);
        // Window 7 holds 4 (a reservation of 4 at 70 s).
        let mut state = limiter.new_state();
        let (_, mark) = limiter.reserve(&mut state, 70 * S, 4);
        let mark = mark.unwrap();
        let stored = state_text::to_text(&state);
        let (c, r) = call(&[b"k"], &[stored.as_slice()], &[refund(71 * S, 3, mark.0)]);
        r.unwrap();
        assert_eq!(
            c.reply().collect::<Vec<_>>(),
            [
                Reply::Int(1),
                Reply::Bulk(b"71000000000"),
                Reply::Bulk(&stored[..])
            ]
        );
        let mut want = state.clone();
        limiter.refund(&mut want, 71 * S, mark, 3);
        let writes: Vec<_> = c.writes().map(|(_, v, _)| v.to_vec()).collect();
        assert_eq!(writes, [state_text::to_text(&want)]);
        // Another window's mark, or the next window: nothing written.
        for (now, m) in [(71 * S, mark.0 + 1), (80 * S, mark.0)] {
            let (c, r) = call(&[b"k"], &[stored.as_slice()], &[refund(now, 3, m)]);
            r.unwrap();
            assert_eq!(c.reply().next(), Some(Reply::Int(1)));
            assert_eq!(c.writes().count(), 0, "now {now} mark {m}");
        }
    }
}
