//! A blocking HTTP client over `wasi:http`: one POST, then the answer's body read piece
//! by piece. The host checks the destination against the capsule's allow list, bounds
//! the time and retries failed attempts, so this client never retries or waits itself.
//!
//! wasi:http traps when a parent resource is dropped while a child lives, so every
//! child (pollable, stream, headers) is dropped before the resource it came from.

use crate::clip;
use crate::endpoint::Endpoint;
use crate::lenient::{Lenient, Obj, Str, Wanted};
use crate::sse::{SseEvent, SseReader};
use crate::wasi::http::outgoing_handler;
use crate::wasi::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingBody, IncomingResponse, Method,
    OutgoingBody, OutgoingRequest, Scheme,
};
use crate::wasi::io::streams::{InputStream, StreamError};
use serde::Deserialize;
use serde::de::MapAccess;
use serde::de::value::MapAccessDeserializer;
use std::borrow::Cow;

/// `blocking-write-and-flush` takes at most this many bytes per call.
const WRITE_CHUNK: usize = 4096;
/// How much one read asks for; a read returns what has arrived, so streaming is not delayed.
const READ_CHUNK: u64 = 16 * 1024;
/// An event longer than this is a server gone wrong, not a model's answer.
const MAX_EVENT: usize = 16 * 1024 * 1024;

/// An answer whose status and headers have arrived; its body is read on demand.
pub struct Response {
    pub status: u16,
    /// The `content-type` header, lowercased, when there was one.
    pub content_type: Option<String>,
    // Declared child first: fields drop in this order, and the stream must go before
    // the body it belongs to, the body before the response.
    stream: InputStream,
    _body: IncomingBody,
    _response: IncomingResponse,
    origin: String,
    ended: bool,
}

/// What an event handler tells [`Response::read_events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The answer is complete; the rest of the body is not read.
    Done,
}

/// How an event stream ended, when no handler failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// A handler said the answer was complete.
    Done,
    /// The body ended or broke first, for the reason given; whether what arrived is
    /// enough is the driver's call.
    Cut(String),
}

/// POSTs `body` to `endpoint` with `headers` and waits for the status and headers.
pub fn post(
    endpoint: &Endpoint,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let origin = endpoint.origin();
    let request = build_request(endpoint, headers, body.len())?;
    let outgoing = request
        .body()
        .map_err(|()| "could not open the request body".to_string())?;
    // The host takes the body only once the request is handed over, so the request
    // goes first and the body is written while the host reads it.
    let future = outgoing_handler::handle(request, None).map_err(|e| describe(&e, &origin))?;
    let written = write_body(outgoing, body);
    // When the host refuses a request it stops reading its body; the future then says
    // why, which is worth more than the failed write.
    let response = wait(&future).map_err(|e| describe(&e, &origin))?;
    drop(future);
    written.map_err(|e| format!("could not send the request to {origin}: {e}"))?;
    Response::open(response, origin)
}

fn build_request(
    endpoint: &Endpoint,
    headers: &[(&str, &str)],
    length: usize,
) -> Result<OutgoingRequest, String> {
    let mut entries: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    entries.push(("content-length".into(), length.to_string().into_bytes()));
    // Only header names are named here: a value may be a key.
    let fields = Fields::from_list(&entries).map_err(|e| {
        let names: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        format!("the request headers {names:?} were refused: {e:?}")
    })?;
    let request = OutgoingRequest::new(fields);
    let scheme = if endpoint.tls {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let path = endpoint.path_with_query();
    let set = [
        request.set_method(&Method::Post),
        request.set_scheme(Some(&scheme)),
        request.set_authority(Some(&endpoint.authority)),
        request.set_path_with_query(Some(&path)),
    ];
    if set.iter().any(Result::is_err) {
        return Err(format!("'{}' cannot be requested", endpoint.display()));
    }
    Ok(request)
}

/// Writes the whole body in pieces the stream accepts, then finishes it.
fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    let stream = outgoing
        .write()
        .map_err(|()| "could not open the request body for writing".to_string())?;
    let mut result = Ok(());
    for piece in body.chunks(WRITE_CHUNK) {
        if let Err(e) = stream.blocking_write_and_flush(piece) {
            result = Err(stream_error(e));
            break;
        }
    }
    // The stream is the body's child: it must be gone before the body is finished.
    drop(stream);
    result?;
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))
}

fn wait(future: &FutureIncomingResponse) -> Result<IncomingResponse, ErrorCode> {
    loop {
        let pollable = future.subscribe();
        pollable.block();
        drop(pollable);
        match future.get() {
            Some(Ok(result)) => return result,
            // Only reachable by asking twice, which this loop never does.
            Some(Err(())) => {
                return Err(ErrorCode::InternalError(Some(
                    "the answer was already taken".into(),
                )));
            }
            None => continue,
        }
    }
}

