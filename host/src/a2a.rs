//! The A2A v1.0 door: the JSON-RPC binding of the A2A specification 1.0 on the same
//! `POST /` as the seed's methods, told apart by method name, and the agent card.
//!
//! The seed's wire is untouched: `message/stream`, `stream/watch` and their frames are
//! served as before, and a task is one task whichever door it came through. A task
//! sent with `SendMessage` writes the seed's frames on `stream/watch`; one sent with
//! `message/stream` answers `GetTask`. Both doors read the same typed events of the
//! wire; the v1 door reads them per task from the task store ([`crate::task_store`]),
//! numbered, so a client that lost its stream resumes it exactly (beyond the
//! specification, which has no cursor).

mod card;
mod methods;
mod rpc;
mod stream;

use serde_json::Value;
use tokio::net::TcpStream;

use crate::http1::Request;
use crate::intake::Served;
pub use card::{Guard, PATH as CARD_PATH, encode as card, is_card};

/// The v1.0 methods, every one answered here: the six the door serves, and the ones
/// it refuses with the specification's own error.
const METHODS: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

/// Whether `method` is one of the v1.0 binding's.
pub fn speaks(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Answers one v1.0 call on `socket`; with export on, the call is a server span named
/// for its method, under the `traceparent` it came with.
pub async fn answer(socket: TcpStream, request: &Request, served: &Served, call: Value) {
    let started = std::time::SystemTime::now();
    let method = call
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let task = answer_call(socket, request, served, call).await;
    served.traced(request, &method, started, task.as_deref());
}

/// A task's state as `a2a.task.state` says it (`completed`, `input-required`, ...).
pub fn state_word(state: &::a2a::TaskState) -> String {
    crate::telemetry::genai::a2a_state(&methods::state_name(state))
}

async fn answer_call(
    socket: TcpStream,
    request: &Request,
    served: &Served,
    call: Value,
) -> Option<String> {
    let id = match rpc::request_id(&call) {
        Ok(id) => id,
        Err(fault) => {
            stream::reply(socket, rpc::error(&Value::Null, &fault)).await;
            return None;
        }
    };
    if let Err(fault) = version(request) {
        stream::reply(socket, rpc::error(&id, &fault)).await;
        return None;
    }
    let method = call
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let params = match call.get("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(params) => params.clone(),
    };
    methods::call(socket, request, served, method, id, params).await
}

/// `A2A-Version`, as the specification reads it: absent or empty means 0.3, which this
/// door does not speak; any 1.x is 1.0.
fn version(request: &Request) -> Result<(), rpc::Fault> {
    let asked = request.header("a2a-version").unwrap_or_default().trim();
    let mut parts = asked.split('.');
    let major_is_1 = parts.next() == Some("1");
    let rest_numeric = parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if major_is_1 && rest_numeric {
        Ok(())
    } else {
        Err(rpc::Fault::version(asked))
    }
}
