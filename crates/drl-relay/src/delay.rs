//! Sans-IO delay line: accepted packets are held this long before their
//! verdict is sent (the testbed's RTT, instead of `netem`, which this
//! kernel does not have). The delay is constant, so the line is a FIFO.

use std::collections::VecDeque;

use drl_core::Nanos;

/// Packet ids waiting for their release time.
#[derive(Debug, Default)]
pub struct DelayLine {
    delay: Nanos,
    held: VecDeque<(Nanos, u32)>,
}

impl DelayLine {
    /// A line holding each packet `delay` ns (0: no holding).
    pub fn new(delay: Nanos) -> Self {
        Self {
            delay,
            held: VecDeque::new(),
        }
    }

    /// True if packets are held at all.
    pub fn is_active(&self) -> bool {
        self.delay > 0
    }

    /// Holds packet `id`, accepted at `now`.
    pub fn push(&mut self, now: Nanos, id: u32) {
        self.held.push_back((now.saturating_add(self.delay), id));
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Option<Nanos> {
        self.held.front().map(|(t, _)| *t)
    }

    /// Releases every packet due at `now`, in arrival order.
    pub fn release(&mut self, now: Nanos, mut f: impl FnMut(u32)) -> usize {
        let mut n = 0;
        while let Some(&(t, id)) = self.held.front() {
            if t > now {
                break;
            }
            self.held.pop_front();
            f(id);
            n += 1;
        }
        n
    }

    /// Releases everything (shutdown).
    pub fn release_all(&mut self, f: impl FnMut(u32)) -> usize {
        self.release(Nanos::MAX, f)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Every packet is released exactly once, in order, never before
        /// `delay` has passed since its arrival, and at the first release
        /// at or after that time.
        #[test]
        fn held_exactly_delay(delay in 1u64..1_000, gaps in proptest::collection::vec(0u64..300, 1..50),
                              polls in proptest::collection::vec(1u64..400, 1..200)) {
            let mut line = DelayLine::new(delay);
            let mut now = 0;
            let mut arrivals = Vec::new();
            for (i, g) in gaps.iter().enumerate() {
                now += g;
                line.push(now, i as u32);
                arrivals.push(now);
            }
            let mut out = Vec::new();
            let mut t = 0;
            for p in polls {
                t += p;
                line.release(t, |id| out.push((t, id)));
            }
            line.release_all(|id| out.push((u64::MAX, id)));
            prop_assert_eq!(out.len(), arrivals.len());
            for (k, (t, id)) in out.iter().enumerate() {
                prop_assert_eq!(*id as usize, k);
                prop_assert!(*t >= arrivals[k] + delay);
            }
            prop_assert!(line.is_empty());
        }
    }
}
