//! Wall-clock deadlines of component calls. The epoch callback of `sandbox::limit`
//! stops guest code that spins; it cannot stop a guest that waits in a host future
//! (a WASI clock sleep, a blocked host call). So every call is also raced against a
//! clock here, and on expiry its future, and with it the store, is dropped.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a component that ran out of time is told, whichever of the two stopped it.
pub fn exceeded(limit: Duration) -> String {
    format!(
        "deadline exceeded: the component ran for more than {} s without returning",
        limit.as_secs_f64()
    )
}

/// A deadline that can be paused while the host waits on someone else's time (a
/// person answering `request-input`, a loop parked in `next-task`) and started again,
/// or held while a call with a deadline of its own runs and then resumed.
pub struct Clock {
    limit: Duration,
    span: Mutex<Span>,
    changed: Notify,
}

#[derive(Default)]
struct Span {
    /// When the clock last started or resumed; `None` while paused or held.
    since: Option<Instant>,
    /// Time counted before a hold.
    spent: Duration,
}

impl Clock {
    /// A clock that is paused until `start`.
    pub fn new(limit: Duration) -> Self {
        Clock {
            limit,
            span: Mutex::new(Span::default()),
            changed: Notify::new(),
        }
    }

    /// A clock that runs from now.
    pub fn running(limit: Duration) -> Self {
        let clock = Clock::new(limit);
        clock.start();
        clock
    }

    fn span(&self) -> MutexGuard<'_, Span> {
        self.span.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The full limit counts again from now.
    pub fn start(&self) {
        *self.span() = Span {
            since: Some(Instant::now()),
            spent: Duration::ZERO,
        };
        self.changed.notify_waiters();
    }

    /// No deadline until the next `start`.
    pub fn pause(&self) {
        *self.span() = Span::default();
        self.changed.notify_waiters();
    }

    /// Stops counting, keeping what was counted, until `resume`.
    pub fn hold(&self) {
        let mut span = self.span();
        if let Some(since) = span.since.take() {
            span.spent += since.elapsed();
        }
        self.changed.notify_waiters();
    }

    /// Counts again after a `hold`, from what was counted before it.
    pub fn resume(&self) {
        let mut span = self.span();
        if span.since.is_none() {
            span.since = Some(Instant::now());
        }
        drop(span);
        self.changed.notify_waiters();
    }

    /// Completes once the running span is older than the limit.
    pub async fn expired(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let at = {
                let span = self.span();
                let left = self.limit.saturating_sub(span.spent);
                span.since.map(|since| since + left)
            };
            match at {
                Some(at) if at <= Instant::now() => return,
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// `call`'s output, or `None` when the clock expired first (`call` is dropped).
    pub async fn bound<F: Future>(&self, call: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            out = call => Some(out),
            () = self.expired() => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn a_running_clock_expires_after_its_limit_and_a_paused_one_never() {
        let clock = Clock::running(MS * 200);
        let started = Instant::now();
        assert_eq!(clock.bound(tokio::time::sleep(MS * 5000)).await, None);
        let took = started.elapsed();
        assert!(took >= MS * 200 && took < MS * 2000, "{took:?}");

        let paused = Clock::new(MS * 100);
        let out = paused.bound(async {
            tokio::time::sleep(MS * 400).await;
            7
        });
        assert_eq!(out.await, Some(7));
    }

    #[tokio::test]
    async fn a_restart_gives_the_full_limit_again() {
        let clock = Arc::new(Clock::running(MS * 300));
        let restarter = clock.clone();
        let call = async move {
            tokio::time::sleep(MS * 200).await;
            restarter.pause();
            tokio::time::sleep(MS * 500).await;
            restarter.start();
            tokio::time::sleep(MS * 5000).await;
        };
        let started = Instant::now();
        assert_eq!(clock.bound(call).await, None);
        let took = started.elapsed();
        assert!(took >= MS * 1000 && took < MS * 3000, "{took:?}");
    }

    #[tokio::test]
    async fn a_hold_keeps_what_was_counted() {
        let clock = Arc::new(Clock::running(MS * 400));
        let holder = clock.clone();
        let call = async move {
            tokio::time::sleep(MS * 200).await;
            holder.hold();
            tokio::time::sleep(MS * 600).await;
            holder.resume();
            tokio::time::sleep(MS * 5000).await;
        };
        let started = Instant::now();
        assert_eq!(clock.bound(call).await, None);
        let took = started.elapsed();
        assert!(took >= MS * 1000 && took < MS * 2500, "{took:?}");
    }

    #[test]
    fn the_text_names_the_limit() {
        assert_eq!(
            exceeded(Duration::from_secs(2)),
            "deadline exceeded: the component ran for more than 2 s without returning"
        );
    }
}
