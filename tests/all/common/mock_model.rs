//! A loopback model server for the driver tests: hyper (HTTP/1.1) on its own thread and
//! runtime, bound to 127.0.0.1:0. It records every request it is sent and answers each
//! with the next scripted reply, in order; with none left it answers 500 with a body that
//! says so, so a test that under-scripts fails loudly.
//!
//! Builders for realistic provider payloads live in [`openai`] and [`anthropic`]: the
//! non-streaming bodies, and the server-sent events of a streamed answer (one event per
//! piece, or cut anywhere with [`split_awkwardly`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Path and query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics naming the request when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} {}: the request body is not JSON ({e}): {:?}",
                self.method,
                self.path,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// How the mock answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A whole body at once (with `content-length`).
    Body {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A chunked body written piece by piece, `delay` before each piece after the first.
    /// With `drop`, the connection is closed abruptly after the last piece, with no end
    /// of body: the client sees the stream cut off.
    Stream {
        status: u16,
        headers: Vec<(String, String)>,
        pieces: Vec<Vec<u8>>,
        delay: Duration,
        drop: bool,
    },
}

impl Reply {
    /// A JSON body with this status.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Body {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// An event stream (`200`, `text/event-stream`) written as these pieces.
    pub fn sse(pieces: Vec<Vec<u8>>) -> Reply {
        Reply::Stream {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            pieces,
            delay: Duration::ZERO,
            drop: false,
        }
    }

    /// An event stream whose connection is dropped after these pieces.
    pub fn sse_then_drop(pieces: Vec<Vec<u8>>) -> Reply {
        match Reply::sse(pieces) {
            Reply::Stream {
                status,
                headers,
                pieces,
                delay,
                ..
            } => Reply::Stream {
                status,
                headers,
                pieces,
                delay,
                drop: true,
            },
            body => body,
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Body { headers, .. } | Reply::Stream { headers, .. } => {
                headers.push((name.to_ascii_lowercase(), value.to_string()))
            }
        }
        self
    }

    /// A pause before every piece after the first (streams only).
    pub fn with_delay(mut self, pause: Duration) -> Reply {
        if let Reply::Stream { delay, .. } = &mut self {
            *delay = pause;
        }
        self
    }
}

