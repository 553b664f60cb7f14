//! The capsule's A2A address: JSON-RPC over `POST /`, with `message/stream` and
//! `stream/watch` answered as server-sent events. `mur run` mounts one capsule at `/`;
//! `mur serve` mounts a [`Router`] that finds the capsule a path names (and answers
//! its own routes). The seed's wire is answered here; the A2A v1.0 door's methods go
//! on to [`a2a`], and `mcp` beneath the address to the MCP door ([`mcp_door`]).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

use crate::a2a::{self, is_card};
use crate::control::{CancelError, Control};
use crate::frames;
use crate::http1::event_stream::Stream;
use crate::http1::{Reply, Request, read_request};
use crate::intake::{Arrived, QUEUE_CLOSED, Served, peer_door};
use crate::mcp_door::{self, is_mcp};
use crate::queue::{Acceptance, Refusal};

const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What one listener serves.
#[derive(Clone)]
pub enum Mount {
    /// One capsule, at `/`, behind its door (`mur run`).
    One(Arc<Served>, Arc<crate::door::Door>),
    /// Whatever the router finds for each path.
    Many(Arc<dyn Router>),
}

/// Finds what a request is for, under `mur serve`.
pub trait Router: Send + Sync + 'static {
    /// A connection was accepted: its slot, or the reply that refuses it.
    fn admit(&self) -> Result<Slot, Reply>;
    /// Where a request goes.
    fn route(&self, request: &Request) -> Route;
    /// A request the router answers itself (`Route::Answer`).
    fn answer(self: Arc<Self>, request: Request) -> BoxFuture<Reply>;
}

/// Becomes true once a hosted capsule's session has ended and wound down.
pub type SessionOver = tokio::sync::watch::Receiver<bool>;

pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Where a request goes.
pub enum Route {
    /// A capsule's address, with the slot its connection holds and what says when its
    /// session is over (then the connection closes, as a `mur run` process's do when
    /// it exits).
    Capsule(Arc<Served>, Slot, SessionOver),
    /// The router answers it (`Router::answer`).
    Answer,
    /// Refused as it stands.
    Refuse(Reply),
}

/// A counted place (an open connection): given back when dropped.
pub struct Slot(Option<Arc<std::sync::atomic::AtomicUsize>>);

impl Slot {
    /// A place under `limit` in `count`, if one is free.
    pub fn take(count: &Arc<std::sync::atomic::AtomicUsize>, limit: usize) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Some(count.clone())))
    }

    /// A slot nothing counts.
    pub fn free() -> Slot {
        Slot(None)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(count) = &self.0 {
            count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

pub async fn serve(listener: TcpListener, mount: Mount) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            // Out of file descriptors and the like: wait, then keep serving.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = socket.set_nodelay(true);
        tokio::spawn(dispatch(socket, mount.clone()));
    }
}

/// Reads the request, then hands it to the capsule it is for (or the router).
async fn dispatch(mut socket: TcpStream, mount: Mount) {
    let slot = match &mount {
        Mount::One(..) => Slot::free(),
        Mount::Many(router) => match router.admit() {
            Ok(slot) => slot,
            Err(reply) => return reply.write(&mut socket).await,
        },
    };
    // Boxed: its read buffers are freed once the request is in, instead of staying in
    // every long-lived event stream's future.
    let request = match timeout(READ_TIMEOUT, Box::pin(read_request(&mut socket))).await {
        Ok(Ok(request)) => request,
        Ok(Err(status)) => return reply_status(&mut socket, status).await,
        Err(_) => return reply_status(&mut socket, "408 Request Timeout").await,
    };
    match mount {
        Mount::One(served, door)
            if request.path == "/" || is_card(&request) || is_mcp(&request) =>
        {
            let admitted = if is_mcp(&request) {
                mcp_door::admits(&door, &request)
            } else {
                door.admits(&request)
            };
            if !admitted && !peer_door::edge_admits(&served.desk, &request) {
                return crate::door::unauthorized().write(&mut socket).await;
            }
            handle(socket, request, &served).await
        }
        Mount::One(..) => reply_status(&mut socket, "404 Not Found").await,
        Mount::Many(router) => match router.route(&request) {
            Route::Capsule(served, capsule_slot, mut over) => {
                let _held = (slot, capsule_slot);
                tokio::select! {
                    () = handle(socket, request, &served) => {}
                    _ = over.wait_for(|over| *over) => {}
                }
            }
            Route::Answer => router.answer(request).await.write(&mut socket).await,
            Route::Refuse(reply) => reply.write(&mut socket).await,
        },
    }
}

