//! Codex CLI (`@openai/codex`, pinned in `tests/harness/package.json`) as a capsule's
//! engine, against the mock speaking OpenAI's Responses API.

use std::time::Duration;

use serde_json::Value;

use super::{
    ENV, KEY, ONE_TASK, Setup, THREADED, ask_in, cancel_first_task, model_requests, piece,
    run_task, secret_outside, status, stream_in_background, streamed_with_placeholders,
    wordcount_artifact,
};
use crate::common::Capsule;
use crate::common::harness::{self, Harnesses};
use crate::common::mock_model::{MockModel, Reply};
use crate::common::mock_responses::Stream;

pub(super) fn setup<'a>(h: &'a Harnesses, mock: &MockModel, lifecycle: &'a str) -> Setup<'a> {
    Setup {
        driver: "codex",
        command: &h.codex,
        endpoint: mock.origin(),
        allow: vec![mock.origin()],
        model: "gpt-test",
        lifecycle,
        max_turns: 6,
        extra_capabilities: "",
        extra_inference: "",
    }
}

fn calls(namespace: Option<&str>, tool: &str, arguments: &str) -> Reply {
    Reply::sse(
        Stream::new("resp_1")
            .function_call("call_1", namespace, tool, arguments)
            .completed(20, 6)
            .events(),
    )
}

fn answers(text: &str) -> Reply {
    Reply::sse(
        Stream::new("resp_2")
            .message(&[text])
            .completed(30, 4)
            .events(),
    )
}

/// The output a request's input carries for the call `call_id`.
fn call_output(body: &Value, call_id: &str) -> Option<String> {
    body["input"].as_array()?.iter().find_map(|item| {
        (item["type"] == "function_call_output" && item["call_id"] == call_id).then(
            || match &item["output"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            },
        )
    })
}

/// A task answered in two turns: the first calls the capsule's `wordcount` through the
/// bridge, the second answers.
#[test]
pub(crate) fn a_task_in_two_turns_calls_a_capsule_tool_through_the_bridge() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![
        calls(Some("mcp__mur"), "wordcount", r#"{"path":"task.md"}"#),
        answers("The task has six words."),
    ]);
    let capsule = setup(h, &mock, ONE_TASK).capsule("cx-two-turns");
    let (session, run) = run_task(&capsule, "Count the words of task.md");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    assert_eq!(session.read("out/result.txt"), "The task has six words.");
    let start = &session.events("session_start")[0];
    assert_eq!(start["transport"], "process");
    assert_eq!(start["harness"]["name"], "codex");
    assert_eq!(start["harness"]["version"], "codex-cli 0.171.0");
    assert_eq!(session.events("inference").len(), 2);
    assert_eq!(session.events("tool_call")[0]["tool_name"], "wordcount");
    let sent = model_requests(&mock);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let told = call_output(&sent[1].json(), "call_1").expect("the tool's result went back");
    assert!(told.contains('6'), "{told}");
    let trace = std::fs::read_to_string(session.records.join("trace.jsonl")).unwrap();
    assert!(!trace.contains(KEY), "the key is in the trace");
}

/// Codex's own shell runs in the capsule's sandbox: a read outside the workdir fails.
#[test]
fn its_own_shell_runs_confined() {
    let Some(h) = harness::installed() else {
        return;
    };
    let probe = Capsule::new("cx-shell-probe", "", "");
    let secret = secret_outside(&probe);
    let command = format!("cat {} ; echo read-exit=$?", secret.display());
    let arguments = serde_json::json!({"cmd": command}).to_string();
    let mock = MockModel::with(vec![
        calls(None, "exec_command", &arguments),
        answers("Done."),
    ]);
    let capsule = setup(h, &mock, ONE_TASK).capsule("cx-shell");
    let (session, run) = run_task(&capsule, "Read the file");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    let sent = model_requests(&mock);
    let told = call_output(&sent[1].json(), "call_1").expect("the shell's output went back");
    assert!(
        !told.contains("the-secret-outside"),
        "read outside the workdir: {told}"
    );
    assert!(told.contains("read-exit=1"), "{told}");
    assert_eq!(session.events("harness_tool")[0]["tool"], "shell");
}

