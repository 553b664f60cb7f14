//! One live MCP session with one server over one transport: the era negotiated when it
//! opens, then tools listed and called, each request bounded in time and followed to
//! its answer while the server reports progress and asks its questions.
//!
//! The era is chosen as the official SDKs choose it: `server/discover` is tried at
//! the modern version, and anything short of a modern answer (an error, a bare 4xx, no
//! answer in time from a server that ignores what it does not know) falls back to the
//! `initialize` handshake.
//!
//! Every failure is a sentence naming the server by its manifest name only: it is what
//! the model, or the operator starting the capsule, reads.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

use super::asked;
use super::catalog::RawTool;
use super::http::{self, Http};
use super::protocol::{self, Failure, HANDSHAKE_VERSIONS, MODERN};
use super::stdio::Stdio;
use super::wire::{Inbound, Stamp, Wire};

/// How long the `server/discover` probe may go unanswered before the handshake is
/// tried (the Python SDK waits as long); never more than half the startup time.
const PROBE_WITHIN: Duration = Duration::from_secs(10);
/// How long closing may take.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);
/// Rounds of input one modern request may ask for before it is given up.
const MAX_ROUNDS: usize = 16;
/// Questions one round may ask: each one is put to a person.
const MAX_INPUT_REQUESTS: usize = 8;
/// Pages of a tool list followed before the list is given up.
const MAX_PAGES: usize = 1000;

/// What bounds one server.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// The largest message (a stdio line, an HTTP body, one event) the server may send.
    pub max_message_bytes: usize,
    /// The most tools the server may list.
    pub max_tools: usize,
    /// How long opening the session, and each page of the tool list, may take.
    pub startup_timeout: Duration,
    /// How long one tool call may take (a person's answering aside).
    pub tool_timeout: Duration,
}

/// How the client reaches the server.
pub enum Transport {
    /// A process the caller started (and confined): its stdin and stdout.
    Stdio {
        stdin: Box<dyn AsyncWrite + Unpin + Send>,
        stdout: Box<dyn AsyncRead + Unpin + Send>,
    },
    /// Streamable HTTP at `url`, reached only through the capsule's allow rules.
    Http {
        url: String,
        token: Option<String>,
        allow: Vec<mur_authority::NetRule>,
    },
}

/// Who a call may turn to while it runs.
#[derive(Clone, Copy, Default)]
pub struct CallHooks<'a> {
    /// Answers the server's questions (elicitation); without one they are declined.
    pub person: Option<&'a dyn Person>,
    /// Hears the server's progress reports.
    pub progress: Option<&'a dyn Progress>,
    /// The W3C `traceparent` (`00-<trace-id>-<parent-id>-<flags>`) of the span the call
    /// runs in: sent in the request's `params._meta.traceparent` (the key MCP reserves
    /// for W3C Trace Context, SEP-414), and as the HTTP `traceparent` header over
    /// streamable HTTP, so the server's own spans join the capsule's trace under the
    /// tool call. A value that is not a well-formed `traceparent` is not sent.
    pub traceparent: Option<&'a str>,
}

/// The person a call's questions go to.
pub trait Person: Send + Sync {
    /// The answer to `prompt`, or why there is none.
    fn ask<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>>;
}

/// What hears a call's progress; called as reports are read, the latest when several
/// came at once.
pub trait Progress: Send + Sync {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>);
}

/// A failure, said as a plain sentence naming the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpError {
    pub message: String,
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for McpError {}

fn error(message: impl Into<String>) -> McpError {
    McpError {
        message: message.into(),
    }
}

pub struct Connection {
    server: String,
    /// The negotiated protocol version.
    era: String,
    modern: bool,
    wire: Wire,
    bounds: Bounds,
    changed: Arc<watch::Sender<u64>>,
    /// Why the connection is dead, when the wire itself still looks alive.
    lost: Mutex<Option<String>>,
    /// One renewal of an expired HTTP session at a time.
    renewing: tokio::sync::Mutex<()>,
}

