//! Every trace line's layout: its `event_type` and its fields, in the order they are
//! written (the envelope that goes before them is `Trace::write`'s). A line is built
//! only here, so what each event records, and in which order, is read in one place.

use serde_json::{Map, Value, json};

use crate::exit_status::ExitStatus;
use crate::queue::Pending;

mod detached;
mod harness;
mod hooks;
mod peer;
pub use detached::{
    Completed, Detached, Lost, Work, shell_abandoned, shell_completed, shell_detached, shell_lost,
};
pub use harness::{OwnTool, harness_exit, harness_note, harness_session, harness_tool};
pub use hooks::{Hook, hook, hook_dispatch_error};
pub use peer::{
    MemberCall, PeerAnswered, PeerTask, member_call, peer_task_answered, peer_task_received,
};

/// One trace event, ready to write: its type and its fields (a JSON object).
#[derive(Debug)]
pub struct Line {
    kind: &'static str,
    fields: Value,
}

impl Line {
    fn new(kind: &'static str, fields: Value) -> Self {
        Line { kind, fields }
    }

    pub fn kind(&self) -> &'static str {
        self.kind
    }

    pub(super) fn into_fields(self) -> Value {
        self.fields
    }

    /// Any line, for tests of the writer itself.
    #[cfg(test)]
    pub(super) fn any(kind: &'static str, fields: Value) -> Self {
        Line::new(kind, fields)
    }

    /// The fields as written, in order (for tests of what a line records).
    #[cfg(test)]
    pub fn fields_json(&self) -> String {
        self.fields.to_string()
    }

    /// Sets `key`: in place when the layout has it, else after the other fields.
    fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields[key] = value.into();
        self
    }

    /// Text the operator asked to send with the spans (`capture_content`): a task's
    /// text or answer, kept in the line so an export later sends it too.
    pub fn with_content(self, key: &str, text: &str) -> Self {
        self.with(key, text)
    }

    fn with_some(self, key: &str, value: Option<impl Into<Value>>) -> Self {
        match value {
            Some(value) => self.with(key, value),
            None => self,
        }
    }
}

/// What a task and a whole session count, for `task_end`, `session_end` and the
/// `on-session-end` hooks.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Totals {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    pub shell_calls: u64,
}

impl Totals {
    pub fn add(&mut self, other: &Totals) {
        self.turns += other.turns;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.tool_calls += other.tool_calls;
        self.shell_calls += other.shell_calls;
    }
}

/// What `session_start` records of the capsule.
pub struct SessionStart<'a> {
    pub capsule_name: &'a str,
    pub capsule_version: &'a str,
    pub model: &'a str,
    pub max_turns: u32,
    /// The manifest's grants by category (`{"network": [..], "filesystem": "..",
    /// "shell": [..]}`), as hooks are told them at session start: recorded whole as
    /// `effective_grants`, and as the names of the granted categories in `capabilities`.
    pub grants: Value,
    pub tools_declared: Vec<&'a str>,
    pub system_prompt: Option<&'a str>,
    /// `mur run --system-prompt` set (or cleared) the prompt: the source is `cli`.
    pub system_prompt_from_cli: bool,
    pub resumed_from: Option<&'a str>,
    /// How errors name the loop, e.g. `built-in session loop`.
    pub session_loop: &'a str,
    /// `default` for the built-in loop, the artifact's name, or the `--loop` file's name.
    pub loop_name: &'a str,
    /// The artifact's `version`, mur's own for the built-in loop, none for `--loop`.
    pub loop_version: Option<&'a str>,
    pub driver: &'a str,
    /// The shell sandbox's record: declared and achieved class.
    pub containment: Value,
    /// Every component that runs: `[{component, sha256}]`.
    pub components: Value,
    /// Under `inference.transport: process`, the harness: `{name, version, program}`.
    pub harness: Option<Value>,
}

