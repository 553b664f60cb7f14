//! Claude Code (`@anthropic-ai/claude-code`, pinned in `tests/harness/package.json`) as a
//! capsule's engine, against the Anthropic mock.

use std::time::Duration;

use serde_json::Value;

use super::{
    ENV, KEY, ONE_TASK, Setup, THREADED, ask_in, cancel_first_task, model_requests, piece,
    run_task, secret_outside, status, stream_in_background, streamed_with_placeholders,
    wordcount_artifact,
};
use crate::common::Capsule;
use crate::common::harness::{self, Harnesses};
use crate::common::mock_model::{MockModel, Reply, anthropic};

pub(super) fn setup<'a>(h: &'a Harnesses, mock: &MockModel, lifecycle: &'a str) -> Setup<'a> {
    Setup {
        driver: "claude-code",
        command: &h.claude,
        endpoint: mock.origin(),
        allow: vec![mock.origin()],
        model: "claude-test",
        lifecycle,
        max_turns: 6,
        extra_capabilities: "",
        extra_inference: "",
    }
}

/// A model turn that calls `tool` with `input` (JSON text), after a thought.
fn calls(tool: &str, input: &str) -> Reply {
    Reply::sse(
        anthropic::Stream::new(40)
            .thinking_block(&["Counting."], "sig-1")
            .tool_use_block("toolu_01", tool, &[input])
            .message_delta("tool_use", 12)
            .stop()
            .events(),
    )
}

/// A model turn that answers with `pieces`.
fn answers(pieces: &[&str]) -> Reply {
    Reply::sse(
        anthropic::Stream::new(60)
            .text_block(pieces)
            .message_delta("end_turn", 8)
            .stop()
            .events(),
    )
}

/// The `tool_result` a request's messages carry for `id`, as text.
fn tool_result(body: &Value, id: &str) -> Option<String> {
    body["messages"].as_array()?.iter().find_map(|m| {
        m["content"].as_array()?.iter().find_map(|b| {
            (b["type"] == "tool_result" && b["tool_use_id"] == id).then(|| match &b["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
    })
}

/// A task answered in two turns: the first calls the capsule's `wordcount` component
/// through the bridge, the second answers. The call is the capsule's own (`tool_call`
/// line, artifact), the answer is `out/result.txt`, the trace names the harness, and
/// the key reaches the model server and nothing the host writes.
#[test]
pub(crate) fn a_task_in_two_turns_calls_a_capsule_tool_through_the_bridge() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![
        calls("mcp__mur__wordcount", r#"{"path": "task.md"}"#),
        answers(&["The task has ", "six words."]),
    ]);
    let capsule = setup(h, &mock, ONE_TASK).capsule("cc-two-turns");
    let (session, run) = run_task(&capsule, "Count the words of task.md");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    assert_eq!(session.read("out/result.txt"), "The task has six words.");

    let start = &session.events("session_start")[0];
    assert_eq!(start["transport"], "process");
    assert_eq!(start["harness"]["name"], "claude-code");
    assert!(
        start["harness"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("2.1.197")),
        "{start}"
    );
    let turns = session.events("inference");
    assert_eq!(turns.len(), 2, "{turns:?}");
    let call = &session.events("tool_call")[0];
    assert_eq!(call["tool_name"], "wordcount");
    assert_eq!(call["parent_id"], turns[0]["event_id"]);
    let billed = &session.events("harness_session")[0];
    assert_eq!(billed["auth"], "api-key");
    assert!(run.stderr.contains("warning[W-SEC-031]"), "{}", run.stderr);

    let sent = model_requests(&mock);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].header("x-api-key"), Some(KEY));
    // The capsule's tools, its WASM tool and its shell, reach the model through the bridge.
    let offered = sent[0].json()["tools"].to_string();
    for tool in ["mcp__mur__wordcount", "mcp__mur__bash"] {
        assert!(
            offered.contains(&format!("\"{tool}\"")),
            "{tool} not offered"
        );
    }
    let told = tool_result(&sent[1].json(), "toolu_01").expect("the tool's result went back");
    assert!(told.contains("6"), "{told}");
    let trace = std::fs::read_to_string(session.records.join("trace.jsonl")).unwrap();
    assert!(!trace.contains(KEY), "the key is in the trace");
    assert!(!run.stderr.contains(KEY));
}

/// Claude Code's own `Bash` runs in the capsule's sandbox: a read outside the workdir
/// is refused, and the call is a `harness_tool` line.
#[test]
fn its_own_bash_runs_confined() {
    let Some(h) = harness::installed() else {
        return;
    };
    let capsule_probe = Capsule::new("cc-bash-probe", "", "");
    let secret = secret_outside(&capsule_probe);
    let command = format!("cat {} ; echo read-exit=$?", secret.display());
    let input = serde_json::json!({"command": command, "description": "read"}).to_string();
    let mock = MockModel::with(vec![calls("Bash", &input), answers(&["Done."])]);
    let capsule = setup(h, &mock, ONE_TASK).capsule("cc-bash");
    let (session, run) = run_task(&capsule, "Read the file");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    let sent = model_requests(&mock);
    let told = tool_result(&sent[1].json(), "toolu_01").expect("bash's output went back");
    assert!(
        !told.contains("the-secret-outside"),
        "read outside the workdir: {told}"
    );
    assert!(told.contains("read-exit=1"), "{told}");
    let own = &session.events("harness_tool")[0];
    assert_eq!(own["tool"], "Bash");
}

/// The seed's frames for a task on `message/stream`, byte for byte but for the ids
/// and a duration: a `working` `inference turn N` status per turn, the thinking and
/// text as streamed, the tool's own text and artifact between the turns, the answer
/// last.
#[test]
fn a_streamed_task_has_the_seeds_frames() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![
        calls("mcp__mur__wordcount", r#"{"path": "task.md"}"#),
        answers(&["Six ", "words."]),
    ]);
    let capsule = setup(h, &mock, "").capsule("cc-frames");
    let running = capsule.spawn_env(&[], ENV);
    let body = streamed_with_placeholders(&running, "Count the words of task.md");
    let expected = [
        status(0, "working", "inference turn 1", "", false),
        piece(1, "thinking", "Counting.", false),
        piece(2, "text", "counting task.md\\n", false),
        wordcount_artifact(2),
        status(3, "working", "inference turn 2", "", false),
        piece(4, "text", "Six ", false),
        piece(5, "text", "words.", false),
        piece(6, "text", "", true),
        status(
            7,
            "completed",
            "session ended",
            ",\"response\":\"Six words.\"",
            true,
        ),
    ]
    .concat();
    assert_eq!(body, expected);
    drop(running);
}

