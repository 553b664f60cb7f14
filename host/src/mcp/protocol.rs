//! The JSON-RPC 2.0 messages of MCP as the client writes and reads them: the two
//! protocol eras' envelopes, what one incoming message is, and what went wrong in
//! words that can still be said as a failure naming the server.
//!
//! Nothing here trusts a message: every field is looked up, never indexed, and a
//! message of the wrong shape is only "not a message".

use serde_json::{Map, Value, json};

/// The stateless era: every request carries the client's version, capabilities and
/// identity in `params._meta`, and the session starts with `server/discover`.
pub(super) const MODERN: &str = "2026-07-28";
/// The newest version of the `initialize` handshake.
pub(super) const HANDSHAKE: &str = "2025-11-25";
/// What an `initialize` answer may settle on.
pub(super) const HANDSHAKE_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", HANDSHAKE];

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The `_meta` key of W3C Trace Context's `traceparent`: unprefixed, one of the keys
/// (`traceparent`, `tracestate`, `baggage`) MCP reserves for it (SEP-414, the
/// 2026-07-28 revision), and what servers of the older eras read too.
pub(super) const TRACEPARENT: &str = "traceparent";

/// JSON-RPC's "method not found": what a server's request for something mur does not
/// do (sampling, say) is answered with.
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
/// A modern server's refusal of the version the client asked for.
pub(super) const UNSUPPORTED_VERSION: i64 = -32022;

/// Who the client is, as both eras name it.
pub(super) fn client_info() -> Value {
    json!({"name": "mur", "version": env!("CARGO_PKG_VERSION")})
}

/// `params` with the modern era's envelope in its `_meta` (kept, when it has one).
pub(super) fn modern(params: Value) -> Value {
    with_meta(
        params,
        [
            (META_VERSION, Value::from(MODERN)),
            (META_CAPABILITIES, json!({"elicitation": {"form": {}}})),
            (META_CLIENT_INFO, client_info()),
        ],
    )
}

/// `params` (made an object when it is not one) with `entries` added to its `_meta`.
pub(super) fn with_meta<'a>(
    params: Value,
    entries: impl IntoIterator<Item = (&'a str, Value)>,
) -> Value {
    let mut fields = match params {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    let mut meta = match fields.remove("_meta") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    meta.extend(entries.into_iter().map(|(k, v)| (k.to_string(), v)));
    fields.insert("_meta".into(), Value::Object(meta));
    Value::Object(fields)
}

/// Whether `value` is a `traceparent` as W3C Trace Context writes one:
/// `<version>-<trace-id>-<parent-id>-<flags>` in lowercase hex (2, 32, 16 and 2
/// digits), the version not `ff`, neither id all zeroes; a version past `00` may
/// carry more after a `-`.
pub(super) fn is_traceparent(value: &str) -> bool {
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    let (head, rest) = value.split_at_checked(55).unwrap_or((value, ""));
    let mut parts = head.split('-');
    let (Some(version), Some(trace), Some(parent), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && nonzero(trace)
        && hex(parent, 16)
        && nonzero(parent)
        && hex(flags, 2)
        && (rest.is_empty() || (version != "00" && rest.starts_with('-')))
}

/// The `initialize` request's params.
pub(super) fn initialize() -> Value {
    json!({
        "protocolVersion": HANDSHAKE,
        "capabilities": {"elicitation": {}},
        "clientInfo": client_info(),
    })
}

pub(super) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub(super) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// `notifications/cancelled` for our request `id`.
pub(super) fn cancelled(id: u64, reason: &str) -> Value {
    notification(
        "notifications/cancelled",
        json!({"requestId": id, "reason": reason}),
    )
}

/// The client's answer to the server's request `id`.
pub(super) fn answer(id: Value, reply: Result<Value, Refusal>) -> Value {
    match reply {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(refusal) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": refusal.code, "message": refusal.message},
        }),
    }
}

/// Why the client will not do what a server asked.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refusal {
    pub code: i64,
    pub message: String,
}

impl Refusal {
    pub(super) fn unsupported(method: &str) -> Refusal {
        Refusal {
            code: METHOD_NOT_FOUND,
            message: format!("{} is not supported by mur", crate::escape::line(method)),
        }
    }
}

/// A JSON-RPC error a server answered with.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// What went wrong with one request, before it is said as a failure.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Failure {
    /// The server answered with a JSON-RPC error.
    Rpc(RpcError),
    /// An HTTP server answered with this status and no JSON-RPC error.
    Status(u16),
    /// An HTTP server no longer knows the session the request carried.
    Expired,
    /// No answer came in time.
    TimedOut,
    /// Anything else, already a sentence naming the server.
    Said(String),
}

/// One message a server sent.
#[derive(Debug, PartialEq)]
pub(super) enum Incoming {
    /// The answer to a request; `id` is `None` when it is not one of ours (we only
    /// send integer ids).
    Response {
        id: Option<u64>,
        outcome: Result<Value, RpcError>,
    },
    /// The server asks the client something.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// JSON, but no JSON-RPC message.
    Other,
}

