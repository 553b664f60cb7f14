//! A provider's answer put together into the typed response, whether it came whole (one
//! JSON body) or streamed (server-sent events). The framing is every provider's — JSON
//! data, an error the server reports instead of the answer, a stream cut short — and
//! lives here; what the JSON means is each provider's [`Draft`], which reads it into
//! borrowed, typed structs of its own (see [`crate::lenient`]).

use crate::http::{Flow, Response, StreamEnd, error_message};
use crate::lenient::Obj;
use crate::setup::Setup;
use crate::sse::SseEvent;
use crate::types;
use crate::{Piece, clip, emit};
use serde::Deserialize;
use std::fmt;

/// What one stream event meant to the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A piece of the answer, or nothing the answer needs: read on.
    More,
    /// The answer is complete.
    End,
    /// The server reported an error instead of the rest of the answer.
    ServerError,
}

/// Why no answer came of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The server, the connection or the model failed, in words.
    Failed(String),
    /// What the server sent could not be read as its API's answer.
    Malformed(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Fault::Failed(why) | Fault::Malformed(why) => f.write_str(why),
        }
    }
}

impl From<String> for Fault {
    /// Failures that are not about reading the answer: the default.
    fn from(why: String) -> Fault {
        Fault::Failed(why)
    }
}

/// One provider's answer as it is put together, in that provider's wire format.
pub trait Draft: Default {
    /// A `data` line that ends the stream without being JSON (`[DONE]`), if the
    /// provider sends one.
    const END_MARKER: Option<&'static str> = None;

    /// A whole answer's body as the provider sends it (a JSON object).
    type Whole<'a>: Deserialize<'a>;

    /// One stream event's data (a JSON object).
    type Event<'a>: Deserialize<'a>;

    /// Whether a whole answer's body is the server's error instead of an answer.
    fn is_error(body: &Self::Whole<'_>) -> bool;

    /// The draft of a whole (non-streamed) answer; an error says what the body lacks.
    fn whole(body: Self::Whole<'_>) -> Result<Self, String>;

    /// Reads one stream event (`name` from its `event:` line, `data` its JSON), passing
    /// text and reasoning on through `emit` as they come.
    fn read(&mut self, name: &str, data: Self::Event<'_>, emit: &mut dyn FnMut(Piece<'_>)) -> Seen;

    /// Whether the model had finished when a stream was cut: then only what follows the
    /// answer (token counts) is missing and the answer stands.
    fn finished(&self) -> bool {
        false
    }

    /// The answer as the host takes it; an error is the model's (a tool call it broke).
    fn into_response(self) -> Result<types::Response, String>;
}

/// Reads a whole (non-streamed) answer.
pub fn parse_whole<D: Draft>(body: &[u8]) -> Result<types::Response, Fault> {
    let quoted = || clip(&String::from_utf8_lossy(body), 300);
    let whole: Obj<D::Whole<'_>> = serde_json::from_slice(body)
        .map_err(|e| Fault::Malformed(format!("the answer is not JSON ({e}): {}", quoted())))?;
    let Some(whole) = whole.0 else {
        return Err(Fault::Malformed(format!(
            "the answer is not a JSON object: {}",
            quoted()
        )));
    };
    if D::is_error(&whole) {
        return Err(Fault::Failed(format!(
            "the server answered with an error: {}",
            error_message(body)
        )));
    }
    let draft = D::whole(whole).map_err(Fault::Malformed)?;
    Ok(draft.into_response()?)
}

/// A streamed answer being put together, one server-sent event at a time.
#[derive(Debug, Default)]
pub struct Stream<D> {
    draft: D,
}

impl<D: Draft> Stream<D> {
    /// Reads one event, passing text and reasoning on through `emit` as they come. An
    /// event whose data is JSON but not an object means nothing to the answer.
    pub fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(Piece<'_>),
    ) -> Result<Flow, Fault> {
        let data = event.data.trim();
        if D::END_MARKER == Some(data) {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let read: Obj<D::Event<'_>> = serde_json::from_str(data).map_err(|e| {
            Fault::Malformed(format!(
                "a stream event is not JSON ({e}): {}",
                clip(data, 300)
            ))
        })?;
        let Some(read) = read.0 else {
            return Ok(Flow::Continue);
        };
        match self.draft.read(&event.event, read, emit) {
            Seen::More => Ok(Flow::Continue),
            Seen::End => Ok(Flow::Done),
            Seen::ServerError => Err(Fault::Failed(format!(
                "the server reported an error mid-answer: {}",
                error_message(data.as_bytes())
            ))),
        }
    }

    /// The answer, once the stream has ended as `end` says. A stream cut off before the
    /// model finished is a failure naming `url`.
    pub fn finish(self, end: StreamEnd, url: &str) -> Result<types::Response, Fault> {
        if let StreamEnd::Cut(cause) = end
            && !self.draft.finished()
        {
            return Err(Fault::Failed(format!(
                "the stream from {url} ended before the answer was complete: {cause}"
            )));
        }
        Ok(self.draft.into_response()?)
    }
}