impl Response {
    fn open(response: IncomingResponse, origin: String) -> Result<Response, String> {
        let status = response.status();
        let headers = response.headers();
        let content_type = headers
            .get("content-type")
            .first()
            .map(|value| String::from_utf8_lossy(value).to_ascii_lowercase());
        drop(headers);
        let body = response
            .consume()
            .map_err(|()| format!("the answer from {origin} has no readable body"))?;
        let stream = body
            .stream()
            .map_err(|()| format!("the answer from {origin} has no readable body"))?;
        Ok(Response {
            status,
            content_type,
            stream,
            _body: body,
            _response: response,
            origin,
            ended: false,
        })
    }

    /// The next piece of the body, or `None` at its end. A failed read ends the body too.
    pub fn read(&mut self) -> Result<Option<Vec<u8>>, String> {
        if self.ended {
            return Ok(None);
        }
        match self.stream.blocking_read(READ_CHUNK) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StreamError::Closed) => {
                self.ended = true;
                Ok(None)
            }
            Err(StreamError::LastOperationFailed(e)) => {
                self.ended = true;
                Err(read_failure(&e, &self.origin))
            }
        }
    }

    /// The whole body; a body over `limit` bytes is refused rather than held.
    pub fn read_to_end(&mut self, limit: usize) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        while let Some(bytes) = self.read()? {
            body.extend_from_slice(&bytes);
            if body.len() > limit {
                return Err(format!(
                    "the answer from {} is larger than {} KiB",
                    self.origin,
                    limit / 1024
                ));
            }
        }
        Ok(body)
    }

    /// As much of the body as arrives, up to `limit` bytes: for an error answer, whose
    /// status matters more than whether its body was whole.
    pub fn read_prefix(&mut self, limit: usize) -> Vec<u8> {
        let mut body = Vec::new();
        while body.len() < limit {
            match self.read() {
                Ok(Some(bytes)) => body.extend_from_slice(&bytes),
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(limit);
        body
    }

    /// Reads the body as server-sent events and hands each to `on_event` as soon as it
    /// is complete, until the handler says the answer is done or fails, or the body ends.
    pub fn read_events<E: From<String> + std::fmt::Display>(
        &mut self,
        mut on_event: impl FnMut(&SseEvent) -> Result<Flow, E>,
    ) -> Result<StreamEnd, E> {
        let mut reader = SseReader::new();
        loop {
            let bytes = match self.read() {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(cause) => return Ok(StreamEnd::Cut(cause)),
            };
            for event in reader.feed(&bytes) {
                if on_event(&event)? == Flow::Done {
                    return Ok(StreamEnd::Done);
                }
            }
            if reader.pending_len() > MAX_EVENT {
                return Err(format!(
                    "{} sent an event longer than {} MiB",
                    self.origin,
                    MAX_EVENT >> 20
                )
                .into());
            }
        }
        let closed = format!("{} closed the connection", self.origin);
        // What the server sent last without the blank line that ends an event: complete
        // if the handler can read it, otherwise the connection cut it off.
        match reader.finish().map(|event| on_event(&event)) {
            Some(Ok(Flow::Done)) => Ok(StreamEnd::Done),
            Some(Err(e)) => Ok(StreamEnd::Cut(format!(
                "{closed} in the middle of an event ({e})"
            ))),
            None | Some(Ok(Flow::Continue)) => Ok(StreamEnd::Cut(closed)),
        }
    }
}

/// A failed body read in words; wasi:http carries the cause as an error code when it can.
fn read_failure(error: &crate::wasi::io::error::Error, origin: &str) -> String {
    match crate::wasi::http::types::http_error_code(error) {
        Some(code) => describe(&code, origin),
        None => format!("reading from {origin} failed: {}", error.to_debug_string()),
    }
}

fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "the connection closed".into(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}

/// A wasi:http error code in the words a capsule's author can act on.
pub fn describe(code: &ErrorCode, origin: &str) -> String {
    let cannot_connect = |why: String| format!("could not connect to {origin}: {why}");
    let timed_out = |what: &str| format!("timed out waiting for {origin} ({what})");
    match code {
        ErrorCode::HttpRequestDenied => format!(
            "the host refused the request to {origin}: it is not in the capsule's capabilities.network.allow"
        ),
        ErrorCode::ConnectionRefused => cannot_connect("the connection was refused".into()),
        ErrorCode::DnsError(payload) => cannot_connect(format!(
            "the name could not be resolved ({})",
            payload.rcode.as_deref().unwrap_or("no answer")
        )),
        ErrorCode::DestinationNotFound => cannot_connect("the host name is unknown".into()),
        ErrorCode::DestinationUnavailable
        | ErrorCode::DestinationIpProhibited
        | ErrorCode::DestinationIpUnroutable => {
            cannot_connect("the address cannot be reached".into())
        }
        ErrorCode::ConnectionLimitReached => cannot_connect("too many connections".into()),
        ErrorCode::TlsProtocolError => cannot_connect("the TLS handshake failed".into()),
        ErrorCode::TlsCertificateError => {
            cannot_connect("its TLS certificate was not accepted".into())
        }
        ErrorCode::TlsAlertReceived(alert) => cannot_connect(format!(
            "the server ended the TLS handshake ({})",
            alert.alert_message.as_deref().unwrap_or("no reason given")
        )),
        ErrorCode::DnsTimeout => timed_out("resolving its name"),
        ErrorCode::ConnectionTimeout => timed_out("the connection"),
        ErrorCode::HttpResponseTimeout => timed_out("the answer to begin"),
        ErrorCode::ConnectionReadTimeout => timed_out("the next part of the answer"),
        ErrorCode::ConnectionWriteTimeout => timed_out("it to take the request"),
        ErrorCode::ConnectionTerminated | ErrorCode::HttpResponseIncomplete => {
            format!("the connection to {origin} broke off")
        }
        ErrorCode::InternalError(Some(why)) => format!("the request to {origin} failed: {why}"),
        other => format!("the request to {origin} failed: {other:?}"),
    }
}

/// The words for an answer with an error status: the provider's own message when its
/// body is JSON that carries one, else the start of the body.
pub fn status_error(status: u16, url: &str, body: &[u8]) -> String {
    format!("HTTP {status} from {url}: {}", error_message(body))
}

/// The message inside a provider's error body. Providers disagree on where they put it:
/// `{"error":{"message"}}` (OpenAI, Anthropic), `{"error":"…"}` (Ollama),
/// `{"message"}` or `{"detail"}` (vLLM and other servers).
pub fn error_message(body: &[u8]) -> String {
    if let Ok(Obj(Some(wire))) = serde_json::from_slice::<Obj<ErrorBody>>(body) {
        let candidates = [wire.error.0, wire.message.0, wire.detail.0];
        if let Some(message) = candidates.into_iter().flatten().next() {
            return clip(message.trim(), 1000);
        }
    }
    let text = String::from_utf8_lossy(body);
    match text.trim() {
        "" => "(no message in the body)".into(),
        text => clip(text, 1000),
    }
}

/// Where an error body may carry its message.
#[derive(Default, Deserialize)]
#[serde(default)]
struct ErrorBody<'a> {
    #[serde(borrow)]
    error: ErrorField<'a>,
    #[serde(borrow)]
    message: Str<'a>,
    #[serde(borrow)]
    detail: Str<'a>,
}

