//! A loopback model provider for `mur component check`: hyper (HTTP/1.1) on its own
//! thread and runtime, bound to 127.0.0.1:0, so a driver under check has a real server
//! to talk to without leaving the machine.
//!
//! The check runs outside this repository, so it cannot borrow the test suite's mock;
//! this one is smaller and speaks by meaning rather than by bytes: each scripted
//! [`Turn`] ("answer this text", "call this tool", "fail with 400") is rendered in the
//! wire the request asked for. The request's path picks the wire (`…/chat/completions`
//! is OpenAI's Chat Completions, `…/messages` is Anthropic's Messages) and its body's
//! `stream: true` picks server-sent events over one JSON body. That way one script
//! checks a driver of either kind, and the first request tells which one it speaks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::oneshot;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// A pause between the events of a streamed answer, so each arrives as its own read
/// and a driver that only handles whole bodies is caught.
const TRICKLE: Duration = Duration::from_millis(5);

/// The provider wire a request speaks, told by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    /// The wire whose API path ends `path` (query ignored); `None` for any other path.
    pub fn of_path(path: &str) -> Option<Wire> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Wire::OpenAi)
        } else if path.ends_with("/messages") {
            Some(Wire::Anthropic)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Wire::OpenAi => "OpenAI chat-completions",
            Wire::Anthropic => "Anthropic messages",
        }
    }
}

/// One scripted answer, rendered in whichever wire the request speaks.
#[derive(Clone, Debug)]
pub enum Turn {
    /// Text, one streamed delta per piece, ending the turn.
    Text(Vec<String>),
    /// Text (maybe none) then one tool call; the stop reason is the tool call's.
    ToolCall {
        id: String,
        name: String,
        /// The arguments as a JSON text, streamed in two pieces.
        arguments: String,
    },
    /// Text cut off by the token limit.
    MaxTokens(Vec<String>),
    /// An HTTP error with the provider's error body.
    Error { status: u16, message: String },
}

impl Turn {
    pub fn text(pieces: &[&str]) -> Turn {
        Turn::Text(pieces.iter().map(|p| p.to_string()).collect())
    }

    pub fn error(status: u16, message: &str) -> Turn {
        Turn::Error {
            status,
            message: message.to_string(),
        }
    }
}

/// One request as the provider received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Path and query, e.g. `/v1/chat/completions`.
    pub path: String,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn wire(&self) -> Option<Wire> {
        Wire::of_path(&self.path)
    }

    /// The body as JSON, `Null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// What decides the next answer.
enum Script {
    /// These turns, in order.
    Turns(VecDeque<Turn>),
    /// A model that reacts to what it is sent (the request's JSON body).
    Reacting(Box<dyn FnMut(&Value) -> Turn + Send>),
}

impl Script {
    fn next(&mut self, request: &Value) -> Turn {
        match self {
            Script::Turns(turns) => turns.pop_front().unwrap_or_else(|| {
                Turn::error(
                    500,
                    "check provider: no scripted answer left for this request",
                )
            }),
            Script::Reacting(answer) => answer(request),
        }
    }
}

struct State {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
}

