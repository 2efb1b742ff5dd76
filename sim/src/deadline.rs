//! A deadline that puts one timer in madsim's timer heap however often it is polled.
//!
//! madsim's `Sleep` adds a timer entry (a callback that wakes the polling task) on every
//! poll that finds it pending, and its timers cannot be cancelled: a `timeout` around an
//! RPC whose task is woken three times before the answer leaves three entries, each
//! popped at the deadline to wake a task that may have finished long before. The entries
//! after the first wake the same task at the same instant, which the first one already
//! did: they change nothing but the heap's size and the time spent in it.
//! ([`Deadline`] and [`timeout`] keep the first.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Ready once `duration` from its creation has passed. Registers its timer at the first
/// poll that finds it pending, with that poll's waker; later polls only read the clock.
/// Meant for a future that one task polls from start to end (a deadline moved to another
/// task would wake the first one).
#[derive(Debug)]
pub struct Deadline {
    sleep: madsim::time::Sleep,
    armed: bool,
}

impl Deadline {
    /// A deadline `duration` from now (simulated time).
    pub fn after(duration: Duration) -> Self {
        Self {
            sleep: madsim::time::sleep(duration),
            armed: false,
        }
    }

    /// A deadline at `at` (simulated time).
    pub fn at(at: madsim::time::Instant) -> Self {
        Self {
            sleep: madsim::time::sleep_until(at),
            armed: false,
        }
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        self.sleep.is_elapsed()
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.sleep.is_elapsed() {
            return Poll::Ready(());
        }
        if self.armed {
            return Poll::Pending;
        }
        self.armed = true;
        Pin::new(&mut self.sleep).poll(cx)
    }
}

/// `future`, or `None` once `duration` has passed first: madsim's `time::timeout` (the
/// future polled before the deadline at every turn) with one timer instead of one per
/// pending poll.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Option<F::Output> {
    let deadline = Deadline::after(duration);
    tokio::select! {
        // `biased`: tokio picks branches with a thread-local RNG otherwise, which would
        // break replay; the future first, as madsim's `timeout` polls it.
        biased;
        output = future => Some(output),
        () = deadline => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// Counts its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `future` `polls` times with a counting waker while it is pending, lets the
    /// clock pass `after`, and returns how many wakes its timers delivered.
    async fn wakes_after_polls<F: Future + Unpin>(
        mut future: F,
        polls: usize,
        after: u64,
    ) -> usize {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        for _ in 0..polls {
            assert!(Pin::new(&mut future).poll(&mut cx).is_pending());
        }
        madsim::time::sleep(Duration::from_millis(after)).await;
        counter.0.load(Ordering::SeqCst)
    }

    #[test]
    fn a_deadline_polled_often_wakes_once_where_a_sleep_wakes_per_poll() {
        madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default()).block_on(
            async {
                let ms = Duration::from_millis(100);
                let sleep = wakes_after_polls(Box::pin(madsim::time::sleep(ms)), 5, 101).await;
                assert_eq!(
                    sleep, 5,
                    "madsim's Sleep registers a timer per pending poll"
                );
                let deadline = wakes_after_polls(Deadline::after(ms), 5, 101).await;
                assert_eq!(deadline, 1);
                // Not ready before its time, ready after.
                let mut early = Deadline::after(ms);
                assert_eq!(wakes_after_polls(&mut early, 1, 99).await, 0);
                assert!(!early.is_elapsed());
                madsim::time::sleep(Duration::from_millis(1)).await;
                assert!(early.is_elapsed());
                assert_eq!(early.await, ());
            },
        );
    }

    #[test]
    fn timeout_answers_the_future_first_and_none_after_the_deadline() {
        madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default()).block_on(
            async {
                let ms = Duration::from_millis;
                assert_eq!(timeout(ms(10), async { 7 }).await, Some(7));
                let late = madsim::time::sleep(ms(20));
                assert_eq!(timeout(ms(10), late).await, None);
                // Both ready at the same instant: the future wins, as in madsim's timeout.
                let tie = madsim::time::sleep(ms(10));
                assert_eq!(timeout(ms(10), tie).await, Some(()));
            },
        );
    }
}