struct State {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The running mock. Dropping it stops the server.
pub struct MockModel {
    port: u16,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockModel {
    pub fn start() -> MockModel {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("mock model binds");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("mock model address").port();
        let state = Arc::new(State {
            replies: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
        });
        let (tx, rx) = oneshot::channel();
        let served = state.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mock-model-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("mock model runtime");
                rt.block_on(serve(listener, served, rx));
                rt.shutdown_background();
            })
            .expect("mock model thread");
        MockModel {
            port,
            state,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// A mock with these replies queued.
    pub fn with(replies: Vec<Reply>) -> MockModel {
        let mock = MockModel::start();
        for reply in replies {
            mock.push(reply);
        }
        mock
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`, as an allow-list entry names it.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.state.replies).push_back(reply);
        self
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.requests).clone()
    }

    /// Request `i` (from 0); panics listing what was received when there is no such one.
    pub fn request(&self, i: usize) -> Recorded {
        let all = self.requests();
        all.get(i).cloned().unwrap_or_else(|| {
            panic!(
                "the mock model received {} request(s), not {}: {:?}",
                all.len(),
                i + 1,
                all.iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect::<Vec<_>>()
            )
        })
    }

    /// Replies still queued (a test that scripted more than was asked for sees them).
    pub fn unused(&self) -> usize {
        lock(&self.state.replies).len()
    }
}

impl Drop for MockModel {
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
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((socket, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = socket.set_nodelay(true);
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
        Err(e) => format!("<body could not be read: {e}>").into_bytes(),
    };
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.to_string()),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    let n = {
        let mut requests = lock(&state.requests);
        requests.push(recorded.clone());
        requests.len()
    };
    // A harness CLI checks that the server answers with a HEAD before it calls it:
    // that takes no scripted reply.
    if recorded.method == "HEAD" {
        return build(Reply::json(200, json!({})));
    }
    let reply = lock(&state.replies).pop_front().unwrap_or_else(|| {
        Reply::json(
            500,
            json!({"error": {
                "message": format!(
                    "mock model: no scripted reply left for request {n} ({} {})",
                    recorded.method, recorded.path
                ),
                "type": "mock_exhausted"
            }}),
        )
    });
    build(reply)
}

fn build(reply: Reply) -> Response<Body> {
    let (status, headers, body) = match reply {
        Reply::Body {
            status,
            headers,
            body,
        } => {
            let body = Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed();
            (status, headers, body)
        }
        Reply::Stream {
            status,
            headers,
            pieces,
            delay,
            drop,
        } => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(16);
            tokio::spawn(async move {
                for (i, piece) in pieces.into_iter().enumerate() {
                    if i > 0 && !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if tx.send(Ok(Frame::data(Bytes::from(piece)))).await.is_err() {
                        return;
                    }
                }
                if drop {
                    // Let hyper flush what was written, then fail the body: hyper closes
                    // the connection without the chunked body's terminator.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = tx.send(Err("mock model: connection dropped".into())).await;
                }
            });
            (status, headers, StreamBody::new(Pieces(rx)).boxed())
        }
    };
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(name, value);
    }
    response.body(body).expect("a valid mock response")
}

/// A channel of body frames as the stream a `StreamBody` reads.
struct Pieces(mpsc::Receiver<Result<Frame<Bytes>, BoxError>>);

impl futures_core::Stream for Pieces {
    type Item = Result<Frame<Bytes>, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

// ---------------------------------------------------------------------------------
// Cutting a byte stream where a careless reader breaks.

/// Cuts `bytes` into pieces at awkward places: inside every multi-byte UTF-8 character,
/// between every `\r` and `\n`, between the two newlines that end an event, inside
/// every `data:` and `event:` field name, and every 7 bytes besides. Joined again, the
/// pieces are `bytes`.
pub fn split_awkwardly(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut cuts = Vec::new();
    for i in 1..bytes.len() {
        let (before, at) = (bytes[i - 1], bytes[i]);
        let mid_char = at & 0xC0 == 0x80 && before & 0xC0 == 0xC0;
        let crlf = before == b'\r' && at == b'\n';
        let blank = before == b'\n' && (at == b'\n' || at == b'\r');
        let field = bytes[..i].ends_with(b"da") || bytes[..i].ends_with(b"eve");
        if mid_char || crlf || blank || field || i % 7 == 0 {
            cuts.push(i);
        }
    }
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(bytes[start..cut].to_vec());
        start = cut;
    }
    pieces.push(bytes[start..].to_vec());
    pieces.retain(|p| !p.is_empty());
    pieces
}

/// Every `\n` of an event stream as `\r\n` (a line ending the SSE format allows).
pub fn crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 8);
    for &b in bytes {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

// ---------------------------------------------------------------------------------
// OpenAI Chat Completions payloads.

pub mod openai {
    use serde_json::{Value, json};

    pub const ID: &str = "chatcmpl-9mock0000000000000000000001";
    pub const CREATED: u64 = 1_718_000_000;
    pub const FINGERPRINT: &str = "fp_mock0001";

    /// One tool call as the model returns it: `arguments` is a JSON text.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
    }

    /// A non-streaming `chat.completion`.
    pub fn completion(
        text: Option<&str>,
        tool_calls: &[Value],
        finish_reason: &str,
        usage: (u64, u64),
    ) -> Value {
        let mut message = json!({"role": "assistant", "content": text, "refusal": null});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls.to_vec());
        }
        json!({
            "id": ID,
            "object": "chat.completion",
            "created": CREATED,
            "model": "test-model",
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason
            }],
            "usage": {
                "prompt_tokens": usage.0,
                "completion_tokens": usage.1,
                "total_tokens": usage.0 + usage.1,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}
            },
            "system_fingerprint": FINGERPRINT
        })
    }

    /// An error body as the API writes one.
    pub fn error(message: &str, kind: &str, code: Option<&str>) -> Value {
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
    }

    /// The events of a streamed completion (`stream_options.include_usage` on): every
    /// chunk carries `"usage": null` except the last, which has no choices.
    #[derive(Default)]
    pub struct Stream {
        events: Vec<String>,
    }

    impl Stream {
        /// Starts with the usual first chunk: the role and empty content.
        pub fn new() -> Stream {
            let mut s = Stream::default();
            s.chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                None,
            );
            s
        }

        fn chunk(&mut self, delta: Value, finish_reason: Option<&str>) -> &mut Self {
            let data = json!({
                "id": ID,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": "test-model",
                "system_fingerprint": FINGERPRINT,
                "choices": [{
                    "index": 0,
                    "delta": delta,
                    "logprobs": null,
                    "finish_reason": finish_reason
                }],
                "usage": null
            });
            self.events.push(format!("data: {data}\n\n"));
            self
        }

        pub fn text(mut self, piece: &str) -> Stream {
            self.chunk(json!({"content": piece}), None);
            self
        }

        /// The first chunk of tool call `index`: its id and name, empty arguments.
        pub fn tool_call(mut self, index: u64, id: &str, name: &str) -> Stream {
            self.chunk(
                json!({"tool_calls": [{
                    "index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}
                }]}),
                None,
            );
            self
        }

        /// A piece of tool call `index`'s arguments.
        pub fn tool_args(mut self, index: u64, piece: &str) -> Stream {
            self.chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                None,
            );
            self
        }

        /// The chunk with the finish reason and an empty delta.
        pub fn finish(mut self, reason: &str) -> Stream {
            self.chunk(json!({}), Some(reason));
            self
        }

        /// The usage chunk: no choices.
        pub fn usage(mut self, prompt: u64, completion: u64) -> Stream {
            let data = json!({
                "id": ID,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": "test-model",
                "system_fingerprint": FINGERPRINT,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}
                }
            });
            self.events.push(format!("data: {data}\n\n"));
            self
        }

        pub fn done(mut self) -> Stream {
            self.events.push("data: [DONE]\n\n".to_string());
            self
        }

        /// One piece per event.
        pub fn events(&self) -> Vec<Vec<u8>> {
            self.events.iter().map(|e| e.clone().into_bytes()).collect()
        }

        /// The whole stream.
        pub fn bytes(&self) -> Vec<u8> {
            self.events.concat().into_bytes()
        }
    }
}

// ---------------------------------------------------------------------------------
// Anthropic Messages payloads.

#[path = "mock_anthropic.rs"]
pub mod anthropic;

// ---------------------------------------------------------------------------------
// Reading what the model was sent.

/// The `messages` of a request body, which must have them.
pub fn messages(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("the request has no messages list: {body}"))
        .clone()
}

/// The text of a message's `content`: a string, or the `text` of its blocks.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.clone()),
                _ if b["type"] == "text" || b.get("type").is_none() => {
                    b["text"].as_str().map(str::to_string)
                }
                _ => None,
            })
            .collect(),
        _ => String::new(),
    }
}

/// `(role, text)` of each message of a request body, in order.
pub fn roles_texts(body: &Value) -> Vec<(String, String)> {
    messages(body)
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                text_of(&m["content"]),
            )
        })
        .collect()
}

/// Where the message of `role` saying exactly `text` stands in `sent`; it must be there.
fn position(sent: &[(String, String)], role: &str, text: &str) -> usize {
    sent.iter()
        .position(|(r, t)| r == role && t == text)
        .unwrap_or_else(|| panic!("no {role} message {text:?} in {sent:?}"))
}

/// A threaded conversation carried: the messages `sent` hold an earlier task's
/// `question` and `answer`, in that order, before `next`, which comes last.
pub fn assert_carried(sent: &[(String, String)], question: &str, answer: &str, next: &str) {
    let (q1, a1, q2) = (
        position(sent, "user", question),
        position(sent, "assistant", answer),
        position(sent, "user", next),
    );
    assert!(q1 < a1 && a1 < q2, "{sent:?}");
    assert_eq!(q2, sent.len() - 1, "the new task comes last: {sent:?}");
}
