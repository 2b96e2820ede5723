//! Time as integer nanoseconds, and the clocks that produce it.
//!
//! Core code never reads the OS clock: every decision takes `now` as an
//! argument. A [`Clock`] is how the shell (server, replay, tests) obtains it.

use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(unix))]
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
    #[inline]
    fn now(&self) -> Nanos {
        wall_nanos()
    }
}

/// `CLOCK_REALTIME` in nanoseconds, read with `clock_gettime` (the vDSO on
/// Linux): the server reads it twice per request, and going through
/// `SystemTime` and `duration_since` costs more than the read itself.
/// Before the epoch: 0.
#[cfg(unix)]
#[inline]
fn wall_nanos() -> Nanos {
    read_clock(ClockId::Realtime).map_or(0, |(s, n)| s.saturating_mul(SECOND).saturating_add(n))
}

#[cfg(unix)]
use rustix::time::ClockId;

/// `clock_gettime(id)` (through rustix's safe call) as whole seconds and
/// nanoseconds; `None` if the reading is before zero.
#[cfg(unix)]
#[inline]
fn read_clock(id: ClockId) -> Option<(u64, u64)> {
    let t = rustix::time::clock_gettime(id);
    match (u64::try_from(t.tv_sec), u64::try_from(t.tv_nsec)) {
        (Ok(s), Ok(n)) => Some((s, n)),
        _ => None,
    }
}

/// The portable reading, where there is no `clock_gettime`.
#[cfg(not(unix))]
#[allow(clippy::disallowed_methods)]
fn wall_nanos() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Whole seconds since the epoch from the coarse wall clock
/// (`CLOCK_REALTIME_COARSE`: the kernel's last tick, read without the
/// TSC), for labels with one-second resolution such as the HTTP `date`
/// header. It may be a tick (a few milliseconds) behind [`SystemClock`].
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
pub fn coarse_wall_seconds() -> u64 {
    read_clock(ClockId::RealtimeCoarse).map_or_else(|| wall_nanos() / SECOND, |(s, _)| s)
}

/// Whole seconds since the epoch (no coarse clock on this platform).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn coarse_wall_seconds() -> u64 {
    wall_nanos() / SECOND
}

/// The coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: the kernel's
/// last tick, read without the TSC, several times cheaper than a precise
/// read) in nanoseconds, for bookkeeping on every request at millisecond
/// resolution, such as when a connection was last active. It lags the
/// precise monotonic clock (`std::time::Instant`) by a tick or two (see
/// [`coarse_resolution`]) and never leads it; its origin is fixed but
/// arbitrary (compare two readings, not a reading and an `Instant`).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
pub fn coarse_monotonic_nanos() -> Nanos {
    read_clock(ClockId::MonotonicCoarse)
        .or_else(|| read_clock(ClockId::Monotonic))
        .map_or(0, |(s, n)| s.saturating_mul(SECOND).saturating_add(n))
}

/// The monotonic clock in nanoseconds (no coarse clock on this platform).
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
#[inline]
pub fn coarse_monotonic_nanos() -> Nanos {
    read_clock(ClockId::Monotonic).map_or(0, |(s, n)| s.saturating_mul(SECOND).saturating_add(n))
}

/// Time since the first reading (no `clock_gettime` on this platform).
#[cfg(not(unix))]
#[allow(clippy::disallowed_methods)]
pub fn coarse_monotonic_nanos() -> Nanos {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let d = EPOCH.get_or_init(std::time::Instant::now).elapsed();
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How far [`coarse_monotonic_nanos`] may lag the precise clock: its
/// resolution (one kernel tick, 1-10 ms), read once. The lag is usually
/// under two ticks but is not bounded by the kernel: a tick can run late.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn coarse_resolution() -> std::time::Duration {
    static RES: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *RES.get_or_init(|| {
        let t = rustix::time::clock_getres(ClockId::MonotonicCoarse);
        match (u64::try_from(t.tv_sec), u32::try_from(t.tv_nsec)) {
            (Ok(s), Ok(n)) if (s, n) != (0, 0) => std::time::Duration::new(s, n),
            // Unknown: the coarsest tick Linux has (HZ = 100).
            _ => std::time::Duration::from_millis(10),
        }
    })
}

