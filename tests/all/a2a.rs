//! The A2A v1.0 door, on the wire: the agent card, every v1 method and error, byte for
//! byte, beside the seed's methods on the same address. Compiled twice (`a2a` under
//! `mur run`, `a2a_served` under `mur serve`; see `common::host`).
//!
//! What varies from run to run (minted ids, timestamps, durations) is replaced by a
//! placeholder before comparing, after checking its form; everything else is compared
//! exactly. The official SDKs drive the same door in `a2a_sdk`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::host::{At, Host, Live};
use crate::common::served::{Create, Served};
use crate::common::sse_frames::Sse;
use crate::common::*;

const WAIT: Duration = Duration::from_secs(60);
const JSON: (&str, &str) = ("content-type", "application/json");
const V1: (&str, &str) = ("a2a-version", "1.0");

fn host() -> Host {
    Host::of_module(module_path!())
}

// ---------------------------------------------------------------------------------
// Capsules.

fn manifest(extra: &str) -> String {
    format!(
        "name: door\nversion: \"0.2.0\"\ndescription: Answers over both doors.\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n{extra}"
    )
}

/// A `queue` + `sleep` capsule playing `script` from its first turn for every task.
fn queued(name: &str, script: &str) -> (Capsule, Live) {
    queued_with(name, script, "")
}

fn queued_with(name: &str, script: &str, extra: &str) -> (Capsule, Live) {
    let capsule = Capsule::new(name, &manifest(extra), script);
    // Every task plays the script from its first turn.
    capsule.file("script.yaml", script);
    let live = Live::start(host(), &capsule, QUEUE, &[]);
    (capsule, live)
}

/// One tool call, then the answer.
const TOOL_THEN_ANSWER: &str = "turns:\n  - tool_calls: [{id: t1, name: bash, input: {command: \"echo hi\"}}]\n  - text: \"All done.\"\n";

const BASH_HI: &str = "<untrusted-content source=tool:bash>\n$ echo hi\nExit code: 0\nStdout:\nhi\n\nStderr:\n\n</untrusted-content>";

/// A task that runs a `sleep` of `seconds`, then answers.
fn slow_script(seconds: u32) -> String {
    format!(
        "turns:\n{}{}",
        bash_turn(&format!("sleep {seconds}")),
        text_turn("Slept.")
    )
}

// ---------------------------------------------------------------------------------
// Requests.

