//! Time as integer nanoseconds, and the clocks that produce it.
//!
//! Core code never reads the OS clock: every decision takes `now` as an
//! argument. A [`Clock`] is how the shell (server, replay, tests) obtains it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A point in time or a duration, in nanoseconds.
pub type Nanos = u64;

/// Nanoseconds per microsecond.
pub const MICROSECOND: Nanos = 1_000;
/// Nanoseconds per millisecond.
pub const MILLISECOND: Nanos = 1_000_000;
/// Nanoseconds per second.
pub const SECOND: Nanos = 1_000_000_000;
/// Nanoseconds per minute.
pub const MINUTE: Nanos = 60 * SECOND;
/// Nanoseconds per hour.
pub const HOUR: Nanos = 60 * MINUTE;
/// Nanoseconds per day.
pub const DAY: Nanos = 24 * HOUR;

/// A source of `now`, in nanoseconds.
pub trait Clock: Send + Sync {
    /// The current time in nanoseconds.
    fn now(&self) -> Nanos;
}

/// Wall-clock time: nanoseconds since the Unix epoch.
///
/// Window algorithms align windows to time 0, so every node that uses this
/// clock agrees on window boundaries (up to clock skew).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one place drl-core reads the OS clock (clippy.toml bans
    // `SystemTime::now` elsewhere in this crate): this is the clock the
    // shell hands to limiters; the decisions themselves still take `now`.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Nanos {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to: for tests and replay.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A manual clock reading `start`.
    pub fn new(start: Nanos) -> Self {
        Self {
            now: AtomicU64::new(start),
        }
    }

    /// Sets the time (it may go backwards: limiters clamp).
    pub fn set(&self, now: Nanos) {
        self.now.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`, saturating at `u64::MAX`.
    pub fn advance(&self, by: Nanos) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!(c.now(), 5);
        c.advance(10);
        assert_eq!(c.now(), 15);
        c.set(3);
        assert_eq!(c.now(), 3);
        c.set(u64::MAX - 1);
        c.advance(10);
        assert_eq!(c.now(), u64::MAX);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > 1_577_836_800 * SECOND);
    }
}
