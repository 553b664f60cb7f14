//! The built-in scripted driver end to end: a script plays from its first turn for every
//! task, so the README's persistent hello capsule answers each task it is sent, and a
//! script that says `span: session` plays its turns once across the session instead.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;
use crate::drivers::{l, labels};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const JSON_CT: (&str, &str) = ("content-type", "application/json");

/// A task sent over `message/stream` in the README's form, read to the end: its frames,
/// after the exact event-stream head.
fn send(address: &str, n: u64, text: &str) -> Vec<(Option<u64>, String, Value)> {
    let body = json!({
        "jsonrpc": "2.0", "id": n, "method": "message/stream",
        "params": {"message": {
            "messageId": format!("msg-{n}"), "role": "user", "parts": [{"text": text}]
        }}
    });
    let raw = read_to_close(post(address, &[JSON_CT], &body.to_string()));
    let frames_body = raw
        .strip_prefix(SSE_HEAD)
        .unwrap_or_else(|| panic!("not the event-stream head: {raw:?}"));
    frames(frames_body)
}

/// The final status frame's state and response (the task's answer).
fn outcome(frames: &[(Option<u64>, String, Value)]) -> (String, String) {
    let (_, event, data) = frames.last().expect("frames");
    assert_eq!(event, "status", "{frames:?}");
    assert_eq!(data["final"], true, "{data}");
    let status = &data["status"];
    let text = |key: &str| status[key].as_str().unwrap_or_default().to_string();
    (text("state"), text("response"))
}

/// Ends a serving capsule with `murmur/stop` and waits for it to exit.
fn stop(running: Running) -> Run {
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "murmur/stop", "params": {}});
    let raw = read_to_close(post(&running.address, &[JSON_CT], &body.to_string()));
    assert!(raw.contains("\"result\""), "{raw}");
    running.wait(WAIT)
}

fn hello_example() -> PathBuf {
    repo().join("examples").join("hello")
}

/// The README's persistent hello capsule (`examples/hello/murmur.yaml` with
/// `--lifecycle-task-acceptance queue --lifecycle-after-task sleep`; a free port, a
/// scratch workdir and `--json` so the test learns the address) completes three tasks
/// in a row, each played from the script's first turn: a `bash` call, then the answer
/// quoting what the call printed.
#[test]
fn the_readme_persistent_hello_capsule_completes_every_task() {
    let capsule = Capsule {
        dir: hello_example(),
    };
    let workdir = scratch("hello-persistent");
    let workdir_arg = workdir.display().to_string();
    let mut args = QUEUE.to_vec();
    args.extend(["--workdir", workdir_arg.as_str()]);
    let running = capsule.spawn(&args);
    for n in 1..=3 {
        let frames = send(&running.address, n, "What is in your workdir?");
        assert_eq!(
            labels(&frames),
            [
                l(0, "status:working"),
                l(1, "artifact"),
                l(2, "status:working"),
                l(3, "text:final"),
                l(3, "status:completed"),
            ],
            "task {n}"
        );
        let (state, answer) = outcome(&frames);
        assert_eq!(state, "completed", "task {n}");
        assert_eq!(answer, HELLO_ANSWER, "task {n}");
    }
    let session = running.session();
    stop(running).assert_ok();
    let turns: Vec<(Value, Value)> = session
        .events("inference")
        .iter()
        .map(|e| (e["turn"].clone(), e["decision"].clone()))
        .collect();
    let task = [
        (json!(0), json!("tool_call")),
        (json!(1), json!("end_turn")),
    ];
    assert_eq!(turns, [task.clone(), task.clone(), task].concat());
}

/// What the hello script answers in a fresh workdir: its second turn, quoting the
/// fenced result of its `ls -1 && head -n 1 task.md`.
const HELLO_ANSWER: &str = "My workdir holds the files below; the first line of task.md is my task.\n\
<untrusted-content source=tool:bash>\n\
$ ls -1 && head -n 1 task.md\nExit code: 0\n\
Stdout:\nMURMUR.md\nout\ntask.md\ntools\nWhat is in your workdir?\n\
Stderr:\n\n</untrusted-content>";

/// `span: session`: the turns are played once across the session, so the second task
/// gets the script's third turn, and a task past the end fails with the driver's
/// exhaustion error, word for word.
#[test]
fn a_script_that_spans_the_session_goes_on_across_tasks() {
    let script = "span: session\nturns:\n  \
                  - tool_calls: [{id: t1, name: bash, input: {command: \"echo one\"}}]\n  \
                  - text: \"the first task's answer\"\n  \
                  - text: \"turn 3, on the second task\"\n";
    let manifest = "name: span\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  \
                    shell:\n    allow: [bash]\n";
    let capsule = Capsule::new("span-session", manifest, "");
    capsule.file("script.yaml", script);
    let running = capsule.spawn(QUEUE);
    let answers: Vec<(String, String)> = (1..=2)
        .map(|n| outcome(&send(&running.address, n, "go on")))
        .collect();
    assert_eq!(
        answers,
        [
            (
                "completed".to_string(),
                "the first task's answer".to_string()
            ),
            (
                "completed".to_string(),
                "turn 3, on the second task".to_string()
            ),
        ]
    );
    // The third task finds the script used up: it fails, and the driver's error is
    // the trace's word for why.
    let frames = send(&running.address, 3, "go on");
    assert_eq!(
        labels(&frames),
        [l(0, "status:working"), l(1, "status:failed")]
    );
    assert_eq!(
        frames[1].2["status"],
        json!({"state": "failed", "message": "session ended"})
    );
    let session = running.session();
    let run = stop(running);
    assert_eq!(run.status, 1, "the last task failed: {}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "\nerror[E-RUN-040]: the task did not complete: failed (error: {EXHAUSTED})\n"
        )),
        "{}",
        run.stderr
    );
    let inference = session.events("inference");
    let last = inference.last().expect("inference lines");
    assert_eq!(
        (&last["error_code"], &last["error"]),
        (&json!("driver_error"), &json!(EXHAUSTED)),
        "{last}"
    );
    assert_eq!(inference.len(), 4, "two turns, one, then the refused one");
}

/// The failed status of a task the script has no turn left for.
const EXHAUSTED: &str = "script exhausted: it has 3 turns and turn 4 was asked for";
