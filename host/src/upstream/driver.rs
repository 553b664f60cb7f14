//! Upstream's driver shape as an ordinary driver: our typed request becomes the request
//! JSON of upstream's drivers reference in `tool-input.data`, and the response JSON in
//! `tool-result.data` becomes our typed response, with the reference's failure texts.
//!
//! | Ours | Upstream |
//! |---|---|
//! | `configure(settings)` | environment: `MURMUR_INFERENCE_{TRANSPORT,MODEL,ENDPOINT,DRIVER,DRIVER_CONFIG}` and `MURMUR_INFERENCE_API_KEY` when a key is set; `MURMUR_CAPSULE_{NAME,VERSION}` and `MURMUR_SESSION_ID` (`identity`) |
//! | `request` | `{"model","max_tokens","system"?,"messages","tools","params"}` |
//! | text / thinking / tool-call blocks | `{"type":"text"}`, `{"type":"thinking","text","signature"?}`, `{"type":"tool_call","id","name","input"}` |
//! | a tool message | one `{"role":"tool","tool_call_id","is_error","content":[text]}` per result |
//! | `response` | `{"stop_reason","content","usage"}`; `error` and a non-`passed` status are failures |
//! | (the driver sends no key) | the host adds `inference.api_key` to requests for the endpoint's origin: `x-api-key` when the request names an `anthropic-version`, else a bearer token |
//! | `continuation_id` metadata | dropped: this host sends the whole history every turn, which the reference allows |

use serde_json::{Map, Value, json};

use crate::bindings::driver::exports::murmur::driver::inference::{
    InferError, Request, Response, Settings, StopReason, Usage,
};
use crate::bindings::message::{Block, Message, Role, Thinking, ToolCall};
use crate::bindings::upstream::exports::murmur::tool::run::{Status, ToolInput, ToolResult};

/// What an upstream driver reads instead of a `configure` call.
pub fn environment(settings: &Settings, label: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("MURMUR_INFERENCE_TRANSPORT".into(), "http".into()),
        ("MURMUR_INFERENCE_MODEL".into(), settings.model.clone()),
        (
            "MURMUR_INFERENCE_ENDPOINT".into(),
            settings.endpoint.clone(),
        ),
        ("MURMUR_INFERENCE_DRIVER".into(), label.to_string()),
        (
            "MURMUR_INFERENCE_DRIVER_CONFIG".into(),
            settings.config.clone(),
        ),
    ];
    if let Some(key) = &settings.api_key {
        env.push(("MURMUR_INFERENCE_API_KEY".into(), key.clone()));
    }
    env
}

/// Who is running, as upstream's host tells its drivers: `MURMUR_CAPSULE_{NAME,VERSION}`
/// and `MURMUR_SESSION_ID`. `MURMUR_CAPSULE_URL` is left out: the address is bound only
/// after the driver is staged.
pub fn identity(name: &str, version: &str, session_id: &str) -> Vec<(String, String)> {
    vec![
        ("MURMUR_CAPSULE_NAME".into(), name.to_string()),
        ("MURMUR_CAPSULE_VERSION".into(), version.to_string()),
        ("MURMUR_SESSION_ID".into(), session_id.to_string()),
    ]
}

/// The key upstream's host would add to the driver's requests to the endpoint: its
/// drivers send none themselves.
pub fn credential(settings: &Settings) -> Option<std::sync::Arc<crate::outbound::Credential>> {
    let key = settings.api_key.clone()?;
    let origin = crate::outbound::origin_of(&settings.endpoint)?;
    Some(std::sync::Arc::new(crate::outbound::Credential {
        origin,
        key,
    }))
}

/// The request of one turn, as `tool-input`.
pub fn input(request: &Request) -> ToolInput {
    ToolInput {
        data: Some(request_json(request).to_string()),
        log_path: None,
    }
}

