//! The door's wire, raw: hostile requests (not JSON, not JSON-typed, batched, too big)
//! and the plain ones of both eras (a session opened, used and ended; the stateless
//! era's envelope, headers and versions), each with its exact answer.

use serde_json::json;

use super::{CAPABILITIES_KEY, Door, NAME, VERSION_KEY, envelope, no_id, request, rpc_error};
use crate::common::*;

#[test]
fn hostile_requests_get_their_exact_answers() {
    let door = Door::run("mcp-hostile", &[]);
    let json_type = ("content-type", "application/json");
    // Not JSON, not JSON-typed, not one message.
    let parse = door.raw("POST", &[json_type], "{not json");
    parse.assert_json(
        "400 Bad Request",
        &[],
        &no_id(
            -32700,
            "Parse error: key must be a string at line 1 column 2",
        ),
    );
    let typed = door.raw("POST", &[("content-type", "text/plain")], "{}");
    typed.assert_json(
        "415 Unsupported Media Type",
        &[],
        &no_id(
            -32600,
            "Unsupported Media Type: Content-Type must be application/json",
        ),
    );
    let html = door.raw("POST", &[json_type, ("accept", "text/html")], "{}");
    assert_eq!(html.status, "HTTP/1.1 406 Not Acceptable", "{html:?}");
    let batch = json!([request(json!(1), "ping", json!({}))]);
    door.post(&[], &batch).assert_json(
        "400 Bad Request",
        &[],
        &no_id(
            -32600,
            "Invalid Request: batches are not supported: send one JSON-RPC message per POST",
        ),
    );
    let null_id = json!({"jsonrpc": "2.0", "id": null, "method": "ping"});
    let refused = door.post(&[], &null_id);
    assert_eq!(refused.status, "HTTP/1.1 400 Bad Request");
    assert_eq!(refused.json()["error"]["code"], -32600);
    // A body over the limit every door has: the same 413, before anything is read.
    let address = &door.at().address;
    let huge = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        2 * 1024 * 1024
    );
    assert_eq!(
        exchange(address, &huge),
        "HTTP/1.1 413 Content Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    // No stream of the server's own.
    let get = door.raw("GET", &[("accept", "text/event-stream")], "");
    get.assert_json(
        "405 Method Not Allowed",
        &["allow: POST, DELETE".to_string()],
        &no_id(
            -32600,
            "Method Not Allowed: POST JSON-RPC messages to this address (DELETE ends a session)",
        ),
    );
}

#[test]
fn a_handshake_session_is_opened_used_and_ended() {
    let door = Door::run("mcp-handshake", &[text_turn("Raw answer.")]);
    // No session, an unknown one, then one opened and ended.
    let list = request(json!(2), "tools/list", json!({}));
    door.post(&[], &list).assert_json(
        "400 Bad Request",
        &[],
        &no_id(-32600, "Bad Request: the Mcp-Session-Id header is required; send initialize first to open a session"),
    );
    let gone = no_id(
        -32001,
        "Session not found: it ended or expired; send initialize to open a new one",
    );
    let unknown = door.post(&[("mcp-session-id", "mcp_unknown")], &list);
    unknown.assert_json("404 Not Found", &[], &gone);
    let init = |version: &str| {
        let params = json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}});
        door.post(&[], &request(json!(1), "initialize", params))
    };
    let opened = init("2024-11-05");
    assert_eq!(opened.json()["result"]["protocolVersion"], "2025-11-25");
    let opened = init("2025-06-18");
    let session = opened.header("mcp-session-id").unwrap().to_string();
    assert!(is_minted(&session, "mcp_", 64), "{session}");
    let with_session = [format!("mcp-session-id: {session}")];
    opened.assert_json(
        "200 OK",
        &with_session,
        &json!({"jsonrpc": "2.0", "id": 1, "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": NAME, "title": "mcp-door (mur capsule)", "version": "1.0.0"},
            "instructions": format!("This server is the mur capsule {NAME}. Call its one tool, {NAME}, with a whole task; the call returns the capsule's answer when the task ends.")
        }}),
    );
    let in_session = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let acked = door.post(&in_session, &initialized);
    assert_eq!(
        (acked.status.as_str(), &acked.headers, acked.body.as_str()),
        (
            "HTTP/1.1 202 Accepted",
            &vec![
                format!("mcp-session-id: {session}"),
                "content-length: 0".to_string(),
                "connection: close".to_string()
            ],
            ""
        )
    );
    door.post(&in_session, &request(json!(3), "ping", json!({})))
        .assert_json(
            "200 OK",
            &with_session,
            &json!({"jsonrpc": "2.0", "id": 3, "result": {}}),
        );
    door.post(
        &in_session,
        &request(json!("r"), "resources/list", json!({})),
    )
    .assert_json(
        "200 OK",
        &with_session,
        &rpc_error(json!("r"), -32601, "Method not found: resources/list"),
    );
    let nope = json!({"name": "nope", "arguments": {"task": "x"}});
    door.post(&in_session, &request(json!(4), "tools/call", nope))
        .assert_json(
            "200 OK",
            &with_session,
            &rpc_error(
                json!(4),
                -32602,
                "Invalid params: Unknown tool: nope (this server's one tool is mcp-door)",
            ),
        );
    let empty = json!({"name": NAME, "arguments": {}});
    door.post(&in_session, &request(json!(5), "tools/call", empty))
        .assert_json(
            "200 OK",
            &with_session,
            &json!({"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "mcp-door takes one argument, task: the task for the capsule, as text (arguments.task is missing, empty or not a string)."}], "isError": true}}),
        );
    // A client without event streams gets the answer as one JSON body.
    let call = json!({"name": NAME, "arguments": {"task": "Answer."}});
    let json_only = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
        in_session[0],
        in_session[1],
    ];
    let body = request(json!(6), "tools/call", call).to_string();
    let answered = door.raw("POST", &json_only, &body);
    answered.assert_json(
        "200 OK",
        &with_session,
        &json!({"jsonrpc": "2.0", "id": 6, "result": {"content": [{"type": "text", "text": "Raw answer."}], "isError": false}}),
    );
    let ended = door.raw("DELETE", &[("mcp-session-id", &session)], "");
    assert_eq!(
        (ended.status.as_str(), ended.body.as_str()),
        ("HTTP/1.1 200 OK", "")
    );
    door.post(&in_session, &request(json!(7), "ping", json!({})))
        .assert_json("404 Not Found", &[], &gone);
    let again = door.raw("DELETE", &[("mcp-session-id", &session)], "");
    again.assert_json("404 Not Found", &[], &gone);
}

