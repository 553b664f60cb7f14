//! One store's meter: charges its capsule's account with the thread CPU time its
//! guest code runs for, at each epoch tick. Guest code resumes after a tick's yield
//! with a mark (its thread and that thread's CPU time); the next tick charges the
//! difference. Between them the guest may have awaited the host (a model, a tool) and
//! resumed elsewhere: a mark from another thread charges nothing, and one more than a
//! tick old charges at most a tick, since what its thread did meanwhile was not the
//! guest's. So a guest that computes is charged what it uses, and a guest that mostly
//! waits is charged at most a tick per resumption; the last stretch of each call,
//! after its last tick, is not charged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::clock;
use super::{Account, tick, ticks};

/// Cheap to clone: the tick's future marks the store's meter when guest code resumes.
#[derive(Clone)]
pub struct Meter {
    account: Account,
    mark: Arc<Mark>,
}

/// Where guest code last resumed: a thread (0: none), its CPU time, and the tick.
#[derive(Default)]
struct Mark {
    thread: AtomicU64,
    at_ns: AtomicU64,
    tick: AtomicU64,
}

impl Mark {
    fn set(&self) {
        self.at_ns.store(clock::thread_cpu_ns(), Ordering::Relaxed);
        self.tick.store(ticks(), Ordering::Relaxed);
        self.thread.store(clock::thread(), Ordering::Relaxed);
    }

    /// The guest's CPU time since the mark; clears it.
    fn take(&self) -> u64 {
        let thread = self.thread.swap(0, Ordering::Relaxed);
        if thread == 0 || thread != clock::thread() {
            return 0;
        }
        let used = clock::thread_cpu_ns().saturating_sub(self.at_ns.load(Ordering::Relaxed));
        if ticks().saturating_sub(self.tick.load(Ordering::Relaxed)) > 1 {
            return used.min(u64::try_from(tick().as_nanos()).unwrap_or(u64::MAX));
        }
        used
    }
}

impl Meter {
    pub fn new(account: Account) -> Meter {
        Meter {
            account,
            mark: Arc::new(Mark::default()),
        }
    }

    /// At an epoch tick: charges the guest's time, and hands back what guest code
    /// awaits before it resumes: a plain yield, or a pause when its capsule is past
    /// its allotment. Either way the thread is free meanwhile.
    pub fn tick(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.account.charge_guest(self.mark.take());
        let pause = self.account.pause();
        let meter = self.clone();
        Box::pin(async move {
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                let began = Instant::now();
                tokio::time::sleep(pause).await;
                meter.account.paused(began.elapsed());
            }
            meter.mark.set();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ms: u64) {
        let until = clock::thread_cpu_ns() + ms * 1_000_000;
        while clock::thread_cpu_ns() < until {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_tick_charges_the_guest_time_since_it_resumed() {
        let account = Account::new(1000);
        let meter = Meter::new(account.clone());
        meter.mark.set();
        spin(5);
        drop(meter.tick());
        let charged = account.figures().guest_seconds;
        assert!((0.004..0.020).contains(&charged), "{charged}");
        // Nothing is marked until the yield is over: a second tick charges nothing.
        drop(meter.tick());
        assert_eq!(account.figures().guest_seconds, charged);
    }

    #[test]
    fn a_mark_from_another_thread_charges_nothing() {
        let account = Account::new(1000);
        let meter = Meter::new(account.clone());
        let other = meter.clone();
        std::thread::spawn(move || other.mark.set())
            .join()
            .expect("the marking thread ran");
        spin(10);
        drop(meter.tick());
        assert_eq!(account.figures().guest_seconds, 0.0);
    }

    #[test]
    fn a_mark_older_than_a_tick_charges_at_most_a_tick() {
        let account = Account::new(1000);
        let meter = Meter::new(account.clone());
        meter.mark.set();
        meter.mark.tick.store(0, Ordering::Relaxed);
        crate::cpu::TICKS.fetch_add(5, Ordering::Relaxed);
        spin(30);
        drop(meter.tick());
        let charged = account.figures().guest_seconds;
        assert!(charged <= tick().as_secs_f64() + 1e-9, "{charged}");
    }

    #[tokio::test]
    async fn the_yield_marks_where_the_guest_resumes() {
        let account = Account::new(1000);
        let meter = Meter::new(account.clone());
        meter.tick().await;
        assert_ne!(meter.mark.thread.load(Ordering::Relaxed), 0);
    }
}