impl Connection {
    /// Opens the session (negotiation bounded by `startup_timeout`).
    ///
    /// # Errors
    ///
    /// Why the session could not be opened.
    pub async fn open(
        server: &str,
        transport: Transport,
        bounds: Bounds,
    ) -> Result<Connection, McpError> {
        let changed = Arc::new(watch::channel(0u64).0);
        let wire = match transport {
            Transport::Stdio { stdin, stdout } => Wire::Stdio(Stdio::new(
                server,
                stdin,
                stdout,
                bounds.max_message_bytes,
                changed.clone(),
            )),
            Transport::Http { url, token, allow } => {
                let place = http::Place {
                    url,
                    token,
                    allow,
                    max: bounds.max_message_bytes,
                    patience: bounds.startup_timeout.max(bounds.tool_timeout),
                    connect: bounds.startup_timeout,
                };
                Wire::Http(Http::new(server, place, changed.clone()))
            }
        };
        let mut connection = Connection {
            server: server.to_string(),
            era: String::new(),
            modern: false,
            wire,
            bounds,
            changed,
            lost: Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
        };
        let within = connection.bounds.startup_timeout;
        let (era, modern) = tokio::time::timeout(within, connection.negotiate())
            .await
            .map_err(|_| {
                error(format!(
                    "server '{server}' did not finish starting within {}",
                    seconds(within)
                ))
            })??;
        connection.era = era;
        connection.modern = modern;
        Ok(connection)
    }

    /// The negotiated protocol version.
    pub fn era(&self) -> &str {
        &self.era
    }

