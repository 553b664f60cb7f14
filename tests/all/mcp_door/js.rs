//! The official TypeScript SDK (`@modelcontextprotocol/sdk` 1.32.2, the SDK Claude Code
//! and most MCP clients are built on) as a client of the door: `Client` over
//! `StreamableHTTPClientTransport` (`tests/mcp/npm/door_client.mjs`, run by
//! `common::mcp_servers::door_client`) lists the capsule's tool, calls it with progress
//! and gets the scripted answer byte for byte; behind a token it gets in with the token
//! and is refused without it. Without node or npm the tests skip, printing why.

use serde_json::{Value, json};

use super::{BEARER, DESCRIPTION, Door, NAME, a2a, token};
use crate::common::host::Host;
use crate::common::mcp_servers::door_client;
use crate::common::*;

/// What the client saw, checked to be no failure.
fn succeeded(seen: &Value) -> &Value {
    assert!(
        seen.get("error").is_none(),
        "the TypeScript client failed: {seen:#}"
    );
    seen
}

#[test]
fn the_typescript_sdk_lists_and_calls_the_capsule_tool_with_progress() {
    let text = "Line one of the answer.\n  Line two: naïve ✓ \"quoted\" <b>&amp;</b>\t\\";
    let door = Door::run("mcp-ts", &[text_turn(text)]);
    let Some(seen) = door_client(&door.url(), "Say something.", None) else {
        return;
    };
    let seen = succeeded(&seen);

    // The handshake era, the newest version the SDK speaks, in a session.
    assert_eq!(seen["protocol"], "2025-11-25", "{seen:#}");
    assert_eq!(seen["session"], true, "{seen:#}");
    assert_eq!(
        seen["server"],
        json!({"name": NAME, "title": "mcp-door (mur capsule)", "version": "1.0.0"})
    );
    // The one tool, named after the capsule, taking the task.
    assert_eq!(seen["tools"], json!([NAME]), "{seen:#}");
    let tool = &seen["tool"];
    let description = tool["description"].as_str().unwrap_or_default();
    assert!(
        description.starts_with(&format!(
            "{DESCRIPTION}. Hands a task to the agent capsule {NAME} 1.0.0, served by mur:"
        )),
        "{seen:#}"
    );
    assert_eq!(tool["inputSchema"]["type"], "object", "{seen:#}");
    assert_eq!(
        tool["inputSchema"]["properties"]["task"]["type"], "string",
        "{seen:#}"
    );
    assert_eq!(tool["inputSchema"]["required"], json!(["task"]), "{seen:#}");
    // The answer: one text, the script's to the byte.
    assert_eq!(seen["isError"], false, "{seen:#}");
    assert_eq!(seen["content"], json!(["text"]), "{seen:#}");
    assert_eq!(seen["answer"], text, "the answer, byte for byte");
    // Progress reached the SDK's `onprogress`: the first turn's first, numbered upward.
    let progress = seen["progress"].as_array().expect("progress");
    assert!(!progress.is_empty(), "no progress notification: {seen:#}");
    assert_eq!(progress[0]["message"], "inference turn 1", "{seen:#}");
    let numbers: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    // The session ended with the SDK's `DELETE`, and nothing went wrong beside the
    // calls: the door's `405` to the SDK's GET stream is one the SDK expects.
    assert_eq!(seen["terminated"], true, "{seen:#}");
    assert_eq!(seen["transportErrors"], json!([]), "{seen:#}");

    // The call was a task like any other, with the text it gave as the task.
    let listed = a2a(door.at(), "ListTasks", json!({}));
    let tasks = listed["result"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["history"][0]["parts"][0]["text"], "Say something.");
    assert_eq!(tasks[0]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[test]
fn the_typescript_sdk_gets_in_with_the_door_token_and_is_refused_without_it() {
    let home = scratch("mcp-ts-home");
    let env = [("MURMUR_HOME", home.to_str().unwrap())];
    let door = Door::start(
        Host::Run,
        "mcp-ts-guarded",
        &[text_turn("Behind the door.")],
        BEARER,
        &env,
    );
    let token = token(&home, &door.live.session().id);

    // Without the token, and with a wrong one: the SDK's error for the door's 401 on
    // its first POST, `initialize`, with the body the door answered.
    let refused = "Error: Streamable HTTP error: Error POSTing to endpoint: {\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Unauthorized\"}}";
    for sent in [None, Some("mur_wrong")] {
        let Some(seen) = door_client(&door.url(), "Let me in.", sent) else {
            return;
        };
        assert_eq!(seen["error"], refused, "{sent:?}: {seen:#}");
        assert_eq!(seen["code"], 401, "{sent:?}: {seen:#}");
        assert_eq!(seen["tools"], json!([]), "nothing listed: {seen:#}");
    }

    // With it: in, listed, answered.
    let seen = door_client(&door.url(), "Open up.", Some(&token)).unwrap();
    let seen = succeeded(&seen);
    assert_eq!(seen["tools"], json!([NAME]), "{seen:#}");
    assert_eq!(seen["answer"], "Behind the door.", "{seen:#}");
    assert_eq!(seen["isError"], false, "{seen:#}");
    assert_eq!(seen["terminated"], true, "{seen:#}");
    assert_eq!(seen["transportErrors"], json!([]), "{seen:#}");

    // Only the call with the token became a task.
    let mut at = door.at().clone();
    at.authorization = Some(format!("Bearer {token}"));
    let listed = a2a(&at, "ListTasks", json!({}));
    let tasks = listed["result"]["tasks"].as_array().unwrap();
    let asked: Vec<&Value> = tasks
        .iter()
        .map(|t| &t["history"][0]["parts"][0]["text"])
        .collect();
    assert_eq!(asked, [&json!("Open up.")], "{listed}");
}
