//! The driver world's scenarios: the component is a capsule's inference driver, its
//! endpoint the loopback [`Provider`], and each scenario judges what a user would see —
//! the frames of `message/stream`, the session's `trace.jsonl`, the exit status — and
//! what the provider was sent.
//!
//! The first run asks for a plain answer; the path of the driver's first request tells
//! which provider wire it speaks (OpenAI chat-completions or Anthropic messages), and the
//! rest are checked in that wire. A driver that sends no request at all answers on its
//! own (any answer will do) or from its configuration (it is then configured as the
//! scripted driver is), and the provider scenarios are skipped with that reason.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::Target;
use super::capsule::{Scratch, yaml_str};
use super::provider::{Provider, Recorded, Turn, Wire};
use super::report::{Outcome, Scenario, Step, ensure, fail, skip};
use run::{Ran, stream_one};

pub(super) mod run;

/// The answer every plain run is scripted to give, in the pieces it is streamed in.
const PIECES: [&str; 3] = ["Hello ", "from ", "the check."];
const ANSWER: &str = "Hello from the check.";
/// The task every run is sent.
const TASK: &str = "Say hello.";
/// The provider's words in its error answers; a failed task should carry them.
const REFUSED: &str = "check: the request was refused (HTTP 400)";
const OVERLOADED: &str = "check: the provider is overloaded (HTTP 500)";
/// The tool call the model asks for: the shell tool `echo`, the one binary allowed.
const CALL_ID: &str = "call_check_1";
const ECHOED: &str = "hello from the tool";
/// How often the host tries a request the provider answered 5xx.
const ATTEMPTS: usize = 2;
/// One capsule run, start to exit; a driver that hangs is cut off here.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Every driver scenario, in order.
pub fn scenarios(target: &Target) -> Vec<Scenario> {
    let wasm = target.absolute.as_path();
    let mut out = Vec::new();
    let mut wire = None;
    out.push(Scenario::run("driver: configure and infer answer", || {
        wire = configure_and_infer(wasm)?;
        Ok(())
    }));
    let Some((wire, streams_unasked)) = wire else {
        let reason = match out[0].outcome {
            Outcome::Pass => "the driver sent no request to a provider: it speaks no provider wire",
            _ => "the driver did not answer a plain request",
        };
        for name in PROVIDER_SCENARIOS {
            out.push(Scenario::skipped(name, reason));
        }
        return out;
    };
    let said = wire.name();
    let mut streamed = None;
    out.push(Scenario::run(PROVIDER_SCENARIOS[0], || {
        streamed = Some(streamed_text(wasm, streams_unasked)?);
        Ok(())
    }));
    out.push(match &streamed {
        Some(ran) => Scenario::run(PROVIDER_SCENARIOS[1], || stop_reason(ran, 0, "end_turn")),
        None => Scenario::skipped(
            PROVIDER_SCENARIOS[1],
            "the streamed answer did not complete",
        ),
    });
    // The rest stream when the streamed answer came through (tool calls and stop reasons
    // then arrive in pieces), and ask for plain answers otherwise. A driver that streams
    // unasked is not given the `stream` key (upstream's OpenAI driver refuses it).
    let stream = streamed.is_some() && !streams_unasked;
    let mut called = None;
    out.push(Scenario::run(PROVIDER_SCENARIOS[2], || {
        called = Some(tool_call_round_trip(wasm, wire, stream)?);
        Ok(())
    }));
    out.push(match &called {
        Some(ran) => Scenario::run(PROVIDER_SCENARIOS[3], || stop_reason(ran, 0, "tool_call")),
        None => Scenario::skipped(PROVIDER_SCENARIOS[3], "the tool call did not round-trip"),
    });
    out.push(Scenario::run(PROVIDER_SCENARIOS[4], || {
        max_tokens(wasm, stream)
    }));
    out.push(Scenario::run(PROVIDER_SCENARIOS[5], || {
        provider_error(wasm, stream, 400, REFUSED, 1)
    }));
    out.push(Scenario::run(PROVIDER_SCENARIOS[6], || {
        provider_error(wasm, stream, 500, OVERLOADED, ATTEMPTS)
    }));
    out.push(Scenario::run(PROVIDER_SCENARIOS[7], || {
        allow_list(wasm, stream)
    }));
    for s in &mut out[1..] {
        s.name = format!("{} ({said})", s.name);
    }
    out
}

