//! An MCP session over a child's stdin and stdout: one JSON-RPC message a line.
//!
//! A reader task owns stdout. It reads one line at a time, never more than the
//! server's message bound (a longer line stops the connection: the reader does not
//! buffer what it will refuse), hands each response to the request waiting for it,
//! keeps only the latest progress of a request (a flood of notifications neither
//! queues nor starves the answer), answers what needs no person itself, and hands an
//! elicitation to the call it belongs to. A writer task owns stdin, so a server that
//! stops reading never blocks the reader: what the reader answers is dropped when the
//! writer's queue is full.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::asked;
use super::protocol::{self, Failure, Incoming, Refusal, Tick};
use super::wire::{Inbound, Stamp};

/// Lines waiting for the writer: a server that stops reading fills it, and what the
/// reader would answer is then dropped rather than queued without end.
const OUT_QUEUE: usize = 64;
/// Elicitations one call may have waiting; more are declined at once.
const ASKS: usize = 4;
/// Lines that are not JSON-RPC messages a server may write before it is stopped: a
/// stray log line is forgiven, a server writing only junk is not.
const MAX_JUNK: u64 = 100;
/// How long an answer to the server may wait for room in the writer's queue.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The stdio side of a connection.
pub(super) struct Stdio {
    shared: Arc<Shared>,
    out: Option<mpsc::Sender<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

struct Shared {
    server: String,
    ids: AtomicU64,
    junk: AtomicU64,
    state: Mutex<State>,
    changed: Arc<watch::Sender<u64>>,
}

#[derive(Default)]
struct State {
    /// Why the connection is dead, once it is.
    gone: Option<String>,
    /// The requests waiting for an answer, by id (oldest first).
    calls: BTreeMap<u64, Waiter>,
}

struct Waiter {
    done: oneshot::Sender<Result<Value, Failure>>,
    asks: mpsc::Sender<Asked>,
    /// The latest progress, for a request that asked for it (its token is its id).
    progress: Option<watch::Sender<Option<Tick>>>,
    /// Whether a person can answer for this request.
    person: bool,
}

/// A request of the server's, for a call to answer.
struct Asked {
    id: Value,
    method: String,
    params: Value,
}

impl Stdio {
    /// Starts the reader and the writer. `max` bounds one line; `changed` is bumped
    /// when the server says its tool list changed.
    pub(super) fn new(
        server: &str,
        stdin: Box<dyn AsyncWrite + Unpin + Send>,
        stdout: Box<dyn AsyncRead + Unpin + Send>,
        max: usize,
        changed: Arc<watch::Sender<u64>>,
    ) -> Stdio {
        let shared = Arc::new(Shared {
            server: server.to_string(),
            ids: AtomicU64::new(1),
            junk: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            changed,
        });
        let (out, queue) = mpsc::channel(OUT_QUEUE);
        let writer = tokio::spawn(write(stdin, queue));
        let reader = tokio::spawn(read(shared.clone(), stdout, out.clone(), max));
        Stdio {
            shared,
            out: Some(out),
            reader: Some(reader),
            writer: Some(writer),
        }
    }

