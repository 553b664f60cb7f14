//! `request-input` end to end: a tool of an A2A task asks a question, the stream says
//! `input-required`, and the next `message/stream` in the task's context answers it
//! (the streaming protocol's status frames and its input-wait counter).
//! Frames are read as raw bytes off the socket, every read with a deadline.

use std::time::{Duration, Instant};

use crate::common::sse_frames::{Frame, Sse, labels};
use crate::common::*;
use serde_json::{Value, json};

/// The input-wait counter's start, for every `request-input` call.
const WAIT_START: u64 = 9_223_372_036_854_775_807;
const WAIT: Duration = Duration::from_secs(30);

/// A JSON `POST /` read as an event stream, its head checked.
fn open(address: &str, body: &str) -> Sse {
    let opened = Instant::now();
    let socket = post(address, &[("content-type", "application/json")], body);
    Sse::open(socket, opened, WAIT)
}

/// The exact bytes of a wait's status frame: no `context_id` key.
fn wait_block(id: u64, task: &str, state: &str, message: &str, fin: bool) -> String {
    let data = json!({"id": task, "status": {"state": state, "message": message}, "final": fin});
    format!("id: {id}\nevent: status\ndata: {data}")
}

fn is_wait_status(f: &Frame) -> bool {
    f.event == "status" && f.id.is_some_and(|id| id >= WAIT_START)
}

fn capsule(name: &str, script: &str, lifecycle: &str) -> Capsule {
    let manifest = format!(
        r#"name: input
version: "0.1.0"
artifacts:
  - name: ask
    runtime: tool
    source: {ask}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
trace:
  include_tool_output: true
{lifecycle}"#,
        ask = guest(MUR_TOOL_ASK).display(),
    );
    Capsule::new(name, &manifest, script)
}

fn ask_turn(id: &str, prompt: &str) -> String {
    format!(
        "  - tool_calls: [{{id: {id}, name: ask, input: {{prompt: {}}}}}]\n",
        json!(prompt)
    )
}

/// Asks once, then answers with what the tool returned.
fn ask_once(prompt: &str) -> String {
    format!(
        "turns:\n{}  - text: \"{{{{last_tool_result}}}}\"\n",
        ask_turn("a1", prompt)
    )
}

fn fenced(body: &str) -> String {
    format!("<untrusted-content source=tool:ask>\n{body}\n</untrusted-content>")
}

fn watch(address: &str) -> Sse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}});
    let mut sse = open(address, &body.to_string());
    let ack = sse.until(WAIT, |_| true);
    assert_eq!(ack[0].event, "connection-ack");
    sse
}

fn send(address: &str, text: &str, context_id: &str) -> Sse {
    open(address, &message_stream_body_in(text, context_id))
}

