//! The HTTP side of a remote call: one JSON-RPC request of the A2A v1.0 binding to the
//! peer's interface, through the capsule's allow-list and the pooled connections, and
//! its answer read as the hostile input it may be (every event and body bounded, every
//! read timed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use http_body_util::Full;
use mur_authority::NetRule;
use serde_json::{Value, json};
use wasmtime_wasi_http::Error;

use crate::outbound::reply::{self, Unread};
use crate::outbound::{self, PooledBody, Waits};

pub(super) use crate::outbound::reply::said;

/// The most one event of a stream (or one whole JSON answer) may hold.
pub(super) const MAX_EVENT: usize = 4 * 1024 * 1024;
/// The most of a refusal's body read for its message.
const MAX_REFUSAL: usize = 64 * 1024;
/// The version header our door (and the SDKs) read; without it a v1.0 server takes the
/// request for 0.3.
const VERSION_HEADER: &str = "a2a-version";
const VERSION: &str = "1.0";

/// A peer's door sends a heartbeat every 15 s (ours, and sse-starlette's pings): a
/// stream silent for four of them has stopped.
pub(super) const WAITS: Waits = Waits {
    connect: Duration::from_secs(10),
    first_byte: Duration::from_secs(60),
    between_bytes: Duration::from_secs(60),
};

/// What went wrong on the wire, before it is said as a failure.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Trouble {
    /// Nothing came back, or what came stopped: the connection failed, timed out or
    /// broke.
    Transport(String),
    /// The allow rules do not reach the URL.
    Denied,
    /// The door answered with a status other than 2xx, and what its body said.
    Status(u16, Option<String>),
    /// A JSON-RPC error: its code and message.
    Rpc(i64, String),
    /// What came back is not what the protocol says.
    Garbled(String),
}

/// A JSON-RPC answer: one whole document, or an event stream.
pub(super) enum Reply {
    Json(Value),
    Stream(Events),
}

/// Where one call's requests go and what each carries: owned, so the cancel of an
/// abandoned call can outlive the call.
pub(super) struct Door {
    url: String,
    tenant: Option<String>,
    allow: Vec<NetRule>,
    headers: HeaderMap,
    ids: AtomicU64,
}

impl Door {
    pub(super) fn new(
        url: String,
        tenant: Option<String>,
        allow: Vec<NetRule>,
        headers: HeaderMap,
    ) -> Door {
        Door {
            url,
            tenant,
            allow,
            headers,
            ids: AtomicU64::new(1),
        }
    }

    /// Sends `method` with `params`; `last_event_id` resumes a subscription where the
    /// caller's last one stopped.
    pub(super) async fn call(
        &self,
        method: &str,
        mut params: Value,
        last_event_id: Option<&str>,
    ) -> Result<Reply, Trouble> {
        if let (Some(tenant), Some(fields)) = (&self.tenant, params.as_object_mut()) {
            fields.insert("tenant".into(), Value::String(tenant.clone()));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(self.url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream, application/json");
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if let Some(last) = last_event_id.and_then(|l| HeaderValue::from_str(l).ok()) {
            builder = builder.header("last-event-id", last);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| Trouble::Garbled(format!("the request could not be made: {e}")))?;
        let response = send(&self.allow, request).await?;
        let streams = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let mut body = response.into_body();
        if streams {
            return Ok(Reply::Stream(Events(reply::Events::new(body, MAX_EVENT))));
        }
        let bytes = read_bounded(&mut body, MAX_EVENT).await?;
        serde_json::from_slice(&bytes)
            .map(Reply::Json)
            .map_err(|_| {
                Trouble::Garbled("its door answered with something other than JSON".into())
            })
    }
}

/// The headers every request of one call carries: the version, who sends it and on
/// whose behalf, and the token.
pub(super) struct Carried<'a> {
    pub call_id: &'a str,
    pub caller_task: &'a str,
    pub chain: String,
    pub traceparent: Option<&'a str>,
    pub token: Option<&'a str>,
}

impl Carried<'_> {
    /// The header map; `Err` when the token cannot be a header value. A trace context
    /// that cannot be one is left out: the call does not depend on it.
    pub(super) fn headers(&self) -> Result<HeaderMap, ()> {
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: &str| {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        put(VERSION_HEADER, VERSION);
        put(crate::peer::ORIGIN_HEADER, "peer");
        put(crate::peer::CHAIN_HEADER, &self.chain);
        put(crate::peer::CALL_HEADER, self.call_id);
        put(crate::peer::CALLER_TASK_HEADER, self.caller_task);
        if let Some(traceparent) = self.traceparent {
            put("traceparent", traceparent);
        }
        if let Some(token) = self.token {
            headers.insert(AUTHORIZATION, bearer(token)?);
        }
        Ok(headers)
    }
}

/// `Bearer <token>`, marked sensitive so no debug output of the request shows it.
pub(super) fn bearer(token: &str) -> Result<HeaderValue, ()> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ())?;
    value.set_sensitive(true);
    Ok(value)
}

