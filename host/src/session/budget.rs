//! The call bounds and the workdir quota, counted by the host whatever the loop does:
//! `max_tool_calls_per_reply` (since the last `infer` returned; later calls of the reply
//! get an error result), `max_tool_calls_per_task` (every attempt; passing it ends the
//! task `failed`), and `workdir_bytes` after each tool call that ran (a breach, or a
//! write the meter refused during the call, ends the task `failed`), and the spend
//! ceilings before each inference call (`crate::spend`; one that refuses the call ends
//! the task `spend_ceiling_reached`).

use super::current::Current;
use crate::bindings::message::ToolCall;
use crate::frames::ArtifactFrame;
use crate::limits::Limits;
use crate::spend::{Reservation, Stop};
use crate::tools::{Dispatched, Reach};
use crate::trace::line::{self, Breach};

/// A task's `call-tool` calls, refused ones included.
#[derive(Default)]
pub(super) struct Calls {
    in_task: u64,
    since_reply: u64,
}

/// Why a call does not run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Past the reply's bound: the model is told, the call is recorded as refused.
    Reply(String),
    /// The call that passes the task's bound: the task ends with `ends_task`.
    Task { told: String, ends_task: String },
    /// A limit already ended the task: the loop only gets the error, nothing is
    /// recorded, so a loop that ignores it cannot grow the trace or the wire.
    Ended(String),
}

impl Calls {
    /// An `infer` call returned: a new reply's calls count from zero.
    pub(super) fn replied(&mut self) {
        self.since_reply = 0;
    }

    /// Counts one call; `Some` when it must not run, naming the limit and its key.
    pub(super) fn admit(&mut self, limits: &Limits, breach: Option<&str>) -> Option<Refusal> {
        self.in_task += 1;
        self.since_reply += 1;
        if let Some(why) = breach {
            return Some(Refusal::Ended(format!("tool call not run: {why}")));
        }
        let per_task = limits.max_tool_calls_per_task;
        if self.in_task > per_task {
            return Some(Refusal::Task {
                told: format!(
                    "tool call {} of this task is over \
                     capabilities.limits.max_tool_calls_per_task ({per_task}); it did not run",
                    self.in_task
                ),
                ends_task: format!(
                    "the task asked for more than {per_task} tool calls, the bound of \
                     capabilities.limits.max_tool_calls_per_task ({per_task})"
                ),
            });
        }
        if self.since_reply > limits.max_tool_calls_per_reply {
            return Some(Refusal::Reply(format!(
                "tool call {} of this model reply is over \
                 capabilities.limits.max_tool_calls_per_reply ({}); it did not run",
                self.since_reply, limits.max_tool_calls_per_reply
            )));
        }
        None
    }
}

