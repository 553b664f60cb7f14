//! Streamable HTTP: a hyper server on a loopback port answers each message as the test
//! scripts it, and keeps what it got.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use mur_authority::NetRule;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{Answers, Heard, bounds};
use crate::mcp::connection::{CallHooks, Connection, Transport};
use crate::mcp::protocol::{HANDSHAKE, MODERN};

/// One message the server got.
#[derive(Clone)]
struct Got {
    method: String,
    headers: HeaderMap,
    body: Value,
}

impl Got {
    fn rpc(&self) -> &str {
        self.body["method"].as_str().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A JSON-RPC answer to this message.
    fn result(&self, result: Value) -> Reply {
        Reply::Json(
            200,
            json!({"jsonrpc": "2.0", "id": self.body["id"], "result": result}),
            None,
        )
    }
}

enum Reply {
    /// A status, a JSON body, and the session id to give.
    Json(u16, Value, Option<&'static str>),
    Sse(String),
    /// An event stream of what the test sends, as it sends it.
    Stream(mpsc::Receiver<Bytes>),
    Bare(u16),
}

/// A body that is what a channel carries.
struct Streamed(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|bytes| bytes.map(|b| Ok(Frame::data(b))))
    }
}

type Script = dyn Fn(&Got) -> Reply + Send + Sync;

struct Server {
    url: String,
    port: u16,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Server {
    async fn start(script: impl Fn(&Got) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let kept = got.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (kept, script) = (kept.clone(), script.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (kept, script) = (kept.clone(), script.clone());
                        async move { Ok::<_, Infallible>(answer(request, &kept, &*script).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        Server {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            got,
        }
    }

    fn transport(&self, token: Option<&str>) -> Transport {
        self.transport_allowing(token, self.port)
    }

    fn transport_allowing(&self, token: Option<&str>, port: u16) -> Transport {
        Transport::Http {
            url: self.url.clone(),
            token: token.map(str::to_string),
            allow: vec![NetRule {
                scheme: None,
                host: "127.0.0.1".into(),
                port: Some(port),
            }],
        }
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

async fn answer(
    request: Request<Incoming>,
    kept: &Mutex<Vec<Got>>,
    script: &Script,
) -> Response<BoxBody<Bytes, Infallible>> {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let got = Got {
        method: parts.method.to_string(),
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    kept.lock().unwrap().push(got.clone());
    let builder = Response::builder();
    match script(&got) {
        Reply::Json(status, body, session) => {
            let mut builder = builder
                .status(status)
                .header("content-type", "application/json");
            if let Some(session) = session {
                builder = builder.header("mcp-session-id", session);
            }
            builder.body(Full::new(Bytes::from(body.to_string())).boxed())
        }
        Reply::Sse(events) => builder
            .header("content-type", "text/event-stream")
            .body(Full::new(Bytes::from(events)).boxed()),
        Reply::Stream(events) => builder
            .header("content-type", "text/event-stream")
            .body(Streamed(events).boxed()),
        Reply::Bare(status) => builder.status(status).body(Full::new(Bytes::new()).boxed()),
    }
    .unwrap()
}

fn event(message: Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

/// A server of the handshake era: a bare 400 for the probe, `session` given on
/// initialize.
fn handshake(got: &Got, session: &'static str) -> Option<Reply> {
    Some(match got.rpc() {
        "server/discover" => Reply::Bare(400),
        "initialize" => {
            let result = json!({"protocolVersion": HANDSHAKE, "capabilities": {"tools": {}}, "serverInfo": {"name": "h", "version": "1"}});
            Reply::Json(
                200,
                json!({"jsonrpc": "2.0", "id": got.body["id"], "result": result}),
                Some(session),
            )
        }
        "notifications/initialized" => Reply::Bare(202),
        _ => return None,
    })
}

fn tools() -> Value {
    json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
}

#[tokio::test]
async fn json_answers_and_the_session_id_is_kept() {
    let server = Server::start(|got| {
        if got.method == "DELETE" {
            return Reply::Bare(200);
        }
        handshake(got, "s-1").unwrap_or_else(|| got.result(tools()))
    })
    .await;
    let token = "tok-mcp-unit-1234567";
    let connection = Connection::open("remote", server.transport(Some(token)), bounds())
        .await
        .unwrap();
    assert_eq!(connection.era(), HANDSHAKE);
    let listed = connection.list_tools().await.unwrap();
    assert_eq!(listed[0].name, "echo");
    connection.close().await;
    let got = server.got();
    let rpcs: Vec<&str> = got.iter().map(Got::rpc).collect();
    assert_eq!(
        rpcs,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            ""
        ]
    );
    for got in &got {
        assert_eq!(
            got.header("authorization"),
            Some(format!("Bearer {token}").as_str())
        );
    }
    let (probe, initialize) = (&got[0], &got[1]);
    assert_eq!(probe.header("mcp-protocol-version"), Some(MODERN));
    assert_eq!(probe.header("mcp-method"), Some("server/discover"));
    assert_eq!(initialize.header("mcp-session-id"), None);
    assert_eq!(initialize.header("mcp-protocol-version"), None);
    assert_eq!(
        initialize.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(initialize.header("content-type"), Some("application/json"));
    for later in &got[2..] {
        assert_eq!(later.header("mcp-session-id"), Some("s-1"));
        assert_eq!(later.header("mcp-protocol-version"), Some(HANDSHAKE));
    }
    assert_eq!(got[4].method, "DELETE");
}

#[tokio::test]
async fn an_event_stream_carries_progress_before_the_result() {
    let server = Server::start(|got| match got.rpc() {
        "server/discover" => got.result(json!({
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {}},
            "cacheScope": "public",
        })),
        "tools/call" => {
            let token = &got.body["params"]["_meta"]["progressToken"];
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 50, "total": 100}});
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}});
            let result = json!({"jsonrpc": "2.0", "id": got.body["id"], "result": {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}});
            // A priming event first, as SDK servers send one.
            Reply::Sse(format!("id: 0\ndata:\n\n{}{}: ping\n\n{}", event(progress), event(log), event(result)))
        }
        _ => Reply::Bare(400),
    })
    .await;
    let connection = Connection::open("remote", server.transport(None), bounds())
        .await
        .unwrap();
    assert_eq!(connection.era(), MODERN);
    let heard = Heard::default();
    let hooks = CallHooks {
        person: None,
        progress: Some(&heard),
        traceparent: None,
    };
    let result = connection
        .call_tool("slow", json!({"n": 1}), &hooks)
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "done");
    assert_eq!(heard.all(), [(50.0, Some(100.0), None)]);
    let got = server.got();
    let call = &got[1];
    assert_eq!(call.header("mcp-protocol-version"), Some(MODERN));
    assert_eq!(call.header("mcp-method"), Some("tools/call"));
    assert_eq!(call.header("mcp-name"), Some("slow"));
    assert_eq!(call.header("mcp-session-id"), None);
    assert_eq!(call.header("authorization"), None);
    assert_eq!(
        call.body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        MODERN
    );
}

