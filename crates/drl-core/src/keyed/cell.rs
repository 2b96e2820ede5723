//! The lock-free fast path: a two-word algorithm state (`last`, `x`) packed
//! into one 128-bit atomic, updated by a single compare-exchange
//! (`CMPXCHG16B` on x86-64, `CASP` on aarch64; see `portable-atomic`).
//!
//! Used by the keyed limiter for single-quota token bucket, leaky meter,
//! GCRA and fixed window, whose states are exactly two `u64`s (the fixed
//! window's third, the index of its count's window, is always `last`'s
//! window: [`crate::algo::fixed_window::commit`] sets both from one time,
//! so the cell keeps `last` and the count and derives the index). (The unkeyed
//! [`super::AtomicLimiter`] uses the one-word cell of [`super::tat`]
//! instead, under the rule of docs/semantics.md, "The direct limiter".)
//!
//! Both words must move together: `last` drives the clock clamp, so a
//! split update could let a late request see a new `x` with an old `last`.

use crate::algo::{fixed_window, gcra, leaky_bucket, token_bucket};
use crate::decision::Decision;
use crate::limiter::State;
use crate::quota::Quota;
use crate::time::Nanos;

/// The 128-bit word the cell needs: load and compare-exchange.
pub trait Word128: Send + Sync {
    /// A word holding `v`.
    fn new(v: u128) -> Self;
    /// Reads the word.
    fn load(&self) -> u128;
    /// Replaces `current` with `new`; on failure returns the value seen.
    fn compare_exchange(&self, current: u128, new: u128) -> Result<u128, u128>;
}

impl Word128 for portable_atomic::AtomicU128 {
    fn new(v: u128) -> Self {
        portable_atomic::AtomicU128::new(v)
    }
    #[inline]
    fn load(&self) -> u128 {
        self.load(std::sync::atomic::Ordering::Acquire)
    }
    #[inline]
    fn compare_exchange(&self, current: u128, new: u128) -> Result<u128, u128> {
        self.compare_exchange_weak(
            current,
            new,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        )
    }
}

/// The algorithms whose state fits the cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellKind {
    /// Token bucket: `x` is credit (starts full).
    TokenBucket,
    /// Leaky meter: `x` is the level.
    LeakyBucket,
    /// GCRA: `x` is `tat - last`.
    Gcra,
    /// Fixed window: `x` is the count of `last`'s window.
    FixedWindow,
}

fn pack(last: Nanos, x: u64) -> u128 {
    ((last as u128) << 64) | x as u128
}

fn unpack(w: u128) -> (Nanos, u64) {
    ((w >> 64) as u64, w as u64)
}

/// The fixed window state of a cell's `last` and count.
#[inline]
fn window_state(quota: &Quota, last: Nanos, count: u64) -> fixed_window::State {
    fixed_window::State {
        last,
        index: quota.window_index(last),
        count,
    }
}

impl CellKind {
    /// The algorithm the cell holds.
    pub fn algorithm(self) -> crate::algorithm::Algorithm {
        use crate::algorithm::Algorithm;
        match self {
            CellKind::TokenBucket => Algorithm::TokenBucket,
            CellKind::LeakyBucket => Algorithm::LeakyBucket,
            CellKind::Gcra => Algorithm::Gcra,
            CellKind::FixedWindow => Algorithm::FixedWindow,
        }
    }

    /// The packed fresh state.
    pub fn fresh(self, quota: &Quota) -> u128 {
        match self {
            CellKind::TokenBucket => pack(0, quota.capacity_ns()),
            CellKind::LeakyBucket | CellKind::Gcra | CellKind::FixedWindow => 0,
        }
    }

    /// Check and (if admitted) the packed state to store.
    #[inline]
    fn step(self, quota: &Quota, w: u128, now: Nanos, cost: u64) -> (Decision, Option<u128>) {
        let (last, x) = unpack(w);
        match self {
            CellKind::TokenBucket => {
                let (d, n) =
                    token_bucket::step(quota, &token_bucket::State { last, credit: x }, now, cost);
                (d, n.map(|n| pack(n.last, n.credit)))
            }
            CellKind::LeakyBucket => {
                let (d, n) =
                    leaky_bucket::step(quota, &leaky_bucket::State { last, level: x }, now, cost);
                (d, n.map(|n| pack(n.last, n.level)))
            }
            CellKind::Gcra => {
                let (d, n) = gcra::step(quota, &gcra::State { last, ahead: x }, now, cost);
                (d, n.map(|n| pack(n.last, n.ahead)))
            }
            CellKind::FixedWindow => {
                let (d, n) = fixed_window::step(quota, &window_state(quota, last, x), now, cost);
                (d, n.map(|n| pack(n.last, n.count)))
            }
        }
    }

    /// The word holding `state` under `quota`; `None` for a state of
    /// another algorithm, or a fixed window whose count is not of `last`'s
    /// window (no state the algorithm writes).
    pub fn pack_state(self, quota: &Quota, state: &State) -> Option<u128> {
        match (self, state) {
            (CellKind::TokenBucket, State::TokenBucket(s)) => Some(pack(s.last, s.credit)),
            (CellKind::LeakyBucket, State::LeakyBucket(s)) => Some(pack(s.last, s.level)),
            (CellKind::Gcra, State::Gcra(s)) => Some(pack(s.last, s.ahead)),
            (CellKind::FixedWindow, State::FixedWindow(s))
                if s.index == quota.window_index(s.last) =>
            {
                Some(pack(s.last, s.count))
            }
            _ => None,
        }
    }

    /// The state a word holds under `quota`.
    pub fn unpack_state(self, quota: &Quota, w: u128) -> State {
        let (last, x) = unpack(w);
        match self {
            CellKind::TokenBucket => State::TokenBucket(token_bucket::State { last, credit: x }),
            CellKind::LeakyBucket => State::LeakyBucket(leaky_bucket::State { last, level: x }),
            CellKind::Gcra => State::Gcra(gcra::State { last, ahead: x }),
            CellKind::FixedWindow => State::FixedWindow(window_state(quota, last, x)),
        }
    }

    /// Whether the packed state is fresh at `now`.
    pub fn is_fresh(self, quota: &Quota, w: u128, now: Nanos) -> bool {
        let (last, x) = unpack(w);
        match self {
            CellKind::TokenBucket => {
                token_bucket::is_fresh(quota, &token_bucket::State { last, credit: x }, now)
            }
            CellKind::LeakyBucket => {
                leaky_bucket::is_fresh(quota, &leaky_bucket::State { last, level: x }, now)
            }
            CellKind::Gcra => gcra::is_fresh(quota, &gcra::State { last, ahead: x }, now),
            CellKind::FixedWindow => {
                fixed_window::is_fresh(quota, &window_state(quota, last, x), now)
            }
        }
    }

    /// The wait until the packed state is fresh (for eviction choices).
    pub fn reset_after(self, quota: &Quota, w: u128, now: Nanos) -> Nanos {
        self.step(quota, w, now, 0).0.reset_after
    }
}

/// Decides one request on `word`: load, check, compare-exchange, retry on
/// interference. Denials and queries never write.
#[inline]
pub fn decide<W: Word128>(
    kind: CellKind,
    quota: &Quota,
    word: &W,
    now: Nanos,
    cost: u64,
) -> Decision {
    let mut cur = word.load();
    loop {
        let (d, next) = kind.step(quota, cur, now, cost);
        match next {
            None => return d,
            Some(n) => match word.compare_exchange(cur, n) {
                Ok(_) => return d,
                Err(seen) => cur = seen,
            },
        }
    }
}
