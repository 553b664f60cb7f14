//! Outbound HTTP from driver components: the only way a driver reaches a model server.
//! Every request is checked against `capabilities.network.allow` before a socket is
//! opened; the manifest's timeouts bound it; 429 and 5xx answers and failed connections
//! are retried with jittered backoff. What happened is recorded for the trace. Requests
//! go out on connections kept open per model server ([`pool`]).

mod pool;
pub(crate) mod reply;

pub(crate) use pool::PooledBody;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use mur_authority::{NetRule, Origin};

use crate::manifest::{Retry, Timeouts};

/// A request body larger than this is refused: a conversation is never this big, and
/// the body is held in memory so that a retry can send it again.
const MAX_REQUEST_BODY: usize = 64 * 1024 * 1024;

/// What a capsule lets its driver do on the network.
#[derive(Debug, Clone)]
pub struct NetPolicy {
    pub allow: Vec<NetRule>,
    pub retry: Retry,
    pub timeouts: Timeouts,
}

/// Something the trace should show about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Refused before any connection: not in `capabilities.network.allow`.
    Denied { origin: String },
    /// Attempt `attempt` failed with `cause`; the next starts after `delay`.
    Retry {
        url: String,
        attempt: u32,
        cause: String,
        delay: Duration,
    },
}

/// The `wasi:http` hooks of one driver instance. Events go to a log the session reads
/// after each inference call, shared by every instance of the driver.
pub struct Outbound {
    policy: Arc<NetPolicy>,
    events: Arc<Mutex<Vec<Event>>>,
    credential: Option<Arc<Credential>>,
    context: TraceContext,
}

/// The W3C `traceparent` a driver's requests carry: the turn under way, set by the
/// session before each call and shared by the driver's instances.
#[derive(Debug, Clone, Default)]
pub struct TraceContext(Arc<Mutex<Option<String>>>);

impl TraceContext {
    pub fn set(&self, traceparent: Option<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = traceparent;
    }

    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts the turn's `traceparent` on `request`, unless the driver set its own.
    fn apply(&self, request: &mut Request<WasiBody>) {
        let Some(traceparent) = self.get() else {
            return;
        };
        let headers = request.headers_mut();
        if headers.contains_key("traceparent") {
            return;
        }
        if let Ok(value) = http::HeaderValue::from_str(&traceparent) {
            headers.insert("traceparent", value);
        }
    }
}

/// The key the host adds to a driver's requests to the model server, for drivers that
/// expect their host to hold it (upstream Murmur's, whose host adds it in its gateway).
#[derive(Debug)]
pub struct Credential {
    /// `scheme://host:port` of `inference.endpoint`: no other server gets the key.
    pub origin: String,
    pub key: String,
}

impl Outbound {
    pub fn new(policy: Arc<NetPolicy>, events: Arc<Mutex<Vec<Event>>>) -> Self {
        Outbound {
            policy,
            events,
            credential: None,
            context: TraceContext::default(),
        }
    }

    /// Requests carry the `traceparent` `context` holds when they are sent.
    pub fn with_context(mut self, context: TraceContext) -> Self {
        self.context = context;
        self
    }

    /// Adds `credential` to requests for its origin that carry no key of their own.
    pub fn with_credential(mut self, credential: Option<Arc<Credential>>) -> Self {
        self.credential = credential;
        self
    }
}

impl Credential {
    /// Puts the key on `request` as its provider reads it: `x-api-key` for Anthropic's
    /// API (the request names an `anthropic-version`), a bearer token for the rest.
    /// A request that already carries a key, or goes elsewhere, is left alone.
    fn apply(&self, target: &Origin, request: &mut Request<WasiBody>) {
        let headers = request.headers_mut();
        if target.to_string() != self.origin
            || headers.contains_key(http::header::AUTHORIZATION)
            || headers.contains_key("x-api-key")
        {
            return;
        }
        let (name, value) = if headers.contains_key("anthropic-version") {
            (http::HeaderName::from_static("x-api-key"), self.key.clone())
        } else {
            (http::header::AUTHORIZATION, format!("Bearer {}", self.key))
        };
        if let Ok(mut value) = http::HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
}

type Result<T> = std::result::Result<T, Error>;
/// What reports the fate of a response body after its headers arrived.
type Io = Box<dyn Future<Output = Result<()>> + Send>;
type SendFuture = Box<dyn Future<Output = Result<(Response<WasiBody>, Io)>> + Send>;

impl WasiHttpHooks for Outbound {
    /// A driver writes its request in 4 KiB pieces; buffering a few lets it write the
    /// whole body without waiting for the sender between pieces.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        16
    }

    fn send_request(
        &mut self,
        mut request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Io,
    ) -> SendFuture {
        let policy = self.policy.clone();
        let events = self.events.clone();
        let credential = self.credential.clone();
        self.context.apply(&mut request);
        Box::new(async move {
            let target = Origin::of(request.uri());
            if !policy.allows(&target) {
                record(
                    &events,
                    Event::Denied {
                        origin: target.to_string(),
                    },
                );
                return Err(Error::HttpRequestDenied);
            }
            if let Some(credential) = &credential {
                credential.apply(&target, &mut request);
            }
            let options = policy.timeouts.bound(options);
            send_with_retries(&policy.retry, request, options, &events).await
        })
    }
}

