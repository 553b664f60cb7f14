//! What one session did, counted from its trace: what `show` prints and `diff` and
//! `report` compare.
//!
//! The session's totals come from its `session_end` when it has one (the runtime's own
//! count, which includes what the provider reported); a session without one (killed,
//! or still running) is counted from its lines, and says so.

use serde::Serialize;
use serde_json::Value;

use super::parse::{Event, Parsed};

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub session_id: String,
    pub path: String,
    pub capsule_name: Option<String>,
    pub capsule_version: Option<String>,
    pub model: Option<String>,
    pub max_turns: Option<u64>,
    /// The granted categories: upstream's list, or (in our traces before it was one)
    /// the keys of the map that granted something.
    pub capabilities: Vec<String>,
    pub tools_declared: Vec<String>,
    pub system_prompt_source: Option<String>,
    pub system_prompt_sha256: Option<String>,
    /// `session_end.exit_status`; none when the session has no `session_end`.
    pub exit_status: Option<String>,
    /// Whether a `session_end` recorded the totals below.
    pub ended: bool,
    pub started_ms: Option<u64>,
    pub duration_ms: u64,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    pub tool_errors: u64,
    pub shell_calls: u64,
    pub turn_rows: Vec<TurnRow>,
    pub calls: Vec<CallRow>,
    pub shells: Vec<ShellRow>,
    pub detached: Detached,
    pub compactions: Vec<Compaction>,
    pub compactions_declined: Vec<Declined>,
    pub tasks: Vec<TaskRow>,
    pub failures: Vec<Failure>,
    pub reopens: Vec<Reopen>,
    pub denials: Vec<Denial>,
    /// A torn last line that was skipped.
    pub torn_line: Option<usize>,
}