/// The scenarios that need a provider wire, skipped together when there is none.
const PROVIDER_SCENARIOS: [&str; 8] = [
    "driver: streamed chunks reach the wire as text frames",
    "driver: stop reason end-turn",
    "driver: a tool call round-trips",
    "driver: stop reason tool-call",
    "driver: stop reason max-tokens",
    "driver: a provider error (HTTP 400) fails the task, not a trap",
    "driver: a provider error (HTTP 500) after retries fails the task, not a trap",
    "driver: the network allow-list is honoured",
];

/// How one run's capsule is set up.
struct Setup<'a> {
    wasm: &'a Path,
    /// `inference.endpoint`.
    endpoint: String,
    /// The one `capabilities.network.allow` entry.
    allow: String,
    /// The driver's `config`, as JSON (which YAML reads as is).
    config: Value,
}

impl<'a> Setup<'a> {
    fn new(wasm: &'a Path, provider: &Provider, stream: bool) -> Setup<'a> {
        Setup {
            wasm,
            endpoint: provider.origin(),
            allow: provider.origin(),
            // A plain run sets nothing, so a driver with no `stream` key of its own
            // (upstream's OpenAI driver refuses unknown keys) is still checked.
            config: if stream {
                json!({"stream": true})
            } else {
                json!({})
            },
        }
    }

    fn manifest(&self) -> String {
        let source = yaml_str(self.wasm);
        format!(
            "name: check-driver\nversion: \"0.1.0\"\n\
             capabilities:\n  network:\n    allow:\n      - {allow}\n  shell:\n    allow: [echo]\n\
             inference:\n  driver:\n    artifact: under-check\n    config: {config}\n\
             \x20 endpoint: {endpoint}\n  model: check-model\n  max_tokens: 256\n\
             \x20 retry: {{max_attempts: {ATTEMPTS}, initial_backoff_ms: 10, max_backoff_ms: 50}}\n\
             \x20 timeouts: {{connect_secs: 5, read_secs: 20}}\n\
             artifacts:\n  - name: under-check\n    runtime: driver\n    source: {source}\n",
            allow = self.allow,
            config = self.config,
            endpoint = self.endpoint,
        )
    }

    /// One task sent over `message/stream` to a capsule serving one task.
    fn run(&self) -> Result<Ran, Outcome> {
        let scratch = Scratch::new("driver")?;
        scratch.manifest(&self.manifest())?;
        stream_one(scratch, TASK, RUN_LIMIT)
    }
}

/// A plain (not streamed) answer; `Some((wire, streams_unasked))` when the driver asked a
/// provider for it, with whether it asked to stream without being configured to
/// (upstream's drivers always do).
fn configure_and_infer(wasm: &Path) -> Result<Option<(Wire, bool)>, Outcome> {
    let provider = started(vec![Turn::text(&PIECES)])?;
    let ran = Setup::new(wasm, &provider, false).run()?;
    let sent = provider.requests();
    let Some(first) = sent.first() else {
        // No provider request: a driver that answers on its own (an echo, a rule) passes
        // with any answer; one that needs a script is configured the way the scripted
        // driver reads one, and must say exactly what it was given.
        if answered(&ran).is_ok() {
            return Ok(None);
        }
        let mut setup = Setup::new(wasm, &provider, false);
        setup.config = json!({"turns": [{"text": ANSWER}]});
        completed_with(&setup.run()?, ANSWER)?;
        return Ok(None);
    };
    let Some(wire) = first.wire() else {
        return Err(fail(format!(
            "the driver's first request went to {} {}, which is neither an OpenAI \
             chat-completions path (…/chat/completions) nor an Anthropic messages path \
             (…/messages)",
            first.method, first.path
        )));
    };
    completed_with(&ran, ANSWER)?;
    let streams_unasked = first.json()["stream"] == true;
    Ok(Some((wire, streams_unasked)))
}

/// A streamed answer: with `stream: true` in the driver's config, unless it streams
/// without being asked (a driver may refuse a key it does not have).
fn streamed_text(wasm: &Path, streams_unasked: bool) -> Result<Ran, Outcome> {
    let provider = started(vec![Turn::text(&PIECES)])?;
    let ran = Setup::new(wasm, &provider, !streams_unasked).run()?;
    completed_with(&ran, ANSWER)?;
    let asked = provider.requests().first().map(Recorded::json);
    ensure(asked.is_some_and(|b| b["stream"] == true), || {
        "with config 'stream: true' the driver did not ask the provider to stream \
         (no \"stream\": true in its request)"
            .into()
    })?;
    let pieces = ran.text_pieces();
    ensure(pieces.concat() == ANSWER, || {
        format!("the text frames say {:?}, not {ANSWER:?}", pieces.concat())
    })?;
    ensure(pieces.len() >= PIECES.len(), || {
        format!(
            "the answer was streamed in {} piece(s) but reached the wire as {} text \
             frame(s): a streaming driver passes each piece on as it arrives",
            PIECES.len(),
            pieces.len()
        )
    })?;
    Ok(ran)
}

/// The model asks for `echo`; the next request must carry the call and its result in
/// the provider's shape.
fn tool_call_round_trip(wasm: &Path, wire: Wire, stream: bool) -> Result<Ran, Outcome> {
    let call = Turn::ToolCall {
        id: CALL_ID.into(),
        name: "echo".into(),
        arguments: json!({"command": ECHOED}).to_string(),
    };
    let provider = started(vec![call, Turn::text(&["done"])])?;
    let ran = Setup::new(wasm, &provider, stream).run()?;
    let sent = provider.requests();
    ensure(sent.len() >= 2, || {
        format!(
            "the provider asked for a tool call, but the driver sent {} request(s), not 2; \
             task {}",
            sent.len(),
            ran.ending()
        )
    })?;
    let next = sent[1].json();
    match wire {
        Wire::OpenAi => openai_carries_the_call(&next)?,
        Wire::Anthropic => anthropic_carries_the_call(&next)?,
    }
    completed_with(&ran, "done")?;
    Ok(ran)
}

fn openai_carries_the_call(body: &Value) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let asked = messages.iter().any(|m| {
        m["role"] == "assistant"
            && m["tool_calls"]
                .as_array()
                .is_some_and(|calls| calls.iter().any(|c| c["id"] == CALL_ID))
    });
    ensure(asked, || {
        format!(
            "the next request has no assistant message with tool_calls id {CALL_ID:?}: {}",
            clip(body)
        )
    })?;
    let answered = messages.iter().any(|m| {
        m["role"] == "tool"
            && m["tool_call_id"] == CALL_ID
            && text_of(&m["content"]).contains(ECHOED)
    });
    ensure(answered, || {
        format!(
            "the next request has no role \"tool\" message with tool_call_id {CALL_ID:?} \
             holding the tool's output: {}",
            clip(body)
        )
    })
}