fn v1(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

fn user(message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

fn send_params(message_id: &str, text: &str) -> Value {
    json!({"message": user(message_id, text)})
}

/// A JSON `POST` with `headers` answered with plain JSON: the head checked to the
/// byte, the body returned as sent.
fn call_with(at: &At, headers: &[(&str, &str)], body: &str) -> String {
    let reply = at.exchange(&at.request("POST", "", headers, body));
    json_body(&reply).to_string()
}

/// A v1 call (JSON, `A2A-Version: 1.0`) answered with plain JSON.
fn call(at: &At, method: &str, params: Value) -> String {
    call_with(at, &[JSON, V1], &v1(method, params))
}

fn call_json(at: &At, method: &str, params: Value) -> Value {
    serde_json::from_str(&call(at, method, params)).unwrap()
}

/// A v1 event stream, read as it comes: the head checked to the byte, each block
/// checked against the form the door writes (`id: N` then one `data:` line holding a
/// JSON-RPC envelope; an error envelope alone; `:heartbeat`).
struct V1Stream {
    socket: TcpStream,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no block end (a big event arrives in many
    /// reads; each is searched once).
    scanned: usize,
    closed: bool,
}

/// One block of a v1 stream.
#[derive(Debug, Clone)]
struct Event {
    seq: Option<u64>,
    /// The envelope as written.
    data: String,
    json: Value,
}

impl Event {
    /// `task`, `statusUpdate`, `artifactUpdate` or `error`, with the state or the
    /// artifact's id: `task:TASK_STATE_SUBMITTED`, `artifactUpdate:tool-1`.
    fn label(&self) -> String {
        let Some(result) = self.json.get("result").and_then(Value::as_object) else {
            return "error".into();
        };
        let (kind, body) = result.iter().next().unwrap();
        let what = body
            .pointer("/status/state")
            .or_else(|| body.pointer("/artifact/artifactId"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        format!("{kind}:{what}")
    }

    /// The sequence number the event carries in its metadata.
    fn meta_seq(&self) -> Option<u64> {
        let body = self.json["result"].as_object()?.values().next()?;
        body.pointer("/metadata/murmur/seq")?.as_u64()
    }
}

impl V1Stream {
    fn open(at: &At, headers: &[(&str, &str)], body: &str) -> V1Stream {
        let mut socket = connect(&at.address);
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        socket
            .write_all(at.request("POST", "", headers, body).as_bytes())
            .unwrap();
        let mut stream = V1Stream {
            socket,
            buf: Vec::new(),
            scanned: 0,
            closed: false,
        };
        let deadline = Instant::now() + WAIT;
        let head = loop {
            if let Some(end) = find(&stream.buf, b"\r\n\r\n") {
                let head = String::from_utf8(stream.buf[..end + 4].to_vec()).unwrap();
                stream.buf.drain(..end + 4);
                break head;
            }
            assert!(
                stream.read_some(deadline),
                "closed before its head: {:?}",
                stream.buf
            );
        };
        assert_eq!(head, SSE_HEAD);
        stream
    }

    /// Reads more; false once the server closed.
    fn read_some(&mut self, deadline: Instant) -> bool {
        let mut chunk = vec![0u8; 256 * 1024];
        loop {
            assert!(Instant::now() < deadline, "no v1 event in time");
            match self.socket.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return false;
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("reading the stream: {e}"),
            }
        }
    }

    /// The next event (heartbeats skipped), or `None` at close.
    fn next(&mut self) -> Option<Event> {
        let deadline = Instant::now() + WAIT;
        loop {
            let from = self.scanned.saturating_sub(1);
            if let Some(end) = find(&self.buf[from..], b"\n\n").map(|at| at + from) {
                let block = String::from_utf8(self.buf[..end].to_vec()).unwrap();
                self.buf.drain(..end + 2);
                self.scanned = 0;
                if block == ":heartbeat" {
                    continue;
                }
                return Some(parse_block(&block));
            }
            self.scanned = self.buf.len();
            if self.closed || !self.read_some(deadline) {
                assert!(self.buf.is_empty(), "a cut block at close: {:?}", self.buf);
                return None;
            }
        }
    }

    /// Every event to the stream's close.
    fn rest(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_block(block: &str) -> Event {
    assert!(!block.contains('\r'), "{block:?}");
    let (seq, data) = match block.strip_prefix("id: ") {
        Some(rest) => {
            let (id, data) = rest.split_once('\n').unwrap();
            (Some(id.parse::<u64>().unwrap()), data)
        }
        None => (None, block),
    };
    let data = data
        .strip_prefix("data: ")
        .unwrap_or_else(|| panic!("not a v1 block: {block:?}"));
    assert!(!data.contains('\n'), "one data line: {block:?}");
    let json: Value = serde_json::from_str(data).unwrap();
    assert_eq!(json["jsonrpc"], "2.0");
    assert_eq!(seq.is_some(), json.get("result").is_some(), "{block:?}");
    Event {
        seq,
        data: data.to_string(),
        json,
    }
}

fn stream(at: &At, method: &str, params: Value) -> V1Stream {
    V1Stream::open(at, &[JSON, V1], &v1(method, params))
}

// ---------------------------------------------------------------------------------
// What varies: checked for form, then replaced.

/// `text` with `names` replaced, then every minted message id, timestamp and duration.
fn norm(text: &str, names: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in names {
        out = out.replace(from, to);
    }
    out = replace_minted(&out, "msg_", "MSG");
    out = replace_minted(&out, "tsk_", "TSK");
    out = replace_minted(&out, "ctx_", "CTX");
    out = replace_value(&out, "\"timestamp\":\"", '"', "TS", |v| {
        v.len() >= 20 && v.ends_with('Z') && v.as_bytes()[10] == b'T'
    });
    let digits = |v: &str| v.bytes().all(|b| b.is_ascii_digit());
    out = replace_value(&out, "\"durationMs\":", ',', "0", digits);
    replace_value(&out, "\"duration_ms\":", ',', "0", digits)
}

fn replace_minted(text: &str, prefix: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let candidate = &rest[at..];
        let end = prefix.len() + 32;
        out.push_str(&rest[..at]);
        if candidate.len() >= end && is_minted(&candidate[..end], prefix, 32) {
            out.push_str(to);
            rest = &candidate[end..];
        } else {
            out.push_str(prefix);
            rest = &candidate[prefix.len()..];
        }
    }
    out.push_str(rest);
    out
}

fn replace_value(
    text: &str,
    key: &str,
    end: char,
    to: &str,
    valid: impl Fn(&str) -> bool,
) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let start = at + key.len();
        out.push_str(&rest[..start]);
        let value_end = rest[start..].find(end).unwrap() + start;
        let value = &rest[start..value_end];
        assert!(valid(value), "{key}{value} is not of its form");
        out.push_str(to);
        rest = &rest[value_end..];
    }
    out.push_str(rest);
    out
}

/// The task id a v1 answer names.
fn task_id(answer: &Value) -> String {
    let task = answer["result"].get("task").unwrap_or(&answer["result"]);
    task["id"].as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------------
// What the door answers: expected values in the key order the door writes.

fn message_json(id: &str, role: &str, text: &str) -> Value {
    json!({"messageId": id, "contextId": "CTX", "taskId": "TSK", "role": role, "parts": [{"text": text}]})
}

fn status_json(state: &str, text: Option<&str>) -> Value {
    match text {
        Some(text) => {
            json!({"state": state, "message": message_json("MSG", "ROLE_AGENT", text), "timestamp": "TS"})
        }
        None => json!({"state": state, "timestamp": "TS"}),
    }
}

fn seq(n: u64) -> Value {
    json!({"murmur": {"seq": n}})
}

fn bash_artifact() -> Value {
    json!({
        "artifactId": "tool-1",
        "name": "bash",
        "parts": [{"text": BASH_HI}],
        "metadata": {"murmur": {
            "toolName": "bash", "toolCallId": "t1", "isError": false, "durationMs": 0,
            "exitCode": 0, "truncated": false, "fenceSource": "tool:bash",
        }},
    })
}

fn response_artifact(text: &str) -> Value {
    json!({"artifactId": "response", "name": "response", "parts": [{"text": text}]})
}

fn envelope(id: Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error_envelope(
    id: Value,
    code: i64,
    message: &str,
    reason: &str,
    facts: Option<Value>,
) -> String {
    let mut info = json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"});
    if let Some(facts) = facts {
        info["metadata"] = facts;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": [info]}})
        .to_string()
}

// ---------------------------------------------------------------------------------
// The agent card.

#[test]
fn the_agent_card_names_the_capsule_its_address_and_its_tools() {
    let (_capsule, live) = queued("a2a-card", TOOL_THEN_ANSWER);
    let at = &live.at;
    let reply = at.exchange(&at.request("GET", ".well-known/agent-card.json", &[], ""));
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert_eq!(
        head,
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: no-cache\r\ncontent-length: {}\r\nconnection: close",
            body.len()
        )
    );
    let bash = "Runs a command with bash in the capsule's workdir and returns its exit code, stdout and stderr.";
    let mut card = json!({
        "name": "door",
        "description": "Answers over both doors.",
        "version": "0.2.0",
        "supportedInterfaces": [{"url": at.url(), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true, "pushNotifications": false, "extendedAgentCard": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "bash", "name": "bash", "description": bash, "tags": ["tool"]}],
    });
    if host() == Host::Serve {
        // A hosted address wants its token, and the card (public) says so.
        card["securitySchemes"] = json!({"bearer": {"httpAuthSecurityScheme": {
            "scheme": "Bearer", "description": "The capsule's token, as its operator handed it out"}}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    assert_eq!(body, card.to_string());

    // The card is read, not posted to.
    let posted = at.exchange(&at.request("POST", ".well-known/agent-card.json", &[JSON], "{}"));
    assert!(
        posted.starts_with("HTTP/1.1 405 Method Not Allowed\r\nallow: GET\r\n"),
        "{posted}"
    );
}

#[test]
fn a_hosted_card_is_public_and_its_address_still_wants_the_token() {
    if host() == Host::Run {
        // A server of its own: once is enough (in `a2a_served`).
        return;
    }
    let served = Served::start("a2a-card-served");
    let capsule = Capsule::new("a2a-card-served", &manifest(""), TOOL_THEN_ANSWER);
    let hosted = served.create(&Create::path(&capsule.manifest()));
    let card = served.request(
        "GET",
        &format!("{}{}", hosted.path, ".well-known/agent-card.json"),
        &[],
        "",
    );
    assert_eq!(card.status, 200, "{}", card.body);
    let card: Value = serde_json::from_str(&card.body).unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], hosted.url.as_str());
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {"list": []}}}])
    );
    let without = hosted.call_as(None, &v1("GetTask", json!({"id": "tsk_x"})));
    assert_eq!(without.status, 401, "{}", without.body);
    // A longer path under the address is still not found.
    let deeper = served.request(
        "GET",
        &format!("{}.well-known/agent-card.json/x", hosted.path),
        &[],
        "",
    );
    assert_eq!(deeper.status, 404);
}

// ---------------------------------------------------------------------------------
// Sending.

#[test]
fn send_message_answers_with_the_completed_task() {
    let (_capsule, live) = queued("a2a-send", TOOL_THEN_ANSWER);
    let body = call(&live.at, "SendMessage", send_params("m-1", "do it"));
    let answer: Value = serde_json::from_str(&body).unwrap();
    let task = task_id(&answer);
    let expected = envelope(
        json!(1),
        json!({"task": {
            "id": "TSK",
            "contextId": "CTX",
            "status": status_json("TASK_STATE_COMPLETED", Some("All done.")),
            "artifacts": [bash_artifact(), response_artifact("All done.")],
            "history": [message_json("m-1", "ROLE_USER", "do it"), message_json("MSG", "ROLE_AGENT", "All done.")],
            "metadata": seq(6),
        }}),
    );
    assert_eq!(norm(&body, &[]), expected);
    assert!(is_minted(&task, "tsk_", 32), "{task}");

    // The same task, as every read answers it.
    let completed = |history: Value, artifacts: Option<Value>| {
        let mut task = json!({
            "id": "TSK",
            "contextId": "CTX",
            "status": status_json("TASK_STATE_COMPLETED", Some("All done.")),
            "artifacts": artifacts,
            "history": history,
            "metadata": seq(6),
        });
        if task["artifacts"].is_null() {
            task.as_object_mut().unwrap().shift_remove("artifacts");
        }
        task
    };
    let both = json!([
        message_json("m-1", "ROLE_USER", "do it"),
        message_json("MSG", "ROLE_AGENT", "All done.")
    ]);
    let artifacts = json!([bash_artifact(), response_artifact("All done.")]);
    let got = call(&live.at, "GetTask", json!({"id": task}));
    assert_eq!(
        norm(&got, &[]),
        envelope(json!(1), completed(both.clone(), Some(artifacts.clone())))
    );
    let last = call(&live.at, "GetTask", json!({"id": task, "historyLength": 1}));
    let one = json!([message_json("MSG", "ROLE_AGENT", "All done.")]);
    assert_eq!(
        norm(&last, &[]),
        envelope(json!(1), completed(one, Some(artifacts)))
    );
    let listed = call(&live.at, "ListTasks", json!({}));
    let page = json!({"tasks": [completed(both, None)], "nextPageToken": "", "pageSize": 50, "totalSize": 1});
    assert_eq!(norm(&listed, &[]), envelope(json!(1), page));
    let tail = V1Stream::open(
        &live.at,
        &[JSON, V1, ("last-event-id", "4")],
        &v1("SubscribeToTask", json!({"id": task})),
    )
    .rest();
    let tail: Vec<(Option<u64>, String)> =
        tail.iter().map(|e| (e.seq, norm(&e.data, &[]))).collect();
    let response = json!({"artifactUpdate": {"taskId": "TSK", "contextId": "CTX", "artifact": response_artifact("All done."), "append": false, "lastChunk": true, "metadata": seq(5)}});
    let end = json!({"statusUpdate": {"taskId": "TSK", "contextId": "CTX", "status": status_json("TASK_STATE_COMPLETED", Some("All done.")), "metadata": seq(6)}});
    assert_eq!(
        tail,
        [
            (Some(5), envelope(json!(1), response)),
            (Some(6), envelope(json!(1), end))
        ]
    );
}

#[test]
fn a_streamed_task_writes_its_task_then_numbered_updates() {
    let (_capsule, live) = queued("a2a-stream", TOOL_THEN_ANSWER);
    let mut stream = stream(
        &live.at,
        "SendStreamingMessage",
        send_params("m-1", "do it"),
    );
    let events = stream.rest();
    let got: Vec<(Option<u64>, String)> =
        events.iter().map(|e| (e.seq, norm(&e.data, &[]))).collect();
    let user = message_json("m-1", "ROLE_USER", "do it");
    let update = |n: u64, state: &str, text: &str| json!({"statusUpdate": {"taskId": "TSK", "contextId": "CTX", "status": status_json(state, Some(text)), "metadata": seq(n)}});
    let artifact = |n: u64, artifact: Value| json!({"artifactUpdate": {"taskId": "TSK", "contextId": "CTX", "artifact": artifact, "append": false, "lastChunk": true, "metadata": seq(n)}});
    let expected: Vec<(Option<u64>, String)> = [
        json!({"task": {"id": "TSK", "contextId": "CTX", "status": status_json("TASK_STATE_SUBMITTED", None), "history": [user], "metadata": seq(1)}}),
        update(2, "TASK_STATE_WORKING", "inference turn 1"),
        artifact(3, bash_artifact()),
        update(4, "TASK_STATE_WORKING", "inference turn 2"),
        artifact(5, response_artifact("All done.")),
        update(6, "TASK_STATE_COMPLETED", "All done."),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, result)| (Some(i as u64 + 1), envelope(json!(1), result)))
    .collect();
    assert_eq!(got, expected);
    for event in &events {
        assert_eq!(event.meta_seq(), event.seq, "the id and the metadata agree");
    }
}

