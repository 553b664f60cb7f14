//! Compaction: the conversation as hooks see it (role and text), and a hook's
//! replacement mapped back to the driver's shapes. A message returned unchanged keeps
//! everything it had (tool calls, ids); a tool result survives only unchanged, and
//! every call must still meet its result, or the replacement is declined.

use serde_json::Value;

use crate::seed::wire_message;

/// One message as a hook sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    pub role: String,
    pub content: String,
}

/// Why a replacement was not committed, in the trace's words.
pub const UNRESOLVED_TOOL_CALL: &str = "unresolved_tool_call";

/// The conversation's messages in the hooks' plain form.
pub fn plain(messages: &[Value]) -> Vec<Plain> {
    messages.iter().map(plain_one).collect()
}

fn plain_one(message: &Value) -> Plain {
    let role = message["role"].as_str().unwrap_or("user").to_string();
    let mut lines = Vec::new();
    match &message["content"] {
        Value::String(text) => lines.push(text.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                match block["type"].as_str() {
                    Some("text") => lines.push(block["text"].as_str().unwrap_or("").to_string()),
                    Some("tool_call") => lines.push(format!(
                        "[tool call {}] {} {}",
                        block["id"].as_str().unwrap_or(""),
                        block["name"].as_str().unwrap_or(""),
                        block.get("input").cloned().unwrap_or(Value::Null)
                    )),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    Plain {
        role,
        content: lines.join("\n"),
    }
}

/// The replacement in the driver's shapes, or why it cannot be committed. `current` is
/// the assistant message just received: when it asks for tools, the replacement must
/// end with it unchanged, since its results come next.
pub fn map_back(
    originals: &[Value],
    replacement: &[Plain],
    current: &Value,
) -> Result<Vec<Value>, &'static str> {
    let plains = plain(originals);
    let mut used = vec![false; originals.len()];
    let mut out = Vec::with_capacity(replacement.len());
    for message in replacement {
        let found = (0..originals.len()).find(|&i| !used[i] && plains[i] == *message);
        match found {
            Some(i) => {
                used[i] = true;
                out.push(originals[i].clone());
            }
            // A changed or invented tool result cannot be tied to its call any more.
            None if message.role == "tool" => return Err(UNRESOLVED_TOOL_CALL),
            None => out.push(wire_message(&message.role, &message.content)),
        }
    }
    if asks_for_tools(current) && out.last() != Some(current) {
        return Err(UNRESOLVED_TOOL_CALL);
    }
    if !calls_meet_results(&out) {
        return Err(UNRESOLVED_TOOL_CALL);
    }
    Ok(out)
}

fn asks_for_tools(message: &Value) -> bool {
    call_ids(message).next().is_some()
}

fn call_ids(message: &Value) -> impl Iterator<Item = &str> {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_call")
        .filter_map(|b| b["id"].as_str())
}

/// Every tool result follows the assistant message that asked for it.
fn calls_meet_results(messages: &[Value]) -> bool {
    let mut asked: Vec<&str> = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("assistant") => asked.extend(call_ids(message)),
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or("");
                if !asked.contains(&id) {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [{"type": "text", "text": text}]})
    }

    fn asking(id: &str) -> Value {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_call", "id": id, "name": "ls", "input": {"path": "."}}
        ]})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "is_error": false,
               "content": [{"type": "text", "text": "a.txt"}]})
    }

    #[test]
    fn hooks_see_text_and_calls_as_lines() {
        let p = plain(&[asking("c1")]);
        assert_eq!(p[0].role, "assistant");
        assert_eq!(p[0].content, "Looking.\n[tool call c1] ls {\"path\":\".\"}");
    }

    #[test]
    fn unchanged_messages_map_back_whole_and_new_ones_become_text() {
        let originals = vec![user("task"), asking("c1"), result("c1"), asking("c2")];
        let mut replacement = vec![Plain {
            role: "user".into(),
            content: "Summary.".into(),
        }];
        replacement.extend(plain(&originals[1..]));
        let out = map_back(&originals, &replacement, &originals[3]).expect("commits");
        assert_eq!(out[0], user("Summary."));
        assert_eq!(out[1..], originals[1..]);
    }

    #[test]
    fn a_dropped_call_or_a_changed_result_is_declined() {
        let originals = vec![user("task"), asking("c1"), result("c1"), asking("c2")];
        // The result of c1 kept without the message that asked for it.
        let orphan = plain(&[originals[2].clone(), originals[3].clone()]);
        assert_eq!(
            map_back(&originals, &orphan, &originals[3]),
            Err(UNRESOLVED_TOOL_CALL)
        );
        // The current call dropped.
        let no_current = plain(&originals[..1]);
        assert_eq!(
            map_back(&originals, &no_current, &originals[3]),
            Err(UNRESOLVED_TOOL_CALL)
        );
        let changed = vec![
            plain_one(&originals[1]),
            Plain {
                role: "tool".into(),
                content: "edited".into(),
            },
            plain_one(&originals[3]),
        ];
        assert_eq!(
            map_back(&originals, &changed, &originals[3]),
            Err(UNRESOLVED_TOOL_CALL)
        );
    }
}
