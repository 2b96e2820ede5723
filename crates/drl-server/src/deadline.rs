//! [`Bounded`]: a request deadline whose timer exists only if the request
//! waits.
//!
//! Most requests (a local decision on a body that arrived with its headers)
//! finish on their first poll. A timeout layer would still register a timer
//! per request, plus a boxed future per layer; here the timer is created the
//! first time the request is not ready, with the deadline counted from the
//! request's start.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

pin_project_lite::pin_project! {
    /// `fut`, or `None` once `limit` has passed since `started`.
    #[must_use = "futures do nothing unless polled"]
    pub struct Bounded<F> {
        #[pin]
        fut: F,
        started: Instant,
        // `None`: no limit.
        limit: Option<Duration>,
        // Created on the first `Pending`.
        sleep: Option<Pin<Box<Sleep>>>,
    }
}

/// Runs `fut` until `limit` after `started` (`Duration::ZERO`: no limit).
pub fn bounded<F: Future>(started: Instant, limit: Duration, fut: F) -> Bounded<F> {
    Bounded {
        fut,
        started,
        limit: (!limit.is_zero()).then_some(limit),
        sleep: None,
    }
}

impl<F: Future> Future for Bounded<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Some(v));
        }
        let Some(limit) = *this.limit else {
            return Poll::Pending;
        };
        let sleep = this.sleep.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until((*this.started + limit).into()))
        });
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ready_at_once_needs_no_timer() {
        let mut b = Box::pin(bounded(Instant::now(), Duration::from_millis(5), async {
            7
        }));
        assert_eq!(futures::poll!(b.as_mut()), Poll::Ready(Some(7)));
        assert!(b.sleep.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_future_times_out_at_the_deadline() {
        let started = Instant::now();
        let r = bounded(
            started,
            Duration::from_millis(50),
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(r, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_finishing_before_the_deadline_wins() {
        let r = bounded(Instant::now(), Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            3
        })
        .await;
        assert_eq!(r, Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_means_no_limit() {
        let r = bounded(Instant::now(), Duration::ZERO, async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            1
        })
        .await;
        assert_eq!(r, Some(1));
    }
}