/// A turn of the agent loop (not a hook's inference).
#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    /// The line of the trace it was read from.
    pub line: usize,
    pub task_id: Option<String>,
    pub turn: u64,
    pub decision: String,
    pub tool_name: Option<String>,
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    pub line: usize,
    pub task_id: Option<String>,
    pub turn: u64,
    pub tool_name: String,
    pub duration_ms: u64,
    pub ok: bool,
    pub input: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShellRow {
    pub turn: u64,
    pub binary: String,
    pub command: String,
    pub exit_code: i64,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Detached {
    pub detached: u64,
    pub completed: u64,
    pub abandoned: u64,
    pub lost: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Compaction {
    pub turn: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Declined {
    pub turn: u64,
    pub tokens: u64,
    pub reason: String,
}

/// A `task_failed` line: a runtime error that ended an attempt.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub task_id: Option<String>,
    pub turn: Option<u64>,
    pub cause: String,
    pub reason: String,
}

/// A `task_reopened` line.
#[derive(Debug, Clone, Serialize)]
pub struct Reopen {
    pub task_id: Option<String>,
    pub reopen_number: u64,
    pub hook_name: String,
    pub reason: String,
}

/// A `call_denied` line: a policy hook refused a call before it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Denial {
    pub turn: u64,
    pub event: String,
    pub target: String,
    pub hook_name: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    pub task_id: String,
    pub source: Option<String>,
    pub origin: Option<String>,
    pub trust: Option<String>,
    pub lane: Option<String>,
    /// `task_end.exit_status`; none when the task has no `task_end`.
    pub exit_status: Option<String>,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub duration_ms: u64,
    pub reopen_count: u64,
}

/// The counts of a session summed from its lines, for when no `session_end` has them.
#[derive(Default)]
struct Counted {
    turns: u64,
    input_tokens: u64,
    output_tokens: u64,
    shell_calls: u64,
}

pub fn summarize(id: &str, parsed: &Parsed) -> Summary {
    let mut s = Summary::empty(id, parsed);
    let mut counted = Counted::default();
    for e in &parsed.events {
        s.add(e, &mut counted);
    }
    s.close(parsed, &counted);
    s
}

impl Summary {
    fn empty(id: &str, parsed: &Parsed) -> Self {
        let session_id = parsed
            .events
            .iter()
            .find_map(|e| e.str("session_id"))
            .unwrap_or(id)
            .to_string();
        Summary {
            session_id,
            path: parsed.path.display().to_string(),
            capsule_name: None,
            capsule_version: None,
            model: None,
            max_turns: None,
            capabilities: Vec::new(),
            tools_declared: Vec::new(),
            system_prompt_source: None,
            system_prompt_sha256: None,
            exit_status: None,
            ended: false,
            started_ms: None,
            duration_ms: 0,
            turns: 0,
            input_tokens: 0,
            output_tokens: 0,
            tool_calls: 0,
            tool_errors: 0,
            shell_calls: 0,
            turn_rows: Vec::new(),
            calls: Vec::new(),
            shells: Vec::new(),
            detached: Detached::default(),
            compactions: Vec::new(),
            compactions_declined: Vec::new(),
            tasks: Vec::new(),
            failures: Vec::new(),
            reopens: Vec::new(),
            denials: Vec::new(),
            torn_line: parsed.torn,
        }
    }

    fn add(&mut self, e: &Event, counted: &mut Counted) {
        match e.kind.as_str() {
            "session_start" => self.start(e),
            "session_end" => self.end(e),
            "task_start" => self.tasks.push(task_row(e)),
            "task_end" => self.task_end(e),
            "inference" => self.inference(e, counted),
            "tool_call" => self.tool_call(e),
            "shell" => {
                counted.shell_calls += 1;
                self.shells.push(ShellRow {
                    turn: e.u64("turn").unwrap_or_default(),
                    binary: text(e, "binary"),
                    command: text(e, "command"),
                    exit_code: e.i64("exit_code").unwrap_or_default(),
                    duration_ms: e.u64("duration_ms").unwrap_or_default(),
                });
            }
            "shell_detached" => self.detached.detached += 1,
            "shell_completed" => self.detached.completed += 1,
            "shell_abandoned" => self.detached.abandoned += 1,
            "shell_lost" => self.detached.lost += 1,
            "compaction" => self.compactions.push(Compaction {
                turn: e.u64("turn").unwrap_or_default(),
                tokens_before: e.u64("tokens_before").unwrap_or_default(),
                tokens_after: e.u64("tokens_after").unwrap_or_default(),
            }),
            "compaction_declined" => self.compactions_declined.push(Declined {
                turn: e.u64("turn").unwrap_or_default(),
                tokens: e.u64("tokens").unwrap_or_default(),
                reason: text(e, "reason"),
            }),
            "task_failed" => self.failures.push(Failure {
                task_id: e.str("task_id").map(str::to_string),
                turn: e.u64("turn"),
                cause: text(e, "cause"),
                reason: text(e, "reason"),
            }),
            "task_reopened" => self.reopens.push(Reopen {
                task_id: e.str("task_id").map(str::to_string),
                reopen_number: e.u64("reopen_number").unwrap_or_default(),
                hook_name: text(e, "hook_name"),
                reason: text(e, "reason"),
            }),
            "call_denied" => self.denials.push(Denial {
                turn: e.u64("turn").unwrap_or_default(),
                event: text(e, "event"),
                target: text(e, "target"),
                hook_name: text(e, "hook_name"),
                reason: text(e, "reason"),
            }),
            _ => {}
        }
    }

    fn start(&mut self, e: &Event) {
        self.capsule_name = e.str("capsule_name").map(str::to_string);
        self.capsule_version = e.str("capsule_version").map(str::to_string);
        self.model = e.str("model").map(str::to_string);
        self.max_turns = e.u64("max_turns");
        self.capabilities = capabilities(e.get("capabilities"));
        self.tools_declared = strings(e.get("tools_declared"));
        self.system_prompt_source = e.str("system_prompt_source").map(str::to_string);
        self.system_prompt_sha256 = e.str("system_prompt_sha256").map(str::to_string);
    }

    fn end(&mut self, e: &Event) {
        self.ended = true;
        self.exit_status = e.str("exit_status").map(str::to_string);
        self.turns = e.u64("total_turns").unwrap_or_default();
        self.input_tokens = e.u64("total_input_tokens").unwrap_or_default();
        self.output_tokens = e.u64("total_output_tokens").unwrap_or_default();
        self.tool_calls = e.u64("total_tool_calls").unwrap_or_default();
        self.shell_calls = e.u64("total_shell_calls").unwrap_or_default();
        self.duration_ms = e.u64("duration_ms").unwrap_or_default();
    }

    fn task_end(&mut self, e: &Event) {
        let id = e.str("task_id").unwrap_or_default();
        let at = match self.tasks.iter().rposition(|t| t.task_id == id) {
            Some(i) => i,
            None => {
                self.tasks.push(task_row(e));
                self.tasks.len() - 1
            }
        };
        let row = &mut self.tasks[at];
        row.exit_status = e.str("exit_status").map(str::to_string);
        row.turns = e.u64("turns").unwrap_or_default();
        row.input_tokens = e.u64("input_tokens").unwrap_or_default();
        row.output_tokens = e.u64("output_tokens").unwrap_or_default();
        row.duration_ms = e.u64("duration_ms").unwrap_or_default();
        row.reopen_count = e.u64("reopen_count").unwrap_or_default();
    }

    fn inference(&mut self, e: &Event, counted: &mut Counted) {
        // A hook's `run-inference` is no turn of the agent loop.
        if e.str("origin").is_some_and(|o| o.starts_with("hook:")) {
            return;
        }
        counted.turns += 1;
        // Saturating: the figures are input, and a made-up trace must not overflow them.
        counted.input_tokens = counted
            .input_tokens
            .saturating_add(e.u64("input_tokens").unwrap_or_default());
        counted.output_tokens = counted
            .output_tokens
            .saturating_add(e.u64("output_tokens").unwrap_or_default());
        let error_code = e.str("error_code").map(str::to_string);
        self.turn_rows.push(TurnRow {
            line: e.line,
            task_id: e.str("task_id").map(str::to_string),
            turn: e.u64("turn").unwrap_or_default(),
            decision: match (&error_code, e.str("decision")) {
                (Some(_), _) => "error".to_string(),
                (None, Some(d)) => d.to_string(),
                (None, None) => "—".to_string(),
            },
            tool_name: e.str("tool_name").map(str::to_string),
            error_code,
        });
    }

    fn tool_call(&mut self, e: &Event) {
        let ok = e.str("status") == Some("ok");
        self.calls.push(CallRow {
            line: e.line,
            task_id: e.str("task_id").map(str::to_string),
            turn: e.u64("turn").unwrap_or_default(),
            tool_name: text(e, "tool_name"),
            duration_ms: e.u64("duration_ms").unwrap_or_default(),
            ok,
            input: e.get("input").cloned(),
        });
    }

    /// The start time, the duration, and the totals of a session no `session_end` closed.
    fn close(&mut self, parsed: &Parsed, counted: &Counted) {
        let stamps: Vec<u64> = parsed
            .events
            .iter()
            .filter_map(|e| e.u64("timestamp"))
            .collect();
        self.started_ms = parsed
            .events
            .iter()
            .find(|e| e.kind == "session_start")
            .and_then(|e| e.u64("timestamp"))
            .or_else(|| stamps.first().copied());
        self.tool_errors = self.calls.iter().filter(|c| !c.ok).count() as u64;
        if self.ended {
            return;
        }
        self.duration_ms = match (stamps.iter().min(), stamps.iter().max()) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        };
        self.turns = counted.turns;
        self.input_tokens = counted.input_tokens;
        self.output_tokens = counted.output_tokens;
        self.tool_calls = self.calls.len() as u64;
        self.shell_calls = counted.shell_calls;
    }

    /// How the session ended, for reading: its exit status, or that it has none.
    pub fn status(&self) -> &str {
        match &self.exit_status {
            Some(status) => status,
            None if self.ended => "unknown",
            None => "unended",
        }
    }

    /// The figures `diff` and `report` compare, in the order they print them.
    pub fn metrics(&self) -> Vec<(Metric, f64)> {
        [
            (Metric::Turns, self.turns),
            (Metric::Duration, self.duration_ms),
            (Metric::InputTokens, self.input_tokens),
            (Metric::OutputTokens, self.output_tokens),
            (Metric::ToolCalls, self.tool_calls),
            (Metric::ToolErrors, self.tool_errors),
            (Metric::ShellCalls, self.shell_calls),
            (Metric::Tasks, self.tasks.len() as u64),
            (Metric::Compactions, self.compactions.len() as u64),
        ]
        .into_iter()
        .map(|(m, v)| (m, v as f64))
        .collect()
    }
}