#[test]
fn a_streamed_reply_arrives_as_chunks_of_one_artifact() {
    let script = "turns:\n  - chunks: [\"Hel\", \"lo\"]\n";
    let (_capsule, live) = queued("a2a-chunks", script);
    let events = stream(&live.at, "SendStreamingMessage", send_params("m-1", "hi")).rest();
    let labels: Vec<String> = events.iter().map(Event::label).collect();
    assert_eq!(
        labels,
        [
            "task:TASK_STATE_SUBMITTED",
            "statusUpdate:TASK_STATE_WORKING",
            "artifactUpdate:reply-1",
            "artifactUpdate:reply-1",
            "artifactUpdate:reply-1",
            "artifactUpdate:response",
            "statusUpdate:TASK_STATE_COMPLETED",
        ]
    );
    let pieces: Vec<(bool, bool, &str)> = events[2..5]
        .iter()
        .map(|e| {
            let u = &e.json["result"]["artifactUpdate"];
            (
                u["append"].as_bool().unwrap(),
                u["lastChunk"].as_bool().unwrap(),
                u["artifact"]["parts"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pieces,
        [(false, false, "Hel"), (true, false, "lo"), (true, true, "")]
    );
    let task = task_id(&events[0].json);
    let got = call_json(&live.at, "GetTask", json!({"id": task}));
    let artifacts = &got["result"]["artifacts"];
    assert_eq!(
        artifacts[0],
        json!({"artifactId": "reply-1", "name": "reply", "parts": [{"text": "Hello"}]})
    );
    assert_eq!(artifacts[1], response_artifact("Hello"));
}

// ---------------------------------------------------------------------------------
// Errors.

/// The exact refusals, by kind.
fn invalid(why: &str) -> String {
    error_envelope(
        json!(1),
        -32602,
        &format!("Invalid params: {why}"),
        "INVALID_PARAMS",
        None,
    )
}

fn not_found(task: &str) -> String {
    let facts = json!({"taskId": task});
    error_envelope(
        json!(1),
        -32001,
        &format!("task {task} not found"),
        "TASK_NOT_FOUND",
        Some(facts),
    )
}

fn unsupported(why: &str) -> String {
    error_envelope(json!(1), -32004, why, "UNSUPPORTED_OPERATION", None)
}

fn bad_version(shown: &str) -> String {
    let why = format!(
        "A2A version {shown} is not supported: this capsule speaks 1.0 (send the header A2A-Version: 1.0)"
    );
    error_envelope(
        json!(1),
        -32009,
        &why,
        "VERSION_NOT_SUPPORTED",
        Some(json!({"supportedVersions": "1.0"})),
    )
}

fn bad_request(why: &str) -> String {
    error_envelope(
        Value::Null,
        -32600,
        &format!("Invalid Request: {why}"),
        "INVALID_REQUEST",
        None,
    )
}

fn message_with(extra: Value) -> Value {
    let mut message = user("m-2", "x");
    for (key, value) in extra.as_object().unwrap() {
        message[key] = value.clone();
    }
    json!({"message": message})
}

#[test]
fn every_refusal_has_the_specifications_code_and_detail() {
    let (_capsule, live) = queued("a2a-errors", TOOL_THEN_ANSWER);
    let at = &live.at;
    let done = task_id(&call_json(at, "SendMessage", send_params("m-1", "do it")));
    let get_done = v1("GetTask", json!({"id": done}));
    let sub_done = v1("SubscribeToTask", json!({"id": done}));
    let ended = |what: &str| format!("task {done} has ended (TASK_STATE_COMPLETED); {what}");
    let not_cancelable = error_envelope(
        json!(1),
        -32002,
        &format!("task {done} cannot be canceled: it has ended (TASK_STATE_COMPLETED)"),
        "TASK_NOT_CANCELABLE",
        Some(json!({"taskId": done})),
    );
    let content_type = error_envelope(
        json!(1),
        -32005,
        "this capsule reads text and data parts only; send a file's contents as text",
        "CONTENT_TYPE_NOT_SUPPORTED",
        None,
    );
    let push = error_envelope(
        json!(1),
        -32003,
        "push notifications are not supported: stream the task, or subscribe to it",
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        None,
    );
    let v1_headers = vec![JSON, V1];
    // (headers, request, the exact answer)
    type Case<'h> = (Vec<(&'h str, &'h str)>, String, String);
    let cases: Vec<Case> = vec![
        (
            vec![JSON],
            get_done.clone(),
            bad_version("0.3 (no A2A-Version header)"),
        ),
        (
            vec![JSON, ("a2a-version", "2.0")],
            get_done.clone(),
            bad_version("2.0"),
        ),
        (
            v1_headers.clone(),
            json!({"jsonrpc": "1.0", "id": 7, "method": "GetTask"}).to_string(),
            bad_request("\"jsonrpc\" must be \"2.0\""),
        ),
        (
            v1_headers.clone(),
            json!({"jsonrpc": "2.0", "id": {"no": 1}, "method": "GetTask"}).to_string(),
            bad_request("\"id\" must be a string, a number or null"),
        ),
        (
            v1_headers.clone(),
            v1("GetTask", json!({"id": "tsk_nope"})),
            not_found("tsk_nope"),
        ),
        (
            v1_headers.clone(),
            v1("GetTask", json!({})),
            invalid("missing field `id`"),
        ),
        (
            v1_headers.clone(),
            v1("GetTask", json!({"id": done, "historyLength": -1})),
            invalid("historyLength must not be negative"),
        ),
        (
            v1_headers.clone(),
            v1("CancelTask", json!({"id": done})),
            not_cancelable,
        ),
        (
            v1_headers.clone(),
            v1("CancelTask", json!({"id": "tsk_nope"})),
            not_found("tsk_nope"),
        ),
        (
            v1_headers.clone(),
            sub_done.clone(),
            unsupported(&ended("read it with GetTask")),
        ),
        (
            vec![JSON, V1, ("last-event-id", "x")],
            sub_done.clone(),
            invalid("Last-Event-ID must be a sequence number this task gave"),
        ),
        (
            vec![JSON, V1, ("last-event-id", "99")],
            sub_done.clone(),
            invalid(&format!(
                "Last-Event-ID 99 is past task {done}'s last event (6)"
            )),
        ),
        (
            v1_headers.clone(),
            v1(
                "SendMessage",
                message_with(json!({"parts": [{"url": "https://example.com/a.pdf"}]})),
            ),
            content_type,
        ),
        (
            v1_headers.clone(),
            v1("SendMessage", message_with(json!({"role": "ROLE_AGENT"}))),
            invalid("message.role must be ROLE_USER"),
        ),
        (
            v1_headers.clone(),
            v1("SendMessage", message_with(json!({"taskId": done}))),
            unsupported(&ended("send a message without taskId to start a new task")),
        ),
        (
            v1_headers.clone(),
            v1("SendMessage", json!({})),
            invalid("missing field `message`"),
        ),
        (
            v1_headers.clone(),
            v1("ListTasks", json!({"pageToken": "abc"})),
            invalid("pageToken \"abc\" is not one this capsule gave"),
        ),
        (
            v1_headers.clone(),
            v1(
                "CreateTaskPushNotificationConfig",
                json!({"taskId": done, "url": "http://127.0.0.1:9/"}),
            ),
            push,
        ),
        (
            v1_headers.clone(),
            v1("GetExtendedAgentCard", json!({})),
            unsupported("this capsule has no extended agent card: its public card is all there is"),
        ),
    ];
    for (headers, request, expected) in cases {
        let answered = call_with(at, &headers, &request);
        assert_eq!(answered, expected, "{request}");
    }
    // A method neither door knows is the seed's answer, unchanged.
    let unknown = call_with(at, &v1_headers, &v1("SendMessages", json!({})));
    assert_eq!(
        unknown,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#
    );
}

// ---------------------------------------------------------------------------------
// Reading tasks.

#[test]
fn get_and_list_tasks_cut_history_filter_and_page() {
    let (_capsule, live) = queued("a2a-list", TOOL_THEN_ANSWER);
    let at = &live.at;
    let first = task_id(&call_json(
        at,
        "SendMessage",
        json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "one"}], "contextId": "ctx-a"}}),
    ));
    let second = task_id(&call_json(at, "SendMessage", send_params("m-2", "two")));
    let third = task_id(&call_json(
        at,
        "SendMessage",
        json!({"message": {"messageId": "m-3", "role": "ROLE_USER", "parts": [{"text": "three"}], "contextId": "ctx-a"}}),
    ));

    let get = |history: Option<i64>| {
        let mut params = json!({"id": first});
        if let Some(n) = history {
            params["historyLength"] = json!(n);
        }
        call_json(at, "GetTask", params)["result"].clone()
    };
    assert_eq!(get(None)["history"].as_array().unwrap().len(), 2);
    assert_eq!(
        get(Some(1))["history"],
        json!([{"messageId": get(None)["history"][1]["messageId"], "contextId": "ctx-a", "taskId": first, "role": "ROLE_AGENT", "parts": [{"text": "All done."}]}])
    );
    assert!(get(Some(0)).get("history").is_none());
    assert_eq!(get(None)["contextId"], "ctx-a");

    let ids = |listed: &Value| -> Vec<String> {
        listed["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = call_json(at, "ListTasks", json!({}));
    assert_eq!(
        ids(&all),
        [third.clone(), second.clone(), first.clone()],
        "newest first"
    );
    assert_eq!(all["result"]["totalSize"], 3);
    assert_eq!(all["result"]["pageSize"], 50);
    assert_eq!(all["result"]["nextPageToken"], "");
    assert!(
        all["result"]["tasks"][0].get("artifacts").is_none(),
        "artifacts only when asked"
    );
    let with = call_json(
        at,
        "ListTasks",
        json!({"includeArtifacts": true, "pageSize": 1}),
    );
    assert_eq!(
        with["result"]["tasks"][0]["artifacts"][1]["artifactId"],
        "response"
    );
    assert_eq!(ids(&with), std::slice::from_ref(&third));
    assert_eq!(with["result"]["nextPageToken"], "1");
    let page2 = call_json(at, "ListTasks", json!({"pageSize": 1, "pageToken": "1"}));
    assert_eq!(ids(&page2), std::slice::from_ref(&second));
    let context = call_json(at, "ListTasks", json!({"contextId": "ctx-a"}));
    assert_eq!(ids(&context), [third.clone(), first.clone()]);
    let none = call_json(at, "ListTasks", json!({"status": "TASK_STATE_WORKING"}));
    assert_eq!(
        none["result"],
        json!({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0})
    );
    let after = all["result"]["tasks"][1]["status"]["timestamp"].clone();
    let newer = call_json(at, "ListTasks", json!({"statusTimestampAfter": after}));
    assert_eq!(ids(&newer), [third]);
}

// ---------------------------------------------------------------------------------
// Cancel, input, both doors.

#[test]
fn canceling_a_running_task_ends_it_canceled_on_both_doors() {
    let (_capsule, live) = queued("a2a-cancel", &slow_script(30));
    let at = &live.at;
    let mut watch = Sse::open(
        post_to(at, crate::common::served::WATCH),
        Instant::now(),
        WAIT,
    );
    let mut stream = stream(at, "SendStreamingMessage", send_params("m-1", "sleep"));
    let submitted = stream.next().unwrap();
    let task = task_id(&submitted.json);
    // Wait for the command to be running: the turn's working status, then give the
    // shell a moment.
    assert_eq!(
        stream.next().unwrap().label(),
        "statusUpdate:TASK_STATE_WORKING"
    );
    let canceled = call(at, "CancelTask", json!({"id": task}));
    let seq_now: Value =
        serde_json::from_str::<Value>(&canceled).unwrap()["result"]["metadata"].clone();
    let expected = envelope(
        json!(1),
        json!({
            "id": "TSK",
            "contextId": "CTX",
            "status": status_json("TASK_STATE_CANCELED", Some("task canceled")),
            "history": [message_json("m-1", "ROLE_USER", "sleep")],
            "metadata": seq_now,
        }),
    );
    assert_eq!(norm(&canceled, &[]), expected);
    let rest: Vec<String> = stream.rest().iter().map(Event::label).collect();
    assert_eq!(rest.last().unwrap(), "statusUpdate:TASK_STATE_CANCELED");
    // The seed's wire says the same, in its own frames.
    let frames = watch.until(WAIT, |f| f.is_final() && f.task() == task);
    let last = frames.last().unwrap();
    assert_eq!(last.state(), "canceled");
    assert_eq!(last.data["status"]["message"], "task canceled");
}

#[test]
fn an_input_wait_is_answered_by_a_follow_up_message_on_the_same_task() {
    let script = "turns:\n  - tool_calls: [{id: a1, name: ask, input: {prompt: \"Which file?\"}}]\n  - text: \"You said: {{last_tool_result}}\"\n";
    let extra = format!(
        "artifacts:\n  - name: ask\n    runtime: tool\n    source: {}\n",
        guest(MUR_TOOL_ASK).display()
    );
    let (_capsule, live) = queued_with("a2a-input", script, &extra);
    let at = &live.at;
    let mut first = stream(at, "SendStreamingMessage", send_params("m-1", "ask me"));
    let events = first.rest();
    let last = events.last().unwrap();
    assert_eq!(
        last.label(),
        "statusUpdate:TASK_STATE_INPUT_REQUIRED",
        "the stream ends at the wait"
    );
    let status = &last.json["result"]["statusUpdate"]["status"];
    assert_eq!(status["message"]["parts"][0]["text"], "Which file?");
    let task = task_id(&events[0].json);
    let context = events[0].json["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_string();

    // An answer naming another context is refused, and the task still waits.
    let wrong = call(
        at,
        "SendMessage",
        json!({"message": {"messageId": "m-x", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": task, "contextId": "ctx-other"}}),
    );
    assert!(wrong.contains(&format!("\"code\":-32602,\"message\":\"Invalid params: message.contextId is not the context of task {task} ({context})\"")), "{wrong}");

    let answered = call_json(
        at,
        "SendMessage",
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "notes.md"}], "taskId": task, "contextId": context}}),
    );
    let done = &answered["result"]["task"];
    assert_eq!(done["id"], task.as_str());
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    let answer = done["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        answer,
        "You said: <untrusted-content source=tool:ask>\nnotes.md\n</untrusted-content>"
    );
    let history: Vec<(&str, &str)> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["parts"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        history,
        [
            ("ROLE_USER", "ask me"),
            ("ROLE_AGENT", "Which file?"),
            ("ROLE_USER", "notes.md"),
            ("ROLE_AGENT", answer)
        ]
    );
    // A task no longer waiting takes no follow-up.
    let late = call(
        at,
        "SendMessage",
        json!({"message": {"messageId": "m-3", "role": "ROLE_USER", "parts": [{"text": "y"}], "taskId": task}}),
    );
    assert!(late.contains("\"code\":-32004"), "{late}");
}

