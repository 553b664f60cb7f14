//! The Chat Completions answer, whole or streamed, read back into the typed response.
//! The body and each event are read into borrowed structs whose fields tolerate a
//! server's odd type (see the kit's `lenient`). Plain Rust: no host call happens here,
//! so it is tested natively.

use mur_driver_kit::Piece;
use mur_driver_kit::answer::{self, Seen};
use mur_driver_kit::json::{object_or_text, tool_input};
use mur_driver_kit::lenient::{Count, Lenient, List, Obj, Present, Str, Wanted};
use mur_driver_kit::types::{Block, Response, StopReason, Thinking, ToolCall, Usage};
use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A whole answer, or one stream event (a chunk): the same shape, `message` in the one
/// and `delta` in the other.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Chunk<'a> {
    #[serde(borrow)]
    choices: List<Obj<Choice<'a>>>,
    /// `{"error": …}` from most servers, `{"object": "error", …}` from vLLM.
    error: Present,
    #[serde(borrow)]
    object: Str<'a>,
    usage: Obj<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Choice<'a> {
    #[serde(borrow)]
    message: Obj<Said<'a>>,
    #[serde(borrow)]
    delta: Obj<Said<'a>>,
    #[serde(borrow)]
    finish_reason: Str<'a>,
}

/// A whole answer's `message`, or a stream's `delta`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Said<'a> {
    #[serde(borrow)]
    content: Content<'a>,
    /// A refusal comes instead of content and is shown the same way.
    #[serde(borrow)]
    refusal: Str<'a>,
    /// Reasoning: `reasoning_content` (DeepSeek, vLLM) or `reasoning` (Ollama, OpenRouter).
    #[serde(borrow)]
    reasoning_content: Str<'a>,
    #[serde(borrow)]
    reasoning: Str<'a>,
    #[serde(borrow)]
    tool_calls: List<Obj<WireCall<'a>>>,
}

/// `content` as text: a string, or (from some servers, in a whole answer) a list of text
/// parts, joined.
#[derive(Debug, Default)]
struct Content<'a> {
    text: Option<Cow<'a, str>>,
    /// It came as a list of parts: a stream's delta takes only a string.
    parts: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Part<'a> {
    #[serde(borrow)]
    text: Str<'a>,
}

impl<'de: 'a, 'a> Wanted<'de> for Content<'a> {
    fn string(text: Cow<'de, str>) -> Self {
        Content {
            text: Some(text),
            parts: false,
        }
    }

    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut text = String::new();
        while let Some(part) = seq.next_element::<Obj<Part<'de>>>()? {
            if let Some(piece) = part.0.as_ref().and_then(|p| p.text.as_deref()) {
                text.push_str(piece);
            }
        }
        Ok(Content {
            text: Some(text.into()),
            parts: true,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

/// One `tool_calls` item: a whole call, or a streamed piece of one.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireCall<'a> {
    index: Count,
    #[serde(borrow)]
    id: Str<'a>,
    #[serde(borrow)]
    function: Obj<WireFunction<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunction<'a> {
    #[serde(borrow)]
    name: Str<'a>,
    /// The arguments' text, or (from some servers) the object itself.
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Count,
    completion_tokens: Count,
    prompt_tokens_details: Obj<PromptDetails>,
    completion_tokens_details: Obj<CompletionDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PromptDetails {
    cached_tokens: Count,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CompletionDetails {
    reasoning_tokens: Count,
}

impl Chunk<'_> {
    /// Whether the body or event is an error instead of an answer.
    fn is_error(&self) -> bool {
        self.error.0 || self.object.as_deref() == Some("error")
    }

    /// The first choice, `Some(None)` when it is not an object.
    fn first_choice(&self) -> Option<Option<&Choice<'_>>> {
        self.choices.items().first().map(Obj::as_ref)
    }
}

impl Said<'_> {
    /// The reasoning text, when there is some: the first of the two keys that holds a
    /// string decides.
    fn reasoning(&self) -> Option<&str> {
        self.reasoning_content
            .as_deref()
            .or(self.reasoning.as_deref())
            .filter(|text| !text.is_empty())
    }
}

fn usage(usage: &WireUsage) -> Usage {
    Usage {
        input_tokens: usage.prompt_tokens.0,
        output_tokens: usage.completion_tokens.0,
        cached_tokens: usage
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens.0),
        cache_write_tokens: None,
        thinking_tokens: usage
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens.0),
    }
}

fn no_usage() -> Usage {
    Usage {
        input_tokens: None,
        output_tokens: None,
        cached_tokens: None,
        cache_write_tokens: None,
        thinking_tokens: None,
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
#[derive(Debug)]
pub struct Draft {
    thinking: String,
    text: String,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Usage,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            thinking: String::new(),
            text: String::new(),
            calls: Vec::new(),
            finish: None,
            usage: no_usage(),
        }
    }
}

