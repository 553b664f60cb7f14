//! How an event is written to `events.jsonl`: `{"event": "<kind>", ...fields}` with the
//! WIT record's fields under snake_case keys, absent options as `null`, and messages in
//! their flat form (`flat.rs`).

use serde_json::{Value, json};

use crate::exports::murmur::hook::lifecycle::{CallOutcome, Event, ShellOutcome};
use crate::flat;
use crate::murmur::message::types::Message;

/// The event's kind: its WIT case name, also the key of its answers in the script.
pub fn kind(event: &Event) -> &'static str {
    match event {
        Event::Stage(_) => "stage",
        Event::SessionStart(_) => "session-start",
        Event::TaskStart(_) => "task-start",
        Event::Inference(_) => "inference",
        Event::ToolCall(_) => "tool-call",
        Event::Shell(_) => "shell",
        Event::Compaction(_) => "compaction",
        Event::TaskEnd(_) => "task-end",
        Event::SessionEnd(_) => "session-end",
    }
}

/// The event as one JSON object, `event` first (the workspace keeps serde_json's key order).
pub fn event_json(event: &Event) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("event".into(), Value::from(kind(event)));
    if let Value::Object(fields) = fields(event) {
        object.extend(fields);
    }
    Value::Object(object)
}

fn fields(event: &Event) -> Value {
    match event {
        Event::Stage(e) => json!({ "shell_allow": e.shell_allow }),
        Event::SessionStart(e) => json!({
            "capsule_name": e.capsule_name,
            "capsule_version": e.capsule_version,
            "session_id": e.session_id,
            "model": e.model,
            "capabilities": e.capabilities,
        }),
        Event::TaskStart(e) => json!({
            "task_id": e.task_id,
            "context_id": e.context_id,
            "source": e.source,
            "origin": e.origin,
            "text": e.text,
            "input_bytes": e.input_bytes,
            "budget_tokens": e.budget_tokens,
            "context_window": e.context_window,
            "prior_tokens": e.prior_tokens,
        }),
        Event::Inference(e) => json!({
            "turn": e.turn,
            "input_tokens": e.input_tokens,
            "output_tokens": e.output_tokens,
            "decision": e.decision,
            "tool_name": e.tool_name,
            "output": e.output,
        }),
        Event::ToolCall(e) => json!({
            "turn": e.turn,
            "tool_name": e.tool_name,
            "input": e.input,
            "outcome": e.outcome.as_ref().map(call_outcome),
        }),
        Event::Shell(e) => json!({
            "turn": e.turn,
            "binary": e.binary,
            "command": e.command,
            "outcome": e.outcome.as_ref().map(shell_outcome),
        }),
        Event::Compaction(e) => json!({
            "messages": e.messages.iter().map(message).collect::<Vec<_>>(),
            "session_tokens": e.session_tokens,
            "threshold": e.threshold,
            "model": e.model,
            "system_prompt": e.system_prompt,
        }),
        Event::TaskEnd(e) => json!({
            "task_id": e.task_id,
            "exit_status": e.exit_status,
            "result": e.result,
            "attempt": e.attempt,
        }),
        Event::SessionEnd(e) => json!({
            "total_turns": e.total_turns,
            "total_input_tokens": e.total_input_tokens,
            "total_output_tokens": e.total_output_tokens,
            "total_tool_calls": e.total_tool_calls,
            "total_shell_calls": e.total_shell_calls,
            "duration_ms": e.duration_ms,
            "exit_status": e.exit_status,
        }),
    }
}

fn call_outcome(o: &CallOutcome) -> Value {
    json!({
        "output_bytes": o.output_bytes,
        "duration_ms": o.duration_ms,
        "status": o.status,
    })
}

fn shell_outcome(o: &ShellOutcome) -> Value {
    json!({
        "exit_code": o.exit_code,
        "stdout_bytes": o.stdout_bytes,
        "stderr_bytes": o.stderr_bytes,
        "duration_ms": o.duration_ms,
    })
}

fn message(m: &Message) -> Value {
    json!({ "role": flat::role_name(m.role), "content": flat::text(m) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::murmur::hook::lifecycle::{Compaction, Inference, Shell, ToolCall};
    use crate::murmur::message::types::{self, Block, Role};

    #[test]
    fn kind_comes_first_and_options_are_null() {
        let event = Event::Inference(Inference {
            turn: 2,
            input_tokens: 10,
            output_tokens: 3,
            decision: "end_turn".into(),
            tool_name: None,
            output: "hi".into(),
        });
        assert_eq!(
            event_json(&event).to_string(),
            r#"{"event":"inference","turn":2,"input_tokens":10,"output_tokens":3,"decision":"end_turn","tool_name":null,"output":"hi"}"#
        );
    }

    #[test]
    fn outcomes_are_objects_or_null() {
        let decision = Event::ToolCall(ToolCall {
            turn: 0,
            tool_name: "wc".into(),
            input: r#"{"path":"a"}"#.into(),
            outcome: None,
        });
        assert_eq!(event_json(&decision)["outcome"], Value::Null);
        let observed = Event::ToolCall(ToolCall {
            turn: 0,
            tool_name: "wc".into(),
            input: "{}".into(),
            outcome: Some(CallOutcome {
                output_bytes: 5,
                duration_ms: 1,
                status: "ok".into(),
            }),
        });
        assert_eq!(
            event_json(&observed)["outcome"],
            json!({"output_bytes": 5, "duration_ms": 1, "status": "ok"})
        );
        let shell = Event::Shell(Shell {
            turn: 1,
            binary: "/bin/ls".into(),
            command: "-la".into(),
            outcome: Some(ShellOutcome {
                exit_code: None,
                stdout_bytes: 1,
                stderr_bytes: 2,
                duration_ms: 3,
            }),
        });
        assert_eq!(event_json(&shell)["event"], "shell");
        assert_eq!(event_json(&shell)["outcome"]["exit_code"], Value::Null);
    }

    #[test]
    fn compaction_messages_are_role_content_objects() {
        let event = Event::Compaction(Compaction {
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Block::Text("q".into())],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text("Looking.".into()),
                        Block::ToolCall(types::ToolCall {
                            id: "c1".into(),
                            name: "ls".into(),
                            input: r#"{"path":"."}"#.into(),
                        }),
                    ],
                },
            ],
            session_tokens: 900,
            threshold: 0.5,
            model: Some("small".into()),
            system_prompt: None,
        });
        let value = event_json(&event);
        assert_eq!(
            value["messages"],
            json!([
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "Looking.\n[tool call c1] ls {\"path\":\".\"}"},
            ])
        );
        assert_eq!(value["threshold"], json!(0.5));
        assert_eq!(value["model"], "small");
        assert_eq!(value["system_prompt"], Value::Null);
    }
}
