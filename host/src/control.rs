//! Cancelling the running task. `tasks/cancel` and `mur stop` raise the flag; every
//! wait of the session host (an inference call, a tool call) races against it, so a
//! canceled task stops at once instead of after its current turn.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

#[derive(Default)]
pub struct RunningTask {
    id: Mutex<Option<String>>,
    canceled: AtomicBool,
    notify: Notify,
}

impl RunningTask {
    fn id(&self) -> MutexGuard<'_, Option<String>> {
        self.id.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn start(&self, task_id: &str) {
        *self.id() = Some(task_id.to_string());
        self.canceled.store(false, Ordering::SeqCst);
    }

    pub fn end(&self) {
        *self.id() = None;
        self.canceled.store(false, Ordering::SeqCst);
    }

    pub fn is(&self, task_id: &str) -> bool {
        self.id().as_deref() == Some(task_id)
    }

    /// Cancels the running task if it is `task_id` (any task when `None`).
    pub fn cancel(&self, task_id: Option<&str>) -> bool {
        let id = self.id();
        let hit = match (id.as_deref(), task_id) {
            (Some(running), Some(wanted)) => running == wanted,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if hit {
            self.canceled.store(true, Ordering::SeqCst);
            self.notify.notify_waiters();
        }
        hit
    }

    pub fn is_canceled(&self) -> bool {
        self.canceled.load(Ordering::SeqCst)
    }

    /// Completes once the running task is canceled.
    pub async fn canceled(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_canceled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn cancel_wakes_a_waiter_only_for_the_running_task() {
        let task = std::sync::Arc::new(RunningTask::default());
        task.start("tsk_a");
        let mut waiter = tokio::spawn({
            let task = task.clone();
            async move { task.canceled().await }
        });
        // This runtime has one thread: the waiter runs, and parks on the flag, only
        // while this test yields.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the waiter is waiting");
        assert!(!task.cancel(Some("tsk_b")));
        assert!(!task.is_canceled());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut waiter)
                .await
                .is_err(),
            "a cancel of another task woke the waiter"
        );
        assert!(task.cancel(Some("tsk_a")));
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        task.end();
        assert!(!task.is_canceled());
        assert!(!task.cancel(None));
    }
}
