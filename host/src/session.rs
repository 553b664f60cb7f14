//! The host side of `murmur:session`: what a session loop component can ask of the
//! host. The loop decides what happens next; the host counts turns, dispatches tools,
//! writes frames, the trace and the result, and enforces the limits.

mod budget;
mod interrupt;
mod lifecycle;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings::session_loop::exports::murmur::session::loop_::Config;
use crate::bindings::session_loop::murmur::session::host::Host;
use crate::bindings::session_loop::murmur::session::types::{
    self, InferenceError, InferenceReply, InferenceRequest, StopReason, Task, TaskOutcome,
    ToolCall, ToolOutcome, Usage,
};
use crate::bindings::session_loop::{SessionLoop, SessionLoopPre};
use crate::bindings::tool::murmur::task::task::TaskInfo;
use crate::control::RunningTask;
use crate::deadline::Clock;
use crate::driver::{Driver, DriverComponent, trap_text};
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::frames::{Artifact, State};
use crate::guest_log;
use crate::hooks::Hooks;
use crate::manifest::Compaction;
use crate::outbound::Event;
use crate::queue::{Lane, Pending, Queue};
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};
use crate::threads::Threads;
use crate::tools::{Dispatched, Reach, Tools};
use crate::trace::{Place, Trace};
use crate::wire::Wire;
use crate::workdir::Workdir;
pub use interrupt::DEADLINE_CODE;
use interrupt::Interrupt;

/// Everything a session shares between the loop, the server and the launcher.
pub struct Capsule {
    pub session_id: String,
    pub name: String,
    pub version: String,
    pub model: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    pub system: Option<String>,
    /// `trace.include_tool_output`: the text each tool call returned, on its trace line.
    pub include_tool_output: bool,
    pub workdir: Workdir,
    pub trace: Trace,
    pub wire: Arc<Wire>,
    pub queue: Queue,
    pub tools: Tools,
    pub driver: DriverComponent,
    pub grants: LoopGrants,
    /// The `session_start` line, parent of every task.
    pub session_event: String,
    pub finished: Mutex<Vec<Finished>>,
    pub running: RunningTask,
    /// Shell commands that outlived their grace period and still run.
    pub detached: crate::detached::Registry,
    /// `lifecycle.conversation: threaded`: each context's conversation so far, handed
    /// to the next task of that context and kept on disk.
    pub threads: Option<Threads>,
    pub hooks: Hooks,
    pub context: ContextPolicy,
    /// `lifecycle.max_task_reopens`.
    pub max_task_reopens: u32,
    /// The manifest's `capabilities`, as hooks are told them at session start.
    pub capabilities: Value,
    /// `capabilities.limits`: call bounds and the workdir quota, counted here.
    pub limits: crate::limits::Limits,
    /// What the workdir held when the session started: the quota counts growth past it.
    pub workdir_baseline: u64,
}

/// How big a conversation may grow, and what a seed may take of it.
pub struct ContextPolicy {
    /// `context.max_tokens`.
    pub window: Option<u32>,
    pub seed_budget: f64,
    pub seed_margin: f64,
    pub process_transport: bool,
    pub compaction: Compaction,
}

/// Why `tasks/cancel` could not cancel a task.
#[derive(Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No task with that id was ever seen by this capsule.
    NotFound,
    /// The task has already ended.
    NotCancelable,
}

/// What the session loop component may see.
pub struct LoopGrants {
    pub env: Vec<(String, String)>,
    pub memory_bytes: u64,
    pub deadline: std::time::Duration,
}

/// A task that ended, for the launcher's exit status and answer.
#[derive(Clone, Debug)]
pub struct Finished {
    pub task_id: String,
    pub exit_status: &'static str,
    pub completed: bool,
    /// The answer, or `error: <message>`, as written to `out/result.txt`.
    pub result: String,
}

#[derive(Default, Clone, Copy)]
pub struct Totals {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    pub shell_calls: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.turns += other.turns;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.tool_calls += other.tool_calls;
        self.shell_calls += other.shell_calls;
    }
}

struct Running {
    task: Pending,
    event_id: String,
    started: Instant,
    counts: Totals,
    /// The trace line of the latest inference turn: parent of its tool calls.
    turn_event: Option<String>,
    /// Under a threaded conversation: the latest request's messages and the reply to it.
    conversation: Option<Vec<Value>>,
    /// Reopens granted so far (the attempt number is one more).
    reopens: u32,
    /// The task's turn count when this attempt began: its statuses count from 1 again.
    attempt_start: u64,
    /// `artifact` verdicts of `on-inference` hooks: (hook, JSON object), in order.
    hook_artifacts: Vec<(String, String)>,
    /// The feedback of each reopen, for `task.md`: (hook, reason).
    feedback: Vec<(String, String)>,
    /// `call-tool` calls: in the task, and since the last `infer` returned.
    calls: budget::Calls,
    /// A limit that ended the task (the workdir quota): later calls are refused with
    /// it and the task ends `failed` with it, whatever the loop reports.
    breach: Option<String>,
}

