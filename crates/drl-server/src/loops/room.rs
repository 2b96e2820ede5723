//! Whether the machine has CPU to spare for more of the runtime's threads:
//! what a busy connection loop asks before it pools its connections (see
//! the module docs of [`super`]).
//!
//! Pooling spreads the connections over every worker. That pays when a
//! core would otherwise sit idle, or when the loop's thread already waits
//! for a CPU behind other threads (more runnable threads then win the
//! process a larger share). It does not pay when every core is busy and
//! nobody waits: each thread has a core of its own, the loop's included,
//! and a second worker would only take CPU from whatever else runs there
//! (the application beside the limiter, or a load generator) while each
//! request costs more, its connection's state moving between the cores
//! (BENCHMARKS.md, issue 17, session 20: at the `Check` peak on two cores
//! shared with the load generator, the loop served 1.12-1.19x the pooled
//! throughput of a server that decides nothing, pooled drl 0.92-0.96).
//!
//! Two readings of Linux's, taken at the ends of the loop's windows while
//! it is loaded and judged over a stretch of load of [`ROOM_SPAN`] at least
//! (a moment of either, a kernel thread's wakeup, a client's pause, must
//! not move the connections for the rest of the load):
//!
//! - idle CPU time, `/proc/stat` (idle + iowait over all CPUs, in clock
//!   ticks of 10 ms);
//! - CPU pressure, `/proc/pressure/cpu` (`some`: the time at least one
//!   runnable task waited for a CPU, in microseconds).

use std::io::Read as _;
use std::time::{Duration, Instant};

/// Idle CPU, in cores, over a stretch of load that means a core to spare.
pub const POOL_IDLE: f64 = 0.5;
/// The share of a stretch of load some task waited for a CPU that means
/// the loop competes for CPU (more threads take a fairer share).
pub const POOL_PRESSURE: f64 = 0.2;
/// The shortest stretch of load the machine's room is judged over
/// (`/proc/stat` counts in ticks of 10 ms: over 200 ms, two CPUs read
/// within about 0.1 cores).
pub const ROOM_SPAN: Duration = Duration::from_millis(200);

/// What the machine has to spare for more threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spare {
    /// An idle core, or threads waiting for CPU: pooling pays.
    Yes,
    /// Every core busy, nobody waiting (or not yet known): stay.
    No,
    /// Neither reading exists on this system: pool as if it paid.
    Unknown,
}

/// The machine's counters at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    at: Instant,
    /// Idle CPU time so far, seconds summed over the CPUs.
    idle_s: Option<f64>,
    /// Time some task waited for a CPU so far, seconds.
    waited_s: Option<f64>,
}

impl Mark {
    /// The counters now.
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            idle_s: idle_seconds(),
            waited_s: waited_seconds(),
        }
    }

    /// A mark of given readings (tests).
    #[cfg(test)]
    pub fn of(at: Instant, idle_s: Option<f64>, waited_s: Option<f64>) -> Self {
        Self {
            at,
            idle_s,
            waited_s,
        }
    }

    /// What the machine had to spare between `first` and `self`.
    pub fn since(&self, first: &Mark) -> Spare {
        let span = self.at.saturating_duration_since(first.at);
        let secs = span.as_secs_f64();
        let rate = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if secs > 0.0 => Some(Some(((b - a) / secs).max(0.0))),
            (Some(_), Some(_)) => Some(None),
            _ => None,
        };
        judge(
            rate(first.idle_s, self.idle_s),
            rate(first.waited_s, self.waited_s),
            span,
        )
    }
}

/// The verdict on a streak of `span`: `idle` cores idle on average and
/// tasks waiting for a CPU `pressure` of the time, each `None` where the
/// system has no such reading and `Some(None)` where the span is too short
/// to tell.
pub fn judge(idle: Option<Option<f64>>, pressure: Option<Option<f64>>, span: Duration) -> Spare {
    if idle.is_none() && pressure.is_none() {
        return Spare::Unknown;
    }
    if span < ROOM_SPAN {
        return Spare::No;
    }
    let waiting = pressure.flatten().is_some_and(|p| p >= POOL_PRESSURE);
    let idle_core = idle.flatten().is_some_and(|i| i >= POOL_IDLE);
    if waiting || idle_core {
        Spare::Yes
    } else {
        Spare::No
    }
}

/// Reads the first line of `path` into `buf` (the files read here are
/// generated whole on each read; their first line is what is needed).
fn first_line<'b>(path: &str, buf: &'b mut [u8; 256]) -> Option<&'b str> {
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines().next()
}

/// `/proc/stat`'s idle and iowait over all CPUs, in seconds.
fn idle_seconds() -> Option<f64> {
    let mut buf = [0u8; 256];
    let line = first_line("/proc/stat", &mut buf)?;
    parse_idle_ticks(line).map(|t| t as f64 / ticks_per_second())
}

