//! Cancelling a task and stopping the session. `tasks/cancel` and `mur stop` raise the
//! running task's flag; every wait of the session host (an inference call, a tool call)
//! races against it, so a canceled task stops at once instead of after its current
//! turn. A task still queued ends at once; the record of finished tasks tells a task
//! that ended from one never seen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::exit_status::ExitStatus;
use crate::queue::Queue;
use crate::trace::{SessionTrace, line};
use crate::wire::Wire;

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

    /// The id of the task running now.
    pub fn current(&self) -> Option<String> {
        self.id().clone()
    }

    /// Whether a task is running now.
    pub fn busy(&self) -> bool {
        self.id().is_some()
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

/// A task that ended, for `tasks/cancel` and the launcher's exit status and answer.
#[derive(Clone, Debug)]
pub struct Finished {
    pub task_id: String,
    pub exit_status: ExitStatus,
    pub completed: bool,
    /// The answer, or `error: <message>`, as written to `out/result.txt`.
    pub result: String,
}

/// The tasks that ended: every id (for `tasks/cancel`), and the last one whole. A
/// capsule that serves for months keeps an id per task, never every answer.
#[derive(Default)]
pub struct FinishedTasks {
    state: Mutex<Ended>,
}

#[derive(Default)]
struct Ended {
    ids: std::collections::HashSet<String>,
    last: Option<Finished>,
}

impl FinishedTasks {
    fn state(&self) -> MutexGuard<'_, Ended> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, task: Finished) {
        let mut state = self.state();
        state.ids.insert(task.task_id.clone());
        state.last = Some(task);
    }

    pub fn last(&self) -> Option<Finished> {
        self.state().last.clone()
    }

    /// How many tasks have ended.
    pub fn count(&self) -> usize {
        self.state().ids.len()
    }

    fn contains(&self, task_id: &str) -> bool {
        self.state().ids.contains(task_id)
    }
}

/// Why `tasks/cancel` could not cancel a task.
#[derive(Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No task with that id was ever seen by this capsule.
    NotFound,
    /// The task has already ended.
    NotCancelable,
}

/// `tasks/cancel` and the session's stop, with what they reach: the queue, the running
/// task, the record of finished ones, and the wire and trace that report a queued
/// task's end.
pub struct Control {
    pub queue: Arc<Queue>,
    pub wire: Arc<Wire>,
    pub trace: Arc<SessionTrace>,
    pub running: Arc<RunningTask>,
    pub finished: Arc<FinishedTasks>,
}

impl Control {
    /// `tasks/cancel`: a queued task ends at once, the running one at its next wait
    /// (a loop that reaches none within a short grace is stopped).
    pub fn cancel(&self, task_id: &str) -> Result<(), CancelError> {
        if let Some(task) = self.queue.remove(task_id) {
            self.wire.queued_canceled(&task.id, &task.context_id);
            let _ = self
                .trace
                .under_session(Some(&task.id), line::task_canceled_queued(&task.id));
            return Ok(());
        }
        if self.running.cancel(Some(task_id)) {
            return Ok(());
        }
        if self.finished.contains(task_id) || self.running.is(task_id) {
            return Err(CancelError::NotCancelable);
        }
        Err(CancelError::NotFound)
    }

    /// Ends the session cleanly: no new tasks, waiting ones dropped (each recorded),
    /// the running one canceled. Returns the tasks it canceled, the running one first, for `mur stop` to report.
    pub fn stop(&self) -> Vec<String> {
        self.queue.close();
        let mut queued = Vec::new();
        for task in self.queue.drain() {
            let rejected = line::task_rejected(&task.id, line::Rejected::SessionStopped);
            let _ = self.trace.under_session(Some(&task.id), rejected);
            // The seed's wire says nothing of these; a v1 client waiting on one is told.
            let why = "the session stopped before the task started";
            self.wire
                .tasks()
                .canceled_queued(&task.id, &task.context_id, why);
            queued.push(task.id);
        }
        let mut canceled: Vec<String> = self.running.current().into_iter().collect();
        if !self.running.cancel(None) {
            canceled.clear();
        }
        canceled.extend(queued);
        canceled
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
