//! A trace line's span name, kind and attributes, after the OpenTelemetry GenAI
//! semantic conventions: `invoke_agent {agent}` for a task (and for a call to another
//! agent), `chat {model}` for a turn, `execute_tool {tool}` for a tool call, with
//! `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.usage.*`,
//! `gen_ai.conversation.id`, and the A2A task's id and state. What the conventions do
//! not name is under `mur.`.

use opentelemetry::trace::SpanKind;
use opentelemetry::{Array, KeyValue, StringValue, Value as OtelValue};
use serde_json::{Map, Value};

/// What the session's first line says that every span of it is about.
#[derive(Debug, Clone, Default)]
pub struct SessionFacts {
    pub agent: String,
    pub version: String,
    pub model: String,
    pub provider: String,
}

impl SessionFacts {
    pub fn of(start: &Map<String, Value>) -> Self {
        let text = |k: &str| {
            start
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        SessionFacts {
            agent: text("capsule_name"),
            version: text("capsule_version"),
            model: text("model"),
            provider: provider_of(&text("driver")),
        }
    }
}

/// `gen_ai.provider.name` from the driver's label: the conventions' names for the two
/// providers the built-in drivers speak to, else the driver's own word.
fn provider_of(driver: &str) -> String {
    let d = driver.to_ascii_lowercase();
    if d.contains("anthropic") || d.contains("claude") {
        "anthropic".into()
    } else if d.contains("openai") {
        "openai".into()
    } else if d.contains("scripted") {
        "mur.scripted".into()
    } else if d.is_empty() {
        "_OTHER".into()
    } else {
        format!("mur.{}", d.split_whitespace().last().unwrap_or("driver"))
    }
}

/// A span's name, kind and attributes, from the line that opens or is it.
pub struct Described {
    pub name: String,
    pub kind: SpanKind,
    pub attributes: Vec<KeyValue>,
}

/// The attributes what a line says may carry, by whether the operator opted in to
/// content (prompt and reply text, tools' arguments and results).
pub struct Describe<'a> {
    pub facts: &'a SessionFacts,
    pub content: bool,
}

fn text<'a>(line: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    line.get(key).and_then(Value::as_str)
}

fn int(line: &Map<String, Value>, key: &str) -> Option<i64> {
    line.get(key).and_then(Value::as_i64)
}

fn push_text(out: &mut Vec<KeyValue>, key: &'static str, value: Option<&str>) {
    if let Some(v) = value {
        out.push(KeyValue::new(key, v.to_string()));
    }
}

fn push_int(out: &mut Vec<KeyValue>, key: &'static str, value: Option<i64>) {
    if let Some(v) = value {
        out.push(KeyValue::new(key, v));
    }
}