impl Draft {
    /// Adds one `tool_calls` item: a whole call, or a streamed piece of one. The first
    /// piece of a call carries its id and name; the arguments come in pieces to join.
    fn merge_call(&mut self, piece: &WireCall<'_>) {
        let index = piece.index.0;
        let id = piece.id.or_empty();
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
        let Some(function) = piece.function.as_ref() else {
            return;
        };
        if let Some(name) = function.name.as_deref()
            && call.name.is_empty()
        {
            call.name = name.to_string();
        }
        let arguments = function.arguments.and_then(|raw| {
            let whole = raw.get().starts_with('{');
            Some((whole, object_or_text(raw)?))
        });
        match arguments {
            // Some servers send the arguments as an object rather than its text.
            Some((true, object)) => call.arguments = object.into_owned(),
            Some((false, part)) => call.arguments.push_str(&part),
            None => {}
        }
    }

    fn merge_calls(&mut self, said: &Said<'_>) {
        for call in said.tool_calls.items().iter().filter_map(Obj::as_ref) {
            self.merge_call(call);
        }
    }

    fn on_choice(&mut self, choice: &Choice<'_>, emit: &mut dyn FnMut(Piece<'_>)) {
        if let Some(delta) = choice.delta.as_ref() {
            if let Some(piece) = delta.reasoning() {
                emit(Piece::Thinking(piece));
                self.thinking.push_str(piece);
            }
            let content = delta
                .content
                .text
                .as_deref()
                .filter(|_| !delta.content.parts);
            for piece in [content, delta.refusal.as_deref()].into_iter().flatten() {
                emit(Piece::Text(piece));
                self.text.push_str(piece);
            }
            self.merge_calls(delta);
        }
        if let Some(finish) = choice.finish_reason.as_deref() {
            self.finish = Some(finish.to_string());
        }
    }
}

/// How this provider's answer reads, whole or streamed; the kit does the framing.
impl answer::Draft for Draft {
    const END_MARKER: Option<&'static str> = Some("[DONE]");
    type Whole<'a> = Chunk<'a>;
    type Event<'a> = Chunk<'a>;

    fn is_error(body: &Chunk<'_>) -> bool {
        body.is_error()
    }

    fn whole(body: Chunk<'_>) -> Result<Draft, String> {
        let choice = body.first_choice().ok_or("the answer has no choices")?;
        let message = choice
            .and_then(|choice| choice.message.as_ref())
            .ok_or("the answer's choice has no message")?;
        let mut draft = Draft::default();
        if let Some(reasoning) = message.reasoning() {
            draft.thinking.push_str(reasoning);
        }
        draft.text = message
            .content
            .text
            .as_deref()
            .unwrap_or_default()
            .to_string();
        // A refusal comes instead of content; it is the model's answer all the same.
        if let (true, Some(refusal)) = (draft.text.is_empty(), message.refusal.as_deref()) {
            draft.text = refusal.to_string();
        }
        draft.merge_calls(message);
        draft.finish = choice
            .and_then(|choice| choice.finish_reason.as_deref())
            .map(str::to_string);
        if let Some(reported) = body.usage.as_ref() {
            draft.usage = usage(reported);
        }
        Ok(draft)
    }

    fn read(&mut self, name: &str, data: Chunk<'_>, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
        if data.is_error() || name == "error" {
            return Seen::ServerError;
        }
        if let Some(reported) = data.usage.as_ref() {
            self.usage = usage(reported);
        }
        if let Some(Some(choice)) = data.first_choice() {
            self.on_choice(choice, emit);
        }
        Seen::More
    }

    /// A stream cut off after the model finished (before `[DONE]`, say) only lacks
    /// token counts.
    fn finished(&self) -> bool {
        self.finish.is_some()
    }

