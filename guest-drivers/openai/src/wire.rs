//! The Chat Completions API that OpenAI and most local servers (vLLM, Ollama, llama.cpp)
//! speak: the request the host's neutral request becomes, and the answer, whole or
//! streamed, read back into the host's reply. Plain Rust: no host call happens here, so
//! it is tested natively.

use mur_driver_kit::Piece;
use mur_driver_kit::answer::{self, Seen};
use mur_driver_kit::config::Config;
use mur_driver_kit::default_endpoint;
use mur_driver_kit::neutral::{
    Block, Message, Reply, Request, StopReason, Tool, Usage, tool_input,
};
use mur_driver_kit::provider::Provider;
use serde_json::{Map, Value, json};

pub struct OpenAi;

impl Provider for OpenAi {
    const NAME: &'static str = "openai";
    const DEFAULT_ENDPOINT: &'static str = default_endpoint::OPENAI;
    type Draft = Draft;

    /// The chat call (see the kit's `api_path`).
    fn api_path(path: &str) -> String {
        mur_driver_kit::endpoint::api_path(path, "/chat/completions")
    }

    fn request_body(request: &Request, model: &str, config: &Config) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), model.into());
        body.insert("messages".into(), messages(request).into());
        // `max_tokens` rather than `max_completion_tokens`: the local servers know only it.
        if let Some(max_tokens) = request.max_tokens {
            body.insert("max_tokens".into(), max_tokens.into());
        }
        if !request.tools.is_empty() {
            body.insert("tools".into(), request.tools.iter().map(tool).collect());
        }
        config.write_to(&mut body);
        if config.stream {
            // Without it a stream carries no token counts.
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        Value::Object(body)
    }

    fn headers(api_key: Option<&str>) -> Vec<(&'static str, String)> {
        api_key
            .map(|key| ("authorization", format!("Bearer {key}")))
            .into_iter()
            .collect()
    }
}

fn messages(request: &Request) -> Vec<Value> {
    let system = request
        .system
        .iter()
        .map(|system| json!({"role": "system", "content": system}));
    system.chain(request.messages.iter().map(message)).collect()
}

fn message(message: &Message) -> Value {
    match message {
        Message::User(texts) => json!({"role": "user", "content": texts.join("\n")}),
        Message::Assistant(blocks) => assistant(blocks),
        Message::Tool { call_id, texts, .. } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": texts.join("\n")})
        }
    }
}

/// An earlier answer. Reasoning is not sent back: the API has no place for it and some
/// servers refuse it.
fn assistant(blocks: &[Block]) -> Value {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = blocks
        .iter()
        .filter_map(|block| match block {
            Block::ToolCall { id, name, input } => Some(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
            _ => None,
        })
        .collect();
    let text = texts.join("\n");
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    // Null content is meant for a message that only calls tools; elsewhere servers
    // want a string, even an empty one.
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        text.into()
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), calls.into());
    }
    Value::Object(message)
}

fn tool(tool: &Tool) -> Value {
    let mut function = Map::new();
    function.insert("name".into(), tool.name.clone().into());
    if let Some(description) = &tool.description {
        function.insert("description".into(), description.clone().into());
    }
    function.insert("parameters".into(), tool.parameters.clone());
    json!({"type": "function", "function": function})
}

/// `content` as text: a string, or (from some servers) a list of text parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Reasoning text: `reasoning_content` (DeepSeek, vLLM) or `reasoning` (Ollama, OpenRouter).
fn reasoning(message: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|key| message.get(*key).and_then(Value::as_str))
        .filter(|text| !text.is_empty())
}

fn text_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Whether a body or event is an error: `{"error": …}` from most servers,
/// `{"object": "error", …}` from vLLM.
fn has_error(value: &Value) -> bool {
    value.get("error").is_some_and(|e| !e.is_null()) || text_of(value, "object") == Some("error")
}

fn usage(usage: Option<&Value>) -> Usage {
    let Some(usage) = usage.filter(|u| u.is_object()) else {
        return Usage::default();
    };
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    Usage {
        input_tokens: count("/prompt_tokens"),
        output_tokens: count("/completion_tokens"),
        cached_tokens: count("/prompt_tokens_details/cached_tokens"),
        cache_write_tokens: None,
        thinking_tokens: count("/completion_tokens_details/reasoning_tokens"),
    }
}