impl Describe<'_> {
    /// The span of a `session_start`, `task_start` or whole-span line.
    pub fn span(&self, kind: &str, line: &Map<String, Value>) -> Described {
        match kind {
            "session_start" => self.session(line),
            "task_start" => self.task(line),
            "inference" => self.chat(line),
            "tool_call" | "skill_call" => self.tool(kind, line),
            "shell" => self.shell(line),
            "member_call" => self.member_call(line),
            "hook" => self.hook(line),
            _ => self.other(kind, line),
        }
    }

    fn common(&self, op: &'static str) -> Vec<KeyValue> {
        vec![
            KeyValue::new("gen_ai.operation.name", op),
            KeyValue::new("gen_ai.provider.name", self.facts.provider.clone()),
        ]
    }

    fn session(&self, line: &Map<String, Value>) -> Described {
        // No GenAI operation is a session: its model and usage stay under `mur.`, so
        // a backend that sums `gen_ai.usage.*` counts the session's tokens once.
        let mut a = vec![
            KeyValue::new("gen_ai.agent.name", self.facts.agent.clone()),
            KeyValue::new("gen_ai.agent.version", self.facts.version.clone()),
            KeyValue::new("mur.session.model", self.facts.model.clone()),
        ];
        push_text(&mut a, "mur.session.id", text(line, "session_id"));
        push_text(&mut a, "mur.session.loop", text(line, "loop"));
        push_text(&mut a, "mur.session.driver", text(line, "driver"));
        push_text(
            &mut a,
            "mur.session.resumed_from",
            text(line, "resumed_from"),
        );
        Described {
            name: format!("session {}", self.facts.agent),
            kind: SpanKind::Internal,
            attributes: a,
        }
    }

    fn task(&self, line: &Map<String, Value>) -> Described {
        let mut a = self.common("invoke_agent");
        a.push(KeyValue::new("gen_ai.agent.name", self.facts.agent.clone()));
        a.push(KeyValue::new(
            "gen_ai.request.model",
            self.facts.model.clone(),
        ));
        push_text(&mut a, "gen_ai.conversation.id", text(line, "context_id"));
        push_text(&mut a, "a2a.task.id", text(line, "task_id"));
        push_text(&mut a, "mur.task.origin", text(line, "origin"));
        push_text(&mut a, "mur.task.lane", text(line, "lane"));
        push_text(&mut a, "mur.task.source", text(line, "source"));
        if let Some(t) = text(line, "text").filter(|_| self.content) {
            a.push(KeyValue::new("gen_ai.input.messages", messages("user", t)));
        }
        Described {
            name: format!("invoke_agent {}", self.facts.agent),
            kind: SpanKind::Internal,
            attributes: a,
        }
    }

    fn chat(&self, line: &Map<String, Value>) -> Described {
        let mut a = self.common("chat");
        a.push(KeyValue::new(
            "gen_ai.request.model",
            self.facts.model.clone(),
        ));
        let input = int(line, "input_tokens_actual").or(int(line, "input_tokens"));
        let output = int(line, "output_tokens_actual").or(int(line, "output_tokens"));
        push_int(&mut a, "gen_ai.usage.input_tokens", input);
        push_int(&mut a, "gen_ai.usage.output_tokens", output);
        push_int(&mut a, "mur.turn", int(line, "turn"));
        if let Some(stop) = text(line, "stop_reason") {
            let reasons = Array::String(vec![StringValue::from(stop.to_string())]);
            a.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                OtelValue::Array(reasons),
            ));
        }
        push_text(&mut a, "mur.decision", text(line, "decision"));
        push_text(&mut a, "error.type", text(line, "error_code"));
        Described {
            name: format!("chat {}", self.facts.model),
            kind: SpanKind::Client,
            attributes: a,
        }
    }

    fn tool(&self, kind: &str, line: &Map<String, Value>) -> Described {
        let name_key = if kind == "skill_call" {
            "skill_name"
        } else {
            "tool_name"
        };
        let tool = text(line, name_key).unwrap_or("").to_string();
        let mut a = self.common("execute_tool");
        a.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
        push_text(&mut a, "gen_ai.tool.call.id", text(line, "tool_call_id"));
        let mcp_server = tool
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split("__").next());
        a.push(KeyValue::new(
            "gen_ai.tool.type",
            if mcp_server.is_some() {
                "extension"
            } else {
                "function"
            },
        ));
        if let Some(server) = mcp_server {
            a.push(KeyValue::new("mcp.method.name", "tools/call"));
            a.push(KeyValue::new("mur.mcp.server", server.to_string()));
        }
        if kind == "skill_call" {
            a.push(KeyValue::new("mur.skill", true));
        }
        push_int(&mut a, "mur.turn", int(line, "turn"));
        push_int(&mut a, "mur.tool.output_bytes", int(line, "output_bytes"));
        if text(line, "status") == Some("error") {
            a.push(KeyValue::new("error.type", "tool_error"));
        }
        if self.content {
            if let Some(input) = line.get("input") {
                let input = match input {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                a.push(KeyValue::new("gen_ai.tool.call.arguments", input));
            }
            push_text(&mut a, "gen_ai.tool.call.result", text(line, "output"));
        }
        Described {
            name: format!("execute_tool {tool}"),
            kind: SpanKind::Internal,
            attributes: a,
        }
    }

    fn shell(&self, line: &Map<String, Value>) -> Described {
        let binary = text(line, "binary").unwrap_or("");
        let mut a = vec![KeyValue::new("process.executable.path", binary.to_string())];
        push_int(&mut a, "process.exit.code", int(line, "exit_code"));
        push_int(&mut a, "mur.turn", int(line, "turn"));
        push_int(&mut a, "mur.shell.stdout_bytes", int(line, "stdout_bytes"));
        push_int(&mut a, "mur.shell.stderr_bytes", int(line, "stderr_bytes"));
        push_text(&mut a, "error.type", text(line, "resource_limit"));
        if self.content {
            push_text(&mut a, "process.command_line", text(line, "command"));
        }
        let short = binary.rsplit('/').next().unwrap_or(binary);
        Described {
            name: format!("shell {short}"),
            kind: SpanKind::Internal,
            attributes: a,
        }
    }

    fn member_call(&self, line: &Map<String, Value>) -> Described {
        let peer = text(line, "member").unwrap_or("").to_string();
        let mut a = self.common("invoke_agent");
        a.push(KeyValue::new("gen_ai.agent.name", peer.clone()));
        push_text(&mut a, "a2a.task.id", text(line, "member_task_id"));
        push_text(&mut a, "mur.peer.call_id", text(line, "call_id"));
        push_text(&mut a, "mur.peer.status", text(line, "status"));
        Described {
            name: format!("invoke_agent {peer}"),
            kind: SpanKind::Client,
            attributes: a,
        }
    }

    fn hook(&self, line: &Map<String, Value>) -> Described {
        let hook = text(line, "hook").unwrap_or("").to_string();
        let mut a = vec![KeyValue::new("mur.hook.name", hook.clone())];
        push_text(&mut a, "mur.hook.event", text(line, "event"));
        push_text(&mut a, "mur.hook.verdict", text(line, "verdict"));
        push_text(&mut a, "error.type", text(line, "error_code"));
        Described {
            name: format!("hook {hook}"),
            kind: SpanKind::Internal,
            attributes: a,
        }
    }

    fn other(&self, kind: &str, line: &Map<String, Value>) -> Described {
        Described {
            name: kind.to_string(),
            kind: SpanKind::Internal,
            attributes: self.event_attributes(line),
        }
    }

    /// What an ending line adds to its span: usage, the task's state, the answer.
    pub fn closing(&self, kind: &str, line: &Map<String, Value>) -> Vec<KeyValue> {
        let mut a = Vec::new();
        let status = text(line, "exit_status");
        push_text(&mut a, "mur.exit_status", status);
        if kind == "task_end" {
            push_text(&mut a, "a2a.task.state", status.map(task_state));
            push_int(
                &mut a,
                "gen_ai.usage.input_tokens",
                int(line, "input_tokens"),
            );
            push_int(
                &mut a,
                "gen_ai.usage.output_tokens",
                int(line, "output_tokens"),
            );
            push_int(&mut a, "mur.task.turns", int(line, "turns"));
            push_int(&mut a, "mur.task.tool_calls", int(line, "tool_calls"));
            if let Some(answer) = text(line, "answer").filter(|_| self.content) {
                let answer = messages("assistant", answer);
                a.push(KeyValue::new("gen_ai.output.messages", answer));
            }
        } else {
            let (input, output) = (
                int(line, "total_input_tokens"),
                int(line, "total_output_tokens"),
            );
            push_int(&mut a, "mur.session.input_tokens", input);
            push_int(&mut a, "mur.session.output_tokens", output);
        }
        a
    }

    /// An event's attributes: its numbers and flags, and of its text only what names
    /// things (ids, states, causes), unless the operator opted in to content.
    pub fn event_attributes(&self, line: &Map<String, Value>) -> Vec<KeyValue> {
        const NAMING: &[&str] = &[
            "task_id",
            "tool_name",
            "hook",
            "event",
            "arm",
            "status",
            "cause",
            "lane",
            "origin",
            "exit_status",
            "error_code",
            "peer",
            "outcome",
            "state",
            "work_id",
            "limit",
            "url",
            "origin_denied",
            "source",
        ];
        let mut a = Vec::new();
        for (key, value) in line {
            if ENVELOPE.contains(&key.as_str()) {
                continue;
            }
            let key = format!("mur.{key}");
            match value {
                Value::Bool(b) => a.push(KeyValue::new(key, *b)),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => a.push(KeyValue::new(key, i)),
                    None => a.push(KeyValue::new(key, n.as_f64().unwrap_or(0.0))),
                },
                Value::String(s) if self.content || NAMING.contains(&&key[4..]) => {
                    a.push(KeyValue::new(key, s.clone()));
                }
                _ => {}
            }
        }
        a
    }
}

