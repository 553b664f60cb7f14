//! The MCP wire as this door speaks it: the protocol versions of both eras, the
//! JSON-RPC envelopes and error codes, and what one POSTed body is.

use serde_json::{Map, Value, json};

/// The versions the `initialize` handshake negotiates, oldest first. A client asking
/// for another (2024-11-05 predates streamable HTTP) is offered the newest.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2025-03-26", "2025-06-18", "2025-11-25"];
/// The newest handshake version: what a client asking for an unknown one is offered.
pub const LATEST_HANDSHAKE: &str = "2025-11-25";
/// The stateless era's versions: each request carries its own in `_meta`.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];

/// The `_meta` keys of the stateless era's per-request envelope.
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// Headers of the transport.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
pub const SESSION_HEADER: &str = "mcp-session-id";
pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A session the client names is not (or no longer) held: answered with `404`.
pub const SESSION_NOT_FOUND: i64 = -32001;
/// The stateless era: a routing header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// The stateless era: the request's version is not served; `data` names those that are.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A JSON-RPC error: its code, message and optional data.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Fault {
    pub fn new(code: i64, message: impl Into<String>) -> Fault {
        Fault {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn method_not_found(method: &str) -> Fault {
        Fault::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    pub fn invalid_params(why: impl std::fmt::Display) -> Fault {
        Fault::new(INVALID_PARAMS, format!("Invalid params: {why}"))
    }

    /// The stateless era's answer to a version it does not serve.
    pub fn unsupported_version(requested: &Value) -> Fault {
        Fault {
            code: UNSUPPORTED_VERSION,
            message: "Unsupported protocol version".into(),
            data: Some(json!({"supported": MODERN_VERSIONS, "requested": requested})),
        }
    }

    fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.clone().into());
        if let Some(data) = &self.data {
            error.insert("data".into(), data.clone());
        }
        Value::Object(error)
    }
}

/// `{"jsonrpc":"2.0","id":…,"error":…}`.
pub fn error(id: &Value, fault: &Fault) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": fault.to_json()}).to_string()
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn result(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// A server notification, as one message of a response stream.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// What a POSTed body holds.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request: it is owed an answer.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: acknowledged with `202`, never answered.
    Notification { method: String, params: Value },
    /// A client's answer to a request of ours (this door sends none): acknowledged.
    Response,
}

/// Reads one JSON-RPC message. A batch (an array) is refused: 2025-06-18 dropped
/// batching, and the stateless era takes one message per POST.
pub fn incoming(body: Value) -> Result<Incoming, Fault> {
    let Value::Object(mut message) = body else {
        let why = if body.is_array() {
            "batches are not supported: send one JSON-RPC message per POST"
        } else {
            "the body must be one JSON-RPC request or notification object"
        };
        return Err(Fault::new(
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        ));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Fault::new(
            INVALID_REQUEST,
            "Invalid Request: \"jsonrpc\" must be \"2.0\"",
        ));
    }
    let params = match message.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => params,
        Some(_) => return Err(Fault::invalid_params("params must be an object")),
    };
    let method = match message.get("method") {
        Some(Value::String(method)) => Some(method.clone()),
        None => None,
        Some(_) => {
            return Err(Fault::new(
                INVALID_REQUEST,
                "Invalid Request: \"method\" must be a string",
            ));
        }
    };
    match (message.remove("id"), method) {
        (None, Some(method)) => Ok(Incoming::Notification { method, params }),
        (Some(id), Some(method)) => match id {
            // MCP narrows JSON-RPC: an id is a string or an integer, never null.
            Value::String(_) | Value::Number(_) => Ok(Incoming::Request { id, method, params }),
            _ => Err(Fault::new(
                INVALID_REQUEST,
                "Invalid Request: \"id\" must be a string or an integer",
            )),
        },
        (Some(_), None) if message.contains_key("result") || message.contains_key("error") => {
            Ok(Incoming::Response)
        }
        _ => Err(Fault::new(
            INVALID_REQUEST,
            "Invalid Request: a request or notification names its \"method\"",
        )),
    }
}

/// The request's `_meta` object, if it sent one.
pub fn meta(params: &Value) -> Option<&Map<String, Value>> {
    params.get("_meta").and_then(Value::as_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_is_read_and_every_other_shape_refused() {
        let request = incoming(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).unwrap();
        assert_eq!(
            request,
            Incoming::Request {
                id: json!(7),
                method: "ping".into(),
                params: json!({})
            }
        );
        let note = incoming(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(matches!(note, Ok(Incoming::Notification { .. })));
        let answer = incoming(json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(answer, Ok(Incoming::Response));
        for (body, code) in [
            (
                json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
                INVALID_REQUEST,
            ),
            (json!("ping"), INVALID_REQUEST),
            (json!({"id": 1, "method": "ping"}), INVALID_REQUEST),
            (
                json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
                INVALID_REQUEST,
            ),
            (
                json!({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
                INVALID_REQUEST,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": 3}),
                INVALID_REQUEST,
            ),
            (json!({"jsonrpc": "2.0", "id": 1}), INVALID_REQUEST),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}),
                INVALID_PARAMS,
            ),
        ] {
            assert_eq!(incoming(body.clone()).unwrap_err().code, code, "{body}");
        }
        let batch = incoming(json!([])).unwrap_err();
        assert!(
            batch.message.contains("batches are not supported"),
            "{batch:?}"
        );
    }

    #[test]
    fn an_unsupported_version_names_the_served_ones() {
        let body = error(&json!(1), &Fault::unsupported_version(&json!("2099-01-01")));
        assert_eq!(
            body,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2099-01-01"}}}"#
        );
    }
}
