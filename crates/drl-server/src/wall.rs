//! Wall-clock time of a monotonic reading: the Unix-epoch nanoseconds
//! ([`SystemClock`]'s scale) at which an [`Instant`] was read.
//!
//! The HTTP/2 server stamps every read of a connection with
//! [`Instant::now`] (its streams' deadlines run on it). A call decided at
//! once is decided at that stamp, converted here, instead of at a clock
//! reading of its own: one read of the clock fewer per request. The
//! request then counts as arriving when its last bytes were read, which
//! is what it is, and its latency runs from there.
//!
//! **Exactness.** `CLOCK_MONOTONIC` and `CLOCK_REALTIME` advance together:
//! NTP's rate corrections slew both alike, and they part only when the
//! system clock is stepped (set by hand, or stepped by an NTP client). So
//! `offset + (at - base)`, with `offset` the wall time at `base`, is the
//! wall time of `at` to within the few nanoseconds between the two readings
//! that made `offset`. [`refresh`] re-reads both clocks; `drl serve` calls
//! it once a second, so a step of the system clock reaches these
//! conversions within a second (until then they run on the time before
//! the step, as a reading taken just before the step would).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use drl_core::time::{Clock, Nanos, SECOND, SystemClock};

/// A monotonic base and the wall time at it.
struct Anchor {
    base: Instant,
    /// Wall-clock nanoseconds at `base`.
    offset: AtomicU64,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

fn anchor() -> &'static Anchor {
    ANCHOR.get_or_init(|| {
        let base = Instant::now();
        Anchor {
            base,
            offset: AtomicU64::new(SystemClock.now()),
        }
    })
}

/// Nanoseconds from `base` to `at` (0 for an `at` before `base`).
#[inline]
fn since(base: Instant, at: Instant) -> Nanos {
    let d = at.saturating_duration_since(base);
    d.as_secs()
        .saturating_mul(SECOND)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// The wall-clock time, in Unix-epoch nanoseconds, at which `at` was read
/// (an instant read before this module was first used counts as read
/// then).
#[inline]
pub fn unix_nanos(at: Instant) -> Nanos {
    let a = anchor();
    a.offset
        .load(Ordering::Relaxed)
        .saturating_add(since(a.base, at))
}

/// Re-reads both clocks, so that the conversions follow a step of the
/// system clock.
pub fn refresh() {
    let a = anchor();
    let at = Instant::now();
    let wall = SystemClock.now();
    a.offset
        .store(wall.saturating_sub(since(a.base, at)), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A conversion lands between the wall readings taken just before and
    /// just after the instant (the clocks advance together), before and
    /// after a refresh.
    #[test]
    fn an_instant_converts_to_the_wall_time_it_was_read_at() {
        for round in 0..3 {
            if round > 0 {
                refresh();
            }
            for _ in 0..1_000 {
                let before = SystemClock.now();
                let at = Instant::now();
                let after = SystemClock.now();
                let t = unix_nanos(at);
                // A few microseconds of slack: the offset's own two
                // readings, and a preemption between them.
                let slack = 200_000;
                assert!(
                    t + slack >= before && t <= after + slack,
                    "{before} <= {t} <= {after}"
                );
            }
        }
    }

    /// Later instants convert to later times, by the same interval, and an
    /// instant from before the base counts as read at the base.
    #[test]
    fn intervals_are_kept_exactly() {
        let base = anchor().base;
        let a = base + Duration::from_nanos(987_654_321);
        let b = a + Duration::from_nanos(1_234_567_891);
        assert_eq!(since(base, a), 987_654_321);
        assert_eq!(since(base, b) - since(base, a), 1_234_567_891);
        if let Some(early) = base.checked_sub(Duration::from_secs(1)) {
            assert_eq!(since(base, early), 0);
        }
    }
}
