//! Anthropic's Messages API: the request the host's neutral request becomes, and the
//! answer, whole or streamed, read back into the host's reply. Plain Rust: no host call
//! happens here, so it is tested natively.

use mur_driver_kit::Piece;
use mur_driver_kit::answer::{self, Seen};
use mur_driver_kit::config::Config;
use mur_driver_kit::default_endpoint;
use mur_driver_kit::neutral::{
    Block, Message, Reply, Request, StopReason, Tool, Usage, tool_input,
};
use mur_driver_kit::provider::Provider;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The API requires `max_tokens`; this is the host's own default, for a request without.
const DEFAULT_MAX_TOKENS: u64 = 8192;
/// The API version whose shapes this module speaks.
const API_VERSION: &str = "2023-06-01";

pub struct Anthropic;

impl Provider for Anthropic {
    const NAME: &'static str = "anthropic";
    const DEFAULT_ENDPOINT: &'static str = default_endpoint::ANTHROPIC;
    type Draft = Draft;

    /// The messages call (see the kit's `api_path`).
    fn api_path(path: &str) -> String {
        mur_driver_kit::endpoint::api_path(path, "/messages")
    }

    fn request_body(request: &Request, model: &str, config: &Config) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), model.into());
        let max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        body.insert("max_tokens".into(), max_tokens.into());
        if let Some(system) = &request.system {
            body.insert("system".into(), system.clone().into());
        }
        body.insert("messages".into(), messages(&request.messages).into());
        if !request.tools.is_empty() {
            body.insert("tools".into(), request.tools.iter().map(tool).collect());
        }
        config.write_to(&mut body);
        Value::Object(body)
    }

    fn headers(api_key: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
        headers.extend(api_key.map(|key| ("x-api-key", key.to_string())));
        headers
    }
}

/// The conversation in Anthropic's shape. The API wants user and assistant turns to
/// alternate and has no tool role, so tool results become user content and neighbours
/// of the same role are merged into one message. Empty text blocks are refused by the
/// API and left out, and a message left with nothing is dropped.
fn messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User(texts) => ("user", text_blocks(texts)),
            Message::Assistant(blocks) => (
                "assistant",
                blocks.iter().filter_map(assistant_block).collect(),
            ),
            Message::Tool {
                call_id,
                is_error,
                texts,
            } => ("user", vec![tool_result(call_id, *is_error, texts)]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn text_blocks(texts: &[String]) -> Vec<Value> {
    texts
        .iter()
        .filter(|text| !text.is_empty())
        .map(|text| json!({"type": "text", "text": text}))
        .collect()
}

/// One block of an earlier answer. Reasoning goes back only with its signature: the
/// API refuses unsigned thinking, and reasoning from another provider has none.
fn assistant_block(block: &Block) -> Option<Value> {
    match block {
        Block::Text(text) if text.is_empty() => None,
        Block::Text(text) => Some(json!({"type": "text", "text": text})),
        Block::ToolCall { id, name, input } => {
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        }
        Block::Thinking {
            text,
            signature: Some(signature),
        } => Some(json!({"type": "thinking", "thinking": text, "signature": signature})),
        Block::Thinking { .. } => None,
    }
}

fn tool_result(call_id: &str, is_error: bool, texts: &[String]) -> Value {
    let mut result = Map::new();
    result.insert("type".into(), "tool_result".into());
    result.insert("tool_use_id".into(), call_id.into());
    let text = texts.join("\n");
    // Content is optional and an empty text is refused.
    if !text.is_empty() {
        result.insert("content".into(), text.into());
    }
    result.insert("is_error".into(), is_error.into());
    Value::Object(result)
}

fn tool(tool: &Tool) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), tool.name.clone().into());
    if let Some(description) = &tool.description {
        out.insert("description".into(), description.clone().into());
    }
    out.insert("input_schema".into(), tool.parameters.clone());
    Value::Object(out)
}

/// Copies the counts `usage` has into `into`, keeping the others: a stream reports
/// input counts at its start and the final output count at its end.
fn read_usage(usage: &Value, into: &mut Usage) {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let pairs = [
        (&mut into.input_tokens, count("input_tokens")),
        (&mut into.output_tokens, count("output_tokens")),
        (&mut into.cached_tokens, count("cache_read_input_tokens")),
        (
            &mut into.cache_write_tokens,
            count("cache_creation_input_tokens"),
        ),
    ];
    for (slot, value) in pairs {
        if value.is_some() {
            *slot = value;
        }
    }
}

