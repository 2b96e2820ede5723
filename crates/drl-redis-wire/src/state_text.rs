//! The decimal text form of a [`State`], as drl's Redis engines store it.
//!
//! Both Redis engines (the Lua scripts of drl-store and the native module
//! `drl-redis-module`) keep one key per quota whose value is this text, so
//! either engine can serve keys the other wrote. The form is the state's
//! fields as unsigned decimal numbers separated by single spaces, `last`
//! (the clock clamp) always first:
//!
//! | algorithm | text |
//! |---|---|
//! | `token-bucket` | `last credit` |
//! | `leaky-bucket` | `last level` |
//! | `gcra`, `leaky-queue` | `last ahead` |
//! | `fixed-window` | `last index count` |
//! | `sliding-log` | `last ts1 cost1 ts2 cost2 ...` (oldest first) |
//! | `sliding-window` | `last index prev curr` |
//!
//! The empty text is the fresh state (a missing key). [`format()`] writes
//! exactly what the Lua scripts write; [`parse`] reads it back (runs of
//! spaces are tolerated, anything else that is not a decimal `u64` is not).

use std::collections::VecDeque;

use drl_core::Algorithm;
use drl_core::Nanos;
use drl_core::algo;
use drl_core::{Limiter, State};

/// Why a stored state text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateTextError {
    /// A field is not a decimal `u64`.
    #[error("state field {0:?} is not a u64")]
    Field(String),
    /// The number of fields does not fit the algorithm.
    #[error("{algorithm} state with {fields} fields")]
    Arity {
        /// The algorithm the state was read for.
        algorithm: Algorithm,
        /// How many fields the text had.
        fields: usize,
    },
}

/// Parses a decimal `u64` (digits only, no sign, no spaces).
pub fn parse_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in raw {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(n)
}

/// "00" to "99": two digits per division when formatting.
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal to `out`.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

fn push_fields(out: &mut Vec<u8>, fields: &[u64]) {
    for (i, &f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        push_u64(out, f);
    }
}

/// Appends the text of `state` to `out` (see the module docs for the form).
pub fn format(state: &State, out: &mut Vec<u8>) {
    match state {
        State::TokenBucket(s) => push_fields(out, &[s.last, s.credit]),
        State::LeakyBucket(s) => push_fields(out, &[s.last, s.level]),
        State::Gcra(s) | State::LeakyQueue(s) => push_fields(out, &[s.last, s.ahead]),
        State::FixedWindow(s) => push_fields(out, &[s.last, s.index, s.count]),
        State::SlidingLog(s) => {
            push_u64(out, s.last);
            for &(ts, cost) in s.log() {
                out.push(b' ');
                push_u64(out, ts);
                out.push(b' ');
                push_u64(out, cost);
            }
        }
        State::SlidingWindow(s) => push_fields(out, &[s.last, s.index, s.prev, s.curr]),
    }
}

/// The text of `state` (see the module docs for the form).
pub fn to_text(state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    format(state, &mut out);
    out
}

