//! A task's end: how it ends (`Ending`), an `on-task-end` hook's reopen, and the task's
//! last word: `out/result.txt`, hook artifacts, the final status and `task_end`.

use super::current::Current;
use super::{CANCELED, LoopState, Session, trace_failed};
use crate::bindings::message::Message;
use crate::bindings::session_loop::murmur::session::types::{InferenceError, TaskOutcome};
use crate::control::Finished;
use crate::exit_status::ExitStatus;
use crate::frames::{ArtifactFrame, State};
use crate::handed;
use crate::limits::Limits;
use crate::trace::line::{self, Reopened};

/// How a task ends on the wire, in the trace and in `out/result.txt`.
pub(super) struct Ending {
    pub state: State,
    pub message: String,
    pub result: String,
    pub exit_status: ExitStatus,
}

impl Ending {
    fn of(outcome: TaskOutcome, max_turns: u32) -> Self {
        match outcome {
            TaskOutcome::Completed(answer) => Ending {
                state: State::Completed,
                message: "session ended".into(),
                result: answer,
                exit_status: ExitStatus::Ok,
            },
            TaskOutcome::InferenceFailed(InferenceError::Invocation(e)) => {
                let message = format!("driver invocation failed: {e}");
                Ending::failed(message.clone(), message, ExitStatus::Failed)
            }
            TaskOutcome::InferenceFailed(InferenceError::Failed(e)) => {
                Ending::failed("session ended".into(), e, ExitStatus::Failed)
            }
            // The seed writes no final status here; we name the error so no client hangs.
            TaskOutcome::InferenceFailed(InferenceError::Malformed(e)) => {
                Ending::failed(e.clone(), e, ExitStatus::Failed)
            }
            // The loop's own request was refused; it chose to end the task on it.
            TaskOutcome::InferenceFailed(InferenceError::Refused(e)) => {
                Ending::failed(e.clone(), e, ExitStatus::Failed)
            }
            TaskOutcome::InferenceFailed(InferenceError::TurnsExhausted(n)) => {
                let n = if n == 0 { max_turns } else { n };
                let message = format!("max_turns exceeded: the task used all {n} inference turns");
                Ending::failed(message.clone(), message, ExitStatus::MaxTurnsReached)
            }
            TaskOutcome::Failed(reason) => {
                Ending::failed(reason.clone(), reason, ExitStatus::Failed)
            }
        }
    }

    /// A failed task: `message` on the wire, `error: <result>` in the result file.
    pub fn failed(message: String, result: String, exit_status: ExitStatus) -> Self {
        Ending {
            state: State::Failed,
            message,
            result: format!("error: {result}"),
            exit_status,
        }
    }

    /// The API key never reaches the result file, the wire or the launcher's answer.
    pub fn scrubbed(self) -> Self {
        Ending {
            message: crate::secret::scrub(&self.message).into_owned(),
            result: crate::secret::scrub(&self.result).into_owned(),
            ..self
        }
    }

    fn reopen_exhausted(message: String) -> Self {
        Ending::failed(message.clone(), message, ExitStatus::ReopenBudgetExhausted)
    }

    /// A spend ceiling stopped the task: not an error of the capsule's, so the result
    /// says it was stopped, and why.
    fn spend_ceiling(message: String) -> Self {
        Ending {
            state: State::Failed,
            result: format!("stopped: {message}"),
            message,
            exit_status: ExitStatus::SpendCeilingReached,
        }
    }

    pub fn canceled() -> Self {
        Ending {
            state: State::Canceled,
            message: CANCELED.into(),
            result: format!("error: {CANCELED}"),
            exit_status: ExitStatus::Canceled,
        }
    }

    fn response(&self) -> Option<&str> {
        (self.state == State::Completed).then_some(self.result.as_str())
    }
}