/// A `POST` of `body` to the capsule's address with its token, the socket to read.
fn post_to(at: &At, body: &str) -> TcpStream {
    let mut socket = connect(&at.address);
    socket
        .write_all(at.request("POST", "", &[JSON], body).as_bytes())
        .unwrap();
    socket
}

#[test]
fn the_seed_frames_are_byte_for_byte_the_same_whichever_door_a_task_came_through() {
    let (_capsule, live) = queued("a2a-both-doors", TOOL_THEN_ANSWER);
    let at = &live.at;
    let watch_of = |send: &dyn Fn() -> String| {
        let mut watch = Sse::open(
            post_to(at, crate::common::served::WATCH),
            Instant::now(),
            WAIT,
        );
        let ack = watch.frame(WAIT);
        assert_eq!(ack.event, "connection-ack");
        let task = send();
        let frames = watch.until(WAIT, |f| f.is_final() && f.task() == task);
        let blocks: Vec<String> = frames
            .iter()
            .filter(|f| f.task() == task)
            .map(|f| norm(&f.block, &[]))
            .collect();
        (task, blocks)
    };
    // Through the seed's door: `message/stream`, read to its close.
    let (seed_task, by_seed) = watch_of(&|| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": {"messageId": "m-1", "role": "user", "parts": [{"text": "do it"}]}}}).to_string();
        let frames = Sse::open(post_to(at, &body), Instant::now(), WAIT).rest(WAIT);
        frames[0].task().to_string()
    });
    // Through the v1 door, with a v1 client reading its own stream meanwhile.
    let (v1_task, by_v1) = watch_of(&|| {
        let events = stream(at, "SendStreamingMessage", send_params("m-2", "do it")).rest();
        assert_eq!(
            events.last().unwrap().label(),
            "statusUpdate:TASK_STATE_COMPLETED"
        );
        task_id(&events[0].json)
    });
    assert_eq!(by_v1, by_seed);
    assert_eq!(by_seed.len(), 5, "{by_seed:#?}");
    assert!(
        by_seed[0].starts_with("id: 0\nevent: status\n"),
        "{}",
        by_seed[0]
    );

    // And each door answers for the other's task.
    let seen = call_json(at, "GetTask", json!({"id": seed_task}));
    assert_eq!(seen["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(seen["result"]["history"][0]["messageId"], "m-1");
    assert_eq!(seen["result"]["history"][0]["role"], "ROLE_USER");
    assert_ne!(seed_task, v1_task);
}

// ---------------------------------------------------------------------------------
// Resubscribing.

#[test]
fn resubscribing_with_last_event_id_replays_exactly_what_was_missed() {
    // Three turns, each a short command, so the drop lands mid-task.
    let script = format!(
        "turns:\n{}{}{}{}",
        bash_turn("sleep 1"),
        bash_turn("sleep 1"),
        bash_turn("sleep 1"),
        text_turn("Three naps.")
    );
    let (_capsule, live) = queued("a2a-resume", &script);
    let at = &live.at;
    let mut first = stream(at, "SendStreamingMessage", send_params("m-1", "nap"));
    let read: Vec<Event> = (0..3).map(|_| first.next().unwrap()).collect();
    drop(first);
    let task = task_id(&read[0].json);
    let last = read.last().unwrap().seq.unwrap();
    assert_eq!(last, 3);

    let mut again = V1Stream::open(
        at,
        &[JSON, V1, ("last-event-id", "3")],
        &v1("SubscribeToTask", json!({"id": task})),
    );
    let rest = again.rest();
    let seqs: Vec<u64> = read.iter().chain(&rest).map(|e| e.seq.unwrap()).collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "no event lost or repeated");
    assert_eq!(
        rest.last().unwrap().label(),
        "statusUpdate:TASK_STATE_COMPLETED"
    );
    for event in &rest {
        assert_eq!(event.json["id"], 1);
        assert_eq!(event.meta_seq(), event.seq);
    }

    // Once the task has ended, a reader that missed its last events still gets them.
    let tail = V1Stream::open(
        at,
        &[
            JSON,
            V1,
            ("last-event-id", &(seqs.len() as u64 - 2).to_string()),
        ],
        &v1("SubscribeToTask", json!({"id": task})),
    )
    .rest();
    let labels: Vec<String> = tail.iter().map(Event::label).collect();
    assert_eq!(
        labels,
        [
            "artifactUpdate:response",
            "statusUpdate:TASK_STATE_COMPLETED"
        ]
    );
}

