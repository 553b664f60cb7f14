//! The handshake era (2025-03-26 to 2025-11-25): `initialize` settles a version and
//! opens a session whose `Mcp-Session-Id` every later request carries (`400` without
//! one, `404` for one that is not held); `DELETE` ends it. Notifications are
//! acknowledged with `202`; `notifications/cancelled` cancels the task of the call it
//! names.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::Era;
use super::methods::{self, Asked};
use super::out;
use super::sessions::{self, Full, Owner, idle_after, table};
use super::tool::Capsule;
use super::wire::{self, Fault, INVALID_REQUEST, Incoming, SESSION_HEADER, SESSION_NOT_FOUND};
use crate::http1::Request;
use crate::intake::Served;

pub async fn post(
    mut socket: TcpStream,
    request: &Request,
    served: &Served,
    message: Incoming,
    sse: bool,
) {
    let owner = owner(request, served);
    if let Incoming::Request { id, method, params } = &message
        && method == "initialize"
    {
        let (status, headers, body) = initialize(served, owner, id, params);
        return out::reply(&mut socket, status, headers, body).await;
    }
    let session = match session(request, &owner) {
        Ok(session) => session,
        Err((status, body)) => return out::reply(&mut socket, status, Vec::new(), body).await,
    };
    let (id, method, params) = match message {
        Incoming::Request { id, method, params } => (id, method, params),
        Incoming::Notification { method, params } => {
            if method == "notifications/cancelled" {
                cancel(served, &session, &owner, &params);
            }
            let headers = vec![(SESSION_HEADER, session)];
            return out::reply(&mut socket, "202 Accepted", headers, String::new()).await;
        }
        Incoming::Response => {
            let headers = vec![(SESSION_HEADER, session)];
            return out::reply(&mut socket, "202 Accepted", headers, String::new()).await;
        }
    };
    let asked = Asked {
        id,
        method,
        params,
        sse,
    };
    methods::answer(socket, request, served, Era::Handshake { session }, asked).await;
}

/// `DELETE`: the session ends, and with it the tasks of its calls in flight.
pub async fn delete(mut socket: TcpStream, request: &Request, served: &Served) {
    let owner = owner(request, served);
    let Some(id) = request.header(SESSION_HEADER).map(str::trim) else {
        let (status, body) = missing();
        return out::reply(&mut socket, status, Vec::new(), body).await;
    };
    let ended = table().end(id, &owner);
    let Some(tasks) = ended else {
        let (status, body) = not_found();
        return out::reply(&mut socket, status, Vec::new(), body).await;
    };
    for task in tasks {
        let _ = served.control.cancel(&task);
    }
    // `200` and no body, not `204`: every answer here carries a `content-length`,
    // which a `204` must not.
    out::reply(&mut socket, "200 OK", Vec::new(), String::new()).await;
}

fn owner(request: &Request, served: &Served) -> Owner {
    Owner::of(&served.session_id, request.header("authorization"))
}

/// `initialize`: the version the client asked for when this door speaks it (else the
/// newest it does), and a new session.
fn initialize(
    served: &Served,
    owner: Owner,
    id: &Value,
    params: &Value,
) -> (&'static str, Vec<(&'static str, String)>, String) {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        let fault = Fault::invalid_params("initialize names the client's protocolVersion");
        return ("200 OK", Vec::new(), wire::error(id, &fault));
    };
    let version = wire::HANDSHAKE_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(wire::LATEST_HANDSHAKE);
    let opened = table().open(owner, version, Instant::now(), idle_after());
    let session = match opened {
        Ok(session) => session,
        Err(Full::Busy(n)) => {
            let fault = Fault::new(
                wire::INTERNAL_ERROR,
                format!(
                    "this capsule holds its ceiling of {n} MCP sessions, each with a call in flight; retry once one ends"
                ),
            );
            return (
                "503 Service Unavailable",
                Vec::new(),
                wire::error(id, &fault),
            );
        }
    };
    let capsule = Capsule::of(&served.card);
    let result = json!({
        "protocolVersion": version,
        "capabilities": methods::capabilities(),
        "serverInfo": capsule.server_info(),
        "instructions": capsule.instructions()
    });
    let headers = vec![(SESSION_HEADER, session)];
    ("200 OK", headers, wire::result(id, result))
}

/// The session the request names, when `owner` holds it.
fn session(request: &Request, owner: &Owner) -> Result<String, (&'static str, String)> {
    let Some(id) = request.header(SESSION_HEADER).map(str::trim) else {
        return Err(missing());
    };
    match table().touch(id, owner, Instant::now(), idle_after()) {
        Some(_) => Ok(id.to_string()),
        None => Err(not_found()),
    }
}

fn missing() -> (&'static str, String) {
    let fault = Fault::new(
        INVALID_REQUEST,
        "Bad Request: the Mcp-Session-Id header is required; send initialize first to open a session",
    );
    ("400 Bad Request", wire::error(&Value::Null, &fault))
}

fn not_found() -> (&'static str, String) {
    let fault = Fault::new(
        SESSION_NOT_FOUND,
        "Session not found: it ended or expired; send initialize to open a new one",
    );
    ("404 Not Found", wire::error(&Value::Null, &fault))
}

/// `notifications/cancelled`: the task of the call it names is canceled; the call
/// then answers that it was (a client that canceled ignores the answer).
fn cancel(served: &Served, session: &str, owner: &Owner, params: &Value) {
    let Some(request) = params.get("requestId") else {
        return;
    };
    let task = sessions::table().task_of(session, owner, request);
    if let Some(task) = task {
        let _ = served.control.cancel(&task);
    }
}
