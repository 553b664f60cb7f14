//! The running task and the scope of one host call about it: `Current` holds the task
//! and the session it runs in, so the call's steps reach both without asking again
//! whether a task runs.

use std::time::Instant;

use super::budget::Calls;
use super::{Deadline, LoopState, Session, trace_failed};
use crate::bindings::message::Message;
use crate::bindings::session_loop::murmur::session::types::Task;
use crate::conversation;
use crate::driver::Driver;
use crate::queue::{Pending, Source};
use crate::trace::Place;
use crate::trace::line::{self, Line, Totals};

/// The task the loop is working on.
pub(super) struct Running {
    pub task: Pending,
    /// Its `task_start` line: parent of its lines.
    pub event_id: String,
    pub started: Instant,
    pub counts: Totals,
    /// The trace line of the latest inference turn: parent of its tool calls.
    pub turn_event: Option<String>,
    /// The seed the task was offered, until its first inference is traced with
    /// whether the request carried it.
    pub seed: Option<Vec<Message>>,
    /// Reopens granted so far (the attempt number is one more).
    pub reopens: u32,
    /// The task's turn count when this attempt began: its statuses count from 1 again.
    pub attempt_start: u64,
    /// `artifact` verdicts of `on-inference` hooks: (hook, JSON object), in order.
    pub hook_artifacts: Vec<(String, String)>,
    /// Their bytes (within `max_hook_artifact_bytes`), and what they are charged to the
    /// capsule's memory budget until the task's end sends them.
    pub artifact_bytes: u64,
    pub artifact_charges: Vec<crate::memory::Charge>,
    /// The feedback of each reopen, for `task.md`: (hook, reason).
    pub feedback: Vec<(String, String)>,
    /// `call-tool` calls: in the task, and since the last `infer` returned.
    pub calls: Calls,
    /// A limit that ended the task (the workdir quota): later calls are refused with
    /// it and the task ends `failed` with it, whatever the loop reports.
    pub breach: Option<String>,
    /// A spend ceiling refused an inference call: the task ends
    /// `spend_ceiling_reached` with this message, and later calls are refused with it.
    pub spent: Option<String>,
}

impl Running {
    fn new(task: Pending, event_id: String) -> Self {
        Running {
            breach: task.breach.clone(),
            task,
            event_id,
            started: Instant::now(),
            counts: Totals::default(),
            turn_event: None,
            seed: None,
            reopens: 0,
            attempt_start: 0,
            hook_artifacts: Vec::new(),
            artifact_bytes: 0,
            artifact_charges: Vec::new(),
            feedback: Vec::new(),
            calls: Calls::default(),
            spent: None,
        }
    }

    /// Where the task's own lines go: under its `task_start`.
    pub fn place(&self) -> Place<'_> {
        Place {
            parent: Some(&self.event_id),
            task: Some(&self.task.id),
        }
    }

    /// The latest turn's line, or the task's before its first turn.
    pub fn turn_parent(&self) -> &str {
        self.turn_event.as_deref().unwrap_or(&self.event_id)
    }
}

/// One host call's view of the running task and the session it runs in.
pub(super) struct Current<'a> {
    pub run: &'a mut Running,
    pub session: &'a Session,
    /// The driver instance, kept across turns until it traps.
    pub driver: &'a mut Option<Driver>,
    deadline: &'a mut Deadline,
    running_since: &'a mut Instant,
}

