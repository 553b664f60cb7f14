//! Shares between the capsules of one `mur serve`: the threads guest code runs on,
//! apart from the host's own, and the allotment each capsule is held to, set anew
//! every sampling window.
//!
//! - When the host's own work (serving the wire) waited for a processor and another
//!   capsule was busy within the last second, every capsule is held to its share: a
//!   capsule alone is never held back for its own frames.
//! - When only guests compete, their threads are divided by weight (the shares), and
//!   no capsule is held below its share.
//! - Otherwise nothing is held back: a capsule alone may use every idle processor.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::account::Inner;
use super::pressure::Pressure;
use super::{Account, Millicores, UNLIMITED};
use crate::error::Error;

/// How often allotments are set: long enough to measure a rate, short enough that a
/// neighbour's burst is answered within a few ticks.
const WINDOW: Duration = Duration::from_millis(100);

/// A capsule using less than this is not competing.
const ACTIVE: Millicores = 10;

/// Windows a capsule counts as busy after it last used `ACTIVE`: a second, so the
/// host's delivery of its last frames still counts as its work.
const BUSY_WINDOWS: u32 = 10;

pub struct Scheduler {
    accounts: Mutex<Vec<Weak<Inner>>>,
    guests: tokio::runtime::Handle,
    threads: u32,
    source: &'static str,
}

impl Scheduler {
    /// Starts the guests' threads, one per processor, and the sampling thread.
    pub fn start() -> Result<Arc<Scheduler>, Error> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::try_from(threads).unwrap_or(1))
            .thread_name("mur-guest")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::new(
                    "E-SERVE-020",
                    format!("could not start the threads guest code runs on: {e}"),
                )
            })?;
        let guests = runtime.handle().clone();
        // The guests' threads live as long as the server; a runtime dropped inside
        // async code would panic, so it is never dropped.
        std::mem::forget(runtime);
        let pressure = Pressure::new(threads);
        let scheduler = Arc::new(Scheduler {
            accounts: Mutex::new(Vec::new()),
            guests,
            threads,
            source: pressure.source(),
        });
        let weak = Arc::downgrade(&scheduler);
        std::thread::Builder::new()
            .name("mur-shares".into())
            .spawn(move || sample(&weak, pressure))
            .map_err(|e| {
                Error::new(
                    "E-SERVE-020",
                    format!("could not start the CPU sampling thread: {e}"),
                )
            })?;
        Ok(scheduler)
    }

    /// What tells the scheduler that others wait, as the README names it.
    pub fn source(&self) -> &'static str {
        self.source
    }

    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// A new capsule's account, held to `share` millicores when others wait.
    pub fn account(&self, share: Millicores) -> Account {
        let account = Account::new(share);
        let mut accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        accounts.retain(|a| a.strong_count() > 0);
        accounts.push(Arc::downgrade(account.inner()));
        account
    }

    /// Runs a capsule's session on the guests' threads.
    pub fn spawn<F>(&self, session: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.guests.spawn(session));
    }

    fn live(&self) -> Vec<Arc<Inner>> {
        let accounts = self.accounts.lock().unwrap_or_else(PoisonError::into_inner);
        accounts.iter().filter_map(Weak::upgrade).collect()
    }
}

