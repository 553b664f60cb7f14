//! An MCP session over streamable HTTP: each client message one `POST` to the
//! server's URL, through the capsule's allow rules and the pooled connections, and
//! each answer one JSON body or an event stream that carries the server's
//! notifications and requests before the response.
//!
//! The handshake era's session id is kept from `initialize` and sent on every later
//! message; the server forgetting it (404) is for the connection to mend. Everything
//! the server sends is bounded by its message bound, event by event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use mur_authority::NetRule;
use serde_json::Value;
use tokio::sync::watch;
use wasmtime_wasi_http::Error;

use super::protocol::{self, Failure, Incoming, Refusal};
use super::wire::{Inbound, Stamp};
use crate::outbound::reply::{self, Events, Unread};
use crate::outbound::{self, PooledBody, Waits};

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";
const METHOD: &str = "mcp-method";
const NAME: &str = "mcp-name";
const TRACEPARENT: &str = "traceparent";
/// The most of a refusal's body read for a JSON-RPC error.
const MAX_REFUSAL: usize = 64 * 1024;
/// Events of an answer that are not JSON-RPC messages before the answer is given up.
const MAX_JUNK: u64 = 100;
/// How long what is sent on the side (an answer to the server, a cancel) may take.
const ASIDE_WITHIN: Duration = Duration::from_secs(10);
const CANCEL_WITHIN: Duration = Duration::from_secs(2);

/// The HTTP side of a connection.
pub(super) struct Http {
    inner: Arc<Inner>,
}

struct Inner {
    server: String,
    url: String,
    token: Option<String>,
    allow: Vec<NetRule>,
    max: usize,
    waits: Waits,
    ids: AtomicU64,
    junk: AtomicU64,
    session: Mutex<Option<String>>,
    changed: Arc<watch::Sender<u64>>,
}

/// Where and how one connection's requests go.
pub(super) struct Place {
    pub url: String,
    pub token: Option<String>,
    pub allow: Vec<NetRule>,
    /// The most one body or event may hold.
    pub max: usize,
    /// The longest one request may wait for its answer to start, or between pieces.
    pub patience: Duration,
    pub connect: Duration,
}

impl Http {
    pub(super) fn new(server: &str, place: Place, changed: Arc<watch::Sender<u64>>) -> Http {
        if let Some(token) = &place.token {
            crate::secret::set(token);
        }
        Http {
            inner: Arc::new(Inner {
                server: server.to_string(),
                url: place.url,
                token: place.token,
                allow: place.allow,
                max: place.max,
                waits: Waits {
                    connect: place.connect,
                    first_byte: place.patience,
                    between_bytes: place.patience,
                },
                ids: AtomicU64::new(1),
                junk: AtomicU64::new(0),
                session: Mutex::new(None),
                changed,
            }),
        }
    }

    /// POSTs request `method`; its answer is followed through the exchange.
    pub(super) async fn start(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
    ) -> Result<Exchange, Failure> {
        let inner = &self.inner;
        let id = inner.ids.fetch_add(1, Ordering::Relaxed);
        let params = match stamp.progress {
            true => protocol::with_meta(params, [("progressToken", Value::from(id))]),
            false => params,
        };
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let session = self.session();
        let heads = Heads {
            method: Some(method),
            name: name.as_deref(),
            session: session.as_deref(),
            stamp,
        };
        let request = inner.post(&protocol::request(id, method, params), &heads)?;
        // Made before the request goes, so a caller that stops waiting meanwhile still
        // tells the server.
        let mut exchange = Exchange {
            inner: inner.clone(),
            id,
            body: Body::Waiting,
            finished: false,
            modern: stamp.modern,
            cancellable: stamp.cancellable,
            progress: stamp.progress,
            version: stamp.version.map(str::to_string),
            session: session.clone(),
        };
        let answered = inner.answered(request, session.is_some()).await;
        let response = match answered {
            Ok(response) => response,
            Err(failure) => {
                exchange.finished = true;
                return Err(failure);
            }
        };
        if method == "initialize" {
            self.keep_session(&response);
        }
        exchange.body = match inner.body(response, method).await {
            Ok(body) => body,
            Err(failure) => {
                exchange.finished = true;
                return Err(failure);
            }
        };
        Ok(exchange)
    }

