//! [`AtomicLimiter`]: one lock-free limiter without keys (one 64-bit word).

use std::sync::atomic::AtomicU64;

use super::tat::{self, Word64};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::time::Nanos;

/// A single, unkeyed limiter for token bucket, leaky meter or GCRA, shared
/// by many threads and updated by one 64-bit compare-exchange.
///
/// **Its contract** is the one of docs/semantics.md with the direct
/// limiter's rule ("The direct limiter: one word"): the word holds only the
/// theoretical arrival time, and each request is judged at its own `now`,
/// without the clock clamp. On a monotone clock (one thread reading a
/// monotone clock, or every caller sharing one) its decisions equal the
/// exact contract's field for field. A request stamped before an earlier
/// admission is judged from its own stamp: it is never admitted where the
/// clamped rule would deny it, its `retry_after` and `reset_after` count
/// from its own stamp, and over any span of stamps `[t1, t2]` at most
/// `burst + floor((t2 - t1) / T)` units are admitted. The three algorithms
/// decide identically here (as they do under the exact contract).
///
/// For the exact contract (the clock mark, bit for bit the same decisions
/// as `drl replay` and the Redis engines), use a [`crate::Limiter`] with
/// its [`crate::State`], or a [`crate::KeyedLimiter`].
#[derive(Debug)]
pub struct AtomicLimiter {
    algorithm: Algorithm,
    quota: Quota,
    word: AtomicU64,
}

impl AtomicLimiter {
    /// A fresh limiter; `None` for algorithms other than token bucket,
    /// leaky meter and GCRA (use a [`crate::Limiter`] behind a mutex, or a
    /// [`crate::KeyedLimiter`]).
    pub fn new(algorithm: Algorithm, quota: Quota) -> Option<Self> {
        match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => Some(Self {
                algorithm,
                quota,
                word: <AtomicU64 as Word64>::new(tat::FRESH),
            }),
            _ => None,
        }
    }

    /// The algorithm it was built for.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quota it enforces.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Decides a request of `cost` at `now` (judged at this `now`, see the
    /// type's documentation).
    #[inline]
    pub fn decide(&self, now: Nanos, cost: u64) -> Decision {
        tat::decide(&self.quota, &self.word, now, cost)
    }
}