#[tokio::test]
async fn an_expired_session_is_opened_again_once() {
    let opened = AtomicUsize::new(0);
    let server = Server::start(move |got| match got.rpc() {
        // What the Python SDK's servers say to a request without a session.
        "server/discover" => Reply::Json(
            400,
            json!({"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Bad Request: Missing session ID"}}),
            None,
        ),
        "initialize" => {
            let session = match opened.fetch_add(1, Ordering::SeqCst) {
                0 => "s-1",
                _ => "s-2",
            };
            handshake(got, session).unwrap()
        }
        "tools/list" if got.header("mcp-session-id") == Some("s-1") => Reply::Bare(404),
        _ => handshake(got, "s-x").unwrap_or_else(|| got.result(tools())),
    })
    .await;
    let connection = Connection::open("remote", server.transport(None), bounds())
        .await
        .unwrap();
    let listed = connection.list_tools().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(connection.gone().is_none());
    let got = server.got();
    let seen: Vec<(&str, Option<&str>)> = got
        .iter()
        .map(|g| (g.rpc(), g.header("mcp-session-id")))
        .collect();
    assert_eq!(
        seen,
        [
            ("server/discover", None),
            ("initialize", None),
            ("notifications/initialized", Some("s-1")),
            ("tools/list", Some("s-1")),
            ("initialize", None),
            ("notifications/initialized", Some("s-2")),
            ("tools/list", Some("s-2")),
        ]
    );
}

#[tokio::test]
async fn a_url_outside_the_allow_rules_is_refused() {
    let server = Server::start(|got| got.result(json!({}))).await;
    let elsewhere = server.port.wrapping_add(1);
    let opened = Connection::open(
        "remote",
        server.transport_allowing(None, elsewhere),
        bounds(),
    )
    .await;
    assert_eq!(
        opened.err().map(|e| e.message).as_deref(),
        Some("server 'remote' is not in capabilities.network.allow")
    );
    assert!(server.got().is_empty());
}