impl Current<'_> {
    /// Before an inference call that could use `requested` tokens: its reservation, or
    /// what the loop is told instead. A ceiling is recorded and ends the task
    /// `spend_ceiling_reached`; a ledger that cannot be read ends it `failed`, since
    /// an uncounted call could pass the ceiling.
    pub(super) fn reserve_spend(
        &mut self,
        requested: u64,
    ) -> wasmtime::Result<Result<Reservation, String>> {
        match self.session.spend.reserve(requested) {
            Ok(reserved) => Ok(Ok(reserved)),
            Err(Stop::Ceiling(refusal)) => {
                let message = refusal.message();
                self.record(line::spend_ceiling_reached(&refusal))?;
                self.session.workdir.log(&message);
                self.run.spent = Some(message.clone());
                Ok(Err(message))
            }
            Err(Stop::Unusable(e)) => {
                let hint = e.hint.map(|h| format!(" ({h})")).unwrap_or_default();
                let why = format!("inference call refused: {}{hint}", e.message);
                self.session.workdir.log(&why);
                self.run.breach = Some(why.clone());
                Ok(Err(why))
            }
        }
    }

    /// A refused call: what the loop gets back (the text and that it is an error),
    /// after recording it as the refusal says.
    pub(super) fn refuse(
        &mut self,
        turn: u64,
        call: &ToolCall,
        refusal: Refusal,
    ) -> wasmtime::Result<(String, bool)> {
        let told = match refusal {
            Refusal::Ended(told) => return Ok((told, true)),
            Refusal::Reply(told) => told,
            Refusal::Task { told, ends_task } => {
                self.run.breach = Some(ends_task);
                told
            }
        };
        // Not run, not shown to hooks: recorded like a call to an undeclared tool.
        let done = Dispatched::not_reached(told);
        self.tool_artifact(call, &done);
        self.trace_call(turn, call, &done, None)?;
        Ok((done.content, true))
    }

    /// The call's `artifact` frame: exactly what the model receives.
    pub(super) fn tool_artifact(&self, call: &ToolCall, done: &Dispatched) {
        let call_id = (!call.id.is_empty()).then_some(call.id.as_str());
        self.session.wire.artifact(&ArtifactFrame {
            tool_name: &call.name,
            content: &done.content,
            fence_source: done.fence_source.as_deref(),
            tool_call_id: call_id,
            is_error: done.is_error,
            duration_ms: Some(done.duration_ms),
            exit_code: done.exit_code,
            truncated: done.truncated,
        });
    }

    /// After a call that ran: over the quota, or refused a write during the call (the
    /// tool may have swallowed the error), its result becomes the breach (what the
    /// model is told), a trace line records it, and the task is ended `failed` with it.
    pub(super) async fn workdir_quota(
        &mut self,
        turn: u64,
        call: &ToolCall,
        done: &mut Dispatched,
    ) -> wasmtime::Result<()> {
        if done.reach != Reach::Tool {
            return Ok(());
        }
        let quota = &self.session.quota;
        let mut breach = Breach {
            bytes: 0,
            baseline: quota.baseline,
            limit_bytes: quota.limit,
        };
        let (why, line) = if let Some(refused) = done.refused.take() {
            breach.bytes = refused.bytes;
            let line = line::quota_refused_during_call(turn, &call.name, breach);
            (refused.text, line)
        } else if let Some(measured) = quota.exceeded().await {
            breach.bytes = measured.bytes;
            let line = line::quota_breach_after_call(turn, &call.name, breach);
            (quota.breach_text(&measured), line)
        } else {
            // Under the quota, or the walk itself failed: nothing to report.
            return Ok(());
        };
        done.content = why.clone();
        done.fence_source = None;
        done.is_error = true;
        done.error = Some(why.clone());
        self.record(line)?;
        self.run.breach = Some(why);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_reply: u64, per_task: u64) -> Limits {
        Limits {
            max_tool_calls_per_reply: per_reply,
            max_tool_calls_per_task: per_task,
            ..Limits::default()
        }
    }

    #[test]
    fn calls_past_a_reply_s_bound_are_refused_until_the_next_reply() {
        let l = limits(2, 100);
        let mut calls = Calls::default();
        assert_eq!(calls.admit(&l, None), None);
        assert_eq!(calls.admit(&l, None), None);
        assert_eq!(
            calls.admit(&l, None),
            Some(Refusal::Reply(
                "tool call 3 of this model reply is over \
                 capabilities.limits.max_tool_calls_per_reply (2); it did not run"
                    .into()
            ))
        );
        calls.replied();
        assert_eq!(calls.admit(&l, None), None);
    }

    #[test]
    fn the_task_bound_counts_refused_calls_and_every_reply() {
        let l = limits(2, 3);
        let mut calls = Calls::default();
        for _ in 0..3 {
            calls.admit(&l, None);
            calls.replied();
        }
        assert_eq!(
            calls.admit(&l, None),
            Some(Refusal::Task {
                told: "tool call 4 of this task is over \
                       capabilities.limits.max_tool_calls_per_task (3); it did not run"
                    .into(),
                ends_task: "the task asked for more than 3 tool calls, the bound of \
                            capabilities.limits.max_tool_calls_per_task (3)"
                    .into(),
            })
        );
        assert_eq!(
            calls.admit(&l, Some("workdir size breach: x")),
            Some(Refusal::Ended(
                "tool call not run: workdir size breach: x".into()
            ))
        );
    }
}
