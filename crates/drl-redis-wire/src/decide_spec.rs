//! The wire format of `DRL.DECIDE`'s `spec` argument (drl's Redis module,
//! protocol v3): the one definition that the store's `module` engine
//! encodes with and the module (`crates/drl-redis-module`) parses with.
//!
//! The spec is one binary string of little-endian `u64` words:
//!
//! ```text
//! word 0  MAGIC ("1LRD" in ASCII, then the protocol version)
//! word 1  expiry grace, ms (added to every key's expiry)
//! then per decision:
//!   mode       bit 0, the clock: 0 the caller's time in `now`, 1 the
//!              server's clock; bits 1-2, the operation: 0 take (decide
//!              all-or-nothing), 1 charge (consume whatever the states
//!              hold, into debt if need be), 2 refund (give back up to
//!              `cost` units of a reservation, each quota on its own); no
//!              other value
//!   now        ns (ignored for the server's clock)
//!   algorithm  the code of `algorithm_code` (explicit and stable)
//!   cost       (for a refund: the units to give back)
//!   nq         number of quotas (>= 1)
//!   nq x (limit, window ns, burst), and for a refund a fourth word per
//!              quota: the reservation's mark (`drl_core::Mark`)
//! ```
//!
//! A check and a reserve need no mode of their own: a check is a take of
//! cost 0 (a query, which writes nothing) whose returned states the client
//! decides at the real cost; a reserve is a take whose marks the client
//! computes from the returned states, as drl-core does.
//!
//! Decision `d` uses the next `nq_d` keys of the call, in order; all keys
//! are used and the spec is consumed exactly. Pure: no I/O, no Redis.

use drl_core::Algorithm;
use drl_core::Nanos;
use drl_core::Quota;

/// The protocol version: `DRL.VERSION` answers it, and [`MAGIC`] carries it.
///
/// Version 2 added charges (bit 1 of the mode word) and debt states (a
/// token bucket's stored credit above its capacity is a debt, see
/// `drl_core::algo::token_bucket`). A version-1 module would read such a
/// state as a full bucket, so drl refuses to decide with one.
///
/// Version 3 added refunds (operation 2 of the mode word, with a mark per
/// quota). A version-2 module would refuse them, so drl refuses to connect
/// to one rather than fail at the first refund.
pub const VERSION: u64 = 3;

/// Word 0 of every spec: `"1LRD"` in ASCII (low 32 bits), then
/// [`VERSION`] (high 32 bits).
pub const MAGIC: u64 = (VERSION << 32) | 0x4452_4C31;

/// The algorithm's code in a spec. Explicit and fixed forever (a test pins
/// each): the order of [`Algorithm::ALL`] plays no part.
pub const fn algorithm_code(a: Algorithm) -> u64 {
    match a {
        Algorithm::TokenBucket => 0,
        Algorithm::LeakyBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::LeakyQueue => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingLog => 5,
        Algorithm::SlidingWindow => 6,
    }
}

/// The algorithm of a code (the inverse of [`algorithm_code`]).
pub const fn algorithm_of_code(code: u64) -> Option<Algorithm> {
    Some(match code {
        0 => Algorithm::TokenBucket,
        1 => Algorithm::LeakyBucket,
        2 => Algorithm::Gcra,
        3 => Algorithm::LeakyQueue,
        4 => Algorithm::FixedWindow,
        5 => Algorithm::SlidingLog,
        6 => Algorithm::SlidingWindow,
        _ => return None,
    })
}

/// What a decision does with its quotas' states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Op {
    /// Decide all-or-nothing, consume only on admission (mode bit 1 = 0).
    #[default]
    Take,
    /// Consume `cost` in every quota whatever it holds, into debt if need
    /// be (`drl_core::MultiLimiter::charge`; operation 1). Its verdict
    /// is always 1.
    Charge,
    /// Give back up to `cost` units of a reservation admitted with the
    /// quotas' marks (`drl_core::MultiLimiter::refund`; operation 2). Its
    /// verdict is always 1.
    Refund,
}