/// `session_start`: the first line, parent of every task.
pub fn session_start(s: SessionStart<'_>) -> Line {
    let prompt_sha = s.system_prompt.map(sha256_hex);
    let prompt_source = match (s.system_prompt_from_cli, s.system_prompt) {
        (true, _) => "cli",
        (false, Some(_)) => "manifest",
        (false, None) => "none",
    };
    Line::new(
        "session_start",
        json!({
            "capsule_name": s.capsule_name,
            "capsule_version": s.capsule_version,
            "model": s.model,
            "max_turns": s.max_turns,
            "capabilities": granted_categories(&s.grants),
            "tools_declared": s.tools_declared,
            "system_prompt_source": prompt_source,
            "system_prompt_sha256": prompt_sha,
            "resumed_from": s.resumed_from,
            "context_id": null,
            "effective_grants": s.grants,
            "session_loop": s.session_loop,
            "loop": s.loop_name,
            "loop_version": s.loop_version,
            "driver": s.driver,
            "containment": s.containment,
            "components": s.components,
            "transport": if s.harness.is_some() { "process" } else { "http" },
            "harness": s.harness,
        }),
    )
}

/// The categories a grant map grants anything in, in the order network, filesystem,
/// shell: upstream's `capabilities` is this list (its readers refuse a map there).
pub fn granted_categories(grants: &Value) -> Vec<&'static str> {
    let granted = |v: &Value| match v {
        Value::Null | Value::Bool(false) => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    };
    ["network", "filesystem", "shell"]
        .into_iter()
        .filter(|name| grants.get(name).is_some_and(granted))
        .collect()
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `session_end`: the totals of every task.
pub fn session_end(totals: &Totals, duration_ms: u64, exit_status: ExitStatus) -> Line {
    Line::new(
        "session_end",
        json!({
            "total_turns": totals.turns,
            "total_input_tokens": totals.input_tokens,
            "total_output_tokens": totals.output_tokens,
            "total_tool_calls": totals.tool_calls,
            "total_shell_calls": totals.shell_calls,
            "duration_ms": duration_ms,
            "exit_status": exit_status.as_str(),
        }),
    )
}

/// A connection the shell's network proxy allowed or refused.
pub fn shell_http(
    allowed: bool,
    method: &str,
    host: &str,
    port: u16,
    reason: Option<&str>,
) -> Line {
    let kind = if allowed {
        "shell_http_allowed"
    } else {
        "shell_http_denied"
    };
    Line::new(
        kind,
        json!({"method": method, "host": host, "port": port, "reason": reason}),
    )
}

/// `a2a_task_received`: a task arrived over `message/stream`.
pub fn a2a_task_received(task: &Pending, traceparent: Option<&str>) -> Line {
    Line::new(
        "a2a_task_received",
        json!({
            "task_id": task.id,
            "context_id": task.context_id,
            "message_id": task.message_id,
            "traceparent_from_caller": traceparent,
        }),
    )
}

/// `task_enqueued`: the session loop queued a follow-up task (the line's task), while
/// `by_task` ran.
pub fn task_enqueued(task: &Pending, by_task: Option<&str>) -> Line {
    Line::new(
        "task_enqueued",
        json!({
            "context_id": task.context_id,
            "origin": task.origin.as_str(),
            "lane": task.origin.lane().as_str(),
            "by_task_id": by_task,
            "message_parts_bytes": task.text.len(),
        }),
    )
}

/// Why a task was turned away before it ran.
#[derive(Clone, Copy, Debug)]
pub enum Rejected {
    /// The capsule could not take another task.
    Busy,
    /// The session stopped while the task waited.
    SessionStopped,
}

pub fn task_rejected(task_id: &str, cause: Rejected) -> Line {
    let cause = match cause {
        Rejected::Busy => "capsule_busy",
        Rejected::SessionStopped => "session_stopped",
    };
    Line::new("task_rejected", json!({"task_id": task_id, "cause": cause}))
}

/// `task_canceled` of a task canceled while it waited in the queue.
pub fn task_canceled_queued(task_id: &str) -> Line {
    Line::new(
        "task_canceled",
        json!({"task_id": task_id, "phase": "queued", "detached_work_ids": []}),
    )
}

/// `task_start`: its event id is the parent of the task's lines.
pub fn task_start(task: &Pending) -> Line {
    let trust = if task.origin.trusted() {
        "trusted"
    } else {
        "untrusted"
    };
    Line::new(
        "task_start",
        json!({
            "task_id": task.id,
            "context_id": task.context_id,
            "source": task.source.as_str(),
            "origin": task.origin.as_str(),
            "trust": trust,
            "lane": task.origin.lane().as_str(),
            "message_parts_bytes": task.text.len(),
        }),
    )
    .with_some(super::CALLER_FIELD, task.traceparent.as_deref())
}

