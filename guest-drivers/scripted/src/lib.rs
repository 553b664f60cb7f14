//! The scripted driver: it replays a fixed list of model turns instead of calling
//! a provider, so examples and tests run offline and give the same answer every time.
//!
//! A script is `{"turns": [...], "span": "task" | "session"}`. With `span: task` (the
//! default) every task plays the script from its first turn; with `span: session` the
//! turns are played once across the whole session, each task going on where the one
//! before stopped.
//!
//! The driver sees no task, only requests, so it learns that a task began from the
//! conversation a request carries: one with no `assistant` message yet is a task's
//! first request (every later request of a task holds the model's earlier answers,
//! a reopened attempt too). A task of a threaded context (`lifecycle.conversation:
//! threaded`) carries that context's earlier exchange, so it goes on in the script
//! where the context's conversation stopped.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    // `murmur:text` and `murmur:message` are other packages, so their bindings must be
    // asked for explicitly.
    generate_all,
    // For tests that compare responses; wasi:io's stream error holds a resource.
    additional_derives: [PartialEq],
    additional_derives_ignore: ["stream-error"],
});

mod raw;

use exports::murmur::driver::inference::{
    Guest, InferError, Request, Response, Settings, StopReason, Usage,
};
use murmur::message::types::{Block, Role, Thinking, ToolCall as Call};
use murmur::text::chunks;
use serde_json::{Map, Value};
use std::sync::Mutex;

struct Component;

/// One scripted model turn, checked when the script is configured so that a bad
/// script fails at start-up rather than halfway through a session.
struct Turn {
    text: Option<String>,
    chunks: Vec<String>,
    thinking_chunks: Vec<String>,
    thinking: Option<String>,
    tool_calls: Vec<ToolCall>,
    stop_reason: Option<String>,
    usage: Option<(u64, u64)>,
    error: Option<String>,
    raw: Option<String>,
}

struct ToolCall {
    id: String,
    name: String,
    input: Value,
}

/// How far one pass through the turns reaches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Span {
    /// Every task starts from the first turn.
    Task,
    /// The turns are played once across the session.
    Session,
}

struct Script {
    turns: Vec<Turn>,
    span: Span,
    /// Index of the next turn to play.
    cursor: usize,
}

impl Script {
    /// The turn that answers `request`, if the script has one left.
    fn next(&mut self, request: &Request) -> Result<&Turn, String> {
        if self.span == Span::Task && begins_a_task(request) {
            self.cursor = 0;
        }
        let Some(turn) = self.turns.get(self.cursor) else {
            return Err(format!(
                "script exhausted: it has {} turns and turn {} was asked for",
                self.turns.len(),
                self.cursor + 1
            ));
        };
        self.cursor += 1;
        Ok(turn)
    }
}

/// Whether `request` is a task's first: its conversation holds no answer of the model yet.
fn begins_a_task(request: &Request) -> bool {
    !request
        .messages
        .iter()
        .any(|message| matches!(message.role, Role::Assistant))
}

// The host calls `configure` and `infer` on one instance, one call at a time;
// the mutex only makes the static sound, it never contends.
static STATE: Mutex<Option<Script>> = Mutex::new(None);

impl Guest for Component {
    fn configure(settings: Settings) -> Result<(), String> {
        let (turns, span) = parse_script(&settings.config)?;
        // Reconfiguring restarts the script, so one instance can be reused deterministically.
        *lock() = Some(Script {
            turns,
            span,
            cursor: 0,
        });
        Ok(())
    }