impl Op {
    /// The operation's code in bits 1-2 of the mode word.
    pub const fn code(self) -> u64 {
        match self {
            Op::Take => 0,
            Op::Charge => 1,
            Op::Refund => 2,
        }
    }
}

/// Where a decision's `now` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The caller's time in ns (word `clock` = 0).
    Caller(Nanos),
    /// The Redis server's clock, read once per call, microsecond precision
    /// (word `clock` = 1; the `now` word is written as 0 and ignored).
    Server,
}

/// One decision of a spec, as the caller asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Where `now` comes from.
    pub clock: Clock,
    /// Take or charge.
    pub op: Op,
    /// The algorithm of every quota of this decision.
    pub algorithm: Algorithm,
    /// The request's cost (0: a query, nothing is written).
    pub cost: u64,
    /// The quotas, decided all-or-nothing; quota `i` uses the decision's
    /// key `i`.
    pub quotas: Vec<Quota>,
    /// A refund's marks, one per quota; empty for the other operations.
    pub marks: Vec<u64>,
}

/// A parsed spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Added to every key's expiry, in ms.
    pub grace_ms: u64,
    /// The decisions, in order.
    pub decisions: Vec<Request>,
}

/// Appends one word.
fn word(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// Appends the header: [`MAGIC`] and the expiry grace.
pub fn write_header(out: &mut Vec<u8>, grace_ms: u64) {
    word(out, MAGIC);
    word(out, grace_ms);
}

/// Appends one decision's record (everything after the header that
/// belongs to it).
///
/// `marks` holds a refund's mark per quota and must be empty for the other
/// operations.
pub fn write_record(
    out: &mut Vec<u8>,
    clock: Clock,
    op: Op,
    algorithm: Algorithm,
    cost: u64,
    quotas: &[Quota],
    marks: &[u64],
) {
    assert_eq!(
        marks.len(),
        if op == Op::Refund { quotas.len() } else { 0 },
        "a mark per quota for a refund, none otherwise"
    );
    let (clock, now) = match clock {
        Clock::Caller(now) => (0, now),
        Clock::Server => (1, 0),
    };
    for w in [
        clock | op.code() << 1,
        now,
        algorithm_code(algorithm),
        cost,
        quotas.len() as u64,
    ] {
        word(out, w);
    }
    for (i, q) in quotas.iter().enumerate() {
        word(out, q.limit());
        word(out, q.window());
        word(out, q.burst());
        if let Some(&m) = marks.get(i) {
            word(out, m);
        }
    }
}

/// Encodes a whole spec (the inverse of [`parse`]).
pub fn encode(grace_ms: u64, decisions: &[Request]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + decisions.len() * 64);
    write_header(&mut out, grace_ms);
    for d in decisions {
        write_record(
            &mut out,
            d.clock,
            d.op,
            d.algorithm,
            d.cost,
            &d.quotas,
            &d.marks,
        );
    }
    out
}

/// The header of one parsed decision; its quotas are the next `nq` of
/// [`Parsed::quotas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Where `now` comes from.
    pub clock: Clock,
    /// Take or charge.
    pub op: Op,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The cost.
    pub cost: u64,
    /// How many quotas (and keys) the decision has.
    pub nq: usize,
}

/// A parsed spec in flat, reusable buffers (what `DRL.DECIDE` uses: no
/// allocation per decision once the buffers have grown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Added to every key's expiry, in ms.
    pub grace_ms: u64,
    /// The decisions, in order.
    pub heads: Vec<Head>,
    /// Every decision's quotas, in order.
    pub quotas: Vec<Quota>,
    /// The mark of every quota of [`Parsed::quotas`] (0 but for refunds).
    pub marks: Vec<u64>,
}

impl Parsed {
    /// The decisions with their quotas.
    pub fn decisions(&self) -> impl Iterator<Item = (&Head, &[Quota])> {
        let mut at = 0;
        self.heads.iter().map(move |h| {
            at += h.nq;
            (h, &self.quotas[at - h.nq..at])
        })
    }
}