/// `task_end`: how the task ended and what it counted.
pub fn task_end(
    task_id: &str,
    exit_status: ExitStatus,
    duration_ms: u64,
    c: &Totals,
    reopens: u32,
) -> Line {
    Line::new(
        "task_end",
        json!({
            "task_id": task_id,
            "exit_status": exit_status.as_str(),
            "duration_ms": duration_ms,
            "turns": c.turns,
            "input_tokens": c.input_tokens,
            "output_tokens": c.output_tokens,
            "tool_calls": c.tool_calls,
            "shell_calls": c.shell_calls,
            "reopen_count": reopens,
        }),
    )
}

/// The reason's bound: 2000 bytes, cut on a character boundary.
const FAILED_REASON_BYTES: usize = 2000;

/// `task_failed`: a runtime error ended the task.
pub fn task_failed(task_id: &str, reason: &str) -> Line {
    let mut end = reason.len().min(FAILED_REASON_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Line::new(
        "task_failed",
        json!({"task_id": task_id, "cause": "runtime_error", "reason": &reason[..end]}),
    )
}

/// `spend_ceiling_reached`: a spend ceiling refused an inference call before the
/// driver was called; `requested` is 0 when the ceiling was already reached.
pub fn spend_ceiling_reached(r: &crate::spend::Refusal) -> Line {
    Line::new(
        "spend_ceiling_reached",
        json!({
            "limit": r.limit.key(),
            "ceiling": r.ceiling,
            "used": r.used,
            "requested": r.requested,
        }),
    )
}

/// A granted reopen of `task_id`.
pub struct Reopened<'a> {
    pub task_id: &'a str,
    pub hook: &'a str,
    pub reason: &'a str,
    pub number: u32,
    pub turns_remaining: u64,
}

pub fn task_reopened(r: &Reopened<'_>) -> Line {
    Line::new(
        "task_reopened",
        json!({
            "task_id": r.task_id,
            "hook_name": r.hook,
            "reason": r.reason,
            "reopen_number": r.number,
            "attempt_context": "continued",
            "turns_remaining": r.turns_remaining,
        }),
    )
}

/// What a component's outbound request ran into: `http_denied` or `http_retry`.
pub fn outbound(event: crate::outbound::Event) -> Line {
    match event {
        crate::outbound::Event::Denied { origin } => http_denied(&origin),
        crate::outbound::Event::Retry {
            url,
            attempt,
            cause,
            delay,
        } => http_retry(&url, attempt, &cause, delay.as_millis() as u64),
    }
}

/// A driver request refused: its origin is not allowed.
fn http_denied(origin: &str) -> Line {
    Line::new(
        "http_denied",
        json!({"origin": origin, "reason": "not in capabilities.network.allow"}),
    )
}

/// A driver request that failed and is tried again after `delay_ms`.
fn http_retry(url: &str, attempt: u32, cause: &str, delay_ms: u64) -> Line {
    Line::new(
        "http_retry",
        json!({"url": url, "attempt": attempt, "cause": cause, "delay_ms": delay_ms}),
    )
}

/// One driver call, measured for its `inference` line.
pub struct Turn {
    pub turn: u64,
    pub duration_ms: u64,
    /// The host's estimates: what `input_tokens` and `output_tokens` record.
    pub input_estimate: u64,
    pub output_estimate: u64,
}

/// `inference` of a reply. Its `input_tokens`/`output_tokens` are the host's estimates;
/// what the provider reported goes after them, `input_tokens`/`output_tokens` as
/// `input_tokens_actual`/`output_tokens_actual`, the others by their own names. The
/// first inference of a task offered a seed ends with `seed_carried`: whether its
/// request carried the seed.
pub fn inference(
    t: &Turn,
    (decision, tool): (&str, Option<String>),
    stop_reason: &str,
    reported: &Map<String, Value>,
    seed_carried: Option<bool>,
) -> Line {
    let mut line = Line::new(
        "inference",
        json!({
            "turn": t.turn,
            "input_tokens": t.input_estimate,
            "output_tokens": t.output_estimate,
            "decision": decision,
            "tool_name": tool,
            "stop_reason": stop_reason,
            "duration_ms": t.duration_ms,
        }),
    );
    for (key, value) in reported {
        let key = match key.as_str() {
            "input_tokens" => "input_tokens_actual",
            "output_tokens" => "output_tokens_actual",
            other => other,
        };
        line = line.with(key, value.clone());
    }
    with_seed(line, seed_carried)
}

