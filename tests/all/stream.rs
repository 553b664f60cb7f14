//! The streaming protocol against a real capsule on 127.0.0.1: one test per
//! observable row of the streaming protocol's tables (frames, ids, replay), read as
//! raw bytes off the socket. Every read has a deadline; where the test needs the
//! capsule to be somewhere, it waits for the frame that says so.
//!
//! This file is compiled twice: as `stream`, each capsule runs in a `mur run` of its
//! own, at `/`; as `stream_served`, each is created in a `mur serve` and reached at
//! `/c/<id>/` with its token (see `common::host`). Every row holds at both addresses.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::host::{At, Host, Live};
use crate::common::sse_frames::*;
use crate::common::*;
use serde_json::{Value, json};

const JSON: (&str, &str) = ("content-type", "application/json");
const QUEUED_CANCEL_START: u64 = 2_305_843_009_213_693_951;
const CHUNK_START: u64 = 4_611_686_018_427_387_903;
/// The bound on any one wait: what the capsule does here takes milliseconds to seconds.
const WAIT: Duration = Duration::from_secs(30);

/// Checks a run of ids from `first` in which `lagged` frames (no id, `{"missed":N}`)
/// stand where N frames were dropped: the next id is N past the one before. Returns
/// how many frames the run had, received and missed.
fn run_with_lags(frames: &[Frame], first: u64) -> u64 {
    let mut next = first;
    for f in frames {
        if f.event == "lagged" {
            let missed = f.data["missed"].as_u64().unwrap_or(0);
            assert!(missed > 0, "{f:?}");
            assert_eq!(
                f.block,
                format!("event: lagged\ndata: {{\"missed\":{missed}}}")
            );
            next += missed;
        } else {
            assert_eq!(f.id, Some(next), "{:?}", labels(frames));
            next += 1;
        }
    }
    next - first
}

/// Where this module's capsules run: the module's name says (see the module doc).
fn host() -> Host {
    Host::of_module(module_path!())
}

/// A `POST` to the capsule's address, with its token when it has one.
fn post_request(a: &At, headers: &[(&str, &str)], body: &str) -> String {
    a.request("POST", "", headers, body)
}

/// A JSON-RPC call answered with plain JSON: the head is checked, the body returned.
fn rpc(a: &At, body: &str) -> Value {
    let reply = a.exchange(&post_request(a, &[JSON], body));
    serde_json::from_str(json_body(&reply)).unwrap()
}

/// A `POST` to the capsule's address as an event stream, its head read and checked.
fn open(a: &At, headers: &[(&str, &str)], body: &str) -> Sse {
    let opened = Instant::now();
    let mut socket = connect(&a.address);
    socket
        .write_all(post_request(a, headers, body).as_bytes())
        .unwrap();
    Sse::open(socket, opened, WAIT)
}

// ---------------------------------------------------------------------------------
// Capsules and requests.

fn manifest(lifecycle: &str) -> String {
    format!(
        "name: stream\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n{lifecycle}"
    )
}

/// A capsule running in the background, under this module's host; the returned
/// `Capsule` keeps its directory.
fn start(
    name: &str,
    script: &str,
    lifecycle: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Capsule, Live) {
    let capsule = Capsule::new(name, &manifest(lifecycle), script);
    let running = Live::start(host(), &capsule, args, env);
    (capsule, running)
}

/// A `queue` + `sleep` capsule: it takes tasks until it is stopped.
fn queued(name: &str, script: &str) -> (Capsule, Live) {
    start(name, script, "", QUEUE, &[])
}

fn call(id: i64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn message(message_id: &str, text: &str) -> Value {
    json!({"messageId": message_id, "role": "user", "parts": [{"text": text}]})
}

fn submit_with(address: &At, headers: &[(&str, &str)], message_id: &str) -> Sse {
    let mut all = vec![JSON];
    all.extend_from_slice(headers);
    let body = call(
        1,
        "message/stream",
        json!({"message": message(message_id, "do the task")}),
    );
    open(address, &all, &body)
}

/// Submits a task and waits until the capsule has received it, so the next request
/// is sure to arrive after it.
fn submit_queued(
    address: &At,
    session: &Session,
    headers: &[(&str, &str)],
    message_id: &str,
) -> (Sse, String) {
    let sse = submit_with(address, headers, message_id);
    (sse, task_of(session, message_id))
}

fn submit(address: &At, message_id: &str) -> Sse {
    submit_with(address, &[], message_id)
}

/// A `stream/watch` connection, its `connection-ack` already read and checked.
fn watch(address: &At, headers: &[(&str, &str)]) -> Sse {
    let mut all = vec![JSON];
    all.extend_from_slice(headers);
    let mut sse = open(address, &all, &call(1, "stream/watch", json!({})));
    let ack = sse.frame(WAIT);
    assert_eq!(
        ack.block,
        "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}"
    );
    sse
}

fn cancel(address: &At, task_id: &str) -> Value {
    rpc(address, &call(9, "tasks/cancel", json!({"id": task_id})))
}

/// A trace line written while a request is served, waited for with a bound.
fn wait_for_trace(session: &Session, pick: impl Fn(&[Value]) -> Option<Value>) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let trace = session.trace_so_far();
        if let Some(found) = pick(&trace) {
            return found;
        }
        assert!(Instant::now() < deadline, "the trace line never came");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The task id minted for a message, from its `a2a_task_received` trace line.
fn task_of(session: &Session, message_id: &str) -> String {
    let line = wait_for_trace(session, |trace| {
        trace
            .iter()
            .find(|e| e["event_type"] == "a2a_task_received" && e["message_id"] == message_id)
            .cloned()
    });
    line["task_id"].as_str().unwrap().to_string()
}

/// A watch's request headers, and the frames its replay must be, in order.
type ReplayCase<'a> = (Vec<(&'a str, &'a str)>, Vec<String>);

fn status_data(task: &str, context: &str, state: &str, message: &str, fin: bool) -> Value {
    json!({"id": task, "context_id": context, "status": {"state": state, "message": message}, "final": fin})
}

fn block(id: Option<u64>, event: &str, data: &Value) -> String {
    match id {
        Some(id) => format!("id: {id}\nevent: {event}\ndata: {data}"),
        None => format!("event: {event}\ndata: {data}"),
    }
}

// ---------------------------------------------------------------------------------
// Endpoints.

/// Endpoints table: the three headers, no framing, the body ends at close.
#[test]
fn event_stream_head_is_exact_and_the_body_ends_at_close() {
    let (_capsule, running) = start("head", "turns:\n  - text: \"Hello there\"\n", "", &[], &[]);
    let mut stream = submit(&running.at, "msg-1");
    let items = stream.rest_items(WAIT);
    let frames = only_frames(&items);
    assert_eq!(items.len(), frames.len(), "nothing but frames: {items:?}");
    let (t, c) = (
        frames[0].task(),
        frames[0].data["context_id"].as_str().unwrap(),
    );
    let completed = json!({"id": t, "context_id": c, "status": {"state": "completed", "message": "session ended", "response": "Hello there"}, "final": true});
    let blocks: Vec<&str> = frames.iter().map(|f| f.block.as_str()).collect();
    assert_eq!(
        blocks,
        [
            block(
                Some(0),
                "status",
                &status_data(t, c, "working", "inference turn 1", false)
            ),
            block(
                Some(1),
                "text",
                &json!({"id": t, "text": "Hello there", "final": true})
            ),
            block(Some(1), "status", &completed),
        ]
    );
    running.ends_cleanly(WAIT);
}

/// Endpoints: a `POST /` without a JSON content type or without a body is 404, and so
/// is any other method or path (under `mur serve`: anything but the capsule's exact
/// path, with its token sent, so the seed's rule is what refuses).
#[test]
fn requests_that_are_not_json_posts_to_root_are_not_found() {
    let (_capsule, running) = queued("notfound", "turns: []\n");
    let a = &running.at;
    let body = call(1, "stream/watch", json!({}));
    let cases = [
        ("no content type", post_request(a, &[], &body)),
        (
            "text/plain",
            post_request(a, &[("content-type", "text/plain")], &body),
        ),
        ("empty body", post_request(a, &[JSON], "")),
        ("GET", a.request("GET", "", &[], "")),
        ("another path", a.request("POST", "rpc", &[JSON], &body)),
    ];
    for (what, request) in cases {
        let reply = a.exchange(&request);
        assert!(
            reply.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{what}: {reply:?}"
        );
        assert!(!reply.contains("event-stream"), "{what}: {reply:?}");
    }
    // A JSON content type with parameters is still JSON.
    let mut w = open(
        a,
        &[("Content-Type", "application/json; charset=utf-8")],
        &body,
    );
    assert_eq!(w.frame(WAIT).event, "connection-ack");
}

/// JSON-RPC: a body that is not JSON, and a method that does not exist.
#[test]
fn parse_error_and_unknown_method_are_json_rpc_errors() {
    let (_capsule, running) = queued("rpcerr", "turns: []\n");
    let a = &running.at;
    assert_eq!(
        rpc(a, "{\"jsonrpc\": \"2.0\", not json"),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
    );
    assert_eq!(
        rpc(a, &call(5, "tasks/frobnicate", json!({}))),
        json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "Method not found"}})
    );
}