/// Parses `raw` for a call with `keys` keys into `out` (whose buffers are
/// reused). The error is the reason, for `ERR drl: <reason>`.
pub fn parse_into(out: &mut Parsed, raw: &[u8], keys: usize) -> Result<(), String> {
    out.heads.clear();
    out.quotas.clear();
    out.marks.clear();
    if raw.len() % 8 != 0 {
        return Err(format!(
            "malformed spec: {} bytes is not a whole number of 8-byte words",
            raw.len()
        ));
    }
    let len = raw.len() / 8;
    let w = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    if len < 2 {
        return Err("truncated spec: missing the header (magic, grace)".into());
    }
    if w(0) != MAGIC {
        return Err(format!(
            "bad spec magic {:#018x} (expected {MAGIC:#018x}: protocol v{VERSION})",
            w(0)
        ));
    }
    out.grace_ms = w(1);
    let mut at = 2;
    let mut used = 0usize;
    while at < len {
        let n = out.heads.len();
        let left = len - at;
        if left < 5 {
            return Err(format!(
                "truncated spec: decision {n} has {left} of 5 header words"
            ));
        }
        let (mode, now, alg, cost, nq) = (w(at), w(at + 1), w(at + 2), w(at + 3), w(at + 4));
        at += 5;
        if mode > 5 {
            return Err(format!(
                "decision {n}: unknown mode {mode} (bit 0 clock: 0 caller, 1 server; \
                 bits 1-2: 0 take, 1 charge, 2 refund)"
            ));
        }
        let clock = if mode & 1 == 0 {
            Clock::Caller(now)
        } else {
            Clock::Server
        };
        let op = match mode >> 1 {
            0 => Op::Take,
            1 => Op::Charge,
            _ => Op::Refund,
        };
        let per = if op == Op::Refund { 4 } else { 3 };
        let algorithm = algorithm_of_code(alg).ok_or_else(|| {
            format!("decision {n}: unknown algorithm {alg} (0 token-bucket .. 6 sliding-window)")
        })?;
        if nq == 0 {
            return Err(format!("decision {n}: no quotas (nq must be at least 1)"));
        }
        let left = (len - at) as u64;
        if nq > left / per {
            return Err(format!(
                "truncated spec: decision {n} has {nq} quotas but only {left} words follow"
            ));
        }
        let nq = nq as usize;
        used += nq;
        if used > keys {
            return Err(format!(
                "key count mismatch: the spec needs more than the {keys} keys given"
            ));
        }
        for i in 0..nq {
            let quota = Quota::with_burst(w(at), w(at + 1), w(at + 2))
                .map_err(|e| format!("decision {n} quota {i}: {e}"))?;
            out.marks.push(if op == Op::Refund { w(at + 3) } else { 0 });
            at += per as usize;
            out.quotas.push(quota);
        }
        out.heads.push(Head {
            clock,
            op,
            algorithm,
            cost,
            nq,
        });
    }
    if out.heads.is_empty() {
        return Err("truncated spec: no decisions".into());
    }
    if used != keys {
        return Err(format!(
            "key count mismatch: {keys} keys given, the spec uses {used}"
        ));
    }
    Ok(())
}

