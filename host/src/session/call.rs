//! Tool calls: the call bounds, the policy hooks' decision, the dispatch (under the
//! tool's own deadline), a detached command taken over, the workdir quota, then each
//! call's `artifact` frame, trace lines and observation hooks.
//!
//! A `call-tools` list runs in batches of `lifecycle.parallel_tools`: each call of a
//! batch is admitted and decided in call order, the admitted ones run side by side, and
//! their results are recorded in call order, so artifact ids follow the calls. With one
//! call a batch, each call is decided, run and recorded before the next is looked at.

use futures_util::future::join_all;

use super::budget::Refusal;
use super::current::Current;
use super::{lifecycle, trace_failed};
use crate::bindings::message::{ToolCall, ToolResult};
use crate::bindings::tool::murmur::task::task::TaskInfo;
use crate::detached::{self, StartedFrom};
use crate::input::Port;
use crate::tools::{Caller, Dispatched, Plain, Reach};
use crate::trace::line;

/// What a tool that ran gave an upstream capsule component's call.
pub(super) struct Invoked {
    pub plain: Plain,
    pub is_error: bool,
    pub truncated: bool,
}

/// What becomes of one call once it has been admitted and decided.
enum Step {
    /// A call bound refused it (recorded in call order).
    Refused(Refusal),
    /// A policy hook refused it: nothing ran, nothing is framed.
    Denied(String),
    Run,
}

