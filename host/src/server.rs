//! The capsule's A2A address: JSON-RPC over `POST /`, with `message/stream` and
//! `stream/watch` answered as server-sent events. `mur run` mounts one capsule at `/`;
//! `mur serve` mounts a [`Router`] that finds the capsule a path names (and answers
//! its own routes).
//!
//! The seed's event stream is an HTTP/1.1 body with exactly three headers and no
//! framing: it ends when the connection closes. hyper always chunk-encodes an
//! HTTP/1.1 body of unknown length, which would put chunk sizes between the frames, so
//! the response is written here by hand; requests are parsed with httparse.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, MissedTickBehavior, interval_at, timeout};

use crate::a2a;
use crate::bus::Next;
use crate::control::{CancelError, Control};
use crate::frames::{self, Frame, HEARTBEAT};
use crate::ids;
use crate::input::Inbox;
use crate::manifest::Conversation;
use crate::queue::{Acceptance, Origin, Pending, Queue, Refusal, Source};
use crate::trace::{SessionTrace, line};
use crate::wire::Wire;

mod peer_door;

use crate::peer::{self, desk::Desk};
use peer_door::Sent;

/// The heartbeat interval; tests shorten it through `MUR_HEARTBEAT_MS`.
fn heartbeat_every() -> Duration {
    std::env::var("MUR_HEARTBEAT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(15))
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the address serves: the session's id and the handles its methods reach.
pub struct Served {
    pub session_id: String,
    /// The conversation mode `stream/watch` announces.
    pub mode: Conversation,
    pub queue: Arc<Queue>,
    pub wire: Arc<Wire>,
    pub trace: Arc<SessionTrace>,
    /// Where a message answering an open `request-input` wait goes.
    pub inbox: Arc<Inbox>,
    /// `tasks/cancel` and `murmur/stop`.
    pub control: Arc<Control>,
    /// The agent card, encoded once.
    pub card: bytes::Bytes,
    /// Whether and from whom it takes peer tasks, and the chains of those it holds.
    pub desk: Arc<Desk>,
}

/// A message that is to become a task, from either door.
pub struct Arrived {
    pub message_id: String,
    pub context_id: Option<String>,
    /// The task's text, from the message's parts.
    pub text: String,
    /// The message as the task's history keeps it.
    pub v1: ::a2a::Message,
}

impl Served {
    /// Hands a new task to the queue: its arrival traced and kept by the task store, and
    /// if the capsule cannot take it, its refusal too. Returns the task's id and context.
    /// A peer task has passed the desk already ([`handle`]); its chain is held here.
    pub fn take(
        &self,
        request: &Request,
        arrived: Arrived,
    ) -> (String, String, Result<(), Refusal>) {
        let origin = Origin::claimed(request.header(peer::ORIGIN_HEADER));
        let peer = (origin == Origin::Peer)
            .then(|| peer_door::admitted(&self.desk, request).ok())
            .flatten()
            .map(|admitted| Sent {
                call_id: request.header(peer::CALL_HEADER).map(str::to_string),
                caller_task: request.header(peer::CALLER_TASK_HEADER).map(str::to_string),
                admitted,
            });
        self.enter(arrived, origin, request.header("traceparent"), peer)
    }

    /// A new task of `origin` into the queue, from either door or another member.
    fn enter(
        &self,
        arrived: Arrived,
        origin: Origin,
        traceparent: Option<&str>,
        peer: Option<Sent>,
    ) -> (String, String, Result<(), Refusal>) {
        let task = Pending {
            breach: None,
            id: ids::task(),
            context_id: arrived.context_id.unwrap_or_else(ids::context),
            text: arrived.text,
            origin,
            source: Source::A2a,
            message_id: Some(arrived.message_id),
        };
        let (task_id, context_id) = (task.id.clone(), task.context_id.clone());
        let received = line::a2a_task_received(&task, traceparent);
        // A failed trace write is kept by the trace: the loop's next step ends on it.
        let _ = self.trace.under_session(Some(&task_id), received);
        match peer {
            Some(sent) => peer_door::hold(self, &task_id, sent, traceparent),
            None => self.desk.arrived(&task_id, None, traceparent),
        }
        let tasks = self.wire.tasks();
        tasks.submitted(&task_id, &context_id, Some(arrived.v1));
        let taken = self.queue.submit(task);
        match &taken {
            Ok(()) => {}
            Err(Refusal::Busy) => {
                // The trace says what became of every task it saw arrive.
                let rejected = line::task_rejected(&task_id, line::Rejected::Busy);
                let _ = self.trace.under_session(Some(&task_id), rejected);
                tasks.rejected(&task_id, &context_id, None, REJECTED_BUSY);
            }
            Err(Refusal::Closed) => tasks.rejected(&task_id, &context_id, None, QUEUE_CLOSED),
        }
        (task_id, context_id, taken)
    }
}

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

/// A whole response, written and then the connection closed.
pub struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: &'static str, body: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }

    pub fn text(status: &'static str, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    /// The seed's plain HTTP error: no body.
    pub fn status(status: &'static str) -> Reply {
        Reply {
            status,
            content_type: "",
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    async fn write(self, socket: &mut TcpStream) {
        let mut head = format!("HTTP/1.1 {}\r\n", self.status);
        if !self.content_type.is_empty() {
            head.push_str(&format!("content-type: {}\r\n", self.content_type));
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        let _ = socket.write_all(&bytes).await;
        let _ = socket.shutdown().await;
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
        Mount::One(served, door) if request.path == "/" || is_card(&request) => {
            if !door.admits(&request) && !peer_door::edge_admits(&served.desk, &request) {
                return crate::serve::unauthorized().write(&mut socket).await;
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

/// An HTTP request as read: its head, and the whole body.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The path of the capsule's agent card, beneath its address.
pub fn is_card(request: &Request) -> bool {
    request
        .path
        .strip_suffix(a2a::CARD_PATH)
        .is_some_and(|address| address.ends_with('/'))
}

/// A request to a capsule's address or its agent card (its path already matched).
async fn handle(mut socket: TcpStream, request: Request, served: &Served) {
    if let Some(refused) = peer_door::refused(&served.desk, &request) {
        return refused.write(&mut socket).await;
    }
    if is_card(&request) {
        return card(socket, &request, served).await;
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
    match call.get("method").and_then(Value::as_str) {
        Some(method) if a2a::speaks(method) => a2a::answer(socket, &request, served, call).await,
        Some("stream/watch") => watch(socket, &request, served).await,
        Some("message/stream") if served.queue.policy().acceptance == Acceptance::None => {
            reply_json(&mut socket, rpc_error(&id, -32601, "Method not found")).await
        }
        Some("message/stream") => {
            let params = call.get("params").cloned().unwrap_or(Value::Null);
            message_stream(socket, &request, served, params).await
        }
        Some("tasks/cancel") => {
            reply_json(
                &mut socket,
                cancel(&served.control, &id, call.get("params")),
            )
            .await
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

/// Reads one request: head, then a body of `content-length` bytes.
async fn read_request(socket: &mut TcpStream) -> Result<Request, &'static str> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        read_more(socket, &mut buf).await?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let request = Request {
                    method: parsed.method.unwrap_or_default().to_string(),
                    path: parsed.path.unwrap_or_default().to_string(),
                    headers: owned_headers(parsed.headers),
                    body: Vec::new(),
                };
                return read_body(socket, request, buf.split_off(head_len)).await;
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => return Err("431 Request Header Fields Too Large"),
            Err(_) => return Err("400 Bad Request"),
        }
    }
}

/// Appends what the client sent next; a client that closed or broke mid-request sent a
/// bad request.
async fn read_more(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut chunk = [0u8; 8192];
    match socket.read(&mut chunk).await {
        Ok(0) | Err(_) => Err("400 Bad Request"),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// Header names and values as owned strings (values decoded lossily: a header is
/// never a reason to panic or to refuse a request).
pub fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

async fn read_body(
    socket: &mut TcpStream,
    mut request: Request,
    mut body: Vec<u8>,
) -> Result<Request, &'static str> {
    if request.header("transfer-encoding").is_some() {
        return Err("411 Length Required");
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => v.trim().parse::<usize>().map_err(|_| "400 Bad Request")?,
    };
    if length > MAX_BODY {
        return Err("413 Content Too Large");
    }
    while body.len() < length {
        read_more(socket, &mut body).await?;
    }
    body.truncate(length);
    request.body = body;
    Ok(request)
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

const REJECTED_BUSY: &str = "task rejected: capsule is busy";
const QUEUE_CLOSED: &str = "internal error: queue send failed";

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: keep-alive\r\n\r\n";

/// `Last-Event-ID` as a number; `Err(())` when present but not one.
fn last_event_id(request: &Request) -> Option<Result<u64, ()>> {
    request
        .header("last-event-id")
        .map(|v| v.trim().parse::<u64>().map_err(|_| ()))
}

/// An open event stream: frames, and a heartbeat due every interval from when the
/// connection opened, whatever else was written.
pub(crate) struct Stream {
    socket: TcpStream,
    heartbeat: tokio::time::Interval,
}

impl Stream {
    pub(crate) async fn open(mut socket: TcpStream) -> std::io::Result<Self> {
        socket.write_all(SSE_HEAD).await?;
        let every = heartbeat_every();
        let mut heartbeat = interval_at(Instant::now() + every, every);
        // A heartbeat held up by a slow write goes out at once and the next ones keep
        // to the schedule counted from the connection's opening, as the seed says;
        // `Delay` would shift every later one.
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Ok(Stream { socket, heartbeat })
    }

    async fn write(&mut self, frame: &Frame) -> std::io::Result<()> {
        self.socket.write_all(&frame.bytes).await
    }

    pub(crate) async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.socket.write_all(bytes).await
    }

    /// Waits for the next heartbeat, then writes it.
    pub(crate) async fn beat(&mut self) -> std::io::Result<()> {
        self.heartbeat.tick().await;
        self.socket.write_all(HEARTBEAT).await
    }

    /// Live frames until `stop` says so, the bus closes, or the client goes away.
    /// Returns whether the bus closed.
    async fn pump(
        &mut self,
        conn: &crate::bus::Connection,
        stop: impl Fn(&Frame) -> bool,
    ) -> std::io::Result<bool> {
        let mut batch = Vec::with_capacity(BATCH_BYTES);
        loop {
            tokio::select! {
                next = conn.next() => match next {
                    Next::Frame(frame) => {
                        let (stopped, closed) = gather(&mut batch, conn, frame, &stop);
                        self.socket.write_all(&batch).await?;
                        conn.written();
                        batch.clear();
                        if stopped {
                            return Ok(false);
                        }
                        if closed {
                            return Ok(true);
                        }
                    }
                    Next::Closed => return Ok(true),
                },
                beat = self.beat() => beat?,
            }
        }
    }

    pub(crate) async fn close(mut self) {
        let _ = self.socket.shutdown().await;
    }
}

/// How many bytes of waiting frames one write may carry.
const BATCH_BYTES: usize = 64 * 1024;

/// `first` and the frames already waiting behind it, in one buffer: a burst of small
/// frames costs one write, not one per frame. Stops after the frame `stop` names.
/// Returns whether it stopped there, and whether the stream closed.
fn gather(
    batch: &mut Vec<u8>,
    conn: &crate::bus::Connection,
    first: Frame,
    stop: &impl Fn(&Frame) -> bool,
) -> (bool, bool) {
    let mut frame = first;
    loop {
        batch.extend_from_slice(&frame.bytes);
        if stop(&frame) {
            return (true, false);
        }
        if batch.len() >= BATCH_BYTES {
            return (false, false);
        }
        frame = match conn.try_next() {
            Some(Next::Frame(next)) => next,
            Some(Next::Closed) => return (false, true),
            None => return (false, false),
        };
    }
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

async fn message_stream(socket: TcpStream, request: &Request, served: &Served, params: Value) {
    let replay_from = last_event_id(request).and_then(Result::ok);
    let (replay, conn) = served.wire.bus().subscribe(replay_from);
    let Ok(mut stream) = Stream::open(socket).await else {
        return;
    };
    let served = async {
        for frame in &replay {
            stream.write(frame).await?;
        }
        let message = match parse_message(params) {
            Ok(message) => message,
            Err(e) => return stream.write(&frames::error(&e)).await,
        };
        if answers_input(served, &message) {
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
        match taken {
            Ok(()) => stream.pump(&conn, |f| f.ends_stream).await.map(|_| ()),
            Err(Refusal::Busy) => stream.write(&frames::rejected(&task_id, &context_id)).await,
            Err(Refusal::Closed) => stream.write(&frames::error(QUEUE_CLOSED)).await,
        }
    };
    let _ = served.await;
    stream.close().await;
}