/// Endpoints: `message/stream` under `task_acceptance: none` is a plain JSON-RPC
/// error; `stream/watch` is served whatever `task_acceptance` says, and a capsule
/// that exits closes it without `capsule-closed`.
#[test]
fn under_none_message_stream_is_method_not_found_and_watch_is_served() {
    let script = format!(
        "turns:\n{}{}",
        bash_turn("sleep 2"),
        text_turn("launch done")
    );
    let lifecycle = "lifecycle:\n  task_acceptance: none\n";
    if host() == Host::Serve {
        // A hosted capsule has no launch task: under `none` it could run nothing, so
        // `mur serve` refuses to host it, naming the key.
        let capsule = Capsule::new("none", &manifest(lifecycle), &script);
        let (status, refusal) = Live::refused(&capsule, &[]);
        assert_eq!(
            (status, refusal),
            (
                400,
                json!({"error": {
                    "code": "E-SERVE-017",
                    "message": "lifecycle.task_acceptance is none, so the capsule could take no task at its address",
                    "hint": "set lifecycle.task_acceptance to single or queue (with after_task: sleep to keep it serving between tasks)",
                }})
            )
        );
        return;
    }
    let (_capsule, running) = start(
        "none",
        &script,
        lifecycle,
        &["--task", "the launch task"],
        &[],
    );
    let a = &running.at;
    let mut w = watch(a, &[]);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "message/stream", "params": {"message": message("m", "hi")}}).to_string();
    let reply = a.exchange(&post_request(a, &[JSON], &body));
    let error = r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}"#;
    assert_eq!(
        reply,
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{error}",
            error.len()
        )
    );
    let frames = w.rest(WAIT);
    let last = frames.last().expect("the launch task's frames");
    assert_eq!(last.state(), "completed");
    assert_eq!(last.data["status"]["response"], "launch done");
    assert!(
        frames.iter().all(|f| f.event != "capsule-closed"),
        "an exiting capsule writes no capsule-closed: {:?}",
        labels(&frames)
    );
    running.ends_cleanly(WAIT);
}

/// `message/stream` params: under `params.message` or as `params` itself; ids minted
/// as `tsk_`/`ctx_` and 32 hex digits, or the message's `contextId`.
#[test]
fn params_as_message_or_as_params_itself_and_the_minted_ids() {
    let script = format!("turns:\n{}{}", text_turn("one"), text_turn("two"));
    let (_capsule, running) = queued("params", &script);
    let a = &running.at;
    let session = running.session();

    let mut own = message("msg-own", "as params itself");
    own["contextId"] = json!("ctx-from-the-client");
    let mut s = open(a, &[JSON], &call(1, "message/stream", own));
    let frames = s.rest(WAIT);
    let t1 = frames[0].task().to_string();
    assert!(is_minted(&t1, "tsk_", 32), "{t1}");
    for f in &frames {
        assert_eq!(f.task(), t1);
        if f.event == "status" {
            assert_eq!(f.data["context_id"], "ctx-from-the-client");
        }
    }
    assert_eq!(frames.last().unwrap().data["status"]["response"], "one");

    let mut s = submit(a, "msg-nested");
    let frames = s.rest(WAIT);
    let t2 = frames[0].task().to_string();
    assert!(is_minted(&t2, "tsk_", 32) && t2 != t1, "{t2}");
    let c2 = frames[0].data["context_id"].as_str().unwrap();
    assert!(is_minted(c2, "ctx_", 32), "{c2}");
    assert_eq!(frames.last().unwrap().data["status"]["response"], "two");

    assert_eq!(task_of(&session, "msg-own"), t1);
    assert_eq!(task_of(&session, "msg-nested"), t2);
}

/// `message/stream` step 3 and the `error` frame: params that are not a message get
/// one `error` frame whose data is valid JSON (our departure), the connection
/// closes, and no task starts.
#[test]
fn params_that_are_not_a_message_get_an_error_frame_and_start_nothing() {
    let script = format!("turns:\n{}", text_turn("the good one"));
    let (_capsule, running) = queued("badparams", &script);
    let a = &running.at;
    let mut w = watch(a, &[]);
    let cases = [
        (
            json!({"message": {"role": "user", "parts": [{"text": "x"}]}}),
            Some("Invalid params: missing field `messageId`"),
        ),
        (
            json!({"messageId": "m", "role": "user", "parts": "x"}),
            Some("Invalid params: invalid type: string \"x\", expected a sequence"),
        ),
        (
            json!({"messageId": "m", "parts": [{"text": "x"}]}),
            Some("Invalid params: missing field `role`"),
        ),
        (json!(null), None),
        (
            json!({"message": {"messageId": "m", "role": "user", "parts": [{"nope": 1}]}}),
            None,
        ),
    ];
    for (params, want) in cases {
        let mut s = open(a, &[JSON], &call(1, "message/stream", params.clone()));
        let items = s.rest_items(WAIT);
        let frames = only_frames(&items);
        assert_eq!(frames.len(), 1, "{params}: {items:?}");
        let f = &frames[0];
        assert_eq!(f.event, "error", "{params}");
        let text = f.data["error"].as_str().unwrap();
        assert!(text.starts_with("Invalid params: "), "{text}");
        if let Some(want) = want {
            assert_eq!(f.block, block(None, "error", &json!({"error": want})));
        }
        assert_eq!(f.data.as_object().unwrap().len(), 1);
    }
    // Nothing was queued or written: the next frame anywhere is the good task's first.
    let mut s = submit(a, "msg-good");
    let first = w.frame(WAIT);
    assert_eq!(first.label(), l(0, "status:working"));
    s.rest(WAIT);
    let session = running.session();
    assert_eq!(session.events("task_start").len(), 1);
    assert_eq!(session.events("a2a_task_received").len(), 1);
}