/// A tool call as it is put together, whole or from streamed pieces.
#[derive(Debug, Default)]
struct Call {
    /// The `index` a stream numbers its pieces by, when the server gives one.
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

/// The answer so far.
#[derive(Debug, Default)]
pub struct Draft {
    thinking: String,
    text: String,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Usage,
}

impl Draft {
    /// Adds one `tool_calls` item: a whole call, or a streamed piece of one. The first
    /// piece of a call carries its id and name; the arguments come in pieces to join.
    fn merge_call(&mut self, piece: &Value) {
        let index = piece.get("index").and_then(Value::as_u64);
        let id = piece.get("id").and_then(Value::as_str).unwrap_or_default();
        let at = match index {
            Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
            // Without an index, a new id starts a new call and pieces without one
            // continue the last.
            None if id.is_empty() => self.calls.len().checked_sub(1),
            None => self.calls.iter().position(|c| c.id == id),
        };
        let at = at.unwrap_or_else(|| {
            self.calls.push(Call {
                index,
                ..Call::default()
            });
            self.calls.len() - 1
        });
        let Some(call) = self.calls.get_mut(at) else {
            return;
        };
        if call.id.is_empty() {
            call.id = id.to_string();
        }
        let function = piece.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
            && call.name.is_empty()
        {
            call.name = name.to_string();
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(part)) => call.arguments.push_str(part),
            // Some servers send the arguments as an object rather than its text.
            Some(object @ Value::Object(_)) => call.arguments = object.to_string(),
            _ => {}
        }
    }

    fn on_choice(&mut self, choice: &Value, emit: &mut dyn FnMut(Piece<'_>)) {
        if let Some(delta) = choice.get("delta") {
            if let Some(piece) = reasoning(delta) {
                emit(Piece::Thinking(piece));
                self.thinking.push_str(piece);
            }
            // A refusal streams instead of content and is shown the same way.
            for key in ["content", "refusal"] {
                if let Some(piece) = text_of(delta, key) {
                    emit(Piece::Text(piece));
                    self.text.push_str(piece);
                }
            }
            if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                for call in calls {
                    self.merge_call(call);
                }
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish.to_string());
        }
    }
}

/// How this provider's answer reads, whole or streamed; the kit does the framing.
impl answer::Draft for Draft {
    const END_MARKER: Option<&'static str> = Some("[DONE]");

    fn is_error(body: &Value) -> bool {
        has_error(body)
    }

    fn whole(body: &Value) -> Result<Draft, String> {
        let choice = body
            .pointer("/choices/0")
            .ok_or("the answer has no choices")?;
        let message = choice
            .get("message")
            .ok_or("the answer's choice has no message")?;
        let mut draft = Draft::default();
        if let Some(reasoning) = reasoning(message) {
            draft.thinking.push_str(reasoning);
        }
        draft.text = content_text(message.get("content"));
        // A refusal comes instead of content; it is the model's answer all the same.
        if let (true, Some(refusal)) = (draft.text.is_empty(), text_of(message, "refusal")) {
            draft.text = refusal.to_string();
        }
        if let Some(Value::Array(calls)) = message.get("tool_calls") {
            for call in calls {
                draft.merge_call(call);
            }
        }
        draft.finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        draft.usage = usage(body.get("usage"));
        Ok(draft)
    }

    fn read(&mut self, name: &str, data: &Value, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
        if has_error(data) || name == "error" {
            return Seen::ServerError;
        }
        if data.get("usage").is_some_and(Value::is_object) {
            self.usage = usage(data.get("usage"));
        }
        if let Some(choice) = data.pointer("/choices/0") {
            self.on_choice(choice, emit);
        }
        Seen::More
    }

    /// A stream cut off after the model finished (before `[DONE]`, say) only lacks
    /// token counts.
    fn finished(&self) -> bool {
        self.finish.is_some()
    }