#[test]
fn a_sender_that_reads_late_gets_every_event_of_a_task_that_raced_ahead() {
    // 300 chunks of 12,000 bytes: more than the sockets hold, so the door's writer is
    // still behind when the task ends and its log is trimmed for late readers.
    let pieces: Vec<String> = (0..300)
        .map(|n| format!("\"{:x<12000}\"", format!("c{n} ")))
        .collect();
    let script = format!("turns:\n  - chunks: [{}]\n", pieces.join(", "));
    let (_capsule, live) = queued("a2a-late-reader", &script);
    let mut late = stream(
        &live.at,
        "SendStreamingMessage",
        send_params("m-1", "stream"),
    );
    let first = late.next().unwrap();
    let task = task_id(&first.json);
    eventually(WAIT, "the task to end", || {
        call_json(&live.at, "GetTask", json!({"id": task}))["result"]["status"]["state"]
            == "TASK_STATE_COMPLETED"
    });
    let rest = late.rest();
    let seqs: Vec<u64> = std::iter::once(&first)
        .chain(&rest)
        .map(|e| e.seq.unwrap())
        .collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "nothing cut, nothing repeated");
    assert_eq!(
        rest.last().unwrap().label(),
        "statusUpdate:TASK_STATE_COMPLETED"
    );
    assert!(seqs.len() > 300, "{}", seqs.len());
}