// ---------------------------------------------------------------------------------
// Frames.

/// `artifact`: every key present, in the seed's order, `null` where it does not apply.
#[test]
fn artifact_frames_carry_all_ten_keys_in_order() {
    let script = r#"
turns:
  - tool_calls:
      - {id: toolu_01, name: bash, input: {command: "echo hello"}}
      - {id: toolu_03, name: no-such-tool, input: {}}
      - {name: bash, input: {command: "exit 3"}}
  - text: done
"#;
    let (_capsule, running) = queued("artifact", script);
    let mut s = submit(&running.at, "msg-1");
    let frames = s.rest(WAIT);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "artifact"),
            l(2, "artifact"),
            l(3, "artifact"),
            l(4, "status:working"),
            l(5, "text:final"),
            l(5, "status:completed"),
        ]
    );
    let t = frames[0].task();
    // duration_ms is measured; everything else is exact.
    let masked = |f: &Frame| {
        let d = f.data["artifact"]["duration_ms"]
            .as_u64()
            .expect("duration_ms");
        f.block
            .replace(&format!("\"duration_ms\":{d},"), "\"duration_ms\":D,")
    };
    let want = |artifact: Value| {
        block(None, "artifact", &json!({"id": t, "artifact": artifact}))
            .replace("\"duration_ms\":0,", "\"duration_ms\":D,")
    };
    assert_eq!(
        masked(&frames[1]),
        format!(
            "id: 1\n{}",
            want(json!({
                "tool_name": "bash",
                "content": "<untrusted-content source=tool:bash>\n$ echo hello\nExit code: 0\nStdout:\nhello\n\nStderr:\n\n</untrusted-content>",
                "fence_source": "tool:bash",
                "tool_call_id": "toolu_01",
                "is_error": false,
                "duration_ms": 0,
                "exit_code": 0,
                "truncated": false,
            }))
        )
    );
    assert_eq!(
        frames[2].block,
        format!(
            "id: 2\n{}",
            block(
                None,
                "artifact",
                &json!({"id": t, "artifact": {
                    "tool_name": "no-such-tool",
                    "content": "tool 'no-such-tool' is not declared in manifest allowlist",
                    "fence_source": null,
                    "tool_call_id": "toolu_03",
                    "is_error": true,
                    "duration_ms": 0,
                    "exit_code": null,
                    "truncated": false,
                }})
            )
        )
    );
    let a = &frames[3].data["artifact"];
    let keys: Vec<&String> = a.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "tool_name",
            "content",
            "fence_source",
            "tool_call_id",
            "is_error",
            "duration_ms",
            "exit_code",
            "truncated"
        ]
    );
    assert_eq!(a["tool_call_id"], Value::Null, "no id from the provider");
    assert_eq!(
        (&a["is_error"], &a["exit_code"]),
        (&json!(false), &json!(3))
    );
    assert!(a["content"].as_str().unwrap().contains("Exit code: 3"));
    assert!(!frames[1].data.as_object().unwrap().contains_key("summary"));
}

/// `text` and `thinking`, and the chunk counter: a streamed turn's chunks continue the
/// task's run of ids (the counter is synced before each inference call, so the launch
/// value 4611686018427387903 never shows on a driver's chunk), each streamed turn ends
/// with `text` `""` `final:true`, and no whole-reply frame follows a streamed last turn.
#[test]
fn streamed_chunks_share_the_task_run_of_ids() {
    let script = r#"
turns:
  - thinking_chunks: ["Let me", " think"]
    chunks: ["Hel", "lo"]
    tool_calls: [{id: t1, name: bash, input: {command: "true"}}]
  - chunks: [" wor", "ld"]
"#;
    let (_capsule, running) = queued("chunks", script);
    let mut w = watch(&running.at, &[]);
    let mut s = submit(&running.at, "msg-1");
    let frames = s.rest(WAIT);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "thinking"),
            l(2, "thinking"),
            l(3, "text"),
            l(4, "text"),
            l(5, "text:final"),
            l(6, "artifact"),
            l(7, "status:working"),
            l(8, "text"),
            l(9, "text"),
            l(10, "text:final"),
            l(11, "status:completed"),
        ]
    );
    let t = frames[0].task();
    let texts: Vec<String> = frames[1..6].iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        texts,
        [
            block(
                Some(1),
                "thinking",
                &json!({"id": t, "text": "Let me", "final": false})
            ),
            block(
                Some(2),
                "thinking",
                &json!({"id": t, "text": " think", "final": false})
            ),
            block(
                Some(3),
                "text",
                &json!({"id": t, "text": "Hel", "final": false})
            ),
            block(
                Some(4),
                "text",
                &json!({"id": t, "text": "lo", "final": false})
            ),
            block(
                Some(5),
                "text",
                &json!({"id": t, "text": "", "final": true})
            ),
        ]
    );
    assert_eq!(
        frames[11].data["status"]["response"], " world",
        "{:?}",
        frames[11]
    );
    assert!(frames.iter().all(|f| f.id != Some(CHUNK_START)));
    // The watch saw the same frames, byte for byte.
    let watched = w.frames(frames.len(), WAIT);
    let a: Vec<&str> = frames.iter().map(|f| f.block.as_str()).collect();
    let b: Vec<&str> = watched.iter().map(|f| f.block.as_str()).collect();
    assert_eq!(a, b);
}

/// `text` `final:true` with the whole reply: written when the last turn streamed
/// nothing, numbered from the chunk counter (so it shares its id with `completed`).
#[test]
fn whole_reply_text_when_the_last_turn_streamed_nothing() {
    let script = r#"
turns:
  - chunks: ["a", "b"]
    tool_calls: [{id: t1, name: bash, input: {command: "true"}}]
  - text: "final answer"
"#;
    let (_capsule, running) = queued("wholereply", script);
    let mut s = submit(&running.at, "msg-1");
    let frames = s.rest(WAIT);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "text"),
            l(2, "text"),
            l(3, "text:final"),
            l(4, "artifact"),
            l(5, "status:working"),
            l(6, "text:final"),
            l(6, "status:completed"),
        ]
    );
    assert_eq!(
        frames[6].block,
        block(
            Some(6),
            "text",
            &json!({"id": frames[0].task(), "text": "final answer", "final": true})
        )
    );
    assert_eq!(frames[7].data["status"]["response"], "final answer");
}

