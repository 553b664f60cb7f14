//! A test fixture hook of upstream Murmur's shape (`murmur:hook/lifecycle@0.9.0`, built
//! from `wit/upstream/hook`): it records every call and answers from a script, so that
//! end-to-end tests can drive every `hook-output` arm through the host's adapter and see
//! each committed or refused per `commit_policy` exactly as for the host's own hooks.
//!
//! Each call appends one JSON line to `/events.jsonl` in the hook's scope (preopened as
//! `/`): `{"event": <kind>, ...the record's fields in snake_case}`, the kinds being
//! `stage`, `session-start`, `task-start`, `inference`, `tool-call`, `shell`,
//! `compaction`, `task-end` and `session-end`. Then it takes the next answer for that
//! kind from `/script.json` (a JSON object mapping a kind to a list of answers, consumed
//! in order, counted in `/cursors.json`; none left means `none`). Answer forms: `"none"`, `"spin"` (loops until the
//! host's deadline stops it), `{"deny": s}`, `{"reopen": s}`, `{"artifact": s}`,
//! `{"error": s}`, `{"seed": [msg...]}`, `{"replace": [msg...]}`,
//! `{"replace_keep_last": n}` (a summary message, then the compaction's last n
//! messages exactly as they came) and `{"manifests": [{"binary_name", "content"}...]}`,
//! where a msg is `{"role", "content"}`.

wit_bindgen::generate!({
    path: "../../wit/upstream/hook",
    world: "murmur:hook/hook",
});

use std::collections::BTreeMap;
use std::io::Write as _;

use exports::murmur::hook::lifecycle::*;
use serde_json::{Value, json};

/// The first message of a `replace_keep_last` answer.
const SUMMARY: &str = "Summary of earlier conversation.";

/// Answers consumed so far, per kind.
const CURSORS: &str = "/cursors.json";

struct Component;

fn flat_json(messages: &[Message]) -> Value {
    messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect()
}

/// Records the call, then answers it. `messages` are the compaction's, else empty.
fn handle(kind: &str, mut fields: Value, messages: &[Message]) -> Result<HookOutput, String> {
    fields["event"] = json!(kind);
    if std::fs::metadata("/").is_ok() {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/events.jsonl")
            .and_then(|mut f| f.write_all(format!("{fields}\n").as_bytes()))
            .map_err(|e| format!("cannot append to /events.jsonl: {e}"))?;
    }
    let Some(answer) = next_answer(kind)? else {
        return Ok(HookOutput::None);
    };
    answer_of(answer, messages)
}

fn next_answer(kind: &str) -> Result<Option<Value>, String> {
    let text = match std::fs::read_to_string("/script.json") {
        Ok(text) => text,
        Err(_) => return Ok(None),
    };
    let script: Value =
        serde_json::from_str(&text).map_err(|e| format!("script.json is not valid JSON: {e}"))?;
    let Some(answers) = script.get(kind).and_then(Value::as_array) else {
        return Ok(None);
    };
    // The cursors live in the scope, not in memory: the host starts a fresh instance
    // after a trap or a timeout, and the script goes on where it was.
    let mut cursors: BTreeMap<String, usize> = std::fs::read_to_string(CURSORS)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let cursor = cursors.entry(kind.to_string()).or_insert(0);
    let answer = answers.get(*cursor).cloned();
    *cursor += 1;
    let text = serde_json::to_string(&cursors).map_err(|e| e.to_string())?;
    std::fs::write(CURSORS, text).map_err(|e| format!("cannot write {CURSORS}: {e}"))?;
    Ok(answer)
}

fn message(m: &Value) -> Message {
    let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    Message {
        role: text("role"),
        content: text("content"),
        id: None,
        source_id: None,
        inserted_by: None,
    }
}

