//! Envelopes: a few `u64` lanes that bound one algorithm state from above,
//! so that evicted state can be folded into a [`super::summary::Summary`]
//! by a lane-wise maximum and restored as a state no more generous than
//! any state folded in.
//!
//! For each algorithm, [`envelope`] maps a state `E` to lanes, and
//! [`restore`] maps lanes `L` to a state `B`. The contract: whenever
//! `L >= envelope(E)` lane by lane, `B = restore(L)` *dominates* `E`: at
//! every stamp, a request `B` admits is admitted by `E`, and after both
//! commit it, `B` still dominates `E`. So a key that resumes from `B`
//! admits a sequence that the exact limiter, fed that same sequence,
//! admits in full. The lanes, and why each restore dominates, are in
//! docs/semantics.md ("Bounded memory in the keyed limiter").

use crate::algo::{fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket};
use crate::algorithm::Algorithm;
use crate::limiter::{Limiter, State};
use crate::quota::Quota;
use crate::time::Nanos;

/// The most lanes an algorithm's envelope takes.
pub(crate) const MAX_LANES: usize = 3;

/// An envelope; lanes past [`lanes`] are 0.
pub(crate) type Lanes = [u64; MAX_LANES];

/// The lanes `algorithm`'s envelope uses: 1 (`tat`) for token bucket,
/// leaky meter, GCRA and the shaper; 2 (`last`, count) for the fixed
/// window and the sliding log; 3 (window, weighted count, count) for the
/// sliding window.
pub(crate) fn lanes(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::TokenBucket
        | Algorithm::LeakyBucket
        | Algorithm::Gcra
        | Algorithm::LeakyQueue => 1,
        Algorithm::FixedWindow | Algorithm::SlidingLog => 2,
        Algorithm::SlidingWindow => 3,
    }
}

/// `last + ahead`, saturated (a larger `tat` only restricts more).
fn tat(last: Nanos, ahead: Nanos) -> u64 {
    last.saturating_add(ahead)
}

/// The envelope of `state` (all 0 for a state that decides as fresh
/// whatever its stamp).
pub(crate) fn envelope(limiter: &Limiter, state: &State) -> Lanes {
    let q = limiter.quota();
    match state {
        // `cap - credit` modulo 2^64 is the level, past `cap` in debt.
        State::TokenBucket(s) => [tat(s.last, q.capacity_ns().wrapping_sub(s.credit)), 0, 0],
        State::LeakyBucket(s) => [tat(s.last, s.level), 0, 0],
        State::Gcra(s) | State::LeakyQueue(s) => [tat(s.last, s.ahead), 0, 0],
        State::FixedWindow(s) if s.count > 0 => [s.last, s.count, 0],
        State::SlidingLog(s) => {
            let used = s.sum();
            if used > 0 { [s.last, used, 0] } else { [0; 3] }
        }
        State::SlidingWindow(s) if s.prev > 0 || s.curr > 0 => {
            [s.index, s.prev.max(s.curr), s.curr]
        }
        State::FixedWindow(_) | State::SlidingWindow(_) => [0; 3],
    }
}

/// A state no more generous, at `now` and at every later stamp, than any
/// state whose envelope is at most `lanes`, lane by lane (debt included).
pub(crate) fn restore(limiter: &Limiter, lanes: &Lanes, now: Nanos) -> State {
    let q = limiter.quota();
    let [a, b, c] = *lanes;
    match limiter.algorithm() {
        Algorithm::TokenBucket => {
            let (last, ahead) = tat_state(q, a, now);
            State::TokenBucket(token_bucket::State {
                last,
                credit: q.capacity_ns().wrapping_sub(ahead),
            })
        }
        Algorithm::LeakyBucket => {
            let (last, level) = tat_state(q, a, now);
            State::LeakyBucket(leaky_bucket::State { last, level })
        }
        Algorithm::Gcra | Algorithm::LeakyQueue => {
            let (last, ahead) = tat_state(q, a, now);
            let s = gcra::State { last, ahead };
            if limiter.algorithm() == Algorithm::Gcra {
                State::Gcra(s)
            } else {
                State::LeakyQueue(s)
            }
        }
        Algorithm::FixedWindow => State::FixedWindow(if b == 0 {
            fixed_window::State::default()
        } else {
            fixed_window::State {
                last: a,
                index: q.window_index(a),
                count: b,
            }
        }),
        Algorithm::SlidingLog => State::SlidingLog(if b == 0 {
            sliding_log::State::default()
        } else {
            sliding_log::State::new(a, [(a, b)].into())
        }),
        Algorithm::SlidingWindow => State::SlidingWindow(if b == 0 && c == 0 {
            sliding_window::State::default()
        } else {
            sliding_window::State {
                last: a.saturating_mul(q.window()),
                index: a,
                prev: b,
                curr: c,
            }
        }),
    }
}

/// `(last, ahead)` of a state with theoretical arrival time `tat` that
/// holds the most it can: `ahead = min(tat, cap)`, or, when that leaves
/// more than `cap` still queued at `now` (an evicted state in debt), the
/// mark at `now` and `ahead = tat - now`. At `now` and after it queues at
/// least as much as any state with that `tat` or less and a mark no later
/// than `now` (a restored state is used at `now`, and written only by an
/// operation at `now`, which moves the mark there anyway).
fn tat_state(q: &Quota, tat: u64, now: Nanos) -> (Nanos, Nanos) {
    let last = (tat - tat.min(q.capacity_ns())).min(now.min(tat));
    (last, tat - last)
}

/// True if the state [`restore`] builds from `lanes` decides at `now`, and
/// after an admission at `now`, exactly as a fresh state: then the key may
/// start fresh (no allocation, no restore).
pub(crate) fn fresh_at(limiter: &Limiter, lanes: &Lanes, now: Nanos) -> bool {
    let q = limiter.quota();
    let [a, b, c] = *lanes;
    match limiter.algorithm() {
        Algorithm::TokenBucket
        | Algorithm::LeakyBucket
        | Algorithm::Gcra
        | Algorithm::LeakyQueue => a <= now,
        Algorithm::FixedWindow => b == 0 || q.window_index(now) > q.window_index(a),
        Algorithm::SlidingLog => b == 0 || now.saturating_sub(a) >= q.window(),
        Algorithm::SlidingWindow => {
            let j = now / q.window();
            (b == 0 && c == 0) || j >= a.saturating_add(2) || (j == a.saturating_add(1) && c == 0)
        }
    }
}
