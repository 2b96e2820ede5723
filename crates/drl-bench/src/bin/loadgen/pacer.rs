//! A timer with microsecond precision for `--rate`: tokio's timers fire on
//! a 1 ms wheel, which would add up to a millisecond to every paced
//! request's latency (counted from when it was due) and hide the servers'
//! differences under it. A `timerfd` armed for each wait, with the
//! thread's timer slack set to 1 ns ([`tighten`]), wakes within a few
//! microseconds.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::unix::AsyncFd;

/// Sets the calling thread's timer slack to 1 ns (the default, 50 µs,
/// would delay every wake by up to that).
pub fn tighten() {
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
}

/// A worker's fixed-rate schedule: request `k` is due at `start + k × step`.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    start: Instant,
    step: Duration,
    k: u32,
}

impl Schedule {
    /// First due at `start`, then every `step`.
    pub fn new(start: Instant, step: Duration) -> Self {
        Self { start, step, k: 0 }
    }

    /// When the next request is due.
    pub fn due(&self) -> Instant {
        self.start + self.step * self.k
    }

    /// The next request was sent: moves on to the one after.
    pub fn advance(&mut self) {
        self.k += 1;
    }
}

/// One connection's timer.
pub struct Pacer {
    fd: AsyncFd<OwnedFd>,
}

impl Pacer {
    /// A new, disarmed timer (inside a tokio runtime).
    pub fn new() -> std::io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the descriptor is owned by the `AsyncFd` (an `OwnedFd`
        // that always returns the same descriptor), so it stays open and
        // the same for the `AsyncFd`'s whole life.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?;
        Ok(Self { fd })
    }

    /// Resolves at `due` (at once if it has passed). Cancel-safe: the
    /// next call re-arms the timer.
    pub async fn until(&self, due: Instant) {
        let left = due.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            },
        };
        if timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &spec).is_err() {
            // No timer: fall back to tokio's (1 ms steps).
            tokio::time::sleep_until(due.into()).await;
            return;
        }
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                tokio::time::sleep_until(due.into()).await;
                return;
            };
            let mut count = [0u8; 8];
            match rustix::io::read(self.fd.get_ref(), &mut count) {
                Ok(_) => return,
                Err(_) => guard.clear_ready(),
            }
        }
    }
}