impl LoopState {
    /// Ends the running attempt: result file, final frames, trace line. `Some(feedback)`
    /// when an `on-task-end` hook reopened the task: it stays current and the loop goes
    /// on with the feedback.
    /// `kept` is the conversation the loop keeps for a threaded context.
    pub(super) async fn finish(
        &mut self,
        outcome: TaskOutcome,
        kept: Option<Vec<Message>>,
    ) -> wasmtime::Result<Option<String>> {
        let Some(mut current) = self.current() else {
            return Err(wasmtime::Error::msg(
                "the session loop called finish-task outside a task",
            ));
        };
        let outcome = match current.run.breach.clone() {
            Some(why) => TaskOutcome::Failed(why),
            None => outcome,
        };
        let session = current.session;
        let (outcome, kept) = handed_over(outcome, kept, &session.settings.limits);
        // Held until the task's last frame is out: under `mur serve` what the loop
        // handed over counts against the capsule's own memory budget.
        let held = outcome_bytes(&outcome) + kept.as_deref().map_or(0, handed::text_bytes);
        let memory = &session.settings.grants.memory;
        let (outcome, kept, _held) = match memory.charge(held, "the task's answer and conversation")
        {
            Ok(charge) => (outcome, kept, charge),
            Err(why) => (TaskOutcome::Failed(why), None, Default::default()),
        };
        let canceled = current.session.running.is_canceled();
        let mut end = match (canceled, current.run.spent.take()) {
            (true, _) => Ending::canceled(),
            // Whatever the loop made of the refusal, the ceiling is what ended the task.
            (false, Some(message)) => Ending::spend_ceiling(message),
            (false, None) => Ending::of(outcome, current.session.settings.max_turns),
        }
        .scrubbed();
        if !canceled {
            let completed = end.state == State::Completed;
            let asked = current
                .task_end_hooks(end.exit_status, &end.result, completed)
                .await?;
            if let Some((hook, reason)) = asked {
                match current.reopen_budget(&reason) {
                    Ok(()) => return current.reopen(&end, hook, reason).map(Some),
                    Err(why) => end = Ending::reopen_exhausted(why).scrubbed(),
                }
            }
        }
        self.end_task(end, kept).map(|()| None)
    }

    /// The task's last word: result, hook artifacts, final status, `task_end`.
    pub(super) fn end_task(
        &mut self,
        end: Ending,
        kept: Option<Vec<Message>>,
    ) -> wasmtime::Result<()> {
        let running = self.running.take().ok_or_else(|| {
            wasmtime::Error::msg("the session loop called finish-task outside a task")
        })?;
        let session = &self.session;
        let completed = end.state == State::Completed;
        let kept = if completed {
            session.remember(&running.task.context_id, kept)
        } else {
            Ok(())
        };
        // The answer is not where the task says it is, or its conversation could not be
        // kept within the records budget: the task fails, saying why.
        let end = match kept.and_then(|()| session.write_results(&running.task.id, &end)) {
            Ok(()) => end,
            Err(why) => Ending::failed(why.clone(), why, ExitStatus::Failed).scrubbed(),
        };
        let completed = end.state == State::Completed;
        // Recorded before the running mark goes and the final status is sent, so a
        // client that cancels on seeing the status gets "cannot be canceled", never
        // "not found".
        session.finished.push(Finished {
            task_id: running.task.id.clone(),
            exit_status: end.exit_status,
            completed,
            result: end.result.clone(),
        });
        session.running.end();
        session.hook_artifact_frames(&running.hook_artifacts);
        if completed {
            session.wire.whole_reply(&end.result);
        }
        session.wire.status(end.state, &end.message, end.response());
        session.wire.end_task();
        self.totals.add(&running.counts);
        let duration_ms = running.started.elapsed().as_millis() as u64;
        let task_end = line::task_end(
            &running.task.id,
            end.exit_status,
            duration_ms,
            &running.counts,
            running.reopens,
        );
        let task_end = match session.trace.captures_content() {
            true => task_end.with_content("answer", &end.result),
            false => task_end,
        };
        session
            .trace
            .write(running.place(), task_end)
            .map_err(trace_failed)?;
        let Some(answered) = session.tools.desk().and_then(|d| d.ended(&running.task.id)) else {
            return Ok(());
        };
        let line = line::peer_task_answered(&line::PeerAnswered {
            call_id: answered.call.call_id.as_deref(),
            caller: answered.caller.as_deref(),
            caller_task_id: answered.call.caller_task.as_deref(),
            duration_ms,
            outcome: end.exit_status.as_str(),
        });
        session
            .trace
            .write(running.place(), line)
            .map(|_| ())
            .map_err(trace_failed)
    }
}

