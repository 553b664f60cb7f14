//! One request on either transport, as the connection sees it: sent with a stamp of
//! what the era and the call want, then followed message by message until its answer.

use std::time::Duration;

use serde_json::Value;

use super::http::{self, Http};
use super::protocol::{Failure, Refusal, Tick};
use super::stdio::{self, Stdio};

/// What a request carries beyond its method and params.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stamp<'a> {
    /// The `MCP-Protocol-Version` an HTTP request carries, once there is one.
    pub version: Option<&'a str>,
    /// The stateless era: an HTTP request names its method (and tool) in headers,
    /// and a request is given up by dropping its answer, not with a notification.
    pub modern: bool,
    /// Ask for progress (the request's id is its token).
    pub progress: bool,
    /// A person can answer the server's questions for this request.
    pub person: bool,
    /// The server is told when the request is given up (never for `initialize` and
    /// `server/discover`, which the specification forbids cancelling).
    pub cancellable: bool,
    /// The W3C `traceparent` an HTTP request carries as a header (already checked,
    /// and in `params._meta` too).
    pub traceparent: Option<&'a str>,
}

/// The next thing one request hears.
#[derive(Debug)]
pub(super) enum Inbound {
    Progress(Tick),
    /// The server asks the client something, to answer before the request goes on.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// The request's result.
    Done(Value),
}

pub(super) enum Wire {
    Stdio(Stdio),
    Http(Http),
}

pub(super) enum Exchange {
    Stdio(stdio::Exchange),
    // Boxed: an HTTP exchange holds a response stream, many times a stdio one's size.
    Http(Box<http::Exchange>),
}

impl Wire {
    pub(super) async fn start(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
    ) -> Result<Exchange, Failure> {
        match self {
            Wire::Stdio(stdio) => stdio
                .start(method, params, stamp)
                .await
                .map(Exchange::Stdio),
            Wire::Http(http) => http
                .start(method, params, stamp)
                .await
                .map(|e| Exchange::Http(Box::new(e))),
        }
    }

    pub(super) async fn notify(
        &self,
        method: &str,
        params: Value,
        stamp: &Stamp<'_>,
    ) -> Result<(), Failure> {
        match self {
            Wire::Stdio(stdio) => stdio.notify(method, params).await,
            Wire::Http(http) => http.notify(method, params, stamp).await,
        }
    }

    pub(super) fn gone(&self) -> Option<String> {
        match self {
            Wire::Stdio(stdio) => stdio.gone(),
            Wire::Http(_) => None,
        }
    }

    pub(super) fn garbled(&self) -> u64 {
        match self {
            Wire::Stdio(stdio) => stdio.garbled(),
            Wire::Http(http) => http.garbled(),
        }
    }

    /// The HTTP session requests carry now.
    pub(super) fn session(&self) -> Option<String> {
        match self {
            Wire::Stdio(_) => None,
            Wire::Http(http) => http.session(),
        }
    }

    /// Forgets the HTTP session `expired`, unless another took its place already;
    /// whether it was forgotten (and a new one must be opened).
    pub(super) fn forget_session(&self, expired: Option<&str>) -> bool {
        match self {
            Wire::Stdio(_) => false,
            Wire::Http(http) => http.forget_session(expired),
        }
    }

    pub(super) async fn close(self, within: Duration, version: Option<&str>) {
        match self {
            Wire::Stdio(stdio) => stdio.close(within).await,
            Wire::Http(http) => http.close(within, version).await,
        }
    }
}

impl Exchange {
    pub(super) async fn next(&mut self) -> Result<Inbound, Failure> {
        match self {
            Exchange::Stdio(exchange) => exchange.next().await,
            Exchange::Http(exchange) => exchange.next().await,
        }
    }

    pub(super) async fn answer(&self, id: Value, reply: Result<Value, Refusal>) {
        match self {
            Exchange::Stdio(exchange) => exchange.answer(id, reply).await,
            Exchange::Http(exchange) => exchange.answer(id, reply).await,
        }
    }

    pub(super) fn cancel(&mut self, reason: &str) {
        match self {
            Exchange::Stdio(exchange) => exchange.cancel(reason),
            Exchange::Http(exchange) => exchange.cancel(reason),
        }
    }
}