/// The ids of the tasks a running session started, from the trace so far.
fn task_ids(session: &Session) -> Vec<String> {
    session
        .events_so_far("task_start")
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
pub(crate) fn an_answered_wait_resumes_the_task_with_the_reply() {
    let capsule = capsule("answered", &ask_once("Which file?"), "");
    let running = capsule.spawn(QUEUE);
    let address = running.address.clone();
    let mut asker = send(&address, "summarise a file", "ctx_human");

    let before = asker.until(WAIT, |f| f.state() == "input-required");
    let prompt = before.last().unwrap().clone();
    let task = prompt.data["id"].as_str().unwrap().to_string();
    assert_eq!(
        prompt.block,
        wait_block(WAIT_START, &task, "input-required", "Which file?", false)
    );

    let mut replier = send(&address, "README.md", "ctx_human");
    let after = replier.rest(WAIT);
    assert_eq!(
        after[0].block,
        wait_block(WAIT_START + 1, &task, "working", "resumed", false)
    );
    assert_eq!(
        labels(&after),
        vec![
            (Some(WAIT_START + 1), "status:working".to_string()),
            (Some(1), "artifact".to_string()),
            (Some(2), "status:working".to_string()),
            // The whole-reply text takes the chunk counter, which the final status
            // shares (the seed: ids are labels, not a sequence).
            (Some(3), "text:final".to_string()),
            (Some(3), "status:completed".to_string()),
        ]
    );
    let completed = after.last().unwrap();
    assert_eq!(completed.data["id"], task.as_str());
    assert_eq!(
        completed.data["status"]["response"],
        fenced("README.md").as_str()
    );
    assert_eq!(after[1].data["artifact"]["is_error"], false);

    // The asking connection saw the same frames and ended at the same final status.
    let rest = asker.rest(WAIT);
    assert_eq!(
        rest.iter().map(|f| &f.block).collect::<Vec<_>>(),
        after.iter().map(|f| &f.block).collect::<Vec<_>>()
    );

    // The reply became no task of its own; the wait is in the trace.
    let session = running.session();
    assert_eq!(task_ids(&session), vec![task.clone()]);
    let requested = session.events("input_requested");
    assert_eq!(requested.len(), 1);
    assert_eq!(requested[0]["task_id"], task.as_str());
    assert_eq!(requested[0]["prompt_bytes"], "Which file?".len());
    let received = session.events("input_received");
    assert_eq!(received[0]["reply_bytes"], "README.md".len());
}

#[test]
fn a_wait_that_times_out_fails_the_call_and_the_task_goes_on() {
    let capsule = capsule(
        "timeout",
        &ask_once("Anyone there?"),
        "lifecycle:\n  input_timeout_secs: 1\n",
    );
    let running = capsule.spawn(QUEUE);
    let address = running.address.clone();
    let mut watcher = watch(&address);
    let mut asker = send(&address, "ask and wait", "ctx_alone");

    // The timeout's status is final: the submitting connection ends there.
    let frames = asker.rest(WAIT);
    let timed_out = frames.last().unwrap();
    let task = timed_out.data["id"].as_str().unwrap().to_string();
    assert_eq!(
        timed_out.block,
        wait_block(WAIT_START + 1, &task, "failed", "input-timeout", true)
    );
    let prompt = &frames[frames.len() - 2];
    assert_eq!(
        prompt.block,
        wait_block(WAIT_START, &task, "input-required", "Anyone there?", false)
    );

    // The task itself goes on: the failure reaches the model, then its own final status.
    let seen = watcher.until(WAIT, |f| f.is_final() && f.state() == "completed");
    let after: Vec<&Frame> = seen.iter().skip_while(|f| f.state() != "failed").collect();
    let artifact = &after[1].data["artifact"];
    assert_eq!(after[1].event, "artifact");
    assert_eq!(artifact["is_error"], true);
    let content = artifact["content"].as_str().unwrap();
    assert!(
        content.contains("error[E-RUN-051]: request-input timed out"),
        "{content}"
    );
    let completed = seen.last().unwrap();
    assert_eq!(completed.data["id"], task.as_str());
    assert_eq!(completed.data["status"]["response"], content);
    assert_eq!(running.session().events_so_far("input_timeout").len(), 1);

    // A late reply is a new task in that context, not an answer.
    let mut late = send(&address, "too late", "ctx_alone");
    let late_frames = late.rest(WAIT);
    let new_task = late_frames[0].data["id"].as_str().unwrap();
    assert_ne!(new_task, task);
}

#[test]
fn every_wait_of_a_task_numbers_from_the_counter_start() {
    let script = format!(
        "turns:\n{}{}  - text: \"{{{{last_tool_result}}}}\"\n",
        ask_turn("a1", "First?"),
        ask_turn("a2", "Second?")
    );
    let capsule = capsule("two-waits", &script, "");
    let running = capsule.spawn(QUEUE);
    let address = running.address.clone();
    let mut watcher = watch(&address);
    let _asker = send(&address, "ask twice", "ctx_twice");

    let first = watcher.until(WAIT, |f| f.state() == "input-required");
    let task = first.last().unwrap().data["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut one = send(&address, "one", "ctx_twice");
    let second = watcher.until(WAIT, |f| f.state() == "input-required");
    let mut two = send(&address, "two", "ctx_twice");
    let rest = watcher.until(WAIT, |f| f.is_final());

    let waits: Vec<String> = first
        .iter()
        .chain(&second)
        .chain(&rest)
        .filter(|f| is_wait_status(f))
        .map(|f| f.block.clone())
        .collect();
    assert_eq!(
        waits,
        vec![
            wait_block(WAIT_START, &task, "input-required", "First?", false),
            wait_block(WAIT_START + 1, &task, "working", "resumed", false),
            wait_block(WAIT_START, &task, "input-required", "Second?", false),
            wait_block(WAIT_START + 1, &task, "working", "resumed", false),
        ]
    );
    let completed = rest.last().unwrap();
    assert_eq!(completed.data["status"]["response"], fenced("two").as_str());
    // Both replying connections end at the task's final status.
    for sse in [&mut one, &mut two] {
        let frames = sse.rest(WAIT);
        assert_eq!(frames.last().unwrap().block, completed.block);
    }
    assert_eq!(task_ids(&running.session()), vec![task]);
}

#[test]
fn outside_an_a2a_task_request_input_fails_at_once() {
    let capsule = capsule("no-a2a", &ask_once("Hello?"), "");
    let started = Instant::now();
    let run = capsule.run(&["--task", "ask the launcher"]);
    run.assert_ok();
    assert!(started.elapsed() < WAIT, "the call did not wait");
    let session = run.session();
    assert_eq!(
        session.read("out/result.txt"),
        fenced(
            "error[E-RUN-050]: request-input is only available while a task submitted over A2A runs\n  hint: submit the task with message/stream; the launch task (--task) cannot ask for input"
        )
    );
    let calls = session.events("tool_call");
    assert_eq!(calls[0]["status"], "error");
    assert!(session.events("input_requested").is_empty());
}

#[test]
fn cancel_ends_a_wait_and_the_context_takes_tasks_again() {
    // The driver's script runs on across tasks: the next task answers with turn 2.
    let script = format!(
        "turns:\n{}  - text: \"a fresh answer\"\n",
        ask_turn("a1", "Still there?")
    );
    let capsule = capsule("cancel", &script, "");
    let running = capsule.spawn(QUEUE);
    let address = running.address.clone();
    let mut asker = send(&address, "ask then be canceled", "ctx_cancel");
    let frames = asker.until(WAIT, |f| f.state() == "input-required");
    let task = frames.last().unwrap().data["id"]
        .as_str()
        .unwrap()
        .to_string();

    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": task}});
    let reply = read_to_close(post(
        &address,
        &[("content-type", "application/json")],
        &body.to_string(),
    ));
    let (head, reply) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(
        serde_json::from_str::<Value>(reply).unwrap(),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"id": task, "status": {"state": "canceled"}}})
    );
    let end = asker.rest(WAIT);
    let last = end.last().unwrap();
    assert_eq!(last.state(), "canceled");
    assert_eq!(last.data["id"], task.as_str());

    // The wait is gone: a message in its context is a new task, not a reply, and it
    // runs to completion.
    let mut next = send(&address, "a new question", "ctx_cancel");
    let next_frames = next.rest(WAIT);
    let done = next_frames.last().unwrap();
    assert!(done.is_final(), "{:?}", labels(&next_frames));
    assert_eq!(done.state(), "completed", "{:?}", labels(&next_frames));
    assert_eq!(done.data["status"]["response"], "a fresh answer");
    let ids = task_ids(&running.session());
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], task);
    assert_eq!(done.data["id"], ids[1].as_str());
    assert!(
        next_frames
            .iter()
            .filter(|f| f.event == "status")
            .all(|f| f.data["id"] == ids[1].as_str()),
        "{:?}",
        labels(&next_frames)
    );
}