fn messages(list: &Value) -> Vec<Message> {
    list.as_array().into_iter().flatten().map(message).collect()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn answer_of(answer: Value, sent: &[Message]) -> Result<HookOutput, String> {
    if answer == "none" {
        return Ok(HookOutput::None);
    }
    if answer == "spin" {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
    let Some((arm, value)) = answer.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("script.json: unknown answer {answer}"));
    };
    Ok(match arm.as_str() {
        "deny" => HookOutput::Deny(text(value)),
        "reopen" => HookOutput::ReopenTask(text(value)),
        "artifact" => HookOutput::Artifact(text(value)),
        "error" => return Err(text(value)),
        "seed" => HookOutput::SeedContext(messages(value)),
        "replace" => HookOutput::ReplaceContext(messages(value)),
        "replace_keep_last" => {
            let n = value.as_u64().unwrap_or(0) as usize;
            let mut kept = vec![message(&json!({"role": "user", "content": SUMMARY}))];
            kept.extend_from_slice(&sent[sent.len().saturating_sub(n)..]);
            HookOutput::ReplaceContext(kept)
        }
        "manifests" => HookOutput::WriteManifests(
            value
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| ToolManifest {
                    binary_name: text(&f["binary_name"]),
                    content: text(&f["content"]),
                })
                .collect(),
        ),
        other => return Err(format!("script.json: unknown answer arm {other}")),
    })
}

impl Guest for Component {
    fn on_stage(e: StageEvent) -> Result<HookOutput, String> {
        handle("stage", json!({"shell_allow": e.shell_allow}), &[])
    }

    fn on_session_start(c: SessionContext) -> Result<HookOutput, String> {
        let fields = json!({"capsule_name": c.capsule_name, "capsule_version": c.capsule_version,
            "session_id": c.session_id, "model": c.model, "capabilities": c.capabilities});
        handle("session-start", fields, &[])
    }

    fn on_task_start(e: TaskStartEvent) -> Result<HookOutput, String> {
        let fields = json!({"task_id": e.task_id, "context_id": e.context_id, "source": e.source,
            "input_bytes": e.input_bytes, "budget_tokens": e.budget_tokens,
            "context_window": e.context_window, "prior_tokens": e.prior_tokens});
        handle("task-start", fields, &[])
    }

    fn on_inference(e: InferenceEvent) -> Result<HookOutput, String> {
        let fields = json!({"turn": e.turn, "input_tokens": e.input_tokens,
            "output_tokens": e.output_tokens, "decision": e.decision, "tool_name": e.tool_name,
            "prompt": e.prompt, "output": e.output, "tools": e.tools});
        handle("inference", fields, &[])
    }

    fn on_tool_call(e: ToolEvent) -> Result<HookOutput, String> {
        let outcome = e.outcome.map(|o| {
            json!({"output_bytes": o.output_bytes, "duration_ms": o.duration_ms, "status": o.status})
        });
        let fields = json!({"turn": e.turn, "tool_name": e.tool_name,
            "input_bytes": e.input_bytes, "input": e.input, "outcome": outcome});
        handle("tool-call", fields, &[])
    }

    fn on_shell(e: ShellEvent) -> Result<HookOutput, String> {
        let outcome = e.outcome.map(|o| {
            json!({"exit_code": o.exit_code, "stdout": o.stdout, "stderr": o.stderr,
                "stdout_bytes": o.stdout_bytes, "stderr_bytes": o.stderr_bytes})
        });
        let fields = json!({"turn": e.turn, "binary": e.binary, "command": e.command,
            "argv": e.argv, "script": e.script, "recipe": e.recipe, "outcome": outcome});
        handle("shell", fields, &[])
    }

    fn on_compaction(e: CompactionEvent) -> Result<HookOutput, String> {
        let fields = json!({"messages": flat_json(&e.messages), "session_tokens": e.session_tokens,
            "threshold": e.threshold, "model": e.model, "system_prompt": e.system_prompt});
        handle("compaction", fields, &e.messages)
    }

    fn on_task_end(e: TaskEndEvent) -> Result<HookOutput, String> {
        handle(
            "task-end",
            json!({"task_id": e.task_id, "exit_status": e.exit_status}),
            &[],
        )
    }

    fn on_session_end(e: SessionEndEvent) -> Result<HookOutput, String> {
        let fields = json!({"total_turns": e.total_turns, "total_tool_calls": e.total_tool_calls,
            "total_shell_calls": e.total_shell_calls, "exit_status": e.exit_status});
        handle("session-end", fields, &[])
    }
}

export!(Component);