impl Current<'_> {
    /// Whether another attempt is allowed: the task's reopen limit and its turn budget,
    /// which every attempt shares. `Err` names the limit that is used up.
    fn reopen_budget(&self, reason: &str) -> Result<(), String> {
        let settings = &self.session.settings;
        let reason = reason.trim();
        if self.run.reopens >= settings.max_task_reopens {
            return Err(format!(
                "task reopen budget exhausted after {} reopen(s): {reason}",
                self.run.reopens
            ));
        }
        if self.run.counts.turns >= u64::from(settings.max_turns) {
            return Err(format!(
                "task turn budget exhausted: all {} inference turns used: {reason}",
                settings.max_turns
            ));
        }
        Ok(())
    }

    /// A granted reopen: the attempt is reported `completed`, then a new attempt of the
    /// same task starts, its frames numbered from 0 again.
    fn reopen(&mut self, end: &Ending, hook: String, reason: String) -> wasmtime::Result<String> {
        let session = self.session;
        let run = &mut *self.run;
        run.reopens += 1;
        run.feedback.push((hook.clone(), reason.clone()));
        run.attempt_start = run.counts.turns;
        let turns_remaining =
            u64::from(session.settings.max_turns).saturating_sub(run.counts.turns);
        self.record(line::task_reopened(&Reopened {
            task_id: &self.run.task.id,
            hook: &hook,
            reason: &reason,
            number: self.run.reopens,
            turns_remaining,
        }))?;
        let artifacts = std::mem::take(&mut self.run.hook_artifacts);
        let task = &self.run.task;
        let task_md = reopened_task_md(&task.text, &self.run.feedback);
        if let Err(why) = session.write_counted("out/result.txt", &end.result) {
            session.workdir.log(&why);
        }
        session.hook_artifact_frames(&artifacts);
        session.wire.whole_reply(&end.result);
        session.wire.status(end.state, &end.message, end.response());
        session.wire.begin_task(&task.id, &task.context_id);
        if let Err(why) = session.write_counted("task.md", &task_md) {
            session.workdir.log(&why);
        }
        Ok(format!(
            "Your previous answer was not accepted. Address this feedback and answer again:\n\n{}",
            reason.trim()
        ))
    }
}

/// How long a failed task's result may be and still be written past the workdir
/// quota: a reason, not an answer.
const REASON_ROOM: usize = 64 * 1024;

/// What the loop hands over at a task's end, checked against the capsule's limits
/// before the host keeps or sends any of it: past one, the task fails naming the key
/// and nothing of it is kept.
fn handed_over(
    outcome: TaskOutcome,
    kept: Option<Vec<Message>>,
    limits: &Limits,
) -> (TaskOutcome, Option<Vec<Message>>) {
    let refused = match &outcome {
        TaskOutcome::Completed(text) | TaskOutcome::Failed(text) => handed::answer(text, limits),
        TaskOutcome::InferenceFailed(e) => handed::answer(inference_error_text(e), limits),
    }
    .and_then(|()| match &kept {
        Some(messages) => handed::messages("the conversation to keep", messages, limits),
        None => Ok(()),
    });
    match refused {
        Ok(()) => (outcome, kept),
        Err(why) => (TaskOutcome::Failed(why), None),
    }
}

fn inference_error_text(e: &InferenceError) -> &str {
    match e {
        InferenceError::Invocation(t)
        | InferenceError::Failed(t)
        | InferenceError::Malformed(t)
        | InferenceError::Refused(t) => t,
        InferenceError::TurnsExhausted(_) => "",
    }
}

fn outcome_bytes(outcome: &TaskOutcome) -> u64 {
    match outcome {
        TaskOutcome::Completed(text) | TaskOutcome::Failed(text) => text.len() as u64,
        TaskOutcome::InferenceFailed(e) => inference_error_text(e).len() as u64,
    }
}

