//! The MCP door at `mcp` beneath a capsule's address: the official MCP Python SDK
//! (`mcp` 2.3.0, see `common::mcp_sdk`) lists the capsule's tool and calls it in both
//! eras of the protocol, getting the scripted capsule's answer and its progress; the
//! door asks for the capsule's token as its A2A address does; a client that goes away
//! cancels its task; a task that asks for input is answered; and raw requests, hostile
//! and plain, get their exact answers ([`raw`]); and the official TypeScript SDK
//! (`@modelcontextprotocol/sdk`) does the same as a client ([`js`]). Without the SDK
//! the SDK tests skip, printing why.

// The official TypeScript SDK as the client.
mod js;
// The wire, raw: every exact answer.
mod raw;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::host::{At, Host, Live};
use crate::common::mcp_sdk::{self, python_mcp};
use crate::common::*;

const NAME: &str = "mcp-door";
const DESCRIPTION: &str = "Answers MCP clients from a script";
const WAIT: Duration = Duration::from_secs(60);

/// The stateless era's envelope keys.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// A client of the SDK as a user writes one: `mcp.Client` over the streamable HTTP
/// transport, in the era `MODE` asks for (`auto` probes `server/discover` and falls
/// back to `initialize`; `legacy` forces the handshake). It lists the tools, calls the
/// first with `TASK` and a progress callback (answering an elicitation with
/// `MCP_ANSWER` when that is set), and prints one JSON line of what it saw.
const CLIENT: &str = r#"
import asyncio, json, os, sys, traceback

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, MODE, TASK = sys.argv[1], sys.argv[2], sys.argv[3]
ANSWER = os.environ.get("MCP_ANSWER")


async def main():
    seen = {"progress": [], "asked": []}
    headers = {}
    if os.environ.get("MCP_TOKEN"):
        headers["Authorization"] = "Bearer " + os.environ["MCP_TOKEN"]

    async def on_progress(progress, total, message):
        seen["progress"].append({"progress": progress, "message": message})

    async def on_elicit(context, params):
        seen["asked"].append(params.message)
        return types.ElicitResult(action="accept", content={"answer": ANSWER})

    extra = {"elicitation_callback": on_elicit} if ANSWER is not None else {}
    timeout = httpx2.Timeout(30, read=60)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        transport = streamable_http_client(URL, http_client=http)
        async with Client(transport, mode=MODE, **extra) as client:
            seen["protocol"] = client.protocol_version
            info = client.server_info
            seen["server"] = None if info is None else info.model_dump(mode="json", exclude_none=True)
            listed = await client.list_tools()
            seen["tools"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
            name = listed.tools[0].name
            result = await client.call_tool(name, {"task": TASK}, progress_callback=on_progress)
            seen["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    print(json.dumps(seen))


try:
    asyncio.run(asyncio.wait_for(main(), 60))
except BaseException as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}))
    sys.exit(1)
"#;

// ---------------------------------------------------------------------------------
// Capsules.

/// The scripted capsule every test drives, with the shell (for slow tasks) and the
/// `ask` tool (for input); `extra` ends the manifest.
fn manifest(extra: &str) -> String {
    format!(
        r#"name: {NAME}
version: "1.0.0"
description: {DESCRIPTION}
artifacts:
  - name: ask
    runtime: tool
    source: {ask}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
capabilities:
  shell:
    allow: [bash]
{extra}"#,
        ask = guest(MUR_TOOL_ASK).display(),
    )
}

/// A capsule taking tasks at its address until dropped, playing `turns` across them.
struct Door {
    live: Live,
    capsule: Capsule,
}

impl Door {
    fn start(host: Host, name: &str, turns: &[String], extra: &str, env: &[(&str, &str)]) -> Door {
        let script = format!("turns:\n{}", turns.concat());
        let capsule = Capsule::new(name, &manifest(extra), &script);
        let live = Live::start(host, &capsule, QUEUE, env);
        Door { live, capsule }
    }

    fn run(name: &str, turns: &[String]) -> Door {
        Door::start(Host::Run, name, turns, "", &[])
    }

    fn at(&self) -> &At {
        &self.live.at
    }

    /// The door's URL, as a client is configured with it.
    fn url(&self) -> String {
        format!("http://{}{}mcp", self.at().address, self.at().path)
    }

    /// The SDK client script, written beside the capsule.
    fn script(&self) -> PathBuf {
        let path = self.capsule.dir.join("mcp_client.py");
        std::fs::write(&path, CLIENT).unwrap();
        path
    }