/// A request to a capsule's address, its agent card or its MCP door (its path already
/// matched).
async fn handle(mut socket: TcpStream, request: Request, served: &Served) {
    if let Some(refused) = peer_door::refused(&served.desk, &request) {
        return refused.write(&mut socket).await;
    }
    if is_card(&request) {
        return card(socket, &request, served).await;
    }
    if is_mcp(&request) {
        return mcp_door::answer(socket, request, served).await;
    }
    // A browser's GET gets the live web view; every other request keeps its answer.
    if crate::webview::wants_page(&request) {
        let page = crate::webview::reply(crate::webview::View::Capsule, &request);
        return page.write(&mut socket).await;
    }
    let is_json = request
        .header("content-type")
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if request.method != "POST" || !is_json || request.body.is_empty() {
        return reply_status(&mut socket, "404 Not Found").await;
    }
    let call: Value = match serde_json::from_slice(&request.body) {
        Ok(call) => call,
        Err(_) => {
            return reply_json(&mut socket, rpc_error(&Value::Null, -32700, "Parse error")).await;
        }
    };
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    let started = std::time::SystemTime::now();
    let named = call
        .pointer("/params/id")
        .and_then(Value::as_str)
        .map(str::to_string);
    match call.get("method").and_then(Value::as_str) {
        Some(method) if a2a::speaks(method) => a2a::answer(socket, &request, served, call).await,
        Some("stream/watch") => watch(socket, &request, served).await,
        Some("message/stream") if served.queue.policy().acceptance == Acceptance::None => {
            reply_json(&mut socket, rpc_error(&id, -32601, "Method not found")).await
        }
        Some("message/stream") => {
            let params = call.get("params").cloned().unwrap_or(Value::Null);
            let task = message_stream(socket, &request, served, params).await;
            let method = "message/stream";
            served.traced(&request, method, started, task.as_deref());
        }
        Some("tasks/cancel") => {
            reply_json(
                &mut socket,
                cancel(&served.control, &id, call.get("params")),
            )
            .await;
            let method = "tasks/cancel";
            served.traced(&request, method, started, named.as_deref());
        }
        Some("murmur/stop") => {
            // Stop first, so the answer can name what was canceled; the process exits
            // only once the session has wound down, well after this answer is written.
            let canceled = served.control.stop();
            let result = json!({"jsonrpc": "2.0", "id": id,
                "result": {"stopped": served.session_id, "canceled": canceled}});
            reply_json(&mut socket, result).await;
        }
        _ => reply_json(&mut socket, rpc_error(&id, -32601, "Method not found")).await,
    }
}

/// `GET` the agent card; it is public, as clients read it to learn how to call.
async fn card(mut socket: TcpStream, request: &Request, served: &Served) {
    let reply = match request.method.as_str() {
        "GET" => Reply {
            status: "200 OK",
            content_type: "application/json",
            headers: vec![("cache-control", "no-cache".to_string())],
            body: served.card.to_vec(),
        },
        _ => Reply {
            headers: vec![("allow", "GET".to_string())],
            ..Reply::status("405 Method Not Allowed")
        },
    };
    reply.write(&mut socket).await;
}

async fn reply_status(socket: &mut TcpStream, status: &str) {
    let text = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = socket.write_all(text.as_bytes()).await;
    let _ = socket.shutdown().await;
}