fn sample(scheduler: &Weak<Scheduler>, mut pressure: Pressure) {
    let mut last = Instant::now();
    // Windows since each account was last busy, by its address.
    let mut idle: std::collections::HashMap<usize, u32> = std::collections::HashMap::new();
    loop {
        std::thread::sleep(WINDOW);
        let Some(scheduler) = scheduler.upgrade() else {
            return;
        };
        let window = last.elapsed();
        last = Instant::now();
        let host_waited = pressure.host_waited(window);
        let accounts = scheduler.live();
        let used: Vec<Millicores> = accounts.iter().map(|a| rate(a, window)).collect();
        let shares: Vec<Millicores> = accounts.iter().map(|a| a.share).collect();
        let busy: Vec<bool> = accounts
            .iter()
            .zip(&used)
            .map(|(a, &u)| {
                let windows = idle.entry(Arc::as_ptr(a) as usize).or_insert(BUSY_WINDOWS);
                *windows = if u >= ACTIVE {
                    0
                } else {
                    windows.saturating_add(1)
                };
                *windows < BUSY_WINDOWS
            })
            .collect();
        idle.retain(|k, _| accounts.iter().any(|a| Arc::as_ptr(a) as usize == *k));
        let contended: Vec<bool> = (0..accounts.len())
            .map(|i| host_waited && busy.iter().enumerate().any(|(j, &b)| b && j != i))
            .collect();
        let allotments = allot(&shares, &used, &contended, scheduler.threads);
        for (account, allotment) in accounts.iter().zip(allotments) {
            account
                .allotment
                .store(allotment, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The guest CPU an account used in the window, in millicores; resets the window.
fn rate(account: &Inner, window: Duration) -> Millicores {
    let ns = account
        .window_ns
        .swap(0, std::sync::atomic::Ordering::Relaxed);
    let per_sec = ns as f64 / window.as_secs_f64().max(1e-3);
    // A rate in millicores fits u32 for any real machine; past it, saturate.
    (per_sec / 1e6).min(f64::from(u32::MAX - 1)) as Millicores
}

/// Each account's allotment, from its share, what it used in the last window, and
/// whether the host waited while another capsule was busy (`contended`).
fn allot(
    shares: &[Millicores],
    used: &[Millicores],
    contended: &[bool],
    threads: u32,
) -> Vec<Millicores> {
    let capacity = u64::from(threads) * 1000;
    let busy: u64 = used.iter().map(|&u| u64::from(u)).sum();
    let filled = busy + 250 >= capacity;
    let divided = divide(shares, used, capacity);
    (0..shares.len())
        .map(|i| {
            if contended[i] {
                shares[i]
            } else if filled {
                divided[i]
            } else {
                UNLIMITED
            }
        })
        .collect()
}

/// The guests' threads divided by weight among those using them; none below its share.
fn divide(shares: &[Millicores], used: &[Millicores], capacity: u64) -> Vec<Millicores> {
    let weights: u64 = shares
        .iter()
        .zip(used)
        .filter(|(_, u)| **u >= ACTIVE)
        .map(|(&s, _)| u64::from(s.min(capacity as Millicores)))
        .sum::<u64>()
        .max(1);
    shares
        .iter()
        .zip(used)
        .map(|(&share, &u)| {
            if u < ACTIVE {
                return UNLIMITED;
            }
            let weighted = capacity * u64::from(share.min(capacity as Millicores)) / weights;
            Millicores::try_from(weighted)
                .unwrap_or(UNLIMITED - 1)
                .max(share)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_host_waited_beside_a_busy_neighbour_a_capsule_is_held_to_its_share() {
        assert_eq!(
            allot(&[100, 500], &[1000, 0], &[true, true], 2),
            vec![100, 500]
        );
        // The busy one alone is not held back for its own frames.
        assert_eq!(
            allot(&[100, 500], &[1000, 0], &[false, true], 2),
            vec![UNLIMITED, 500]
        );
    }

    #[test]
    fn a_capsule_alone_on_idle_processors_is_not_held_back() {
        assert_eq!(
            allot(&[100, 100], &[1000, 20], &[false, false], 2),
            vec![UNLIMITED, UNLIMITED]
        );
    }

    #[test]
    fn guests_that_fill_their_threads_divide_them_by_weight() {
        // Three spinners on two threads, weights 1:1:2.
        assert_eq!(
            allot(&[100, 100, 200], &[667, 667, 666], &[false; 3], 2),
            vec![500, 500, 1000]
        );
        // An idle capsule takes no part in the division.
        assert_eq!(
            allot(&[100, 100, 300], &[1000, 1000, 0], &[false; 3], 2),
            vec![1000, 1000, UNLIMITED]
        );
    }

    #[test]
    fn nobody_is_held_below_its_share() {
        assert_eq!(
            allot(&[1500, 100], &[1000, 1000], &[false; 2], 2),
            vec![1875, 125]
        );
        assert_eq!(allot(&[3000, 10], &[1000, 1000], &[false; 2], 2)[1], 10);
    }
}
