//! The stateless era (2026-07-28): no handshake and no session; every request is
//! self-contained, its protocol version and the client's capabilities in
//! `params._meta`, and the version again in the `MCP-Protocol-Version` header, which
//! must agree. Notifications are acknowledged and dropped: this era defines none a
//! client sends over HTTP (closing a response stream is how a call is canceled).

use serde_json::Value;
use tokio::net::TcpStream;

use super::Era;
use super::methods::{self, Asked};
use super::out;
use super::wire::{
    self, CLIENT_CAPABILITIES_KEY, Fault, HEADER_MISMATCH, INVALID_PARAMS, Incoming, METHOD_HEADER,
    METHOD_NOT_FOUND, NAME_HEADER, PROTOCOL_VERSION_KEY, VERSION_HEADER,
};
use crate::http1::Request;
use crate::intake::Served;

/// The HTTP status the era gives an error, by its code (the codes the specification
/// maps; any other is a `200` carrying the error).
pub fn status(code: i64) -> &'static str {
    match code {
        METHOD_NOT_FOUND => "404 Not Found",
        wire::PARSE_ERROR
        | wire::INVALID_REQUEST
        | INVALID_PARAMS
        | HEADER_MISMATCH
        | wire::UNSUPPORTED_VERSION => "400 Bad Request",
        _ => "200 OK",
    }
}

pub async fn post(
    mut socket: TcpStream,
    request: &Request,
    served: &Served,
    message: Incoming,
    sse: bool,
) {
    let asked = request
        .header(VERSION_HEADER)
        .map(str::trim)
        .unwrap_or_default();
    let (id, method, params) = match message {
        Incoming::Request { id, method, params } => (id, method, params),
        Incoming::Notification { .. } | Incoming::Response => {
            let (status, body) = if wire::MODERN_VERSIONS.contains(&asked) {
                ("202 Accepted", String::new())
            } else {
                let fault = Fault::unsupported_version(&Value::from(asked));
                ("400 Bad Request", wire::error(&Value::Null, &fault))
            };
            return out::reply(&mut socket, status, Vec::new(), body).await;
        }
    };
    let capabilities = match envelope(request, &method, &params) {
        Ok(capabilities) => capabilities,
        Err(fault) => {
            let body = wire::error(&id, &fault);
            return out::reply(&mut socket, status(fault.code), Vec::new(), body).await;
        }
    };
    let asked = Asked {
        id,
        method,
        params,
        sse,
    };
    let era = Era::Modern { capabilities };
    methods::answer(socket, request, served, era, asked).await;
}

/// The request's envelope, checked rung by rung as the SDKs check it: the `_meta`
/// pair, then the headers against the body, then the version. The client's
/// capabilities when it passes.
fn envelope(request: &Request, method: &str, params: &Value) -> Result<Value, Fault> {
    let meta = wire::meta(params);
    let pair = meta.and_then(|m| {
        let version = m.get(PROTOCOL_VERSION_KEY)?;
        Some((version, m.get(CLIENT_CAPABILITIES_KEY)?))
    });
    let Some((version, capabilities)) = pair else {
        return Err(Fault::invalid_params(format!(
            "params._meta must be an object carrying the required '{PROTOCOL_VERSION_KEY}' and '{CLIENT_CAPABILITIES_KEY}' envelope keys"
        )));
    };
    let mismatch = |what: String| Err(Fault::new(HEADER_MISMATCH, what));
    let header = request.header(VERSION_HEADER).map(str::trim);
    if header.is_none() || header != version.as_str() {
        return mismatch(format!(
            "{VERSION_HEADER} header does not match the request envelope's protocol version"
        ));
    }
    if request
        .header(METHOD_HEADER)
        .is_some_and(|m| m.trim() != method)
    {
        return mismatch(format!(
            "{METHOD_HEADER} header does not match the request body's method"
        ));
    }
    if let Some(name) = named(request, method, params) {
        return mismatch(format!(
            "{NAME_HEADER} header does not match the request body's '{name}' parameter"
        ));
    }
    if !version
        .as_str()
        .is_some_and(|v| wire::MODERN_VERSIONS.contains(&v))
    {
        return Err(Fault::unsupported_version(version));
    }
    Ok(capabilities.clone())
}

/// The body parameter an `Mcp-Name` header disagrees with, if it does. A value the
/// client wrapped in base64 (`=?base64?…?=`, for a name a header cannot carry) is not
/// compared: this door's tool name never needs wrapping.
fn named(request: &Request, method: &str, params: &Value) -> Option<&'static str> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    let header = request.header(NAME_HEADER)?.trim();
    if header.starts_with("=?base64?") {
        return None;
    }
    let body = params.get(key)?.as_str()?;
    (header != body).then_some(key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/mcp".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    fn params(version: &str) -> Value {
        json!({"name": "echo", "_meta": {PROTOCOL_VERSION_KEY: version, CLIENT_CAPABILITIES_KEY: {"elicitation": {}}}})
    }

    #[test]
    fn the_envelope_is_checked_rung_by_rung() {
        let good = request(&[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "echo"),
        ]);
        let caps = envelope(&good, "tools/call", &params("2026-07-28")).unwrap();
        assert_eq!(caps, json!({"elicitation": {}}));
        let code = |r: &Request, p: &Value| envelope(r, "tools/call", p).unwrap_err().code;
        assert_eq!(code(&good, &json!({"name": "echo"})), INVALID_PARAMS);
        let bare = request(&[]);
        assert_eq!(code(&bare, &params("2026-07-28")), HEADER_MISMATCH);
        let other = request(&[("MCP-Protocol-Version", "2026-07-28")]);
        assert_eq!(code(&other, &params("2099-01-01")), HEADER_MISMATCH);
        let method = request(&[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ]);
        assert_eq!(code(&method, &params("2026-07-28")), HEADER_MISMATCH);
        let name = request(&[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Name", "x")]);
        assert_eq!(code(&name, &params("2026-07-28")), HEADER_MISMATCH);
        let future = request(&[("MCP-Protocol-Version", "2099-01-01")]);
        let fault = envelope(&future, "tools/call", &params("2099-01-01")).unwrap_err();
        assert_eq!(fault, Fault::unsupported_version(&json!("2099-01-01")));
        assert_eq!(status(fault.code), "400 Bad Request");
        assert_eq!(status(METHOD_NOT_FOUND), "404 Not Found");
    }
}
