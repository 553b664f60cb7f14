//! A provider's answer put together into the host's reply, whether it came whole (one
//! JSON body) or streamed (server-sent events). The framing is every provider's — JSON
//! data, an error the server reports instead of the answer, a stream cut short — and
//! lives here; what the JSON means is each provider's [`Draft`].

use crate::http::{Flow, Response, StreamEnd, error_message};
use crate::neutral::{Reply, clip};
use crate::setup::Setup;
use crate::sse::SseEvent;
use crate::{Piece, emit};
use serde_json::Value;

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

/// One provider's answer as it is put together, in that provider's wire format.
pub trait Draft: Default {
    /// A `data` line that ends the stream without being JSON (`[DONE]`), if the
    /// provider sends one.
    const END_MARKER: Option<&'static str> = None;

    /// Whether a whole answer's body is the server's error instead of an answer.
    fn is_error(body: &Value) -> bool;

    /// The draft of a whole (non-streamed) answer.
    fn whole(body: &Value) -> Result<Self, String>;

    /// Reads one stream event (`name` from its `event:` line, `data` its JSON), passing
    /// text and reasoning on through `emit` as they come.
    fn read(&mut self, name: &str, data: &Value, emit: &mut dyn FnMut(Piece<'_>)) -> Seen;

    /// Whether the model had finished when a stream was cut: then only what follows the
    /// answer (token counts) is missing and the answer stands.
    fn finished(&self) -> bool {
        false
    }

    /// The answer in the host's words.
    fn into_reply(self) -> Result<Reply, String>;
}

/// Reads a whole (non-streamed) answer.
pub fn parse_whole<D: Draft>(body: &[u8]) -> Result<Reply, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let text = String::from_utf8_lossy(body);
        format!("the answer is not JSON ({e}): {}", clip(&text, 300))
    })?;
    if D::is_error(&value) {
        return Err(format!(
            "the server answered with an error: {}",
            error_message(body)
        ));
    }
    D::whole(&value)?.into_reply()
}

/// A streamed answer being put together, one server-sent event at a time.
#[derive(Debug, Default)]
pub struct Stream<D> {
    draft: D,
}

