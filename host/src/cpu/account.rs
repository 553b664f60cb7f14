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

/// How much credit an account may bank, or owe: half a second at its share. A capsule
/// mostly idle has banked enough for a task's burst (a tenth of a core banks 50 ms of
/// CPU), while one that has run past its share for a while owes, and is held back the
/// moment others wait.
const BURST: Duration = Duration::from_millis(500);

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
        bucket.settle(self.0.share, allotment, spent, Instant::now())
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
    /// Earns credit for the time since it last looked (at the allotment's rate, or the
    /// share's when nothing holds the capsule back), spends what guest code used since,
    /// and answers how long to pause: never while nothing holds it back, else until
    /// the credit is no longer negative.
    fn settle(
        &mut self,
        share: Millicores,
        allotment: Millicores,
        spent: u64,
        now: Instant,
    ) -> Duration {
        let used = i64::try_from(spent.saturating_sub(self.seen)).unwrap_or(i64::MAX);
        let elapsed = now.saturating_duration_since(self.at);
        self.seen = spent;
        self.at = now;
        let held = allotment != UNLIMITED;
        let rate = i64::from(if held { allotment } else { share }.clamp(1, UNLIMITED - 1));
        let earned = ns(elapsed).saturating_mul(rate) / 1000;
        let most = ns(BURST).saturating_mul(rate) / 1000;
        self.credit = self
            .credit
            .saturating_add(earned)
            .saturating_sub(used)
            .clamp(-most, most);
        if !held || self.credit >= 0 {
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
        let pause = b.settle(100, 500, 40_000_000, t0 + Duration::from_millis(100));
        assert_eq!(pause, Duration::ZERO);
    }

    #[test]
    fn past_the_allotment_the_pause_brings_the_rate_back_to_it() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        // 100 millicores; a guest spun 10 ms of a 10 ms tick: it owes 9 ms of CPU,
        // which takes 90 ms to earn at a tenth of a core.
        let pause = b.settle(100, 100, 10_000_000, t0 + Duration::from_millis(10));
        assert_eq!(pause, Duration::from_millis(90));
        // After pausing that long it is even, and runs its next tick.
        let pause = b.settle(100, 100, 10_000_000, t0 + Duration::from_millis(100));
        assert_eq!(pause, Duration::ZERO);
    }

    #[test]
    fn a_pause_is_never_longer_than_the_deadline_check_allows() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        let pause = b.settle(1, 1, 10_000_000_000, t0 + Duration::from_millis(10));
        assert_eq!(pause, LONGEST_PAUSE);
    }

    #[test]
    fn idle_time_banks_a_burst_at_the_share_and_no_more() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        // A minute idle at a tenth of a core banks 50 ms of CPU, not 6 s: a task's
        // burst of 40 ms passes when others wait, one of 80 ms owes 30 ms.
        let _ = b.settle(100, UNLIMITED, 0, t0 + Duration::from_secs(60));
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.settle(100, 100, 40_000_000, later), Duration::ZERO);
        let pause = b.settle(100, 100, 80_000_000, later);
        assert_eq!(pause, Duration::from_millis(250));
    }

    #[test]
    fn running_past_the_share_unheld_runs_up_a_debt_paid_once_others_wait() {
        let t0 = Instant::now();
        let mut b = bucket(t0);
        // A second spinning alone, at a tenth of a core: no pause, but it owes its
        // bound (50 ms of CPU), so it is held back at once when others wait.
        let second = t0 + Duration::from_secs(1);
        assert_eq!(
            b.settle(100, UNLIMITED, 1_000_000_000, second),
            Duration::ZERO
        );
        assert_eq!(b.credit, -50_000_000);
        let pause = b.settle(100, 100, 1_010_000_000, second + Duration::from_millis(10));
        assert_eq!(pause, LONGEST_PAUSE);
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