async fn reply_json(socket: &mut TcpStream, body: Value) {
    let body = body.to_string();
    let text = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(text.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// A2A `tasks/cancel`: params `{"id": "tsk_..."}`.
fn cancel(control: &Control, id: &Value, params: Option<&Value>) -> Value {
    let Some(task_id) = params.and_then(|p| p.get("id")).and_then(Value::as_str) else {
        return rpc_error(id, -32602, "Invalid params: missing field `id`");
    };
    match control.cancel(task_id) {
        Ok(()) => {
            json!({"jsonrpc": "2.0", "id": id, "result": {"id": task_id, "status": {"state": "canceled"}}})
        }
        Err(CancelError::NotFound) => rpc_error(id, -32001, "Task not found"),
        Err(CancelError::NotCancelable) => rpc_error(id, -32002, "Task cannot be canceled"),
    }
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// `Last-Event-ID` as a number; `Err(())` when present but not one.
fn last_event_id(request: &Request) -> Option<Result<u64, ()>> {
    request
        .header("last-event-id")
        .map(|v| v.trim().parse::<u64>().map_err(|_| ()))
}

async fn watch(socket: TcpStream, request: &Request, served: &Served) {
    let from = match last_event_id(request) {
        Some(Ok(n)) => n,
        _ => 0,
    };
    let (replay, conn) = served.wire.bus().subscribe(Some(from));
    let Ok(mut stream) = Stream::open(socket).await else {
        return;
    };
    let served = async {
        stream
            .write(&frames::connection_ack(served.mode.as_str()))
            .await?;
        for frame in &replay {
            stream.write(frame).await?;
        }
        if stream.pump(&conn, |_| false).await? {
            stream.write(&frames::capsule_closed()).await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = served.await;
    stream.close().await;
}

/// An A2A message, under `params.message` or as `params` itself.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Message {
    message_id: String,
    #[allow(dead_code)]
    role: String,
    parts: Vec<Part>,
    context_id: Option<String>,
}

#[derive(Deserialize)]
struct Part {
    text: String,
}

fn parse_message(params: Value) -> Result<Message, String> {
    let params = match params {
        Value::Object(mut map) if map.contains_key("message") => {
            map.remove("message").unwrap_or(Value::Null)
        }
        other => other,
    };
    serde_json::from_value(params).map_err(|e| format!("Invalid params: {e}"))
}

/// The message's text, joined from its parts.
fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the message answered a tool's open `request-input` wait in its context:
/// then it is that reply, not a new task.
fn answers_input(served: &Served, message: &Message) -> bool {
    // A message without a context starts a new one: it cannot answer a wait.
    let Some(context_id) = message.context_id.as_deref() else {
        return false;
    };
    let tasks = served.wire.tasks();
    let waiting = tasks.waiting_in(context_id);
    if served
        .inbox
        .deliver(context_id, message_text(message))
        .is_err()
    {
        return false;
    }
    if let Some(task) = waiting {
        tasks.answered(&task, v1_message(message));
    }
    true
}

/// The seed's message as the v1 door keeps it in a task's history.
fn v1_message(message: &Message) -> ::a2a::Message {
    let parts = message
        .parts
        .iter()
        .map(|p| ::a2a::Part::text(&p.text))
        .collect();
    let mut v1 = ::a2a::Message::new(::a2a::Role::User, parts);
    v1.message_id = message.message_id.clone();
    v1
}

/// Returns the task the message started or answered, for the request's span.
async fn message_stream(
    socket: TcpStream,
    request: &Request,
    served: &Served,
    params: Value,
) -> Option<String> {
    let replay_from = last_event_id(request).and_then(Result::ok);
    let (replay, conn) = served.wire.bus().subscribe(replay_from);
    let Ok(mut stream) = Stream::open(socket).await else {
        return None;
    };
    let mut task = None;
    let answered = async {
        for frame in &replay {
            stream.write(frame).await?;
        }
        let message = match parse_message(params) {
            Ok(message) => message,
            Err(e) => return stream.write(&frames::error(&e)).await,
        };
        let waiting = message
            .context_id
            .as_deref()
            .and_then(|c| served.wire.tasks().waiting_in(c));
        if answers_input(served, &message) {
            task = waiting;
            // The reply resumes the running task: this connection follows it from here.
            return stream.pump(&conn, |f| f.ends_stream).await.map(|_| ());
        }
        let arrived = Arrived {
            message_id: message.message_id.clone(),
            context_id: message.context_id.clone(),
            text: message_text(&message),
            v1: v1_message(&message),
        };
        let (task_id, context_id, taken) = served.take(request, arrived);
        task = Some(task_id.clone());
        match taken {
            Ok(()) => stream.pump(&conn, |f| f.ends_stream).await.map(|_| ()),
            Err(Refusal::Busy) => stream.write(&frames::rejected(&task_id, &context_id)).await,
            Err(Refusal::Closed) => stream.write(&frames::error(QUEUE_CLOSED)).await,
        }
    };
    let _ = answered.await;
    stream.close().await;
    task
}
