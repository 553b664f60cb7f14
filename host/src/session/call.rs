//! One tool call: the call bounds, the policy hooks' decision, the dispatch (under the
//! tool's own deadline), a detached command taken over, the workdir quota, then the
//! call's `artifact` frame, trace lines and observation hooks.

use super::current::Current;
use super::{lifecycle, trace_failed};
use crate::bindings::session_loop::murmur::session::types::{ToolCall, ToolOutcome};
use crate::bindings::tool::murmur::task::task::TaskInfo;
use crate::detached::{self, StartedFrom};
use crate::input::Port;
use crate::tools::{Dispatched, Reach};
use crate::trace::line;

impl Current<'_> {
    pub async fn tool(&mut self, call: ToolCall) -> wasmtime::Result<ToolOutcome> {
        let session = self.session;
        let task = &self.run.task;
        let info = TaskInfo {
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            origin: task.origin.as_str().into(),
        };
        let turn = self.run.counts.turns.saturating_sub(1);
        let limits = &session.settings.limits;
        if let Some(refusal) = self.run.calls.admit(limits, self.run.breach.as_deref()) {
            return self.refuse(turn, &call, refusal);
        }
        let port = Port::of(
            &session.inbox,
            &session.wire,
            &session.trace,
            &self.run.task,
            self.run.turn_parent(),
        );
        if let Some(refused) = self.call_decision(turn, &call).await? {
            // Nothing ran: no frame, no tool_call line, no observation.
            return Ok(ToolOutcome {
                content: lifecycle::refusal_text(&refused.hook, &refused.reason),
                is_error: true,
            });
        }
        self.hold_deadline();
        let mut done = session
            .tools
            .dispatch(&call.name, &call.input, info, &session.wire, port)
            .await;
        self.resume_deadline();
        if let Some(background) = done.detached.take() {
            // Taken over before the next await, so a cancel cannot drop it unaccounted.
            let from = self.started_from(turn);
            detached::start(&session.detached, background, from).map_err(trace_failed)?;
        }
        self.workdir_quota(turn, &call, &mut done).await?;
        self.tool_artifact(&call, &done);
        self.trace_call(turn, &call, &done)?;
        self.call_observation(turn, &call, &done).await?;
        Ok(ToolOutcome {
            content: done.content,
            is_error: done.is_error,
        })
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
    /// command, `shell`.
    pub fn trace_call(
        &mut self,
        turn: u64,
        call: &ToolCall,
        done: &Dispatched,
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
            return self.record_under_turn(line::skill_call(&asked, &ran));
        }
        self.run.counts.tool_calls += 1;
        let include_output = self.session.settings.include_tool_output;
        self.record_under_turn(line::tool_call(&asked, &ran, include_output))?;
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