/// A figure of a session, with how it is named and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Turns,
    Duration,
    InputTokens,
    OutputTokens,
    ToolCalls,
    ToolErrors,
    ShellCalls,
    Tasks,
    Compactions,
}

impl Metric {
    /// Its label in tables (upstream's where upstream has the metric).
    pub fn label(self) -> &'static str {
        match self {
            Metric::Turns => "turns",
            Metric::Duration => "duration",
            Metric::InputTokens => "input tokens",
            Metric::OutputTokens => "output tokens",
            Metric::ToolCalls => "tool calls",
            Metric::ToolErrors => "tool errors",
            Metric::ShellCalls => "shell calls",
            Metric::Tasks => "tasks",
            Metric::Compactions => "compactions",
        }
    }

    /// Its key in `--json`.
    pub fn key(self) -> &'static str {
        match self {
            Metric::Turns => "turns",
            Metric::Duration => "duration_ms",
            Metric::InputTokens => "input_tokens",
            Metric::OutputTokens => "output_tokens",
            Metric::ToolCalls => "tool_calls",
            Metric::ToolErrors => "tool_errors",
            Metric::ShellCalls => "shell_calls",
            Metric::Tasks => "tasks",
            Metric::Compactions => "compactions",
        }
    }
}

fn task_row(e: &Event) -> TaskRow {
    TaskRow {
        task_id: e.str("task_id").unwrap_or_default().to_string(),
        source: e.str("source").map(str::to_string),
        origin: e.str("origin").map(str::to_string),
        trust: e.str("trust").map(str::to_string),
        lane: e.str("lane").map(str::to_string),
        exit_status: None,
        turns: 0,
        input_tokens: 0,
        output_tokens: 0,
        duration_ms: 0,
        reopen_count: 0,
    }
}

fn text(e: &Event, key: &str) -> String {
    e.str(key).unwrap_or("—").to_string()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `capabilities` as a list of names; a map (our traces before upstream's list) gives
/// the categories it grants something in.
fn capabilities(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(map @ Value::Object(_)) => crate::trace::line::granted_categories(map)
            .into_iter()
            .map(str::to_string)
            .collect(),
        other => strings(other),
    }
}