/// `status` `failed`: its messages, no `response`, `final:true`; and our departure: a
/// driver reply that is not JSON still ends the task with a `failed` naming the error.
#[test]
fn failed_status_frames_name_why() {
    let script = r#"
turns:
  - error: "the model is overloaded"
  - raw: "not json {"
  - tool_calls: [{id: t1, name: bash, input: {command: "true"}}]
"#;
    // One turn a task, so the third task's second turn is refused.
    let manifest = manifest("").replace(
        "model: scripted-test",
        "model: scripted-test\n  max_turns: 1",
    );
    let capsule = Capsule::new("failed", &manifest, script);
    let running = Live::start(host(), &capsule, QUEUE, &[]);
    let a = &running.at;

    let frames = submit(a, "m1").rest(WAIT);
    let (t, c) = (
        frames[0].task(),
        frames[0].data["context_id"].as_str().unwrap(),
    );
    assert_eq!(
        labels(&frames),
        [l(0, "status:working"), l(1, "status:failed")]
    );
    assert_eq!(
        frames[1].block,
        block(
            Some(1),
            "status",
            &status_data(t, c, "failed", "session ended", true)
        )
    );

    let frames = submit(a, "m2").rest(WAIT);
    assert_eq!(
        labels(&frames),
        [l(0, "status:working"), l(1, "status:failed")]
    );
    let why = frames[1].data["status"]["message"].as_str().unwrap();
    assert!(
        why.starts_with("failed to parse driver response: "),
        "{why}"
    );
    assert!(frames[1].data["status"].get("response").is_none());

    let frames = submit(a, "m3").rest(WAIT);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "artifact"),
            l(2, "status:failed")
        ]
    );
    assert_eq!(
        frames[2].data["status"],
        json!({"state": "failed", "message": "max_turns exceeded: the task used all 1 inference turns"})
    );
}

/// `connection-ack`: the first frame of every watch, naming `lifecycle.conversation`;
/// the watch's params are not read.
#[test]
fn connection_ack_names_the_conversation_mode() {
    let (_capsule, running) = queued("ack", "turns: []\n");
    let mut w = open(
        &running.at,
        &[JSON],
        &call(1, "stream/watch", json!("not even an object")),
    );
    assert_eq!(
        w.frame(WAIT).block,
        "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}"
    );
    let (_capsule, running) = start(
        "ack-threaded",
        "turns: []\n",
        "lifecycle:\n  conversation: threaded\n",
        QUEUE,
        &[],
    );
    let mut w = open(&running.at, &[JSON], &call(1, "stream/watch", json!({})));
    assert_eq!(
        w.frame(WAIT).block,
        "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"threaded\"}"
    );
}

// ---------------------------------------------------------------------------------
// Event ids and replay.

/// Event ids: two tasks on one capsule each write ids from 0.
#[test]
fn every_task_numbers_its_frames_from_zero() {
    let script = format!(
        "turns:\n{}{}{}{}",
        bash_turn("echo a"),
        text_turn("a"),
        bash_turn("echo b"),
        text_turn("b")
    );
    let (_capsule, running) = queued("ids", &script);
    let mut w = watch(&running.at, &[]);
    submit(&running.at, "m1").rest(WAIT);
    submit(&running.at, "m2").rest(WAIT);
    let frames = w.frames(10, WAIT);
    let run = one_call_task();
    assert_eq!(labels(&frames), [run.clone(), run].concat());
    assert_ne!(frames[0].task(), frames[5].task());
}

/// Replay: `stream/watch` replays from `Last-Event-ID`, from 0 without one or with one
/// that is not a number (so id-0 frames are skipped), comparing ids not positions;
/// the header name is case-insensitive. `message/stream` replays before submitting,
/// a replayed final status does not close it, and a non-numeric id replays nothing.
#[test]
fn replay_follows_last_event_id() {
    let turns: String = ["a", "b", "c", "d"]
        .iter()
        .map(|x| format!("{}{}", bash_turn(&format!("echo {x}")), text_turn(x)))
        .collect();
    let (_capsule, running) = queued("replay", &format!("turns:\n{turns}"));
    let a = &running.at;
    let mut w0 = watch(a, &[]);
    submit(a, "ma").rest(WAIT);
    submit(a, "mb").rest(WAIT);
    let ab = w0.frames(10, WAIT);
    let (ta, tb) = (ab[0].task().to_string(), ab[5].task().to_string());
    let above = |n: u64| -> Vec<String> {
        ab.iter()
            .filter(|f| f.id.is_some_and(|id| id > n))
            .map(|f| f.block.clone())
            .collect()
    };

    let cases: Vec<ReplayCase> = vec![
        (vec![], above(0)),
        (vec![("Last-Event-ID", "0")], above(0)),
        (vec![("Last-Event-ID", "2")], above(2)),
        (vec![("last-event-id", "2")], above(2)),
        (vec![("LAST-EVENT-ID", "2")], above(2)),
        (vec![("Last-Event-ID", "abc")], above(0)),
        (vec![("Last-Event-ID", "3")], vec![]),
    ];
    let mut watches: Vec<Sse> = cases.iter().map(|(h, _)| watch(a, h)).collect();

    // message/stream with Last-Event-ID: the replay (two final statuses among it), then
    // its own task, live, to its final status.
    let mut s = submit_with(a, &[("Last-Event-ID", "2")], "mc");
    let frames = s.rest(WAIT);
    let replayed: Vec<String> = frames[..4].iter().map(|f| f.block.clone()).collect();
    assert_eq!(replayed, above(2));
    assert_eq!(
        labels(&frames[..4]),
        [
            l(3, "text:final"),
            l(3, "status:completed"),
            l(3, "text:final"),
            l(3, "status:completed")
        ]
    );
    assert_eq!(
        (frames[1].task(), frames[3].task()),
        (ta.as_str(), tb.as_str())
    );
    let tc = frames[4].task().to_string();
    assert!(tc != ta && tc != tb);
    assert_eq!(labels(&frames[4..]), one_call_task());

    // Each watch: its replay, exactly, then the live frames of task c.
    for ((headers, want), w) in cases.iter().zip(watches.iter_mut()) {
        let got = w.frames(want.len() + 1, WAIT);
        let blocks: Vec<String> = got[..want.len()].iter().map(|f| f.block.clone()).collect();
        assert_eq!(&blocks, want, "{headers:?}");
        let live = &got[want.len()];
        assert_eq!(
            (live.label(), live.task()),
            (l(0, "status:working"), tc.as_str()),
            "{headers:?}"
        );
    }

    // A Last-Event-ID that is not a number: no replay on message/stream.
    let mut s = submit_with(a, &[("Last-Event-ID", "not-a-number")], "md");
    let frames = s.rest(WAIT);
    assert_eq!(frames[0].label(), l(0, "status:working"));
    assert!(frames.iter().all(|f| f.task() == frames[0].task()));
    assert_eq!(frames.len(), 5);
}