    /// The SDK client in `mode`, calling the tool with `task`: what it saw. A client
    /// that fails fails the test, with all it said.
    fn sdk(&self, python: &std::path::Path, mode: &str, task: &str, env: &[(&str, &str)]) -> Value {
        let ran = mcp_sdk::run(python, &self.script(), &[&self.url(), mode, task], env);
        let line = ran.stdout.lines().last().unwrap_or_default();
        let seen: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "no JSON line ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
                ran.status, ran.stdout, ran.stderr
            )
        });
        assert!(
            ran.status == 0 && seen.get("error").is_none(),
            "the SDK client failed (exit {}): {}\n{}\nstderr:\n{}",
            ran.status,
            seen["error"],
            seen["traceback"].as_str().unwrap_or_default(),
            ran.stderr
        );
        seen
    }

    /// One raw request to the door, its token sent when the capsule has one.
    fn raw(&self, method: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        Reply::parse(
            &self
                .at()
                .exchange(&self.at().request(method, "mcp", headers, body)),
        )
    }

    /// A JSON POST to the door with `headers` besides the content type and accept.
    fn post(&self, headers: &[(&str, &str)], body: &Value) -> Reply {
        let mut all = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        self.raw("POST", &all, &body.to_string())
    }
}

/// A scripted turn calling the `ask` tool, which waits for the user's answer.
fn ask_turn(prompt: &str) -> String {
    format!(
        "  - tool_calls: [{{id: a1, name: ask, input: {{prompt: {}}}}}]\n",
        json!(prompt)
    )
}

// ---------------------------------------------------------------------------------
// Raw HTTP.

/// An HTTP answer, split: its status line, its header lines in order, its body.
#[derive(Debug)]
struct Reply {
    status: String,
    headers: Vec<String>,
    body: String,
}

impl Reply {
    fn parse(raw: &str) -> Reply {
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no head: {raw:?}"));
        let mut lines = head.split("\r\n").map(str::to_string);
        Reply {
            status: lines.next().unwrap_or_default(),
            headers: lines.collect(),
            body: body.to_string(),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|h| {
            let (n, v) = h.split_once(": ")?;
            n.eq_ignore_ascii_case(name).then_some(v)
        })
    }