fn record(events: &Mutex<Vec<Event>>, event: Event) {
    events.lock().unwrap_or_else(|p| p.into_inner()).push(event);
}

impl NetPolicy {
    fn allows(&self, target: &Origin) -> bool {
        self.allow.iter().any(|rule| rule.allows(target))
    }
}

/// Whether `url` is reachable under `rules`; `false` for what is not a URL.
pub fn allowed(rules: &[NetRule], url: &str) -> bool {
    let Ok(uri) = url.parse::<Uri>() else {
        return false;
    };
    let target = Origin::of(&uri);
    rules.iter().any(|rule| rule.allows(&target))
}

/// How long a request the host sends for itself may wait: for its connection, for the
/// answer's head, and between pieces of the answer's body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waits {
    pub connect: Duration,
    pub first_byte: Duration,
    pub between_bytes: Duration,
}

/// Sends a request the host makes on a capsule's behalf (a call to a remote peer) once,
/// on the pool's connections, if the capsule's allow rules reach its URL: the check a
/// driver's requests pass, so a peer is no way around the capsule's allow-list. Not
/// retried: a peer call is not idempotent. The answer streams, its body read as it
/// arrives, each piece within `waits.between_bytes`. `http` and `https` both go, as the
/// pool makes them.
pub(crate) async fn send_allowed(
    rules: &[NetRule],
    request: Request<Full<Bytes>>,
    waits: Waits,
) -> Result<Response<PooledBody>> {
    let target = Origin::of(request.uri());
    if !rules.iter().any(|rule| rule.allows(&target)) {
        return Err(Error::HttpRequestDenied);
    }
    send_own(request, waits).await
}

/// Sends a request the host makes for its own user, not a capsule's (to a component
/// registry the user named), once, on the pool's connections, within `waits`.
pub(crate) async fn send_own(
    mut request: Request<Full<Bytes>>,
    waits: Waits,
) -> Result<Response<PooledBody>> {
    // The pool sends the request line in origin form, and HTTP/1.1 servers (uvicorn's
    // h11 among them) refuse a request without a Host.
    let host = request.uri().authority().map(|a| match a.port_u16() {
        Some(port) => format!("{}:{port}", a.host()),
        None => a.host().to_string(),
    });
    if let Some(host) = host.and_then(|h| http::HeaderValue::from_str(&h).ok()) {
        request
            .headers_mut()
            .entry(http::header::HOST)
            .or_insert(host);
    }
    let options = RequestOptions {
        connect_timeout: Some(waits.connect),
        first_byte_timeout: Some(waits.first_byte),
        between_bytes_timeout: Some(waits.between_bytes),
    };
    pool::send(request, options).await
}

/// `scheme://host:port` of a URL, as an allow-list entry would name it.
pub fn origin_of(url: &str) -> Option<String> {
    let uri = url.parse::<Uri>().ok()?;
    uri.host()?;
    Some(Origin::of(&uri).to_string())
}

impl Timeouts {
    /// The driver may ask for shorter timeouts, never longer ones.
    fn bound(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let asked = asked.unwrap_or_default();
        let min =
            |asked: Option<Duration>, limit: Duration| Some(asked.map_or(limit, |a| a.min(limit)));
        RequestOptions {
            connect_timeout: min(asked.connect_timeout, self.connect),
            first_byte_timeout: min(asked.first_byte_timeout, self.read),
            between_bytes_timeout: min(asked.between_bytes_timeout, self.read),
        }
    }
}

async fn send_with_retries(
    retry: &Retry,
    request: Request<WasiBody>,
    options: RequestOptions,
    events: &Mutex<Vec<Event>>,
) -> Result<(Response<WasiBody>, Io)> {
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, MAX_REQUEST_BODY)
        .collect()
        .await
        .map_err(|e| match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(_) => Error::HttpRequestBodySize(None),
        })?
        .to_bytes();
    let url = without_query(&parts.uri);
    let mut attempt = 1;
    loop {
        let request = rebuild(&parts, body.clone())?;
        let sent = pool::send(request, options).await;
        let (cause, retry_after) = match &sent {
            Ok(response) => (retryable_status(response.status()), retry_after(response)),
            Err(e) => (retryable_error(e), None),
        };
        match cause {
            Some(cause) if attempt < retry.max_attempts => {
                let delay = retry.delay(attempt, retry_after);
                record(
                    events,
                    Event::Retry {
                        url: url.clone(),
                        attempt,
                        cause,
                        delay,
                    },
                );
                drop(sent);
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            _ => {
                let response = sent?;
                // The connection outlives the answer, so nothing is left to report on it.
                let io = Box::new(async { Ok(()) }) as Io;
                return Ok((response.map(BodyExt::boxed_unsync), io));
            }
        }
    }
}

/// A fresh copy of the request for one attempt.
fn rebuild(parts: &http::request::Parts, body: Bytes) -> Result<Request<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .version(parts.version);
    for (name, value) in &parts.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(body))
        .map_err(|e| Error::InternalError(Some(e.to_string())))
}