#[tokio::test]
async fn a_server_error_is_said_with_its_own_words_on_one_line() {
    let server = Server::start(|got| match got.rpc() {
        "tools/call" => Reply::Json(
            200,
            json!({"jsonrpc": "2.0", "id": got.body["id"], "error": {"code": -32602, "message": "Unknown tool:\nnope"}}),
            None,
        ),
        _ => handshake(got, "s-1").unwrap_or_else(|| got.result(json!({}))),
    })
    .await;
    let connection = Connection::open("remote", server.transport(None), bounds())
        .await
        .unwrap();
    let hooks = CallHooks::default();
    let failed = connection.call_tool("nope", json!({}), &hooks).await;
    assert_eq!(
        failed.unwrap_err().message,
        "server 'remote' refused the call of tool 'nope': Unknown tool:\\u{a}nope (error -32602)"
    );
}

#[tokio::test]
async fn a_question_inside_an_event_stream_is_answered_with_a_post_of_its_own() {
    let (events, stream) = mpsc::channel::<Bytes>(8);
    let stream = Mutex::new(Some(stream));
    let call_id = Mutex::new(Value::Null);
    let server = Server::start(move |got| {
        if let Some(reply) = handshake(got, "s-1") {
            return reply;
        }
        if got.rpc() == "tools/call" {
            *call_id.lock().unwrap() = got.body["id"].clone();
            let schema = json!({"type": "object", "properties": {"repo": {"type": "string"}}});
            let params = json!({"message": "Which repo?", "requestedSchema": schema});
            let ask = json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": params});
            events.try_send(Bytes::from(event(ask))).unwrap();
            return Reply::Stream(stream.lock().unwrap().take().unwrap());
        }
        // The client's answer: the stream goes on to the result.
        assert_eq!(got.body["id"], "e1");
        let id = call_id.lock().unwrap().clone();
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "opened"}]}});
        events.try_send(Bytes::from(event(result))).unwrap();
        Reply::Bare(202)
    })
    .await;
    let connection = Connection::open("remote", server.transport(None), bounds())
        .await
        .unwrap();
    let person = Answers::new("octo/repo");
    let hooks = CallHooks {
        person: Some(&person),
        progress: None,
        traceparent: None,
    };
    let result = connection
        .call_tool("open", json!({}), &hooks)
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "opened");
    assert_eq!(person.asked().len(), 1);
    let got = server.got();
    let answer = got.last().unwrap();
    assert_eq!(
        answer.body,
        json!({"jsonrpc": "2.0", "id": "e1", "result": {"action": "accept", "content": {"repo": "octo/repo"}}})
    );
    assert_eq!(answer.header("mcp-session-id"), Some("s-1"));
    assert_eq!(answer.header("mcp-protocol-version"), Some(HANDSHAKE));
}

#[tokio::test]
async fn a_call_carries_its_traceparent_as_a_header_and_in_meta_in_both_eras() {
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for modern in [true, false] {
        let server = Server::start(move |got| {
            let done =
                json!({"resultType": "complete", "content": [{"type": "text", "text": "traced"}]});
            match (modern, got.rpc()) {
                (true, "server/discover") => got.result(json!({
                    "resultType": "complete",
                    "supportedVersions": [MODERN],
                    "capabilities": {"tools": {}},
                    "cacheScope": "public",
                })),
                (_, "tools/call") => got.result(done),
                _ => handshake(got, "s-1").unwrap_or_else(|| got.result(tools())),
            }
        })
        .await;
        let connection = Connection::open("remote", server.transport(None), bounds())
            .await
            .unwrap();
        assert_eq!(connection.era(), if modern { MODERN } else { HANDSHAKE });
        connection.list_tools().await.unwrap();
        let heard = Heard::default();
        let hooks = CallHooks {
            person: None,
            progress: Some(&heard),
            traceparent: Some(TRACEPARENT),
        };
        let result = connection
            .call_tool("echo", json!({"q": 1}), &hooks)
            .await
            .unwrap();
        assert_eq!(result["content"][0]["text"], "traced");
        let got = server.got();
        let (calls, others): (Vec<&Got>, Vec<&Got>) =
            got.iter().partition(|g| g.rpc() == "tools/call");
        let [call] = calls[..] else {
            panic!("one call was sent: {}", calls.len())
        };
        assert_eq!(call.header("traceparent"), Some(TRACEPARENT));
        let meta = &call.body["params"]["_meta"];
        assert_eq!(meta["traceparent"], TRACEPARENT, "{}", call.body);
        assert!(meta["progressToken"].is_u64(), "{}", call.body);
        let version = &meta["io.modelcontextprotocol/protocolVersion"];
        match modern {
            true => assert_eq!(version, MODERN),
            false => assert!(version.is_null(), "{}", call.body),
        }
        // Only the call is part of the call's trace.
        for other in others {
            assert_eq!(other.header("traceparent"), None, "{}", other.rpc());
            assert!(other.body["params"]["_meta"]["traceparent"].is_null());
        }
    }
}
