//! Nothing queued is lost to a crash: `mur serve` killed with `kill -9` while tasks wait
//! behind a running one, then started again on the same `--data`. Every task a client
//! was told was taken either runs (its own statuses, in its lane and order) or ends
//! `TASK_STATE_FAILED` saying why, as A2A `GetTask` shows it under the id the client
//! got; the task that was running ends `FAILED` saying the server stopped. A damaged
//! queue file does not stop the server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::served::{Create, Hosted, Served, scripted};
use crate::common::*;

const WAIT: Duration = Duration::from_secs(60);
const V1: (&str, &str) = ("a2a-version", "1.0");

/// The prefix of every reason a waiting task could not run again.
const REQUEUE_FAILED: &str =
    "the task was waiting in the queue when the server stopped and could not be queued again";

/// A script whose bash call blocks in `sleep <marker>` until the workdir holds `go`,
/// and runs through once it does.
fn gated(marker: &str) -> String {
    format!(
        "turns:\n{}{}",
        bash_turn(&format!("test -e go || exec sleep {marker}; echo ran")),
        text_turn("done")
    )
}

/// A capsule created from a manifest file on the server, which a test can rewrite
/// while the server is down. Returns the capsule and its manifest's path.
fn from_file(served: &Served, name: &str, script: &str, depth: usize) -> (Hosted, PathBuf) {
    let path = scratch(&format!("{name}-manifest")).join("murmur.yaml");
    std::fs::write(&path, manifest(name, script, depth)).unwrap();
    (served.create(&Create::path(&path)), path)
}

/// The capsule takes peer tasks (`exports.peer_tasks.accept`): the tests send some.
fn manifest(name: &str, script: &str, depth: usize) -> String {
    let manifest = scripted(name, script, &format!("  queue_depth: {depth}\n"));
    format!("{manifest}exports:\n  peer_tasks:\n    accept: true\n")
}