/// Replay and the gap rule after the ring (512) evicted frames, and what never enters
/// the ring: heartbeat, `connection-ack`, `gap`, `error` and the `rejected` status.
/// Also `gap` depends on ids, not on eviction, and a replay compares ids, not positions.
#[test]
fn replay_after_eviction_gap_and_what_never_enters_the_ring() {
    let chunks = vec!["c"; 600];
    let script = format!(
        "turns:\n  - chunks: {}\n{}{}{}",
        json!(chunks),
        bash_turn("sleep 3"),
        text_turn("b done"),
        text_turn("e done"),
    );
    let (_capsule, running) = start(
        "ring",
        &script,
        "lifecycle:\n  queue_depth: 1\n",
        QUEUE,
        &[("MUR_HEARTBEAT_MS", "100")],
    );
    let a = &running.at;
    let session = running.session();
    let mut w1 = watch(a, &[]);

    // Task A: 603 frames (working 0, chunks 1..=600, end of turn 601, completed 602),
    // written faster than any connection's queue of 128 can be drained, so even this
    // reader may be told it lagged.
    let fa = submit(a, "ma").rest(WAIT);
    assert_eq!(run_with_lags(&fa, 0), 603);
    let done = fa.last().unwrap();
    assert_eq!(done.label(), l(602, "status:completed"));
    let (ta, ca) = (done.task(), done.data["context_id"].as_str().unwrap());
    // A's frames as the ring holds them, rebuilt from what the script makes.
    let mut a_frames = vec![block(
        Some(0),
        "status",
        &status_data(ta, ca, "working", "inference turn 1", false),
    )];
    for id in 1..=600 {
        a_frames.push(block(
            Some(id),
            "text",
            &json!({"id": ta, "text": "c", "final": false}),
        ));
    }
    a_frames.push(block(
        Some(601),
        "text",
        &json!({"id": ta, "text": "", "final": true}),
    ));
    a_frames.push(done.block.clone());
    assert_eq!(
        done.data["status"]["response"].as_str().unwrap(),
        "c".repeat(600)
    );

    // Task B runs (sleep 3), C waits, D is rejected, C is canceled while queued.
    let mut sb = submit(a, "mb");
    let b0 = sb.frame(WAIT);
    assert_eq!(b0.label(), l(0, "status:working"));
    let (mut sc, tc) = submit_queued(a, &session, &[], "mc");
    let mut sd = submit(a, "md");
    let rejected = sd.rest(WAIT);
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].state(), "rejected");
    assert!(cancel(a, &tc).get("result").is_some());
    let fc = sc.rest(WAIT);
    assert_eq!(
        fc.last().unwrap().label(),
        l(QUEUED_CANCEL_START, "status:canceled")
    );
    // A request that is not a message: an error frame on its own connection.
    let mut bad = open(
        a,
        &[JSON],
        &call(1, "message/stream", json!({"message": {}})),
    );
    assert_eq!(bad.rest(WAIT)[0].event, "error");
    sb.rest(WAIT);

    // The live watch saw A, B up to now, C's cancel; never `rejected`, never `error`,
    // and heartbeats meanwhile.
    let items = w1.items_until(WAIT, |f| f.task() == b0.task() && f.is_final());
    let live = only_frames(&items);
    assert!(!heartbeats(&items).is_empty());
    assert!(
        live.iter()
            .all(|f| f.state() != "rejected" && f.event != "error" && f.event != "gap"),
        "{:?}",
        labels(&live)
    );
    // After A: B's working, C's cancel, the rest of B.
    let after_a = live.iter().position(|f| f.block == done.block).unwrap() + 1;
    let tail: Vec<String> = live[after_a..].iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        labels(&live[after_a..]),
        [
            l(0, "status:working"),
            l(QUEUED_CANCEL_START, "status:canceled"),
            l(1, "artifact"),
            l(2, "status:working"),
            l(3, "text:final"),
            l(3, "status:completed"),
        ]
    );

    // The ring: the newest 512 of those 609 frames, that is A from id 97 on, all of B,
    // and C's cancel.
    let ring: Vec<String> = a_frames[97..].iter().cloned().chain(tail).collect();
    assert_eq!(ring.len(), 512);
    let gap = block(None, "gap", &json!({"first_available_id": 97}));
    let id_of = |b: &String| -> u64 {
        b.strip_prefix("id: ")
            .and_then(|r| r.split('\n').next())
            .and_then(|n| n.parse().ok())
            .unwrap()
    };
    let ids_above =
        |n: u64| -> Vec<String> { ring.iter().filter(|b| id_of(b) > n).cloned().collect() };
    let mut with_gap = vec![gap.clone()];
    with_gap.extend(ring.iter().cloned());
    let cases: Vec<ReplayCase> = vec![
        // From 0: 97 > 1, so a gap and the whole ring.
        (vec![], with_gap.clone()),
        (vec![("Last-Event-ID", "95")], with_gap.clone()),
        // 97 is not more than one above 96: no gap, and B's low ids are skipped.
        (vec![("Last-Event-ID", "96")], ids_above(96)),
        // Only the queued cancel's high id is above 602.
        (vec![("Last-Event-ID", "602")], ids_above(602)),
        // A second replay from 0 has exactly one gap: the first one was not buffered.
        (vec![], with_gap),
    ];
    assert_eq!(ids_above(96).len(), 507);
    assert_eq!(ids_above(602).len(), 1);
    let mut watches: Vec<Sse> = cases.iter().map(|(h, _)| watch(a, h)).collect();
    let mut se = submit(a, "me");
    let te = se.frame(WAIT).task().to_string();
    for ((headers, want), w) in cases.iter().zip(watches.iter_mut()) {
        // The replay is written before any heartbeat can be: one inside it would have
        // come from the ring.
        let items = w.items_until(WAIT, |f| f.task() == te);
        let (replay, live) = items.split_at(items.len() - 1);
        let blocks: Vec<String> = replay
            .iter()
            .map(|i| match i {
                Item::Frame(f) => f.block.clone(),
                Item::Heartbeat(_) => ":heartbeat".to_string(),
            })
            .collect();
        // Heartbeats may come after the replay, before the live frame.
        let trimmed: Vec<String> = {
            let mut b = blocks.clone();
            while b.last().is_some_and(|x| x == ":heartbeat") {
                b.pop();
            }
            b
        };
        assert_eq!(trimmed.len(), want.len(), "{headers:?}");
        assert!(&trimmed == want, "{headers:?}: replay differs");
        match &live[0] {
            Item::Frame(f) => assert_eq!(f.label(), l(0, "status:working")),
            Item::Heartbeat(_) => unreachable!(),
        }
    }
    se.rest(WAIT);
}

// ---------------------------------------------------------------------------------
// Connections: slow readers, broadcast, heartbeat.

/// Frames a connection misses, and our `lagged` departure: a reader stalled past 128
/// frames loses the oldest and gets `event: lagged` `{"missed":N}` (no id) where they
/// were dropped; the capsule and other connections are not slowed.
#[test]
fn a_stalled_reader_gets_lagged_and_does_not_slow_the_capsule() {
    // Frames big enough that the socket buffers cannot hold 128 of them.
    let piece = "x".repeat(32 * 1024);
    let chunks = vec![piece.as_str(); 400];
    let script = format!("turns:\n  - chunks: {}\n", json!(chunks));
    let (_capsule, running) = queued("lagged", &script);
    let a = &running.at;
    let mut stalled = watch(a, &[]);
    // The submitting connection is read as fast as it comes and runs to the end while
    // the other one stalls: working 0, 400 chunks, end of turn 401, completed 402.
    let mut s = submit(a, "m1");
    let frames = s.rest(WAIT);
    assert_eq!(run_with_lags(&frames, 0), 403);
    assert_eq!(frames.last().unwrap().label(), l(402, "status:completed"));

    // The stalled reader: what the socket held, then `lagged` where frames were
    // dropped, then the newest frames, ending with the final status.
    let frames = stalled.until(WAIT, |f| f.is_final());
    assert_eq!(run_with_lags(&frames, 0), 403);
    let missed: u64 = frames
        .iter()
        .filter(|f| f.event == "lagged")
        .map(|f| f.data["missed"].as_u64().unwrap())
        .sum();
    assert!(missed > 0, "{:?}", labels(&frames));
    let last_lag = frames.iter().rposition(|f| f.event == "lagged").unwrap();
    assert!(
        frames.len() - last_lag - 1 <= 128,
        "after the stall, at most the queue's 128 newest frames"
    );
}