fn request_json(request: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    body.insert("max_tokens".into(), request.max_tokens.into());
    if let Some(system) = &request.system {
        body.insert("system".into(), system.clone().into());
    }
    let messages: Vec<Value> = request.messages.iter().flat_map(message_json).collect();
    body.insert("messages".into(), messages.into());
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            let mut spec = Map::new();
            spec.insert("name".into(), t.name.clone().into());
            if !t.description.is_empty() {
                spec.insert("description".into(), t.description.clone().into());
            }
            let schema = serde_json::from_str(&t.input_schema)
                .unwrap_or_else(|_| json!({"type": "object", "properties": {}}));
            spec.insert("parameters".into(), schema);
            Value::Object(spec)
        })
        .collect();
    body.insert("tools".into(), tools.into());
    body.insert("params".into(), params_json(request));
    Value::Object(body)
}

/// `params` is reserved upstream (`{}`); what a session loop set is passed there by
/// its usual names, and nothing when it set nothing.
fn params_json(request: &Request) -> Value {
    let p = &request.params;
    let mut params = Map::new();
    if let Some(t) = p.temperature {
        params.insert("temperature".into(), t.into());
    }
    if let Some(t) = p.top_p {
        params.insert("top_p".into(), t.into());
    }
    if !p.stop.is_empty() {
        params.insert("stop".into(), p.stop.clone().into());
    }
    Value::Object(params)
}

/// One of our messages as upstream's: tool results are a message each.
fn message_json(message: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let mut blocks = Vec::new();
    for block in &message.content {
        match block {
            Block::ToolResult(r) => out.push(json!({
                "role": "tool",
                "tool_call_id": r.call_id,
                "is_error": r.is_error,
                "content": [{"type": "text", "text": r.content}],
            })),
            other => blocks.push(block_json(other)),
        }
    }
    if !blocks.is_empty() {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            // Text in a tool message has no upstream place but a user turn.
            Role::Tool => "user",
        };
        out.insert(0, json!({"role": role, "content": blocks}));
    }
    out
}

fn block_json(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::Thinking(t) => {
            let mut b = json!({"type": "thinking", "text": t.text});
            if let Some(sig) = &t.signature {
                b["signature"] = sig.clone().into();
            }
            b
        }
        Block::ToolCall(c) => json!({
            "type": "tool_call",
            "id": c.id,
            "name": c.name,
            "input": serde_json::from_str::<Value>(&c.input).unwrap_or_else(|_| json!({})),
        }),
        Block::ToolResult(_) => Value::Null,
    }
}

/// The bytes a result holds before it is parsed: the measure of
/// `max_driver_reply_bytes` for an upstream driver.
pub fn result_bytes(result: &ToolResult) -> u64 {
    let len = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() as u64);
    len(&result.data) + len(&result.summary)
}

/// The driver's answer, in the reference's words when it is a failure.
pub fn response(result: ToolResult) -> Result<Response, InferError> {
    let raw = match (&result.data, &result.summary) {
        (Some(data), _) => data.clone(),
        (None, Some(summary)) => summary.clone(),
        (None, None) if result.status == Status::Passed => {
            return Err(InferError::Malformed("driver returned no data".into()));
        }
        (None, None) => return Err(InferError::Failed("driver returned error".into())),
    };
    let parsed: Result<Value, _> = serde_json::from_str(&raw);
    if result.status != Status::Passed {
        return Err(InferError::Failed(error_text(parsed.ok().as_ref(), &raw)));
    }
    let body = parsed
        .map_err(|e| InferError::Malformed(format!("failed to parse driver response: {e}")))?;
    let stop_reason = match body["stop_reason"].as_str() {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_call") => StopReason::ToolCall,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("error") => return Err(InferError::Failed(error_text(Some(&body), &raw))),
        other => {
            return Err(InferError::Malformed(format!(
                "unsupported stop_reason '{}'",
                other.unwrap_or_default()
            )));
        }
    };
    let content = body["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(block).collect())
        .unwrap_or_default();
    let usage = &body["usage"];
    let count = |key: &str| usage[key].as_u64();
    Ok(Response {
        stop_reason,
        content,
        usage: Usage {
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
            cached_tokens: count("cached_tokens"),
            cache_write_tokens: count("cache_write_tokens"),
            thinking_tokens: count("thinking_tokens"),
        },
    })
}

/// `data.error` if present (a string, or an object's `message`), else the raw text.
fn error_text(body: Option<&Value>, raw: &str) -> String {
    let error = body.map(|b| &b["error"]);
    match error {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| Value::Object(o.clone()).to_string(), str::to_string),
        _ if raw.is_empty() => "driver returned error".into(),
        _ => raw.to_string(),
    }
}