    /// Sends request `method`; its answer, and what the server asks meanwhile, come
    /// through the exchange.
    pub(super) async fn start(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
    ) -> Result<Exchange, Failure> {
        let Some(out) = &self.out else {
            return Err(Failure::Said(self.shared.closed()));
        };
        let id = self.shared.ids.fetch_add(1, Ordering::Relaxed);
        let params = match stamp.progress {
            true => protocol::with_meta(params, [("progressToken", Value::from(id))]),
            false => params,
        };
        let (done, done_rx) = oneshot::channel();
        let (asks, asks_rx) = mpsc::channel(ASKS);
        let (progress, progress_rx) = match stamp.progress {
            true => {
                let (tx, rx) = watch::channel(None);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        {
            let mut state = self.shared.lock();
            if let Some(gone) = &state.gone {
                return Err(Failure::Said(gone.clone()));
            }
            let waiter = Waiter {
                done,
                asks,
                progress,
                person: stamp.person,
            };
            state.calls.insert(id, waiter);
        }
        // Made before the request goes, so a caller that stops waiting during the
        // send still takes its waiter out.
        let exchange = Exchange {
            shared: self.shared.clone(),
            out: out.clone(),
            id,
            done: done_rx,
            asks: asks_rx,
            progress: progress_rx,
            finished: false,
            cancellable: stamp.cancellable,
        };
        if out
            .send(line(&protocol::request(id, method, params)))
            .await
            .is_err()
        {
            return Err(Failure::Said(self.shared.closed()));
        }
        Ok(exchange)
    }

    /// Sends a notification; a full queue waits (the caller bounds the wait).
    pub(super) async fn notify(&self, method: &str, params: Value) -> Result<(), Failure> {
        let Some(out) = &self.out else {
            return Err(Failure::Said(self.shared.closed()));
        };
        out.send(line(&protocol::notification(method, params)))
            .await
            .map_err(|_| Failure::Said(self.shared.closed()))
    }

    pub(super) fn gone(&self) -> Option<String> {
        self.shared.lock().gone.clone()
    }

    pub(super) fn garbled(&self) -> u64 {
        self.shared.junk.load(Ordering::Relaxed)
    }

    /// Closes stdin once what was written is out, which tells the server to end.
    pub(super) async fn close(mut self, within: Duration) {
        if let Some(reader) = self.reader.take() {
            // The reader holds a sender of the writer's queue: the queue only ends
            // once it is gone.
            reader.abort();
        }
        self.out = None;
        if let Some(writer) = self.writer.take() {
            let _ = tokio::time::timeout(within, writer).await;
        }
        let closed = format!("server '{}' was closed", self.shared.server);
        self.shared.kill(closed.clone(), &closed);
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        for task in [self.reader.take(), self.writer.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why nothing more can be sent.
    fn closed(&self) -> String {
        self.lock().gone.clone().unwrap_or_else(|| {
            format!(
                "server '{}' is not reading its input; it may have exited",
                self.server
            )
        })
    }

    /// Marks the connection dead for `gone`, and fails every waiting request with
    /// `pending`.
    fn kill(&self, gone: String, pending: &str) {
        let calls = {
            let mut state = self.lock();
            state.gone.get_or_insert(gone);
            std::mem::take(&mut state.calls)
        };
        for waiter in calls.into_values() {
            let _ = waiter.done.send(Err(Failure::Said(pending.to_string())));
        }
    }

    /// Takes in one message; `false` when it is none.
    fn take_in(&self, value: Value, out: &mpsc::Sender<Vec<u8>>) -> bool {
        match protocol::classify(value) {
            Incoming::Response { id, outcome } => {
                let waiter = id.and_then(|id| self.lock().calls.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.done.send(outcome.map_err(Failure::Rpc));
                }
            }
            Incoming::Notification { method, params } => self.notified(&method, &params),
            Incoming::Request { id, method, params } => self.asked(id, method, params, out),
            Incoming::Other => return false,
        }
        true
    }

    /// A notification, handled where it is read: progress replaces the request's last,
    /// a changed tool list bumps the counter, the rest are dropped.
    fn notified(&self, method: &str, params: &Value) {
        match method {
            "notifications/progress" => {
                let Some(token) = protocol::progress_token(params) else {
                    return;
                };
                let state = self.lock();
                let sender = state.calls.get(&token).and_then(|w| w.progress.as_ref());
                if let (Some(sender), Some(tick)) = (sender, protocol::tick(params)) {
                    sender.send_replace(Some(tick));
                }
            }
            "notifications/tools/list_changed" => self.changed.send_modify(|n| *n += 1),
            _ => {}
        }
    }

    /// A request of the server's. An elicitation goes to the call it most likely
    /// belongs to: stdio says nothing of which, so the newest call a person can answer
    /// for, else the newest call; with none, or one too busy, it is declined.
    fn asked(&self, id: Value, method: String, params: Value, out: &mpsc::Sender<Vec<u8>>) {
        if let Some(reply) = asked::plain(&method) {
            let _ = out.try_send(line(&protocol::answer(id, reply)));
            return;
        }
        let asked = Asked { id, method, params };
        let refused = {
            let state = self.lock();
            let waiter = state
                .calls
                .values()
                .rev()
                .find(|w| w.person)
                .or_else(|| state.calls.values().next_back());
            match waiter {
                Some(waiter) => waiter.asks.try_send(asked).err().map(|e| e.into_inner()),
                None => Some(asked),
            }
        };
        if let Some(asked) = refused {
            let decline = Ok(json!({"action": "decline"}));
            let _ = out.try_send(line(&protocol::answer(asked.id, decline)));
        }
    }
}

/// One request on the wire, from the caller's side.
pub(super) struct Exchange {
    shared: Arc<Shared>,
    out: mpsc::Sender<Vec<u8>>,
    id: u64,
    done: oneshot::Receiver<Result<Value, Failure>>,
    asks: mpsc::Receiver<Asked>,
    progress: Option<watch::Receiver<Option<Tick>>>,
    /// The answer came, or the request was given up.
    finished: bool,
    cancellable: bool,
}

impl Exchange {
    /// What comes next for this request: a request of the server's, the latest
    /// progress, or the answer. Progress reported before the answer comes first.
    pub(super) async fn next(&mut self) -> Result<Inbound, Failure> {
        if self.finished {
            return Err(Failure::Said(self.shared.closed()));
        }
        tokio::select! {
            biased;
            Some(asked) = self.asks.recv() => Ok(Inbound::Request {
                id: asked.id,
                method: asked.method,
                params: asked.params,
            }),
            Some(tick) = latest(&mut self.progress) => Ok(Inbound::Progress(tick)),
            done = &mut self.done => {
                self.finished = true;
                match done {
                    Ok(outcome) => outcome.map(Inbound::Done),
                    Err(_) => Err(Failure::Said(self.shared.closed())),
                }
            }
            else => Err(Failure::Said(self.shared.closed())),
        }
    }

    /// Answers the server's request `id`.
    pub(super) async fn answer(&self, id: Value, reply: Result<Value, Refusal>) {
        let line = line(&protocol::answer(id, reply));
        let _ = tokio::time::timeout(ANSWER_WITHIN, self.out.send(line)).await;
    }

    /// Gives the request up, telling the server why unless it may not be cancelled
    /// (`initialize`, `server/discover`). Never waits: a full queue drops the notice.
    pub(super) fn cancel(&mut self, reason: &str) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let waiting = self.shared.lock().calls.remove(&self.id).is_some();
        if waiting && self.cancellable {
            let _ = self
                .out
                .try_send(line(&protocol::cancelled(self.id, reason)));
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.cancel("mur stopped waiting for the request");
    }
}

/// The next progress not yet seen; never, when the request asked for none.
async fn latest(progress: &mut Option<watch::Receiver<Option<Tick>>>) -> Option<Tick> {
    let Some(receiver) = progress else {
        return std::future::pending().await;
    };
    if receiver.changed().await.is_err() {
        *progress = None;
        return std::future::pending().await;
    }
    receiver.borrow_and_update().clone()
}

/// `message` as one line of the wire.
fn line(message: &Value) -> Vec<u8> {
    let mut bytes = message.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// Writes queued lines to stdin until the queue ends, then closes it.
async fn write(mut stdin: Box<dyn AsyncWrite + Unpin + Send>, mut queue: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = queue.recv().await {
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            // The server stopped reading: the reader sees it end, or the callers'
            // deadlines pass.
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Reads stdout until it ends or the server breaks the rules.
async fn read(
    shared: Arc<Shared>,
    stdout: Box<dyn AsyncRead + Unpin + Send>,
    out: mpsc::Sender<Vec<u8>>,
    max: usize,
) {
    let server = shared.server.clone();
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut buffer = Vec::new();
    loop {
        match next_line(&mut stdout, &mut buffer, max).await {
            Ok(true) => {}
            Ok(false) => {
                return shared.kill(
                    format!("server '{server}' exited"),
                    &format!("server '{server}' exited in the middle of the call"),
                );
            }
            Err(Unreadable::TooLong) => {
                let why = format!(
                    "server '{server}' sent a message larger than {}; it was stopped",
                    protocol::size(max)
                );
                return shared.kill(why.clone(), &why);
            }
            Err(Unreadable::Io) => {
                let why = format!("server '{server}' could not be read from; it was stopped");
                return shared.kill(why.clone(), &why);
            }
        }
        if buffer.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message = serde_json::from_slice::<Value>(&buffer).ok();
        if message.is_some_and(|m| shared.take_in(m, &out)) {
            continue;
        }
        if shared.junk.fetch_add(1, Ordering::Relaxed) + 1 > MAX_JUNK {
            let why = format!(
                "server '{server}' wrote more than {MAX_JUNK} lines that are not JSON-RPC messages; it was stopped"
            );
            return shared.kill(why.clone(), &why);
        }
    }
}

enum Unreadable {
    /// A line longer than the bound: reading stopped at the bound.
    TooLong,
    Io,
}

/// Reads the next line into `line` (without its end); `false` at the end of the
/// stream. Never holds more than `max` bytes of one line.
async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<bool, Unreadable> {
    line.clear();
    loop {
        let available = reader.fill_buf().await.map_err(|_| Unreadable::Io)?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (piece, used, ends) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        if line.len() + piece.len() > max {
            return Err(Unreadable::TooLong);
        }
        line.extend_from_slice(piece);
        reader.consume(used);
        if ends {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(true);
        }
    }
}