    /// POSTs a notification; the server answers 202.
    pub(super) async fn notify(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
    ) -> Result<(), Failure> {
        let session = self.session();
        let heads = Heads {
            method: Some(method),
            name: None,
            session: session.as_deref(),
            stamp,
        };
        let request = self
            .inner
            .post(&protocol::notification(method, params), &heads)?;
        let response = self.inner.answered(request, session.is_some()).await?;
        // Read to its end, the connection goes back to the pool.
        let _ = reply::read_bounded(&mut response.into_body(), MAX_REFUSAL).await;
        Ok(())
    }

    pub(super) fn garbled(&self) -> u64 {
        self.inner.junk.load(Ordering::Relaxed)
    }

    pub(super) fn session(&self) -> Option<String> {
        lock(&self.inner.session).clone()
    }

    pub(super) fn forget_session(&self, expired: Option<&str>) -> bool {
        let mut session = lock(&self.inner.session);
        if session.as_deref() != expired {
            return false;
        }
        *session = None;
        true
    }

    fn keep_session(&self, response: &Response<PooledBody>) {
        let given = response
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && HeaderValue::from_str(v).is_ok());
        if let Some(given) = given {
            *lock(&self.inner.session) = Some(given.to_string());
        }
    }

    /// Ends the session on the server, when there is one.
    pub(super) async fn close(self, within: Duration, version: Option<&str>) {
        let Some(session) = self.session() else {
            return;
        };
        let stamp = Stamp {
            version,
            ..Stamp::default()
        };
        let heads = Heads {
            method: None,
            name: None,
            session: Some(&session),
            stamp: &stamp,
        };
        let Ok(request) = self.inner.request(Method::DELETE, Bytes::new(), &heads) else {
            return;
        };
        let _ = tokio::time::timeout(within, self.inner.send(request)).await;
    }
}

/// The headers of one message.
struct Heads<'a> {
    method: Option<&'a str>,
    name: Option<&'a str>,
    session: Option<&'a str>,
    stamp: &'a Stamp<'a>,
}

impl Inner {
    fn post(&self, message: &Value, heads: &Heads<'_>) -> Result<Request<Full<Bytes>>, Failure> {
        self.request(Method::POST, Bytes::from(message.to_string()), heads)
    }

