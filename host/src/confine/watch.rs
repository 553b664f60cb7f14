//! The workdir quota while shell commands run. The file-size rlimit stops one file, not
//! a sum, and the after-call check comes only once a command has ended, so while any
//! command of the session runs, one watcher re-measures the workdir and stops every
//! running command as soon as the workdir is past `capabilities.limits.workdir_bytes`.
//!
//! A size-limited filesystem would stop the write itself, but the workdir may be a
//! `--workdir` project on the user's own filesystem, which mur cannot remount, and a
//! loop mount or a tmpfs needs privileges an ordinary user does not have. So the bound
//! is a rate: a command gets at most its write rate × (interval + walk + kill) past the
//! quota. The interval is [`MIN_INTERVAL`], or [`WALK_SHARE`] walks long when walking
//! the workdir takes longer, so the watcher never spends more than a seventh of a core.
//!
//! The watcher only signals; each command's own task kills its group, as at its
//! deadline, so no group id is ever signalled after its leader was reaped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::quota::{Quota, measure};

/// The shortest wait between two walks: a command writing 20 MiB/s gets about 1 MiB
/// past the quota in it.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// The wait after a walk is at least this many times as long as the walk, so walking
/// takes at most `1 / (WALK_SHARE + 1)` of one core.
pub const WALK_SHARE: u32 = 6;

/// The smallest file a command may always write: one filesystem block.
const MIN_FILE_BYTES: u64 = 4096;

/// The limit every command of the session is stopped at.
pub const LIMIT: &str = "capabilities.limits.workdir_bytes";

/// The session's quota and its running commands; inert until the quota is set.
#[derive(Default)]
pub struct Watch {
    quota: OnceLock<Quota>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: HashMap<u64, Arc<Stop>>,
    next: u64,
    /// Whether the watcher task is alive; it ends at a tick that finds nothing running.
    watching: bool,
}

/// One command's stop signal.
#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    notify: Notify,
}

impl Stop {
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// A running command's place under the watch; dropping it (the command ended) leaves.
pub struct Watched {
    entry: Option<(Arc<Watch>, u64)>,
    stop: Arc<Stop>,
}

impl Watched {
    /// Resolves once the watcher found the workdir past its quota; never for a command
    /// of a session without a quota.
    pub async fn stopped(&self) {
        if self.over_quota() {
            return;
        }
        // `notify_one` stores its permit when nobody waits yet, so a stop between the
        // check above and this await is not lost.
        self.stop.notify.notified().await;
    }

    /// Whether the command was stopped for the quota.
    pub fn over_quota(&self) -> bool {
        self.stop.stopped.load(Ordering::SeqCst)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some((watch, id)) = &self.entry {
            watch.state().running.remove(id);
        }
    }
}

impl Watch {
    /// The session's quota, once its baseline is measured; set once.
    pub fn set_quota(&self, quota: Quota) {
        let _ = self.quota.set(quota);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What one more file may hold before the workdir passes its quota, measured now:
    /// a command's file-size rlimit, so a single file is stopped by the kernel at once.
    /// One block past the room, so a file stopped there is past the quota and reported
    /// as the breach it tried to be. `None` without a quota or when the walk failed.
    pub async fn file_room(&self) -> Option<u64> {
        let quota = self.quota.get()?;
        let root = quota.root.clone();
        let allowed = quota.baseline.saturating_add(quota.limit);
        let measured = tokio::task::spawn_blocking(move || measure(&root, allowed))
            .await
            .ok()?;
        Some(
            allowed
                .saturating_sub(measured.bytes)
                .saturating_add(MIN_FILE_BYTES),
        )
    }

    /// Puts a started command under the watch, starting the watcher if none runs.
    pub fn enter(self: &Arc<Self>) -> Watched {
        let stop = Arc::new(Stop::default());
        let Some(quota) = self.quota.get() else {
            return Watched { entry: None, stop };
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Watched { entry: None, stop };
        };
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.running.insert(id, stop.clone());
        if !state.watching {
            state.watching = true;
            runtime.spawn(watch(self.clone(), quota.clone()));
        }
        Watched {
            entry: Some((self.clone(), id)),
            stop,
        }
    }

    /// At a tick: `true` (and the watcher ends) when no command runs any more.
    fn idle(&self) -> bool {
        let mut state = self.state();
        if state.running.is_empty() {
            state.watching = false;
        }
        !state.watching
    }

    fn stop_all(&self) {
        for stop in self.state().running.values() {
            stop.stop();
        }
    }

    #[cfg(test)]
    fn watching(&self) -> bool {
        self.state().watching
    }
}

/// The watcher: one walk per tick while any command runs, every command stopped at a
/// walk that finds the workdir past its quota.
async fn watch(watch: Arc<Watch>, quota: Quota) {
    let allowed = quota.baseline.saturating_add(quota.limit);
    let mut pace = Pace::default();
    loop {
        tokio::time::sleep(pace.interval()).await;
        if watch.idle() {
            return;
        }
        let started = Instant::now();
        let root = quota.root.clone();
        let measured = tokio::task::spawn_blocking(move || measure(&root, allowed)).await;
        pace.walked(started.elapsed());
        if measured.is_ok_and(|m| m.over) {
            watch.stop_all();
        }
    }
}

/// How long the watcher waits between walks: `MIN_INTERVAL`, or `WALK_SHARE` times the
/// last walk when that is longer (a large `--workdir` project).
#[derive(Debug, Default)]
struct Pace {
    last_walk: Duration,
}

impl Pace {
    fn interval(&self) -> Duration {
        MIN_INTERVAL.max(self.last_walk.saturating_mul(WALK_SHARE))
    }