fn with_seed(line: Line, seed_carried: Option<bool>) -> Line {
    match seed_carried {
        Some(carried) => line.with("seed_carried", carried),
        None => line,
    }
}

/// `inference` of a call that failed: `error_code` names how. Its `decision` is
/// `error`, as upstream writes it: upstream's reader requires a `decision` on every
/// `inference` line and refuses the whole trace without one.
pub fn inference_failed(
    t: &Turn,
    error_code: &str,
    error: &str,
    seed_carried: Option<bool>,
) -> Line {
    let line = Line::new(
        "inference",
        json!({
            "turn": t.turn,
            "input_tokens": t.input_estimate,
            "output_tokens": 0,
            "decision": "error",
            "tool_name": null,
            "duration_ms": t.duration_ms,
            "error_code": error_code,
            "error": error,
        }),
    );
    with_seed(line, seed_carried)
}

/// A tool call as the model asked for it.
pub struct Call<'a> {
    pub turn: u64,
    pub name: &'a str,
    /// Empty when the driver gave none.
    pub id: &'a str,
    pub input: &'a str,
}

/// What became of a call.
pub struct Ran<'a> {
    /// Exactly what the model received.
    pub output: &'a str,
    pub duration_ms: u64,
    pub is_error: bool,
    pub exit_code: Option<i32>,
    /// Host text for a call that did not run as asked.
    pub error: Option<&'a str>,
}

impl Ran<'_> {
    fn status(&self) -> &'static str {
        if self.is_error { "error" } else { "ok" }
    }
}

pub fn skill_call(call: &Call<'_>, ran: &Ran<'_>) -> Line {
    Line::new(
        "skill_call",
        json!({
            "turn": call.turn,
            "skill_name": call.name,
            "output_bytes": ran.output.len(),
            "duration_ms": ran.duration_ms,
            "status": ran.status(),
        }),
    )
}

/// `tool_call`; its `input` is the call's JSON (its text when it is not JSON), and
/// with `trace.include_tool_output` its `output` is what the model received.
pub fn tool_call(call: &Call<'_>, ran: &Ran<'_>, include_output: bool) -> Line {
    let input = serde_json::from_str::<Value>(call.input)
        .unwrap_or_else(|_| Value::String(call.input.to_string()));
    Line::new(
        "tool_call",
        json!({
            "turn": call.turn,
            "tool_name": call.name,
            "tool_call_id": (!call.id.is_empty()).then_some(call.id),
            "input": input,
            "input_bytes": call.input.len(),
            "output_bytes": ran.output.len(),
            "duration_ms": ran.duration_ms,
            "status": ran.status(),
            "exit_code": ran.exit_code,
        }),
    )
    .with_some("error", ran.error)
    .with_some("output", include_output.then_some(ran.output))
}

/// A shell command that ran within its turn.
pub struct Shell<'a> {
    pub turn: u64,
    pub binary: &'a str,
    pub command: &'a str,
    pub exit_code: i32,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub duration_ms: u64,
    pub resource_limit: Option<&'static str>,
}

pub fn shell(s: &Shell<'_>) -> Line {
    Line::new(
        "shell",
        json!({
            "turn": s.turn,
            "binary": s.binary,
            "command": s.command,
            "exit_code": s.exit_code,
            "stdout_bytes": s.stdout_bytes,
            "stderr_bytes": s.stderr_bytes,
            "duration_ms": s.duration_ms,
        }),
    )
    .with_some("resource_limit", s.resource_limit)
}

/// A policy hook refused a call before it ran.
pub struct Denied<'a> {
    pub turn: u64,
    pub event: &'a str,
    pub hook: &'a str,
    pub target: &'a str,
    pub reason: &'a str,
}

