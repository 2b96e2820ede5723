//! [`MultiLimiter`]: several quotas at once, all-or-nothing.

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::limiter::{Limiter, Mark, State};
use crate::quota::Quota;
use crate::time::Nanos;

/// Several limiters checked together (e.g. 10/s and 100/min): a request is
/// admitted only if every one admits it, and then every one consumes;
/// otherwise none does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultiLimiter {
    parts: Vec<Limiter>,
}

impl MultiLimiter {
    /// The limiters, checked in this order. Panics if empty.
    pub fn new(parts: Vec<Limiter>) -> Self {
        assert!(
            !parts.is_empty(),
            "a multi-limiter needs at least one limiter"
        );
        Self { parts }
    }

    /// One algorithm over several quotas.
    pub fn uniform(algorithm: Algorithm, quotas: &[Quota]) -> Self {
        Self::new(quotas.iter().map(|q| Limiter::new(algorithm, *q)).collect())
    }

    /// The limiters.
    pub fn parts(&self) -> &[Limiter] {
        &self.parts
    }

    /// Fresh states, one per limiter.
    pub fn new_states(&self) -> Vec<State> {
        self.parts.iter().map(Limiter::new_state).collect()
    }

    /// Decides all-or-nothing over `states` (one per limiter, same order).
    pub fn decide(&self, states: &mut [State], now: Nanos, cost: u64) -> Decision {
        assert_eq!(states.len(), self.parts.len(), "one state per limiter");
        if let [only] = self.parts.as_slice() {
            return only.decide(&mut states[0], now, cost);
        }
        let mut parts = [Decision {
            allowed: false,
            remaining: 0,
            limit: 0,
            retry_after: None,
            reset_after: 0,
            delay: 0,
            reason: None,
        }; 8];
        let mut heap = Vec::new();
        let decisions: &mut [Decision] = if self.parts.len() <= parts.len() {
            &mut parts[..self.parts.len()]
        } else {
            heap.resize(self.parts.len(), parts[0]);
            &mut heap
        };
        for ((l, s), d) in self
            .parts
            .iter()
            .zip(states.iter())
            .zip(decisions.iter_mut())
        {
            *d = l.check(s, now, cost);
        }
        let combined = Decision::combine(decisions).expect("non-empty");
        if combined.allowed {
            for (l, s) in self.parts.iter().zip(states.iter_mut()) {
                l.commit(s, now, cost);
            }
        }
        combined
    }

    /// What a request of `cost` at `now` would get, all-or-nothing, without
    /// changing `states` (a *check*).
    pub fn check(&self, states: &[State], now: Nanos, cost: u64) -> Decision {
        assert_eq!(states.len(), self.parts.len(), "one state per limiter");
        let decisions: Vec<Decision> = self
            .parts
            .iter()
            .zip(states)
            .map(|(l, s)| l.check(s, now, cost))
            .collect();
        Decision::combine(&decisions).expect("non-empty")
    }

    /// Consumes `cost` at `now` in every quota, whatever they hold (see
    /// [`Limiter::charge`]); returns the combined query right after.
    pub fn charge(&self, states: &mut [State], now: Nanos, cost: u64) -> Decision {
        assert_eq!(states.len(), self.parts.len(), "one state per limiter");
        let decisions: Vec<Decision> = self
            .parts
            .iter()
            .zip(states.iter_mut())
            .map(|(l, s)| l.charge(s, now, cost))
            .collect();
        Decision::combine(&decisions).expect("non-empty")
    }

    /// Decides like [`MultiLimiter::decide`]; when admitted, also returns
    /// each quota's [`Mark`] (same order) for a later refund.
    pub fn reserve(
        &self,
        states: &mut [State],
        now: Nanos,
        cost: u64,
    ) -> (Decision, Option<Box<[Mark]>>) {
        let d = self.decide(states, now, cost);
        if !d.allowed {
            return (d, None);
        }
        let marks = self
            .parts
            .iter()
            .zip(states.iter())
            .map(|(l, s)| l.mark(s, now))
            .collect();
        (d, Some(marks))
    }

    /// Gives back up to `units` of a reservation admitted with `marks` (one
    /// per quota), each quota on its own (see [`Limiter::refund`]); returns
    /// the combined query right after.
    pub fn refund(&self, states: &mut [State], now: Nanos, marks: &[Mark], units: u64) -> Decision {
        assert_eq!(states.len(), self.parts.len(), "one state per limiter");
        assert_eq!(marks.len(), self.parts.len(), "one mark per limiter");
        let decisions: Vec<Decision> = self
            .parts
            .iter()
            .zip(states.iter_mut())
            .zip(marks)
            .map(|((l, s), &m)| l.refund(s, now, m, units))
            .collect();
        Decision::combine(&decisions).expect("non-empty")
    }

    /// True when every state is fresh.
    pub fn is_fresh(&self, states: &[State], now: Nanos) -> bool {
        self.parts
            .iter()
            .zip(states)
            .all(|(l, s)| l.is_fresh(s, now))
    }
}