pub struct LoopState {
    sandbox: Sandbox,
    capsule: Arc<Capsule>,
    driver: Option<Driver>,
    running: Option<Running>,
    pub totals: Totals,
    /// The loop's wall-clock deadline: it runs from a task's start to its end (host
    /// calls do not reset it) and from then to the next `next-task`, where it pauses.
    /// It holds while a tool or the driver runs: those have deadlines of their own, of
    /// the same `deadline_seconds`, which one slow call would otherwise use up for the
    /// whole task.
    clock: Arc<Clock>,
    /// When the running tool or driver call began, while the loop's deadline holds.
    held_at: Option<Instant>,
}

impl Sandboxed for LoopState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(LoopState);

const CANCELED: &str = "task canceled";

/// A failed trace write ends the running task `failed` and the session: the loop
/// traps with this error, wherever the write was made.
fn trace_failed(e: std::io::Error) -> wasmtime::Error {
    wasmtime::Error::msg(format!("{TRACE_FAILED}: {e}"))
}

const TRACE_FAILED: &str = "trace write failed";

impl LoopState {
    /// Stops the loop at its next step once any trace write has failed (one made by the
    /// server or a hook as much as one of the loop's own).
    fn trace_intact(&self) -> wasmtime::Result<()> {
        match self.capsule.trace.failure() {
            Some(why) => Err(wasmtime::Error::msg(format!("{TRACE_FAILED}: {why}"))),
            None => Ok(()),
        }
    }
}

impl types::Host for LoopState {}

impl Host for LoopState {
    async fn next_task(&mut self) -> wasmtime::Result<Option<Task>> {
        self.trace_intact()?;
        if self.running.is_some() {
            let why = "the session loop asked for the next task without finishing this one";
            self.finish(TaskOutcome::Failed(why.into())).await?;
        }
        // Parked between tasks the loop has no deadline; each task gets the full one.
        self.clock.pause();
        let next = self.capsule.queue.next().await;
        self.restart_deadline();
        match next {
            Some(task) => self.begin(task).await.map(Some),
            None => Ok(None),
        }
    }

    async fn infer(
        &mut self,
        request: InferenceRequest,
    ) -> wasmtime::Result<Result<InferenceReply, InferenceError>> {
        let capsule = self.capsule.clone();
        let canceled = Ok(Err(InferenceError::Failed(CANCELED.into())));
        let reply = if capsule.running.is_canceled() {
            canceled
        } else {
            tokio::select! {
                reply = self.turn(request) => reply,
                // The turn is dropped, its driver instance with it (the next task gets a
                // fresh one); the ids stay in step as if the call had returned.
                () = capsule.running.canceled() => {
                    capsule.wire.after_inference();
                    self.trace_outbound()?;
                    canceled
                }
            }
        };
        self.resume_deadline();
        reply
    }

    async fn call_tool(&mut self, call: ToolCall) -> wasmtime::Result<ToolOutcome> {
        self.trace_intact()?;
        let capsule = self.capsule.clone();
        let canceled = Ok(ToolOutcome {
            content: CANCELED.into(),
            is_error: true,
        });
        let outcome = if capsule.running.is_canceled() {
            canceled
        } else {
            tokio::select! {
                outcome = self.tool(call) => outcome,
                // Dropping the dispatch kills a shell command's process group and a
                // tool component's store; the canceled call writes no artifact.
                () = capsule.running.canceled() => canceled,
            }
        };
        self.resume_deadline();
        outcome
    }

    async fn finish_task(&mut self, outcome: TaskOutcome) -> wasmtime::Result<Option<String>> {
        let reopened = self.finish(outcome).await;
        // A reopened task goes on under its deadline; after the task's end the loop
        // gets a deadline of its own to reach `next-task`.
        if self.running.is_none() {
            self.restart_deadline();
        }
        reopened
    }
}

impl LoopState {
    /// Both deadlines (wall clock and epoch) count from now.
    fn restart_deadline(&mut self) {
        self.held_at = None;
        self.clock.start();
        self.sandbox.running_since = Instant::now();
    }

    /// A tool or driver call begins: the loop's deadline holds until it returns.
    fn hold_deadline(&mut self) {
        self.clock.hold();
        self.held_at = Some(Instant::now());
    }

    /// The call returned (or was canceled): both deadlines count on from where they
    /// were, the epoch one too.
    fn resume_deadline(&mut self) {
        if let Some(at) = self.held_at.take() {
            self.sandbox.running_since += at.elapsed();
            self.clock.resume();
        }
    }

    fn running(&mut self, what: &str) -> wasmtime::Result<&mut Running> {
        self.running.as_mut().ok_or_else(|| {
            wasmtime::Error::msg(format!("the session loop called {what} outside a task"))
        })
    }

    async fn begin(&mut self, task: Pending) -> wasmtime::Result<Task> {
        let capsule = self.capsule.clone();
        if task.source != "task_md" {
            // The task's text is the capsule's own record of what it was asked.
            let _ = capsule.workdir.write_view("task.md", &task.text);
        }
        let event_id = capsule.trace_task_start(&task).map_err(trace_failed)?;
        capsule.wire.begin_task(&task.id, &task.context_id);
        capsule.running.start(&task.id);
        let history = capsule.history(&task.context_id);
        self.running = Some(Running {
            task: task.clone(),
            event_id,
            started: Instant::now(),
            counts: Totals::default(),
            turn_event: None,
            conversation: None,
            reopens: 0,
            attempt_start: 0,
            hook_artifacts: Vec::new(),
            feedback: Vec::new(),
            calls: budget::Calls::default(),
            breach: task.breach.clone(),
        });
        // A seed goes ahead of the loaded history and the task itself.
        let mut messages = self.task_start_hooks(&task, &history).await?;
        messages.extend(history);
        Ok(Task {
            id: task.id,
            context_id: task.context_id,
            origin: task.origin,
            text: task.text,
            history: Value::Array(messages).to_string(),
        })
    }