/// Neither endpoint filters by task: one task's frames reach a watch and another
/// task's `message/stream`, which closes on the first final status of any task.
#[test]
fn frames_reach_every_connection_and_message_stream_closes_on_any_final() {
    let script = format!(
        "turns:\n{}{}{}",
        bash_turn("sleep 2"),
        text_turn("a done"),
        text_turn("b done")
    );
    let (_capsule, running) = queued("broadcast", &script);
    let a = &running.at;
    let mut w = watch(a, &[]);
    let mut sa = submit(a, "ma");
    let first = sa.frame(WAIT);
    assert_eq!(first.label(), l(0, "status:working"));
    let ta = first.task().to_string();
    let mut sb = submit(a, "mb");
    let on_b = sb.rest(WAIT);
    assert!(on_b.iter().all(|f| f.task() == ta), "{:?}", labels(&on_b));
    assert_eq!(
        labels(&on_b),
        [
            l(1, "artifact"),
            l(2, "status:working"),
            l(3, "text:final"),
            l(3, "status:completed")
        ]
    );
    let on_a = sa.rest(WAIT);
    let (x, y): (Vec<&str>, Vec<&str>) = (
        on_a.iter().map(|f| f.block.as_str()).collect(),
        on_b.iter().map(|f| f.block.as_str()).collect(),
    );
    assert_eq!(x, y);
    // The watch goes on past both final statuses.
    let watched = w.frames(8, WAIT);
    let tb = watched[5].task();
    assert_ne!(tb, ta);
    assert_eq!(
        labels(&watched[5..]),
        [
            l(0, "status:working"),
            l(1, "text:final"),
            l(1, "status:completed")
        ]
    );
    assert_eq!(watched[7].data["status"]["response"], "b done");
}

/// Heartbeat: `:heartbeat\n\n` every interval measured from connection open, not reset
/// by frames, on both endpoints, and on time while the capsule works (our departure).
#[test]
fn heartbeats_come_on_time_whatever_the_capsule_does() {
    let mut script = String::from("turns:\n");
    for _ in 0..6 {
        script.push_str(&bash_turn("sleep 0.1"));
    }
    script.push_str(&bash_turn("sleep 1"));
    script.push_str(&text_turn("done"));
    let (_capsule, running) = start(
        "heartbeat",
        &script,
        "",
        QUEUE,
        &[("MUR_HEARTBEAT_MS", "200")],
    );
    let a = &running.at;
    let mut w = watch(a, &[]);
    let mut s = submit(a, "m1");
    let items = w.items_until(WAIT, |f| f.is_final());
    let on_stream = s.rest_items(WAIT);
    let beats = heartbeats(&items);
    let frames = only_frames(&items);
    let ms = |at: Instant| at.duration_since(w.opened).as_millis() as i64;
    assert!(
        ms(beats[0]) >= 150,
        "the first heartbeat comes an interval after opening: {} ms",
        ms(beats[0])
    );
    for (k, at) in beats.iter().enumerate() {
        assert!(
            ms(*at) >= (k as i64 + 1) * 200 - 50,
            "heartbeat {} at {} ms: never more often than the interval",
            k + 1,
            ms(*at)
        );
    }
    let between =
        |from: Instant, to: Instant| beats.iter().filter(|b| **b > from && **b < to).count();
    // Six quick tool calls: a frame every ~100 ms, so a heartbeat reset by frames
    // would never come; ours keeps its schedule.
    let dense = (frames[0].at, frames[12].at);
    assert_eq!(frames[12].label(), l(12, "status:working"));
    assert!(
        between(dense.0, dense.1) >= 2,
        "{} heartbeats in {} ms of frames",
        between(dense.0, dense.1),
        dense.1.duration_since(dense.0).as_millis()
    );
    // `sleep 1`: the capsule is busy and heartbeats still come.
    assert_eq!(frames[13].label(), l(13, "artifact"));
    let busy = (frames[12].at, frames[13].at);
    assert!(busy.1.duration_since(busy.0) >= Duration::from_millis(1000));
    assert!(
        between(busy.0, busy.1) >= 3,
        "{} heartbeats during a 1 s tool call",
        between(busy.0, busy.1)
    );
    assert!(
        heartbeats(&on_stream).len() >= 3,
        "message/stream gets heartbeats too"
    );
}

// ---------------------------------------------------------------------------------
// Lifecycle: busy capsules, lanes, cancel, stop.

/// `status` `rejected`: under `single`, a second task while one runs gets `id: 0`
/// `rejected` `final:true` on its own connection only, then the connection closes.
#[test]
fn single_rejects_a_second_task_while_busy() {
    let script = format!("turns:\n{}{}", bash_turn("sleep 2"), text_turn("done"));
    let (_capsule, running) = start("single", &script, "", &[], &[]);
    let a = &running.at;
    let mut s1 = submit(a, "m1");
    assert_eq!(s1.frame(WAIT).label(), l(0, "status:working"));
    let mut w = watch(a, &[]);
    let mut s2 = submit(a, "m2");
    let items = s2.rest_items(WAIT);
    assert_eq!(items.len(), 1, "{items:?}");
    let f = &only_frames(&items)[0];
    let (t, c) = (f.task(), f.data["context_id"].as_str().unwrap());
    assert!(is_minted(t, "tsk_", 32) && is_minted(c, "ctx_", 32));
    assert_eq!(
        f.block,
        block(
            Some(0),
            "status",
            &status_data(t, c, "rejected", "task rejected: capsule is busy", true)
        )
    );
    let s1_rest = s1.rest(WAIT);
    assert_eq!(s1_rest.last().unwrap().state(), "completed");
    // The watch (open before the rejection) never sees it; the capsule then exits.
    let watched = w.rest(WAIT);
    assert!(watched.iter().all(|f| f.state() != "rejected"));
    assert_eq!(watched.last().unwrap().state(), "completed");
    let session = running.session();
    running.ends_cleanly(WAIT);
    let rejected = session.events("task_rejected");
    assert_eq!(rejected.len(), 1);
    assert_eq!(
        (
            rejected[0]["task_id"].as_str(),
            rejected[0]["cause"].as_str()
        ),
        (Some(t), Some("capsule_busy"))
    );
}

