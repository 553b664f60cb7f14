//! A driver's reply, read in the response shape `murmur:driver/inference` documents:
//! `stop_reason`, `content` blocks (text and tool calls), and the `usage` the provider
//! reported, with the host's estimates where it reported none.

use serde_json::{Map, Value, json};

use crate::bindings::session_loop::murmur::session::types::{
    InferenceError, InferenceReply, StopReason, ToolCall, Usage,
};

/// The usage counts a reply may report; others are ignored.
const USAGE_KEYS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "thinking_tokens",
];

/// A reply the loop can use, and what the provider reported of its usage (only the
/// known keys, only numbers).
pub struct Parsed {
    pub reply: InferenceReply,
    pub reported: Map<String, Value>,
}

/// Reads `raw`, the driver's answer to `request`. At most `keep_calls` tool calls are
/// kept, the first ones: past the task's bound every further call would be refused
/// unrun, so a reply asking for more is cut before the loop or the conversation holds it.
pub fn parse(raw: &str, request: &str, keep_calls: u64) -> Result<Parsed, InferenceError> {
    let mut reply: Value = serde_json::from_str(raw)
        .map_err(|e| InferenceError::Malformed(format!("failed to parse driver response: {e}")))?;
    let stop_reason = stop_reason(&reply)?;
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
    let reported: Map<String, Value> = USAGE_KEYS
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
    Ok(Parsed { reply, reported })
}

/// The reply's `stop_reason`; `error` (and anything unknown) fails the turn.
fn stop_reason(reply: &Value) -> Result<StopReason, InferenceError> {
    match reply.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn") => Ok(StopReason::EndTurn),
        Some("tool_call") => Ok(StopReason::ToolCall),
        Some("max_tokens") => Ok(StopReason::MaxTokens),
        Some("error") => {
            let why = reply
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("driver returned error");
            Err(InferenceError::Failed(why.to_string()))
        }
        Some(other) => Err(InferenceError::Failed(format!(
            "unsupported stop_reason '{other}'"
        ))),
        None => Err(InferenceError::Failed(
            "unsupported stop_reason '' (missing)".into(),
        )),
    }
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

/// The trace's `decision` of a reply, and the first tool it asks for.
pub fn decision(reply: &InferenceReply) -> (&'static str, Option<String>) {
    match reply.stop_reason {
        StopReason::ToolCall => (
            "tool_call",
            reply.tool_calls.first().map(|c| c.name.clone()),
        ),
        StopReason::EndTurn => ("end_turn", None),
        StopReason::MaxTokens => ("text", None),
    }
}

/// A stop reason as the trace names it.
pub fn stop_reason_name(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolCall => "tool_call",
        StopReason::MaxTokens => "max_tokens",
    }
}

/// A rough count (4 bytes a token) where the driver reports no usage.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests;