/// The envelope every line has, which the span itself already says.
const ENVELOPE: &[&str] = &[
    "event_type",
    "event_id",
    "parent_id",
    "session_id",
    "timestamp",
    "trace_id",
    "span_id",
    "parent_span_id",
];

/// An A2A task state for a task's exit status.
fn task_state(exit_status: &str) -> &'static str {
    match exit_status {
        "ok" => "completed",
        "canceled" => "canceled",
        "rejected" => "rejected",
        "input_required" => "input-required",
        _ => "failed",
    }
}

/// An A2A v1.0 task state (`TASK_STATE_INPUT_REQUIRED`) as `a2a.task.state` says it,
/// the way the task spans do (`input-required`).
pub fn a2a_state(wire: &str) -> String {
    wire.strip_prefix("TASK_STATE_")
        .unwrap_or(wire)
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// The conventions' message list for one text part.
fn messages(role: &str, text: &str) -> String {
    serde_json::json!([{"role": role, "parts": [{"type": "text", "content": text}]}]).to_string()
}

/// Whether a closing line says the span failed, and how.
pub fn failure(line: &Map<String, Value>) -> Option<String> {
    if let Some(code) = text(line, "error_code") {
        return Some(text(line, "error").unwrap_or(code).to_string());
    }
    match text(line, "exit_status").or(text(line, "status")) {
        Some("ok" | "answered") | None => None,
        Some("error") => Some(text(line, "error").unwrap_or("error").to_string()),
        Some(other) => Some(other.to_string()),
    }
}
