//! The MCP door: the capsule's address also answers the Model Context Protocol over
//! streamable HTTP at `mcp` beneath it (`/mcp` for `mur run`, `/c/<id>/mcp` under
//! `mur serve`), behind the same door as its A2A address. It offers one tool named
//! after the capsule; calling it hands the capsule a task through the intake the A2A
//! door uses, and answers with the task's answer.
//!
//! Both eras of the protocol are spoken, told apart by the `MCP-Protocol-Version`
//! header as the official SDKs route them: without one (or with a handshake version)
//! the handshake era ([`handshake`]: `initialize`, then a session), with any other
//! the stateless era ([`modern`]: every request carries its version in `_meta`). What
//! a request is for is answered by [`methods`] in either era, `tools/call` by [`call`].

mod call;
mod handshake;
mod methods;
mod modern;
mod out;
mod sessions;
mod tool;
mod wire;

use serde_json::Value;
use tokio::net::TcpStream;

use crate::door::Door;
use crate::http1::Request;
use crate::intake::Served;
use wire::{Fault, INVALID_REQUEST, PARSE_ERROR, VERSION_HEADER};

/// Where the door answers, relative to the capsule's address.
pub const PATH: &str = "mcp";

/// Whether the request is for the MCP door beneath a capsule's address.
pub fn is_mcp(request: &Request) -> bool {
    request
        .path
        .strip_suffix(PATH)
        .is_some_and(|address| address.ends_with('/'))
}

/// Whether `mur run`'s door lets the request in. Unlike the address itself, the MCP
/// path has no public page: every request needs the token when the door asks for one.
pub fn admits(door: &Door, request: &Request) -> bool {
    match door {
        Door::Public => true,
        Door::Bearer(hash) => hash.admits(request.header("authorization")),
    }
}

/// Answers one request to the door (the door has let it in).
pub async fn answer(mut socket: TcpStream, request: Request, served: &Served) {
    match request.method.as_str() {
        "POST" => post(socket, request, served).await,
        "DELETE" => handshake::delete(socket, &request, served).await,
        // No stream of the server's own to offer a GET: the specification's 405.
        _ => {
            let refused = Fault::new(
                INVALID_REQUEST,
                "Method Not Allowed: POST JSON-RPC messages to this address (DELETE ends a session)",
            );
            let allow = vec![("allow", "POST, DELETE".to_string())];
            out::reply(
                &mut socket,
                "405 Method Not Allowed",
                allow,
                wire::error(&Value::Null, &refused),
            )
            .await;
        }
    }
}

async fn post(mut socket: TcpStream, request: Request, served: &Served) {
    let refuse = |status, code, message: &str| {
        (
            status,
            wire::error(&Value::Null, &Fault::new(code, message)),
        )
    };
    let (json, sse) = out::accepts(&request);
    let refused = if !is_json(&request) {
        Some(refuse(
            "415 Unsupported Media Type",
            INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
        ))
    } else if !json {
        Some(refuse(
            "406 Not Acceptable",
            INVALID_REQUEST,
            "Not Acceptable: the client must accept application/json (and text/event-stream for progress)",
        ))
    } else {
        None
    };
    if let Some((status, body)) = refused {
        return out::reply(&mut socket, status, Vec::new(), body).await;
    }
    let message = match serde_json::from_slice::<Value>(&request.body) {
        Ok(body) => wire::incoming(body),
        Err(e) => Err(Fault::new(PARSE_ERROR, format!("Parse error: {e}"))),
    };
    let message = match message {
        Ok(message) => message,
        Err(fault) => {
            let body = wire::error(&Value::Null, &fault);
            return out::reply(&mut socket, "400 Bad Request", Vec::new(), body).await;
        }
    };
    let asked = request.header(VERSION_HEADER).map(str::trim);
    match asked {
        Some(version) if !wire::HANDSHAKE_VERSIONS.contains(&version) => {
            modern::post(socket, &request, served, message, sse).await
        }
        _ => handshake::post(socket, &request, served, message, sse).await,
    }
}

fn is_json(request: &Request) -> bool {
    request
        .header("content-type")
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// The era a request is answered in.
enum Era {
    /// The stateless era: results say `resultType`, errors carry their HTTP status.
    Modern { capabilities: Value },
    /// The handshake era, within the session `session`.
    Handshake { session: String },
}

impl Era {
    /// The headers every answer in the era carries.
    fn headers(&self) -> Vec<(&'static str, String)> {
        match self {
            Era::Modern { .. } => Vec::new(),
            Era::Handshake { session, .. } => vec![(wire::SESSION_HEADER, session.clone())],
        }
    }

    /// A result as the era writes it: the stateless era's carry `resultType` (the
    /// schema requires it) and name the server in `_meta`.
    fn complete(&self, mut result: Value, capsule: &tool::Capsule) -> Value {
        if let (Era::Modern { .. }, Value::Object(map)) = (self, &mut result) {
            map.entry("resultType").or_insert("complete".into());
            let stamp = serde_json::json!({wire::SERVER_INFO_KEY: capsule.server_info()});
            map.insert("_meta".into(), stamp);
        }
        result
    }

    /// The HTTP status of an error answer: the stateless era maps the codes the
    /// specification names; the handshake era answers every request error with `200`.
    fn status(&self, fault: &Fault) -> &'static str {
        if matches!(self, Era::Handshake { .. }) {
            return "200 OK";
        }
        modern::status(fault.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str) -> Request {
        Request {
            method: "POST".into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn the_door_is_mcp_beneath_an_address() {
        for path in ["/mcp", "/c/cap_1/mcp"] {
            assert!(is_mcp(&request(path)), "{path}");
        }
        for path in ["/", "/mcp/", "/xmcp", "/c/cap_1mcp", "/mcp?x=1", "mcp"] {
            assert!(!is_mcp(&request(path)), "{path}");
        }
    }

    #[test]
    fn a_bearer_door_wants_the_token_even_from_a_browser() {
        let door = Door::Bearer(crate::token::Hash::of("mur_t"));
        let mut page = request("/mcp");
        page.method = "GET".into();
        page.headers = vec![("Accept".into(), "text/html".into())];
        assert!(!admits(&door, &page));
        page.headers
            .push(("Authorization".into(), "Bearer mur_t".into()));
        assert!(admits(&door, &page));
        assert!(admits(&Door::Public, &request("/mcp")));
    }
}