/// The URL for the trace: no query string, which may carry a key.
fn without_query(uri: &Uri) -> String {
    format!("{}{}", Origin::of(uri), uri.path())
}

fn retryable_status(status: StatusCode) -> Option<String> {
    (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
        .then(|| format!("HTTP {}", status.as_u16()))
}

/// Failures before any byte of a response: the request never reached the model, so
/// sending it again cannot do anything twice.
fn retryable_error(e: &Error) -> Option<String> {
    match e {
        Error::Connect(_)
        | Error::ConnectionRefused
        | Error::ConnectionTimeout
        | Error::DestinationUnavailable
        | Error::DnsTimeout => Some(e.to_string()),
        _ => None,
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare from model APIs and ignored).
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    let value = response.headers().get(http::header::RETRY_AFTER)?;
    let secs = value.to_str().ok()?.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs))
}

impl Retry {
    /// Full jitter: a random delay up to the exponential bound, so clients that failed
    /// together do not come back together. A server's `Retry-After` is honoured up to
    /// `max_backoff`.
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let bound = exp.min(self.max_backoff);
        let jittered = bound.mul_f64(random_unit());
        match retry_after {
            Some(wait) => wait.min(self.max_backoff).max(jittered),
            None => jittered,
        }
    }
}

/// A number in [0, 1) from the standard library's per-process random hasher keys.
fn random_unit() -> f64 {
    let bits = RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(scheme: Option<&str>, host: &str, port: Option<u16>) -> NetRule {
        NetRule {
            scheme: scheme.map(str::to_string),
            host: host.to_string(),
            port,
        }
    }

    fn allows(rules: Vec<NetRule>, url: &str) -> bool {
        let policy = NetPolicy {
            allow: rules,
            retry: Retry::default(),
            timeouts: Timeouts::default(),
        };
        let uri: Uri = url.parse().expect("test URL");
        policy.allows(&Origin::of(&uri))
    }

    #[test]
    fn entries_match_scheme_host_and_port() {
        let exact = vec![rule(Some("http"), "127.0.0.1", Some(11434))];
        assert!(allows(
            exact.clone(),
            "http://127.0.0.1:11434/v1/chat/completions"
        ));
        assert!(!allows(exact.clone(), "https://127.0.0.1:11434/"));
        assert!(!allows(exact.clone(), "http://127.0.0.1:11435/"));
        assert!(!allows(exact, "http://127.0.0.2:11434/"));
    }

    #[test]
    fn an_entry_without_a_port_means_the_default_port() {
        let host = vec![rule(None, "api.openai.com", None)];
        assert!(allows(
            host.clone(),
            "https://api.openai.com/v1/chat/completions"
        ));
        assert!(allows(host.clone(), "http://api.openai.com/"));
        assert!(!allows(host, "https://api.openai.com:8443/"));
        let https = vec![rule(Some("https"), "api.anthropic.com", None)];
        assert!(allows(
            https.clone(),
            "https://API.anthropic.com/v1/messages"
        ));
        assert!(!allows(https, "http://api.anthropic.com/"));
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        assert!(!allows(Vec::new(), "https://api.openai.com/"));
    }

    #[test]
    fn ipv6_hosts_keep_their_brackets() {
        let v6 = vec![rule(Some("http"), "[::1]", Some(8080))];
        assert!(allows(v6, "http://[::1]:8080/"));
    }

    #[test]
    fn backoff_is_bounded_and_honours_retry_after() {
        let retry = Retry {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
        };
        for attempt in 1..=6 {
            let bound = Duration::from_millis(100 * (1 << (attempt - 1))).min(retry.max_backoff);
            assert!(retry.delay(attempt, None) <= bound);
        }
        let waited = retry.delay(1, Some(Duration::from_secs(60)));
        assert_eq!(waited, Duration::from_millis(300));
        let zero = Retry {
            initial_backoff: Duration::ZERO,
            ..retry
        };
        assert_eq!(zero.delay(3, None), Duration::ZERO);
    }

    #[test]
    fn timeouts_are_never_longer_than_the_manifest_allows() {
        let limits = Timeouts {
            connect: Duration::from_secs(5),
            read: Duration::from_secs(60),
        };
        let asked = RequestOptions {
            connect_timeout: Some(Duration::from_secs(1)),
            first_byte_timeout: Some(Duration::from_secs(600)),
            between_bytes_timeout: None,
        };
        let bound = limits.bound(Some(asked));
        assert_eq!(bound.connect_timeout, Some(Duration::from_secs(1)));
        assert_eq!(bound.first_byte_timeout, Some(Duration::from_secs(60)));
        assert_eq!(bound.between_bytes_timeout, Some(Duration::from_secs(60)));
    }

    #[test]
    fn the_traced_url_drops_the_query() {
        let uri: Uri = "https://api.example.com/v1/x?key=secret"
            .parse()
            .expect("test URL");
        assert_eq!(without_query(&uri), "https://api.example.com:443/v1/x");
    }
}