/// Sends `request` through the allow-list; a non-2xx answer becomes
/// [`Trouble::Status`] with what its body said.
pub(super) async fn send(
    allow: &[NetRule],
    request: Request<Full<Bytes>>,
) -> Result<http::Response<PooledBody>, Trouble> {
    let response = outbound::send_allowed(allow, request, WAITS)
        .await
        .map_err(|e| match e {
            Error::HttpRequestDenied => Trouble::Denied,
            e => Trouble::Transport(reply::transport(&e)),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let mut body = response.into_body();
    let said = read_bounded(&mut body, MAX_REFUSAL)
        .await
        .ok()
        .and_then(|bytes| refusal_message(&bytes));
    Err(Trouble::Status(status.as_u16(), said))
}

/// A body read whole, up to `max` bytes; past that, garbled.
pub(super) async fn read_bounded(body: &mut PooledBody, max: usize) -> Result<Vec<u8>, Trouble> {
    reply::read_bounded(body, max).await.map_err(|e| match e {
        Unread::TooBig { max } => Trouble::Garbled(format!(
            "its door answered with more than {} KiB",
            max / 1024
        )),
        e => unread(e),
    })
}

/// What a refusal's JSON body says: `{"message"}`, `{"error": "…"}` or a JSON-RPC
/// `{"error": {"message"}}`.
fn refusal_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error");
    let text = value
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.and_then(Value::as_str))
        .or_else(|| error.and_then(|e| e.get("message")).and_then(Value::as_str))?;
    (!text.trim().is_empty()).then(|| said(text))
}

/// The `result` of a JSON-RPC envelope, or its error.
pub(super) fn result(mut envelope: Value) -> Result<Value, Trouble> {
    if let Some(error) = envelope.get("error").filter(|e| !e.is_null()) {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| "no message".to_string(), said);
        return Err(Trouble::Rpc(code, message));
    }
    match envelope.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(Trouble::Garbled(
            "its door answered neither a result nor an error".into(),
        )),
    }
}

/// A peer's event stream: the shared reader, its failures said as a peer's.
pub(super) struct Events(reply::Events);

impl Events {
    /// The next event; `None` when the stream ended.
    pub(super) async fn next(&mut self) -> Result<Option<reply::Event>, Trouble> {
        self.0.next().await.map_err(unread)
    }
}

/// What went wrong reading an answer, as trouble with a peer.
fn unread(e: Unread) -> Trouble {
    match e {
        Unread::Transport(why) => Trouble::Transport(why),
        Unread::TooBig { max } => Trouble::Garbled(format!(
            "its stream carried an event over {} MiB",
            max / (1024 * 1024)
        )),
        Unread::NotUtf8 => Trouble::Garbled("its stream carried an event that is not UTF-8".into()),
    }
}