    async fn turn(
        &mut self,
        request: InferenceRequest,
    ) -> wasmtime::Result<Result<InferenceReply, InferenceError>> {
        self.trace_intact()?;
        let capsule = self.capsule.clone();
        let running = self.running("infer")?;
        if let Some(why) = &running.breach {
            return Ok(Err(InferenceError::Failed(why.clone())));
        }
        if running.counts.turns >= u64::from(capsule.max_turns) {
            return Ok(Err(InferenceError::TurnsExhausted(capsule.max_turns)));
        }
        let turn = running.counts.turns;
        running.counts.turns += 1;
        let attempt_turn = turn - running.attempt_start;
        capsule.wire.status(
            State::Working,
            &format!("inference turn {}", attempt_turn + 1),
            None,
        );

        let body = match capsule.request(&request) {
            Ok(body) => body,
            Err(e) => return Ok(Err(InferenceError::Failed(e))),
        };
        self.hold_deadline();
        let driver = match self.driver.take() {
            Some(driver) => Ok(driver),
            None => {
                let started = Instant::now();
                let driver = capsule.driver.instantiate(capsule.wire.clone()).await;
                log_instantiation(&capsule, "driver", started);
                driver
            }
        };
        capsule.wire.before_inference();
        let started = Instant::now();
        let called = match driver {
            Ok(mut driver) => {
                let called = driver.infer(&body).await;
                // A trapped instance is unusable; the next turn gets a fresh one.
                if called.is_ok() {
                    self.driver = Some(driver);
                }
                called.map_err(|e| trap_text(&e))
            }
            Err(why) => Err(why),
        };
        self.resume_deadline();
        capsule.wire.after_inference();
        self.running("infer")?.calls.replied();
        self.trace_outbound()?;

        let mut call = Call {
            turn,
            duration_ms: started.elapsed().as_millis() as u64,
            input_estimate: estimate_tokens(&body),
            output_estimate: 0,
            reported: serde_json::Map::new(),
        };
        let result = match called {
            Err(why) => Err(InferenceError::Invocation(why)),
            Ok(Err(e)) => Err(InferenceError::Failed(e)),
            Ok(Ok(raw)) => {
                call.output_estimate = estimate_tokens(&raw);
                // Past the task's bound every further call is refused unrun, so a reply
                // asking for more is cut there before the loop or the conversation holds it.
                let keep = capsule.limits.max_tool_calls_per_task.saturating_add(1);
                parse_reply(&raw, &body, keep).map(|(reply, reported)| {
                    call.reported = reported;
                    reply
                })
            }
        };
        self.trace_turn(&call, &result)?;
        let Ok(mut reply) = result else {
            return Ok(result);
        };
        self.inference_hooks(turn, &reply, call.input_estimate, call.output_estimate)
            .await?;
        let counted = ["input_tokens", "output_tokens"]
            .iter()
            .all(|k| call.reported.contains_key(*k));
        let size = lifecycle::Size {
            tokens: reply.usage.input_tokens + reply.usage.output_tokens,
            source: if counted { "actual" } else { "estimate" },
        };
        match self.compact(turn, &request.messages, &reply, size).await? {
            Ok(context) => reply.context = context,
            // A failed compaction ends the task: `failed`, `session ended`.
            Err(why) => return Ok(Err(InferenceError::Failed(why))),
        }
        if capsule.threads.is_some() {
            self.running("infer")?.conversation = conversation(&request, &reply);
        }
        Ok(Ok(reply))
    }

    /// What the driver's requests ran into (refusals, retries), under the task, before
    /// the turn's own line.
    fn trace_outbound(&mut self) -> wasmtime::Result<()> {
        let capsule = self.capsule.clone();
        let running = self.running("infer")?;
        let place = Place {
            parent: Some(&running.event_id),
            task: Some(&running.task.id),
        };
        for event in capsule.driver.take_events() {
            let (kind, fields) = match event {
                Event::Denied { origin } => (
                    "http_denied",
                    json!({"origin": origin, "reason": "not in capabilities.network.allow"}),
                ),
                Event::Retry {
                    url,
                    attempt,
                    cause,
                    delay,
                } => (
                    "http_retry",
                    json!({
                        "url": url,
                        "attempt": attempt,
                        "cause": cause,
                        "delay_ms": delay.as_millis() as u64,
                    }),
                ),
            };
            capsule
                .trace
                .write(kind, place, fields)
                .map_err(trace_failed)?;
        }
        Ok(())
    }

