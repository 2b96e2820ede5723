//! The `spec` argument of `DRL.DECIDE`: a binary string of little-endian
//! `u64` words (protocol v1).
//!
//! ```text
//! word 0  MAGIC (magic + version)
//! word 1  expiry grace, ms
//! then per decision: clock (0 caller, 1 server), now (ns), algorithm (0..=6,
//!   the order of drl_core::Algorithm::ALL), cost, nq (>= 1),
//!   then nq x (limit, window ns, burst)
//! ```
//!
//! Decision `d` uses the next `nq_d` keys in order; all keys are used and the
//! spec is consumed exactly.

use drl_core::{Algorithm, Nanos, Quota};

/// Word 0 of every v1 spec: `"1LRD"` in ASCII, then protocol version 1.
pub const MAGIC: u64 = 0x0000_0001_4452_4C31;

/// Where a decision's `now` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The caller's time in ns (word `clock` = 0).
    Caller(Nanos),
    /// The Redis server's clock, read once per call, microsecond precision
    /// (word `clock` = 1; the `now` word is ignored).
    Server,
}

/// One decision of a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Where `now` comes from.
    pub clock: Clock,
    /// The algorithm of every quota of this decision.
    pub algorithm: Algorithm,
    /// The request's cost (0: a query, nothing is written).
    pub cost: u64,
    /// The quotas, decided all-or-nothing; quota `i` uses the decision's
    /// key `i`.
    pub quotas: Vec<Quota>,
}

/// A parsed spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Added to every key's expiry, in ms.
    pub grace_ms: u64,
    /// The decisions, in order.
    pub decisions: Vec<Decision>,
}

/// The number of an algorithm in the spec (its index in `Algorithm::ALL`).
pub fn algorithm_code(a: Algorithm) -> u64 {
    Algorithm::ALL
        .iter()
        .position(|&x| x == a)
        .expect("every algorithm is in ALL") as u64
}

/// Appends one word.
fn word(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// Encodes a spec (the inverse of [`parse`]).
pub fn encode(grace_ms: u64, decisions: &[Decision]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + decisions.len() * 64);
    word(&mut out, MAGIC);
    word(&mut out, grace_ms);
    for d in decisions {
        let (clock, now) = match d.clock {
            Clock::Caller(now) => (0, now),
            Clock::Server => (1, 0),
        };
        for w in [
            clock,
            now,
            algorithm_code(d.algorithm),
            d.cost,
            d.quotas.len() as u64,
        ] {
            word(&mut out, w);
        }
        for q in &d.quotas {
            word(&mut out, q.limit());
            word(&mut out, q.window());
            word(&mut out, q.burst());
        }
    }
    out
}

/// The header of one parsed decision; its quotas are the next `nq` of
/// [`Parsed::quotas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Where `now` comes from.
    pub clock: Clock,
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
            "bad spec magic {:#018x} (expected {MAGIC:#018x}: protocol v1)",
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
        let (clock, now, alg, cost, nq) = (w(at), w(at + 1), w(at + 2), w(at + 3), w(at + 4));
        at += 5;
        let clock = match clock {
            0 => Clock::Caller(now),
            1 => Clock::Server,
            c => {
                return Err(format!(
                    "decision {n}: unknown clock {c} (0 caller, 1 server)"
                ));
            }
        };
        let algorithm = *usize::try_from(alg)
            .ok()
            .and_then(|i| Algorithm::ALL.get(i))
            .ok_or_else(|| {
                format!(
                    "decision {n}: unknown algorithm {alg} (0 token-bucket .. 6 sliding-window)"
                )
            })?;
        if nq == 0 {
            return Err(format!("decision {n}: no quotas (nq must be at least 1)"));
        }
        let left = (len - at) as u64;
        if nq > left / 3 {
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
            at += 3;
            out.quotas.push(quota);
        }
        out.heads.push(Head {
            clock,
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
            .map(|(h, q)| Decision {
                clock: h.clock,
                algorithm: h.algorithm,
                cost: h.cost,
                quotas: q.to_vec(),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one() -> Vec<Decision> {
        vec![
            Decision {
                clock: Clock::Caller(u64::MAX),
                algorithm: Algorithm::SlidingWindow,
                cost: 3,
                quotas: vec![
                    Quota::new(10, 1_000).unwrap(),
                    Quota::with_burst(5, 7, 2).unwrap(),
                ],
            },
            Decision {
                clock: Clock::Server,
                algorithm: Algorithm::TokenBucket,
                cost: 0,
                quotas: vec![Quota::new(1, 1).unwrap()],
            },
        ]
    }

    #[test]
    fn round_trips() {
        let raw = encode(250, &one());
        assert_eq!(raw.len(), 8 * (2 + 5 + 6 + 5 + 3));
        let s = parse(&raw, 3).unwrap();
        assert_eq!(s.grace_ms, 250);
        assert_eq!(s.decisions, one());
        for a in Algorithm::ALL {
            let d = Decision {
                clock: Clock::Caller(1),
                algorithm: a,
                cost: 1,
                quotas: vec![Quota::new(1, 1).unwrap()],
            };
            assert_eq!(
                parse(&encode(0, std::slice::from_ref(&d)), 1)
                    .unwrap()
                    .decisions,
                [d]
            );
        }
    }

    #[test]
    fn rejects_bad_specs() {
        let raw = encode(0, &one());
        let err = |raw: &[u8], keys| parse(raw, keys).unwrap_err();
        assert!(err(&raw[..raw.len() - 1], 3).contains("whole number"));
        assert!(err(&raw[..raw.len() - 8], 3).contains("truncated"));
        assert!(err(&raw[..8], 3).contains("truncated"));
        assert!(err(&raw[..16], 0).contains("no decisions"));
        assert!(err(&raw, 2).contains("key count mismatch"));
        assert!(err(&raw, 4).contains("key count mismatch"));
        let mut bad = raw.clone();
        bad[0] ^= 1;
        assert!(err(&bad, 3).contains("magic"));
        let mut bad = raw.clone();
        bad[32..40].copy_from_slice(&7u64.to_le_bytes());
        assert!(err(&bad, 3).contains("unknown algorithm 7"));
        let mut bad = raw.clone();
        bad[16..24].copy_from_slice(&2u64.to_le_bytes());
        assert!(err(&bad, 3).contains("unknown clock"));
        let mut bad = raw.clone();
        bad[56..64].copy_from_slice(&0u64.to_le_bytes());
        assert!(err(&bad, 3).contains("limit must be at least 1"));
        let mut bad = raw.clone();
        bad[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(&bad, 3).contains("truncated"));
    }
}