    fn infer(request: Request) -> Result<Response, InferError> {
        let mut state = lock();
        let Some(script) = state.as_mut() else {
            return Err(InferError::Failed(
                "the scripted driver was asked to infer before it was configured".into(),
            ));
        };
        let turn = script.next(&request).map_err(InferError::Failed)?;
        play(turn, last_tool_result(&request))
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<Script>> {
    // A panic inside a guest traps the whole instance, so a poisoned lock can only be
    // seen by a caller that is about to trap anyway; taking the data is safe.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The placeholder a script's text may use for what the model last got from a tool.
const LAST_TOOL_RESULT: &str = "{{last_tool_result}}";

/// The content of the newest tool result in the conversation, exactly as the host
/// handed it to the model, so a script can show that the round trip carried it.
fn last_tool_result(request: &Request) -> &str {
    let blocks = request
        .messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter().rev());
    blocks
        .filter_map(|block| match block {
            Block::ToolResult(result) => Some(result.content.as_str()),
            _ => None,
        })
        .next()
        .unwrap_or_default()
}

fn play(turn: &Turn, last_tool_result: &str) -> Result<Response, InferError> {
    let fill = |text: &str| text.replace(LAST_TOOL_RESULT, last_tool_result);
    // Streaming comes first, even for failing turns, so tests can check what the
    // host does with chunks of a reply that then fails.
    for piece in &turn.thinking_chunks {
        chunks::thinking(piece);
    }
    for piece in &turn.chunks {
        chunks::text(&fill(piece));
    }
    if let Some(error) = &turn.error {
        return Err(InferError::Failed(error.clone()));
    }
    if let Some(raw) = &turn.raw {
        return raw::response(raw);
    }

    let text = match &turn.text {
        Some(text) => fill(text),
        None => fill(&turn.chunks.concat()),
    };
    let mut content = Vec::new();
    if let Some(thinking) = &turn.thinking {
        content.push(Block::Thinking(Thinking {
            text: thinking.clone(),
            signature: None,
        }));
    }
    if !text.is_empty() {
        content.push(Block::Text(text));
    }
    for call in &turn.tool_calls {
        content.push(Block::ToolCall(Call {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input.to_string(),
        }));
    }
    let stop_reason = match turn.stop_reason.as_deref() {
        Some(reason) => raw::stop_reason(reason, None)?,
        None if turn.tool_calls.is_empty() => StopReason::EndTurn,
        None => StopReason::ToolCall,
    };
    let (input_tokens, output_tokens) = match turn.usage {
        Some((input, output)) => (Some(input), Some(output)),
        None => (None, None),
    };
    Ok(Response {
        stop_reason,
        content,
        usage: Usage {
            input_tokens,
            output_tokens,
            cached_tokens: None,
            cache_write_tokens: None,
            thinking_tokens: None,
        },
    })
}

const TURN_KEYS: &[&str] = &[
    "text",
    "chunks",
    "thinking_chunks",
    "thinking",
    "tool_calls",
    "stop_reason",
    "usage",
    "error",
    "raw",
];

fn parse_script(config: &str) -> Result<(Vec<Turn>, Span), String> {
    let value: Value =
        serde_json::from_str(config).map_err(|e| format!("script is not JSON: {e}"))?;
    let Value::Object(top) = value else {
        return Err("script must be an object with a 'turns' list".into());
    };
    let turns = match top.get("turns") {
        Some(Value::Array(turns)) => turns,
        Some(_) => return Err("script: 'turns' must be a list".into()),
        None => return Err("script has no 'turns' list".into()),
    };
    let turns = turns
        .iter()
        .enumerate()
        .map(|(i, turn)| parse_turn(turn).map_err(|e| format!("script turn {}: {e}", i + 1)))
        .collect::<Result<_, _>>()?;
    Ok((turns, span(&top)?))
}

/// `span`: `task` (the default) or `session`; anything else is refused, so a misspelt
/// value does not silently play the other way.
fn span(top: &Map<String, Value>) -> Result<Span, String> {
    match top.get("span") {
        None => Ok(Span::Task),
        Some(Value::String(span)) if span == "task" => Ok(Span::Task),
        Some(Value::String(span)) if span == "session" => Ok(Span::Session),
        Some(other) => Err(format!(
            "script: 'span' must be 'task' or 'session', not {other}"
        )),
    }
}

fn parse_turn(value: &Value) -> Result<Turn, String> {
    let Value::Object(turn) = value else {
        return Err("must be an object".into());
    };
    // Unknown keys are refused so that a misspelt key fails loudly instead of
    // silently playing a different turn than the script's author meant.
    if let Some(key) = turn.keys().find(|k| !TURN_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown key '{key}' (known: {})",
            TURN_KEYS.join(", ")
        ));
    }
    if turn.contains_key("error") && turn.contains_key("raw") {
        return Err("'error' and 'raw' cannot both be given".into());
    }
    Ok(Turn {
        text: opt_string(turn, "text")?,
        chunks: string_list(turn, "chunks")?,
        thinking_chunks: string_list(turn, "thinking_chunks")?,
        thinking: opt_string(turn, "thinking")?,
        tool_calls: tool_calls(turn)?,
        stop_reason: opt_string(turn, "stop_reason")?,
        usage: usage(turn)?,
        error: opt_string(turn, "error")?,
        raw: opt_string(turn, "raw")?,
    })
}