fn v1(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

/// A v1 call's `result`, which it must have.
fn call(hosted: &Hosted, headers: &[(&str, &str)], method: &str, params: Value) -> Value {
    let mut all = vec![V1];
    all.extend_from_slice(headers);
    let reply = hosted.call(&all, &v1(method, params));
    let body: Value = serde_json::from_str(&reply.body)
        .unwrap_or_else(|e| panic!("{method} answered no JSON ({e}): {reply:?}"));
    assert!(body["result"].is_object(), "{method}: {body}");
    body["result"].clone()
}

/// `SendMessage` answered at once (`returnImmediately`): the id of the task it made.
fn send(hosted: &Hosted, headers: &[(&str, &str)], message_id: &str, text: &str) -> String {
    let params = json!({
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": true},
    });
    let result = call(hosted, headers, "SendMessage", params);
    let task = result.get("task").unwrap_or(&result);
    task["id"].as_str().unwrap().to_string()
}

fn get(hosted: &Hosted, task: &str) -> Value {
    call(hosted, &[], "GetTask", json!({"id": task}))
}

/// The task's state and its status message's text.
fn status(hosted: &Hosted, task: &str) -> (String, String) {
    let got = get(hosted, task);
    let state = got["status"]["state"].as_str().unwrap_or_default();
    let text = got["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    (state.to_string(), text.to_string())
}

/// Waits until the task has ended; its state and status message.
fn ended(hosted: &Hosted, task: &str) -> (String, String) {
    let mut last = (String::new(), String::new());
    eventually(WAIT, &format!("task {task} ends"), || {
        last = status(hosted, task);
        [
            "TASK_STATE_COMPLETED",
            "TASK_STATE_FAILED",
            "TASK_STATE_CANCELED",
        ]
        .contains(&last.0.as_str())
    });
    last
}

/// The ids of the tasks the capsule's current session started, in order.
fn started(served: &Served, hosted: &Hosted) -> Vec<String> {
    served
        .trace(&hosted.id, &served.session_id(&hosted.id))
        .into_iter()
        .filter(|e| e["event_type"] == "task_start")
        .map(|e| e["task_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The log of the capsule's current session.
fn bootstrap_log(served: &Served, hosted: &Hosted) -> String {
    let session = served.session_id(&hosted.id);
    let path = served
        .records(&hosted.id)
        .join(session)
        .join("logs")
        .join("bootstrap.log");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn back(served: &Served, hosted: &Hosted) {
    served.until_state(&hosted.id, WAIT, |s| s == "running" || s == "idle");
}

/// Three tasks wait behind a running one, two sent with `SendMessage` (one of them a
/// peer's, which jumps the lane) and one with the seed's `message/stream`; the server
/// is killed. Started again, it runs the three in their lanes and order, each to its
/// own `COMPLETED`, and the one that was running is `FAILED`, saying the server
/// stopped while it ran. A new task runs as before.
#[test]
fn a_killed_server_runs_the_tasks_it_had_queued_in_their_lanes_and_order() {
    let mut served = Served::start("queue-crash");
    let sleep = marker(120);
    let _cleanup = KillOnDrop(sleep.clone());
    let hosted = served.create(&Create::yaml(&manifest("queue-crash", &gated(&sleep), 4)));

    let running = send(&hosted, &[], "m-1", "first");
    eventually(WAIT, "the first task's command runs", || {
        !pids_running(&sleep).is_empty()
    });
    let second = send(&hosted, &[], "m-2", "second");
    // The seed's door tells a task's id only as it starts: its context finds it.
    let context = "ctx-queue-crash-seed";
    let _seed = hosted.post(&[], &message_stream_body_in("third", context));
    served.wait_for_event(&hosted.id, "a2a_task_received", 2);
    let fourth = send(
        &hosted,
        &[("x-murmur-task-origin", "peer")],
        "m-4",
        "fourth",
    );
    let listed = call(&hosted, &[], "ListTasks", json!({"contextId": context}));
    let third = listed["tasks"][0]["id"].as_str().unwrap().to_string();
    for task in [&second, &third, &fourth] {
        assert_eq!(status(&hosted, task).0, "TASK_STATE_SUBMITTED");
    }

    // The next run of the script goes through.
    std::fs::write(hosted.workdir.join("go"), "").unwrap();
    served.restart();
    kill_running(&sleep);
    back(&served, &hosted);

    for task in [&second, &third, &fourth] {
        assert_eq!(
            ended(&hosted, task),
            ("TASK_STATE_COMPLETED".to_string(), "done".to_string()),
            "task {task}"
        );
        let got = get(&hosted, task);
        // Its own working status, its tool call and its answer, under the same id.
        assert_eq!(got["artifacts"][0]["name"], "bash", "{got}");
        assert!(got["history"][0]["parts"][0]["text"].is_string(), "{got}");
    }
    assert_eq!(get(&hosted, &third)["contextId"], context);
    assert_eq!(
        started(&served, &hosted),
        [fourth.clone(), second.clone(), third.clone()],
        "the peer's lane first, then arrival order"
    );
    assert_eq!(
        status(&hosted, &running),
        (
            "TASK_STATE_FAILED".to_string(),
            "the server stopped while the task ran".to_string()
        )
    );
    assert!(
        bootstrap_log(&served, &hosted)
            .contains("queue: 3 task(s) waiting when the server stopped are queued again"),
        "{}",
        bootstrap_log(&served, &hosted)
    );

    // The seed's wire is as it was for a new task.
    let frames = hosted.message("fifth");
    let last = frames.last().expect("frames");
    assert!(last.is_final(), "{frames:#?}");
    assert_eq!(last.data["status"]["response"], "done");

    // Nothing waits any more: another kill brings nothing back.
    served.restart();
    back(&served, &hosted);
    assert!(started(&served, &hosted).is_empty());
}

/// Tasks that cannot run after the restart end `FAILED` with the reason: the queue of
/// one capsule is now smaller (its manifest was edited while the server was down), so
/// the task that would have run first keeps its place and the others fail; the other
/// capsule's manifest no longer loads, so it does not start, and once mended and
/// started its client reads why its task never ran.
#[test]
fn queued_tasks_that_cannot_run_after_a_kill_end_failed_saying_why() {
    let mut served = Served::start("queue-crash-fail");
    let (one, two) = (marker(120), marker(120));
    let _cleanup = (KillOnDrop(one.clone()), KillOnDrop(two.clone()));
    let (shrunk, shrunk_manifest) = from_file(&served, "queue-shrunk", &gated(&one), 3);
    let (broken, broken_manifest) = from_file(&served, "queue-broken", &gated(&two), 3);

    send(&shrunk, &[], "m-1", "first");
    send(&broken, &[], "m-1", "first");
    eventually(WAIT, "both first tasks run", || {
        !pids_running(&one).is_empty() && !pids_running(&two).is_empty()
    });
    let bg_a = send(&shrunk, &[], "m-2", "second");
    let bg_b = send(&shrunk, &[], "m-3", "third");
    let peer = send(
        &shrunk,
        &[("x-murmur-task-origin", "peer")],
        "m-4",
        "fourth",
    );
    let stranded = send(&broken, &[], "m-2", "second");
    for task in [&bg_a, &bg_b, &peer] {
        assert_eq!(status(&shrunk, task).0, "TASK_STATE_SUBMITTED");
    }
    assert_eq!(status(&broken, &stranded).0, "TASK_STATE_SUBMITTED");

    served.kill();
    kill_running(&one);
    kill_running(&two);
    std::fs::write(hosted_go(&shrunk), "").unwrap();
    std::fs::write(&shrunk_manifest, manifest("queue-shrunk", &gated(&one), 1)).unwrap();
    std::fs::write(&broken_manifest, "name: [this is not a manifest\n").unwrap();
    served.restart();
    back(&served, &shrunk);

    assert_eq!(ended(&shrunk, &peer).0, "TASK_STATE_COMPLETED");
    let no_room = format!(
        "{REQUEUE_FAILED}: the capsule's queue now holds at most 1 task waiting (lifecycle.queue_depth, or its queued_tasks limit) and 3 were waiting"
    );
    for task in [&bg_a, &bg_b] {
        assert_eq!(
            status(&shrunk, task),
            ("TASK_STATE_FAILED".to_string(), no_room.clone())
        );
    }
    assert_eq!(started(&served, &shrunk), [peer]);

    assert_eq!(served.capsule(&broken.id)["state"], "failed");
    let stderr = served.stderr();
    assert!(
        stderr.contains(&format!(
            "warning[W-QUEUE-003]: capsule {}: 1 queued task(s) failed: the capsule could not start again",
            broken.id
        )),
        "{stderr}"
    );
    std::fs::write(&broken_manifest, manifest("queue-broken", &gated(&two), 3)).unwrap();
    std::fs::write(hosted_go(&broken), "").unwrap();
    let start = served.start_capsule(&broken.id);
    assert_eq!(start.status, 200, "{start:?}");
    back(&served, &broken);
    let (state, why) = status(&broken, &stranded);
    assert_eq!(state, "TASK_STATE_FAILED");
    assert!(
        why.starts_with(&format!(
            "{REQUEUE_FAILED}: the capsule could not start again (E-"
        )),
        "{why}"
    );
    assert!(started(&served, &broken).is_empty());
}

fn hosted_go(hosted: &Hosted) -> PathBuf {
    hosted.workdir.join("go")
}

/// Garbage in the queue's file (binary bytes, a line of megabytes, records that are not
/// ones, an id that is a path, half a line): the server starts, the capsule serves,
/// its log says what was skipped, and a record that reads but names nothing the
/// capsule can run ends its task `FAILED` with the reason.
#[test]
fn a_damaged_queue_file_does_not_stop_the_server() {
    let mut served = Served::start("queue-crash-garbage");
    let hosted = served.create_scripted("queue-garbage", "turns:\n  - text: fine\n");
    assert!(hosted.message("warm up").len() > 1);
    served.kill();

    let file = served.records(&hosted.id).join("queue.jsonl");
    let odd = "tsk_0000aaaa";
    let mut bytes: Vec<u8> = Vec::new();
    bytes.extend_from_slice(b"\x00\xff\xfe garbage \x01\n");
    bytes.extend_from_slice(&vec![b'{'; 9 << 20]);
    bytes.extend_from_slice(b"\n{\"op\":\"exploded\",\"id\":\"tsk_0000bbbb\"}\n");
    bytes.extend_from_slice(
        br#"{"op":"queued","id":"../../etc/passwd","context_id":"c","origin":"event","source":"a2a","text":"x"}"#,
    );
    bytes.push(b'\n');
    let queued = json!({"op": "queued", "id": odd, "context_id": "ctx-odd", "origin": "martian",
        "source": "a2a", "message_id": "m-odd", "text": "from nowhere"});
    bytes.extend_from_slice(format!("{queued}\n").as_bytes());
    bytes.extend_from_slice(br#"{"op":"queued","id":"tsk_"#);
    write(&file, &bytes);
    served.restart();
    back(&served, &hosted);

    assert_eq!(
        status(&hosted, odd),
        (
            "TASK_STATE_FAILED".to_string(),
            format!("{REQUEUE_FAILED}: its record names an unknown origin 'martian'")
        )
    );
    assert_eq!(get(&hosted, odd)["contextId"], "ctx-odd");
    let log = bootstrap_log(&served, &hosted);
    assert!(
        log.contains("queue: skipped 5 line(s) of"),
        "the log says what was skipped:\n{log}"
    );
    let frames = hosted.message("still there?");
    assert_eq!(frames.last().unwrap().data["status"]["response"], "fine");
    assert!(!served.exited());
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
