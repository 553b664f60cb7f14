//! The bridge: the capsule's tools offered to a harness as an MCP server (streamable
//! HTTP, JSON answers, no event stream) on a loopback port. Every request must carry
//! the session's bearer token; the harness reaches the port only through the session's
//! proxy, which lets it through as the one destination beyond the allow-list.
//!
//! The bridge runs no tool itself: a `tools/call` is handed to the task's run (see
//! [`Bridge::attach`]), which puts it through the same path as a model's call in an
//! HTTP turn (bounds, policy hooks, frames, trace lines) and sends the answer back.
//! With no run attached, a call is refused.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The name the harness registers the bridge under: its tools become `mcp__mur__<tool>`.
pub const SERVER_NAME: &str = "mur";
/// The variable that carries the bearer token to the harness.
pub const TOKEN_ENV: &str = "MUR_BRIDGE_TOKEN";
/// The largest request body read: a tool call's input is bounded far below this by the
/// capsule's own limits, which the call's run applies.
const MAX_BODY: usize = 4 * 1024 * 1024;
/// The protocol versions the handshake answers with, oldest first.
const VERSIONS: &[&str] = &["2025-03-26", "2025-06-18", "2025-11-25"];

/// One tool call a harness made, waiting for its run to answer it.
pub struct Call {
    pub name: String,
    /// The arguments, as JSON text.
    pub input: String,
    pub answer: oneshot::Sender<Answer>,
}

/// A call's result, as the harness is told it.
pub struct Answer {
    pub text: String,
    pub is_error: bool,
}

/// A tool as `tools/list` offers it.
#[derive(Clone)]
pub struct Offered {
    pub name: String,
    pub description: String,
    /// JSON Schema, as JSON text.
    pub input_schema: String,
}

struct Shared {
    token: String,
    /// What `tools/list` offers: set again as each run starts, so a server's tools
    /// listed since launch are offered too.
    tools: Mutex<Arc<Vec<Offered>>>,
    /// The run calls go to, while one is attached.
    run: Mutex<Option<mpsc::Sender<Call>>>,
}

/// The listening bridge; dropping it stops the server.
pub struct Bridge {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: Server,
}

impl Bridge {
    /// Listens on a fresh loopback port.
    ///
    /// # Errors
    ///
    /// No port could be bound.
    pub async fn start(token: String, tools: Vec<Offered>) -> std::io::Result<Bridge> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            token,
            tools: Mutex::new(Arc::new(tools)),
            run: Mutex::new(None),
        });
        let server = tokio::spawn(serve(listener, shared.clone()));
        Ok(Bridge {
            addr,
            shared,
            _server: Server(server),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    pub fn tool_names(&self) -> Vec<String> {
        self.shared
            .offered()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    /// What the harness is offered from now on.
    pub fn offer(&self, tools: Vec<Offered>) {
        *self
            .shared
            .tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(tools);
    }

    /// Calls go to the returned receiver until it is dropped or another run attaches.
    pub fn attach(&self) -> mpsc::Receiver<Call> {
        let (tx, rx) = mpsc::channel(8);
        *self
            .shared
            .run
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
        rx
    }
}

/// The accept loop, stopped with the bridge.
struct Server(tokio::task::JoinHandle<()>);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Shared {
    fn offered(&self) -> Arc<Vec<Offered>> {
        self.tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(answer(&shared, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
                .await;
        });
    }
}

type Reply = Response<Full<Bytes>>;

async fn answer(shared: &Shared, request: Request<Incoming>) -> Reply {
    if !authorized(request.headers(), &shared.token) {
        return plain(StatusCode::UNAUTHORIZED, "a bearer token is required");
    }
    if request.uri().path() != "/mcp" {
        return plain(StatusCode::NOT_FOUND, "the bridge answers at /mcp only");
    }
    match *request.method() {
        Method::POST => {}
        // No server-to-client stream is offered, and there is no session to end.
        Method::GET => return plain(StatusCode::METHOD_NOT_ALLOWED, "no event stream here"),
        Method::DELETE => return plain(StatusCode::OK, ""),
        _ => return plain(StatusCode::METHOD_NOT_ALLOWED, "POST JSON-RPC to /mcp"),
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return rpc_error(
                Value::Null,
                -32600,
                "the request body is too large or was cut",
            );
        }
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return rpc_error(Value::Null, -32700, "the body is not JSON");
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification: nothing to answer.
        return plain(StatusCode::ACCEPTED, "");
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match method {
        "initialize" => result(id, initialize(&params)),
        "ping" => result(id, json!({})),
        "tools/list" => result(id, json!({"tools": list(&shared.offered())})),
        "tools/call" => call(shared, id, &params).await,
        "" => rpc_error(id, -32600, "the request names no method"),
        _ => rpc_error(
            id,
            -32601,
            "the bridge serves initialize, ping, tools/list and tools/call",
        ),
    }
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|v| VERSIONS.contains(v))
        .unwrap_or(VERSIONS[VERSIONS.len() - 1]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "mur", "version": env!("CARGO_PKG_VERSION")},
    })
}

fn list(tools: &[Offered]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            let schema = serde_json::from_str::<Value>(&t.input_schema)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            json!({"name": t.name, "description": t.description, "inputSchema": schema})
        })
        .collect()
}

async fn call(shared: &Shared, id: Value, params: &Value) -> Reply {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return rpc_error(id, -32602, "tools/call needs a tool name");
    };
    if !shared.offered().iter().any(|t| t.name == name) {
        return rpc_error(
            id,
            -32602,
            &format!("no tool named '{}'", crate::escape::cut(name, 100)),
        );
    }
    let input = match params.get("arguments") {
        None | Some(Value::Null) => "{}".to_string(),
        Some(arguments) => arguments.to_string(),
    };
    let run = shared
        .run
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let (tx, rx) = oneshot::channel();
    let call = Call {
        name: name.to_string(),
        input,
        answer: tx,
    };
    let sent = match run {
        Some(run) => run.send(call).await.is_ok(),
        None => false,
    };
    let answer = match (sent, sent.then_some(rx)) {
        (true, Some(rx)) => rx.await.ok(),
        _ => None,
    };
    let answer = answer.unwrap_or(Answer {
        text: "no task is running: the call was not made".into(),
        is_error: true,
    });
    result(
        id,
        json!({
            "content": [{"type": "text", "text": answer.text}],
            "isError": answer.is_error,
        }),
    )
}

/// Compares the whole header in time that does not depend on where it differs.
fn authorized(headers: &http::HeaderMap, token: &str) -> bool {
    let expected = format!("Bearer {token}");
    let Some(given) = headers.get(http::header::AUTHORIZATION) else {
        return false;
    };
    let given = given.as_bytes();
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn result(id: Value, result: Value) -> Reply {
    json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn rpc_error(id: Value, code: i64, message: &str) -> Reply {
    json_reply(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

fn json_reply(body: &Value) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(body.to_string())));
    reply.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    reply
}

fn plain(status: StatusCode, text: &str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(text.to_string())));
    *reply.status_mut() = status;
    reply
}

#[cfg(test)]
mod tests;