fn opt_string(turn: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match turn.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("'{key}' must be a string")),
    }
}

fn string_list(turn: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match turn.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(format!("'{key}' item {} must be a string", i + 1)),
            })
            .collect(),
        Some(_) => Err(format!("'{key}' must be a list of strings")),
    }
}

fn tool_calls(turn: &Map<String, Value>) -> Result<Vec<ToolCall>, String> {
    let items = match turn.get("tool_calls") {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("'tool_calls' must be a list".into()),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let n = i + 1;
            let Value::Object(call) = item else {
                return Err(format!("tool call {n} must be an object"));
            };
            if let Some(key) = call
                .keys()
                .find(|k| !["id", "name", "input"].contains(&k.as_str()))
            {
                return Err(format!(
                    "tool call {n}: unknown key '{key}' (known: id, name, input)"
                ));
            }
            let name = match call.get("name") {
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(format!("tool call {n}: 'name' must be a string")),
                None => return Err(format!("tool call {n}: 'name' is missing")),
            };
            let id = match call.get("id") {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(format!("tool call {n}: 'id' must be a string")),
            };
            let input = match call.get("input") {
                None => Value::Object(Map::new()),
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => return Err(format!("tool call {n}: 'input' must be an object")),
            };
            Ok(ToolCall { id, name, input })
        })
        .collect()
}

fn usage(turn: &Map<String, Value>) -> Result<Option<(u64, u64)>, String> {
    let usage = match turn.get("usage") {
        None => return Ok(None),
        Some(Value::Object(usage)) => usage,
        Some(_) => return Err("'usage' must be an object".into()),
    };
    if let Some(key) = usage
        .keys()
        .find(|k| !["input_tokens", "output_tokens"].contains(&k.as_str()))
    {
        return Err(format!(
            "usage: unknown key '{key}' (known: input_tokens, output_tokens)"
        ));
    }
    let count = |key: &str| match usage.get(key) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("usage: '{key}' must be a non-negative integer")),
    };
    Ok(Some((count("input_tokens")?, count("output_tokens")?)))
}

export!(Component);

#[cfg(test)]
mod tests {
    use super::*;

    fn script(config: &str) -> Script {
        let (turns, span) = parse_script(config).unwrap();
        Script {
            turns,
            span,
            cursor: 0,
        }
    }

    const TWO: &str = r#"{"turns":[{"text":"one"},{"text":"two"}]"#;

    use crate::exports::murmur::driver::inference::Params;
    use crate::murmur::message::types::{Message, ToolResult};

    fn message(role: Role, content: Vec<Block>) -> Message {
        Message { role, content }
    }