    /// The turn's `inference` line. Its `input_tokens`/`output_tokens` are the host's
    /// estimates (as upstream's are); what the provider reported is beside them as
    /// `input_tokens_actual`, `output_tokens_actual`, `cached_tokens`, ...
    fn trace_turn(
        &mut self,
        call: &Call,
        result: &Result<InferenceReply, InferenceError>,
    ) -> wasmtime::Result<()> {
        let capsule = self.capsule.clone();
        let running = self.running("infer")?;
        let turn = call.turn;
        let mut fields = json!({"turn": turn});
        match result {
            Ok(reply) => {
                running.counts.input_tokens += reply.usage.input_tokens;
                running.counts.output_tokens += reply.usage.output_tokens;
                let (decision, tool) = decision(reply);
                fields = json!({
                    "turn": turn,
                    "input_tokens": call.input_estimate,
                    "output_tokens": call.output_estimate,
                    "decision": decision,
                    "tool_name": tool,
                    "stop_reason": stop_reason_str(reply.stop_reason),
                    "duration_ms": call.duration_ms,
                });
                for (key, value) in &call.reported {
                    let key = match key.as_str() {
                        "input_tokens" => "input_tokens_actual",
                        "output_tokens" => "output_tokens_actual",
                        other => other,
                    };
                    fields[key] = value.clone();
                }
            }
            Err(e) => {
                let (code, text) = match e {
                    InferenceError::Invocation(t) => ("driver_failed", t.clone()),
                    InferenceError::Failed(t) => ("driver_error", t.clone()),
                    InferenceError::Malformed(t) => ("malformed_response", t.clone()),
                    InferenceError::TurnsExhausted(_) => return Ok(()),
                };
                fields["input_tokens"] = call.input_estimate.into();
                fields["output_tokens"] = 0.into();
                fields["duration_ms"] = call.duration_ms.into();
                fields["error_code"] = code.into();
                fields["error"] = text.into();
            }
        }
        let task = running.task.id.clone();
        let parent = running.event_id.clone();
        let id = capsule
            .trace
            .write(
                "inference",
                Place {
                    parent: Some(&parent),
                    task: Some(&task),
                },
                fields,
            )
            .map_err(trace_failed)?;
        self.running("infer")?.turn_event = Some(id);
        Ok(())
    }