/// The precise clock stands in for the coarse one: no lag.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn coarse_resolution() -> std::time::Duration {
    std::time::Duration::ZERO
}

/// CPU time this process has used, in nanoseconds, over all its threads
/// (`CLOCK_PROCESS_CPUTIME_ID`: user and system time); `None` where the
/// clock is missing. A system call, not a vDSO read: for sampling a
/// process's load every few milliseconds, not per request.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn process_cpu_nanos() -> Option<u64> {
    read_clock(ClockId::ProcessCPUTime).map(|(s, n)| s.saturating_mul(SECOND).saturating_add(n))
}

/// No process CPU clock on this platform.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn process_cpu_nanos() -> Option<u64> {
    None
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

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_coarse_monotonic_clock_never_leads_the_precise_one_and_lags_by_ticks() {
        let precise = || {
            read_clock(ClockId::Monotonic)
                .map(|(s, n)| s * SECOND + n)
                .expect("a monotonic clock")
        };
        let res = u64::try_from(coarse_resolution().as_nanos()).expect("small");
        assert!(res > 0 && res <= 10 * MILLISECOND, "resolution {res} ns");
        let mut last = 0;
        let mut max_lag = 0;
        for _ in 0..100_000 {
            let before = precise();
            let coarse = coarse_monotonic_nanos();
            let after = precise();
            assert!(coarse <= after, "leads: {coarse} > {after}");
            max_lag = max_lag.max(before.saturating_sub(coarse));
            assert!(coarse >= last, "went back: {coarse} < {last}");
            last = coarse;
        }
        // A tick or two here (about 7 ms at 4 ms ticks on these VMs);
        // 100 ms says only that it is a tick clock, not a stopped one.
        assert!(max_lag < 100 * MILLISECOND, "lags {max_lag} ns");
    }

    #[test]
    fn the_coarse_seconds_are_the_wall_clock_seconds() {
        let before = SystemClock.now() / SECOND;
        let coarse = coarse_wall_seconds();
        let after = SystemClock.now() / SECOND;
        // At most a tick behind: the same second, or the one before.
        assert!(
            coarse + 1 >= before && coarse <= after,
            "{before} {coarse} {after}"
        );
    }

    /// Spinning moves the process CPU clock by about the time spun.
    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(clippy::disallowed_methods)]
    fn process_cpu_time_counts_a_spin() {
        let before = process_cpu_nanos().expect("Linux has the clock");
        let t = std::time::Instant::now();
        // Spin until the process clock has moved 10 ms: it must move (a
        // condition, however loaded the machine: preemption only makes it
        // take longer), with a hang guard of 30 s.
        while process_cpu_nanos().unwrap() - before < 10_000_000 {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(30),
                "the CPU clock stood still"
            );
            std::hint::spin_loop();
        }
        let spun = process_cpu_nanos().unwrap() - before;
        // At most the wall time times the cores (other test threads run).
        let wall = u64::try_from(t.elapsed().as_nanos()).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        assert!(spun <= (wall + 5_000_000) * cores, "{spun} ns in {wall} ns");
    }

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

    /// The direct read is the same clock as `SystemTime::now`.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn system_clock_agrees_with_system_time() {
        let std_now = || {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            u64::try_from(d.as_nanos()).unwrap()
        };
        for _ in 0..1000 {
            let before = std_now();
            let ours = SystemClock.now();
            let after = std_now();
            // Within the two reads (a clock step between them could break
            // this; none happens in a test run).
            assert!(before <= ours && ours <= after, "{before} {ours} {after}");
        }
    }
}