#[test]
fn while_a_wait_is_open_other_contexts_still_submit_tasks() {
    // The driver's script runs on across tasks: the queued one answers with its last turn.
    let script = format!("{}  - text: second\n", ask_once("Yours?"));
    let capsule = capsule("other-context", &script, "");
    let running = capsule.spawn(QUEUE);
    let address = running.address.clone();
    let mut watcher = watch(&address);
    let _asker = send(&address, "ask", "ctx_first");
    let first = watcher.until(WAIT, |f| f.state() == "input-required");
    let task = first.last().unwrap().data["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Neither a message without a context nor one in another context answers the
    // wait: the first is queued as a task, the second refused as one (queue depth 1).
    let _queued = open(&address, &message_stream_body("a task of its own"));
    wait_for_tasks_received(&running.session(), 2);
    let mut refused = send(&address, "another task", "ctx_second");
    let refusal = refused.rest(WAIT);
    assert_eq!(refusal.len(), 1);
    assert_eq!(refusal[0].state(), "rejected");
    assert_eq!(refusal[0].data["context_id"], "ctx_second");

    let mut reply = send(&address, "mine", "ctx_first");
    let done = reply.rest(WAIT);
    assert_eq!(done.last().unwrap().data["id"], task.as_str());
    assert_eq!(
        done.last().unwrap().data["status"]["response"],
        fenced("mine").as_str()
    );
    // The queued task runs next.
    let rest = watcher.until(WAIT, |f| {
        f.is_final() && f.data["status"]["response"] == "second"
    });
    assert_ne!(rest.last().unwrap().data["id"], task.as_str());
}

/// Waits until `n` messages have come in over A2A as tasks.
fn wait_for_tasks_received(session: &Session, n: usize) {
    let deadline = Instant::now() + WAIT;
    let received = || {
        session
            .trace_so_far()
            .iter()
            .filter(|e| e["event_type"] == "a2a_task_received")
            .count()
    };
    while received() < n {
        assert!(Instant::now() < deadline, "the task never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
}