    /// The server's tools as it lists them, every page of them.
    ///
    /// # Errors
    ///
    /// The list failed, or it is longer than `max_tools`.
    pub async fn list_tools(&self) -> Result<Vec<RawTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let limit = self.bounds.startup_timeout;
            let hooks = CallHooks::default();
            let page = self
                .request("tools/list", params, &hooks, limit, "tools/list")
                .await?;
            let Some(listed) = page.get("tools").and_then(Value::as_array) else {
                return Err(error(format!(
                    "server '{}' answered tools/list without a list of tools",
                    self.server
                )));
            };
            let seen = tools.len() + listed.len();
            if seen > self.bounds.max_tools {
                return Err(error(format!(
                    "server '{}' lists more tools than the {} allowed ({seen} seen)",
                    self.server, self.bounds.max_tools
                )));
            }
            tools.extend(listed.iter().map(raw_tool));
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => {
                    cursor = Some(next.to_string());
                }
                Some(next) if !next.is_empty() => {
                    return Err(error(format!(
                        "server '{}' answered tools/list with the same page again",
                        self.server
                    )));
                }
                _ => return Ok(tools),
            }
        }
        Err(error(format!(
            "server '{}' kept paging its tool list past {MAX_PAGES} pages",
            self.server
        )))
    }

    /// Calls `tool`; the result is the server's `CallToolResult` as it sent it.
    /// Bounded by `tool_timeout`; given up (timed out, or the future dropped), the
    /// server is told, never waited for.
    ///
    /// # Errors
    ///
    /// The call could not be made or answered. A tool that failed is a result with
    /// `isError`, not an error.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        hooks: &CallHooks<'_>,
    ) -> Result<Value, McpError> {
        let params = json!({"name": tool, "arguments": arguments});
        let what = format!("the call of tool '{}'", crate::escape::line(tool));
        let limit = self.bounds.tool_timeout;
        self.request("tools/call", params, hooks, limit, &what)
            .await
    }

    /// Bumped each time the server says its tool list changed.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Why the connection is dead (the server exited, broke the rules, lost its
    /// session), if it is.
    pub fn gone(&self) -> Option<String> {
        let lost = self
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        lost.or_else(|| self.wire.gone())
    }

    /// How many lines or events the server sent that were not JSON-RPC messages:
    /// skipped, and worth a line in its log.
    pub fn garbled(&self) -> u64 {
        self.wire.garbled()
    }

    /// Closes stdin, or ends the HTTP session when there is one; at most 2 s.
    pub async fn close(self) {
        let version = self.era.clone();
        let close = self.wire.close(CLOSE_WITHIN, Some(&version));
        let _ = tokio::time::timeout(CLOSE_WITHIN, close).await;
    }

    /// The era: `(version, modern)`.
    async fn negotiate(&self) -> Result<(String, bool), McpError> {
        let stamp = Stamp {
            version: Some(MODERN),
            modern: true,
            ..Stamp::default()
        };
        let params = protocol::modern(json!({}));
        let within = PROBE_WITHIN.min(self.bounds.startup_timeout / 2);
        let mut deadline = Instant::now() + within;
        let hooks = CallHooks::default();
        let probe = self
            .round("server/discover", params, &stamp, &hooks, &mut deadline)
            .await;
        match probe {
            Ok(result) if protocol::speaks_modern(&result) => return Ok((MODERN.into(), true)),
            Err(Failure::Rpc(refusal)) if protocol::disjoint(&refusal) => {
                return Err(error(format!(
                    "server '{}' speaks only protocol versions mur does not",
                    self.server
                )));
            }
            // A discover answer naming no modern version, an error, a bare 4xx, or no
            // answer at all: a server of the handshake era.
            Ok(_) | Err(Failure::Rpc(_) | Failure::TimedOut) => {}
            Err(Failure::Status(status)) if (400..500).contains(&status) => {}
            Err(failure) => return Err(self.failed("server/discover", failure, within)),
        }
        Ok((self.handshake().await?, false))
    }

    /// `initialize`, then `notifications/initialized`; the version settled on.
    async fn handshake(&self) -> Result<String, McpError> {
        let within = self.bounds.startup_timeout;
        let mut deadline = Instant::now() + within;
        let hooks = CallHooks::default();
        let stamp = Stamp::default();
        let result = self
            .round(
                "initialize",
                protocol::initialize(),
                &stamp,
                &hooks,
                &mut deadline,
            )
            .await
            .map_err(|failure| self.failed("initialize", failure, within))?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !HANDSHAKE_VERSIONS.contains(&version) {
            return Err(error(format!(
                "server '{}' answered initialize with protocol version '{}', which mur does not speak",
                self.server,
                crate::outbound::reply::said(version)
            )));
        }
        let stamp = Stamp {
            version: Some(version),
            ..Stamp::default()
        };
        self.wire
            .notify("notifications/initialized", json!({}), &stamp)
            .await
            .map_err(|failure| self.failed("notifications/initialized", failure, within))?;
        Ok(version.to_string())
    }

    /// One request as the era wants it, followed to its result: a modern server's
    /// questions answered and the request sent again, an expired HTTP session
    /// renewed once.
    async fn request(
        &self,
        method: &str,
        mut params: Value,
        hooks: &CallHooks<'_>,
        limit: Duration,
        what: &str,
    ) -> Result<Value, McpError> {
        let mut deadline = Instant::now() + limit;
        let mut renewed = false;
        let mut rounds = 0;
        // Kept in `_meta` through every round: `fulfil` keeps what `params` had.
        let traceparent = hooks.traceparent.filter(|t| protocol::is_traceparent(t));
        if let Some(traceparent) = traceparent {
            params = protocol::with_meta(params, [(protocol::TRACEPARENT, traceparent.into())]);
        }
        loop {
            let stamp = Stamp {
                version: Some(&self.era),
                modern: self.modern,
                progress: hooks.progress.is_some() && method == "tools/call",
                person: hooks.person.is_some(),
                cancellable: true,
                traceparent,
            };
            let carried = self.wire.session();
            let sent = match self.modern {
                true => protocol::modern(params.clone()),
                false => params.clone(),
            };
            match self.round(method, sent, &stamp, hooks, &mut deadline).await {
                Ok(result) if self.modern && protocol::input_required(&result) => {
                    rounds += 1;
                    if rounds > MAX_ROUNDS {
                        return Err(error(format!(
                            "server '{}' kept asking for input during {what}; it was given up",
                            self.server
                        )));
                    }
                    params = self.fulfil(params, &result, hooks, &mut deadline).await?;
                }
                Ok(result) => return Ok(result),
                Err(Failure::Expired) if !renewed => {
                    renewed = true;
                    self.renew(carried.as_deref()).await?;
                }
                Err(failure) => return Err(self.failed(what, failure, limit)),
            }
        }
    }

    /// One request on the wire, followed to its answer: progress reported, the
    /// server's questions answered. The time a person takes to answer does not count
    /// against `deadline`: the server waits for the person too.
    async fn round(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
        hooks: &CallHooks<'_>,
        deadline: &mut Instant,
    ) -> Result<Value, Failure> {
        let start = self.wire.start(method, params, stamp);
        let mut exchange = tokio::time::timeout_at(*deadline, start)
            .await
            .map_err(|_| Failure::TimedOut)??;
        loop {
            let next = match tokio::time::timeout_at(*deadline, exchange.next()).await {
                Ok(next) => next?,
                Err(_) => {
                    exchange.cancel("the call timed out");
                    return Err(Failure::TimedOut);
                }
            };
            match next {
                Inbound::Done(result) => return Ok(result),
                Inbound::Progress(tick) => {
                    if let Some(progress) = hooks.progress {
                        progress.progress(tick.progress, tick.total, tick.message.as_deref());
                    }
                }
                Inbound::Request { id, method, params } => {
                    let asked_at = Instant::now();
                    let reply = asked::serve(&self.server, &method, &params, hooks.person).await;
                    *deadline += asked_at.elapsed();
                    exchange.answer(id, reply).await;
                }
            }
        }
    }

    /// `params` for the next round of a modern request that needs input: every
    /// question of `result` answered, its state echoed.
    async fn fulfil(
        &self,
        params: Value,
        result: &Value,
        hooks: &CallHooks<'_>,
        deadline: &mut Instant,
    ) -> Result<Value, McpError> {
        let empty = Map::new();
        let requests = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if requests.len() > MAX_INPUT_REQUESTS {
            return Err(error(format!(
                "server '{}' asked {} questions at once, more than the {MAX_INPUT_REQUESTS} allowed",
                self.server,
                requests.len()
            )));
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            let asked_params = request.get("params").unwrap_or(&Value::Null);
            let asked_at = Instant::now();
            let reply = asked::serve(&self.server, method, asked_params, hooks.person).await;
            *deadline += asked_at.elapsed();
            let Ok(response) = reply else {
                return Err(error(format!(
                    "server '{}' asked mur for {}, which mur does not do",
                    self.server,
                    crate::outbound::reply::said(method)
                )));
            };
            responses.insert(key.clone(), response);
        }
        let mut fields = match params {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        fields.insert("inputResponses".into(), Value::Object(responses));
        match result.get("requestState") {
            Some(state) if !state.is_null() => fields.insert("requestState".into(), state.clone()),
            _ => fields.remove("requestState"),
        };
        Ok(Value::Object(fields))
    }

    /// Opens a new HTTP session in place of `expired`, unless another call did.
    async fn renew(&self, expired: Option<&str>) -> Result<(), McpError> {
        let _one = self.renewing.lock().await;
        if !self.wire.forget_session(expired) {
            return Ok(());
        }
        if let Err(e) = self.handshake().await {
            let lost = format!(
                "server '{}' ended its session, and a new one could not be opened: {}",
                self.server, e.message
            );
            *self.lost.lock().unwrap_or_else(PoisonError::into_inner) = Some(lost.clone());
            return Err(error(lost));
        }
        Ok(())
    }

    /// `failure` of `what` as a sentence.
    fn failed(&self, what: &str, failure: Failure, limit: Duration) -> McpError {
        let server = &self.server;
        error(match failure {
            Failure::Rpc(e) => format!(
                "server '{server}' refused {what}: {} (error {})",
                crate::outbound::reply::said(&e.message),
                e.code
            ),
            Failure::Status(status @ (401 | 403)) => format!(
                "server '{server}' answered {what} with HTTP {status}: it did not accept the \
                 bearer token (bearer_token_env_var), or wants one"
            ),
            Failure::Status(status) => {
                format!("server '{server}' answered {what} with HTTP {status}")
            }
            Failure::Expired => format!("server '{server}' ended its session during {what}"),
            Failure::TimedOut => {
                format!(
                    "server '{server}' did not answer {what} within {}",
                    seconds(limit)
                )
            }
            Failure::Said(said) => said,
        })
    }
}

/// A tool of a `tools/list` page, as the server gave it.
fn raw_tool(tool: &Value) -> RawTool {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_string);
    RawTool {
        name: text(tool.get("name")).unwrap_or_default(),
        description: text(tool.get("description")),
        input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        title: text(tool.get("title"))
            .or_else(|| text(tool.get("annotations").and_then(|a| a.get("title")))),
    }
}

/// `30 s`, `1.5 s`.
fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
}