#[test]
fn subscribing_without_last_event_id_starts_from_the_task_as_it_stands() {
    let (_capsule, live) = queued("a2a-subscribe", &slow_script(3));
    let at = &live.at;
    let mut first = stream(at, "SendStreamingMessage", send_params("m-1", "sleep"));
    let task = task_id(&first.next().unwrap().json);
    assert_eq!(
        first.next().unwrap().label(),
        "statusUpdate:TASK_STATE_WORKING"
    );
    let mut sub = stream(at, "SubscribeToTask", json!({"id": task}));
    let snapshot = sub.next().unwrap();
    assert_eq!(snapshot.label(), "task:TASK_STATE_WORKING");
    let at_seq = snapshot.seq.unwrap();
    assert_eq!(snapshot.meta_seq(), Some(at_seq));
    let rest = sub.rest();
    let seqs: Vec<u64> = rest.iter().map(|e| e.seq.unwrap()).collect();
    let expected: Vec<u64> = (at_seq + 1..=at_seq + rest.len() as u64).collect();
    assert_eq!(seqs, expected, "the events after the snapshot, none before");
    assert_eq!(
        rest.last().unwrap().label(),
        "statusUpdate:TASK_STATE_COMPLETED"
    );
}

// ---------------------------------------------------------------------------------
// A capsule that cannot take the task, and the store's bounds and life.