/// Parses a stored state text for `limiter`; the empty text is a fresh
/// state.
pub fn parse(limiter: &Limiter, raw: &[u8]) -> Result<State, StateTextError> {
    if raw.is_empty() {
        return Ok(limiter.new_state());
    }
    let mut small = [0u64; 4];
    let mut n = 0;
    let mut log: Vec<u64> = Vec::new();
    let algorithm = limiter.algorithm();
    for f in raw.split(|&b| b == b' ').filter(|f| !f.is_empty()) {
        let v = parse_u64(f)
            .ok_or_else(|| StateTextError::Field(String::from_utf8_lossy(f).into_owned()))?;
        if algorithm == Algorithm::SlidingLog {
            log.push(v);
        } else if n < small.len() {
            small[n] = v;
        }
        n += 1;
    }
    let arity = |want: usize| {
        if n == want {
            Ok(())
        } else {
            Err(StateTextError::Arity {
                algorithm,
                fields: n,
            })
        }
    };
    let f = small;
    Ok(match algorithm {
        Algorithm::TokenBucket => {
            arity(2)?;
            State::TokenBucket(algo::token_bucket::State {
                last: f[0],
                credit: f[1],
            })
        }
        Algorithm::LeakyBucket => {
            arity(2)?;
            State::LeakyBucket(algo::leaky_bucket::State {
                last: f[0],
                level: f[1],
            })
        }
        Algorithm::Gcra => {
            arity(2)?;
            State::Gcra(algo::gcra::State {
                last: f[0],
                ahead: f[1],
            })
        }
        Algorithm::LeakyQueue => {
            arity(2)?;
            State::LeakyQueue(algo::gcra::State {
                last: f[0],
                ahead: f[1],
            })
        }
        Algorithm::FixedWindow => {
            arity(3)?;
            State::FixedWindow(algo::fixed_window::State {
                last: f[0],
                index: f[1],
                count: f[2],
            })
        }
        Algorithm::SlidingLog => {
            if n % 2 == 0 {
                return Err(StateTextError::Arity {
                    algorithm,
                    fields: n,
                });
            }
            let entries: VecDeque<(Nanos, u64)> =
                log[1..].chunks(2).map(|c| (c[0], c[1])).collect();
            State::SlidingLog(algo::sliding_log::State::new(log[0], entries))
        }
        Algorithm::SlidingWindow => {
            arity(4)?;
            State::SlidingWindow(algo::sliding_window::State {
                last: f[0],
                index: f[1],
                prev: f[2],
                curr: f[3],
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::Quota;

    fn limiter(a: Algorithm) -> Limiter {
        Limiter::new(a, Quota::with_burst(10, 1_000, 4).unwrap())
    }

    #[test]
    fn formats_like_the_lua_scripts() {
        let s = State::TokenBucket(algo::token_bucket::State {
            last: 1_700_000_000_000_000_000,
            credit: 0,
        });
        assert_eq!(to_text(&s), b"1700000000000000000 0");
        let s = State::SlidingLog(algo::sliding_log::State::new(
            5,
            [(3, 1), (5, 2)].into_iter().collect(),
        ));
        assert_eq!(to_text(&s), b"5 3 1 5 2");
        let s = State::SlidingWindow(algo::sliding_window::State {
            last: u64::MAX,
            index: 7,
            prev: 0,
            curr: 10,
        });
        assert_eq!(to_text(&s), b"18446744073709551615 7 0 10");
    }

    #[test]
    fn formats_every_width() {
        let mut n = 0u64;
        loop {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
            for m in [n.saturating_sub(1), n.saturating_add(1)] {
                out.clear();
                push_u64(&mut out, m);
                assert_eq!(out, m.to_string().as_bytes());
            }
            if n == u64::MAX {
                break;
            }
            n = n.checked_mul(10).map_or(u64::MAX, |x| x + 7);
        }
    }

    #[test]
    fn empty_is_fresh() {
        for a in Algorithm::ALL {
            let l = limiter(a);
            assert_eq!(parse(&l, b"").unwrap(), l.new_state());
        }
    }

    #[test]
    fn rejects_bad_text() {
        let l = limiter(Algorithm::Gcra);
        assert_eq!(
            parse(&l, b"1 2 3"),
            Err(StateTextError::Arity {
                algorithm: Algorithm::Gcra,
                fields: 3
            })
        );
        assert_eq!(parse(&l, b"1 -2"), Err(StateTextError::Field("-2".into())));
        assert!(parse(&l, b"1 18446744073709551616").is_err());
        assert!(parse(&l, b"1\t2").is_err());
        let log = limiter(Algorithm::SlidingLog);
        assert!(parse(&log, b"1 2").is_err());
        assert!(parse(&log, b"1").is_ok());
        assert_eq!(
            parse(&l, b"1 2 3").unwrap_err().to_string(),
            "gcra state with 3 fields"
        );
    }
}
