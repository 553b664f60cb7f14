//! Stopping a session loop from outside. A loop that sleeps in guest code or waits
//! in a host future never reaches a host call that could notice a cancel, and the
//! epoch deadline fires only while guest code runs. So the loop's whole `run` is
//! raced here against its per-task wall-clock deadline and against a stop or cancel
//! it ignores for longer than a short grace; the loser is dropped, store and all, and
//! the session ends: a loop interrupted mid-way cannot be entered again.
//!
//! Also here: the record of every task the loop never took (it trapped, failed,
//! returned or was interrupted first), so no task disappears without a trace.

use std::time::Duration;

use super::ending::Ending;
use super::{CANCELED, LoopState, Session, trace_failed};
use crate::control::{Finished, RunningTask};
use crate::deadline::Clock;
use crate::error::Error;
use crate::exit_status::ExitStatus;
use crate::queue::{Pending, Queue};
use crate::trace::Place;
use crate::trace::line::{self, Totals};

/// How long a loop has, after a cancel or a stop, to reach a host call or
/// `finish-task` by itself before it is dropped.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Why the host took the loop's `run` away from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Its task (or the time outside `next-task`) outlasted `deadline_seconds`, not
    /// counting the task's tool and driver calls (each has that deadline itself).
    Deadline,
    /// `tasks/cancel` of its task went unanswered for the grace.
    Canceled,
    /// `mur stop` or SIGTERM went unanswered for the grace.
    Stopped,
}

/// The error code of a session that ended at its loop's deadline.
pub const DEADLINE_CODE: &str = "E-RUN-060";

/// Completes when the loop must be interrupted: a cancel of the running task or a
/// stop (the queue closed) it ignores, or its deadline.
pub async fn interrupted(running: &RunningTask, queue: &Queue, clock: &Clock) -> Interrupt {
    tokio::select! {
        () = clock.expired() => Interrupt::Deadline,
        why = ignored_stop(running, queue) => why,
    }
}

/// A stop or a cancel the loop has not honoured within the grace.
async fn ignored_stop(running: &RunningTask, queue: &Queue) -> Interrupt {
    loop {
        tokio::select! {
            () = running.canceled() => {}
            () = queue.closed() => {}
        }
        tokio::time::sleep(GRACE).await;
        // A loop that honoured the cancel has ended the task, which clears the flag.
        if queue.is_closed() {
            return Interrupt::Stopped;
        }
        if running.is_canceled() {
            return Interrupt::Canceled;
        }
    }
}

/// What a loop that spins past its deadline traps with (the epoch callback).
pub fn is_deadline_trap(text: &str) -> bool {
    text.starts_with("deadline exceeded")
}

/// The message of a task stopped at the loop's deadline, for the wire and the result.
pub fn task_deadline_text(limit: Duration) -> String {
    format!(
        "deadline exceeded: the session loop ran for more than {} s on this task, not \
         counting its tool and driver calls (capabilities.limits.deadline_seconds)",
        limit.as_secs_f64()
    )
}

impl LoopState {
    /// Ends the running task, if any, after its loop was interrupted, and says how the
    /// session ends. The task's hooks do not run: nothing may reopen it.
    pub(super) fn interrupted(&mut self, why: Interrupt, label: &str) -> Result<(), Error> {
        // A turn cut off mid-call closes its chunk stream, so frame ids stay in step.
        self.session.wire.after_inference();
        let limit = self.deadline.clock.limit();
        let task = self.running.as_ref().map(|r| r.task.id.clone());
        let (end, result) = match why {
            Interrupt::Deadline => {
                let text = task_deadline_text(limit);
                let message = match &task {
                    Some(id) => format!("{label} stopped at its deadline on task {id}: {text}"),
                    None => format!(
                        "{label} stopped at its deadline: it ran for more than {} s outside \
                         next-task (capabilities.limits.deadline_seconds)",
                        limit.as_secs_f64()
                    ),
                };
                let error = Error::new(DEADLINE_CODE, message).hint(
                    "raise the session loop's capabilities.limits.deadline_seconds, or fix a loop \
                     that sleeps, spins or waits without finishing its task",
                );
                (
                    Ending::failed(text.clone(), text, ExitStatus::Failed),
                    Err(error),
                )
            }
            Interrupt::Canceled => {
                let error = Error::new(
                    "E-RUN-061",
                    format!(
                        "{label} did not return to the host within {} s of {CANCELED}; it was \
                         stopped and the session ends",
                        GRACE.as_secs_f64()
                    ),
                )
                .hint("a session loop must reach a host call or finish-task soon after a cancel");
                (Ending::canceled(), Err(error))
            }
            Interrupt::Stopped => (Ending::canceled(), Ok(())),
        };
        if self.running.is_some() {
            if why == Interrupt::Deadline {
                self.task_failed(&end.message);
            }
            if let Err(e) = self.end_task(end.scrubbed(), None) {
                self.session
                    .workdir
                    .log(&format!("task_end after an interrupt: {e}"));
            }
        }
        result
    }

    /// `task_failed` of the running task: `runtime_error` and why.
    fn task_failed(&mut self, reason: &str) {
        let Some(current) = self.current() else {
            return;
        };
        let failed = line::task_failed(&current.run.task.id, reason);
        if let Err(e) = current.record(failed) {
            current.session.workdir.log(&format!("task_failed: {e}"));
        }
    }
}

impl Session {
    /// Every task still queued when the loop is gone ends `failed` with `why`: its
    /// trace lines (`task_start`, `task_failed`, `task_end`), `out/result.txt`, and
    /// its final status for a `message/stream` client.
    pub(super) fn fail_unstarted(&self, why: &str) {
        let why = crate::secret::scrub(why).into_owned();
        for task in self.queue.drain() {
            if let Err(e) = self.unstarted(&task, &why) {
                self.workdir.log(&format!(
                    "could not record task {} the loop never took: {e}",
                    task.id
                ));
            }
        }
    }

    fn unstarted(&self, task: &Pending, why: &str) -> wasmtime::Result<()> {
        let event = self
            .trace
            .under_session(Some(&task.id), line::task_start(task))
            .map_err(trace_failed)?;
        let place = Place {
            parent: Some(&event),
            task: Some(&task.id),
        };
        let end = Ending::failed(why.to_string(), why.to_string(), ExitStatus::Failed);
        self.trace
            .write(place, line::task_failed(&task.id, why))
            .map_err(trace_failed)?;
        self.write_result(&end.result);
        self.wire.begin_task(&task.id, &task.context_id);
        self.wire.status(end.state, &end.message, None);
        self.wire.end_task();
        let task_end = line::task_end(&task.id, end.exit_status, 0, &Totals::default(), 0);
        let written = self.trace.write(place, task_end);
        self.finished.push(Finished {
            task_id: task.id.clone(),
            exit_status: end.exit_status,
            completed: false,
            result: end.result,
        });
        written.map(|_| ()).map_err(trace_failed)
    }
}