#[test]
fn a_busy_capsule_answers_a_rejected_task() {
    let capsule = Capsule::new("a2a-busy", &manifest(""), &slow_script(20));
    let args: &[&str] = &[
        "--lifecycle-task-acceptance",
        "single",
        "--lifecycle-after-task",
        "sleep",
    ];
    let live = Live::start(host(), &capsule, args, &[]);
    let at = &live.at;
    let mut running = stream(at, "SendStreamingMessage", send_params("m-1", "sleep"));
    let _ = running.next().unwrap();
    let rejected = call_json(at, "SendMessage", send_params("m-2", "another"));
    let task = &rejected["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "task rejected: capsule is busy"
    );
    let id = task["id"].as_str().unwrap();
    assert_eq!(
        call_json(at, "GetTask", json!({"id": id}))["result"]["status"]["state"],
        "TASK_STATE_REJECTED"
    );
}

#[test]
fn the_store_keeps_its_most_recent_tasks_and_forgets_the_rest() {
    let (_capsule, live) = queued_with(
        "a2a-bound",
        TOOL_THEN_ANSWER,
        "lifecycle:\n  task_history: 2\n",
    );
    let at = &live.at;
    let ids: Vec<String> = (1..=3)
        .map(|n| {
            task_id(&call_json(
                at,
                "SendMessage",
                send_params(&format!("m-{n}"), "go"),
            ))
        })
        .collect();
    let forgotten = call(at, "GetTask", json!({"id": ids[0]}));
    assert_eq!(forgotten, not_found(&ids[0]));
    let listed = call_json(at, "ListTasks", json!({}));
    assert_eq!(listed["result"]["totalSize"], 2);
}

