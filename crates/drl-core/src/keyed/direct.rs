//! [`AtomicLimiter`]: one lock-free limiter without keys (a single cell).

use portable_atomic::AtomicU128;

use super::cell::{self, CellKind, Word128};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::time::Nanos;

/// A single, unkeyed limiter for token bucket, leaky meter or GCRA, shared
/// by many threads and updated by one 128-bit compare-exchange.
#[derive(Debug)]
pub struct AtomicLimiter {
    kind: CellKind,
    quota: Quota,
    word: AtomicU128,
}

impl AtomicLimiter {
    /// A fresh limiter; `None` for algorithms whose state does not fit a
    /// cell (use a [`crate::Limiter`] behind a mutex, or a `KeyedLimiter`).
    pub fn new(algorithm: Algorithm, quota: Quota) -> Option<Self> {
        let kind = match algorithm {
            Algorithm::TokenBucket => CellKind::TokenBucket,
            Algorithm::LeakyBucket => CellKind::LeakyBucket,
            Algorithm::Gcra => CellKind::Gcra,
            _ => return None,
        };
        Some(Self {
            kind,
            quota,
            word: Word128::new(kind.fresh(&quota)),
        })
    }

    /// Decides a request of `cost` at `now`.
    #[inline]
    pub fn decide(&self, now: Nanos, cost: u64) -> Decision {
        cell::decide(self.kind, &self.quota, &self.word, now, cost)
    }
}
