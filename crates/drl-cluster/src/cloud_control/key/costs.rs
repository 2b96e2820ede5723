//! Costs known afterwards on one key, besides the charge: check, reserve
//! and refund (docs/gossip.md, "Costs known afterwards").
//!
//! - A *check* answers what a take would surely get now
//!   ([`Allocator::admits`](crate::alloc::Allocator::admits)): no demand
//!   counted, nothing consumed, no random draw. Under random drop it is
//!   admitted only while the drop probability is 0.
//! - A *reserve* is a take (its units count as demand, as a take's do);
//!   when admitted it also returns a [`Hold`]: the cost, which life of the
//!   key and which allocator took it, and the token bucket's mark when a
//!   bucket took it.
//! - A *refund* gives back into that bucket at most what the reservation
//!   still holds it below the level it would have had, had the reservation
//!   taken only the actual cost ([`VarBucket::refund`](crate::alloc::VarBucket::refund)); nothing under
//!   random drop, after the allocator was replaced, or in another life of
//!   the key. It reports the units it gave back. Demand already counted
//!   stays counted.

use drl_core::Nanos;

use super::{Admission, Fast, KeyLimit, KeyState};
use crate::alloc::{BucketMark, FlowId};

/// What bounds the refund of a reservation admitted on a gossip key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// Units reserved (no refund gives back more).
    pub cost: u64,
    incarnation: u64,
    generation: u64,
    bucket: Option<BucketMark>,
}

impl Hold {
    /// Words in [`Hold::to_words`].
    pub const WORDS: usize = 8;

    /// The hold as words (for a ledger that keeps `u64` marks).
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        let b = self.bucket.unwrap_or(BucketMark {
            epoch: 0,
            deficit: 0,
            raised: 0,
            drained: 0,
        });
        [
            self.cost,
            self.incarnation,
            self.generation,
            self.bucket.is_some() as u64,
            b.epoch,
            b.deficit,
            b.raised,
            b.drained,
        ]
    }

    /// The hold [`Hold::to_words`] wrote; `None` for any other slice.
    pub fn from_words(w: &[u64]) -> Option<Self> {
        let &[
            cost,
            incarnation,
            generation,
            has,
            epoch,
            deficit,
            raised,
            drained,
        ] = w
        else {
            return None;
        };
        let bucket = match has {
            0 => None,
            1 => Some(BucketMark {
                epoch,
                deficit,
                raised,
                drained,
            }),
            _ => return None,
        };
        Some(Self {
            cost,
            incarnation,
            generation,
            bucket,
        })
    }
}

impl KeyState {
    /// What a take of `cost` would surely get at `now`, changing nothing
    /// (for 0: whether no charge's debt is owed).
    pub(crate) fn check(&self, now: Nanos, cost: u64) -> Admission {
        self.fast.lock().query_cost(now, cost)
    }

    /// A take of the estimate `cost` from `flow` at `now`; when admitted,
    /// also what bounds its refund.
    pub(crate) fn reserve(
        &self,
        now: Nanos,
        limit: KeyLimit,
        cost: u64,
        flow: FlowId,
    ) -> (Admission, Option<Hold>) {
        let mut f = self.fast.lock();
        let f: &mut Fast = &mut f;
        let a = f.take(now, limit, cost, flow);
        if !a.allowed {
            return (a, None);
        }
        let bucket = if cost > 0 {
            f.alloc.bucket().map(|b| b.mark(now))
        } else {
            None
        };
        let hold = Hold {
            cost,
            incarnation: self.incarnation,
            generation: f.generation,
            bucket,
        };
        (a, Some(hold))
    }

    /// Gives back up to `units` (at most `hold.cost`) of the reservation
    /// `hold` at `now`, as the module docs say; a query right after, and
    /// the units given back. Refund each hold at most once.
    pub(crate) fn refund(&self, now: Nanos, hold: &Hold, units: u64) -> (Admission, u64) {
        let mut f = self.fast.lock();
        let f: &mut Fast = &mut f;
        let units = units.min(hold.cost);
        let back = match &hold.bucket {
            Some(m) if hold.incarnation == self.incarnation && hold.generation == f.generation => {
                f.alloc.bucket().map_or(0, |b| b.refund(now, m, units))
            }
            _ => 0,
        };
        f.refunded = f.refunded.saturating_add(back);
        (f.query(now), back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::AlgorithmKind;
    use crate::cloud_control::settings::Settings;

    const LIM: KeyLimit = KeyLimit {
        rate: 1_000,
        depth: 100,
    };

    #[test]
    fn a_hold_round_trips_through_words_and_nothing_else_reads_as_one() {
        let k =
            KeyState::new(&Settings::new(AlgorithmKind::Fps, 1), LIM, 1, 1, 0).with_incarnation(7);
        let (a, hold) = k.reserve(0, LIM, 40, 1);
        assert!(a.allowed);
        let hold = hold.expect("admitted: a hold");
        assert!(hold.bucket.is_some(), "FPS admits from its bucket");
        assert_eq!(Hold::from_words(&hold.to_words()), Some(hold));
        assert_eq!(Hold::from_words(&hold.to_words()[1..]), None);
        let mut w = hold.to_words();
        w[3] = 2;
        assert_eq!(Hold::from_words(&w), None);
    }

    #[test]
    fn a_hold_of_another_life_of_the_key_refunds_nothing() {
        let s = Settings::new(AlgorithmKind::Fps, 1);
        let k = KeyState::new(&s, LIM, 1, 1, 0).with_incarnation(1);
        let (_, hold) = k.reserve(0, LIM, 40, 1);
        let hold = hold.unwrap();
        let other = KeyState::new(&s, LIM, 1, 1, 0).with_incarnation(2);
        other.reserve(0, LIM, 40, 1);
        assert_eq!(other.refund(0, &hold, 40).1, 0, "another life of the key");
        let (_, back) = k.refund(0, &hold, 100);
        assert_eq!(back, 40, "at most the reserved cost, all of it at once");
        assert_eq!(k.snapshot().refunded, 40);
        // A check after it reads the bucket, changing nothing.
        let before = k.snapshot();
        assert!(k.check(0, 1).allowed);
        assert_eq!(k.snapshot(), before);
    }

    /// A reservation's estimate counts as demand and stays counted when
    /// it is settled lower: GRD then drops more, never less.
    #[test]
    fn demand_counted_at_the_estimate_only_makes_grd_stricter() {
        const MS: Nanos = 1_000_000;
        let s = Settings {
            ewma: 0.0,
            ..Settings::new(AlgorithmKind::Grd, 1)
        };
        let run = |estimate: u64| {
            let k = KeyState::new(&s, LIM, 1, 1, 0);
            for t in 0..4u64 {
                for i in 0..50 {
                    let now = t * 50 * MS + i * MS;
                    // Reserve the estimate, settle at 1; and a take of 1.
                    if let (_, Some(h)) = k.reserve(now, LIM, estimate, 0) {
                        assert_eq!(k.refund(now, &h, estimate - 1).1, 0);
                    }
                    k.admit(now, LIM, 1, 1);
                }
                k.tick(&s, (t + 1) * 50 * MS, 0.0, 1);
            }
            k.snapshot().drop_probability.unwrap()
        };
        let (exact, over) = (run(1), run(3));
        assert!((exact - 0.5).abs() < 1e-9, "2,000/s against 1,000: {exact}");
        assert!((over - 0.75).abs() < 1e-9, "4,000/s counted: {over}");
    }
}