/// What `value` is as a message.
pub(super) fn classify(mut value: Value) -> Incoming {
    let Some(fields) = value.as_object_mut() else {
        return Incoming::Other;
    };
    let id = fields.remove("id").filter(|id| !id.is_null());
    let params = fields.remove("params").unwrap_or(Value::Null);
    if let Some(Value::String(method)) = fields.remove("method") {
        return match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        };
    }
    let outcome = if let Some(error) = fields.remove("error").filter(|e| !e.is_null()) {
        Err(rpc_error(&error))
    } else if let Some(result) = fields.remove("result") {
        Ok(result)
    } else {
        return Incoming::Other;
    };
    Incoming::Response {
        id: id.as_ref().and_then(Value::as_u64),
        outcome,
    }
}

fn rpc_error(error: &Value) -> RpcError {
    RpcError {
        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_string(),
        data: error.get("data").cloned(),
    }
}

/// A progress report.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tick {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// The token of a `notifications/progress` (ours are integers).
pub(super) fn progress_token(params: &Value) -> Option<u64> {
    params.get("progressToken")?.as_u64()
}

/// The report of a `notifications/progress`.
pub(super) fn tick(params: &Value) -> Option<Tick> {
    Some(Tick {
        progress: params.get("progress")?.as_f64()?,
        total: params.get("total").and_then(Value::as_f64),
        message: params
            .get("message")
            .and_then(Value::as_str)
            .map(crate::outbound::reply::said),
    })
}

/// Whether a modern result asks for input before the request can finish.
pub(super) fn input_required(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// Whether a `server/discover` result names the modern version.
pub(super) fn speaks_modern(result: &Value) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| versions.iter().any(|v| v.as_str() == Some(MODERN)))
}

/// Whether a `-32022` refusal of the probe names only versions mur speaks neither of:
/// a modern-only server mur cannot talk to, where falling back would only fail later.
pub(super) fn disjoint(error: &RpcError) -> bool {
    if error.code != UNSUPPORTED_VERSION {
        return false;
    }
    let Some(supported) = error
        .data
        .as_ref()
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    !supported.iter().any(|v| {
        v.as_str()
            .is_some_and(|v| v == MODERN || HANDSHAKE_VERSIONS.contains(&v))
    })
}

/// A size as a person reads it: `50 MiB`, `64 KiB`, `300 bytes`.
pub(super) fn size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else if bytes >= KIB {
        format!("{:.1} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_their_fields() {
        let response = classify(json!({"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}));
        assert_eq!(
            response,
            Incoming::Response {
                id: Some(7),
                outcome: Ok(json!({"a": 1}))
            }
        );
        let foreign = classify(json!({"jsonrpc": "2.0", "id": "7", "result": {}}));
        assert!(matches!(foreign, Incoming::Response { id: None, .. }));
        let error = classify(json!({"id": 2, "error": {"code": -32601, "message": "no"}}));
        assert!(matches!(
            error,
            Incoming::Response {
                id: Some(2),
                outcome: Err(RpcError { code: -32601, .. })
            }
        ));
        let asked = classify(json!({"id": "s1", "method": "ping"}));
        assert!(matches!(asked, Incoming::Request { ref method, .. } if method == "ping"));
        let told = classify(json!({"method": "notifications/message", "params": {}}));
        assert!(matches!(told, Incoming::Notification { .. }));
        assert_eq!(classify(json!([1, 2])), Incoming::Other);
        assert_eq!(classify(json!({"id": 1})), Incoming::Other);
        assert_eq!(classify(json!({"method": 5})), Incoming::Other);
    }

    #[test]
    fn the_modern_envelope_keeps_what_meta_had() {
        let params = modern(json!({"name": "t", "_meta": {"progressToken": 3}}));
        let meta = &params["_meta"];
        assert_eq!(meta["progressToken"], 3);
        assert_eq!(meta[META_VERSION], MODERN);
        assert_eq!(
            meta[META_CAPABILITIES],
            json!({"elicitation": {"form": {}}})
        );
        assert_eq!(meta[META_CLIENT_INFO]["name"], "mur");
        assert_eq!(modern(json!("junk"))["_meta"][META_VERSION], MODERN);
    }

    #[test]
    fn only_a_well_formed_traceparent_is_one() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert!(is_traceparent(good));
        assert!(is_traceparent(&format!("01{}-later", &good[2..])));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-001",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0\n",
        ] {
            assert!(!is_traceparent(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_disjoint_refusal_is_only_one_naming_unknown_versions() {
        let refusal = |supported: Value| RpcError {
            code: UNSUPPORTED_VERSION,
            message: "no".into(),
            data: Some(json!({"supported": supported})),
        };
        assert!(disjoint(&refusal(json!(["2027-01-01"]))));
        assert!(!disjoint(&refusal(json!(["2025-06-18"]))));
        assert!(!disjoint(&RpcError {
            code: METHOD_NOT_FOUND,
            message: "no".into(),
            data: None
        }));
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(size(50 * 1024 * 1024), "50 MiB");
        assert_eq!(size(64 * 1024), "64 KiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(12), "12 bytes");
    }
}