/// A content block as it is put together.
#[derive(Debug)]
enum Part {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The input as a whole answer gives it.
        input: Value,
        /// The input's text as a stream gives it, in pieces.
        json: String,
    },
    Thinking {
        text: String,
        signature: String,
    },
    /// A block the host has no word for (redacted thinking, server tools).
    Other,
}

/// The answer so far, its blocks by the provider's index.
#[derive(Debug, Default)]
pub struct Draft {
    parts: BTreeMap<u64, Part>,
    stop: Option<String>,
    usage: Usage,
}

impl Draft {
    fn start_block(&mut self, index: u64, block: &Value) {
        let text = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let part = match block.get("type").and_then(Value::as_str) {
            Some("text") => Part::Text(text("text")),
            Some("tool_use") => Part::ToolUse {
                id: text("id"),
                name: text("name"),
                input: block.get("input").cloned().unwrap_or(Value::Null),
                json: String::new(),
            },
            Some("thinking") => Part::Thinking {
                text: text("thinking"),
                signature: text("signature"),
            },
            _ => Part::Other,
        };
        self.parts.insert(index, part);
    }

    fn on_delta(&mut self, index: u64, delta: &Value, emit: &mut dyn FnMut(Piece<'_>)) {
        let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
        let kind = delta
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // A delta for a block that never started starts it, so nothing is lost.
        let part = self.parts.entry(index).or_insert_with(|| match kind {
            "input_json_delta" => Part::ToolUse {
                id: String::new(),
                name: String::new(),
                input: Value::Null,
                json: String::new(),
            },
            "thinking_delta" | "signature_delta" => Part::Thinking {
                text: String::new(),
                signature: String::new(),
            },
            _ => Part::Text(String::new()),
        });
        match (kind, part) {
            ("text_delta", Part::Text(so_far)) => {
                emit(Piece::Text(text("text")));
                so_far.push_str(text("text"));
            }
            ("input_json_delta", Part::ToolUse { json, .. }) => json.push_str(text("partial_json")),
            ("thinking_delta", Part::Thinking { text: so_far, .. }) => {
                emit(Piece::Thinking(text("thinking")));
                so_far.push_str(text("thinking"));
            }
            ("signature_delta", Part::Thinking { signature, .. }) => {
                signature.push_str(text("signature"))
            }
            // Citations, and deltas that do not fit their block.
            _ => {}
        }
    }

    fn stop_reason(&self) -> StopReason {
        let calls = self
            .parts
            .values()
            .any(|p| matches!(p, Part::ToolUse { .. }));
        match self.stop.as_deref() {
            Some("tool_use") => StopReason::ToolCall,
            Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
            Some(_) => StopReason::EndTurn,
            None if calls => StopReason::ToolCall,
            None => StopReason::EndTurn,
        }
    }
}

fn tool_call(id: String, name: String, input: Value, json: &str) -> Result<Block, String> {
    if name.is_empty() {
        return Err("the model sent a tool call without a name".into());
    }
    let input = match input {
        // A whole answer carries the object; a stream starts with `{}` and sends the text.
        Value::Object(map) if json.is_empty() => Value::Object(map),
        _ => tool_input(&name, json)?,
    };
    Ok(Block::ToolCall { id, name, input })
}

/// How this provider's answer reads, whole or streamed; the kit does the framing.
impl answer::Draft for Draft {
    fn is_error(body: &Value) -> bool {
        body.get("type").and_then(Value::as_str) == Some("error")
    }

    fn whole(body: &Value) -> Result<Draft, String> {
        let Some(Value::Array(content)) = body.get("content") else {
            return Err("the answer has no content list".into());
        };
        let mut draft = Draft::default();
        for (index, block) in content.iter().enumerate() {
            draft.start_block(index as u64, block);
        }
        draft.stop = body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(usage) = body.get("usage") {
            read_usage(usage, &mut draft.usage);
        }
        Ok(draft)
    }