impl<D: Draft> Stream<D> {
    /// Reads one event, passing text and reasoning on through `emit` as they come.
    pub fn on_event(
        &mut self,
        event: &SseEvent,
        emit: &mut dyn FnMut(Piece<'_>),
    ) -> Result<Flow, String> {
        let data = event.data.trim();
        if D::END_MARKER == Some(data) {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let value: Value = serde_json::from_str(data)
            .map_err(|e| format!("a stream event is not JSON ({e}): {}", clip(data, 300)))?;
        match self.draft.read(&event.event, &value, emit) {
            Seen::More => Ok(Flow::Continue),
            Seen::End => Ok(Flow::Done),
            Seen::ServerError => Err(format!(
                "the server reported an error mid-answer: {}",
                error_message(data.as_bytes())
            )),
        }
    }

    /// The answer, once the stream has ended as `end` says. A stream cut off before the
    /// model finished is a failure naming `url`.
    pub fn finish(self, end: StreamEnd, url: &str) -> Result<Reply, String> {
        if let StreamEnd::Cut(cause) = end
            && !self.draft.finished()
        {
            return Err(format!(
                "the stream from {url} ended before the answer was complete: {cause}"
            ));
        }
        self.draft.into_reply()
    }
}

/// Reads the answer, streamed or whole. A server that ignored `stream: true` (a proxy,
/// say) answers with plain JSON, which is read as a whole answer.
pub fn read<D: Draft>(
    setup: &Setup,
    mut response: Response,
    max_answer: usize,
) -> Result<Reply, String> {
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
    use crate::neutral::{Block, StopReason, Usage};

    /// A provider whose events carry `{"text"}`, `{"end": true}` or `{"error"}`, and
    /// whose answer is finished once it saw `{"stop": true}`.
    #[derive(Debug, Default)]
    struct Toy {
        text: String,
        stopped: bool,
    }

    impl Draft for Toy {
        const END_MARKER: Option<&'static str> = Some("[DONE]");

        fn is_error(body: &Value) -> bool {
            body.get("error").is_some()
        }

        fn whole(body: &Value) -> Result<Self, String> {
            let text = body["text"].as_str().ok_or("no text")?;
            Ok(Toy {
                text: text.into(),
                stopped: true,
            })
        }

        fn read(&mut self, _name: &str, data: &Value, emit: &mut dyn FnMut(Piece<'_>)) -> Seen {
            if data.get("error").is_some() {
                return Seen::ServerError;
            }
            if data["end"] == true {
                return Seen::End;
            }
            self.stopped |= data["stop"] == true;
            if let Some(text) = data["text"].as_str() {
                emit(Piece::Text(text));
                self.text.push_str(text);
            }
            Seen::More
        }

        fn finished(&self) -> bool {
            self.stopped
        }

        fn into_reply(self) -> Result<Reply, String> {
            Ok(Reply {
                stop_reason: StopReason::EndTurn,
                content: vec![Block::Text(self.text)],
                usage: Usage::default(),
            })
        }
    }

    fn event(data: &str) -> SseEvent {
        SseEvent {
            event: String::new(),
            data: data.into(),
        }
    }

    fn text(reply: Result<Reply, String>) -> String {
        match reply.map(|r| r.content) {
            Ok(content) => match content.as_slice() {
                [Block::Text(text)] => text.clone(),
                other => panic!("{other:?}"),
            },
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_whole_answer_is_json_and_not_an_error() {
        assert_eq!(text(parse_whole::<Toy>(br#"{"text":"hi"}"#)), "hi");
        let err = parse_whole::<Toy>(b"nope").unwrap_err();
        assert!(err.starts_with("the answer is not JSON ("), "{err}");
        let err = parse_whole::<Toy>(br#"{"error":{"message":"Overloaded"}}"#).unwrap_err();
        assert_eq!(err, "the server answered with an error: Overloaded");
        assert_eq!(parse_whole::<Toy>(b"{}").unwrap_err(), "no text");
    }

    #[test]
    fn a_stream_reads_until_its_end() {
        let mut stream = Stream::<Toy>::default();
        let mut pieces = Vec::new();
        let mut emit = |piece: Piece<'_>| pieces.push(format!("{piece:?}"));
        let flows: Vec<_> = [r#"{"text":"a"}"#, " ", r#"{"text":"b"}"#, "[DONE]"]
            .into_iter()
            .map(|data| stream.on_event(&event(data), &mut emit))
            .collect();
        assert_eq!(
            flows,
            [
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
        let err = stream.on_event(&event("{bad"), &mut |_| {}).unwrap_err();
        assert!(err.starts_with("a stream event is not JSON ("), "{err}");
        assert!(err.ends_with("): {bad"), "{err}");
        let err = stream
            .on_event(&event(r#"{"error":{"message":"Overloaded"}}"#), &mut |_| {})
            .unwrap_err();
        assert_eq!(err, "the server reported an error mid-answer: Overloaded");
    }

    #[test]
    fn a_cut_stream_fails_unless_the_model_had_finished() {
        let cut = || StreamEnd::Cut("h closed the connection".into());
        let stream = Stream::<Toy>::default();
        assert_eq!(
            stream.finish(cut(), "https://h/x").unwrap_err(),
            "the stream from https://h/x ended before the answer was complete: h closed the connection"
        );
        let mut stream = Stream::<Toy>::default();
        let read = stream.on_event(&event(r#"{"text":"whole","stop":true}"#), &mut |_| {});
        assert_eq!(read, Ok(Flow::Continue));
        assert_eq!(text(stream.finish(cut(), "https://h/x")), "whole");
    }
}