impl Current<'_> {
    pub async fn tools(&mut self, calls: Vec<ToolCall>) -> wasmtime::Result<Vec<ToolResult>> {
        let size = self.session.settings.parallel_tools.max(1);
        let mut results = Vec::with_capacity(calls.len());
        for batch in calls.chunks(size) {
            results.extend(self.batch(batch).await?);
        }
        Ok(results)
    }

    async fn batch(&mut self, calls: &[ToolCall]) -> wasmtime::Result<Vec<ToolResult>> {
        let turn = self.run.counts.turns.saturating_sub(1);
        let mut steps = Vec::with_capacity(calls.len());
        for call in calls {
            steps.push(self.decide(turn, call).await?);
        }
        let runs: Vec<&ToolCall> = calls
            .iter()
            .zip(&steps)
            .filter(|(_, step)| matches!(step, Step::Run))
            .map(|(call, _)| call)
            .collect();
        let mut ran = self.dispatch_all(&runs, Caller::Model).await.into_iter();
        let mut results = Vec::with_capacity(calls.len());
        for (call, step) in calls.iter().zip(steps) {
            let (content, is_error) = match step {
                Step::Refused(refusal) => self.refuse(turn, call, refusal)?,
                Step::Denied(told) => (told, true),
                Step::Run => {
                    let Some((event, done)) = ran.next() else {
                        return Err(wasmtime::Error::msg("a dispatched call has no result"));
                    };
                    self.record_run(turn, call, done, event).await?
                }
            };
            results.push(ToolResult {
                call_id: call.id.clone(),
                content,
                is_error,
            });
        }
        Ok(results)
    }

    /// The call bounds, then the policy hooks' decision before it runs.
    async fn decide(&mut self, turn: u64, call: &ToolCall) -> wasmtime::Result<Step> {
        let limits = &self.session.settings.limits;
        if let Some(refusal) = self.run.calls.admit(limits, self.run.breach.as_deref()) {
            // At once, so the next call of a batch is refused as the task's end.
            if let Refusal::Task { ends_task, .. } = &refusal {
                self.run.breach = Some(ends_task.clone());
            }
            return Ok(Step::Refused(refusal));
        }
        Ok(match self.call_decision(turn, call).await? {
            Some(refused) => Step::Denied(lifecycle::refusal_text(&refused.hook, &refused.reason)),
            None => Step::Run,
        })
    }

    /// One call an upstream capsule component made through its tool registry, in its
    /// task: admitted, decided, run and recorded as a call of a `call-tools` list is
    /// (bounds, `on-tool-call` hooks, frame, trace lines, observation hooks). `Ok` is
    /// what the tool gave, for a call that ran; `Err` what the component is told of one
    /// that did not (refused, undeclared, trapped, or the workdir quota it broke).
    pub(super) async fn invoke(
        &mut self,
        call: &ToolCall,
    ) -> wasmtime::Result<Result<Invoked, String>> {
        // A component has no model replies: each call is a reply of its own, so only
        // the task's bound (`max_tool_calls_per_task`) counts its calls.
        self.run.calls.replied();
        let turn = self.run.counts.turns.saturating_sub(1);
        let told = match self.decide(turn, call).await? {
            Step::Refused(refusal) => self.refuse(turn, call, refusal)?.0,
            Step::Denied(told) => told,
            Step::Run => {
                let Some((event, mut done)) =
                    self.dispatch_all(&[call], Caller::Capsule).await.pop()
                else {
                    return Err(wasmtime::Error::msg("a dispatched call has no result"));
                };
                let ran = done.plain.take().map(|plain| Invoked {
                    plain,
                    is_error: done.is_error,
                    truncated: done.truncated,
                });
                let (content, _) = self.record_run(turn, call, done, event).await?;
                // The workdir quota ended the task over this call: its result is the
                // breach, as a model would be told.
                match ran {
                    Some(ran) if self.run.breach.is_none() => return Ok(Ok(ran)),
                    _ => content,
                }
            }
        };
        Ok(Err(told))
    }

    /// Runs the admitted calls side by side, each under its own deadline; the loop's
    /// holds meanwhile. Results come back in call order, each with the event id its
    /// `tool_call` line will have: the span a peer or MCP server it reached was told.
    async fn dispatch_all(
        &mut self,
        calls: &[&ToolCall],
        caller: Caller,
    ) -> Vec<(String, Dispatched)> {
        if calls.is_empty() {
            return Vec::new();
        }
        let session = self.session;
        self.hold_deadline();
        let task = &self.run.task;
        let parent = self.run.turn_parent().to_string();
        let runs = calls.iter().map(|call| {
            let info = TaskInfo {
                id: task.id.clone(),
                context_id: task.context_id.clone(),
                origin: task.origin.as_str().into(),
            };
            let port = Port::of(&session.inbox, &session.wire, &session.trace, task, &parent);
            let event = crate::ids::event();
            let span = session.trace.future_span(Some(&task.id), &event);
            let via = (port, caller, Some(span.traceparent()));
            let dispatched =
                session
                    .tools
                    .dispatch(&call.name, &call.input, info, &session.wire, via);
            async move { (event, dispatched.await) }
        });
        let done = join_all(runs).await;
        self.resume_deadline();
        done
    }

    /// A call that ran: a detached command taken over, the quota, its frame, lines
    /// and observation.
    async fn record_run(
        &mut self,
        turn: u64,
        call: &ToolCall,
        mut done: Dispatched,
        event: String,
    ) -> wasmtime::Result<(String, bool)> {
        if let Some(background) = done.detached.take() {
            // Taken over before the next await, so a cancel cannot drop it unaccounted.
            let from = self.started_from(turn);
            detached::start(&self.session.detached, background, from).map_err(trace_failed)?;
        }
        self.workdir_quota(turn, call, &mut done).await?;
        self.tool_artifact(call, &done);
        self.trace_call(turn, call, &done, Some(event))?;
        self.call_observation(turn, call, &done).await?;
        Ok((done.content, done.is_error))
    }

    /// Where a detached command came from; it counts as one of the task's shell calls.
    fn started_from(&mut self, turn: u64) -> StartedFrom {
        self.run.counts.shell_calls += 1;
        StartedFrom {
            task_id: self.run.task.id.clone(),
            context_id: self.run.task.context_id.clone(),
            turn,
            parent: self.run.turn_parent().to_string(),
        }
    }

    /// The call's lines under its turn: `skill_call`, or `tool_call` and, for a shell
    /// command, `shell`. `event` is the id chosen for its line as it began.
    pub fn trace_call(
        &mut self,
        turn: u64,
        call: &ToolCall,
        done: &Dispatched,
        event: Option<String>,
    ) -> wasmtime::Result<()> {
        let asked = line::Call {
            turn,
            name: &call.name,
            id: &call.id,
            input: &call.input,
        };
        let ran = line::Ran {
            output: &done.content,
            duration_ms: done.duration_ms,
            is_error: done.is_error,
            exit_code: done.exit_code,
            error: done.error.as_deref(),
        };
        if done.reach == Reach::Skill {
            return self.record_under_turn_as(event, line::skill_call(&asked, &ran));
        }
        self.run.counts.tool_calls += 1;
        let include_output = self.session.settings.include_tool_output;
        self.record_under_turn_as(event, line::tool_call(&asked, &ran, include_output))?;
        if let Some(called) = &done.peer {
            self.record_under_turn(member_call_line(called))?;
        }
        if let Some(shell) = &done.shell {
            self.run.counts.shell_calls += 1;
            let command = lifecycle::shell_command(&call.input);
            self.record_under_turn(line::shell(&line::Shell {
                turn,
                binary: &shell.resolved_binary,
                command: &command,
                exit_code: shell.exit_code,
                stdout_bytes: shell.stdout_bytes,
                stderr_bytes: shell.stderr_bytes,
                duration_ms: shell.duration_ms,
                resource_limit: shell.resource_limit,
            }))?;
        }
        Ok(())
    }
}

/// The caller's `member_call` line of a call to a peer.
fn member_call_line(called: &crate::peer::tool::Called) -> line::Line {
    let (status, task, bytes, truncated) = match &called.outcome {
        Ok(answer) => (
            "answered",
            Some(answer.task_id.as_str()),
            answer.text.len(),
            answer.truncated,
        ),
        Err(failure) => (failure.kind.as_str(), failure.task_id.as_deref(), 0, false),
    };
    line::member_call(&line::MemberCall {
        call_id: &called.call_id,
        member: &called.peer,
        status,
        member_task_id: task,
        duration_ms: called.took.as_millis() as u64,
        duration_us: called.took.as_micros() as u64,
        answer_bytes: bytes,
        truncated,
        chain: &called.chain,
    })
}
