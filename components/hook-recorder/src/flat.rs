//! A typed message in the flat form hooks saw before `murmur:hook@0.2.0`: a role name and
//! one text. The event log and the answer script keep that form, so a test's expectations
//! and scripts read the same as before the messages were typed.
//!
//! The text is the message's text blocks joined with a newline; a tool call adds the line
//! `[tool call <id>] <name> <input JSON>`; a tool result adds its content; reasoning adds
//! nothing.

use serde_json::Value;

use crate::murmur::message::types::{Block, Message, Role, ToolCall};

/// The role's name in the log and in the script.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// A script's role name as a role. Only `assistant` and `tool` name other speakers; any
/// other name is the user's, as the host read a seed's or a replacement's role before.
pub fn role_from_name(name: &str) -> Role {
    match name {
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => Role::User,
    }
}

/// The message's text, one line per block that carries any.
pub fn text(message: &Message) -> String {
    let lines: Vec<String> = message
        .content
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(text.clone()),
            Block::ToolCall(call) => Some(call_line(call)),
            Block::ToolResult(result) => Some(result.content.clone()),
            Block::Thinking(_) => None,
        })
        .collect();
    lines.join("\n")
}

/// `[tool call <id>] <name> <input>`, the input as compact JSON: the host held it parsed
/// and printed it that way. Input that is not JSON is shown as it came.
fn call_line(call: &ToolCall) -> String {
    let input = serde_json::from_str::<Value>(&call.input)
        .map(|value| value.to_string())
        .unwrap_or_else(|_| call.input.clone());
    format!("[tool call {}] {} {input}", call.id, call.name)
}

/// A message of the script: one text block.
pub fn message(role: &str, content: &str) -> Message {
    Message {
        role: role_from_name(role),
        content: vec![Block::Text(content.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::murmur::message::types::{Thinking, ToolResult};

    fn call(id: &str, name: &str, input: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            input: input.into(),
        })
    }

    #[test]
    fn text_blocks_and_calls_are_lines_and_reasoning_is_left_out() {
        let asking = Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking(Thinking {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                }),
                Block::Text("Looking.".into()),
                call("c1", "ls", r#"{ "path": ".", "all": true }"#),
                call("c2", "pwd", "not json"),
            ],
        };
        assert_eq!(
            text(&asking),
            "Looking.\n[tool call c1] ls {\"path\":\".\",\"all\":true}\n[tool call c2] pwd not json"
        );
    }

    #[test]
    fn a_tool_result_is_its_content() {
        let result = Message {
            role: Role::Tool,
            content: vec![Block::ToolResult(ToolResult {
                call_id: "c1".into(),
                content: "a.txt".into(),
                is_error: false,
            })],
        };
        assert_eq!(text(&result), "a.txt");
        assert_eq!(role_name(result.role), "tool");
    }

    #[test]
    fn role_names_round_trip_and_unknown_ones_are_the_users() {
        for role in [Role::User, Role::Assistant, Role::Tool] {
            assert_eq!(role_from_name(role_name(role)), role);
        }
        assert_eq!(role_from_name("system"), Role::User);
        let m = message("assistant", "hi");
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(text(&m), "hi");
    }
}
