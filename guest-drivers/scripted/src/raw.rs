//! A `raw` turn: the text a driver of `murmur:driver@0.1.0` would have answered, in that
//! version's JSON response shape (`{"stop_reason", "content": [...], "usage"}`), read
//! into the typed response by the rules the host used to read it, so scripts that test
//! how a broken or odd answer is handled keep meaning what they meant.
//!
//! Read through a `serde_json::Value` on purpose: a raw answer may be any JSON, wrong
//! types included, and each wrong part must fail (or be skipped) exactly as it did.

use crate::exports::murmur::driver::inference::{InferError, Response, StopReason, Usage};
use crate::murmur::message::types::{Block, Thinking, ToolCall};
use serde_json::Value;

/// The typed response `raw` stands for, or the error the host gave for it.
pub fn response(raw: &str) -> Result<Response, InferError> {
    let reply: Value = serde_json::from_str(raw)
        .map_err(|e| InferError::Malformed(format!("failed to parse driver response: {e}")))?;
    let reason = reply.get("stop_reason").and_then(Value::as_str);
    let error = reply.get("error").and_then(Value::as_str);
    let stop_reason = match reason {
        Some(reason) => stop_reason(reason, error)?,
        None => {
            return Err(InferError::Failed(
                "unsupported stop_reason '' (missing)".into(),
            ));
        }
    };
    let content = match reply.get("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(blocks)) => blocks.iter().filter_map(block).collect(),
        Some(_) => {
            return Err(InferError::Failed(
                "driver response 'content' is not a list".into(),
            ));
        }
    };
    Ok(Response {
        stop_reason,
        content,
        usage: usage(reply.get("usage")),
    })
}

/// A stop reason by its name; `error` fails with `error` (the answer's own words, if
/// any), and an unknown name fails naming it.
pub fn stop_reason(name: &str, error: Option<&str>) -> Result<StopReason, InferError> {
    match name {
        "end_turn" => Ok(StopReason::EndTurn),
        "tool_call" => Ok(StopReason::ToolCall),
        "max_tokens" => Ok(StopReason::MaxTokens),
        "error" => Err(InferError::Failed(
            error.unwrap_or("driver returned error").to_string(),
        )),
        other => Err(InferError::Failed(format!(
            "unsupported stop_reason '{other}'"
        ))),
    }
}

/// One content block; blocks of another type, or text that is not a string, are left out.
fn block(value: &Value) -> Option<Block> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    match value.get("type").and_then(Value::as_str)? {
        "text" => text("text").map(Block::Text),
        "thinking" => Some(Block::Thinking(Thinking {
            text: text("text").unwrap_or_default(),
            signature: text("signature").filter(|s| !s.is_empty()),
        })),
        // The input as it was given, even when it is no object: the host refuses that
        // before any tool runs, and the scripts test it.
        "tool_call" => Some(Block::ToolCall(ToolCall {
            id: text("id").unwrap_or_default(),
            name: text("name").unwrap_or_default(),
            input: match value.get("input") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(input) => input.to_string(),
            },
        })),
        _ => None,
    }
}

/// The counts the answer reported; anything but a non-negative integer is none.
fn usage(usage: Option<&Value>) -> Usage {
    let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64);
    Usage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cached_tokens: count("cached_tokens"),
        cache_write_tokens: count("cache_write_tokens"),
        thinking_tokens: count("thinking_tokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(raw: &str) -> String {
        match response(raw) {
            Err(InferError::Failed(why)) => why,
            other => panic!("{raw}: not failed but {other:?}"),
        }
    }

    #[test]
    fn a_raw_answer_becomes_the_typed_response() {
        let raw = r#"{"stop_reason":"tool_call","content":[
            {"type":"thinking","text":"t","signature":"s"},
            {"type":"text","text":"let me"},
            {"type":"tool_call","id":"c1","name":"echo","input":{"a":1}},
            {"type":"tool_call","name":"ls","input":null},
            {"type":"tool_call","id":"c3","input":[1,2]},
            {"type":"image","data":"x"},
            {"type":"text","text":7}],
            "usage":{"input_tokens":7,"output_tokens":"3","thinking_tokens":2}}"#;
        let response = response(raw).unwrap();
        assert!(matches!(response.stop_reason, StopReason::ToolCall));
        let blocks: Vec<String> = response
            .content
            .iter()
            .map(|block| match block {
                Block::Text(text) => format!("text {text}"),
                Block::Thinking(t) => format!("thinking {} {:?}", t.text, t.signature),
                Block::ToolCall(c) => format!("call {} {} {}", c.id, c.name, c.input),
                Block::ToolResult(r) => format!("result {}", r.call_id),
            })
            .collect();
        assert_eq!(
            blocks,
            [
                "thinking t Some(\"s\")",
                "text let me",
                r#"call c1 echo {"a":1}"#,
                "call  ls {}",
                "call c3  [1,2]",
            ]
        );
        let usage = response.usage;
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.thinking_tokens
            ),
            (Some(7), None, Some(2))
        );
        assert_eq!(usage.cached_tokens, None);
    }

    #[test]
    fn a_raw_answer_that_is_not_json_is_malformed() {
        match response("not json {") {
            Err(InferError::Malformed(why)) => assert!(
                why.starts_with("failed to parse driver response: expected ident"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stop_reasons_and_content_fail_as_the_host_failed_them() {
        assert_eq!(
            failed(r#"{"stop_reason":"error","error":"rate limited"}"#),
            "rate limited"
        );
        assert_eq!(
            failed(r#"{"stop_reason":"error"}"#),
            "driver returned error"
        );
        assert_eq!(
            failed(r#"{"stop_reason":"pause","content":[]}"#),
            "unsupported stop_reason 'pause'"
        );
        assert_eq!(
            failed(r#"{"stop_reason":7}"#),
            "unsupported stop_reason '' (missing)"
        );
        assert_eq!(
            failed(r#"{"stop_reason":"end_turn","content":"hello"}"#),
            "driver response 'content' is not a list"
        );
        let empty = response(r#"{"stop_reason":"max_tokens","content":null}"#).unwrap();
        assert!(matches!(empty.stop_reason, StopReason::MaxTokens));
        assert!(empty.content.is_empty());
    }
}
