//! Anthropic's Messages API answer, whole or streamed, read back into the typed response.
//! The body and each event are read into borrowed structs whose fields tolerate an odd
//! type (see the kit's `lenient`). Plain Rust: no host call happens here, so it is
//! tested natively.

use mur_driver_kit::Piece;
use mur_driver_kit::answer::{self, Seen};
use mur_driver_kit::json::{Object, tool_input};
use mur_driver_kit::lenient::{Count, List, Obj, Str};
use mur_driver_kit::types::{Block, Response, StopReason, Thinking, ToolCall, Usage};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// A whole answer: a `message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Whole<'a> {
    #[serde(borrow)]
    r#type: Str<'a>,
    #[serde(borrow)]
    content: List<Obj<WireBlock<'a>>>,
    #[serde(borrow)]
    stop_reason: Str<'a>,
    usage: Obj<WireUsage>,
}

/// One stream event; its `type` names it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Event<'a> {
    #[serde(borrow)]
    r#type: Str<'a>,
    index: Count,
    /// `message_start`: the message so far, with the input's counts.
    message: Obj<Started>,
    /// `content_block_start`; a value that is not an object starts a block the host has
    /// no word for.
    #[serde(borrow)]
    content_block: Option<Obj<WireBlock<'a>>>,
    /// `content_block_delta`, or `message_delta`'s stop reason.
    #[serde(borrow)]
    delta: Option<Obj<Delta<'a>>>,
    /// `message_delta`: the final counts.
    usage: Obj<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Started {
    usage: Obj<WireUsage>,
}

/// A content block, whole or as a stream starts it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireBlock<'a> {
    #[serde(borrow)]
    r#type: Str<'a>,
    #[serde(borrow)]
    text: Str<'a>,
    #[serde(borrow)]
    id: Str<'a>,
    #[serde(borrow)]
    name: Str<'a>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Str<'a>,
    #[serde(borrow)]
    signature: Str<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Delta<'a> {
    #[serde(borrow)]
    r#type: Str<'a>,
    #[serde(borrow)]
    text: Str<'a>,
    #[serde(borrow)]
    partial_json: Str<'a>,
    #[serde(borrow)]
    thinking: Str<'a>,
    #[serde(borrow)]
    signature: Str<'a>,
    #[serde(borrow)]
    stop_reason: Str<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Count,
    output_tokens: Count,
    cache_read_input_tokens: Count,
    cache_creation_input_tokens: Count,
}