/// The running provider. Dropping it stops the server and joins its thread.
pub struct Provider {
    port: u16,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Provider {
    /// A provider answering `turns` in order; with none left it answers 500 saying so.
    pub fn start(turns: Vec<Turn>) -> std::io::Result<Provider> {
        Provider::serving(Script::Turns(turns.into()))
    }

    /// A provider that behaves like a model: `answer` picks each turn from the request
    /// (the tools it offers, the messages so far).
    pub fn reacting(
        answer: impl FnMut(&Value) -> Turn + Send + 'static,
    ) -> std::io::Result<Provider> {
        Provider::serving(Script::Reacting(Box::new(answer)))
    }

    /// A model that answers `text` to every request: for scenarios that read what a
    /// capsule sends its model.
    pub fn answering(text: &str) -> std::io::Result<Provider> {
        let turn = Turn::text(&[text]);
        Provider::reacting(move |_| turn.clone())
    }

    fn serving(script: Script) -> std::io::Result<Provider> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
        });
        let (tx, rx) = oneshot::channel();
        let served = state.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("check-provider-{port}"))
            .spawn(move || {
                runtime.block_on(serve(listener, served, rx));
                runtime.shutdown_background();
            })?;
        Ok(Provider {
            port,
            state,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`, as an allow-list entry names it.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.requests).clone()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn serve(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((socket, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&state, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

async fn answer(state: &State, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(_) => Vec::new(),
    };
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
        body,
    };
    lock(&state.requests).push(recorded.clone());
    let Some(wire) = recorded.wire() else {
        let message = format!("check provider: no provider API at {}", recorded.path);
        return whole(404, error_body(Wire::OpenAi, 404, &message));
    };
    let request = recorded.json();
    let turn = lock(&state.script).next(&request);
    render(wire, request["stream"] == true, turn)
}

fn render(wire: Wire, stream: bool, turn: Turn) -> Response<Body> {
    match (turn, stream) {
        (Turn::Error { status, message }, _) => whole(status, error_body(wire, status, &message)),
        (turn, false) => whole(200, json_answer(wire, &turn)),
        (turn, true) => events(sse_answer(wire, &turn)),
    }
}

/// A tool call's id, name and arguments.
type Call<'a> = (&'a str, &'a str, &'a str);

/// The text and tool call of a turn, and its stop reason in `wire`'s words.
fn parts(wire: Wire, turn: &Turn) -> (Vec<String>, Option<Call<'_>>, &'static str) {
    let reason = |openai, anthropic| match wire {
        Wire::OpenAi => openai,
        Wire::Anthropic => anthropic,
    };
    match turn {
        Turn::Text(pieces) => (pieces.clone(), None, reason("stop", "end_turn")),
        Turn::MaxTokens(pieces) => (pieces.clone(), None, reason("length", "max_tokens")),
        Turn::ToolCall {
            id,
            name,
            arguments,
        } => (
            Vec::new(),
            Some((id.as_str(), name.as_str(), arguments.as_str())),
            reason("tool_calls", "tool_use"),
        ),
        Turn::Error { .. } => (Vec::new(), None, reason("stop", "end_turn")),
    }
}

const MODEL: &str = "check-model";
const USAGE: (u64, u64) = (12, 5);

fn json_answer(wire: Wire, turn: &Turn) -> Value {
    let (pieces, call, reason) = parts(wire, turn);
    let text = pieces.concat();
    match wire {
        Wire::OpenAi => {
            let mut message = json!({"role": "assistant", "content": text});
            if let Some((id, name, arguments)) = call {
                message["content"] = Value::Null;
                message["tool_calls"] = json!([{"id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments}}]);
            }
            json!({
                "id": "chatcmpl-check", "object": "chat.completion", "created": 1_718_000_000u64,
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": {"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1,
                          "total_tokens": USAGE.0 + USAGE.1}
            })
        }
        Wire::Anthropic => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            if let Some((id, name, arguments)) = call {
                let input: Value = serde_json::from_str(arguments).unwrap_or(json!({}));
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            json!({
                "id": "msg_check", "type": "message", "role": "assistant", "model": MODEL,
                "content": content, "stop_reason": reason, "stop_sequence": null,
                "usage": {"input_tokens": USAGE.0, "output_tokens": USAGE.1}
            })
        }
    }
}

/// The events of a streamed answer, each a whole `event:`/`data:` record.
fn sse_answer(wire: Wire, turn: &Turn) -> Vec<String> {
    let (pieces, call, reason) = parts(wire, turn);
    match wire {
        Wire::OpenAi => openai_events(&pieces, call, reason),
        Wire::Anthropic => anthropic_events(&pieces, call, reason),
    }
}

fn openai_events(pieces: &[String], call: Option<Call<'_>>, reason: &str) -> Vec<String> {
    let chunk = |delta: Value, finish: Option<&str>| {
        let data = json!({
            "id": "chatcmpl-check", "object": "chat.completion.chunk",
            "created": 1_718_000_000u64, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        });
        format!("data: {data}\n\n")
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    out.extend(pieces.iter().map(|p| chunk(json!({"content": p}), None)));
    if let Some((id, name, arguments)) = call {
        out.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        for piece in halves(arguments) {
            out.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    out.push(chunk(json!({}), Some(reason)));
    let usage = json!({
        "id": "chatcmpl-check", "object": "chat.completion.chunk",
        "created": 1_718_000_000u64, "model": MODEL, "choices": [],
        "usage": {"prompt_tokens": USAGE.0, "completion_tokens": USAGE.1,
                  "total_tokens": USAGE.0 + USAGE.1}
    });
    out.push(format!("data: {usage}\n\n"));
    out.push("data: [DONE]\n\n".to_string());
    out
}

fn anthropic_events(pieces: &[String], call: Option<Call<'_>>, reason: &str) -> Vec<String> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_check", "type": "message", "role": "assistant", "model": MODEL,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": USAGE.0, "output_tokens": 1}}}),
    )];
    let mut index = 0u64;
    let mut block = |out: &mut Vec<String>, start: Value, deltas: Vec<Value>| {
        out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            out.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    };
    if !pieces.is_empty() {
        let deltas = pieces
            .iter()
            .map(|p| json!({"type": "text_delta", "text": p}))
            .collect();
        block(&mut out, json!({"type": "text", "text": ""}), deltas);
    }
    if let Some((id, name, arguments)) = call {
        let deltas = halves(arguments)
            .into_iter()
            .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
            .collect();
        let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
        block(&mut out, start, deltas);
    }
    out.push(event(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": reason, "stop_sequence": null},
               "usage": {"output_tokens": USAGE.1}}),
    ));
    out.push(event("message_stop", json!({"type": "message_stop"})));
    out
}

/// A JSON text in two pieces cut at a character boundary, as a provider streams one.
fn halves(text: &str) -> Vec<String> {
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let (a, b) = text.split_at(cut);
    [a, b]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

fn error_body(wire: Wire, status: u16, message: &str) -> Value {
    match wire {
        Wire::OpenAi => {
            let kind = if status >= 500 {
                "server_error"
            } else {
                "invalid_request_error"
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
        Wire::Anthropic => {
            let kind = if status >= 500 {
                "api_error"
            } else {
                "invalid_request_error"
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

fn whole(status: u16, body: Value) -> Response<Body> {
    let body = Full::new(Bytes::from(body.to_string()))
        .map_err(|never| match never {})
        .boxed();
    respond(status, "application/json", body)
}

/// An event stream written one event at a time, [`TRICKLE`] apart.
fn events(events: Vec<String>) -> Response<Body> {
    let frames =
        futures_util::stream::unfold((events.into_iter(), true), |(mut rest, first)| async move {
            let next = rest.next()?;
            if !first {
                tokio::time::sleep(TRICKLE).await;
            }
            let frame: Result<Frame<Bytes>, BoxError> = Ok(Frame::data(Bytes::from(next)));
            Some((frame, (rest, false)))
        });
    respond(200, "text/event-stream", StreamBody::new(frames).boxed())
}

fn respond(status: u16, content_type: &str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_tell_the_wire() {
        assert_eq!(Wire::of_path("/v1/chat/completions"), Some(Wire::OpenAi));
        assert_eq!(Wire::of_path("/v1/messages?beta=1"), Some(Wire::Anthropic));
        assert_eq!(Wire::of_path("/v1/completions"), None);
    }

    #[test]
    fn a_streamed_tool_call_carries_its_arguments_whole() {
        let turn = Turn::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"echo é"}"#.into(),
        };
        let openai = sse_answer(Wire::OpenAi, &turn).concat();
        assert!(
            openai.contains(r#""finish_reason":"tool_calls""#),
            "{openai}"
        );
        assert!(openai.ends_with("data: [DONE]\n\n"));
        let anthropic = sse_answer(Wire::Anthropic, &turn).concat();
        assert!(
            anthropic.contains(r#""stop_reason":"tool_use""#),
            "{anthropic}"
        );
        let joined: String = anthropic
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| v["delta"]["partial_json"].as_str().map(str::to_string))
            .collect();
        assert_eq!(joined, r#"{"command":"echo é"}"#);
    }
}