impl Current<'_> {
    /// A tool or driver call begins: the loop's deadline holds until it returns.
    pub fn hold_deadline(&mut self) {
        self.deadline.hold();
    }

    pub fn resume_deadline(&mut self) {
        self.deadline.resume(self.running_since);
    }

    /// A line under the task's `task_start`; returns its event id.
    pub fn record(&self, line: Line) -> wasmtime::Result<String> {
        self.record_as(crate::ids::event(), line)
    }

    /// [`Current::record`], with the event id chosen as the work began.
    pub fn record_as(&self, event: String, line: Line) -> wasmtime::Result<String> {
        self.session
            .trace
            .write_as(event, self.run.place(), line)
            .map_err(trace_failed)
    }

    /// A line under the latest turn's `inference` line.
    pub fn record_under_turn(&self, line: Line) -> wasmtime::Result<()> {
        self.record_under_turn_as(None, line)
    }

    /// [`Current::record_under_turn`], with the event id chosen as the call began.
    pub fn record_under_turn_as(&self, event: Option<String>, line: Line) -> wasmtime::Result<()> {
        let place = Place {
            parent: Some(self.run.turn_parent()),
            task: Some(&self.run.task.id),
        };
        let event = event.unwrap_or_else(crate::ids::event);
        self.session
            .trace
            .write_as(event, place, line)
            .map(|_| ())
            .map_err(trace_failed)
    }
}

impl LoopState {
    /// The running task, for a host call that needs one; `None` between tasks.
    pub(super) fn current(&mut self) -> Option<Current<'_>> {
        let run = self.running.as_mut()?;
        Some(Current {
            run,
            session: &self.session,
            driver: &mut self.driver,
            deadline: &mut self.deadline,
            running_since: &mut self.sandbox.running_since,
        })
    }

    /// A task starts: `task.md`, `task_start`, its first frames, and what the loop is
    /// handed: the seed, the context's history and the task.
    pub(super) async fn begin(&mut self, task: Pending) -> wasmtime::Result<Task> {
        let session = &self.session;
        if task.source != Source::TaskMd {
            // The task's text is the capsule's own record of what it was asked.
            let _ = session.write_counted("task.md", &task.text);
        }
        let start = match session.trace.captures_content() {
            true => line::task_start(&task).with_content("text", &task.text),
            false => line::task_start(&task),
        };
        let event_id = session
            .trace
            .under_session(Some(&task.id), start)
            .map_err(trace_failed)?;
        session.wire.begin_task(&task.id, &task.context_id);
        session.running.start(&task.id);
        let history = session.history(&task.context_id);
        self.running = Some(Running::new(task.clone(), event_id));
        let Some(mut current) = self.current() else {
            return Err(wasmtime::Error::msg(
                "the task that just began is not running",
            ));
        };
        let seed = current.task_start_hooks(&task, &history).await?;
        current.run.seed = (!seed.is_empty()).then(|| seed.clone());
        Ok(Task {
            id: task.id,
            context_id: task.context_id,
            origin: task.origin.as_str().into(),
            text: task.text,
            seed,
            history,
        })
    }
}

impl Session {
    /// The context's conversation so far, which a loop puts before a task.
    fn history(&self, context_id: &str) -> Vec<Message> {
        let Some(threads) = &self.threads else {
            return Vec::new();
        };
        let stored = threads.history(context_id, |why| self.workdir.log(&why));
        conversation::all_from_json(&stored).unwrap_or_else(|why| {
            self.workdir.log(&format!(
                "the conversation kept for context {context_id} cannot be read ({why}); \
                 starting it afresh"
            ));
            Vec::new()
        })
    }

    /// A completed task's conversation, as the loop kept it, becomes its context's
    /// history. A failed one leaves the history as it was: it may end in a tool call
    /// nobody answered, which a provider would refuse in the next request.
    /// `Err` only when the records budget refused it (which ends the session); a
    /// conversation that could not be written for another reason is logged.
    pub(super) fn remember(
        &self,
        context_id: &str,
        kept: Option<Vec<Message>>,
    ) -> Result<(), String> {
        let (Some(threads), Some(messages)) = (&self.threads, kept) else {
            return Ok(());
        };
        if let Err(why) = threads.keep(context_id, conversation::all_to_json(&messages)) {
            self.workdir.log(&why);
            if self.records.failure().is_some() {
                return Err(why);
            }
        }
        Ok(())
    }
}
