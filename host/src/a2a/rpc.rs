//! JSON-RPC 2.0 envelopes of the v1.0 binding, and its errors with the specification's
//! codes. Errors carry a `google.rpc.ErrorInfo` detail (its reason and domain), which
//! the SDKs read back into typed errors. Every envelope is built in one key order, so
//! the same answer is the same bytes.

use ::a2a::error_code as code;
use serde_json::{Value, json};

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const A2A_DOMAIN: &str = "a2a-protocol.org";
const MUR_DOMAIN: &str = "murmur.nexus";

/// A v1 error: the code, the message, and the reason its detail names.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub code: i32,
    pub message: String,
    reason: &'static str,
    domain: &'static str,
    /// `ErrorInfo.metadata`: string values only, as the detail's type says.
    facts: Vec<(&'static str, String)>,
}

impl Fault {
    fn of(code: i32, message: impl Into<String>) -> Fault {
        Fault {
            code,
            message: message.into(),
            reason: ::a2a::error_reason(code),
            domain: A2A_DOMAIN,
            facts: Vec::new(),
        }
    }

    pub fn invalid_request(why: &str) -> Fault {
        Fault::of(code::INVALID_REQUEST, format!("Invalid Request: {why}"))
    }

    pub fn invalid_params(why: impl std::fmt::Display) -> Fault {
        Fault::of(code::INVALID_PARAMS, format!("Invalid params: {why}"))
    }

    pub fn task_not_found(id: &str) -> Fault {
        Fault::of(code::TASK_NOT_FOUND, format!("task {id} not found"))
            .with("taskId", id.to_string())
    }

    pub fn not_cancelable(id: &str, state: &str) -> Fault {
        Fault::of(
            code::TASK_NOT_CANCELABLE,
            format!("task {id} cannot be canceled: it has ended ({state})"),
        )
        .with("taskId", id.to_string())
    }

    pub fn unsupported(why: impl Into<String>) -> Fault {
        Fault::of(code::UNSUPPORTED_OPERATION, why)
    }

    pub fn push_not_supported() -> Fault {
        Fault::of(
            code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "push notifications are not supported: stream the task, or subscribe to it",
        )
    }

    pub fn content_type(why: &str) -> Fault {
        Fault::of(code::CONTENT_TYPE_NOT_SUPPORTED, why)
    }

    pub fn version(asked: &str) -> Fault {
        let shown = if asked.is_empty() {
            "0.3 (no A2A-Version header)".to_string()
        } else {
            asked.to_string()
        };
        Fault::of(
            code::VERSION_NOT_SUPPORTED,
            format!("A2A version {shown} is not supported: this capsule speaks 1.0 (send the header A2A-Version: 1.0)"),
        )
        .with("supportedVersions", "1.0".to_string())
    }

    pub fn internal(why: impl Into<String>) -> Fault {
        Fault::of(code::INTERNAL_ERROR, why)
    }

    /// The events after `after` are no longer kept: the stream cannot resume losslessly.
    pub fn events_gone(id: &str, after: u64, first_available: u64) -> Fault {
        Fault {
            code: code::INVALID_PARAMS,
            message: format!(
                "events after {after} of task {id} are no longer kept; the first kept is {first_available}: read the task with GetTask, then subscribe without Last-Event-ID"
            ),
            reason: "EVENTS_NOT_KEPT",
            domain: MUR_DOMAIN,
            facts: vec![
                ("taskId", id.to_string()),
                ("lastEventId", after.to_string()),
                ("firstAvailableSequence", first_available.to_string()),
            ],
        }
    }

    fn with(mut self, key: &'static str, value: String) -> Fault {
        self.facts.push((key, value));
        self
    }

    /// The `error` member of an envelope.
    pub fn to_json(&self) -> Value {
        let mut info = serde_json::Map::new();
        info.insert("@type".into(), ERROR_INFO.into());
        info.insert("reason".into(), self.reason.into());
        info.insert("domain".into(), self.domain.into());
        if !self.facts.is_empty() {
            let facts: serde_json::Map<String, Value> = self
                .facts
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
                .collect();
            info.insert("metadata".into(), Value::Object(facts));
        }
        json!({"code": self.code, "message": self.message, "data": [info]})
    }
}

/// `{"jsonrpc":"2.0","id":…,"error":…}`.
pub fn error(id: &Value, fault: &Fault) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": fault.to_json()}).to_string()
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` around an already encoded result.
pub fn result(id: &Value, result: &str) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}")
}

/// The request's id when it is one JSON-RPC allows (string, number or null).
pub fn request_id(call: &Value) -> Result<Value, Fault> {
    if call.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Fault::invalid_request("\"jsonrpc\" must be \"2.0\""));
    }
    match call.get("id") {
        None => Ok(Value::Null),
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Ok(id.clone()),
        Some(_) => Err(Fault::invalid_request(
            "\"id\" must be a string, a number or null",
        )),
    }
}