    async fn tool(&mut self, call: ToolCall) -> wasmtime::Result<ToolOutcome> {
        let capsule = self.capsule.clone();
        let running = self.running("call-tool")?;
        let info = TaskInfo {
            id: running.task.id.clone(),
            context_id: running.task.context_id.clone(),
            origin: running.task.origin.clone(),
        };
        let turn = running.counts.turns.saturating_sub(1);
        if let Some(refusal) = running
            .calls
            .admit(&capsule.limits, running.breach.as_deref())
        {
            return self.refuse(turn, &call, refusal);
        }
        let parent = running.turn_event.as_ref().unwrap_or(&running.event_id);
        let port = crate::input::Port::of(&capsule, &running.task, parent);
        if let Some(refused) = self.call_decision(turn, &call).await? {
            // Nothing ran: no frame, no tool_call line, no observation.
            return Ok(ToolOutcome {
                content: lifecycle::refusal_text(&refused.hook, &refused.reason),
                is_error: true,
            });
        }
        self.hold_deadline();
        let mut done = capsule
            .tools
            .dispatch(&call.name, &call.input, info, &capsule.wire, port)
            .await;
        self.resume_deadline();
        if let Some(background) = done.detached.take() {
            // Taken over before the next await, so a cancel cannot drop it unaccounted.
            let from = self.started_from(turn)?;
            crate::detached::start(&capsule, background, from).map_err(trace_failed)?;
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
    fn started_from(&mut self, turn: u64) -> wasmtime::Result<crate::detached::StartedFrom> {
        let running = self.running("call-tool")?;
        running.counts.shell_calls += 1;
        Ok(crate::detached::StartedFrom {
            task_id: running.task.id.clone(),
            context_id: running.task.context_id.clone(),
            turn,
            parent: running
                .turn_event
                .clone()
                .unwrap_or_else(|| running.event_id.clone()),
        })
    }

    fn trace_call(
        &mut self,
        turn: u64,
        call: &ToolCall,
        done: &Dispatched,
    ) -> wasmtime::Result<()> {
        let capsule = self.capsule.clone();
        let running = self.running("call-tool")?;
        let task = running.task.id.clone();
        let parent = running
            .turn_event
            .clone()
            .unwrap_or_else(|| running.event_id.clone());
        let place = Place {
            parent: Some(&parent),
            task: Some(&task),
        };
        let status = if done.is_error { "error" } else { "ok" };
        if done.reach == Reach::Skill {
            capsule
                .trace
                .write(
                    "skill_call",
                    place,
                    json!({
                        "turn": turn,
                        "skill_name": call.name,
                        "output_bytes": done.content.len(),
                        "duration_ms": done.duration_ms,
                        "status": status,
                    }),
                )
                .map_err(trace_failed)?;
            return Ok(());
        }
        running.counts.tool_calls += 1;
        let input = serde_json::from_str::<Value>(&call.input)
            .unwrap_or_else(|_| Value::String(call.input.clone()));
        let mut fields = json!({
            "turn": turn,
            "tool_name": call.name,
            "tool_call_id": (!call.id.is_empty()).then_some(&call.id),
            "input": input,
            "input_bytes": call.input.len(),
            "output_bytes": done.content.len(),
            "duration_ms": done.duration_ms,
            "status": status,
            "exit_code": done.exit_code,
        });
        if let Some(error) = &done.error {
            fields["error"] = error.clone().into();
        }
        if capsule.include_tool_output {
            fields["output"] = done.content.clone().into();
        }
        capsule
            .trace
            .write("tool_call", place, fields)
            .map_err(trace_failed)?;
        if let Some(shell) = &done.shell {
            running.counts.shell_calls += 1;
            let command = lifecycle::shell_command(&call.input);
            let mut fields = json!({
                "turn": turn,
                "binary": shell.resolved_binary,
                "command": command,
                "exit_code": shell.exit_code,
                "stdout_bytes": shell.stdout_bytes,
                "stderr_bytes": shell.stderr_bytes,
                "duration_ms": shell.duration_ms,
            });
            if let Some(limit) = shell.resource_limit {
                fields["resource_limit"] = limit.into();
            }
            capsule
                .trace
                .write("shell", place, fields)
                .map_err(trace_failed)?;
        }
        Ok(())
    }

    /// Ends the running attempt: result file, final frames, trace line. `Some(feedback)`
    /// when an `on-task-end` hook reopened the task: it stays current and the loop goes
    /// on with the feedback.
    pub async fn finish(&mut self, outcome: TaskOutcome) -> wasmtime::Result<Option<String>> {
        let capsule = self.capsule.clone();
        let breach = self.running("finish-task")?.breach.clone();
        let outcome = match breach {
            Some(why) => TaskOutcome::Failed(why),
            None => outcome,
        };
        let canceled = capsule.running.is_canceled();
        let mut end = if canceled {
            Ending::canceled()
        } else {
            Ending::of(outcome, capsule.max_turns)
        }
        .scrubbed();
        if !canceled {
            let completed = end.state == State::Completed;
            let asked = self
                .task_end_hooks(end.exit_status, &end.result, completed)
                .await?;
            if let Some((hook, reason)) = asked {
                match self.reopen_budget(&reason)? {
                    Ok(()) => return self.reopen(&end, hook, reason).map(Some),
                    Err(why) => end = Ending::reopen_exhausted(why).scrubbed(),
                }
            }
        }
        self.end_task(end).map(|()| None)
    }

    /// Whether another attempt is allowed: the task's reopen limit and its turn budget,
    /// which every attempt shares. `Err` names the limit that is used up.
    fn reopen_budget(&mut self, reason: &str) -> wasmtime::Result<Result<(), String>> {
        let capsule = self.capsule.clone();
        let running = self.running("finish-task")?;
        let reason = reason.trim();
        if running.reopens >= capsule.max_task_reopens {
            return Ok(Err(format!(
                "task reopen budget exhausted after {} reopen(s): {reason}",
                running.reopens
            )));
        }
        if running.counts.turns >= u64::from(capsule.max_turns) {
            return Ok(Err(format!(
                "task turn budget exhausted: all {} inference turns used: {reason}",
                capsule.max_turns
            )));
        }
        Ok(Ok(()))
    }

    /// A granted reopen: the attempt is reported `completed`, then a new attempt of the
    /// same task starts, its frames numbered from 0 again.
    fn reopen(&mut self, end: &Ending, hook: String, reason: String) -> wasmtime::Result<String> {
        let capsule = self.capsule.clone();
        let running = self.running("finish-task")?;
        running.reopens += 1;
        running.feedback.push((hook.clone(), reason.clone()));
        running.attempt_start = running.counts.turns;
        let fields = json!({
            "task_id": running.task.id,
            "hook_name": hook,
            "reason": reason,
            "reopen_number": running.reopens,
            "attempt_context": "continued",
            "turns_remaining": u64::from(capsule.max_turns).saturating_sub(running.counts.turns),
        });
        capsule.trace_line(running, "task_reopened", fields)?;
        let artifacts = std::mem::take(&mut running.hook_artifacts);
        let (task, context) = (running.task.id.clone(), running.task.context_id.clone());
        let task_md = reopened_task_md(&running.task.text, &running.feedback);
        capsule.write_result(&end.result);
        capsule.hook_artifact_frames(&artifacts);
        capsule.wire.whole_reply(&end.result);
        capsule.wire.status(end.state, &end.message, end.response());
        capsule.wire.begin_task(&task, &context);
        let _ = capsule.workdir.write_view("task.md", &task_md);
        Ok(format!(
            "Your previous answer was not accepted. Address this feedback and answer again:\n\n{}",
            reason.trim()
        ))
    }

    /// The task's last word: result, hook artifacts, final status, `task_end`.
    fn end_task(&mut self, end: Ending) -> wasmtime::Result<()> {
        let capsule = self.capsule.clone();
        let running = self.running.take().ok_or_else(|| {
            wasmtime::Error::msg("the session loop called finish-task outside a task")
        })?;
        // Recorded before the running mark goes and the final status is sent, so a
        // client that cancels on seeing the status gets "cannot be canceled", never
        // "not found".
        capsule
            .finished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Finished {
                task_id: running.task.id.clone(),
                exit_status: end.exit_status,
                completed: end.state == State::Completed,
                result: end.result.clone(),
            });
        capsule.running.end();
        if end.state == State::Completed {
            capsule.remember(&running.task.context_id, running.conversation.clone());
        }
        capsule.write_result(&end.result);
        if capsule.threads.is_some() {
            // Each task of a thread keeps its own answer beside the latest one.
            let copy = format!("out/result_{}.txt", running.task.id);
            let _ = capsule.workdir.write_view(&copy, &end.result);
        }
        capsule.hook_artifact_frames(&running.hook_artifacts);
        if end.state == State::Completed {
            capsule.wire.whole_reply(&end.result);
        }
        capsule.wire.status(end.state, &end.message, end.response());
        capsule.wire.end_task();
        self.totals.add(&running.counts);
        let c = running.counts;
        let written = capsule.trace.write(
            "task_end",
            Place {
                parent: Some(&running.event_id),
                task: Some(&running.task.id),
            },
            json!({
                "task_id": running.task.id,
                "exit_status": end.exit_status,
                "duration_ms": running.started.elapsed().as_millis() as u64,
                "turns": c.turns,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "tool_calls": c.tool_calls,
                "shell_calls": c.shell_calls,
                "reopen_count": running.reopens,
            }),
        );
        written.map(|_| ()).map_err(trace_failed)
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

impl Capsule {
    fn write_result(&self, result: &str) {
        let _ = self.workdir.write_view("out/result.txt", result);
    }

    /// One `artifact` frame per hook artifact, before the task's final status.
    fn hook_artifact_frames(&self, artifacts: &[(String, String)]) {
        for (hook, json) in artifacts {
            self.wire.artifact(&Artifact {
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

/// How a task ends on the wire, in the trace and in `out/result.txt`.
struct Ending {
    state: State,
    message: String,
    result: String,
    exit_status: &'static str,
}

impl Ending {
    fn of(outcome: TaskOutcome, max_turns: u32) -> Self {
        let failed = |message: String, result: String, exit_status| Ending {
            state: State::Failed,
            message,
            result: format!("error: {result}"),
            exit_status,
        };
        match outcome {
            TaskOutcome::Completed(answer) => Ending {
                state: State::Completed,
                message: "session ended".into(),
                result: answer,
                exit_status: "ok",
            },
            TaskOutcome::InferenceFailed(InferenceError::Invocation(e)) => {
                let message = format!("driver invocation failed: {e}");
                failed(message.clone(), message, "failed")
            }
            TaskOutcome::InferenceFailed(InferenceError::Failed(e)) => {
                failed("session ended".into(), e, "failed")
            }
            // The seed writes no final status here; we name the error so no client hangs.
            TaskOutcome::InferenceFailed(InferenceError::Malformed(e)) => {
                failed(e.clone(), e, "failed")
            }
            TaskOutcome::InferenceFailed(InferenceError::TurnsExhausted(n)) => {
                let n = if n == 0 { max_turns } else { n };
                let message = format!("max_turns exceeded: the task used all {n} inference turns");
                failed(message.clone(), message, "max_turns_reached")
            }
            TaskOutcome::Failed(reason) => failed(reason.clone(), reason, "failed"),
        }
    }

    /// The API key never reaches the result file, the wire or the launcher's answer.
    fn scrubbed(self) -> Self {
        Ending {
            message: crate::secret::scrub(&self.message).into_owned(),
            result: crate::secret::scrub(&self.result).into_owned(),
            ..self
        }
    }

    fn reopen_exhausted(message: String) -> Self {
        Ending {
            state: State::Failed,
            result: format!("error: {message}"),
            message,
            exit_status: "reopen_budget_exhausted",
        }
    }

    fn canceled() -> Self {
        Ending {
            state: State::Canceled,
            message: CANCELED.into(),
            result: format!("error: {CANCELED}"),
            exit_status: "canceled",
        }
    }

    fn response(&self) -> Option<&str> {
        (self.state == State::Completed).then_some(self.result.as_str())
    }
}

impl Capsule {
    /// The `task_start` line of a task; its event id is the parent of the task's lines.
    fn trace_task_start(&self, task: &Pending) -> std::io::Result<String> {
        let lane = Lane::of(&task.origin);
        let trust = if matches!(task.origin.as_str(), "user" | "schedule" | "system") {
            "trusted"
        } else {
            "untrusted"
        };
        self.trace.write(
            "task_start",
            Place {
                parent: Some(&self.session_event),
                task: Some(&task.id),
            },
            json!({
                "task_id": task.id,
                "context_id": task.context_id,
                "source": task.source,
                "origin": task.origin,
                "trust": trust,
                "lane": lane.as_str(),
                "message_parts_bytes": task.text.len(),
            }),
        )
    }

    /// `tasks/cancel`: a queued task ends at once, the running one at its next wait
    /// (a loop that reaches none within `interrupt::GRACE` is stopped).
    pub fn cancel(&self, task_id: &str) -> Result<(), CancelError> {
        if let Some(task) = self.queue.remove(task_id) {
            self.wire.queued_canceled(&task.id, &task.context_id);
            let _ = self.trace.write(
                "task_canceled",
                Place {
                    parent: Some(&self.session_event),
                    task: Some(&task.id),
                },
                json!({"task_id": task.id, "phase": "queued", "detached_work_ids": []}),
            );
            return Ok(());
        }
        if self.running.cancel(Some(task_id)) {
            return Ok(());
        }
        let finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if finished.iter().any(|f| f.task_id == task_id) || self.running.is(task_id) {
            return Err(CancelError::NotCancelable);
        }
        Err(CancelError::NotFound)
    }

    /// Ends the session cleanly: no new tasks, waiting ones dropped (each recorded),
    /// the running one canceled.
    pub fn stop(&self) {
        self.queue.close();
        for task in self.queue.drain() {
            let _ = self.trace.write(
                "task_rejected",
                Place {
                    parent: Some(&self.session_event),
                    task: Some(&task.id),
                },
                json!({"task_id": task.id, "cause": "session_stopped"}),
            );
        }
        self.running.cancel(None);
    }

    /// The context's conversation so far, as the JSON array a loop puts before a task.
    fn history(&self, context_id: &str) -> Vec<Value> {
        let Some(threads) = &self.threads else {
            return Vec::new();
        };
        threads.history(context_id, |why| self.workdir.log(&why))
    }

    /// A completed task's conversation becomes its context's history. A failed one
    /// leaves the history as it was: it may end in a tool call nobody answered, which a
    /// provider would refuse in the next request.
    fn remember(&self, context_id: &str, conversation: Option<Vec<Value>>) {
        let (Some(threads), Some(messages)) = (&self.threads, conversation) else {
            return;
        };
        if let Err(why) = threads.keep(context_id, messages) {
            self.workdir.log(&why);
        }
    }

    /// The request a driver receives, in upstream's neutral JSON shape.
    fn request(&self, request: &InferenceRequest) -> Result<String, String> {
        let messages: Value = serde_json::from_str(&request.messages)
            .map_err(|e| format!("the session loop sent messages that are not JSON: {e}"))?;
        if !messages.is_array() {
            return Err("the session loop sent messages that are not a JSON array".into());
        }
        let tools = if request.with_tools {
            self.tools.specs()
        } else {
            Vec::new()
        };
        let mut body = json!({"model": self.model, "max_tokens": self.max_tokens});
        if let Some(system) = &self.system {
            body["system"] = system.clone().into();
        }
        body["messages"] = messages;
        body["tools"] = tools.into();
        body["params"] = json!({});
        Ok(body.to_string())
    }
}

/// The trace's `decision` of a reply, and the first tool it asks for.
fn decision(reply: &InferenceReply) -> (&'static str, Option<String>) {
    match reply.stop_reason {
        StopReason::ToolCall => (
            "tool_call",
            reply.tool_calls.first().map(|c| c.name.clone()),
        ),
        StopReason::EndTurn => ("end_turn", None),
        StopReason::MaxTokens => ("text", None),
    }
}

fn stop_reason_str(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolCall => "tool_call",
        StopReason::MaxTokens => "max_tokens",
    }
}

/// A rough count (4 bytes a token) where the driver reports no usage.
fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The messages of `request` followed by the reply's assistant message (or the
/// compacted conversation, which ends with it).
fn conversation(request: &InferenceRequest, reply: &InferenceReply) -> Option<Vec<Value>> {
    if let Some(context) = &reply.context {
        return match serde_json::from_str(context) {
            Ok(Value::Array(messages)) => Some(messages),
            _ => None,
        };
    }
    let Ok(Value::Array(mut messages)) = serde_json::from_str(&request.messages) else {
        return None;
    };
    messages.push(serde_json::from_str(&reply.assistant_message).ok()?);
    Some(messages)
}

/// One driver call, measured for its trace line.
struct Call {
    turn: u64,
    duration_ms: u64,
    input_estimate: u64,
    output_estimate: u64,
    /// The usage counts the provider reported (only the known keys, only numbers).
    reported: serde_json::Map<String, Value>,
}

const USAGE_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "thinking_tokens",
];

/// Reads a driver's reply, in the response shape `murmur:driver/inference` documents,
/// with the usage the provider reported.
fn parse_reply(
    raw: &str,
    request: &str,
    keep_calls: u64,
) -> Result<(InferenceReply, serde_json::Map<String, Value>), InferenceError> {
    let mut reply: Value = serde_json::from_str(raw)
        .map_err(|e| InferenceError::Malformed(format!("failed to parse driver response: {e}")))?;
    let stop = reply.get("stop_reason").and_then(Value::as_str);
    let stop_reason = match stop {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_call") => StopReason::ToolCall,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("error") => {
            let why = reply
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("driver returned error");
            return Err(InferenceError::Failed(why.to_string()));
        }
        Some(other) => {
            return Err(InferenceError::Failed(format!(
                "unsupported stop_reason '{other}'"
            )));
        }
        None => {
            return Err(InferenceError::Failed(
                "unsupported stop_reason '' (missing)".into(),
            ));
        }
    };
    let content = match reply.get_mut("content").map(Value::take) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(blocks)) => first_calls(blocks, keep_calls),
        Some(_) => {
            return Err(InferenceError::Failed(
                "driver response 'content' is not a list".into(),
            ));
        }
    };
    let text = content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let tool_calls = content.iter().filter_map(tool_call).collect::<Vec<_>>();
    if stop_reason == StopReason::ToolCall && tool_calls.is_empty() {
        return Err(InferenceError::Failed(
            "response stop_reason=tool_call but no tool_call blocks were present".into(),
        ));
    }
    let reported: serde_json::Map<String, Value> = USAGE_KEYS
        .iter()
        .filter_map(|key| {
            let n = reply.get("usage")?.get(*key)?.as_u64()?;
            Some((key.to_string(), n.into()))
        })
        .collect();
    let count = |key: &str| reported.get(key).and_then(Value::as_u64);
    let usage = Usage {
        input_tokens: count("input_tokens").unwrap_or_else(|| estimate_tokens(request)),
        output_tokens: count("output_tokens").unwrap_or_else(|| estimate_tokens(raw)),
    };
    let assistant = json!({"role": "assistant", "content": content});
    let reply = InferenceReply {
        stop_reason,
        text,
        tool_calls,
        assistant_message: assistant.to_string(),
        usage,
        context: None,
    };
    Ok((reply, reported))
}

/// The reply's blocks with at most `keep` tool calls, the first ones.
fn first_calls(blocks: Vec<Value>, keep: u64) -> Vec<Value> {
    let mut calls = 0u64;
    blocks
        .into_iter()
        .filter(|block| {
            if block.get("type").and_then(Value::as_str) != Some("tool_call") {
                return true;
            }
            calls += 1;
            calls <= keep
        })
        .collect()
}

fn tool_call(block: &Value) -> Option<ToolCall> {
    if block.get("type").and_then(Value::as_str) != Some("tool_call") {
        return None;
    }
    let input = match block.get("input") {
        None | Some(Value::Null) => "{}".to_string(),
        Some(v) => v.to_string(),
    };
    Some(ToolCall {
        id: block
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        name: block
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        input,
    })
}

/// Start-up cost, for users and for the start-up benchmark (`BENCHMARKS.md`).
fn log_instantiation(capsule: &Capsule, what: &str, started: Instant) {
    let micros = started.elapsed().as_micros();
    capsule
        .workdir
        .log(&format!("instantiated {what} in {micros} µs"));
}

/// The session loop component, linked once.
pub struct LoopComponent {
    pre: SessionLoopPre<LoopState>,
    label: String,
}

impl LoopComponent {
    pub fn new(engine: &Engine, component: &Component, label: String) -> Result<Self, Error> {
        engine::check_world(engine, component, &engine::SESSION_LOOP, &label)?;
        let mut linker = Linker::<LoopState>::new(engine.wasmtime());
        let link = |e: wasmtime::Error| {
            Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
        };
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
        SessionLoop::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(link)?;
        let pre = linker
            .instantiate_pre(component)
            .and_then(SessionLoopPre::new)
            .map_err(link)?;
        Ok(LoopComponent { pre, label })
    }

    /// Runs the whole session. A task the loop left running when it returned or
    /// trapped is ended `failed`, naming why, so no client waits for it forever; so is
    /// every task still queued. A loop past its deadline, or deaf to a stop or cancel
    /// (see `interrupt`), is dropped and ends the session.
    pub async fn run(&self, capsule: Arc<Capsule>) -> (Totals, Result<(), Error>) {
        let sandbox = match Sandbox::new(&Grants {
            workdir: Some(&capsule.workdir.root),
            env: capsule.grants.env.clone(),
            memory_bytes: capsule.grants.memory_bytes,
            deadline: capsule.grants.deadline,
            output: guest_log::Target::session_loop(&capsule.workdir.logs_dir()),
        }) {
            Ok(sandbox) => sandbox,
            Err(e) => return (Totals::default(), Err(e)),
        };
        let clock = Arc::new(Clock::new(capsule.grants.deadline));
        let state = LoopState {
            sandbox,
            capsule: capsule.clone(),
            driver: None,
            running: None,
            totals: Totals::default(),
            clock: clock.clone(),
            held_at: None,
        };
        let mut store = Store::new(self.pre.engine(), state);
        sandbox::limit(&mut store);
        let config = Config {
            max_turns: capsule.max_turns,
        };
        capsule.session_start_hooks().await;
        store.data_mut().restart_deadline();
        let call = async {
            let started = Instant::now();
            let bindings = self.pre.instantiate_async(&mut store).await?;
            log_instantiation(&capsule, "session loop", started);
            bindings
                .murmur_session_loop_()
                .call_run(&mut store, config)
                .await
        };
        // Dropping the losing `call` drops the guest's stack with it; the store's data
        // (the running task) stays ours to end.
        let ran = tokio::select! {
            ran = call => Ok(ran),
            why = interrupt::interrupted(&capsule, &clock) => Err(why),
        };
        let result = match ran {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(why))) => Err(Error::new(
                "E-RUN-007",
                format!("{} failed: {why}", self.label),
            )),
            // Spinning past the deadline traps in the epoch callback: the same deadline.
            Ok(Err(trap)) if interrupt::is_deadline_trap(&trap_text(&trap)) => store
                .data_mut()
                .interrupted(Interrupt::Deadline, &self.label),
            Ok(Err(trap)) if trap_text(&trap).starts_with(TRACE_FAILED) => {
                Err(Error::new("E-RUN-007", trap_text(&trap))
                    .hint("the session's records must stay writable: check the disk they are on"))
            }
            Ok(Err(trap)) => Err(Error::new(
                "E-RUN-001",
                format!("{} trapped: {}", self.label, trap_text(&trap)),
            )),
            Err(why) => store.data_mut().interrupted(why, &self.label),
        };
        let state = store.data_mut();
        if state.running.is_some() {
            let why = match &result {
                Ok(()) => "the session loop ended without finishing this task".to_string(),
                Err(e) => e.message.clone(),
            };
            let _ = state.finish(TaskOutcome::Failed(why)).await;
        }
        // No loop will take what is still queued: each task ends with a record.
        let why = match &result {
            Ok(()) => "the session loop ended before taking this task".to_string(),
            Err(e) => {
                capsule.queue.close();
                e.message.clone()
            }
        };
        capsule.fail_unstarted(&why);
        (state.totals, result)
    }
}