/// One response block; blocks of other types are not ours to keep.
fn block(b: &Value) -> Option<Block> {
    let text = || b["text"].as_str().unwrap_or_default().to_string();
    match b["type"].as_str()? {
        "text" => Some(Block::Text(text())),
        "thinking" => Some(Block::Thinking(Thinking {
            text: text(),
            signature: b["signature"].as_str().map(str::to_string),
        })),
        "tool_call" => Some(Block::ToolCall(ToolCall {
            id: b["id"].as_str().unwrap_or_default().to_string(),
            name: b["name"].as_str().unwrap_or_default().to_string(),
            input: match &b["input"] {
                Value::Null => "{}".to_string(),
                input => input.to_string(),
            },
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::driver::exports::murmur::driver::inference::Params;
    use crate::bindings::message::{ToolResult as Answer, ToolSpec};

    fn passed(data: &str) -> ToolResult {
        ToolResult {
            status: Status::Passed,
            summary: None,
            data: Some(data.into()),
            data_path: None,
            truncated: false,
            metadata: vec![],
        }
    }

    #[test]
    fn the_request_is_the_references_json() {
        let request = Request {
            model: "m".into(),
            max_tokens: 100,
            system: Some("sys".into()),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Block::Text("hi".into())],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "t".into(),
                        input: r#"{"a":1}"#.into(),
                    })],
                },
                Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult(Answer {
                        call_id: "c1".into(),
                        content: "out".into(),
                        is_error: false,
                    })],
                },
            ],
            tools: vec![ToolSpec {
                name: "t".into(),
                description: String::new(),
                input_schema: r#"{"type":"object"}"#.into(),
            }],
            params: Params {
                temperature: None,
                top_p: None,
                stop: vec![],
            },
        };
        let body: Value = serde_json::from_str(&input(&request).data.unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m", "max_tokens": 100, "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "t", "input": {"a": 1}}]},
                    {"role": "tool", "tool_call_id": "c1", "is_error": false, "content": [{"type": "text", "text": "out"}]},
                ],
                "tools": [{"name": "t", "parameters": {"type": "object"}}],
                "params": {},
            })
        );
    }

    #[test]
    fn the_response_json_becomes_a_typed_response() {
        let got = response(passed(
            r#"{"stop_reason":"tool_call","content":[{"type":"text","text":"Checking."},{"type":"tool_call","id":"toolu_01","name":"bash","input":{"command":"ls"}}],"usage":{"input_tokens":812,"output_tokens":41}}"#,
        ))
        .unwrap_or_else(|_| panic!("parses"));
        assert_eq!(got.stop_reason, StopReason::ToolCall);
        assert_eq!(got.usage.input_tokens, Some(812));
        assert_eq!(got.usage.cached_tokens, None);
        assert!(matches!(&got.content[1], Block::ToolCall(c) if c.input == r#"{"command":"ls"}"#));
    }

    fn failure(result: ToolResult) -> String {
        match response(result) {
            Err(InferError::Failed(t) | InferError::Malformed(t)) => t,
            Ok(_) => panic!("expected a failure"),
        }
    }

    #[test]
    fn failures_use_the_references_words() {
        assert_eq!(
            failure(passed(r#"{"stop_reason":"pause"}"#)),
            "unsupported stop_reason 'pause'"
        );
        assert!(failure(passed("not json")).starts_with("failed to parse driver response: "));
        assert_eq!(
            failure(passed(r#"{"stop_reason":"error","error":"rate limited"}"#)),
            "rate limited"
        );
        let mut failed = passed("boom");
        failed.status = Status::Error;
        assert_eq!(failure(failed), "boom");
        let mut empty = passed("");
        empty.data = None;
        assert_eq!(failure(empty), "driver returned no data");
    }
}
