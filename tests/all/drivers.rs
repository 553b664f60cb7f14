//! The built-in `openai` and `anthropic` drivers end to end: the real `mur` binary talks
//! to a loopback mock of each provider's API (`common::mock_model`) over real HTTP on
//! 127.0.0.1. Each test scripts the model's replies, then checks what a user sees — the
//! answer in `out/result.txt`, the trace, the frames of `message/stream`, the exit status
//! — and what the provider was sent. No test reaches beyond 127.0.0.1.

use std::path::Path;
use std::time::Duration;

use crate::common::mock_model::{
    MockModel, Recorded, Reply, anthropic, assert_carried, crlf, messages, openai, roles_texts,
    split_awkwardly, text_of,
};
use crate::common::*;
use serde_json::{Value, json};

/// The API key the capsules read from `${MOCK_API_KEY}`; it must show up nowhere but in
/// the requests to the mock.
const KEY: &str = "sk-test-SECRET-4f9a";
const JSON_CT: (&str, &str) = ("content-type", "application/json");
/// The bound on one capsule run: what happens here takes a second or two.
const WAIT: Duration = Duration::from_secs(60);
/// A small pause between awkwardly cut pieces, so they arrive as separate reads.
const TRICKLE: Duration = Duration::from_millis(2);
const TASK: &str = "What is six times seven?";

/// The result of `echo hello from the model` as the model receives it.
const ECHO_RESULT: &str = "<untrusted-content source=tool:echo>\n$ echo hello from the model\nExit code: 0\nStdout:\nhello from the model\n\nStderr:\n\n</untrusted-content>";

// ---------------------------------------------------------------------------------
// Capsules.

/// A capsule whose inference goes to a mock model server.
struct Setup {
    driver: &'static str,
    endpoint: String,
    /// The `capabilities.network.allow` entries; `None` leaves out `network` entirely.
    allow: Option<Vec<String>>,
    stream: bool,
    lifecycle: &'static str,
    /// `inference.timeouts.read_secs`: generous, so a loaded machine does not trip it.
    read_secs: u64,
}

pub(crate) const ONE_TASK: &str = "lifecycle:\n  task_acceptance: none\n";
const OVER_HTTP: &str = "";
const THREADED: &str =
    "lifecycle:\n  conversation: threaded\n  task_acceptance: queue\n  after_task: sleep\n";

impl Setup {
    fn openai(mock: &MockModel) -> Setup {
        Setup {
            driver: "openai",
            endpoint: format!("{}/v1", mock.origin()),
            allow: Some(vec![mock.origin()]),
            stream: true,
            lifecycle: ONE_TASK,
            read_secs: 10,
        }
    }

    fn anthropic(mock: &MockModel) -> Setup {
        Setup {
            driver: "anthropic",
            endpoint: mock.origin(),
            allow: Some(vec![mock.origin()]),
            stream: true,
            lifecycle: ONE_TASK,
            read_secs: 10,
        }
    }

    fn stream(mut self, on: bool) -> Setup {
        self.stream = on;
        self
    }

    fn lifecycle(mut self, lifecycle: &'static str) -> Setup {
        self.lifecycle = lifecycle;
        self
    }

    fn read_secs(mut self, secs: u64) -> Setup {
        self.read_secs = secs;
        self
    }

    fn allow(mut self, allow: Option<Vec<String>>) -> Setup {
        self.allow = allow;
        self
    }

    fn manifest(&self) -> String {
        let network = match &self.allow {
            None => String::new(),
            Some(entries) => {
                let items: String = entries.iter().map(|e| format!("      - {e}\n")).collect();
                format!("  network:\n    allow:\n{items}")
            }
        };
        let mut m = String::new();
        m.push_str("name: drv\nversion: \"0.1.0\"\n");
        m.push_str("capabilities:\n");
        m.push_str(&network);
        m.push_str("  shell:\n    allow: [echo]\n");
        m.push_str("inference:\n");
        m.push_str(&format!("  driver: {}\n", self.driver));
        m.push_str(&format!("  endpoint: {}\n", self.endpoint));
        m.push_str("  model: test-model\n");
        m.push_str("  api_key: ${MOCK_API_KEY}\n");
        m.push_str(&format!("  stream: {}\n", self.stream));
        m.push_str("  max_tokens: 256\n");
        m.push_str("  system_prompt: You are terse.\n");
        m.push_str("  retry: {max_attempts: 3, initial_backoff_ms: 10, max_backoff_ms: 50}\n");
        m.push_str(&format!(
            "  timeouts: {{connect_secs: 5, read_secs: {}}}\n",
            self.read_secs
        ));
        m.push_str(self.lifecycle);
        m
    }

    fn capsule(&self, name: &str) -> Capsule {
        Capsule::new(name, &self.manifest(), "")
    }
}

const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", KEY)];

/// A capsule run to its end on a launch task.
struct Done {
    session: Session,
    run: Run,
    /// The `--json` launch line (`Run::stdout` holds what came after it).
    launch: String,
}

impl Done {
    fn result(&self) -> String {
        self.session.read("out/result.txt")
    }

    fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.run.status,
            0,
            "mur failed; result.txt: {:?}\nstderr:\n{}",
            std::fs::read_to_string(self.session.workdir.join("out/result.txt")),
            self.run.stderr
        );
        self
    }

    /// Exit status 1 and the task-did-not-complete error.
    fn assert_failed(&self) -> &Self {
        assert_eq!(
            self.run.status, 1,
            "mur should fail; stdout:\n{}\nstderr:\n{}",
            self.run.stdout, self.run.stderr
        );
        assert!(
            self.run
                .stderr
                .contains("error[E-RUN-040]: the task did not complete"),
            "{}",
            self.run.stderr
        );
        self
    }
}

fn run_task(capsule: &Capsule, task: &str) -> Done {
    let running = capsule.spawn_env(&["--task", task], ENV);
    let session = running.session();
    let launch = running.launch.to_string();
    let run = running.wait(WAIT);
    Done {
        session,
        run,
        launch,
    }
}

/// A task sent over `message/stream` to a `single` capsule, read to the end.
struct Streamed {
    done: Done,
    /// The event stream's body, as received.
    body: String,
    frames: Vec<(Option<u64>, String, Value)>,
}