    fn read(&mut self, name: &str, data: &Value, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
        // The data names its type too; it is trusted over the event line.
        let kind = data.get("type").and_then(Value::as_str).unwrap_or(name);
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    read_usage(usage, &mut self.usage);
                }
            }
            "content_block_start" => {
                if let Some(block) = data.get("content_block") {
                    self.start_block(index, block);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = data.get("delta") {
                    self.on_delta(index, delta, emit);
                }
            }
            "message_delta" => {
                if let Some(stop) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    read_usage(usage, &mut self.usage);
                }
            }
            // Only `message_stop` completes an answer.
            "message_stop" => return Seen::End,
            "error" => return Seen::ServerError,
            // `ping`, `content_block_stop` and whatever later versions add.
            _ => {}
        }
        Seen::More
    }

    fn into_reply(self) -> Result<Reply, String> {
        let stop_reason = self.stop_reason();
        let mut content = Vec::new();
        for part in self.parts.into_values() {
            match part {
                Part::Text(text) if !text.is_empty() => content.push(Block::Text(text)),
                Part::ToolUse {
                    id,
                    name,
                    input,
                    json,
                } => match tool_call(id, name, input, &json) {
                    Ok(call) => content.push(call),
                    // Cut off by max_tokens: the host runs no tools for such an answer,
                    // so the half-written call is left out rather than failing it.
                    Err(_) if stop_reason == StopReason::MaxTokens => {}
                    Err(e) => return Err(e),
                },
                Part::Thinking { text, signature } => content.push(Block::Thinking {
                    text,
                    signature: (!signature.is_empty()).then_some(signature),
                }),
                Part::Text(_) | Part::Other => {}
            }
        }
        Ok(Reply {
            stop_reason,
            content,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mur_driver_kit::answer::parse_whole;
    use mur_driver_kit::http::{Flow, StreamEnd};
    use mur_driver_kit::sse::SseEvent;

    type Stream = answer::Stream<Draft>;

    #[test]
    fn endpoint_paths() {
        assert_eq!(Anthropic::api_path(""), "/v1/messages");
        assert_eq!(Anthropic::api_path("/v1"), "/v1/messages");
        assert_eq!(Anthropic::api_path("/x/v1/messages"), "/x/v1/messages");
        assert_eq!(Anthropic::api_path("/proxy"), "/proxy/v1/messages");
    }

    #[test]
    fn the_request_body_alternates_roles() {
        let request = Request::parse(
            r#"{"model":"m","system":"sys","messages":[
              {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""}]},
              {"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"s"},
                {"type":"thinking","text":"unsigned"},{"type":"text","text":"ok"},
                {"type":"tool_call","id":"c1","name":"ls","input":{}},
                {"type":"tool_call","id":"c2","name":"ls","input":{"p":1}}]},
              {"role":"tool","tool_call_id":"c1","is_error":false,"content":"r1"},
              {"role":"tool","tool_call_id":"c2","is_error":true,"content":[{"type":"text","text":""}]},
              {"role":"user","content":"more"}],
             "tools":[{"name":"ls","parameters":{"type":"object"}}]}"#,
        )
        .unwrap();
        let config = Config {
            stream: false,
            temperature: None,
            top_p: Some(0.9),
        };
        assert_eq!(
            Anthropic::request_body(&request, "m", &config),
            json!({
                "model": "m",
                "max_tokens": 8192,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "c1", "name": "ls", "input": {}},
                        {"type": "tool_use", "id": "c2", "name": "ls", "input": {"p": 1}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "r1", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "c2", "is_error": true},
                        {"type": "text", "text": "more"}]},
                ],
                "tools": [{"name": "ls", "input_schema": {"type": "object"}}],
                "top_p": 0.9,
                "stream": false,
            })
        );
    }

    #[test]
    fn a_whole_answer() {
        let reply = parse_whole::<Draft>(
            br#"{"type":"message","content":[
                {"type":"thinking","thinking":"hm","signature":"sig"},
                {"type":"redacted_thinking","data":"x"},
                {"type":"text","text":"Checking."},
                {"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}],
               "stop_reason":"tool_use",
               "usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":7,"cache_creation_input_tokens":0}}"#,
        )
        .unwrap();
        assert_eq!(
            reply.to_json(),
            json!({"stop_reason": "tool_call", "content": [
                {"type": "thinking", "text": "hm", "signature": "sig"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_call", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
                "usage": {"input_tokens": 10, "output_tokens": 3, "cached_tokens": 7, "cache_write_tokens": 0}})
            .to_string()
        );
    }

    #[test]
    fn stop_reasons() {
        let stop = |reason: &str| {
            let body =
                format!(r#"{{"content":[{{"type":"text","text":"x"}}],"stop_reason":{reason}}}"#);
            parse_whole::<Draft>(body.as_bytes()).unwrap().stop_reason
        };
        assert_eq!(stop(r#""end_turn""#), StopReason::EndTurn);
        assert_eq!(stop(r#""stop_sequence""#), StopReason::EndTurn);
        assert_eq!(stop(r#""refusal""#), StopReason::EndTurn);
        assert_eq!(stop(r#""pause_turn""#), StopReason::EndTurn);
        assert_eq!(stop(r#""max_tokens""#), StopReason::MaxTokens);
        assert_eq!(stop("null"), StopReason::EndTurn);
    }

    #[test]
    fn bad_answers_are_errors_not_traps() {
        assert!(
            parse_whole::<Draft>(b"nope")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            parse_whole::<Draft>(b"{}")
                .unwrap_err()
                .contains("no content")
        );
        let err = parse_whole::<Draft>(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert!(err.unwrap_err().contains("Overloaded"));
    }

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.into(),
            data: data.into(),
        }
    }

    /// Plays `(event, data)` pairs into a stream; returns the emitted pieces, the last
    /// flow and the stream.
    fn play(events: &[(&str, &str)]) -> (Vec<String>, Result<Flow, String>, Stream) {
        let mut stream = Stream::default();
        let mut pieces = Vec::new();
        let mut emit = |piece: Piece<'_>| pieces.push(format!("{piece:?}"));
        let mut flow = Ok(Flow::Continue);
        for (name, data) in events {
            flow = stream.on_event(&event(name, data), &mut emit);
            if flow.is_err() {
                break;
            }
        }
        (pieces, flow, stream)
    }

    const STREAM: &[(&str, &str)] = &[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1,"cache_read_input_tokens":5}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQ"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ("ping", r#"{"type": "ping"}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"ls","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"p\": "}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"pwd","input":{}}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":15}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];

    #[test]
    fn a_streamed_answer() {
        let (pieces, flow, stream) = play(STREAM);
        assert_eq!(flow, Ok(Flow::Done));
        assert_eq!(pieces, ["Thinking(\"Let me\")", "Text(\"Hi\")"]);
        let reply = stream
            .finish(StreamEnd::Done, "https://h/v1/messages")
            .unwrap();
        assert_eq!(
            reply.to_json(),
            json!({"stop_reason": "tool_call", "content": [
                {"type": "thinking", "text": "Let me", "signature": "EqQ"},
                {"type": "text", "text": "Hi"},
                {"type": "tool_call", "id": "toolu_1", "name": "ls", "input": {"p": 1}},
                {"type": "tool_call", "id": "toolu_2", "name": "pwd", "input": {}}],
                "usage": {"input_tokens": 25, "output_tokens": 15, "cached_tokens": 5}})
            .to_string()
        );
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_an_error() {
        let (_, _, stream) = play(&STREAM[..8]);
        let err = stream
            .finish(
                StreamEnd::Cut("h closed the connection".into()),
                "https://h/v1/messages",
            )
            .unwrap_err();
        assert!(
            err.contains("ended before the answer was complete: h closed"),
            "{err}"
        );
    }

    #[test]
    fn errors_inside_a_stream() {
        let (_, flow, _) = play(&[(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )]);
        assert!(flow.unwrap_err().contains("Overloaded"));
        let (_, flow, _) = play(&[("message_start", "{bad")]);
        assert!(flow.unwrap_err().contains("not JSON"));
    }

    #[test]
    fn broken_tool_input_is_an_error_unless_cut_by_max_tokens() {
        let broken = [
            STREAM[8],
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"p\""}}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        let (_, _, stream) = play(&broken);
        assert!(
            stream
                .finish(StreamEnd::Done, "u")
                .unwrap_err()
                .contains("'ls'")
        );
        let mut cut = broken;
        cut[2] = (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"}}"#,
        );
        let (_, _, stream) = play(&cut);
        let reply = stream.finish(StreamEnd::Done, "u").unwrap();
        assert_eq!(
            (reply.stop_reason, reply.content),
            (StopReason::MaxTokens, vec![])
        );
    }
}