/// A second task of a threaded context resumes Codex's thread.
#[test]
fn a_threaded_second_task_resumes_the_thread() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![answers("First answer."), answers("Second answer.")]);
    let capsule = setup(h, &mock, THREADED).capsule("cx-threaded");
    let running = capsule.spawn_env(&[], ENV);
    let ask = |text: &str| ask_in(&running, text, "ctx-thread");
    assert!(ask("Remember the word heron.").contains("First answer."));
    assert!(ask("Which word?").contains("Second answer."));
    let sent = model_requests(&mock);
    let input = sent[1].json()["input"].to_string();
    assert!(
        input.contains("Remember the word heron.") && input.contains("First answer."),
        "{input}"
    );
    // Codex counts its whole thread: the second task is charged only what it used.
    let session = running.session();
    // The answer's frame goes out before the task's last line is written.
    crate::common::eventually(Duration::from_secs(10), "the second task_end", || {
        session.events_so_far("task_end").len() == 2
    });
    let ends = session.events_so_far("task_end");
    assert_eq!(ends[1]["input_tokens"], ends[0]["input_tokens"], "{ends:?}");
    assert_eq!(
        ends[1]["output_tokens"], ends[0]["output_tokens"],
        "{ends:?}"
    );
    let sessions = running.session().events_so_far("harness_session");
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[1]["resumed"], true);
    assert_eq!(
        sessions[0]["harness_session_id"],
        sessions[1]["harness_session_id"]
    );
}

/// A cancel while Codex waits on its model: the harness is stopped and nothing of it
/// is left.
#[test]
fn a_cancel_mid_turn_stops_the_harness_and_leaves_nothing() {
    let Some(h) = harness::installed() else {
        return;
    };
    let slow = Stream::new("resp_1")
        .message(&["Working slowly"])
        .completed(20, 4);
    let mut pieces = slow.events();
    pieces.insert(1, b": keep waiting\n\n".to_vec());
    let mock = MockModel::with(vec![Reply::sse(pieces).with_delay(Duration::from_secs(8))]);
    let capsule = setup(h, &mock, "").capsule("cx-cancel");
    let running = capsule.spawn_env(&[], ENV);
    let marker = crate::common::marker(0);
    let _cleanup = crate::common::KillOnDrop(marker.clone());
    let streaming = stream_in_background(&running, &marker);
    crate::common::eventually(Duration::from_secs(60), "the model call", || {
        model_requests(&mock).len() == 1
    });
    assert!(
        !crate::common::pids_running(&marker).is_empty(),
        "the harness runs"
    );
    cancel_first_task(&running, streaming);
    let session = running.session();
    crate::common::eventually(Duration::from_secs(10), "no harness process left", || {
        crate::common::pids_running(&marker).is_empty()
    });
    assert_eq!(
        session.events_so_far("harness_exit")[0]["stopped"],
        "canceled"
    );
}

/// The seed's frames for a Codex task on `message/stream`, byte for byte but for the ids
/// and a duration. Codex streams no text: each message is one `text` frame, and a model
/// call is seen when its first item arrives.
#[test]
fn a_streamed_task_has_the_seeds_frames() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![
        calls(Some("mcp__mur"), "wordcount", r#"{"path":"task.md"}"#),
        answers("Six words."),
    ]);
    let capsule = setup(h, &mock, "").capsule("cx-frames");
    let running = capsule.spawn_env(&[], ENV);
    let body = streamed_with_placeholders(&running, "Count the words of task.md");
    let expected = [
        status(0, "working", "inference turn 1", "", false),
        piece(1, "text", "counting task.md\\n", false),
        wordcount_artifact(1),
        status(2, "working", "inference turn 2", "", false),
        piece(3, "text", "Six words.", false),
        piece(4, "text", "", true),
        status(
            5,
            "completed",
            "session ended",
            ",\"response\":\"Six words.\"",
            true,
        ),
    ]
    .concat();
    assert_eq!(body, expected);
}