fn stream_task(capsule: &Capsule, text: &str) -> Streamed {
    let running = capsule.spawn_env(&[], ENV);
    let session = running.session();
    let launch = running.launch.to_string();
    let raw = read_to_close(post(
        &running.address,
        &[JSON_CT],
        &message_stream_body(text),
    ));
    let body = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head: {raw:?}"))
        .1
        .to_string();
    let frames = frames(&body);
    let run = running.wait(WAIT);
    Streamed {
        done: Done {
            session,
            run,
            launch,
        },
        body,
        frames,
    }
}

/// `(id, what)` for each frame: the event, a status's state, a text's finality.
pub(crate) fn labels(frames: &[(Option<u64>, String, Value)]) -> Vec<(Option<u64>, String)> {
    frames
        .iter()
        .map(|(id, event, data)| {
            let what = match event.as_str() {
                "status" => format!("status:{}", data["status"]["state"].as_str().unwrap_or("")),
                "text" if data["final"] == true => "text:final".to_string(),
                other => other.to_string(),
            };
            (*id, what)
        })
        .collect()
}

pub(crate) fn l(id: u64, what: &str) -> (Option<u64>, String) {
    (Some(id), what.to_string())
}

/// The `text` of each non-final frame of `event`, in order.
fn pieces(frames: &[(Option<u64>, String, Value)], event: &str) -> Vec<String> {
    frames
        .iter()
        .filter(|(_, e, d)| e == event && d["final"] == false)
        .map(|(_, _, d)| d["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A JSON-RPC call answered with plain JSON.
fn rpc(address: &str, body: &Value) -> Value {
    let raw = read_to_close(post(address, &[JSON_CT], &body.to_string()));
    let (_, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head: {raw:?}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"))
}

// ---------------------------------------------------------------------------------
// Reading what the provider was sent.

/// The tool named `name` in the request's `tools`, by `find`.
fn tool_named<'a>(body: &'a Value, name: &str, find: impl Fn(&Value) -> &Value) -> &'a Value {
    let tools = body["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("the request offers no tools list: {body}"));
    tools
        .iter()
        .find(|t| find(t)["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name:?} among {}", body["tools"]))
}

fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
}

fn assert_openai_request(r: &Recorded) {
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        r.headers
    );
}

fn assert_anthropic_request(r: &Recorded) {
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        r.headers
    );
}

