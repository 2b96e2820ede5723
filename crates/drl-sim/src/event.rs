//! The event queue: a binary heap ordered by `(time, sequence)`.
//!
//! Events at the same nanosecond fire in the order they were scheduled (the
//! sequence number breaks ties), so a run is a pure function of its inputs.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use drl_core::Nanos;

struct Entry<E> {
    at: Nanos,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A deterministic discrete-event queue.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Nanos,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
        }
    }

    /// The time of the last event popped.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `ev` at `at` (clamped to now: no event runs in the past).
    pub fn schedule(&mut self, at: Nanos, ev: E) {
        let at = at.max(self.now);
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Pops the next event if it is due at or before `until`.
    pub fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        if self.heap.peek()?.at > until {
            return None;
        }
        let e = self.heap.pop()?;
        self.now = e.at;
        Some((e.at, e.ev))
    }

    /// The pending events with their times, in no particular order.
    ///
    /// The order depends only on the sequence of `schedule` and `pop_until`
    /// calls, so it is the same on every run; still, callers that produce
    /// output from it should not rely on it (collect into an ordered set).
    pub fn iter(&self) -> impl Iterator<Item = (Nanos, &E)> {
        self.heap.iter().map(|e| (e.at, &e.ev))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_schedule_order() {
        let mut q = EventQueue::new();
        q.schedule(20, "c");
        q.schedule(10, "a");
        q.schedule(10, "b");
        q.schedule(30, "d");
        let mut out = Vec::new();
        while let Some((t, e)) = q.pop_until(25) {
            out.push((t, e));
        }
        assert_eq!(out, vec![(10, "a"), (10, "b"), (20, "c")]);
        assert_eq!(q.len(), 1);
        // Scheduling in the past is clamped to now.
        q.schedule(0, "e");
        assert_eq!(q.pop_until(100), Some((20, "e")));
        assert_eq!(q.pop_until(100), Some((30, "d")));
        assert!(q.is_empty());
    }

    #[test]
    fn iter_sees_pending_events_without_popping() {
        let mut q = EventQueue::new();
        assert_eq!(q.iter().count(), 0);
        q.schedule(30, 3);
        q.schedule(10, 1);
        q.schedule(20, 2);
        let mut pending: Vec<(Nanos, i32)> = q.iter().map(|(t, e)| (t, *e)).collect();
        pending.sort();
        assert_eq!(pending, vec![(10, 1), (20, 2), (30, 3)]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop_until(15), Some((10, 1)));
        let mut pending: Vec<i32> = q.iter().map(|(_, e)| *e).collect();
        pending.sort();
        assert_eq!(pending, vec![2, 3]);
    }
}
