//! [`race`]: two futures, the second polled only when it asked to be.
//!
//! A connection's task is woken once or more per request, always for its
//! I/O. `tokio::select!` would poll every branch on every wake: the idle
//! timer, the eviction `Notify` and the shutdown `watch` cost about 200
//! instructions per request between them, for signals that fire once in
//! a connection's life. Here the side future gets its own waker, which
//! sets a flag before waking the task; the side is polled on the first
//! poll and then only after that flag was set.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Which of the two finished first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Either<A, B> {
    /// The main future.
    Main(A),
    /// The side future.
    Side(B),
}

/// Wakes the task after marking the side future as due.
#[derive(Debug, Default)]
struct Flag {
    due: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.due.store(true, Ordering::Release);
        self.task.wake();
    }
}

pin_project_lite::pin_project! {
    /// See [`race`].
    #[must_use = "futures do nothing unless polled"]
    pub struct Race<A, B> {
        #[pin]
        main: A,
        #[pin]
        side: B,
        flag: Arc<Flag>,
        // The side's waker (wraps `flag`), made once.
        side_waker: Waker,
        // The task waker last given to `flag`.
        task: Option<Waker>,
    }
}

/// Polls `main` on every poll and `side` on the first poll and after each
/// of its own wakes; resolves with whichever finishes first (`main` when
/// both are ready on the same poll).
pub fn race<A: Future, B: Future>(main: A, side: B) -> Race<A, B> {
    let flag = Arc::new(Flag {
        due: AtomicBool::new(true),
        task: AtomicWaker::new(),
    });
    Race {
        main,
        side,
        side_waker: Waker::from(flag.clone()),
        flag,
        task: None,
    }
}

impl<A: Future, B: Future> Future for Race<A, B> {
    type Output = Either<A::Output, B::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.main.poll(cx) {
            return Poll::Ready(Either::Main(v));
        }
        // The side wakes whichever task polls us now.
        if !this.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            this.flag.task.register(cx.waker());
            *this.task = Some(cx.waker().clone());
        }
        // One load on the usual poll; the swap only when due.
        if this.flag.due.load(Ordering::Acquire) && this.flag.due.swap(false, Ordering::AcqRel) {
            let mut side_cx = Context::from_waker(this.side_waker);
            if let Poll::Ready(v) = this.side.poll(&mut side_cx) {
                return Poll::Ready(Either::Side(v));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A future's controls: how often it was polled, whether it is ready,
    /// and the waker of its last pending poll.
    #[derive(Default)]
    struct Probe {
        polls: AtomicUsize,
        open: AtomicBool,
        waker: parking_lot::Mutex<Option<Waker>>,
    }

    impl Probe {
        fn gate(&self) -> Gate<'_> {
            Gate(self)
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::Relaxed)
        }

        /// Makes it ready and wakes whoever polled it last.
        fn open(&self) {
            self.open.store(true, Ordering::Relaxed);
            self.waker.lock().take().unwrap().wake();
        }
    }

    /// The future a [`Probe`] controls.
    struct Gate<'a>(&'a Probe);

    impl Future for Gate<'_> {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.polls.fetch_add(1, Ordering::Relaxed);
            if self.0.open.load(Ordering::Relaxed) {
                return Poll::Ready(());
            }
            *self.0.waker.lock() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Counts the wakes of a task.
    #[derive(Default)]
    pub(crate) struct Count(pub(crate) AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Count {
        /// A counter and a waker that counts into it.
        pub(crate) fn waker() -> (Arc<Self>, Waker) {
            let c = Arc::new(Self::default());
            (c.clone(), Waker::from(c))
        }

        pub(crate) fn wakes(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn the_side_is_polled_first_then_only_when_it_woke() {
        let (main, side) = (Probe::default(), Probe::default());
        let mut r = std::pin::pin!(race(main.gate(), side.gate()));
        let (task, waker) = Count::waker();
        let mut cx = Context::from_waker(&waker);

        assert!(r.as_mut().poll(&mut cx).is_pending());
        assert_eq!(side.polls(), 1, "polled on the first poll");
        // The main future woke the task: the side is not polled again.
        for _ in 0..10 {
            assert!(r.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(main.polls(), 11);
        assert_eq!(side.polls(), 1);
        // The side's own waker wakes the task, and the next poll polls it.
        side.open();
        assert_eq!(task.wakes(), 1, "the task was woken");
        assert_eq!(r.as_mut().poll(&mut cx), Poll::Ready(Either::Side(())));
        assert_eq!(side.polls(), 2);
    }

    #[test]
    fn the_main_future_wins_a_tie_and_ends_the_race() {
        let (main, side) = (Probe::default(), Probe::default());
        main.open.store(true, Ordering::Relaxed);
        side.open.store(true, Ordering::Relaxed);
        let mut r = std::pin::pin!(race(main.gate(), side.gate()));
        let (_, waker) = Count::waker();
        assert_eq!(
            r.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Ready(Either::Main(()))
        );
        assert_eq!(side.polls(), 0);
    }

    #[test]
    fn a_new_task_waker_is_the_one_woken() {
        let (main, side) = (Probe::default(), Probe::default());
        let mut r = std::pin::pin!(race(main.gate(), side.gate()));
        let ((first, w1), (second, w2)) = (Count::waker(), Count::waker());
        assert!(r.as_mut().poll(&mut Context::from_waker(&w1)).is_pending());
        assert!(r.as_mut().poll(&mut Context::from_waker(&w2)).is_pending());
        side.open();
        assert_eq!(first.wakes(), 0);
        assert_eq!(second.wakes(), 1);
    }

    /// On a runtime: a timer on the side ends a race whose main future
    /// never finishes, and a main future that finishes is not held back.
    #[tokio::test(start_paused = true)]
    async fn a_side_timer_fires_on_a_runtime() {
        let r = race(
            std::future::pending::<()>(),
            tokio::time::sleep(std::time::Duration::from_secs(5)),
        )
        .await;
        assert_eq!(r, Either::Side(()));
        let r = race(
            tokio::time::sleep(std::time::Duration::from_millis(1)),
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(r, Either::Main(()));
    }
}