/// Reads the answer, streamed or whole. A server that ignored `stream: true` (a proxy,
/// say) answers with plain JSON, which is read as a whole answer.
pub fn read<D: Draft>(
    setup: &Setup,
    mut response: Response,
    max_answer: usize,
) -> Result<types::Response, Fault> {
    let is_json = response
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/json"));
    if !setup.config.stream || is_json {
        return parse_whole::<D>(&response.read_to_end(max_answer)?);
    }
    let mut stream = Stream::<D>::default();
    let end = response.read_events(|event| stream.on_event(event, &mut emit))?;
    stream.finish(end, &setup.endpoint.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lenient::{Present, Str};
    use crate::types::{Block, StopReason, Usage};

    /// A provider whose events carry `{"text"}`, `{"end": true}` or `{"error"}`, and
    /// whose answer is finished once it saw `{"stop": true}`.
    #[derive(Debug, Default)]
    struct Toy {
        text: String,
        stopped: bool,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Wire<'a> {
        #[serde(borrow)]
        text: Str<'a>,
        error: Present,
        end: Option<bool>,
        stop: Option<bool>,
    }

    impl Draft for Toy {
        const END_MARKER: Option<&'static str> = Some("[DONE]");
        type Whole<'a> = Wire<'a>;
        type Event<'a> = Wire<'a>;

        fn is_error(body: &Wire<'_>) -> bool {
            body.error.0
        }

        fn whole(body: Wire<'_>) -> Result<Self, String> {
            let text = body.text.0.ok_or("no text")?;
            Ok(Toy {
                text: text.into(),
                stopped: true,
            })
        }

        fn read(&mut self, _name: &str, data: Wire<'_>, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
            if data.error.0 {
                return Seen::ServerError;
            }
            if data.end == Some(true) {
                return Seen::End;
            }
            self.stopped |= data.stop == Some(true);
            if let Some(text) = data.text.as_deref() {
                emit(Piece::Text(text));
                self.text.push_str(text);
            }
            Seen::More
        }

        fn finished(&self) -> bool {
            self.stopped
        }

        fn into_response(self) -> Result<types::Response, String> {
            Ok(types::Response {
                stop_reason: StopReason::EndTurn,
                content: vec![Block::Text(self.text)],
                usage: Usage {
                    input_tokens: None,
                    output_tokens: None,
                    cached_tokens: None,
                    cache_write_tokens: None,
                    thinking_tokens: None,
                },
            })
        }
    }

    fn event(data: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: data.into(),
        }
    }

    fn text(response: Result<types::Response, Fault>) -> String {
        match response.map(|r| r.content) {
            Ok(content) => match content.as_slice() {
                [Block::Text(text)] => text.clone(),
                other => panic!("{other:?}"),
            },
            Err(e) => panic!("{e}"),
        }
    }

    fn malformed(why: Fault) -> String {
        match why {
            Fault::Malformed(why) => why,
            other => panic!("not malformed: {other:?}"),
        }
    }

    #[test]
    fn a_whole_answer_is_json_and_not_an_error() {
        assert_eq!(text(parse_whole::<Toy>(br#"{"text":"hi"}"#)), "hi");
        let err = malformed(parse_whole::<Toy>(b"nope").unwrap_err());
        assert!(err.starts_with("the answer is not JSON ("), "{err}");
        let err = parse_whole::<Toy>(br#"{"error":{"message":"Overloaded"}}"#).unwrap_err();
        assert_eq!(
            err,
            Fault::Failed("the server answered with an error: Overloaded".into())
        );
        assert_eq!(
            parse_whole::<Toy>(b"{}").unwrap_err(),
            Fault::Malformed("no text".into())
        );
        assert_eq!(
            parse_whole::<Toy>(b"[1,2]").unwrap_err(),
            Fault::Malformed("the answer is not a JSON object: [1,2]".into())
        );
    }

    #[test]
    fn a_stream_reads_until_its_end() {
        let mut stream = Stream::<Toy>::default();
        let mut pieces = Vec::new();
        let mut emit = |piece: Piece<'_>| pieces.push(format!("{piece:?}"));
        let flows: Vec<_> = [r#"{"text":"a"}"#, " ", "[3]", r#"{"text":"b"}"#, "[DONE]"]
            .into_iter()
            .map(|data| stream.on_event(&event(data), &mut emit))
            .collect();
        assert_eq!(
            flows,
            [
                Ok(Flow::Continue),
                Ok(Flow::Continue),
                Ok(Flow::Continue),
                Ok(Flow::Continue),
                Ok(Flow::Done)
            ]
        );
        assert_eq!(pieces, ["Text(\"a\")", "Text(\"b\")"]);
        assert_eq!(
            stream.on_event(&event(r#"{"end":true}"#), &mut |_| {}),
            Ok(Flow::Done)
        );
        assert_eq!(text(stream.finish(StreamEnd::Done, "u")), "ab");
    }

    #[test]
    fn errors_inside_a_stream_are_worded_once() {
        let mut stream = Stream::<Toy>::default();
        let err = malformed(stream.on_event(&event("{bad"), &mut |_| {}).unwrap_err());
        assert!(err.starts_with("a stream event is not JSON ("), "{err}");
        assert!(err.ends_with("): {bad"), "{err}");
        let err = stream
            .on_event(&event(r#"{"error":{"message":"Overloaded"}}"#), &mut |_| {})
            .unwrap_err();
        assert_eq!(
            err,
            Fault::Failed("the server reported an error mid-answer: Overloaded".into())
        );
    }

    #[test]
    fn a_cut_stream_fails_unless_the_model_had_finished() {
        let cut = || StreamEnd::Cut("h closed the connection".into());
        let stream = Stream::<Toy>::default();
        assert_eq!(
            stream.finish(cut(), "https://h/x").unwrap_err(),
            Fault::Failed(
                "the stream from https://h/x ended before the answer was complete: h closed the connection"
                    .into()
            )
        );
        let mut stream = Stream::<Toy>::default();
        let read = stream.on_event(&event(r#"{"text":"whole","stop":true}"#), &mut |_| {});
        assert_eq!(read, Ok(Flow::Continue));
        assert_eq!(text(stream.finish(cut(), "https://h/x")), "whole");
    }
}
