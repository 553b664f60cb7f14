//! One capsule's CPU account: what its guests used, how long they were held back, and
//! the allotment they are held to now. Shell commands are held back by the kernel
//! instead (`nice`), and are not in it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Millicores, UNLIMITED};

/// Cheap to clone: every store of the capsule charges the same account.
#[derive(Clone)]
pub struct Account(Arc<Inner>);

pub(super) struct Inner {
    /// What the capsule is sure of when others wait; also its weight among guests.
    pub share: Millicores,
    guest_ns: AtomicU64,
    throttled_ns: AtomicU64,
    /// Guest CPU since the scheduler last looked.
    pub window_ns: AtomicU64,
    /// What the scheduler allows now.
    pub allotment: AtomicU32,
    bucket: Mutex<Bucket>,
}

/// Credit in nanoseconds of CPU: earned at the allotment's rate, spent by guest code.
struct Bucket {
    credit: i64,
    /// The guest time charged when the bucket last looked.
    seen: u64,
    at: Instant,
}

/// An account's figures, as `GET /admin/capsules/<id>` shows them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub share: Millicores,
    pub allotment: Millicores,
    pub guest_seconds: f64,
    pub throttled_seconds: f64,
}

/// How much credit an account may bank: a tenth of a second at its allotment, so a
/// capsule idle for a while cannot then run far past its share in one burst.
const BURST: Duration = Duration::from_millis(100);

/// The longest one pause: the deadline check runs between pauses, so a throttled
/// guest still ends on time.
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

impl Account {
    /// An account held to `share` millicores when others wait.
    pub fn new(share: Millicores) -> Account {
        Account(Arc::new(Inner {
            share,
            guest_ns: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            window_ns: AtomicU64::new(0),
            allotment: AtomicU32::new(UNLIMITED),
            bucket: Mutex::new(Bucket {
                credit: 0,
                seen: 0,
                at: Instant::now(),
            }),
        }))
    }

    pub(super) fn inner(&self) -> &Arc<Inner> {
        &self.0
    }

    /// The `nice` value of the capsule's shell commands: its share's kernel weight.
    pub fn nice(&self) -> i32 {
        let cores = std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        super::nice_for(self.0.share, cores)
    }

    /// Charges guest code's CPU time.
    pub fn charge_guest(&self, ns: u64) {
        self.0.guest_ns.fetch_add(ns, Ordering::Relaxed);
        self.0.window_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn figures(&self) -> Figures {
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        Figures {
            share: self.0.share,
            allotment: self.0.allotment.load(Ordering::Relaxed),
            guest_seconds: secs(&self.0.guest_ns),
            throttled_seconds: secs(&self.0.throttled_ns),
        }
    }

    /// How long guest code should pause now that it has used what was charged: zero
    /// while the capsule is within its allotment.
    pub fn pause(&self) -> Duration {
        let allotment = self.0.allotment.load(Ordering::Relaxed);
        let spent = self.0.guest_ns.load(Ordering::Relaxed);
        let mut bucket = self.0.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        bucket.settle(allotment, spent, Instant::now())
    }

    /// Records a pause actually taken.
    pub fn paused(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.0.throttled_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Bucket {
    /// Earns credit for the time since it last looked, spends what guest code used
    /// since, and answers how long to pause so the credit is no longer negative.
    fn settle(&mut self, allotment: Millicores, spent: u64, now: Instant) -> Duration {
        let used = i64::try_from(spent.saturating_sub(self.seen)).unwrap_or(i64::MAX);
        let elapsed = now.saturating_duration_since(self.at);
        self.seen = spent;
        self.at = now;
        if allotment == UNLIMITED {
            self.credit = 0;
            return Duration::ZERO;
        }
        let rate = i64::from(allotment.max(1));
        let earned = ns(elapsed).saturating_mul(rate) / 1000;
        let most = ns(BURST).saturating_mul(rate) / 1000;
        self.credit = self
            .credit
            .saturating_add(earned)
            .saturating_sub(used)
            .min(most);
        if self.credit >= 0 {
            return Duration::ZERO;
        }
        let owed = self.credit.saturating_neg().saturating_mul(1000) / rate;
        Duration::from_nanos(u64::try_from(owed).unwrap_or(0)).min(LONGEST_PAUSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(at: Instant) -> Bucket {
        Bucket {
            credit: 0,
            seen: 0,
            at,
        }
    }

    #[test]
    fn within_the_allotment_there_is_no_pause() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        // 500 millicores for 100 ms earns 50 ms of CPU; 40 ms was used.
        let pause = b.settle(500, 40_000_000, t0 + Duration::from_millis(100));
        assert_eq!(pause, Duration::ZERO);
    }

    #[test]
    fn past_the_allotment_the_pause_brings_the_rate_back_to_it() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        // 100 millicores; a guest spun 10 ms of a 10 ms tick: it owes 9 ms of CPU,
        // which takes 90 ms to earn at a tenth of a core.
        let pause = b.settle(100, 10_000_000, t0 + Duration::from_millis(10));
        assert_eq!(pause, Duration::from_millis(90));
        // After pausing that long it is even, and runs its next tick.
        let pause = b.settle(100, 10_000_000, t0 + Duration::from_millis(100));
        assert_eq!(pause, Duration::ZERO);
    }

    #[test]
    fn a_pause_is_never_longer_than_the_deadline_check_allows() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        let pause = b.settle(1, 10_000_000_000, t0 + Duration::from_millis(10));
        assert_eq!(pause, LONGEST_PAUSE);
    }

    #[test]
    fn idle_time_banks_at_most_a_burst() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        let _ = b.settle(1000, 0, t0 + Duration::from_secs(60));
        // A minute idle banks 100 ms, not 60 s: 150 ms of spinning owes 50 ms.
        let pause = b.settle(1000, 150_000_000, t0 + Duration::from_secs(60));
        assert_eq!(pause, Duration::from_millis(50));
    }

    #[test]
    fn unlimited_never_pauses_and_forgets_its_debt() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        assert_eq!(b.settle(UNLIMITED, u64::MAX, t0), Duration::ZERO);
        assert_eq!(b.credit, 0);
    }

    #[test]
    fn an_account_sums_guest_and_paused_time() {
        let a = Account::new(250);
        a.charge_guest(1_500_000_000);
        a.paused(Duration::from_millis(500));
        let f = a.figures();
        assert_eq!(f.share, 250);
        assert_eq!(f.allotment, UNLIMITED);
        assert!((f.guest_seconds - 1.5).abs() < 1e-9);
        assert!((f.throttled_seconds - 0.5).abs() < 1e-9);
    }
}