pub fn call_denied(d: &Denied<'_>) -> Line {
    Line::new(
        "call_denied",
        json!({
            "turn": d.turn,
            "event": d.event,
            "hook_name": d.hook,
            "target": d.target,
            "reason": d.reason,
        }),
    )
}

/// The workdir as measured past its quota: at least `bytes` now, `baseline` at start.
#[derive(Clone, Copy)]
pub struct Breach {
    pub bytes: u64,
    pub baseline: u64,
    pub limit_bytes: u64,
}

/// `workdir_quota_breach` after a tool call of the task.
pub fn quota_breach_after_call(turn: u64, tool_name: &str, b: Breach) -> Line {
    Line::new(
        "workdir_quota_breach",
        json!({
            "turn": turn,
            "tool_name": tool_name,
            "bytes_at_least": b.bytes,
            "bytes_at_start": b.baseline,
            "limit": "capabilities.limits.workdir_bytes",
            "limit_bytes": b.limit_bytes,
        }),
    )
}

/// `workdir_quota_breach` for a write refused during a tool call: the workdir stayed
/// within its quota, `bytes_would_be` is what the refused write would have made it.
pub fn quota_refused_during_call(turn: u64, tool_name: &str, b: Breach) -> Line {
    Line::new(
        "workdir_quota_breach",
        json!({
            "turn": turn,
            "tool_name": tool_name,
            "refused": true,
            "bytes_would_be": b.bytes,
            "bytes_at_start": b.baseline,
            "limit": "capabilities.limits.workdir_bytes",
            "limit_bytes": b.limit_bytes,
        }),
    )
}

/// `workdir_quota_breach` when a detached command ended.
pub fn quota_breach_after_work(work_id: &str, b: Breach) -> Line {
    Line::new(
        "workdir_quota_breach",
        json!({
            "work_id": work_id,
            "bytes_at_least": b.bytes,
            "bytes_at_start": b.baseline,
            "limit": "capabilities.limits.workdir_bytes",
            "limit_bytes": b.limit_bytes,
        }),
    )
}

/// A seed an `on-task-start` hook proposed, and what was committed of it.
pub struct Seeded<'a> {
    pub task_id: &'a str,
    pub hook: &'a str,
    pub tokens: u64,
    pub proposed_tokens: u64,
    pub budget_tokens: u64,
    pub outcome: &'a str,
    pub message_ids: &'a [String],
    pub reason: Option<&'a str>,
}

pub fn context_seed(s: &Seeded<'_>) -> Line {
    Line::new(
        "context_seed",
        json!({
            "task_id": s.task_id,
            "hook_name": s.hook,
            "tokens": s.tokens,
            "proposed_tokens": s.proposed_tokens,
            "budget_tokens": s.budget_tokens,
            "outcome": s.outcome,
            "message_ids": s.message_ids,
        }),
    )
    .with_some("reason", s.reason)
}

/// A committed compaction of the conversation.
pub fn compaction(task_id: &str, turn: u64, before: u64, after: u64, before_source: &str) -> Line {
    Line::new(
        "compaction",
        json!({
            "task_id": task_id,
            "turn": turn,
            "tokens_before": before,
            "tokens_after": after,
            "tokens_before_source": before_source,
        }),
    )
}

/// A compaction that did not happen, and why.
pub fn compaction_declined(turn: u64, tokens: u64, tokens_source: &str, reason: &str) -> Line {
    Line::new(
        "compaction_declined",
        json!({"turn": turn, "tokens": tokens, "tokens_source": tokens_source, "reason": reason}),
    )
}

/// A `request-input` wait: asked, answered, or timed out.
pub enum Input {
    Requested { prompt_bytes: usize },
    Received { reply_bytes: usize },
    TimedOut { secs: u64 },
}

pub fn input(task_id: &str, event: Input) -> Line {
    let line = match event {
        Input::Requested { prompt_bytes } => {
            Line::new("input_requested", json!({"prompt_bytes": prompt_bytes}))
        }
        Input::Received { reply_bytes } => {
            Line::new("input_received", json!({"reply_bytes": reply_bytes}))
        }
        Input::TimedOut { secs } => Line::new("input_timeout", json!({"input_timeout_secs": secs})),
    };
    line.with("task_id", task_id)
}

#[cfg(test)]
mod tests;