/// `message/stream` step 4 under `queue` with `lifecycle.queue_depth: 1`: one running,
/// one waiting, a third is rejected.
#[test]
fn queue_depth_one_rejects_a_third_task() {
    let script = format!(
        "turns:\n{}{}{}",
        bash_turn("sleep 2"),
        text_turn("first"),
        text_turn("second")
    );
    let (_capsule, running) = start(
        "depth",
        &script,
        "lifecycle:\n  queue_depth: 1\n",
        QUEUE,
        &[],
    );
    let a = &running.at;
    let mut w = watch(a, &[]);
    let mut s1 = submit(a, "m1");
    assert_eq!(s1.frame(WAIT).label(), l(0, "status:working"));
    let session = running.session();
    let (mut s2, _) = submit_queued(a, &session, &[], "m2");
    let rejected = submit(a, "m3").rest(WAIT);
    assert_eq!(labels(&rejected), [l(0, "status:rejected")], "{rejected:?}");
    assert_eq!(
        rejected[0].data["status"]["message"],
        "task rejected: capsule is busy"
    );
    s1.rest(WAIT);
    s2.rest(WAIT);
    let frames = w.until(WAIT, |f| f.data["status"]["response"] == "second");
    assert_eq!(
        frames.iter().filter(|f| f.state() == "completed").count(),
        2
    );
    assert!(frames.iter().all(|f| f.state() != "rejected"));
}

/// Queue lanes: from `x-murmur-task-origin`, `peer` waits in `peer`; `completion` in
/// `bg` with origin `completion`; none, `user` or anything else is origin `event` in
/// `bg`. Peer runs first, then bg in arrival order.
#[test]
fn lanes_run_peer_before_bg_in_arrival_order() {
    let mut script = format!("turns:\n{}{}", bash_turn("sleep 2"), text_turn("first"));
    for n in 0..5 {
        script.push_str(&text_turn(&format!("queued {n}")));
    }
    // It takes peer tasks (`exports.peer_tasks.accept`), as a peer's must be let in.
    let (_capsule, running) = start(
        "lanes",
        &script,
        "lifecycle:\n  queue_depth: 8\nexports:\n  peer_tasks:\n    accept: true\n",
        QUEUE,
        &[],
    );
    let a = &running.at;
    let session = running.session();
    let mut w = watch(a, &[]);
    let mut first = submit(a, "m-first");
    assert_eq!(first.frame(WAIT).label(), l(0, "status:working"));
    let origin = "x-murmur-task-origin";
    // One at a time, each received before the next is sent: arrival order is known.
    let mut waiting: Vec<Sse> = [
        (vec![(origin, "completion")], "m-completion"),
        (vec![(origin, "peer")], "m-peer"),
        (vec![], "m-none"),
        (vec![(origin, "user")], "m-user"),
        (vec![(origin, "system")], "m-system"),
    ]
    .iter()
    .map(|(headers, m)| submit_queued(a, &session, headers, m).0)
    .collect();
    for s in &mut waiting {
        s.rest(WAIT);
    }
    first.rest(WAIT);
    let mut done = 0;
    w.until(WAIT, |f| {
        if f.state() == "completed" {
            done += 1;
        }
        done == 6
    });
    let ids: Vec<(String, &str, &str, &str)> = [
        ("m-first", "event", "bg"),
        ("m-peer", "peer", "peer"),
        ("m-completion", "completion", "bg"),
        ("m-none", "event", "bg"),
        ("m-user", "event", "bg"),
        ("m-system", "event", "bg"),
    ]
    .iter()
    .map(|(m, o, lane)| (task_of(&session, m), *m, *o, *lane))
    .collect();
    let trace = session.trace();
    let starts: Vec<&Value> = trace
        .iter()
        .filter(|e| e["event_type"] == "task_start")
        .collect();
    let order: Vec<&str> = starts
        .iter()
        .map(|e| {
            let t = e["task_id"].as_str().unwrap();
            ids.iter().find(|(id, ..)| id == t).unwrap().1
        })
        .collect();
    assert_eq!(
        order,
        [
            "m-first",
            "m-peer",
            "m-completion",
            "m-none",
            "m-user",
            "m-system"
        ]
    );
    for (id, m, o, lane) in &ids {
        let start = starts.iter().find(|e| e["task_id"] == id.as_str()).unwrap();
        assert_eq!(
            (start["origin"].as_str(), start["lane"].as_str()),
            (Some(*o), Some(*lane)),
            "{m}"
        );
    }
    // They were all waiting before the first task ended.
    let first_end = trace
        .iter()
        .position(|e| e["event_type"] == "task_end")
        .unwrap();
    let received = trace
        .iter()
        .rposition(|e| e["event_type"] == "a2a_task_received")
        .unwrap();
    assert!(received < first_end, "the queued tasks arrived too late");
}

/// `tasks/cancel` on the running task: it ends `canceled` `task canceled` at once,
/// and the command it was waiting on is killed.
#[test]
fn cancel_ends_a_running_task_and_its_command() {
    let sleep = marker(30);
    let script = format!(
        "turns:\n{}{}",
        bash_turn(&format!("touch started; exec sleep {sleep}")),
        text_turn("should not matter")
    );
    let (_capsule, running) = queued("cancelrun", &script);
    let a = &running.at;
    let mut s = submit(a, "m1");
    let first = s.frame(WAIT);
    let t = first.task().to_string();
    let c = first.data["context_id"].as_str().unwrap().to_string();
    let _guard = KillOnDrop(sleep.clone());
    eventually(Duration::from_secs(10), "the command starts", || {
        !pids_running(&sleep).is_empty()
    });
    let asked = Instant::now();
    assert_eq!(
        cancel(a, &t),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"id": t, "status": {"state": "canceled"}}})
    );
    let frames = s.until(Duration::from_secs(5), |f| f.is_final());
    let last = frames.last().unwrap();
    assert_eq!(
        last.data,
        status_data(&t, &c, "canceled", "task canceled", true)
    );
    assert!(asked.elapsed() < Duration::from_secs(5));
    eventually(Duration::from_secs(5), "the canceled command ends", || {
        pids_running(&sleep).is_empty()
    });
}

/// `tasks/cancel` on queued tasks: each ends with its only frame, `canceled` `task
/// canceled before it started`, numbered by the queued-cancel counter
/// (2305843009213693951, then ...952), and never starts.
#[test]
fn cancel_queued_tasks_uses_the_queued_cancel_counter() {
    let script = format!(
        "turns:\n{}{}{}",
        bash_turn("sleep 3"),
        text_turn("first"),
        text_turn("after")
    );
    let (_capsule, running) = start(
        "cancelq",
        &script,
        "lifecycle:\n  queue_depth: 4\n",
        QUEUE,
        &[],
    );
    let a = &running.at;
    let session = running.session();
    let mut w = watch(a, &[]);
    let mut s1 = submit(a, "m1");
    assert_eq!(s1.frame(WAIT).label(), l(0, "status:working"));
    let (mut s2, t2) = submit_queued(a, &session, &[], "m2");
    let (mut s3, t3) = submit_queued(a, &session, &[], "m3");
    assert!(cancel(a, &t2).get("result").is_some());
    let f2 = s2.rest(WAIT);
    assert_eq!(f2.len(), 1, "{:?}", labels(&f2));
    let c2 = f2[0].data["context_id"].as_str().unwrap();
    assert_eq!(
        f2[0].block,
        block(
            Some(QUEUED_CANCEL_START),
            "status",
            &status_data(&t2, c2, "canceled", "task canceled before it started", true)
        )
    );
    // Every open message/stream closed on that final status, whatever its own task.
    for s in [&mut s1, &mut s3] {
        let frames = s.rest(WAIT);
        assert_eq!(frames.last().unwrap().block, f2[0].block);
    }
    assert!(cancel(a, &t3).get("result").is_some());
    let watched = w.until(WAIT, |f| f.state() == "completed");
    assert_eq!(watched[0].label(), l(0, "status:working"));
    let queued_cancels: Vec<_> = watched
        .iter()
        .filter(|f| f.task() == t2 || f.task() == t3)
        .map(Frame::label)
        .collect();
    assert_eq!(
        queued_cancels,
        [
            l(QUEUED_CANCEL_START, "status:canceled"),
            l(QUEUED_CANCEL_START + 1, "status:canceled")
        ]
    );
    // A later task runs as usual; the canceled ones never started.
    let after = submit(a, "m4").rest(WAIT);
    assert_eq!(after.last().unwrap().data["status"]["response"], "after");
    let started: Vec<String> = session
        .events("task_start")
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect();
    assert!(!started.contains(&t2) && !started.contains(&t3));
    assert_eq!(started.len(), 2);
}

