//! [`Limiter`]: one algorithm with one quota, deciding over a [`State`].

use crate::algo;
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::quota::Quota;
use crate::time::Nanos;

/// The per-key state of any of the seven algorithms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum State {
    /// `token-bucket`.
    TokenBucket(algo::token_bucket::State),
    /// `leaky-bucket` (meter).
    LeakyBucket(algo::leaky_bucket::State),
    /// `gcra`.
    Gcra(algo::gcra::State),
    /// `leaky-queue` (shaper).
    LeakyQueue(algo::leaky_queue::State),
    /// `fixed-window`.
    FixedWindow(algo::fixed_window::State),
    /// `sliding-log`.
    SlidingLog(algo::sliding_log::State),
    /// `sliding-window`.
    SlidingWindow(algo::sliding_window::State),
}

/// One algorithm applied with one quota. Cheap to copy; holds no state of
/// its own (the state lives in [`State`], one per key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limiter {
    algorithm: Algorithm,
    quota: Quota,
}

macro_rules! dispatch {
    ($self:ident, $state:expr, $f:ident ( $($arg:expr),* )) => {
        match $state {
            State::TokenBucket(s) => algo::token_bucket::$f(&$self.quota, s, $($arg),*),
            State::LeakyBucket(s) => algo::leaky_bucket::$f(&$self.quota, s, $($arg),*),
            State::Gcra(s) => algo::gcra::$f(&$self.quota, s, $($arg),*),
            State::LeakyQueue(s) => algo::leaky_queue::$f(&$self.quota, s, $($arg),*),
            State::FixedWindow(s) => algo::fixed_window::$f(&$self.quota, s, $($arg),*),
            State::SlidingLog(s) => algo::sliding_log::$f(&$self.quota, s, $($arg),*),
            State::SlidingWindow(s) => algo::sliding_window::$f(&$self.quota, s, $($arg),*),
        }
    };
}

impl Limiter {
    /// `algorithm` with `quota`.
    pub fn new(algorithm: Algorithm, quota: Quota) -> Self {
        Self { algorithm, quota }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// A fresh state (full bucket, empty window, empty log, empty queue).
    pub fn new_state(&self) -> State {
        match self.algorithm {
            Algorithm::TokenBucket => {
                State::TokenBucket(algo::token_bucket::State::new(&self.quota))
            }
            Algorithm::LeakyBucket => State::LeakyBucket(Default::default()),
            Algorithm::Gcra => State::Gcra(Default::default()),
            Algorithm::LeakyQueue => State::LeakyQueue(Default::default()),
            Algorithm::FixedWindow => State::FixedWindow(Default::default()),
            Algorithm::SlidingLog => State::SlidingLog(Default::default()),
            Algorithm::SlidingWindow => State::SlidingWindow(Default::default()),
        }
    }

    /// What a request of `cost` at `now` would get, without changing `state`.
    ///
    /// # Panics
    /// If `state` belongs to another algorithm (a programming error).
    pub fn check(&self, state: &State, now: Nanos, cost: u64) -> Decision {
        self.assert_matches(state);
        dispatch!(self, state, check(now, cost))
    }

    /// Applies a request that [`Limiter::check`] admitted at the same `now`
    /// and `cost`, with `state` unchanged in between.
    pub fn commit(&self, state: &mut State, now: Nanos, cost: u64) {
        self.assert_matches(state);
        dispatch!(self, state, commit(now, cost))
    }

    /// Decides a request: check, and commit if admitted.
    pub fn decide(&self, state: &mut State, now: Nanos, cost: u64) -> Decision {
        let d = self.check(state, now, cost);
        if d.allowed {
            self.commit(state, now, cost);
        }
        d
    }

    /// True when `state` is indistinguishable from a fresh one at `now` and
    /// at any later time: dropping it cannot change any decision.
    pub fn is_fresh(&self, state: &State, now: Nanos) -> bool {
        self.assert_matches(state);
        dispatch!(self, state, is_fresh(now))
    }

    fn assert_matches(&self, state: &State) {
        let ok = matches!(
            (self.algorithm, state),
            (Algorithm::TokenBucket, State::TokenBucket(_))
                | (Algorithm::LeakyBucket, State::LeakyBucket(_))
                | (Algorithm::Gcra, State::Gcra(_))
                | (Algorithm::LeakyQueue, State::LeakyQueue(_))
                | (Algorithm::FixedWindow, State::FixedWindow(_))
                | (Algorithm::SlidingLog, State::SlidingLog(_))
                | (Algorithm::SlidingWindow, State::SlidingWindow(_))
        );
        assert!(
            ok,
            "state of another algorithm passed to a {} limiter",
            self.algorithm
        );
    }
}

/// What a reservation keeps, per quota, to bound its refund: for token
/// bucket, leaky meter, GCRA and the shaper the theoretical arrival time
/// its admission left; for the fixed and sliding windows the index of its
/// window; for the sliding log the stamp it was logged at
/// (docs/semantics.md, "Costs known afterwards").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mark(pub u64);

/// Costs known afterwards: charge, reserve and refund
/// (docs/semantics.md, "Costs known afterwards").
impl Limiter {
    /// Consumes `cost` at `now` whatever the state holds: a cost that does
    /// not fit (even one above the capacity) takes the state into debt,
    /// and every request is denied until time has repaid it. Returns what
    /// a query (`cost = 0`) gets right after: `allowed` is false exactly
    /// when the state is in debt.
    pub fn charge(&self, state: &mut State, now: Nanos, cost: u64) -> Decision {
        self.assert_matches(state);
        dispatch!(self, state, charge(now, cost));
        self.check(state, now, 0)
    }

    /// Decides a request like [`Limiter::decide`]; when admitted, also
    /// returns the [`Mark`] that bounds a later [`Limiter::refund`] of it.
    pub fn reserve(&self, state: &mut State, now: Nanos, cost: u64) -> (Decision, Option<Mark>) {
        let d = self.decide(state, now, cost);
        (d, d.allowed.then(|| self.mark(state, now)))
    }

    /// The [`Mark`] of a reservation just admitted on `state` at `now`.
    pub(crate) fn mark(&self, state: &State, now: Nanos) -> Mark {
        Mark(dispatch!(self, state, mark(now)))
    }

    /// Gives back up to `units` permits of a reservation admitted with
    /// `mark`, at `now`: only what of it still holds the state back (a
    /// bucket-family reservation's part still ahead of `now`, a window's
    /// count while its window counts), so that the state never ends up more
    /// generous than without the reservation. Returns what a query gets
    /// right after.
    pub fn refund(&self, state: &mut State, now: Nanos, mark: Mark, units: u64) -> Decision {
        self.assert_matches(state);
        dispatch!(self, state, refund(now, mark.0, units));
        self.check(state, now, 0)
    }
}