#[test]
fn a_resumed_capsule_still_answers_for_the_tasks_before_it() {
    if host() == Host::Serve {
        // Under `mur serve` a restart is the server's: see the next test.
        return;
    }
    let capsule = Capsule::new("a2a-resume-run", &manifest(""), TOOL_THEN_ANSWER);
    let first = Live::start(Host::Run, &capsule, QUEUE, &[]);
    let task = task_id(&call_json(
        &first.at,
        "SendMessage",
        send_params("m-1", "do it"),
    ));
    let stopped = mur().args(["stop", &first.at.url()]).output().unwrap();
    assert!(stopped.status.success(), "{stopped:?}");
    first.ends_cleanly(WAIT);
    let mut args = QUEUE.to_vec();
    args.extend(["--resume", "@1"]);
    let again = Live::start(Host::Run, &capsule, &args, &[]);
    let got = call_json(&again.at, "GetTask", json!({"id": task}));
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["result"]["metadata"], seq(6));
    let file = again.session().records.join("a2a-tasks.jsonl");
    assert!(
        log_file(&file).contains(&task),
        "the new session keeps it too"
    );
}

#[test]
fn a_restarted_server_still_answers_for_its_capsules_tasks() {
    if host() == Host::Run {
        return;
    }
    let mut served = Served::start("a2a-restart");
    let capsule = Capsule::new(
        "a2a-restart",
        &manifest("lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n"),
        TOOL_THEN_ANSWER,
    );
    let hosted = served.create(&Create::path(&capsule.manifest()));
    let sent = hosted.call(&[V1], &v1("SendMessage", send_params("m-1", "do it")));
    let task = task_id(&serde_json::from_str(&sent.body).unwrap());
    served.restart();
    served.until_state(&hosted.id, WAIT, |s| s == "running" || s == "idle");
    let got = hosted.call(&[V1], &v1("GetTask", json!({"id": task})));
    let got: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{got}"
    );
    assert_eq!(got["result"]["artifacts"][0]["name"], "bash");
}

#[test]
fn the_model_key_is_redacted_from_every_v1_answer_and_the_store_on_disk() {
    const KEY: &str = "sk-door-test-0123456789";
    let script = format!(
        "turns:\n{}{}",
        bash_turn(&format!("echo {KEY}")),
        text_turn(&format!("The key is {KEY}."))
    );
    let extra = format!("  api_key: {KEY}\n");
    let manifest = manifest("").replace(
        "  model: scripted-test\n",
        &format!("  model: scripted-test\n{extra}"),
    );
    let capsule = Capsule::new("a2a-secret", &manifest, &script);
    capsule.file("script.yaml", &script);
    let live = Live::start(host(), &capsule, QUEUE, &[]);
    let at = &live.at;
    let events = stream(at, "SendStreamingMessage", send_params("m-1", "tell")).rest();
    let task = task_id(&events[0].json);
    let answers = [
        events
            .iter()
            .map(|e| e.data.clone())
            .collect::<Vec<_>>()
            .join("\n"),
        call(at, "GetTask", json!({"id": task})),
        call(at, "ListTasks", json!({"includeArtifacts": true})),
    ];
    for answer in &answers {
        assert!(!answer.contains(KEY), "the key is in {answer}");
        assert!(answer.contains("[redacted]"), "{answer}");
    }
    // `mur run` keeps it with the session's records; `mur serve` with the capsule's,
    // across its sessions.
    let records = live.session().records;
    let journal = match host() {
        Host::Run => records.join("a2a-tasks.jsonl"),
        Host::Serve => records.parent().unwrap().join("a2a-tasks.jsonl"),
    };
    let kept = log_file(&journal);
    assert!(kept.contains(&task), "{kept}");
    assert!(!kept.contains(KEY), "the key is on disk: {kept}");
}
