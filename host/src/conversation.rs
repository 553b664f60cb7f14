//! Typed messages (`murmur:message`) and their JSON form: the form a threaded context's
//! conversation is kept in on disk, and the one the host measures sizes by (4 bytes a
//! token), so a message costs what it cost before messages were typed.
//!
//! user / assistant: `{"role", "content": [blocks]}` with blocks `{"type":"text","text"}`,
//! `{"type":"thinking","text","signature"?}`, `{"type":"tool_call","id","name","input"}`.
//! A tool message with one result: `{"role":"tool","tool_call_id","is_error","content":
//! [{"type":"text","text"}]}`; with several, its content holds
//! `{"type":"tool_result","tool_call_id","is_error","text"}` blocks.

use serde_json::{Value, json};

use crate::bindings::message::{Block, Message, Role, Thinking, ToolCall, ToolResult};

pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The message's JSON form.
pub fn to_json(message: &Message) -> Value {
    if message.role == Role::Tool
        && let [Block::ToolResult(result)] = message.content.as_slice()
    {
        return json!({
            "role": "tool",
            "tool_call_id": result.call_id,
            "is_error": result.is_error,
            "content": [{"type": "text", "text": result.content}],
        });
    }
    let blocks: Vec<Value> = message.content.iter().map(block_json).collect();
    json!({"role": role_name(message.role), "content": blocks})
}

pub fn all_to_json(messages: &[Message]) -> Vec<Value> {
    messages.iter().map(to_json).collect()
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::Thinking(t) => {
            let mut b = json!({"type": "thinking", "text": t.text});
            if let Some(signature) = &t.signature {
                b["signature"] = signature.clone().into();
            }
            b
        }
        Block::ToolCall(call) => json!({
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "input": serde_json::from_str::<Value>(&call.input).unwrap_or_else(|_| call.input.clone().into()),
        }),
        Block::ToolResult(r) => json!({
            "type": "tool_result",
            "tool_call_id": r.call_id,
            "is_error": r.is_error,
            "text": r.content,
        }),
    }
}

/// A message read back from its JSON form; `Err` says what is wrong with it.
pub fn from_json(value: &Value) -> Result<Message, String> {
    let role = match value["role"].as_str() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        other => return Err(format!("a message has role {other:?}")),
    };
    if role == Role::Tool
        && let Some(call_id) = value.get("tool_call_id").and_then(Value::as_str)
    {
        return Ok(Message {
            role,
            content: vec![Block::ToolResult(ToolResult {
                call_id: call_id.to_string(),
                content: text_of(&value["content"]),
                is_error: value["is_error"].as_bool().unwrap_or(false),
            })],
        });
    }
    let content = match &value["content"] {
        Value::String(text) => vec![Block::Text(text.clone())],
        Value::Array(blocks) => blocks.iter().filter_map(block_from_json).collect(),
        _ => return Err("a message has no content list".into()),
    };
    Ok(Message { role, content })
}

pub fn all_from_json(values: &[Value]) -> Result<Vec<Message>, String> {
    values.iter().map(from_json).collect()
}

fn block_from_json(block: &Value) -> Option<Block> {
    let text = |key: &str| block[key].as_str().unwrap_or_default().to_string();
    Some(match block["type"].as_str()? {
        "text" => Block::Text(text("text")),
        "thinking" => Block::Thinking(Thinking {
            text: text("text"),
            signature: block["signature"].as_str().map(str::to_string),
        }),
        "tool_call" => Block::ToolCall(ToolCall {
            id: text("id"),
            name: text("name"),
            input: match block.get("input") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(input) => input.to_string(),
            },
        }),
        "tool_result" => Block::ToolResult(ToolResult {
            call_id: text("tool_call_id"),
            content: text("text"),
            is_error: block["is_error"].as_bool().unwrap_or(false),
        }),
        _ => return None,
    })
}

/// A tool result's text: its text blocks joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The text blocks of a message, joined with `\n`.
pub fn text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A message's size as the host estimates it: its JSON form, 4 bytes a token.
pub fn tokens(message: &Message) -> u64 {
    estimate_tokens(&to_json(message).to_string())
}

/// A rough count (4 bytes a token), where a provider reports none.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

pub fn tokens_all(messages: &[Message]) -> u64 {
    messages.iter().map(tokens).sum()
}

/// The ids of the tool calls a message asks for.
pub fn call_ids(message: &Message) -> impl Iterator<Item = &str> {
    message.content.iter().filter_map(|b| match b {
        Block::ToolCall(call) => Some(call.id.as_str()),
        _ => None,
    })
}

/// Whether every tool result follows the assistant message that asked for it.
pub fn calls_meet_results(messages: &[Message]) -> bool {
    let mut asked: Vec<&str> = Vec::new();
    for message in messages {
        asked.extend(call_ids(message));
        for block in &message.content {
            if let Block::ToolResult(r) = block
                && !asked.contains(&r.call_id.as_str())
            {
                return false;
            }
        }
    }
    true
}

/// Messages the host's unit tests build conversations from.
#[cfg(test)]
pub mod samples {
    use crate::bindings::message::{Block, Message, Role, Thinking, ToolCall, ToolResult};

    pub fn user(text: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::Text(text.to_string())],
        }
    }

    /// An assistant message with text, signed reasoning and one call of `ls`.
    pub fn asking(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Text("Looking.".into()),
                Block::Thinking(Thinking {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                }),
                Block::ToolCall(ToolCall {
                    id: id.into(),
                    name: "ls".into(),
                    input: r#"{"path":"."}"#.into(),
                }),
            ],
        }
    }

    /// The result of call `id`.
    pub fn result(id: &str, text: &str) -> Message {
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult(ToolResult {
                call_id: id.into(),
                content: text.into(),
                is_error: false,
            })],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::samples::{asking, result, user};
    use super::*;

    #[test]
    fn a_single_result_keeps_the_tool_message_shape_threads_were_stored_in() {
        assert_eq!(
            to_json(&result("c1", "a.txt")).to_string(),
            r#"{"role":"tool","tool_call_id":"c1","is_error":false,"content":[{"type":"text","text":"a.txt"}]}"#
        );
        assert_eq!(
            to_json(&asking("c1")).to_string(),
            r#"{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"thinking","text":"hmm","signature":"sig"},{"type":"tool_call","id":"c1","name":"ls","input":{"path":"."}}]}"#
        );
    }

    #[test]
    fn every_message_reads_back_as_it_was_written() {
        let mut several = result("c1", "a.txt");
        several.content.extend(result("c2", "a.txt").content);
        for message in [user("hi"), asking("c1"), result("c1", "a.txt"), several] {
            assert_eq!(from_json(&to_json(&message)), Ok(message));
        }
    }

    #[test]
    fn a_result_must_follow_its_call() {
        assert!(calls_meet_results(&[asking("c1"), result("c1", "a.txt")]));
        assert!(!calls_meet_results(&[result("c1", "a.txt"), asking("c1")]));
    }

    #[test]
    fn an_unknown_role_is_named() {
        assert_eq!(
            from_json(&json!({"role": "system", "content": []})),
            Err("a message has role Some(\"system\")".to_string())
        );
    }
}