    fn request(
        &self,
        method: Method,
        body: Bytes,
        heads: &Heads<'_>,
    ) -> Result<Request<Full<Bytes>>, Failure> {
        let mut builder = Request::builder()
            .method(method)
            .uri(self.url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(token) = &self.token {
            builder = builder.header(AUTHORIZATION, self.bearer(token)?);
        }
        if let Some(session) = heads.session {
            builder = builder.header(SESSION, session);
        }
        if let Some(version) = heads.stamp.version {
            builder = builder.header(VERSION, version);
        }
        // W3C Trace Context over HTTP: the same value the request's `_meta` carries,
        // for what sits in front of the server (a gateway, a proxy) or reads headers.
        if let Some(traceparent) = heads.stamp.traceparent {
            builder = builder.header(TRACEPARENT, traceparent);
        }
        if heads.stamp.modern {
            if let Some(method) = heads.method {
                builder = builder.header(METHOD, header_text(method));
            }
            if let Some(name) = heads.name {
                builder = builder.header(NAME, header_text(name));
            }
        }
        builder.body(Full::new(body)).map_err(|_| {
            Failure::Said(format!(
                "server '{}' has a URL mur cannot send a request to",
                self.server
            ))
        })
    }

    /// `Bearer <token>`, marked sensitive so no debug output of the request shows it.
    fn bearer(&self, token: &str) -> Result<HeaderValue, Failure> {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            Failure::Said(format!(
                "server '{}' has a token that cannot be sent in a header",
                self.server
            ))
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<PooledBody>, Failure> {
        outbound::send_allowed(&self.allow, request, self.waits)
            .await
            .map_err(|e| match e {
                Error::HttpRequestDenied => Failure::Said(format!(
                    "server '{}' is not in capabilities.network.allow",
                    self.server
                )),
                e => Failure::Said(format!(
                    "the connection to server '{}' failed: {}",
                    self.server,
                    reply::transport(&e)
                )),
            })
    }

    /// The answer to `request` when the server took it (2xx); what it said otherwise.
    async fn answered(
        &self,
        request: Request<Full<Bytes>>,
        carried_session: bool,
    ) -> Result<Response<PooledBody>, Failure> {
        let response = self.send(request).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::NOT_FOUND && carried_session {
            return Err(Failure::Expired);
        }
        let body = reply::read_bounded(&mut response.into_body(), MAX_REFUSAL).await;
        // Only a JSON-RPC error object counts as the server's refusal: an `{"error":
        // "..."}` from a proxy or an auth layer in front of it is an HTTP refusal.
        let error = body
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .filter(|v| v.get("error").is_some_and(Value::is_object))
            .map(protocol::classify);
        Err(match error {
            Some(Incoming::Response {
                outcome: Err(error),
                ..
            }) => Failure::Rpc(error),
            _ => Failure::Status(status.as_u16()),
        })
    }

    /// What a 2xx answer to a request holds: one message, or a stream of them.
    async fn body(&self, response: Response<PooledBody>, method: &str) -> Result<Body, Failure> {
        if response.status() == StatusCode::ACCEPTED {
            return Err(Failure::Said(format!(
                "server '{}' took {} without answering it",
                self.server,
                crate::escape::line(method)
            )));
        }
        let kind = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_start().to_ascii_lowercase())
            .unwrap_or_default();
        let mut body = response.into_body();
        if kind.starts_with("text/event-stream") {
            return Ok(Body::Stream(Events::new(body, self.max)));
        }
        if !kind.starts_with("application/json") {
            return Err(self.garbled("answered with neither JSON nor an event stream"));
        }
        let bytes = reply::read_bounded(&mut body, self.max)
            .await
            .map_err(|e| self.unread(e))?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|_| self.garbled("answered with a body that is not JSON"))?;
        Ok(Body::Whole(Some(value)))
    }

    fn garbled(&self, what: &str) -> Failure {
        Failure::Said(format!("server '{}' {what}", self.server))
    }

    fn unread(&self, e: Unread) -> Failure {
        match e {
            Unread::Transport(why) => Failure::Said(format!(
                "the connection to server '{}' failed: {why}",
                self.server
            )),
            Unread::TooBig { max } => Failure::Said(format!(
                "server '{}' sent a message larger than {}",
                self.server,
                protocol::size(max)
            )),
            Unread::NotUtf8 => self.garbled("sent an event that is not UTF-8"),
        }
    }

    /// POSTs `message` on the side of a request (an answer to the server, a cancel),
    /// within `within`; nothing comes of a failure but a request that ends without
    /// its answer.
    async fn aside(
        &self,
        message: Value,
        version: Option<&str>,
        session: Option<&str>,
        within: Duration,
    ) {
        let stamp = Stamp {
            version,
            ..Stamp::default()
        };
        let heads = Heads {
            method: None,
            name: None,
            session,
            stamp: &stamp,
        };
        let Ok(request) = self.post(&message, &heads) else {
            return;
        };
        let _ = tokio::time::timeout(within, async {
            if let Ok(response) = self.send(request).await {
                let _ = reply::read_bounded(&mut response.into_body(), MAX_REFUSAL).await;
            }
        })
        .await;
    }
}

enum Body {
    /// The request is on its way.
    Waiting,
    /// One JSON message, until it is taken.
    Whole(Option<Value>),
    Stream(Events),
}

/// One request's answer, followed.
pub(super) struct Exchange {
    inner: Arc<Inner>,
    id: u64,
    body: Body,
    finished: bool,
    modern: bool,
    cancellable: bool,
    progress: bool,
    version: Option<String>,
    session: Option<String>,
}