/// `/proc/pressure/cpu`'s `some` total, in seconds.
fn waited_seconds() -> Option<f64> {
    let mut buf = [0u8; 256];
    let line = first_line("/proc/pressure/cpu", &mut buf)?;
    parse_some_total_us(line).map(|us| us as f64 / 1e6)
}

#[cfg(unix)]
fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

#[cfg(not(unix))]
fn ticks_per_second() -> f64 {
    100.0
}

/// Idle + iowait ticks of `/proc/stat`'s `cpu` line.
pub fn parse_idle_ticks(line: &str) -> Option<u64> {
    let mut f = line.split_ascii_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait
    let mut v = [0u64; 5];
    for slot in &mut v {
        *slot = f.next()?.parse().ok()?;
    }
    Some(v[3] + v[4])
}

/// The `total=` (microseconds) of `/proc/pressure/cpu`'s `some` line.
pub fn parse_some_total_us(line: &str) -> Option<u64> {
    let mut f = line.split_ascii_whitespace();
    if f.next()? != "some" {
        return None;
    }
    f.find_map(|kv| kv.strip_prefix("total="))?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_lines_parse() {
        assert_eq!(
            parse_idle_ticks("cpu  532233 143080 268696 663686 1709 0 129523 640 0 0"),
            Some(663_686 + 1_709)
        );
        assert_eq!(parse_idle_ticks("cpu0 1 2 3 4 5"), None);
        assert_eq!(parse_idle_ticks("cpu 1 2 3"), None);
        assert_eq!(
            parse_some_total_us("some avg10=0.00 avg60=5.46 avg300=13.67 total=1773122128"),
            Some(1_773_122_128)
        );
        assert_eq!(
            parse_some_total_us("full avg10=0.00 avg60=0.00 avg300=0.00 total=0"),
            None
        );
        assert_eq!(parse_some_total_us("some avg10=0.00"), None);
    }

    #[test]
    fn pressure_or_an_idle_core_over_a_long_enough_streak_means_room() {
        let long = ROOM_SPAN;
        let short = ROOM_SPAN - Duration::from_millis(20);
        // Nobody waits, no core idle: stay, however long.
        assert_eq!(judge(Some(Some(0.1)), Some(Some(0.01)), long), Spare::No);
        assert_eq!(
            judge(Some(Some(0.1)), Some(Some(0.01)), 10 * long),
            Spare::No
        );
        // Waiting threads, or an idle core: over a streak long enough
        // that a moment of either does not count.
        assert_eq!(judge(Some(Some(0.0)), Some(Some(0.5)), short), Spare::No);
        assert_eq!(judge(Some(Some(0.0)), Some(Some(0.5)), long), Spare::Yes);
        assert_eq!(judge(Some(Some(1.0)), Some(Some(0.0)), short), Spare::No);
        assert_eq!(judge(Some(Some(1.0)), Some(Some(0.0)), long), Spare::Yes);
        // One reading missing: judged on the other.
        assert_eq!(judge(Some(Some(1.0)), None, long), Spare::Yes);
        assert_eq!(judge(None, Some(Some(0.0)), long), Spare::No);
        // Neither reading on this system.
        assert_eq!(judge(None, None, long), Spare::Unknown);
        // No span yet: nothing to tell.
        assert_eq!(judge(Some(None), Some(None), Duration::ZERO), Spare::No);
    }

    #[test]
    fn marks_measure_rates_between_them() {
        let t = Instant::now();
        let a = Mark::of(t, Some(100.0), Some(10.0));
        // 200 ms later: 0.2 s idle (1 core), 0.01 s waited (5 %).
        let b = Mark::of(t + ROOM_SPAN, Some(100.2), Some(10.01));
        assert_eq!(b.since(&a), Spare::Yes);
        // Nothing idle, 0.1 s waited (50 %).
        let b = Mark::of(t + ROOM_SPAN, Some(100.0), Some(10.1));
        assert_eq!(b.since(&a), Spare::Yes);
        // Nothing idle, nobody waiting.
        let c = Mark::of(t + ROOM_SPAN, Some(100.0), Some(10.0));
        assert_eq!(c.since(&a), Spare::No);
        // The same instant: no span.
        assert_eq!(a.since(&a), Spare::No);
        assert_eq!(
            Mark::of(t, None, None).since(&Mark::of(t, None, None)),
            Spare::Unknown
        );
    }

    /// On Linux both readings exist here and only grow.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_both_readings() {
        let a = Mark::now();
        let b = Mark::now();
        let (ia, ib) = (a.idle_s.expect("/proc/stat"), b.idle_s.unwrap());
        assert!(ib >= ia);
        let (wa, wb) = (a.waited_s.expect("/proc/pressure/cpu"), b.waited_s.unwrap());
        assert!(wb >= wa);
    }
}