fn anthropic_carries_the_call(body: &Value) -> Step {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let blocks = |role: &str| -> Vec<Value> {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_array().cloned())
            .flatten()
            .collect()
    };
    let asked = blocks("assistant")
        .iter()
        .any(|b| b["type"] == "tool_use" && b["id"] == CALL_ID);
    ensure(asked, || {
        format!(
            "the next request has no assistant tool_use block with id {CALL_ID:?}: {}",
            clip(body)
        )
    })?;
    let answered = blocks("user").iter().any(|b| {
        b["type"] == "tool_result"
            && b["tool_use_id"] == CALL_ID
            && text_of(&b["content"]).contains(ECHOED)
    });
    ensure(answered, || {
        format!(
            "the next request has no user tool_result block with tool_use_id {CALL_ID:?} \
             holding the tool's output: {}",
            clip(body)
        )
    })
}

fn max_tokens(wasm: &Path, stream: bool) -> Step {
    let provider = started(vec![Turn::MaxTokens(vec!["cut ".into(), "short".into()])])?;
    let ran = Setup::new(wasm, &provider, stream).run()?;
    stop_reason(&ran, 0, "max_tokens")?;
    ensure(ran.final_state().as_deref() == Some("completed"), || {
        format!(
            "an answer cut off at the token limit should end the task with what was said; \
             task {}",
            ran.ending()
        )
    })
}