/// `tasks/cancel` on a task that does not exist (-32001) or has ended (-32002): each
/// its own JSON-RPC error, exactly.
#[test]
fn cancel_of_an_unknown_or_finished_task_is_an_error() {
    let script = format!("turns:\n{}", text_turn("done"));
    let (_capsule, running) = queued("cancelerr", &script);
    let a = &running.at;
    let frames = submit(a, "m1").rest(WAIT);
    let t = frames[0].task();
    assert_eq!(
        cancel(a, "tsk_0000000000000000000000000000000f"),
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32001, "message": "Task not found"}})
    );
    assert_eq!(
        cancel(a, t),
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32002, "message": "Task cannot be canceled"}})
    );
}

/// `murmur/stop` ends a `queue` + `sleep` capsule cleanly: exit status 0, and its
/// watchers see the connection close without `capsule-closed`.
#[test]
fn murmur_stop_ends_a_sleeping_capsule_with_status_zero() {
    let script = format!("turns:\n{}", text_turn("done"));
    let (_capsule, running) = queued("stop", &script);
    let a = &running.at;
    submit(a, "m1").rest(WAIT);
    let mut w = watch(a, &[]);
    let session = running.session();
    let reply = rpc(a, &call(3, "murmur/stop", json!({})));
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 3, "result": {"stopped": session.id, "canceled": []}})
    );
    let rest = w.rest(WAIT);
    assert!(
        rest.iter().all(|f| f.event != "capsule-closed"),
        "{:?}",
        labels(&rest)
    );
    running.ends_cleanly(WAIT);
}

/// `single` (or `none`) with `after_task: sleep`: after its task the capsule closes its
/// frame stream but keeps serving, so every watcher gets `capsule-closed` as its last
/// frame, a late watcher gets its replay and then `capsule-closed`, and another task
/// is rejected. (A capsule process that exits writes no `capsule-closed`: see above.)
#[test]
fn a_parked_capsule_closes_its_frame_stream_with_capsule_closed() {
    let script = format!("turns:\n{}", text_turn("done"));
    let lifecycle = "lifecycle:\n  task_acceptance: single\n  after_task: sleep\n";
    let (_capsule, running) = start("parked", &script, lifecycle, &[], &[]);
    let a = &running.at;
    let mut w = watch(a, &[]);
    let submitted = submit(a, "m1").rest(WAIT);
    assert_eq!(submitted.last().map(|f| f.state()), Some("completed"));

    let seen = w.rest(WAIT);
    let last = seen.last().expect("frames before the close");
    assert_eq!(last.block, "event: capsule-closed\ndata: {}");
    assert_eq!(last.id, None);
    assert_eq!(
        labels(&seen[..seen.len() - 1]),
        [
            l(0, "status:working"),
            l(1, "text:final"),
            l(1, "status:completed")
        ]
    );

    let mut late = watch(a, &[]);
    let replayed = late.rest(WAIT);
    assert_eq!(
        labels(&replayed),
        [
            l(1, "text:final"),
            l(1, "status:completed"),
            (None, "capsule-closed".to_string())
        ]
    );

    let rejected = submit(a, "m2").rest(WAIT);
    assert_eq!(rejected.len(), 1);
    assert_eq!((rejected[0].id, rejected[0].state()), (Some(0), "rejected"));

    rpc(a, &call(3, "murmur/stop", json!({})));
    running.ends_cleanly(WAIT);
}

/// Hostile or broken requests get a plain HTTP error, never a panic, and the capsule
/// keeps serving.
#[test]
fn broken_requests_get_plain_http_errors_and_the_capsule_keeps_serving() {
    let script = format!("turns:\n{}", text_turn("still here"));
    let (_capsule, mut running) = queued("hostile", &script);
    let at = running.at.clone();
    let a = &at;
    // Each request goes to the capsule's own path with its token: only what is broken
    // about it is refused.
    let (path, host) = (&a.path, &a.address);
    let auth = a
        .authorization
        .as_ref()
        .map(|token| format!("authorization: {token}\r\n"))
        .unwrap_or_default();
    let huge = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        64 * 1024 * 1024
    );
    let chunked = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\n{auth}content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
    );
    // Exactly 64 KiB with no end of head: the server reads all of it before it answers,
    // so no unread bytes turn its close into a reset.
    let mut long_header = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n{auth}x-filler: ");
    long_header.push_str(&"a".repeat(64 * 1024 - long_header.len()));
    let cases = [
        (
            "a body over 1 MiB",
            huge,
            "HTTP/1.1 413 Content Too Large\r\n",
        ),
        (
            "a chunked body",
            chunked,
            "HTTP/1.1 411 Length Required\r\n",
        ),
        (
            "a head over 64 KiB",
            long_header,
            "HTTP/1.1 431 Request Header Fields Too Large\r\n",
        ),
        (
            "not HTTP",
            "\u{1}\u{2}garbage\r\n\r\n".to_string(),
            "HTTP/1.1 400 Bad Request\r\n",
        ),
        (
            "a bad content-length",
            format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n{auth}content-length: lots\r\n\r\n"),
            "HTTP/1.1 400 Bad Request\r\n",
        ),
    ];
    for (what, request, status) in cases {
        let reply = a.exchange(&request);
        assert!(reply.starts_with(status), "{what}: {reply:?}");
    }
    // A client that sends half a request and vanishes costs nothing either.
    let mut gone = connect(&a.address);
    gone.write_all(b"POST / HTTP/1.1\r\ncontent-le").unwrap();
    drop(gone);
    // And afterwards a task still makes the whole round trip.
    let frames = submit(a, "m1").rest(WAIT);
    let done = frames.last().expect("frames");
    assert_eq!(done.state(), "completed", "{:?}", labels(&frames));
    assert_eq!(done.data["status"]["response"], "still here");
    assert!(running.serving(), "the capsule is still running");
    rpc(a, &call(3, "murmur/stop", json!({})));
    let stderr = running.ends_cleanly(WAIT);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
