//! A task's end: how it ends (`Ending`), an `on-task-end` hook's reopen, and the task's
//! last word: `out/result.txt`, hook artifacts, the final status and `task_end`.

use super::current::Current;
use super::{CANCELED, LoopState, Session, trace_failed};
use crate::bindings::message::Message;
use crate::bindings::session_loop::murmur::session::types::{InferenceError, TaskOutcome};
use crate::control::Finished;
use crate::exit_status::ExitStatus;
use crate::frames::{ArtifactFrame, State};
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
        let canceled = current.session.running.is_canceled();
        let mut end = if canceled {
            Ending::canceled()
        } else {
            Ending::of(outcome, current.session.settings.max_turns)
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
        if completed {
            session.remember(&running.task.context_id, kept);
        }
        session.write_result(&end.result);
        if session.threads.is_some() {
            // Each task of a thread keeps its own answer beside the latest one.
            let copy = format!("out/result_{}.txt", running.task.id);
            let _ = session.workdir.write_view(&copy, &end.result);
        }
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
        session
            .trace
            .write(running.place(), task_end)
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
        session.write_result(&end.result);
        session.hook_artifact_frames(&artifacts);
        session.wire.whole_reply(&end.result);
        session.wire.status(end.state, &end.message, end.response());
        session.wire.begin_task(&task.id, &task.context_id);
        let _ = session.workdir.write_view("task.md", &task_md);
        Ok(format!(
            "Your previous answer was not accepted. Address this feedback and answer again:\n\n{}",
            reason.trim()
        ))
    }
}

/// `task.md` after reopens: the original task, then the feedback of each reopen.
fn reopened_task_md(task: &str, feedback: &[(String, String)]) -> String {
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
    pub(super) fn write_result(&self, result: &str) {
        let _ = self.workdir.write_view("out/result.txt", result);
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