/// `error` as a message itself, or an object with a `message`.
#[derive(Default)]
struct ErrorField<'a>(Option<Cow<'a, str>>);

#[derive(Default, Deserialize)]
#[serde(default)]
struct Nested<'a> {
    #[serde(borrow)]
    message: Str<'a>,
}

impl<'de: 'a, 'a> Wanted<'de> for ErrorField<'a> {
    fn string(text: Cow<'de, str>) -> Self {
        ErrorField(Some(text))
    }

    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        let nested = Nested::deserialize(MapAccessDeserializer::new(map))?;
        Ok(ErrorField(nested.message.0))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorField<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_error_messages_are_found() {
        let cases: [(&[u8], &str); 7] = [
            (br#"{"error":{"message":"bad key","type":"x"}}"#, "bad key"),
            (
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "Overloaded",
            ),
            (br#"{"error":"model not found"}"#, "model not found"),
            (br#"{"object":"error","message":"too long"}"#, "too long"),
            (b"  Bad Gateway\n", "Bad Gateway"),
            (
                br#"{"error":{"code":1},"detail":"no such model"}"#,
                "no such model",
            ),
            (b"", "(no message in the body)"),
        ];
        for (body, want) in cases {
            assert_eq!(error_message(body), want);
        }
        assert_eq!(
            status_error(401, "https://h/v1", br#"{"error":{"message":"no"}}"#),
            "HTTP 401 from https://h/v1: no"
        );
    }

    #[test]
    fn error_codes_are_put_in_words() {
        let origin = "http://127.0.0.1:9";
        assert!(
            describe(&ErrorCode::HttpRequestDenied, origin).contains("capabilities.network.allow")
        );
        assert!(
            describe(&ErrorCode::ConnectionRefused, origin)
                .starts_with("could not connect to http://127.0.0.1:9")
        );
        assert!(
            describe(&ErrorCode::ConnectionReadTimeout, origin)
                .starts_with("timed out waiting for")
        );
    }
}