/// The provider answers `status` (every attempt); the task must fail with the
/// driver's error, carrying the provider's message, and no trap.
fn provider_error(wasm: &Path, stream: bool, status: u16, message: &str, attempts: usize) -> Step {
    let turns = vec![Turn::error(status, message); attempts];
    let provider = started(turns)?;
    let ran = Setup::new(wasm, &provider, stream).run()?;
    ensure(ran.final_state().as_deref() == Some("failed"), || {
        format!(
            "the provider answered HTTP {status}, but task {}",
            ran.ending()
        )
    })?;
    let failed = ran.lines("inference");
    let Some(line) = failed.iter().find(|l| l.get("error_code").is_some()) else {
        return Err(fail("the trace has no failed inference line"));
    };
    let (code, error) = (
        line["error_code"].as_str().unwrap_or_default(),
        line["error"].as_str().unwrap_or_default(),
    );
    ensure(code == "driver_error", || match code {
        "driver_failed" => format!(
            "the driver trapped on the provider's HTTP {status} instead of returning \
             infer-error: {error}"
        ),
        _ => format!("the inference failed as {code}, not driver_error: {error}"),
    })?;
    ensure(error.contains(message), || {
        format!("the driver's error does not carry the provider's message {message:?}: {error}")
    })?;
    let sent = provider.requests().len();
    ensure(sent == attempts, || {
        format!("the provider was asked {sent} time(s), expected {attempts}")
    })
}

/// The endpoint is the provider, the allow-list names another origin: nothing may
/// reach the provider, the host refuses it in the trace, and the task fails without a
/// trap (how much of the refusal the driver passes on is its own choice).
fn allow_list(wasm: &Path, stream: bool) -> Step {
    let provider = started(vec![Turn::text(&PIECES)])?;
    let elsewhere = started(Vec::new())?;
    let mut setup = Setup::new(wasm, &provider, stream);
    setup.allow = elsewhere.origin();
    let ran = setup.run()?;
    let sent = provider.requests().len();
    ensure(sent == 0, || {
        format!("{sent} request(s) reached an endpoint the allow-list does not name")
    })?;
    ensure(ran.final_state().as_deref() == Some("failed"), || {
        format!("the endpoint is not allowed, but task {}", ran.ending())
    })?;
    let denied = ran.lines("http_denied");
    ensure(
        denied.iter().any(|l| l["origin"] == provider.origin()),
        || {
            format!(
                "the trace has no http_denied line for {}: the host never refused the request",
                provider.origin()
            )
        },
    )?;
    let why = ran.failure();
    ensure(!why.contains("wasm trap"), || {
        format!("the driver trapped on the host's refusal instead of returning infer-error: {why}")
    })
}

fn started(turns: Vec<Turn>) -> Result<Provider, Outcome> {
    Provider::start(turns).map_err(|e| skip(format!("the loopback provider could not start: {e}")))
}

/// The run's `inference` line `i` has this stop reason.
fn stop_reason(ran: &Ran, i: usize, want: &str) -> Step {
    let lines = ran.lines("inference");
    let Some(line) = lines.get(i) else {
        return Err(fail(format!("the trace has no inference line {}", i + 1)));
    };
    let got = line["stop_reason"].as_str().unwrap_or("none");
    ensure(got == want, || {
        format!("the provider's answer ends with {want}, but the driver reported {got}")
    })
}

/// The task completed, its answer `want`.
/// The task completed with an answer that is not empty.
fn answered(ran: &Ran) -> Step {
    ensure(ran.final_state().as_deref() == Some("completed"), || {
        format!("task {}", ran.ending())
    })?;
    ensure(!ran.response().is_empty(), || {
        "the task's answer is empty".into()
    })
}

fn completed_with(ran: &Ran, want: &str) -> Step {
    ensure(ran.final_state().as_deref() == Some("completed"), || {
        format!("task {}", ran.ending())
    })?;
    let got = ran.response();
    ensure(got == want, || {
        format!("the task's answer is {got:?}, expected {want:?}")
    })
}

/// The text of a message's content: a string, or its text blocks joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str().or(b.as_str()))
            .collect(),
        _ => String::new(),
    }
}

/// A request body for a message, cut short.
fn clip(body: &Value) -> String {
    let text = body.to_string();
    match text.char_indices().nth(400) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