/// `task.md` after reopens: the original task, then the feedback of each reopen.
pub(super) fn reopened_task_md(task: &str, feedback: &[(String, String)]) -> String {
    let mut text = format!(
        "{task}\n\n---\n\n# Reopen feedback\n\nThe previous attempt was not accepted; \
         address the feedback below.\n"
    );
    for (n, (hook, reason)) in feedback.iter().enumerate() {
        text.push_str(&format!(
            "\n## Reopen {} — from hook `{hook}`\n\n{}\n",
            n + 1,
            reason.trim()
        ));
    }
    text
}

impl Session {
    /// `out/result.txt`, and under threaded conversations `out/result_<task>.txt` too
    /// (each task of a thread keeps its own answer beside the latest one). `Err` when
    /// one could not be written (a link where `out/` was, the workdir quota), saying
    /// why; the failure is also in `bootstrap.log`.
    fn write_results(&self, task_id: &str, end: &Ending) -> Result<(), String> {
        let write = |rel: &str| match end.state {
            State::Completed => self.write_counted(rel, &end.result),
            _ => self.write_reason(rel, &end.result),
        };
        write("out/result.txt")?;
        if self.threads.is_some() {
            write(&format!("out/result_{task_id}.txt"))?;
        }
        Ok(())
    }

    /// `out/result.txt` after a task that never reached the loop; the failure is logged.
    pub(super) fn write_result(&self, result: &str) {
        let _ = self.write_reason("out/result.txt", result);
    }

    /// Writes `rel` in the workdir when the quota has room for it, replacing what is
    /// there; `Err` (also logged) says why not.
    pub(super) fn write_counted(&self, rel: &str, text: &str) -> Result<(), String> {
        self.write_view(rel, text, true)
    }

    /// A failed task's result: a short one is written even past the quota (the breach
    /// that failed the task is often what filled the workdir), so the file always says
    /// why; a long one counts like any other write.
    fn write_reason(&self, rel: &str, text: &str) -> Result<(), String> {
        self.write_view(rel, text, text.len() > REASON_ROOM)
    }

    fn write_view(&self, rel: &str, text: &str, counted: bool) -> Result<(), String> {
        self.host_write(rel, |view| {
            if counted {
                self.quota
                    .admit(rel, view.size_of(rel), text.len() as u64)?;
            }
            view.write(rel, text.as_bytes()).map_err(|e| e.to_string())
        })
    }

    /// Adds `text` at the end of `rel` in the workdir when the quota has room for it;
    /// `Err` (also logged) says why not.
    pub(super) fn append_counted(&self, rel: &str, text: &str) -> Result<(), String> {
        self.host_write(rel, |view| {
            let old = view.size_of(rel);
            self.quota
                .admit(rel, old, old.saturating_add(text.len() as u64))?;
            view.append(rel, text.as_bytes()).map_err(|e| e.to_string())
        })
    }

    /// One host write in the workdir: `Err` is logged, and the meter of the guests'
    /// writes, which does not see the host's own, measures again at its next look.
    fn host_write(
        &self,
        rel: &str,
        write: impl FnOnce(&crate::rooted::Rooted) -> Result<(), String>,
    ) -> Result<(), String> {
        let written = self
            .workdir
            .view()
            .map_err(|e| e.to_string())
            .and_then(write);
        if let Some(meter) = &self.meter {
            meter.recount();
        }
        written.map_err(|e| {
            let why = format!("could not write {rel}: {e}");
            self.workdir.log(&why);
            why
        })
    }

    /// One `artifact` frame per hook artifact, before the task's final status.
    fn hook_artifact_frames(&self, artifacts: &[(String, String)]) {
        for (hook, json) in artifacts {
            self.wire.artifact(&ArtifactFrame {
                tool_name: hook,
                content: json,
                fence_source: None,
                tool_call_id: None,
                is_error: false,
                duration_ms: None,
                exit_code: None,
                truncated: false,
            });
        }
    }
}
