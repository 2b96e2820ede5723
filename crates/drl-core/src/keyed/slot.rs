//! What a [`super::KeyedLimiter`] table entry holds besides its key: a
//! lock-free [`CellSlot`] (one 128-bit word) for single-quota token bucket,
//! leaky meter, GCRA and fixed window, or a [`LockedSlot`] (a mutex over
//! the states) for everything else.
//!
//! A table holds one kind of slot only, chosen when the limiter is built, so
//! the entry is exactly as large as its slot needs (a `u64` key and a cell
//! take 32 bytes) and the hot path does not branch on the slot kind.

use parking_lot::Mutex;

use super::cell::{self, CellKind, Word128};
use crate::decision::Decision;
use crate::limiter::State;
use crate::multi::MultiLimiter;
use crate::quota::Quota;
use crate::time::Nanos;

/// The 128-bit atomic word of a cell.
pub(crate) type Word = portable_atomic::AtomicU128;

/// Per-key state of one kind, decided under a shared context.
pub(crate) trait Slot: Send + Sync + Sized {
    /// What every slot of a table shares (the quotas).
    type Ctx: Send + Sync;

    /// Decides a request on a fresh state; returns the decision and a slot
    /// holding the state after it.
    fn decide_fresh(ctx: &Self::Ctx, now: Nanos, cost: u64) -> (Decision, Self);
    /// A slot holding `states` (one per quota, of the table's algorithm).
    fn from_states(ctx: &Self::Ctx, states: Vec<State>) -> Self;
    /// Decides a request of `cost` at `now`.
    fn decide(&self, ctx: &Self::Ctx, now: Nanos, cost: u64) -> Decision;
    /// True if the state decides exactly as a missing one would.
    fn is_fresh(&self, ctx: &Self::Ctx, now: Nanos) -> bool;
    /// The wait until the state is fresh (for eviction choices).
    fn reset_after(&self, ctx: &Self::Ctx, now: Nanos) -> Nanos;
    /// A copy of the states.
    fn states(&self, ctx: &Self::Ctx) -> Vec<State>;
}

/// The context of a cell table: the one quota and which algorithm.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CellCtx {
    /// The algorithm the cells hold.
    pub kind: CellKind,
    /// The one quota.
    pub quota: Quota,
}

/// A lock-free slot: `(last, x)` in one 128-bit word.
pub(crate) struct CellSlot(Word);

impl Slot for CellSlot {
    type Ctx = CellCtx;

    fn decide_fresh(ctx: &CellCtx, now: Nanos, cost: u64) -> (Decision, Self) {
        let slot = CellSlot(Word::new(ctx.kind.fresh(&ctx.quota)));
        (slot.decide(ctx, now, cost), slot)
    }

    fn from_states(ctx: &CellCtx, states: Vec<State>) -> Self {
        let word = ctx
            .kind
            .pack_state(&ctx.quota, &states[0])
            .expect("a state of the cell's algorithm");
        CellSlot(Word::new(word))
    }

    #[inline]
    fn decide(&self, ctx: &CellCtx, now: Nanos, cost: u64) -> Decision {
        cell::decide(ctx.kind, &ctx.quota, &self.0, now, cost)
    }

    fn is_fresh(&self, ctx: &CellCtx, now: Nanos) -> bool {
        ctx.kind.is_fresh(&ctx.quota, Word128::load(&self.0), now)
    }

    fn reset_after(&self, ctx: &CellCtx, now: Nanos) -> Nanos {
        ctx.kind
            .reset_after(&ctx.quota, Word128::load(&self.0), now)
    }

    fn states(&self, ctx: &CellCtx) -> Vec<State> {
        vec![ctx.kind.unpack_state(&ctx.quota, Word128::load(&self.0))]
    }
}

/// A slot behind a mutex: any algorithm, any number of quotas.
pub(crate) struct LockedSlot(Mutex<Box<[State]>>);

impl Slot for LockedSlot {
    type Ctx = MultiLimiter;

    fn decide_fresh(ctx: &MultiLimiter, now: Nanos, cost: u64) -> (Decision, Self) {
        let mut states = ctx.new_states().into_boxed_slice();
        let d = ctx.decide(&mut states, now, cost);
        (d, LockedSlot(Mutex::new(states)))
    }

    fn from_states(_: &MultiLimiter, states: Vec<State>) -> Self {
        LockedSlot(Mutex::new(states.into_boxed_slice()))
    }

    #[inline]
    fn decide(&self, ctx: &MultiLimiter, now: Nanos, cost: u64) -> Decision {
        ctx.decide(&mut self.0.lock(), now, cost)
    }

    fn is_fresh(&self, ctx: &MultiLimiter, now: Nanos) -> bool {
        ctx.is_fresh(&self.0.lock(), now)
    }

    fn reset_after(&self, ctx: &MultiLimiter, now: Nanos) -> Nanos {
        let states = self.0.lock();
        ctx.parts()
            .iter()
            .zip(states.iter())
            .map(|(l, s)| l.check(s, now, 0).reset_after)
            .max()
            .unwrap_or(0)
    }

    fn states(&self, _: &MultiLimiter) -> Vec<State> {
        self.0.lock().to_vec()
    }
}