    /// A whole JSON answer: `status`, the headers `extra` between the content type and
    /// the length, and `body` to the byte.
    fn assert_json(&self, status: &str, extra: &[String], body: &Value) {
        let mut headers = vec!["content-type: application/json".to_string()];
        headers.extend_from_slice(extra);
        headers.push(format!("content-length: {}", self.body.len()));
        headers.push("connection: close".to_string());
        assert_eq!(
            (self.status.as_str(), &self.headers),
            (format!("HTTP/1.1 {status}").as_str(), &headers),
            "{self:?}"
        );
        assert_eq!(self.json(), *body, "{self:?}");
    }
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`.
fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The same, for a request whose id was never read.
fn no_id(code: i64, message: &str) -> Value {
    rpc_error(Value::Null, code, message)
}

fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The stateless era's `_meta` envelope at `version`.
fn envelope(version: &str) -> Value {
    json!({"_meta": {VERSION_KEY: version, CAPABILITIES_KEY: {}}})
}

/// Exactly what both doors answer a caller without the capsule's token.
const UNAUTHORIZED: &str = "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nwww-authenticate: Bearer\r\ncontent-length: 76\r\nconnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Unauthorized\"}}";

// ---------------------------------------------------------------------------------
// The official client, both eras.

/// What an SDK client saw of the capsule's one tool, checked: named after the
/// capsule, its description saying what the capsule is, taking `task`.
fn assert_the_tool(seen: &Value) {
    let tools = seen["tools"].as_array().expect("a tools list");
    assert_eq!(tools.len(), 1, "{seen}");
    let tool = &tools[0];
    assert_eq!(tool["name"], NAME);
    let description = tool["description"].as_str().unwrap();
    assert!(
        description.starts_with(&format!(
            "{DESCRIPTION}. Hands a task to the agent capsule {NAME} 1.0.0, served by mur:"
        )),
        "{description}"
    );
    assert!(description.contains("Its tools: "), "{description}");
    assert_eq!(tool["inputSchema"]["type"], "object");
    assert_eq!(tool["inputSchema"]["properties"]["task"]["type"], "string");
    assert_eq!(tool["inputSchema"]["required"], json!(["task"]));
}

/// The answer a client got: one text, not an error.
fn answer(seen: &Value) -> &str {
    let result = &seen["result"];
    assert_eq!(result["isError"], false, "{seen}");
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{seen}");
    assert_eq!(content[0]["type"], "text");
    content[0]["text"].as_str().unwrap()
}

/// Progress notifications were received, the first the first turn's, numbered upward.
fn assert_progress(seen: &Value) {
    let progress = seen["progress"].as_array().expect("progress");
    assert!(!progress.is_empty(), "no progress notification: {seen}");
    assert_eq!(progress[0]["message"], "inference turn 1", "{seen}");
    let numbers: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
}

#[test]
fn the_python_sdk_calls_the_capsule_tool_in_both_eras_with_progress() {
    let Some(python) = python_mcp() else { return };
    let first = "Line one of the answer.\n  Line two: naïve ✓ \"quoted\"";
    let second = "The handshake era's answer.";
    let door = Door::run("mcp-sdk", &[text_turn(first), text_turn(second)]);

    let modern = door.sdk(&python, "auto", "Say something.", &[]);
    assert_eq!(modern["protocol"], "2026-07-28", "discover was answered");
    assert_eq!(modern["server"]["name"], NAME);
    assert_the_tool(&modern);
    assert_eq!(answer(&modern), first, "the answer, byte for byte");
    assert_progress(&modern);

    let handshake = door.sdk(&python, "legacy", "Say more.", &[]);
    assert_eq!(handshake["protocol"], "2025-11-25");
    assert_eq!(
        handshake["server"],
        json!({"name": NAME, "title": "mcp-door (mur capsule)", "version": "1.0.0"})
    );
    assert_the_tool(&handshake);
    assert_eq!(answer(&handshake), second);
    assert_progress(&handshake);

    // Both calls were tasks like any other: the A2A door lists them, with the text
    // each call gave as the task.
    let listed = a2a(door.at(), "ListTasks", json!({}));
    let tasks = listed["result"]["tasks"].as_array().unwrap();
    let asked: Vec<&str> = tasks
        .iter()
        .map(|t| t["history"][0]["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["Say more.", "Say something."], "{listed}");
    assert!(
        tasks
            .iter()
            .all(|t| t["status"]["state"] == "TASK_STATE_COMPLETED")
    );
    // Taken by the intake every HTTP task passes: what the trace says of an A2A task.
    let started: Vec<Value> = door
        .live
        .session()
        .trace_so_far()
        .into_iter()
        .filter(|e| e["event_type"] == "task_start")
        .map(|e| json!([e["source"], e["origin"], e["trust"], e["lane"]]))
        .collect();
    assert_eq!(
        started,
        vec![json!(["a2a", "event", "untrusted", "bg"]); 2],
        "the same lane and trust as a task sent over A2A"
    );
}

/// An A2A v1 call to the capsule's address: the answer's JSON.
fn a2a(at: &At, method: &str, params: Value) -> Value {
    let body = request(json!(1), method, params).to_string();
    let headers = [("content-type", "application/json"), ("a2a-version", "1.0")];
    let raw = at.exchange(&at.request("POST", "", &headers, &body));
    serde_json::from_str(json_body(&raw)).unwrap()
}

#[test]
fn a_task_that_asks_for_input_is_answered_by_elicitation_or_over_a2a() {
    let Some(python) = python_mcp() else { return };
    let turns = [
        ask_turn("Which color?"),
        text_turn("You said: {{last_tool_result}}"),
        ask_turn("Which shape?"),
        text_turn("Then: {{last_tool_result}}"),
    ];
    let door = Door::run("mcp-input", &turns);

    // The stateless era, with a client that elicits: the person's answer resumes the
    // task, and the call ends with the task's answer.
    let elicited = door.sdk(&python, "auto", "Ask me.", &[("MCP_ANSWER", "teal")]);
    assert_eq!(elicited["asked"], json!(["Which color?"]));
    assert_eq!(
        answer(&elicited),
        "You said: <untrusted-content source=tool:ask>\nteal\n</untrusted-content>"
    );

    // The handshake era cannot elicit: the call ends with an error saying what the
    // capsule asks, and how to answer its task over A2A, which works.
    let told = door.sdk(&python, "legacy", "Ask again.", &[]);
    let result = &told["result"];
    assert_eq!(result["isError"], true, "{told}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!(
            "The capsule {NAME} needs input to go on: Which shape?\n\nIts task tsk_"
        )),
        "{text}"
    );
    let task = text
        .split_whitespace()
        .find(|w| w.starts_with("tsk_"))
        .unwrap();
    let message = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "round"}], "taskId": task});
    let done = a2a(door.at(), "SendMessage", json!({"message": message}));
    let status = &done["result"]["task"]["status"];
    assert_eq!(status["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        status["message"]["parts"][0]["text"],
        "Then: <untrusted-content source=tool:ask>\nround\n</untrusted-content>"
    );
}

// ---------------------------------------------------------------------------------
// The door's token.

const BEARER: &str = "network:\n  authentication:\n    scheme: bearer\n";

/// The operator token of a `mur run` session, read as an operator does: `mur token`.
fn token(home: &std::path::Path, session: &str) -> String {
    let entry = home.join("running").join(format!("{session}.json"));
    eventually(WAIT, "the registry entry", || entry.is_file());
    let run = finish(mur().env("MURMUR_HOME", home).args(["token", session]));
    run.assert_ok();
    run.stdout.trim().to_string()
}

#[test]
fn the_door_asks_for_the_capsule_token_and_refuses_every_request_without_it() {
    let home = scratch("mcp-home");
    let env = [("MURMUR_HOME", home.to_str().unwrap())];
    let door = Door::start(
        Host::Run,
        "mcp-guarded",
        &[text_turn("Behind the door.")],
        BEARER,
        &env,
    );
    let token = token(&home, &door.live.session().id);
    let at = door.at();
    let ping = request(
        json!(1),
        "initialize",
        json!({"protocolVersion": "2025-11-25"}),
    );
    let refused = [
        ("POST", vec![], ping.to_string()),
        (
            "POST",
            vec![("authorization", "Bearer mur_wrong")],
            ping.to_string(),
        ),
        ("GET", vec![("accept", "text/html")], String::new()),
        ("GET", vec![("accept", "text/event-stream")], String::new()),
        ("DELETE", vec![("mcp-session-id", "mcp_x")], String::new()),
    ];
    for (method, mut headers, body) in refused {
        headers.push(("content-type", "application/json"));
        let raw = raw_request(&at.address, method, "/mcp", &headers, &body);
        assert_eq!(
            exchange(&at.address, &raw),
            UNAUTHORIZED,
            "{method} {headers:?}"
        );
    }
    if let Some(python) = python_mcp() {
        let seen = door.sdk(&python, "auto", "Open up.", &[("MCP_TOKEN", &token)]);
        assert_eq!(answer(&seen), "Behind the door.");
        let ran = mcp_sdk::run(
            &python,
            &door.script(),
            &[&door.url(), "auto", "Let me in."],
            &[],
        );
        assert_eq!(ran.status, 1, "{}", ran.stdout);
        assert!(ran.stdout.contains("Unauthorized"), "{}", ran.stdout);
    }
}

#[test]
fn mur_serve_hosts_the_door_beneath_each_capsule_address() {
    let door = Door::start(
        Host::Serve,
        "mcp-served",
        &[text_turn("Hosted answer.")],
        "",
        &[],
    );
    let at = door.at();
    assert!(at.path.starts_with("/c/cap_"), "{}", at.path);
    // Without the capsule's token: the router's 401, the same bytes as `mur run`'s.
    let body = request(json!(1), "ping", json!({})).to_string();
    let headers = [("content-type", "application/json")];
    let raw = raw_request(
        &at.address,
        "POST",
        &format!("{}mcp", at.path),
        &headers,
        &body,
    );
    assert_eq!(exchange(&at.address, &raw), UNAUTHORIZED);
    // A path beside the door is no door.
    let raw = at.exchange(&at.request("POST", "mcpx", &headers, &body));
    assert!(raw.starts_with("HTTP/1.1 404 Not Found\r\n"), "{raw}");
    let Some(python) = python_mcp() else { return };
    let token = at
        .token()
        .expect("a hosted capsule has a token")
        .to_string();
    let seen = door.sdk(&python, "auto", "Answer.", &[("MCP_TOKEN", &token)]);
    assert_eq!(answer(&seen), "Hosted answer.");
}

// ---------------------------------------------------------------------------------
// A client that goes away.

#[test]
fn a_client_that_goes_away_mid_call_cancels_its_task() {
    let sleep = marker(30);
    let _cleanup = KillOnDrop(sleep.clone());
    let turns = [bash_turn(&format!("sleep {sleep}")), text_turn("Slept.")];
    let door = Door::run("mcp-gone", &turns);
    let mut params = envelope("2026-07-28");
    params["name"] = json!(NAME);
    params["arguments"] = json!({"task": "Sleep."});
    params["_meta"]["progressToken"] = json!("p-1");
    let body = request(json!(1), "tools/call", params).to_string();
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
    ];
    let mut socket = connect(&door.at().address);
    socket
        .write_all(door.at().request("POST", "mcp", &headers, &body).as_bytes())
        .unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    // Read until the first turn's progress: the command is about to run.
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("inference turn 1") {
        let n = socket.read(&mut chunk).expect("the stream goes on");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    let seen = String::from_utf8(seen).unwrap();
    assert!(
        seen.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"),
        "{seen}"
    );
    assert!(
        seen.contains("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p-1\",\"progress\":"),
        "{seen}"
    );
    eventually(WAIT, "the sleep running", || {
        !pids_running(&sleep).is_empty()
    });
    drop(socket);
    eventually(WAIT, "the task canceled", || {
        let listed = a2a(door.at(), "ListTasks", json!({}));
        listed["result"]["tasks"][0]["status"]["state"] == "TASK_STATE_CANCELED"
    });
    eventually(WAIT, "the sleep killed", || pids_running(&sleep).is_empty());
}