    fn into_response(self) -> Result<Response, String> {
        let stop_reason = match self.finish.as_deref() {
            Some("length") => StopReason::MaxTokens,
            // Some servers say `stop` even when the model called tools; the calls decide.
            _ if !self.calls.is_empty() => StopReason::ToolCall,
            _ => StopReason::EndTurn,
        };
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(Block::Thinking(Thinking {
                text: self.thinking,
                signature: None,
            }));
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
            content.push(Block::ToolCall(ToolCall {
                id,
                name: call.name,
                input,
            }));
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

    fn text(text: &str) -> Block {
        Block::Text(text.into())
    }

    fn thinking(text: &str) -> Block {
        Block::Thinking(Thinking {
            text: text.into(),
            signature: None,
        })
    }

    fn call(id: &str, name: &str, input: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            input: input.into(),
        })
    }

    fn counts(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            ..no_usage()
        }
    }

    fn failure(fault: Fault) -> String {
        fault.to_string()
    }

    #[test]
    fn a_whole_answer() {
        let response = parse_whole::<Draft>(
            br#"{"choices":[{"message":{"content":null,"reasoning_content":"think",
                 "tool_calls":[{"id":"c9","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}}]},
                 "finish_reason":"tool_calls"}],
                 "usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},
                          "completion_tokens_details":{"reasoning_tokens":2}}}"#,
        )
        .unwrap();
        assert_eq!(
            response,
            Response {
                stop_reason: StopReason::ToolCall,
                content: vec![thinking("think"), call("c9", "ls", r#"{"p":1}"#)],
                usage: Usage {
                    cached_tokens: Some(4),
                    thinking_tokens: Some(2),
                    ..counts(10, 5)
                },
            }
        );
    }

    #[test]
    fn odd_fields_are_read_as_absent() {
        let response = parse_whole::<Draft>(
            br#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"text":"b"},7],
                 "reasoning_content":5,"reasoning":"","tool_calls":null},"finish_reason":1}],
                 "usage":{"prompt_tokens":-1,"completion_tokens":"3"},"error":null}"#,
        )
        .unwrap();
        assert_eq!(
            response,
            Response {
                stop_reason: StopReason::EndTurn,
                content: vec![text("ab")],
                usage: no_usage(),
            }
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
        let err = parse_whole::<Draft>(bad_args).unwrap_err();
        assert!(
            matches!(&err, Fault::Failed(why) if why.contains("'f'")),
            "{err:?}"
        );
        let err = parse_whole::<Draft>(b"<html>").unwrap_err();
        assert!(
            matches!(&err, Fault::Malformed(why) if why.contains("not JSON")),
            "{err:?}"
        );
        assert_eq!(
            parse_whole::<Draft>(br#"{"choices":[]}"#).unwrap_err(),
            Fault::Malformed("the answer has no choices".into())
        );
        assert_eq!(
            parse_whole::<Draft>(br#"{"choices":[3]}"#).unwrap_err(),
            Fault::Malformed("the answer's choice has no message".into())
        );
        assert!(parse_whole::<Draft>(br#"[1,2]"#).is_err());
        let error = failure(parse_whole::<Draft>(br#"{"error":{"message":"quota"}}"#).unwrap_err());
        assert!(error.contains("quota"), "{error}");
        let vllm = br#"{"object":"error","message":"too long","type":"BadRequestError"}"#;
        assert!(failure(parse_whole::<Draft>(vllm).unwrap_err()).contains("too long"));
        let refusal = br#"{"choices":[{"message":{"content":null,"refusal":"I can't."},"finish_reason":"stop"}]}"#;
        assert_eq!(
            parse_whole::<Draft>(refusal).unwrap().content,
            vec![text("I can't.")]
        );
        // Cut off by max_tokens: the half call is dropped.
        let cut = br#"{"choices":[{"message":{"content":"a","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"x"}}]},"finish_reason":"length"}]}"#;
        assert_eq!(parse_whole::<Draft>(cut).unwrap().content, vec![text("a")]);
    }

    #[test]
    fn arguments_sent_as_an_object_are_taken_as_they_are() {
        let body = br#"{"choices":[{"message":{"tool_calls":[{"id":"1","function":{"name":"f","arguments":{"a": [1, 2]}}}]},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(
            parse_whole::<Draft>(body).unwrap().content,
            vec![call("1", "f", r#"{"a":[1,2]}"#)]
        );
    }

    fn event(data: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: data.into(),
        }
    }

    /// Plays `events` into a stream; returns the emitted pieces and the response.
    fn play(events: &[&str], end: Option<&str>) -> (Vec<String>, Result<Response, Fault>) {
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
        let response = stream.finish(end, "http://h/v1/chat/completions");
        (pieces, response)
    }

    #[test]
    fn a_streamed_answer_with_tool_calls() {
        let (pieces, response) = play(
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
            response.unwrap(),
            Response {
                stop_reason: StopReason::ToolCall,
                content: vec![
                    thinking("hm"),
                    text("Hello"),
                    call("a", "f", r#"{"x":1}"#),
                    call("b", "g", "{}"),
                ],
                usage: counts(3, 4),
            }
        );
    }

    #[test]
    fn a_stream_cut_before_the_finish_is_an_error() {
        let (_, response) = play(
            &[r#"{"choices":[{"delta":{"content":"Hel"}}]}"#],
            Some("closed"),
        );
        let err = failure(response.unwrap_err());
        assert!(
            err.contains("ended before the answer was complete: closed"),
            "{err}"
        );
        // After the finish, only the usage is missing: accepted.
        let (_, response) = play(
            &[r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#],
            Some("closed"),
        );
        assert_eq!(response.unwrap().content, vec![text("Hi")]);
    }

    #[test]
    fn errors_inside_a_stream() {
        let (_, response) = play(&[r#"{"error":{"message":"overloaded"}}"#], None);
        assert!(failure(response.unwrap_err()).contains("overloaded"));
        let (_, response) = play(&["{not json"], None);
        let err = response.unwrap_err();
        assert!(
            matches!(&err, Fault::Malformed(why) if why.contains("not JSON")),
            "{err:?}"
        );
    }

    #[test]
    fn tool_calls_without_index_or_id() {
        let (_, response) = play(
            &[
                r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
                r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":2}"}}]}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ],
            None,
        );
        assert_eq!(
            response.unwrap().content,
            vec![call("call_1", "f", r#"{"a":2}"#)]
        );
    }
}
