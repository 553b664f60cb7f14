//! What each request is answered, in either era: `ping`, `tools/list`, the stateless
//! era's `server/discover`, and `tools/call` (handed to [`super::call`]). Anything
//! else is not found; the capabilities name tools only, so clients ask for nothing
//! more.

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::call::{self, Call};
use super::out::{self, Out};
use super::tool::Capsule;
use super::wire::{self, Fault};
use super::{Era, Era::Modern};
use crate::http1::Request;
use crate::intake::Served;
use crate::queue::Acceptance;

/// One JSON-RPC request, as read.
pub struct Asked {
    pub id: Value,
    pub method: String,
    pub params: Value,
    /// The client reads event streams.
    pub sse: bool,
}

/// Answers `asked` in `era`.
pub async fn answer(socket: TcpStream, request: &Request, served: &Served, era: Era, asked: Asked) {
    let Asked {
        id,
        method,
        params,
        sse,
    } = asked;
    let capsule = Capsule::of(&served.card);
    let answered = match method.as_str() {
        "tools/call" => {
            let out = Out::new(socket, era.headers(), sse);
            let call = Call {
                request,
                served,
                era: &era,
                capsule: &capsule,
                id,
            };
            return call::run(out, call, params).await;
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(list(served, &capsule, &era)),
        "server/discover" if matches!(era, Modern { .. }) => Ok(discover(&capsule)),
        _ => Err(Fault::method_not_found(&method)),
    };
    let (status, body) = written(&era, &capsule, &id, answered);
    let mut socket = socket;
    out::reply(&mut socket, status, era.headers(), body).await;
}

/// The status and body of an answer.
pub fn written(
    era: &Era,
    capsule: &Capsule,
    id: &Value,
    answered: Result<Value, Fault>,
) -> (&'static str, String) {
    match answered {
        Ok(result) => ("200 OK", wire::result(id, era.complete(result, capsule))),
        Err(fault) => (era.status(&fault), wire::error(id, &fault)),
    }
}

/// The tools: the capsule's one, unless it takes no tasks at its address.
fn list(served: &Served, capsule: &Capsule, era: &Era) -> Value {
    let tools = if served.queue.policy().acceptance == Acceptance::None {
        Vec::new()
    } else {
        vec![capsule.tool()]
    };
    let mut result = json!({"tools": tools});
    if matches!(era, Modern { .. }) {
        // The stateless era's listing is cacheable; the capsule's tool outlives no
        // restart, so it is never fresh for long, and never shared across callers.
        result["ttlMs"] = json!(0);
        result["cacheScope"] = json!("private");
    }
    result
}

/// `server/discover`: the stateless era's versions, and what the server offers.
fn discover(capsule: &Capsule) -> Value {
    json!({
        "supportedVersions": wire::MODERN_VERSIONS,
        "capabilities": capabilities(),
        "instructions": capsule.instructions(),
        "ttlMs": 0,
        "cacheScope": "private"
    })
}

/// The server's capabilities: tools, whose list never changes while it serves.
pub fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}