/// Parses `raw` for a call with `keys` keys (see [`parse_into`]).
pub fn parse(raw: &[u8], keys: usize) -> Result<Spec, String> {
    let mut p = Parsed::default();
    parse_into(&mut p, raw, keys)?;
    Ok(Spec {
        grace_ms: p.grace_ms,
        decisions: p
            .decisions()
            .scan(0, |at, (h, q)| {
                let marks = &p.marks[*at..*at + h.nq];
                *at += h.nq;
                Some(Request {
                    clock: h.clock,
                    op: h.op,
                    algorithm: h.algorithm,
                    cost: h.cost,
                    quotas: q.to_vec(),
                    marks: if h.op == Op::Refund {
                        marks.to_vec()
                    } else {
                        Vec::new()
                    },
                })
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(b: &[u8]) -> Vec<u64> {
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn two() -> Vec<Request> {
        vec![
            Request {
                clock: Clock::Caller(u64::MAX),
                op: Op::Take,
                algorithm: Algorithm::SlidingWindow,
                cost: 3,
                quotas: vec![
                    Quota::new(10, 1_000).unwrap(),
                    Quota::with_burst(5, 7, 2).unwrap(),
                ],
                marks: vec![],
            },
            Request {
                clock: Clock::Server,
                op: Op::Charge,
                algorithm: Algorithm::TokenBucket,
                cost: 0,
                quotas: vec![Quota::new(1, 1).unwrap()],
                marks: vec![],
            },
            Request {
                clock: Clock::Caller(9),
                op: Op::Refund,
                algorithm: Algorithm::Gcra,
                cost: 4,
                quotas: vec![Quota::new(2, 10).unwrap()],
                marks: vec![77],
            },
        ]
    }

    /// The codes are the protocol: each is pinned here, whatever the order
    /// of `Algorithm::ALL`.
    #[test]
    fn algorithm_codes_are_pinned() {
        let pinned = [
            (Algorithm::TokenBucket, 0),
            (Algorithm::LeakyBucket, 1),
            (Algorithm::Gcra, 2),
            (Algorithm::LeakyQueue, 3),
            (Algorithm::FixedWindow, 4),
            (Algorithm::SlidingLog, 5),
            (Algorithm::SlidingWindow, 6),
        ];
        for (a, code) in pinned {
            assert_eq!(algorithm_code(a), code, "{a}");
            assert_eq!(algorithm_of_code(code), Some(a), "{code}");
        }
        assert_eq!(pinned.len(), Algorithm::ALL.len());
        for code in [7, 8, 255, u64::MAX] {
            assert_eq!(algorithm_of_code(code), None);
        }
    }

    #[test]
    fn magic_and_version_are_pinned() {
        assert_eq!(MAGIC, 0x0000_0003_4452_4C31);
        assert_eq!(&MAGIC.to_le_bytes()[..4], b"1LRD");
        assert_eq!(VERSION, 3);
    }

    #[test]
    fn layout_is_the_documented_one() {
        let raw = encode(250, &two());
        assert_eq!(
            words(&raw),
            [
                MAGIC,
                250,
                0,
                u64::MAX,
                6,
                3,
                2,
                10,
                1_000,
                10,
                5,
                7,
                2,
                3,
                0,
                0,
                0,
                1,
                1,
                1,
                1,
                4,
                9,
                2,
                4,
                1,
                2,
                10,
                2,
                77
            ]
        );
        let s = parse(&raw, 4).unwrap();
        assert_eq!((s.grace_ms, s.decisions), (250, two()));
    }

    #[test]
    fn bad_specs_are_explained() {
        let raw = encode(0, &two());
        let err = |raw: &[u8], keys| parse(raw, keys).unwrap_err();
        assert!(err(&raw[..raw.len() - 1], 4).contains("whole number"));
        assert!(err(&raw[..raw.len() - 8], 4).contains("truncated"));
        assert!(err(&raw[..8], 4).contains("truncated"));
        assert!(err(&raw[..16], 0).contains("no decisions"));
        assert!(err(&raw, 3).contains("key count mismatch"));
        assert!(err(&raw, 5).contains("key count mismatch"));
        let mut bad = raw.clone();
        bad[0] ^= 1;
        assert!(err(&bad, 4).contains("magic"));
        let mut bad = raw.clone();
        bad[32..40].copy_from_slice(&7u64.to_le_bytes());
        assert!(err(&bad, 4).contains("unknown algorithm 7"));
        let mut bad = raw.clone();
        bad[16..24].copy_from_slice(&6u64.to_le_bytes());
        assert!(err(&bad, 4).contains("unknown mode 6"));
        let mut bad = raw.clone();
        bad[56..64].copy_from_slice(&0u64.to_le_bytes());
        assert!(err(&bad, 4).contains("limit must be at least 1"));
        let mut bad = raw.clone();
        bad[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(&bad, 4).contains("truncated"));
    }
}