impl Exchange {
    pub(super) async fn next(&mut self) -> Result<Inbound, Failure> {
        loop {
            let value = match &mut self.body {
                Body::Waiting | Body::Whole(None) => {
                    return Err(self.inner.garbled("has nothing more to say"));
                }
                Body::Whole(value) => {
                    let Some(value) = value.take() else { continue };
                    self.finished = true;
                    return match protocol::classify(value) {
                        Incoming::Response { outcome, .. } => {
                            outcome.map(Inbound::Done).map_err(Failure::Rpc)
                        }
                        _ => Err(self
                            .inner
                            .garbled("answered with a JSON body that is not a JSON-RPC response")),
                    };
                }
                Body::Stream(events) => match events.next().await {
                    Ok(Some(event)) => event.data,
                    Ok(None) => {
                        self.finished = true;
                        return Err(self.inner.garbled("ended its answer before the result"));
                    }
                    Err(e) => {
                        self.finished = true;
                        return Err(self.inner.unread(e));
                    }
                },
            };
            // A priming event (an id and no data) says only where a stream could resume.
            if value.trim().is_empty() {
                continue;
            }
            let message = serde_json::from_str::<Value>(&value).ok();
            let taken = match message.map(protocol::classify) {
                Some(incoming) => self.take_in(incoming),
                None => Taken::Junk,
            };
            match taken {
                Taken::Next(inbound) => return inbound,
                Taken::Skipped => {}
                Taken::Junk => {
                    if self.inner.junk.fetch_add(1, Ordering::Relaxed) + 1 > MAX_JUNK {
                        self.finished = true;
                        return Err(self.inner.garbled(&format!(
                            "sent more than {MAX_JUNK} events that are not JSON-RPC messages"
                        )));
                    }
                }
            }
        }
    }

    /// One message of the stream. Any response but one to another of our ids answers
    /// this request: the stream is this request's own (the SDKs read it so too).
    fn take_in(&mut self, incoming: Incoming) -> Taken {
        match incoming {
            Incoming::Response { id, outcome } => {
                if id.is_some_and(|id| id != self.id) {
                    return Taken::Skipped;
                }
                self.finished = true;
                Taken::Next(outcome.map(Inbound::Done).map_err(Failure::Rpc))
            }
            Incoming::Request { id, method, params } => {
                Taken::Next(Ok(Inbound::Request { id, method, params }))
            }
            Incoming::Notification { method, params } => match method.as_str() {
                "notifications/progress"
                    if self.progress && protocol::progress_token(&params) == Some(self.id) =>
                {
                    match protocol::tick(&params) {
                        Some(tick) => Taken::Next(Ok(Inbound::Progress(tick))),
                        None => Taken::Skipped,
                    }
                }
                "notifications/tools/list_changed" => {
                    self.inner.changed.send_modify(|n| *n += 1);
                    Taken::Skipped
                }
                _ => Taken::Skipped,
            },
            Incoming::Other => Taken::Junk,
        }
    }

    /// Answers the server's request `id` with a POST of its own.
    pub(super) async fn answer(&self, id: Value, reply: Result<Value, Refusal>) {
        let message = protocol::answer(id, reply);
        let (version, session) = (self.version.as_deref(), self.session.as_deref());
        self.inner
            .aside(message, version, session, ASIDE_WITHIN)
            .await;
    }

    /// Gives the request up: its answer's stream is dropped, which is all the modern
    /// era wants; the handshake era is also told with `notifications/cancelled`,
    /// POSTed on the side so that giving up never waits.
    pub(super) fn cancel(&mut self, reason: &str) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        self.body = Body::Waiting;
        if self.modern || !self.cancellable {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.inner.clone();
        let message = protocol::cancelled(self.id, reason);
        let (version, session) = (self.version.clone(), self.session.clone());
        runtime.spawn(async move {
            let (version, session) = (version.as_deref(), session.as_deref());
            inner.aside(message, version, session, CANCEL_WITHIN).await;
        });
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.cancel("mur stopped waiting for the request");
    }
}

enum Taken {
    Next(Result<Inbound, Failure>),
    Skipped,
    Junk,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A header value as the modern era writes one: visible ASCII as it is, anything
/// else base64 inside `=?base64?…?=`.
fn header_text(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value == value.trim()
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        return value.to_string();
    }
    format!("=?base64?{}?=", base64(value.as_bytes()))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_text_wraps_what_a_header_cannot_carry() {
        assert_eq!(header_text("tools/call"), "tools/call");
        assert_eq!(header_text("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
    }
}
