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
use crate::limiter::{Limiter, Mark, State};
use crate::multi::MultiLimiter;
use crate::quota::Quota;
use crate::time::Nanos;

/// The 128-bit atomic word of a cell.
pub(crate) type Word = portable_atomic::AtomicU128;

/// One operation on a key's states (docs/semantics.md: take, check,
/// charge, reserve, and a reservation's refund).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op<'a> {
    /// Admit and consume, or deny and consume nothing.
    Take(u64),
    /// Decide, change nothing.
    Check(u64),
    /// Consume whatever the state holds (debt).
    Charge(u64),
    /// A charge that also reports a query made just before it.
    ChargeSeen(u64),
    /// A take that returns its marks when admitted.
    Reserve(u64),
    /// Give back up to `units` of a reservation with these marks.
    Refund(&'a [Mark], u64),
}

/// What an [`Op`] did.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The decision (for a charge or a refund: a query right after).
    pub decision: Decision,
    /// A reservation's marks, one per quota, when admitted.
    pub marks: Option<Box<[Mark]>>,
    /// True if the state changed (a key without an entry is then inserted).
    pub wrote: bool,
    /// For [`Op::ChargeSeen`]: a query of the state just before the charge.
    pub before: Option<Decision>,
}

/// Applies `op` to the states of a multi-limiter (in place).
pub(crate) fn apply_states(m: &MultiLimiter, states: &mut [State], now: Nanos, op: Op) -> Applied {
    let before = matches!(op, Op::ChargeSeen(_)).then(|| m.check(states, now, 0));
    let (decision, marks, wrote) = match op {
        Op::Take(c) => {
            let d = m.decide(states, now, c);
            (d, None, d.allowed && c > 0)
        }
        Op::Check(c) => (m.check(states, now, c), None, false),
        Op::Charge(c) | Op::ChargeSeen(c) => (m.charge(states, now, c), None, c > 0),
        Op::Reserve(c) => {
            let (d, marks) = m.reserve(states, now, c);
            (d, marks, d.allowed && c > 0)
        }
        Op::Refund(marks, u) => (m.refund(states, now, marks, u), None, u > 0),
    };
    Applied {
        decision,
        marks,
        wrote,
        before,
    }
}

/// Applies `op` (not a take) to one limiter's state, in place.
fn apply_one(l: &Limiter, state: &mut State, now: Nanos, op: Op) -> (Decision, Option<Mark>) {
    match op {
        Op::Take(c) => (l.decide(state, now, c), None),
        Op::Check(c) => (l.check(state, now, c), None),
        Op::Charge(c) | Op::ChargeSeen(c) => (l.charge(state, now, c), None),
        Op::Reserve(c) => l.reserve(state, now, c),
        Op::Refund(marks, u) => (l.refund(state, now, marks[0], u), None),
    }
}

/// Per-key state of one kind, decided under a shared context.
pub(crate) trait Slot: Send + Sync + Sized {
    /// What every slot of a table shares (the quotas).
    type Ctx: Send + Sync;

    /// Applies `op` to a fresh state; returns what it did and a slot
    /// holding the state after it.
    fn apply_fresh(ctx: &Self::Ctx, now: Nanos, op: Op) -> (Applied, Self);
    /// Applies `op` (atomically for the key).
    fn apply(&self, ctx: &Self::Ctx, now: Nanos, op: Op) -> Applied;
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

    fn apply_fresh(ctx: &CellCtx, now: Nanos, op: Op) -> (Applied, Self) {
        let slot = CellSlot(Word::new(ctx.kind.fresh(&ctx.quota)));
        (slot.apply(ctx, now, op), slot)
    }

    fn apply(&self, ctx: &CellCtx, now: Nanos, op: Op) -> Applied {
        if let Op::Take(c) = op {
            let decision = self.decide(ctx, now, c);
            return Applied {
                decision,
                marks: None,
                wrote: decision.allowed && c > 0,
                before: None,
            };
        }
        // Load, apply to the unpacked state, compare-exchange the packed
        // result; retry on interference. Nothing changed: no write.
        let l = Limiter::new(ctx.kind.algorithm(), ctx.quota);
        let mut cur = Word128::load(&self.0);
        loop {
            let mut state = ctx.kind.unpack_state(&ctx.quota, cur);
            let before = matches!(op, Op::ChargeSeen(_)).then(|| l.check(&state, now, 0));
            let (decision, mark) = apply_one(&l, &mut state, now, op);
            let next = ctx
                .kind
                .pack_state(&ctx.quota, &state)
                .expect("a cell's operations keep a cell's state");
            let done = next == cur || Word128::compare_exchange(&self.0, cur, next).is_ok();
            if done {
                return Applied {
                    decision,
                    marks: mark.map(|m| Box::from([m])),
                    wrote: next != cur,
                    before,
                };
            }
            cur = Word128::load(&self.0);
        }
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

    fn apply_fresh(ctx: &MultiLimiter, now: Nanos, op: Op) -> (Applied, Self) {
        let mut states = ctx.new_states().into_boxed_slice();
        let a = apply_states(ctx, &mut states, now, op);
        (a, LockedSlot(Mutex::new(states)))
    }

    fn apply(&self, ctx: &MultiLimiter, now: Nanos, op: Op) -> Applied {
        apply_states(ctx, &mut self.0.lock(), now, op)
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