    fn result(call_id: &str, content: &str) -> Block {
        Block::ToolResult(ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        })
    }

    fn request(messages: Vec<Message>) -> Request {
        Request {
            model: "m".into(),
            max_tokens: 100,
            system: None,
            messages,
            tools: vec![],
            params: Params {
                temperature: None,
                top_p: None,
                stop: vec![],
            },
        }
    }

    /// A task's first request, then one that goes on after an answer.
    fn first() -> Request {
        request(vec![message(Role::User, vec![Block::Text("q".into())])])
    }

    fn later() -> Request {
        request(vec![
            message(Role::User, vec![Block::Text("q".into())]),
            message(Role::Assistant, vec![]),
            message(Role::Tool, vec![result("c", "r")]),
        ])
    }

    fn texts(script: &mut Script, requests: &[Request]) -> Vec<String> {
        requests
            .iter()
            .map(|request| match script.next(request) {
                Ok(turn) => turn.text.clone().unwrap_or_default(),
                Err(e) => e,
            })
            .collect()
    }

    #[test]
    fn each_task_plays_from_the_first_turn() {
        let mut s = script(&format!("{TWO}}}"));
        assert_eq!(
            texts(&mut s, &[first(), later(), first(), later(), later()]),
            [
                "one",
                "two",
                "one",
                "two",
                "script exhausted: it has 2 turns and turn 3 was asked for"
            ]
        );
    }

    #[test]
    fn span_session_plays_the_turns_once_across_tasks() {
        let mut s = script(&format!(r#"{TWO},"span":"session"}}"#));
        assert_eq!(
            texts(&mut s, &[first(), first(), first()]),
            [
                "one",
                "two",
                "script exhausted: it has 2 turns and turn 3 was asked for"
            ]
        );
        let mut s = script(&format!(r#"{TWO},"span":"task"}}"#));
        assert_eq!(texts(&mut s, &[first(), first()]), ["one", "one"]);
    }

    #[test]
    fn a_request_without_an_answer_yet_begins_a_task() {
        assert!(begins_a_task(&first()));
        assert!(begins_a_task(&request(vec![])));
        assert!(!begins_a_task(&later()));
        // A reopened attempt goes on: its conversation holds the answer not accepted.
        assert!(!begins_a_task(&request(vec![
            message(Role::User, vec![Block::Text("q".into())]),
            message(Role::Assistant, vec![]),
            message(Role::User, vec![Block::Text("feedback".into())]),
        ])));
    }

    #[test]
    fn the_last_tool_result_is_the_newest_result_block() {
        assert_eq!(last_tool_result(&first()), "");
        assert_eq!(last_tool_result(&later()), "r");
        let several = request(vec![
            message(Role::Tool, vec![result("a", "old")]),
            message(Role::Assistant, vec![]),
            message(
                Role::Tool,
                vec![result("b", "first"), result("c", "second")],
            ),
            message(Role::User, vec![Block::Text("go on".into())]),
        ]);
        assert_eq!(last_tool_result(&several), "second");
    }

    #[test]
    fn a_turn_plays_as_the_typed_response() {
        let (turns, _) = parse_script(
            r#"{"turns":[{"thinking":"t","text":"see {{last_tool_result}}","tool_calls":[{"id":"c1","name":"ls","input":{"p":"."}}],"usage":{"input_tokens":3}},{"stop_reason":"pause"},{"stop_reason":"error"}]}"#,
        )
        .unwrap();
        let response = play(&turns[0], "r").unwrap();
        assert!(matches!(response.stop_reason, StopReason::ToolCall));
        assert_eq!(
            response.content,
            [
                Block::Thinking(Thinking {
                    text: "t".into(),
                    signature: None
                }),
                Block::Text("see r".into()),
                Block::ToolCall(Call {
                    id: "c1".into(),
                    name: "ls".into(),
                    input: r#"{"p":"."}"#.into()
                }),
            ]
        );
        assert_eq!(
            (response.usage.input_tokens, response.usage.output_tokens),
            (Some(3), Some(0))
        );
        let failed = |turn: &Turn| match play(turn, "") {
            Err(InferError::Failed(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(failed(&turns[1]), "unsupported stop_reason 'pause'");
        assert_eq!(failed(&turns[2]), "driver returned error");
    }

    #[test]
    fn a_span_other_than_task_or_session_is_refused() {
        for bad in [r#""sessions""#, "true"] {
            let err = parse_script(&format!(r#"{TWO},"span":{bad}}}"#)).err();
            assert_eq!(
                err.as_deref(),
                Some(format!("script: 'span' must be 'task' or 'session', not {bad}").as_str())
            );
        }
    }
}