#[test]
fn a_stateless_request_is_checked_by_its_envelope_headers_and_version() {
    let door = Door::run("mcp-stateless", &[]);
    let modern = [("mcp-protocol-version", "2026-07-28")];
    let bare = door.post(&modern, &request(json!(8), "tools/list", json!({})));
    bare.assert_json(
        "400 Bad Request",
        &[],
        &rpc_error(
            json!(8),
            -32602,
            &format!("Invalid params: params._meta must be an object carrying the required '{VERSION_KEY}' and '{CAPABILITIES_KEY}' envelope keys"),
        ),
    );
    let mismatched = door.post(
        &modern,
        &request(json!(9), "tools/list", envelope("2099-01-01")),
    );
    mismatched.assert_json(
        "400 Bad Request",
        &[],
        &rpc_error(
            json!(9),
            -32020,
            "mcp-protocol-version header does not match the request envelope's protocol version",
        ),
    );
    let future = [("mcp-protocol-version", "2099-01-01")];
    let unsupported = door.post(
        &future,
        &request(json!(10), "tools/list", envelope("2099-01-01")),
    );
    unsupported.assert_json(
        "400 Bad Request",
        &[],
        &json!({"jsonrpc": "2.0", "id": 10, "error": {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": ["2026-07-28"], "requested": "2099-01-01"}
        }}),
    );
    let stamp = json!({"io.modelcontextprotocol/serverInfo": {"name": NAME, "title": "mcp-door (mur capsule)", "version": "1.0.0"}});
    let pinged = door.post(&modern, &request(json!(11), "ping", envelope("2026-07-28")));
    pinged.assert_json(
        "200 OK",
        &[],
        &json!({"jsonrpc": "2.0", "id": 11, "result": {"resultType": "complete", "_meta": stamp}}),
    );
    let missing = door.post(
        &modern,
        &request(json!(12), "prompts/list", envelope("2026-07-28")),
    );
    missing.assert_json(
        "404 Not Found",
        &[],
        &rpc_error(json!(12), -32601, "Method not found: prompts/list"),
    );
    let discovered = door.post(
        &modern,
        &request(json!(13), "server/discover", envelope("2026-07-28")),
    );
    let result = &discovered.json()["result"];
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        result["capabilities"],
        json!({"tools": {"listChanged": false}})
    );
    assert_eq!(
        (
            &result["resultType"],
            &result["ttlMs"],
            &result["cacheScope"]
        ),
        (&json!("complete"), &json!(0), &json!("private"))
    );
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let acked = door.post(&modern, &note);
    assert_eq!(
        (acked.status.as_str(), acked.body.as_str()),
        ("HTTP/1.1 202 Accepted", "")
    );
}