    fn into_reply(self) -> Result<Reply, String> {
        let stop_reason = match self.finish.as_deref() {
            Some("length") => StopReason::MaxTokens,
            // Some servers say `stop` even when the model called tools; the calls decide.
            _ if !self.calls.is_empty() => StopReason::ToolCall,
            _ => StopReason::EndTurn,
        };
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(Block::Thinking {
                text: self.thinking,
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text(self.text));
        }
        for (n, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(format!("the model sent tool call {} without a name", n + 1));
            }
            let input = match tool_input(&call.name, &call.arguments) {
                Ok(input) => input,
                // Cut off by max_tokens: the host runs no tools for such an answer, so
                // the half-written call is left out rather than failing the answer.
                Err(_) if stop_reason == StopReason::MaxTokens => continue,
                Err(e) => return Err(e),
            };
            // The host pairs results with calls by id; some local servers send none.
            let id = if call.id.is_empty() {
                format!("call_{}", n + 1)
            } else {
                call.id
            };
            content.push(Block::ToolCall {
                id,
                name: call.name,
                input,
            });
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

    fn request() -> Request {
        Request::parse(
            r#"{"model":"m","max_tokens":50,"system":"sys","messages":[
              {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
              {"role":"assistant","content":[{"type":"thinking","text":"hm"},
                {"type":"tool_call","id":"c1","name":"ls","input":{"p":"/"}}]},
              {"role":"tool","tool_call_id":"c1","is_error":false,"content":"x"},
              {"role":"assistant","content":[{"type":"text","text":"done"}]}],
             "tools":[{"name":"ls","description":"list","parameters":{"type":"object"}}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn endpoint_paths() {
        assert_eq!(OpenAi::api_path(""), "/v1/chat/completions");
        assert_eq!(OpenAi::api_path("/v1"), "/v1/chat/completions");
        assert_eq!(
            OpenAi::api_path("/openai/v1/chat/completions"),
            "/openai/v1/chat/completions"
        );
        assert_eq!(OpenAi::api_path("/proxy"), "/proxy/v1/chat/completions");
    }

    #[test]
    fn the_request_body() {
        let config = Config {
            stream: true,
            temperature: Some(0.5),
            top_p: None,
        };
        let body = OpenAi::request_body(&request(), "m", &config);
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "a\nb"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"p\":\"/\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "x"},
                    {"role": "assistant", "content": "done"},
                ],
                "max_tokens": 50,
                "tools": [{"type": "function", "function": {"name": "ls", "description": "list", "parameters": {"type": "object"}}}],
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
        let plain = OpenAi::request_body(
            &Request::parse(r#"{"messages":[]}"#).unwrap(),
            "m",
            &Config::default(),
        );
        assert_eq!(
            plain,
            json!({"model": "m", "messages": [], "stream": false})
        );
    }

    #[test]
    fn a_whole_answer() {
        let reply = parse_whole::<Draft>(
            br#"{"choices":[{"message":{"content":null,"reasoning_content":"think",
                 "tool_calls":[{"id":"c9","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}}]},
                 "finish_reason":"tool_calls"}],
                 "usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},
                          "completion_tokens_details":{"reasoning_tokens":2}}}"#,
        )
        .unwrap();
        assert_eq!(
            reply.to_json(),
            json!({"stop_reason": "tool_call", "content": [
                {"type": "thinking", "text": "think"},
                {"type": "tool_call", "id": "c9", "name": "ls", "input": {"p": 1}}],
                "usage": {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 4, "thinking_tokens": 2}})
            .to_string()
        );
    }

    #[test]
    fn finish_reasons() {
        let answer = |finish: &str, calls: &str| {
            let body = format!(
                r#"{{"choices":[{{"message":{{"content":"hi","tool_calls":{calls}}},"finish_reason":{finish}}}]}}"#
            );
            parse_whole::<Draft>(body.as_bytes()).unwrap().stop_reason
        };
        let call = r#"[{"id":"1","function":{"name":"f","arguments":"{}"}}]"#;
        assert_eq!(answer(r#""stop""#, "[]"), StopReason::EndTurn);
        assert_eq!(answer(r#""content_filter""#, "null"), StopReason::EndTurn);
        assert_eq!(answer(r#""length""#, "[]"), StopReason::MaxTokens);
        assert_eq!(answer(r#""stop""#, call), StopReason::ToolCall);
        assert_eq!(answer("null", call), StopReason::ToolCall);
    }

    #[test]
    fn bad_answers_are_errors_not_traps() {
        let bad_args = br#"{"choices":[{"message":{"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{oops"}}]}}]}"#;
        assert!(parse_whole::<Draft>(bad_args).unwrap_err().contains("'f'"));
        assert!(
            parse_whole::<Draft>(b"<html>")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(parse_whole::<Draft>(br#"{"choices":[]}"#).is_err());
        assert!(parse_whole::<Draft>(br#"[1,2]"#).is_err());
        let error = parse_whole::<Draft>(br#"{"error":{"message":"quota"}}"#).unwrap_err();
        assert!(error.contains("quota"), "{error}");
        let vllm = br#"{"object":"error","message":"too long","type":"BadRequestError"}"#;
        assert!(parse_whole::<Draft>(vllm).unwrap_err().contains("too long"));
        let refusal = br#"{"choices":[{"message":{"content":null,"refusal":"I can't."},"finish_reason":"stop"}]}"#;
        assert_eq!(
            parse_whole::<Draft>(refusal).unwrap().content,
            vec![Block::Text("I can't.".into())]
        );
        // Cut off by max_tokens: the half call is dropped.
        let cut = br#"{"choices":[{"message":{"content":"a","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"x"}}]},"finish_reason":"length"}]}"#;
        assert_eq!(
            parse_whole::<Draft>(cut).unwrap().content,
            vec![Block::Text("a".into())]
        );
    }

    fn event(data: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: data.into(),
        }
    }

    /// Plays `events` into a stream; returns the emitted pieces and the reply.
    fn play(events: &[&str], end: Option<&str>) -> (Vec<String>, Result<Reply, String>) {
        let mut stream = Stream::default();
        let mut pieces = Vec::new();
        let mut emit = |piece: Piece<'_>| pieces.push(format!("{piece:?}"));
        let mut flow = Flow::Continue;
        for data in events {
            match stream.on_event(&event(data), &mut emit) {
                Ok(f) => flow = f,
                Err(e) => return (pieces, Err(e)),
            }
        }
        let end = match end {
            Some(cause) => StreamEnd::Cut(cause.into()),
            None => {
                assert_eq!(flow, Flow::Done);
                StreamEnd::Done
            }
        };
        let reply = stream.finish(end, "http://h/v1/chat/completions");
        (pieces, reply)
    }

    #[test]
    fn a_streamed_answer_with_tool_calls() {
        let (pieces, reply) = play(
            &[
                r#"{"choices":[{"delta":{"role":"assistant","reasoning_content":"hm"}}]}"#,
                r#"{"choices":[{"delta":{"content":"Hel"}}]}"#,
                r#"{"choices":[{"delta":{"content":"lo"}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
                "[DONE]",
            ],
            None,
        );
        assert_eq!(
            pieces,
            ["Thinking(\"hm\")", "Text(\"Hel\")", "Text(\"lo\")"]
        );
        assert_eq!(
            reply.unwrap().to_json(),
            json!({"stop_reason": "tool_call", "content": [
                {"type": "thinking", "text": "hm"},
                {"type": "text", "text": "Hello"},
                {"type": "tool_call", "id": "a", "name": "f", "input": {"x": 1}},
                {"type": "tool_call", "id": "b", "name": "g", "input": {}}],
                "usage": {"input_tokens": 3, "output_tokens": 4}})
            .to_string()
        );
    }

    #[test]
    fn a_stream_cut_before_the_finish_is_an_error() {
        let (_, reply) = play(
            &[r#"{"choices":[{"delta":{"content":"Hel"}}]}"#],
            Some("closed"),
        );
        let err = reply.unwrap_err();
        assert!(
            err.contains("ended before the answer was complete: closed"),
            "{err}"
        );
        // After the finish, only the usage is missing: accepted.
        let (_, reply) = play(
            &[r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#],
            Some("closed"),
        );
        assert_eq!(reply.unwrap().content, vec![Block::Text("Hi".into())]);
    }

    #[test]
    fn errors_inside_a_stream() {
        let (_, reply) = play(&[r#"{"error":{"message":"overloaded"}}"#], None);
        assert!(reply.unwrap_err().contains("overloaded"));
        let (_, reply) = play(&["{not json"], None);
        assert!(reply.unwrap_err().contains("not JSON"));
    }

    #[test]
    fn tool_calls_without_index_or_id() {
        let (_, reply) = play(
            &[
                r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":2}"}}]}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ],
            None,
        );
        assert_eq!(
            reply.unwrap().content,
            vec![Block::ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                input: json!({"a": 2})
            }]
        );
    }
}