    fn walked(&mut self, took: Duration) {
        self.last_walk = took;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-watch-{}", crate::ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn watch_of(root: &std::path::Path, limit: u64) -> Arc<Watch> {
        let watch = Arc::new(Watch::default());
        watch.set_quota(Quota {
            root: root.to_path_buf(),
            baseline: measure(root, u64::MAX).bytes,
            limit,
        });
        watch
    }

    #[test]
    fn the_interval_is_the_minimum_until_walks_get_long() {
        let mut pace = Pace::default();
        assert_eq!(pace.interval(), MIN_INTERVAL);
        pace.walked(Duration::from_millis(5));
        assert_eq!(pace.interval(), MIN_INTERVAL);
        pace.walked(Duration::from_millis(100));
        assert_eq!(pace.interval(), Duration::from_millis(600));
        // Walking then takes a seventh of the time: 100 ms of every 700.
        pace.walked(Duration::from_millis(1));
        assert_eq!(pace.interval(), MIN_INTERVAL, "it follows the last walk");
        pace.walked(Duration::MAX);
        assert_eq!(pace.interval(), Duration::MAX, "no overflow");
    }

    #[test]
    fn without_a_quota_nothing_is_watched() {
        let watch = Arc::new(Watch::default());
        let watched = watch.enter();
        assert!(watched.entry.is_none());
        assert!(!watch.watching());
    }

    #[tokio::test]
    async fn the_watcher_runs_only_while_commands_run() {
        let dir = scratch();
        let watch = watch_of(&dir, 1 << 20);
        let first = watch.enter();
        let second = watch.enter();
        assert!(watch.watching());
        drop(first);
        tokio::time::sleep(MIN_INTERVAL * 3).await;
        assert!(watch.watching(), "one command still runs");
        drop(second);
        // Polled, not slept for: a busy machine may delay the watcher's next tick.
        for _ in 0..200 {
            if !watch.watching() {
                break;
            }
            tokio::time::sleep(MIN_INTERVAL).await;
        }
        assert!(!watch.watching(), "nothing runs: the watcher ended");
        let again = watch.enter();
        assert!(watch.watching(), "a new command starts it again");
        assert!(!again.over_quota());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn every_running_command_is_stopped_past_the_quota() {
        let dir = scratch();
        let watch = watch_of(&dir, 64 << 10);
        let (a, b) = (watch.enter(), watch.enter());
        std::fs::write(dir.join("big"), vec![1u8; 100 << 10]).unwrap();
        let both = async { tokio::join!(a.stopped(), b.stopped()) };
        tokio::time::timeout(Duration::from_secs(20), both)
            .await
            .expect("both stopped");
        assert!(a.over_quota() && b.over_quota());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn the_file_room_is_what_is_left_and_one_block() {
        let dir = scratch();
        let watch = watch_of(&dir, 64 << 10);
        assert_eq!(watch.file_room().await, Some((64 << 10) + MIN_FILE_BYTES));
        std::fs::write(dir.join("a"), vec![1u8; 16 << 10]).unwrap();
        assert_eq!(watch.file_room().await, Some((48 << 10) + MIN_FILE_BYTES));
        std::fs::write(dir.join("b"), vec![1u8; 100 << 10]).unwrap();
        assert_eq!(
            watch.file_room().await,
            Some(MIN_FILE_BYTES),
            "over: one block"
        );
        assert_eq!(Watch::default().file_room().await, None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