/// Copies the counts `usage` has into `into`, keeping the others: a stream reports
/// input counts at its start and the final output count at its end.
fn read_usage(usage: &WireUsage, into: &mut Usage) {
    let pairs = [
        (&mut into.input_tokens, usage.input_tokens.0),
        (&mut into.output_tokens, usage.output_tokens.0),
        (&mut into.cached_tokens, usage.cache_read_input_tokens.0),
        (
            &mut into.cache_write_tokens,
            usage.cache_creation_input_tokens.0,
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
        /// The input object as a whole answer gives it.
        input: Option<String>,
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
#[derive(Debug)]
pub struct Draft {
    parts: BTreeMap<u64, Part>,
    stop: Option<String>,
    usage: Usage,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            parts: BTreeMap::new(),
            stop: None,
            usage: Usage {
                input_tokens: None,
                output_tokens: None,
                cached_tokens: None,
                cache_write_tokens: None,
                thinking_tokens: None,
            },
        }
    }
}

impl Draft {
    fn start_block(&mut self, index: u64, block: Option<&WireBlock<'_>>) {
        let part = match block.map(|b| (b.r#type.as_deref(), b)) {
            Some((Some("text"), block)) => Part::Text(block.text.or_empty().to_string()),
            Some((Some("tool_use"), block)) => Part::ToolUse {
                id: block.id.or_empty().to_string(),
                name: block.name.or_empty().to_string(),
                input: block
                    .input
                    .filter(|raw| raw.get().starts_with('{'))
                    .map(|raw| raw.get().to_string()),
                json: String::new(),
            },
            Some((Some("thinking"), block)) => Part::Thinking {
                text: block.thinking.or_empty().to_string(),
                signature: block.signature.or_empty().to_string(),
            },
            _ => Part::Other,
        };
        self.parts.insert(index, part);
    }

    fn on_delta(&mut self, index: u64, delta: &Delta<'_>, emit: &mut dyn FnMut(Piece<'_>)) {
        let kind = delta.r#type.or_empty();
        // A delta for a block that never started starts it, so nothing is lost.
        let part = self.parts.entry(index).or_insert_with(|| match kind {
            "input_json_delta" => Part::ToolUse {
                id: String::new(),
                name: String::new(),
                input: None,
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
                emit(Piece::Text(delta.text.or_empty()));
                so_far.push_str(delta.text.or_empty());
            }
            ("input_json_delta", Part::ToolUse { json, .. }) => {
                json.push_str(delta.partial_json.or_empty())
            }
            ("thinking_delta", Part::Thinking { text: so_far, .. }) => {
                emit(Piece::Thinking(delta.thinking.or_empty()));
                so_far.push_str(delta.thinking.or_empty());
            }
            ("signature_delta", Part::Thinking { signature, .. }) => {
                signature.push_str(delta.signature.or_empty())
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

fn tool_call(id: String, name: String, input: Option<String>, json: &str) -> Result<Block, String> {
    if name.is_empty() {
        return Err("the model sent a tool call without a name".into());
    }
    let input = match input {
        // A whole answer carries the object; a stream starts with `{}` and sends the text.
        Some(object) if json.is_empty() => Object::or(&object, "{}").into_string(),
        _ => tool_input(&name, json)?,
    };
    Ok(Block::ToolCall(ToolCall { id, name, input }))
}

/// How this provider's answer reads, whole or streamed; the kit does the framing.
impl answer::Draft for Draft {
    type Whole<'a> = Whole<'a>;
    type Event<'a> = Event<'a>;

    fn is_error(body: &Whole<'_>) -> bool {
        body.r#type.as_deref() == Some("error")
    }

    fn whole(body: Whole<'_>) -> Result<Draft, String> {
        let Some(content) = body.content.0 else {
            return Err("the answer has no content list".into());
        };
        let mut draft = Draft::default();
        for (index, block) in content.iter().enumerate() {
            draft.start_block(index as u64, block.as_ref());
        }
        draft.stop = body.stop_reason.0.map(String::from);
        if let Some(usage) = body.usage.as_ref() {
            read_usage(usage, &mut draft.usage);
        }
        Ok(draft)
    }

    fn read(&mut self, name: &str, data: Event<'_>, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
        // The data names its type too; it is trusted over the event line.
        let kind = data.r#type.as_deref().unwrap_or(name);
        let index = data.index.0.unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = data.message.as_ref().and_then(|m| m.usage.as_ref()) {
                    read_usage(usage, &mut self.usage);
                }
            }
            "content_block_start" => {
                if let Some(block) = &data.content_block {
                    self.start_block(index, block.as_ref());
                }
            }
            "content_block_delta" => {
                if let Some(delta) = &data.delta {
                    let empty = Delta::default();
                    self.on_delta(index, delta.as_ref().unwrap_or(&empty), emit);
                }
            }
            "message_delta" => {
                let delta = data.delta.as_ref().and_then(Obj::as_ref);
                if let Some(stop) = delta.and_then(|d| d.stop_reason.as_deref()) {
                    self.stop = Some(stop.to_string());
                }
                if let Some(usage) = data.usage.as_ref() {
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

    fn into_response(self) -> Result<Response, String> {
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
                Part::Thinking { text, signature } => content.push(Block::Thinking(Thinking {
                    text,
                    signature: (!signature.is_empty()).then_some(signature),
                })),
                Part::Text(_) | Part::Other => {}
            }
        }
        Ok(Response {
            stop_reason,
            content,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mur_driver_kit::answer::{Fault, parse_whole};
    use mur_driver_kit::http::{Flow, StreamEnd};
    use mur_driver_kit::sse::SseEvent;

    type Stream = answer::Stream<Draft>;

    fn thinking(text: &str, signature: Option<&str>) -> Block {
        Block::Thinking(Thinking {
            text: text.into(),
            signature: signature.map(str::to_string),
        })
    }

    fn call(id: &str, name: &str, input: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            input: input.into(),
        })
    }

    #[test]
    fn a_whole_answer() {
        let response = parse_whole::<Draft>(
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
            response,
            Response {
                stop_reason: StopReason::ToolCall,
                content: vec![
                    thinking("hm", Some("sig")),
                    Block::Text("Checking.".into()),
                    call("toolu_1", "bash", r#"{"command":"ls"}"#),
                ],
                usage: Usage {
                    input_tokens: Some(10),
                    output_tokens: Some(3),
                    cached_tokens: Some(7),
                    cache_write_tokens: Some(0),
                    thinking_tokens: None,
                },
            }
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
        let err = parse_whole::<Draft>(b"nope").unwrap_err();
        assert!(
            matches!(&err, Fault::Malformed(why) if why.contains("not JSON")),
            "{err:?}"
        );
        assert_eq!(
            parse_whole::<Draft>(b"{}").unwrap_err(),
            Fault::Malformed("the answer has no content list".into())
        );
        let err = parse_whole::<Draft>(
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            err.unwrap_err(),
            Fault::Failed("the server answered with an error: Overloaded".into())
        );
    }

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.into(),
            data: data.into(),
        }
    }

    /// Plays `(event, data)` pairs into a stream; returns the emitted pieces, the last
    /// flow and the stream.
    fn play(events: &[(&str, &str)]) -> (Vec<String>, Result<Flow, Fault>, Stream) {
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
        let response = stream
            .finish(StreamEnd::Done, "https://h/v1/messages")
            .unwrap();
        assert_eq!(
            response,
            Response {
                stop_reason: StopReason::ToolCall,
                content: vec![
                    thinking("Let me", Some("EqQ")),
                    Block::Text("Hi".into()),
                    call("toolu_1", "ls", r#"{"p":1}"#),
                    call("toolu_2", "pwd", "{}"),
                ],
                usage: Usage {
                    input_tokens: Some(25),
                    output_tokens: Some(15),
                    cached_tokens: Some(5),
                    cache_write_tokens: None,
                    thinking_tokens: None,
                },
            }
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
            .unwrap_err()
            .to_string();
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
        assert!(flow.unwrap_err().to_string().contains("Overloaded"));
        let (_, flow, _) = play(&[("message_start", "{bad")]);
        let err = flow.unwrap_err();
        assert!(
            matches!(&err, Fault::Malformed(why) if why.contains("not JSON")),
            "{err:?}"
        );
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
        let err = stream.finish(StreamEnd::Done, "u").unwrap_err();
        assert!(
            matches!(&err, Fault::Failed(why) if why.contains("'ls'")),
            "{err:?}"
        );
        let mut cut = broken;
        cut[2] = (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"}}"#,
        );
        let (_, _, stream) = play(&cut);
        let response = stream.finish(StreamEnd::Done, "u").unwrap();
        assert_eq!(
            (response.stop_reason, response.content),
            (StopReason::MaxTokens, vec![])
        );
    }
}