// ---------------------------------------------------------------------------------
// Secrets.

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir` (the capsule directory, workdir included), checked for the key.
fn assert_no_key_under(dir: &Path) -> usize {
    let mut checked = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                assert!(
                    !contains(&bytes, KEY.as_bytes()),
                    "the API key is written in {}:\n{}",
                    path.display(),
                    String::from_utf8_lossy(&bytes)
                );
                checked += 1;
            }
        }
    }
    checked
}

fn assert_no_key_in_output(done: &Done) {
    for (what, text) in [
        ("the launch line", &done.launch),
        ("stdout", &done.run.stdout),
        ("stderr", &done.run.stderr),
    ] {
        assert!(
            !text.contains(KEY),
            "the API key is in mur's {what}:\n{text}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Trace.

fn inference_lines(s: &Session) -> Vec<Value> {
    s.events("inference")
}

/// The usage the provider reported, as an `inference` line records it beside the
/// host's own estimates (`input_tokens`, `output_tokens`).
fn provider_usage(turn: &Value) -> (Option<u64>, Option<u64>) {
    (
        turn["input_tokens_actual"].as_u64(),
        turn["output_tokens_actual"].as_u64(),
    )
}

/// The `http_retry` lines, checked for the url and a delay within `max_backoff_ms`.
fn retries(s: &Session, url: &str) -> Vec<(u64, String)> {
    s.events("http_retry")
        .iter()
        .map(|e| {
            assert_eq!(e["url"], url, "{e}");
            let delay = e["delay_ms"]
                .as_u64()
                .unwrap_or_else(|| panic!("delay_ms: {e}"));
            assert!(delay <= 50, "the delay is bounded by max_backoff_ms: {e}");
            (
                e["attempt"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("attempt: {e}")),
                e["cause"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

// =================================================================================
// OpenAI.

/// A plain JSON answer: the request's shape (endpoint, bearer key, model, max_tokens,
/// system then user, the shell tool as a function), the answer in `result.txt`, and
/// the provider's usage and stop reason on the trace's `inference` line.
#[test]
pub(crate) fn openai_json_answer_request_shape_and_usage() {
    let mock = MockModel::with(vec![Reply::json(
        200,
        openai::completion(Some("The answer is 42."), &[], "stop", (31, 7)),
    )]);
    let capsule = Setup::openai(&mock).stream(false).capsule("oa-json");
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert_eq!(done.result(), "The answer is 42.");

    assert_eq!(mock.requests().len(), 1);
    let r = mock.request(0);
    assert_openai_request(&r);
    let body = r.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 256);
    assert_ne!(
        body["stream"], true,
        "stream: false in the manifest: {body}"
    );
    assert!(
        body.get("stream_options").is_none(),
        "stream_options is only allowed when streaming: {body}"
    );
    (OPENAI.assert_body)(&body);

    let turns = inference_lines(&done.session);
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0]["stop_reason"], "end_turn");
    assert_eq!(
        provider_usage(&turns[0]),
        (Some(31), Some(7)),
        "{}",
        turns[0]
    );
}

const MULTIBYTE: [&str; 4] = ["Grüße, ", "世界", " 🎉 — ", "fertig."];

fn multibyte_stream() -> openai::Stream {
    MULTIBYTE
        .iter()
        .fold(openai::Stream::new(), |s, p| s.text(p))
        .finish("stop")
        .usage(12, 8)
        .done()
}

/// A stream cut everywhere a careless reader breaks (mid-line, mid-field, inside
/// multi-byte characters, between the two newlines ending an event): the frames carry
/// exactly the deltas, with no replacement characters.
#[test]
fn openai_stream_cut_at_awkward_places_reads_whole() {
    let pieces = split_awkwardly(&multibyte_stream().bytes());
    assert!(pieces.len() > 100, "cut finely: {}", pieces.len());
    let mock = MockModel::with(vec![Reply::sse(pieces).with_delay(TRICKLE)]);
    let capsule = Setup::openai(&mock)
        .lifecycle(OVER_HTTP)
        .capsule("oa-awkward");
    let s = stream_task(&capsule, TASK);
    s.done.assert_ok();
    assert_eq!(pieces_of(&s), MULTIBYTE);
    assert_eq!(s.done.result(), MULTIBYTE.concat());
    assert!(!s.body.contains('\u{FFFD}'), "{}", s.body);
}

fn pieces_of(s: &Streamed) -> Vec<String> {
    pieces(&s.frames, "text")
}

/// `\r\n` line endings (allowed by the event-stream format), cut between `\r` and `\n`:
/// the answer and the usage chunk still read whole.
#[test]
fn openai_stream_with_crlf_line_endings() {
    let pieces = split_awkwardly(&crlf(&multibyte_stream().bytes()));
    let mock = MockModel::with(vec![Reply::sse(pieces).with_delay(TRICKLE)]);
    let capsule = Setup::openai(&mock).capsule("oa-crlf");
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert_eq!(done.result(), MULTIBYTE.concat());
    let turn = &inference_lines(&done.session)[0];
    assert_eq!(provider_usage(turn), (Some(12), Some(8)), "{turn}");
}

/// A tool call round trip without streaming: the host runs the tool the model named,
/// and the next request carries the assistant's `tool_calls` and a `tool` message with
/// the same id and the tool's exact result.
#[test]
fn openai_tool_call_round_trip() {
    let call = openai::tool_call("call_Xy12", "echo", r#"{"command":"hello from the model"}"#);
    let mock = MockModel::with(vec![
        Reply::json(
            200,
            openai::completion(None, &[call], "tool_calls", (50, 12)),
        ),
        Reply::json(
            200,
            openai::completion(Some("It said hello."), &[], "stop", (80, 5)),
        ),
    ]);
    let capsule = Setup::openai(&mock).stream(false).capsule("oa-tool");
    let done = run_task(&capsule, "Say hello through echo.");
    done.assert_ok();
    assert_eq!(done.result(), "It said hello.");

    let calls = done.session.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_name"], "echo");
    assert_eq!(calls[0]["tool_call_id"], "call_Xy12");
    assert_eq!(
        calls[0]["input"],
        json!({"command": "hello from the model"})
    );
    assert_eq!(calls[0]["status"], "ok");
    let turns = inference_lines(&done.session);
    assert_eq!(turns[0]["stop_reason"], "tool_call");
    assert_eq!(turns[1]["stop_reason"], "end_turn");

    assert_eq!(mock.requests().len(), 2);
    let body = mock.request(1).json();
    let msgs = messages(&body);
    assert_eq!(
        msgs.iter().map(|m| m["role"].clone()).collect::<Vec<_>>(),
        ["system", "user", "assistant", "tool"],
        "{body}"
    );
    let asked = &msgs[2]["tool_calls"];
    assert_eq!(asked.as_array().map(Vec::len), Some(1), "{}", msgs[2]);
    assert_eq!(asked[0]["id"], "call_Xy12");
    assert_eq!(asked[0]["type"], "function");
    assert_eq!(asked[0]["function"]["name"], "echo");
    let args: Value = serde_json::from_str(
        asked[0]["function"]["arguments"]
            .as_str()
            .unwrap_or_else(|| panic!("arguments are a JSON string: {}", asked[0])),
    )
    .expect("arguments parse");
    assert_eq!(args, json!({"command": "hello from the model"}));
    assert_eq!(msgs[3]["tool_call_id"], "call_Xy12");
    assert_eq!(text_of(&msgs[3]["content"]), ECHO_RESULT);
}

/// Two tool calls whose arguments stream in pieces, by index: both run in order with
/// their whole input, and the next request pairs each result with its call's id.
#[test]
fn openai_streamed_tool_call_arguments_are_joined_by_index() {
    let first = openai::Stream::new()
        .text("Running both.")
        .tool_call(0, "call_A", "echo")
        .tool_args(0, "{\"comm")
        .tool_args(0, "and\": \"fir")
        .tool_args(0, "st\"}")
        .tool_call(1, "call_B", "echo")
        .tool_args(1, "{\"command\"")
        .tool_args(1, ": \"sec")
        .tool_args(1, "ond\"}")
        .finish("tool_calls")
        .usage(60, 20)
        .done();
    let second = openai::Stream::new()
        .text("Both ran.")
        .finish("stop")
        .usage(99, 3)
        .done();
    let mock = MockModel::with(vec![
        Reply::sse(first.events()),
        Reply::sse(second.events()),
    ]);
    let capsule = Setup::openai(&mock).capsule("oa-tool-stream");
    let done = run_task(&capsule, "Echo first, then second.");
    done.assert_ok();
    assert_eq!(done.result(), "Both ran.");

    let calls: Vec<(Value, Value)> = done
        .session
        .events("tool_call")
        .iter()
        .map(|c| (c["tool_call_id"].clone(), c["input"].clone()))
        .collect();
    assert_eq!(
        calls,
        [
            (json!("call_A"), json!({"command": "first"})),
            (json!("call_B"), json!({"command": "second"})),
        ]
    );
    let turn = &inference_lines(&done.session)[0];
    assert_eq!(turn["stop_reason"], "tool_call");
    assert_eq!(provider_usage(turn), (Some(60), Some(20)));

    let body = mock.request(1).json();
    let msgs = messages(&body);
    assert_eq!(
        msgs.iter().map(|m| m["role"].clone()).collect::<Vec<_>>(),
        ["system", "user", "assistant", "tool", "tool"],
        "{body}"
    );
    assert_eq!(text_of(&msgs[2]["content"]), "Running both.");
    let asked: Vec<(Value, Value)> = msgs[2]["tool_calls"]
        .as_array()
        .expect("tool_calls")
        .iter()
        .map(|c| {
            let args = c["function"]["arguments"].as_str().expect("a JSON string");
            (
                c["id"].clone(),
                serde_json::from_str(args).expect("arguments parse"),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [
            (json!("call_A"), json!({"command": "first"})),
            (json!("call_B"), json!({"command": "second"})),
        ]
    );
    assert_eq!(msgs[3]["tool_call_id"], "call_A");
    assert!(
        text_of(&msgs[3]["content"]).contains("Stdout:\nfirst\n"),
        "{}",
        msgs[3]
    );
    assert_eq!(msgs[4]["tool_call_id"], "call_B");
    assert!(
        text_of(&msgs[4]["content"]).contains("Stdout:\nsecond\n"),
        "{}",
        msgs[4]
    );
}

/// `finish_reason: length` is `max_tokens` on the trace, and the task completes with
/// the partial answer.
#[test]
fn openai_length_finish_is_max_tokens_and_completes() {
    let stream = openai::Stream::new()
        .text("This answer is ")
        .text("cut")
        .finish("length")
        .usage(10, 256)
        .done();
    let mock = MockModel::with(vec![Reply::sse(stream.events())]);
    let capsule = Setup::openai(&mock).capsule("oa-length");
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert!(
        done.result().starts_with("This answer is cut"),
        "{:?}",
        done.result()
    );
    let turn = &inference_lines(&done.session)[0];
    assert_eq!(turn["stop_reason"], "max_tokens", "{turn}");
    assert_eq!(done.session.events("task_end")[0]["exit_status"], "ok");
}

/// HTTP 429 with `retry-after: 0`: retried once, then the streamed answer.
#[test]
fn openai_http_429_with_retry_after_is_retried() {
    let stream = openai::Stream::new()
        .text("After the wait.")
        .finish("stop")
        .usage(5, 4)
        .done();
    let mock = MockModel::with(vec![
        Reply::json(
            429,
            openai::error(
                "Rate limit reached for test-model on requests per min (RPM): Limit 3, Used 3, Requested 1.",
                "requests",
                Some("rate_limit_exceeded"),
            ),
        )
        .with_header("retry-after", "0"),
        Reply::sse(stream.events()),
    ]);
    let capsule = Setup::openai(&mock).capsule("oa-429");
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert_eq!(done.result(), "After the wait.");
    assert_eq!(mock.requests().len(), 2);
    let url = format!("{}/v1/chat/completions", mock.origin());
    assert_eq!(retries(&done.session, &url), [(1, "HTTP 429".to_string())]);
}

/// A stream that stalls longer than `timeouts.read_secs` (2 s) fails the task instead of
/// waiting: the rest of the answer would have come after 15 s.
#[test]
fn openai_stalled_stream_hits_the_read_timeout() {
    let events = openai::Stream::new()
        .text("Slow")
        .text(" answer")
        .finish("stop")
        .usage(3, 2)
        .done()
        .events();
    let (head, tail) = events.split_at(2);
    let mock = MockModel::with(vec![
        Reply::sse(vec![head.concat(), tail.concat()]).with_delay(Duration::from_secs(15)),
    ]);
    let capsule = Setup::openai(&mock).read_secs(2).capsule("oa-stall");
    let done = run_task(&capsule, TASK);
    done.assert_failed();
    let result = done.result();
    assert!(result.starts_with("error: openai: "), "{result:?}");
    assert!(result.contains("timeout"), "the error says why: {result:?}");
}

/// Allow-listing: a model server whose origin is not in `capabilities.network.allow`
/// (another port listed, or no network at all) is never contacted; the task fails
/// naming the allow list, and the trace has `http_denied` with the origin.
#[test]
fn a_model_server_outside_the_allow_list_is_never_contacted() {
    let other = MockModel::start();
    for (driver, allow) in [("openai", Some(vec![other.origin()])), ("anthropic", None)] {
        let mock = MockModel::with(vec![Reply::json(
            200,
            openai::completion(Some("should not be asked"), &[], "stop", (1, 1)),
        )]);
        let setup = match driver {
            "openai" => Setup::openai(&mock),
            _ => Setup::anthropic(&mock),
        };
        let capsule = setup.allow(allow).capsule(&format!("denied-{driver}"));
        let done = run_task(&capsule, TASK);
        done.assert_failed();
        assert!(
            mock.requests().is_empty(),
            "{driver}: the mock was contacted: {:?}",
            mock.requests()
        );
        let result = done.result();
        assert!(result.starts_with("error: "), "{driver}: {result:?}");
        assert!(
            result.contains("capabilities.network.allow"),
            "{driver}: {result:?}"
        );
        // Said at start-up too, naming the entry that would allow it.
        let warning = format!(
            "warning[W-CAP-001]: the model server {} is not in capabilities.network.allow",
            mock.origin()
        );
        assert!(
            done.run.stderr.starts_with(&warning),
            "{driver}: {}",
            done.run.stderr
        );
        assert!(
            done.run
                .stderr
                .contains(&format!("hint: add '{}'", mock.origin()))
        );
        let denied = done.session.events("http_denied");
        assert!(!denied.is_empty(), "{driver}: no http_denied line");
        assert_eq!(
            denied[0]["origin"],
            mock.origin(),
            "{driver}: {}",
            denied[0]
        );
    }
    assert!(other.requests().is_empty());
}

/// The key reaches the provider (as a bearer token) and nothing else: no file under the
/// capsule directory, not mur's output, not a frame — through a streamed tool round trip.
#[test]
fn the_api_key_reaches_only_the_provider() {
    let first = openai::Stream::new()
        .tool_call(0, "call_K", "echo")
        .tool_args(0, r#"{"command":"hello from the model"}"#)
        .finish("tool_calls")
        .usage(20, 10)
        .done();
    let second = openai::Stream::new()
        .text("Done.")
        .finish("stop")
        .usage(30, 2)
        .done();
    let mock = MockModel::with(vec![
        Reply::sse(first.events()),
        Reply::sse(second.events()),
    ]);
    let capsule = Setup::openai(&mock).lifecycle(OVER_HTTP).capsule("oa-key");
    let s = stream_task(&capsule, TASK);
    s.done.assert_ok();
    assert_eq!(s.done.result(), "Done.");
    for r in mock.requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    assert!(!s.body.contains(KEY), "the key is in a frame:\n{}", s.body);
    assert_no_key_in_output(&s.done);
    let files = assert_no_key_under(&capsule.dir);
    assert!(files >= 5, "only {files} files were checked");
}

/// `conversation: threaded`: a second task in the same context is sent the first task's
/// exchange before its own text; a task in another context is not.
#[test]
fn threaded_context_carries_the_first_exchange_into_the_next_request() {
    let answer = |text: &str| {
        Reply::sse(
            openai::Stream::new()
                .text(text)
                .finish("stop")
                .usage(10, 3)
                .done()
                .events(),
        )
    };
    let mock = MockModel::with(vec![
        answer("Noted: PELICAN."),
        answer("PELICAN."),
        answer("I do not know."),
        answer("Still PELICAN."),
    ]);
    let capsule = Setup::openai(&mock)
        .lifecycle(THREADED)
        .capsule("oa-threaded");
    let running = capsule.spawn_env(&[], ENV);
    let a = running.address.clone();
    let send_to = |a: &str, n: u64, text: &str, ctx: &str| {
        let body = json!({
            "jsonrpc": "2.0", "id": n, "method": "message/stream",
            "params": {"message": {
                "messageId": format!("msg-{n}"), "role": "user", "contextId": ctx,
                "parts": [{"text": text}]
            }}
        });
        let raw = read_to_close(post(a, &[JSON_CT], &body.to_string()));
        let frames = frames(raw.split_once("\r\n\r\n").expect("a head").1);
        let last = frames.last().expect("frames").2.clone();
        assert_eq!(last["status"]["state"], "completed", "task {n}: {last}");
        last["status"]["response"].clone()
    };
    let send = |n: u64, text: &str, ctx: &str| send_to(&a, n, text, ctx);
    assert_eq!(
        send(1, "Remember the word PELICAN.", "ctx-drv-one"),
        "Noted: PELICAN."
    );
    assert_eq!(send(2, "Which word?", "ctx-drv-one"), "PELICAN.");
    assert_eq!(send(3, "Which word?", "ctx-drv-two"), "I do not know.");

    let roles_texts = roles_texts(&mock.request(1).json());
    assert_carried(
        &roles_texts,
        "Remember the word PELICAN.",
        "Noted: PELICAN.",
        "Which word?",
    );
    assert_eq!(roles_texts[0].0, "system");

    let third = mock.request(2).json();
    assert!(
        !third.to_string().contains("PELICAN"),
        "another context starts afresh: {third}"
    );
    let third = messages(&third);
    assert_eq!(
        text_of(&third.last().expect("messages")["content"]),
        "Which word?"
    );

    let stopped = rpc(
        &a,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}}),
    );
    assert!(stopped.get("result").is_some(), "{stopped}");
    let session = running.session();
    let run = running.wait(WAIT);
    assert_eq!(run.status, 0, "{}", run.stderr);
    // Threaded: every task's answer is kept beside the latest one.
    let mut copies: Vec<String> = std::fs::read_dir(session.workdir.join("out"))
        .expect("out/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("result_tsk_"))
        .map(|n| std::fs::read_to_string(session.workdir.join("out").join(n)).expect("copy"))
        .collect();
    copies.sort();
    assert_eq!(copies, ["I do not know.", "Noted: PELICAN.", "PELICAN."]);

    // A new session of the same capsule: the context picks up where it stopped, from
    // the conversation kept beside the session directories.
    let kept = std::fs::read_dir(
        capsule
            .dir
            .join("workdir")
            .join(".murmur")
            .join("conversations"),
    )
    .expect("the conversations folder")
    .count();
    assert_eq!(kept, 2, "one file per context");
    let running = capsule.spawn_env(&[], ENV);
    let b = running.address.clone();
    assert_eq!(send_to(&b, 4, "And now?", "ctx-drv-one"), "Still PELICAN.");
    let fourth = messages(&mock.request(3).json());
    let texts: Vec<String> = fourth.iter().map(|m| text_of(&m["content"])).collect();
    let first_exchange = [
        "Remember the word PELICAN.",
        "Noted: PELICAN.",
        "Which word?",
        "PELICAN.",
        "And now?",
    ];
    assert!(
        texts.ends_with(&first_exchange.map(String::from)),
        "{texts:?}"
    );
    let stopped = rpc(
        &b,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}}),
    );
    assert!(stopped.get("result").is_some(), "{stopped}");
    assert_eq!(running.wait(WAIT).status, 0);
}

/// `stateless` (the default) keeps nothing: a second task in the same context is sent
/// alone, and no conversation is written.
#[test]
fn a_stateless_capsule_sends_each_task_alone() {
    let answer = |text: &str| Reply::json(200, openai::completion(Some(text), &[], "stop", (5, 2)));
    let mock = MockModel::with(vec![answer("Noted."), answer("Which word?")]);
    let capsule = Setup::openai(&mock)
        .lifecycle("lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n")
        .capsule("oa-stateless");
    let running = capsule.spawn_env(&[], ENV);
    let a = running.address.clone();
    for (n, text) in [(1, "Remember the word PELICAN."), (2, "Which word?")] {
        let body = json!({
            "jsonrpc": "2.0", "id": n, "method": "message/stream",
            "params": {"message": {
                "messageId": format!("msg-{n}"), "role": "user", "contextId": "ctx-same",
                "parts": [{"text": text}]
            }}
        });
        let raw = read_to_close(post(&a, &[JSON_CT], &body.to_string()));
        assert!(raw.contains("\"state\":\"completed\""), "task {n}: {raw}");
    }
    let second = mock.request(1).json();
    assert!(!second.to_string().contains("PELICAN"), "{second}");
    let texts: Vec<String> = messages(&second)
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| text_of(&m["content"]))
        .collect();
    assert_eq!(texts, ["Which word?"]);
    let stopped = rpc(
        &a,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}}),
    );
    assert!(stopped.get("result").is_some(), "{stopped}");
    assert_eq!(running.wait(WAIT).status, 0);
    assert!(
        !capsule
            .dir
            .join("workdir")
            .join(".murmur")
            .join("conversations")
            .exists()
    );
}

// =================================================================================
// Anthropic.

/// `thinking_delta`s become `thinking` frames, ahead of the text; the answer is the
/// text alone.
#[test]
fn anthropic_thinking_deltas_become_thinking_frames() {
    let stream = anthropic::Stream::new(30)
        .thinking_block(&["Let me ", "think."], "sig-abc")
        .text_block(&["Fine."])
        .message_delta("end_turn", 12)
        .stop();
    let mock = MockModel::with(vec![Reply::sse(stream.events())]);
    let capsule = Setup::anthropic(&mock)
        .lifecycle(OVER_HTTP)
        .capsule("an-thinking");
    let s = stream_task(&capsule, TASK);
    s.done.assert_ok();
    assert_eq!(
        labels(&s.frames),
        [
            l(0, "status:working"),
            l(1, "thinking"),
            l(2, "thinking"),
            l(3, "text"),
            l(4, "text:final"),
            l(5, "status:completed"),
        ]
    );
    assert_eq!(pieces(&s.frames, "thinking"), ["Let me ", "think."]);
    assert_eq!(pieces_of(&s), ["Fine."]);
    assert_eq!(s.done.result(), "Fine.");
}

/// A tool_use round trip with the input streamed as `input_json_delta` pieces (and the
/// whole stream cut awkwardly): the tool runs with the whole input; the next request
/// carries the assistant's thinking (with its signature), text and `tool_use`, then a
/// user message with a `tool_result` for that id holding the tool's exact result.
#[test]
fn anthropic_tool_use_round_trip_with_streamed_input() {
    let first = anthropic::Stream::new(40)
        .thinking_block(&["Use echo."], "sig-1")
        .text_block(&["Calling echo."])
        .tool_use_block(
            "toolu_01Abc",
            "echo",
            &["{\"comm", "and\": \"hello ", "from the model\"}"],
        )
        .message_delta("tool_use", 30)
        .stop();
    let second = anthropic::Stream::new(90)
        .text_block(&["It said hello."])
        .message_delta("end_turn", 6)
        .stop();
    let mock = MockModel::with(vec![
        Reply::sse(split_awkwardly(&first.bytes())).with_delay(TRICKLE),
        Reply::sse(second.events()),
    ]);
    let capsule = Setup::anthropic(&mock).capsule("an-tool");
    let done = run_task(&capsule, "Say hello through echo.");
    done.assert_ok();
    assert_eq!(done.result(), "It said hello.");

    let calls = done.session.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_call_id"], "toolu_01Abc");
    assert_eq!(
        calls[0]["input"],
        json!({"command": "hello from the model"})
    );
    let turn = &inference_lines(&done.session)[0];
    assert_eq!(turn["stop_reason"], "tool_call");
    assert_eq!(provider_usage(turn), (Some(40), Some(30)));

    assert_eq!(mock.requests().len(), 2);
    let r = mock.request(1);
    assert_anthropic_request(&r);
    let body = r.json();
    let msgs = messages(&body);
    assert_eq!(
        msgs.iter().map(|m| m["role"].clone()).collect::<Vec<_>>(),
        ["user", "assistant", "user"],
        "{body}"
    );
    let blocks = msgs[1]["content"].as_array().expect("assistant blocks");
    let kinds: Vec<&str> = blocks.iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use"], "{}", msgs[1]);
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": "Use echo.", "signature": "sig-1"})
    );
    assert_eq!(blocks[1]["text"], "Calling echo.");
    assert_eq!(
        blocks[2],
        json!({"type": "tool_use", "id": "toolu_01Abc", "name": "echo",
               "input": {"command": "hello from the model"}})
    );
    let results = msgs[2]["content"].as_array().expect("tool_result blocks");
    assert_eq!(results.len(), 1, "{}", msgs[2]);
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_01Abc");
    assert_ne!(results[0]["is_error"], true);
    assert_eq!(text_of(&results[0]["content"]), ECHO_RESULT);
}

/// Without streaming: a plain `message` whose `stop_reason` is `max_tokens` completes
/// the task with its text and is `max_tokens` on the trace, with the provider's usage.
#[test]
fn anthropic_json_message_cut_at_max_tokens() {
    let mock = MockModel::with(vec![Reply::json(
        200,
        anthropic::message(
            vec![anthropic::text("A long answer that was cut")],
            "max_tokens",
            (20, 256),
        ),
    )]);
    let capsule = Setup::anthropic(&mock).stream(false).capsule("an-json");
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert!(
        done.result().starts_with("A long answer that was cut"),
        "{:?}",
        done.result()
    );
    let body = mock.request(0).json();
    assert_ne!(body["stream"], true, "{body}");
    let turn = &inference_lines(&done.session)[0];
    assert_eq!(turn["stop_reason"], "max_tokens", "{turn}");
    assert_eq!(provider_usage(turn), (Some(20), Some(256)));
}

// =================================================================================
// Both providers: one scenario, a row per provider.

/// An event stream's bytes, in the pieces the mock sends.
type Events = Vec<Vec<u8>>;

/// What differs between the providers in a scenario both drivers play: the driver, the
/// wire format its mock speaks and what the driver must send.
struct Provider {
    driver: &'static str,
    setup: fn(&MockModel) -> Setup,
    /// The path of the API call under the mock's origin.
    path: &'static str,
    /// The events of an answer streamed in `pieces` that ends the turn, with the
    /// provider's (input, output) token counts.
    streamed: fn(&[&str], (u64, u64)) -> Events,
    /// A stream broken after `pieces`, and what the task's error then says.
    broken: fn(&[&str]) -> Reply,
    broken_cause: &'static str,
    /// An error body with `message`, for an answer of `status`.
    error: fn(u16, &str) -> Value,
    /// The statuses of an overloaded server, retried in turn before the answer.
    retried: &'static [u16],
    /// A client error (not retried) and its message; the message echoes the key when a
    /// provider is known to do so.
    refused: (u16, fn() -> String),
    /// The request's method, path and headers.
    assert_request: fn(&Recorded),
    /// What the first request of the task [`TASK`] says in this provider's shape: the
    /// system prompt, the task and the `echo` tool.
    assert_body: fn(&Value),
    /// The `stream_options` a request asking for a stream carries, as JSON text.
    stream_options: Option<&'static str>,
}

const OPENAI: Provider = Provider {
    driver: "openai",
    setup: Setup::openai,
    path: "/v1/chat/completions",
    streamed: |pieces, (input, output)| {
        pieces
            .iter()
            .fold(openai::Stream::new(), |s, p| s.text(p))
            .finish("stop")
            .usage(input, output)
            .done()
            .events()
    },
    broken: |pieces| {
        let stream = pieces.iter().fold(openai::Stream::new(), |s, p| s.text(p));
        Reply::sse_then_drop(stream.events())
    },
    broken_cause: "ended before the answer was complete",
    error: |status, message| {
        let kind = if status >= 500 {
            "server_error"
        } else {
            "invalid_request_error"
        };
        openai::error(message, kind, None)
    },
    retried: &[500],
    refused: (401, || {
        format!(
            "Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."
        )
    }),
    assert_request: assert_openai_request,
    assert_body: |body| {
        let msgs = messages(body);
        assert_eq!(msgs.len(), 2, "{body}");
        assert_eq!(msgs[0]["role"], "system");
        assert!(
            text_of(&msgs[0]["content"]).contains("You are terse."),
            "{}",
            msgs[0]
        );
        assert_eq!(msgs[1]["role"], "user");
        assert_eq!(text_of(&msgs[1]["content"]), TASK);
        let echo = tool_named(body, "echo", |t| &t["function"]);
        assert_eq!(echo["type"], "function", "{echo}");
        assert_eq!(echo["function"]["parameters"], echo_schema());
        assert!(
            echo["function"]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{echo}"
        );
    },
    // Without it a stream carries no token counts.
    stream_options: Some(r#"{"include_usage":true}"#),
};

const ANTHROPIC: Provider = Provider {
    driver: "anthropic",
    setup: Setup::anthropic,
    path: "/v1/messages",
    // Pings around the content, as the API sends them; they must change nothing.
    streamed: |pieces, (input, output)| {
        anthropic::Stream::new(input)
            .ping()
            .text_block(pieces)
            .ping()
            .message_delta("end_turn", output)
            .stop()
            .events()
    },
    broken: |pieces| {
        let stream = anthropic::Stream::new(10)
            .text_block(pieces)
            .error("overloaded_error", "Overloaded");
        Reply::sse(stream.events())
    },
    broken_cause: "the server reported an error mid-answer: Overloaded",
    error: |status, message| {
        let kind = match status {
            529 => "overloaded_error",
            500.. => "api_error",
            _ => "invalid_request_error",
        };
        anthropic::error(kind, message)
    },
    retried: &[529, 500],
    refused: (400, || {
        "max_tokens: 256 > 128, which is the maximum allowed number of output tokens for test-model"
            .to_string()
    }),
    assert_request: assert_anthropic_request,
    assert_body: |body| {
        let system = body["system"]
            .as_str()
            .unwrap_or_else(|| panic!("system is a string: {body}"));
        assert!(system.contains("You are terse."), "{system}");
        let msgs = messages(body);
        assert_eq!(msgs.len(), 1, "{body}");
        assert_eq!(msgs[0]["role"], "user");
        assert_eq!(text_of(&msgs[0]["content"]), TASK);
        let echo = tool_named(body, "echo", |t| t);
        assert_eq!(echo["input_schema"], echo_schema(), "{echo}");
        assert!(echo.get("parameters").is_none(), "{echo}");
        assert!(
            echo["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{echo}"
        );
    },
    stream_options: None,
};

/// Each scenario as a test per row of the provider table (`<scenario>::openai`,
/// `<scenario>::anthropic`), so the rows run side by side.
macro_rules! for_each_provider {
    ($($scenario:ident),* $(,)?) => {$(
        pub(crate) mod $scenario {
            #[test]
            pub(crate) fn openai() {
                super::$scenario(&super::OPENAI);
            }

            #[test]
            pub(crate) fn anthropic() {
                super::$scenario(&super::ANTHROPIC);
            }
        }
    )*};
}

for_each_provider!(
    streamed_text_becomes_text_frames,
    overloaded_answers_are_retried_then_the_answer_completes,
    a_client_error_fails_at_once_naming_the_url_and_message,
    a_stream_broken_mid_answer_fails_the_task,
);

/// Streaming over `message/stream`, from the request to the trace: the request has the
/// provider's shape (endpoint, key, model, max_tokens, system prompt, task, the shell
/// tool) and asks for a stream; each delta is a `text` frame numbered in the task's run,
/// then `text` `""` `final:true`, then `completed` with the whole answer; the provider's
/// usage and stop reason reach the trace's `inference` line.
fn streamed_text_becomes_text_frames(p: &Provider) {
    let mock = MockModel::with(vec![Reply::sse((p.streamed)(
        &["The ", "answer ", "is 42."],
        (25, 15),
    ))]);
    let capsule = (p.setup)(&mock)
        .lifecycle(OVER_HTTP)
        .capsule(&format!("{}-stream", p.driver));
    let s = stream_task(&capsule, TASK);
    s.done.assert_ok();
    assert_eq!(
        labels(&s.frames),
        [
            l(0, "status:working"),
            l(1, "text"),
            l(2, "text"),
            l(3, "text"),
            l(4, "text:final"),
            l(5, "status:completed"),
        ]
    );
    let task = s.frames[0].2["id"].as_str().expect("a task id");
    let texts: Vec<&Value> = s.frames[1..5].iter().map(|f| &f.2).collect();
    assert_eq!(
        texts,
        [
            &json!({"id": task, "text": "The ", "final": false}),
            &json!({"id": task, "text": "answer ", "final": false}),
            &json!({"id": task, "text": "is 42.", "final": false}),
            &json!({"id": task, "text": "", "final": true}),
        ]
    );
    assert_eq!(s.frames[5].2["status"]["response"], "The answer is 42.");
    assert_eq!(s.done.result(), "The answer is 42.");

    assert_eq!(mock.requests().len(), 1);
    let r = mock.request(0);
    (p.assert_request)(&r);
    let body = r.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["stream"], true);
    let options = p
        .stream_options
        .map(|o| serde_json::from_str(o).expect("JSON"));
    assert_eq!(body.get("stream_options"), options.as_ref(), "{body}");
    (p.assert_body)(&body);

    let turn = &inference_lines(&s.done.session)[0];
    assert_eq!(turn["stop_reason"], "end_turn");
    assert_eq!(provider_usage(turn), (Some(25), Some(15)), "{turn}");
}

/// An overloaded server's answers (5xx) are retried by the host, each traced as an
/// `http_retry` naming its status, with the same request sent again; then the answer.
fn overloaded_answers_are_retried_then_the_answer_completes(p: &Provider) {
    let mut replies: Vec<Reply> = p
        .retried
        .iter()
        .map(|&status| Reply::json(status, (p.error)(status, "Overloaded, sorry.")))
        .collect();
    replies.push(Reply::sse((p.streamed)(&["Recovered."], (5, 2))));
    let mock = MockModel::with(replies);
    let capsule = (p.setup)(&mock).capsule(&format!("{}-retry", p.driver));
    let done = run_task(&capsule, TASK);
    done.assert_ok();
    assert_eq!(done.result(), "Recovered.");
    let sent = mock.requests();
    assert_eq!(sent.len(), p.retried.len() + 1);
    for again in &sent[1..] {
        assert_eq!(again.json(), sent[0].json(), "a retry resends the request");
    }
    let url = format!("{}{}", mock.origin(), p.path);
    let expected: Vec<(u64, String)> = (1..)
        .zip(p.retried)
        .map(|(attempt, status)| (attempt, format!("HTTP {status}")))
        .collect();
    assert_eq!(retries(&done.session, &url), expected);
}

/// A client error (4xx) is not retried: the task fails naming the status, the URL and
/// the provider's message — with a key the provider echoed back redacted everywhere:
/// files, output, frames.
fn a_client_error_fails_at_once_naming_the_url_and_message(p: &Provider) {
    let (status, message) = (p.refused.0, (p.refused.1)());
    let mock = MockModel::with(vec![
        Reply::json(status, (p.error)(status, &message)),
        // Never asked for: a client error is not retried.
        Reply::sse((p.streamed)(&["no"], (1, 1))),
    ]);
    let capsule = (p.setup)(&mock)
        .lifecycle(OVER_HTTP)
        .capsule(&format!("{}-{status}", p.driver));
    let s = stream_task(&capsule, TASK);
    s.done.assert_failed();
    assert_eq!(mock.requests().len(), 1, "no retry after {status}");
    assert_eq!(mock.unused(), 1);
    assert!(s.done.session.events("http_retry").is_empty());

    let result = s.done.result();
    let expected = format!(
        "error: {}: HTTP {status} from {}{}: {}",
        p.driver,
        mock.origin(),
        p.path,
        message.replace(KEY, "[redacted]")
    );
    assert_eq!(result, expected);
    let last = s.frames.last().expect("frames");
    assert_eq!(
        (
            last.1.as_str(),
            &last.2["status"]["state"],
            &last.2["final"]
        ),
        ("status", &json!("failed"), &json!(true)),
        "{:?}",
        labels(&s.frames)
    );
    assert!(!s.body.contains(KEY), "the key is in a frame:\n{}", s.body);
    assert_no_key_in_output(&s.done);
    assert!(assert_no_key_under(&capsule.dir) >= 4);
    assert!(
        !s.done.session.events("inference").is_empty(),
        "the failed turn is traced"
    );
}

/// A stream that breaks mid-answer (the connection drops, the server reports an error)
/// fails the task (no hang) with the driver's error, after the pieces that did arrive
/// were streamed.
fn a_stream_broken_mid_answer_fails_the_task(p: &Provider) {
    let mock = MockModel::with(vec![(p.broken)(&["Partial ", "answer"])]);
    let capsule = (p.setup)(&mock)
        .lifecycle(OVER_HTTP)
        .capsule(&format!("{}-broken", p.driver));
    let s = stream_task(&capsule, TASK);
    s.done.assert_failed();
    let result = s.done.result();
    assert!(
        result.starts_with(&format!("error: {}: ", p.driver)),
        "{result:?}"
    );
    assert!(result.contains(p.broken_cause), "{result:?}");
    assert_eq!(
        s.frames.last().map(|f| f.2["status"]["state"].clone()),
        Some(json!("failed")),
        "{:?}",
        labels(&s.frames)
    );
    assert_eq!(pieces_of(&s), ["Partial ", "answer"]);
}

// =================================================================================
// The fixture itself.

/// The mock answers in script order, records what it was sent, cuts a dropped stream
/// short of its end, and answers 500 once the script is used up.
#[test]
fn the_mock_model_follows_its_script() {
    use std::io::{Read, Write};
    let mock = MockModel::with(vec![
        Reply::json(429, json!({"a": 1})).with_header("retry-after", "0"),
        Reply::sse(split_awkwardly("data: é\r\n\r\n".as_bytes())),
        Reply::sse_then_drop(vec![b"data: x\n\n".to_vec()]),
    ]);
    let exchange = |body: &str| {
        let mut socket = std::net::TcpStream::connect(("127.0.0.1", mock.port())).unwrap();
        socket.set_read_timeout(Some(WAIT)).unwrap();
        let request = format!(
            "POST /v1/x?q=1 HTTP/1.1\r\nhost: x\r\nX-Api-Key: k\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = socket.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let first = exchange("{\"n\":1}");
    assert!(first.starts_with("HTTP/1.1 429 "), "{first}");
    assert!(first.contains("retry-after: 0\r\n"), "{first}");
    assert!(first.ends_with("\r\n\r\n{\"a\":1}"), "{first}");
    let second = exchange("{\"n\":2}");
    assert!(
        second.contains("content-type: text/event-stream\r\n"),
        "{second}"
    );
    let body = second.split_once("\r\n\r\n").unwrap().1;
    assert!(
        body.ends_with("0\r\n\r\n"),
        "a complete chunked body: {body:?}"
    );
    let third = exchange("{\"n\":3}");
    assert!(third.contains("data: x\n\n"), "{third}");
    assert!(!third.ends_with("0\r\n\r\n"), "cut short: {third:?}");
    let fourth = exchange("{}");
    assert!(fourth.starts_with("HTTP/1.1 500 "), "{fourth}");
    assert!(
        fourth.contains("no scripted reply left for request 4 (POST /v1/x?q=1)"),
        "{fourth}"
    );
    let seen = mock.requests();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[1].json(), json!({"n": 2}));
    assert_eq!(seen[0].header("x-api-key"), Some("k"));
    assert_eq!(seen[0].path, "/v1/x?q=1");
    let joined: Vec<u8> = split_awkwardly("data: é\r\n\r\n".as_bytes()).concat();
    assert_eq!(joined, "data: é\r\n\r\n".as_bytes());
}