/// A second task of a threaded context resumes the harness's session: the model sees
/// the first exchange again, and `harness_session` says it was resumed.
#[test]
fn a_threaded_second_task_resumes_the_harness_session() {
    let Some(h) = harness::installed() else {
        return;
    };
    let mock = MockModel::with(vec![
        answers(&["First answer."]),
        answers(&["Second answer."]),
    ]);
    let capsule = setup(h, &mock, THREADED).capsule("cc-threaded");
    let running = capsule.spawn_env(&[], ENV);
    let ask = |text: &str| ask_in(&running, text, "ctx-thread");
    let first = ask("Remember the word heron.");
    assert!(first.contains("First answer."), "{first}");
    let second = ask("Which word?");
    assert!(second.contains("Second answer."), "{second}");
    let sent = model_requests(&mock);
    let texts = sent[1].json()["messages"].to_string();
    assert!(
        texts.contains("Remember the word heron.") && texts.contains("First answer."),
        "{texts}"
    );
    let session = running.session();
    let sessions = session.events_so_far("harness_session");
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[1]["resumed"], true);
    assert_eq!(
        sessions[0]["harness_session_id"],
        sessions[1]["harness_session_id"]
    );
}

/// A cancel in the middle of a turn interrupts the harness, then kills it: the task
/// ends `canceled` and no process of the harness is left.
#[test]
fn a_cancel_mid_turn_stops_the_harness_and_leaves_nothing() {
    let Some(h) = harness::installed() else {
        return;
    };
    let slow = anthropic::Stream::new(40)
        .text_block(&["Working", " on", " it", " slowly", " and", " more"])
        .message_delta("end_turn", 8)
        .stop();
    let mock = MockModel::with(vec![
        Reply::sse(slow.events()).with_delay(Duration::from_secs(3)),
    ]);
    let capsule = setup(h, &mock, "").capsule("cc-cancel");
    let running = capsule.spawn_env(&[], ENV);
    // The task's text is an argument of the harness: it finds its processes.
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
    std::thread::sleep(Duration::from_millis(500));
    cancel_first_task(&running, streaming);
    let session = running.session();
    crate::common::eventually(Duration::from_secs(10), "no harness process left", || {
        crate::common::pids_running(&marker).is_empty()
    });
    let exit = &session.events_so_far("harness_exit")[0];
    assert_eq!(exit["stopped"], "canceled");
}

/// A cancel while a capsule tool the harness called runs (a long `bash` command through
/// the bridge): the command and the harness are stopped, and the task ends `canceled`.
#[test]
fn a_cancel_during_a_bridged_call_stops_the_call_and_the_harness() {
    let Some(h) = harness::installed() else {
        return;
    };
    let sleeper = crate::common::marker(30);
    let _cleanup = crate::common::KillOnDrop(sleeper.clone());
    let input = serde_json::json!({"command": format!("sleep {sleeper}")}).to_string();
    let mock = MockModel::with(vec![calls("mcp__mur__bash", &input), answers(&["late"])]);
    let capsule = setup(h, &mock, "").capsule("cc-cancel-call");
    let running = capsule.spawn_env(&[], ENV);
    let streaming = stream_in_background(&running, "Sleep");
    crate::common::eventually(Duration::from_secs(60), "the command running", || {
        !crate::common::pids_running(&sleeper).is_empty()
    });
    cancel_first_task(&running, streaming);
    let session = running.session();
    crate::common::eventually(Duration::from_secs(10), "the command stopped", || {
        crate::common::pids_running(&sleeper).is_empty()
    });
    assert_eq!(
        session.events_so_far("harness_exit")[0]["stopped"],
        "canceled"
    );
    assert_eq!(
        model_requests(&mock).len(),
        1,
        "the harness went on after the cancel"
    );
}
