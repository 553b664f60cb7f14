//! Deadlines that hold whatever a component does, stop and cancel that interrupt a
//! loop blocked anywhere, and a record for every task a loop never took: end to end,
//! with hostile components built from source (`components/loop-hostile`, the sleep
//! modes of the tool and driver probes).

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

/// The bound on any one wait; the deadlines under test are 1-2 s.
const WAIT: Duration = Duration::from_secs(20);

fn loop_path() -> String {
    guest(MUR_LOOP_HOSTILE).display().to_string()
}

/// A capsule run by the hostile loop (`--loop` names it); `MUR_HOSTILE` reaches it
/// through the grant.
fn hostile(name: &str, deadline: u64, script: &str) -> Capsule {
    let manifest = hostile_loop_manifest("deadlines", "", "./script.yaml", deadline);
    Capsule::new(name, &manifest, script)
}

fn spawn_hostile(capsule: &Capsule, mode: &str, args: &[&str]) -> Running {
    let path = loop_path();
    let mut all = vec!["--loop", path.as_str()];
    all.extend_from_slice(args);
    capsule.spawn_env(&all, &[("MUR_HOSTILE", mode)])
}

/// A `message/stream` request whose response body is read as it comes.
struct Stream {
    socket: TcpStream,
    bytes: Vec<u8>,
}

impl Stream {
    fn open(address: &str, body: &str) -> Self {
        let socket = post(address, &[("content-type", "application/json")], body);
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Stream {
            socket,
            bytes: Vec::new(),
        }
    }

    /// Reads until the server closes the connection (it does after a final status).
    fn rest(&mut self, limit: Duration) -> String {
        let until = Instant::now() + limit;
        let mut buf = [0u8; 8192];
        loop {
            match self.socket.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.bytes.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("stream read failed: {e}"),
            }
            let text = String::from_utf8_lossy(&self.bytes);
            assert!(Instant::now() < until, "the stream never closed:\n{text}");
        }
        let text = String::from_utf8(self.bytes.clone()).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
        body.to_string()
    }
}

/// The last frame of a body, as its exact bytes (without the blank line).
fn last_block(body: &str) -> &str {
    body.split("\n\n")
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
        .last()
        .unwrap_or_else(|| panic!("no frames in {body:?}"))
}

fn status_block(id: u64, task: &str, context: &str, state: &str, message: &str) -> String {
    let data = json!({"id": task, "context_id": context, "status": {"state": state, "message": message}, "final": true});
    format!("id: {id}\nevent: status\ndata: {data}")
}

/// Waits until the trace has a line of `kind` (the loop took its task, ...).
fn wait_for_event(session: &Session, kind: &str) -> Value {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(first) = session
            .trace_so_far()
            .into_iter()
            .find(|e| e["event_type"] == kind)
        {
            return first;
        }
        assert!(Instant::now() < until, "no {kind} line came");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rpc(address: &str, body: &Value) -> Value {
    let reply = read_to_close(post(
        address,
        &[("content-type", "application/json")],
        &body.to_string(),
    ));
    let (_, body) = reply.split_once("\r\n\r\n").expect("an HTTP head");
    serde_json::from_str(body).unwrap()
}

fn last_frame_id(body: &str) -> u64 {
    frames(body).last().and_then(|(id, _, _)| *id).unwrap()
}

// ---------------------------------------------------------------------------------
// Tools and drivers.

#[test]
fn a_sleeping_tool_is_stopped_at_its_deadline_and_the_task_goes_on() {
    let manifest = format!(
        r#"name: deadlines
version: "0.1.0"
artifacts:
  - name: probe
    runtime: tool
    source: {probe}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
capabilities:
  limits:
    deadline_seconds: 2
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        probe = guest(MUR_TOOL_PROBE).display(),
    );
    let script = r#"turns:
  - tool_calls: [{id: c0, name: probe, input: {probe: sleep, seconds: 3600}}]
  - tool_calls: [{id: c1, name: probe, input: {probe: sleep, seconds: 0}}]
  - text: done
"#;
    let capsule = Capsule::new("tool-sleep", &manifest, script);
    let started = Instant::now();
    let run = capsule.run(&["--task", "sleep"]);
    let took = started.elapsed();
    run.assert_ok();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let s = run.session();
    let calls = s.events("tool_call");
    assert_eq!(calls[0]["status"], "error");
    assert_eq!(
        calls[0]["output"],
        "tool 'probe' failed: deadline exceeded: the component ran for more than 2 s without returning"
    );
    let ms = calls[0]["duration_ms"].as_u64().unwrap();
    assert!((2000..10_000).contains(&ms), "{ms}");
    // The next call gets a fresh instance, and the task completes.
    assert_eq!(calls[1]["status"], "ok");
    assert_eq!(s.read("out/result.txt"), "done");
}

#[test]
pub(crate) fn a_sleeping_driver_is_stopped_at_its_deadline() {
    for mode in ["sleep", "sleep-configure"] {
        let started = Instant::now();
        let run = probe_driver(&format!("driver-{mode}"), mode).run(&["--task", "x"]);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(15), "{mode}: took {took:?}");
        let message = "driver invocation failed: deadline exceeded: the component ran for more than 1 s without returning";
        run.assert_error(&format!(
            "error[E-RUN-040]: the task did not complete: failed (error: {message})"
        ));
        let s = run.session();
        assert_eq!(s.read("out/result.txt"), format!("error: {message}"));
        assert_eq!(s.events("inference")[0]["error_code"], "driver_failed");
        assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
    }
}

// ---------------------------------------------------------------------------------
// The session loop's deadline.

/// Submits an HTTP task and waits until the loop has taken it: (stream, task, context).
fn submit_taken(running: &Running) -> (Stream, String, String) {
    let stream = Stream::open(&running.address, &message_stream_body("do the task"));
    let start = wait_for_event(&running.session(), "task_start");
    let task = start["task_id"].as_str().unwrap().to_string();
    let context = start["context_id"].as_str().unwrap().to_string();
    (stream, task, context)
}

#[test]
pub(crate) fn a_loop_sleeping_in_run_is_stopped_at_its_task_deadline() {
    let capsule = hostile("loop-deadline", 2, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-in-run", QUEUE);
    let session = running.session();
    let started = Instant::now();
    let (mut stream, task, context) = submit_taken(&running);
    let body = stream.rest(WAIT);
    let message = "deadline exceeded: the session loop ran for more than 2 s on this task, not counting its tool and driver calls (capabilities.limits.deadline_seconds)";
    assert_eq!(
        last_block(&body),
        status_block(last_frame_id(&body), &task, &context, "failed", message)
    );
    let run = running.wait(WAIT);
    assert!(started.elapsed() < Duration::from_secs(15));
    run.assert_error(&format!(
        "error[E-RUN-060]: session loop {} stopped at its deadline on task {task}: {message}\n  hint: ",
        loop_path()
    ));
    let failed = &session.events("task_failed")[0];
    assert_eq!(
        (&failed["cause"], &failed["reason"]),
        (&json!("runtime_error"), &json!(message))
    );
    let end = &session.events("task_end")[0];
    assert_eq!(end["exit_status"], "failed");
    let ms = end["duration_ms"].as_u64().unwrap();
    assert!((2000..10_000).contains(&ms), "{ms}");
    assert_eq!(
        session.events("session_end")[0]["exit_status"],
        "deadline_reached"
    );
    assert_eq!(session.read("out/result.txt"), format!("error: {message}"));
}

#[test]
fn host_calls_do_not_reset_the_loops_deadline() {
    let capsule = hostile("loop-flood", 2, "turns:\n  - text: first\n");
    let started = Instant::now();
    let path = loop_path();
    let run = finish(
        mur()
            .env("MUR_HOSTILE", "host-call-loop")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--loop", &path, "--task", "flood"]),
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let s = run.session();
    let task = &s.events("task_start")[0]["task_id"];
    run.assert_error("error[E-RUN-060]: ");
    assert_eq!(
        run.stderr,
        format!(
            "error[E-RUN-060]: session loop {path} stopped at its deadline on task {}: deadline exceeded: the session loop ran for more than 2 s on this task, not counting its tool and driver calls (capabilities.limits.deadline_seconds)\n  hint: raise the session loop's capabilities.limits.deadline_seconds, or fix a loop that sleeps, spins or waits without finishing its task\n",
            task.as_str().unwrap()
        )
    );
    // It did call the host: a real turn first, then calls that return at once.
    assert!(!s.events("inference").is_empty());
    assert_eq!(
        s.read("out/result.txt"),
        "error: deadline exceeded: the session loop ran for more than 2 s on this task, not counting its tool and driver calls (capabilities.limits.deadline_seconds)"
    );
    assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
    assert_eq!(
        s.events("session_end")[0]["exit_status"],
        "deadline_reached"
    );
}

// ---------------------------------------------------------------------------------
// Stop, SIGTERM and cancel of a loop that sleeps outside every host call.

/// What `mur run` says on stderr when its task was canceled.
fn canceled_stderr(session: &Session) -> String {
    format!(
        "error[E-RUN-040]: the task did not complete: canceled (error: task canceled)\n  hint: see {}\n",
        session.records.join("trace.jsonl").display()
    )
}

/// What `mur stop` prints when it ended the capsule and nothing was left running.
fn assert_stopped(stop: &Run, session: &Session) {
    assert_eq!(stop.status, 0, "{}", stop.stderr);
    assert_eq!(
        stop.stdout,
        format!(
            "stopped: {}\nresidue: nothing else was left running\n",
            session.id
        )
    );
    assert_eq!(stop.stderr, "");
}

/// Asserts the sleeping task ended `canceled` on its stream, in the trace and the
/// session ended; returns the process's run.
fn assert_canceled(running: Running, mut stream: Stream, task: &str, context: &str) -> Run {
    let session = running.session();
    let body = stream.rest(WAIT);
    assert_eq!(
        last_block(&body),
        status_block(
            last_frame_id(&body),
            task,
            context,
            "canceled",
            "task canceled"
        )
    );
    let run = running.wait(WAIT);
    assert_eq!(session.events("task_end")[0]["exit_status"], "canceled");
    assert_eq!(session.events("session_end").len(), 1);
    assert_eq!(session.read("out/result.txt"), "error: task canceled");
    run
}

#[test]
fn mur_stop_ends_a_loop_sleeping_in_run() {
    let capsule = hostile("loop-stop", 600, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-in-run", QUEUE);
    let (stream, task, context) = submit_taken(&running);
    let session = running.session();
    let asked = Instant::now();
    let stop = finish(mur().args(["stop", &running.address]));
    assert_stopped(&stop, &session);
    assert!(asked.elapsed() < Duration::from_secs(10));
    let run = assert_canceled(running, stream, &task, &context);
    // A stop is no failure of the loop (no E-RUN-06x): the task's own status is the
    // session's.
    assert_eq!(run.stderr, canceled_stderr(&session));
}

#[test]
fn sigterm_ends_a_loop_sleeping_in_run() {
    let capsule = hostile("loop-sigterm", 600, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-in-run", QUEUE);
    let (stream, task, context) = submit_taken(&running);
    let session = running.session();
    let asked = Instant::now();
    // SAFETY: kill takes plain integers; the pid is the `mur` this test started.
    unsafe {
        libc::kill(running.child.id() as i32, libc::SIGTERM);
    }
    let run = assert_canceled(running, stream, &task, &context);
    assert!(asked.elapsed() < Duration::from_secs(10));
    assert_eq!(
        run.stderr,
        format!(
            "[murmur] stopping: the running task is canceled; a second signal exits at once\n{}",
            canceled_stderr(&session)
        )
    );
    assert_ne!(run.status, 143, "the first signal is a clean stop");
}

#[test]
fn tasks_cancel_ends_a_loop_sleeping_in_run() {
    let capsule = hostile("loop-cancel", 600, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-in-run", QUEUE);
    let (stream, task, context) = submit_taken(&running);
    let asked = Instant::now();
    let reply = rpc(
        &running.address,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": task}}),
    );
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 9, "result": {"id": task, "status": {"state": "canceled"}}})
    );
    let run = assert_canceled(running, stream, &task, &context);
    assert!(asked.elapsed() < Duration::from_secs(10));
    // The loop cannot be entered again: the session ends, saying why.
    run.assert_error(&format!(
        "error[E-RUN-061]: session loop {} did not return to the host within 1.5 s of task canceled; it was stopped and the session ends\n",
        loop_path()
    ));
}

// ---------------------------------------------------------------------------------
// Tasks the loop never took.

#[test]
fn a_loop_that_traps_before_next_task_leaves_a_record_of_the_launch_task() {
    let capsule = hostile("loop-trap", 600, "turns: []\n");
    let path = loop_path();
    let run = finish(
        mur()
            .env("MUR_HOSTILE", "trap-early")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--loop", &path, "--task", "never taken"]),
    );
    let prefix = format!("session loop {path} trapped: ");
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.contains(&format!("error[E-RUN-001]: {prefix}")),
        "{}",
        run.stderr
    );
    let s = run.session();
    let start = &s.events("task_start")[0];
    assert_eq!(
        (&start["source"], &start["origin"]),
        (&json!("task_md"), &json!("user"))
    );
    let task = start["task_id"].clone();
    let failed = &s.events("task_failed")[0];
    assert_eq!(
        (&failed["task_id"], &failed["cause"]),
        (&task, &json!("runtime_error"))
    );
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.starts_with(&prefix), "{reason}");
    let end = &s.events("task_end")[0];
    assert_eq!(
        (&end["task_id"], &end["exit_status"]),
        (&task, &json!("failed"))
    );
    assert_eq!(end["parent_id"], start["event_id"]);
    assert_eq!(failed["parent_id"], start["event_id"]);
    assert_eq!(s.read("out/result.txt"), format!("error: {reason}"));
    assert_eq!(s.events("session_end")[0]["exit_status"], "failed");
}

#[test]
fn a_loop_that_traps_before_next_task_fails_a_queued_http_task() {
    let capsule = hostile("loop-trap-http", 600, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-then-trap", QUEUE);
    let session = running.session();
    let mut stream = Stream::open(&running.address, &message_stream_body("queued"));
    let received = wait_for_event(&session, "a2a_task_received");
    let (task, context) = (
        received["task_id"].as_str().unwrap(),
        received["context_id"].as_str().unwrap(),
    );
    let body = stream.rest(WAIT);
    let run = running.wait(WAIT);
    let reason = format!(
        "session loop {} trapped: wasm trap: wasm `unreachable` instruction executed",
        loop_path()
    );
    assert_eq!(
        last_block(&body),
        status_block(0, task, context, "failed", &reason)
    );
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.contains(&format!("error[E-RUN-001]: {reason}")),
        "{}",
        run.stderr
    );
    let end = &session.events("task_end")[0];
    assert_eq!(
        (end["task_id"].as_str(), &end["exit_status"]),
        (Some(task), &json!("failed"))
    );
    assert_eq!(session.events("task_failed")[0]["reason"], json!(reason));
}

#[test]
fn a_loop_that_returns_before_next_task_fails_the_launch_task() {
    let capsule = hostile("loop-return", 600, "turns: []\n");
    let path = loop_path();
    let run = finish(
        mur()
            .env("MUR_HOSTILE", "return-early")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--loop", &path, "--task", "never taken"]),
    );
    let why = "the session loop ended before taking this task";
    run.assert_error(&format!(
        "error[E-RUN-040]: the task did not complete: failed (error: {why})"
    ));
    let s = run.session();
    assert_eq!(s.events("task_failed")[0]["reason"], why);
    assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
    assert_eq!(s.read("out/result.txt"), format!("error: {why}"));
}

#[test]
fn mur_stop_ends_a_loop_sleeping_before_its_first_task() {
    let capsule = hostile("loop-stop-idle", 600, "turns: []\n");
    let running = spawn_hostile(&capsule, "sleep-before-next", QUEUE);
    let session = running.session();
    wait_for_event(&session, "session_start");
    let asked = Instant::now();
    let stop = finish(mur().args(["stop", &running.address]));
    assert_stopped(&stop, &session);
    let run = running.wait(WAIT);
    assert!(asked.elapsed() < Duration::from_secs(10));
    // No task ran: a clean stop, whatever the loop was doing.
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(session.events("session_end")[0]["exit_status"], "ok");
    assert!(session.events("task_start").is_empty());
}

/// `mur stop` interrupts a tool and a driver sleeping far inside their deadlines: the
/// call is dropped, the task ends `canceled` and the session ends.
#[test]
fn mur_stop_ends_a_sleeping_tool_and_a_sleeping_driver() {
    let tool = format!(
        "artifacts:\n  - name: probe\n    runtime: tool\n    source: {}\n\
         inference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n",
        guest(MUR_TOOL_PROBE).display()
    );
    let driver = format!(
        "artifacts:\n  - name: probe-driver\n    runtime: driver\n    source: {}\n\
         inference:\n  driver:\n    artifact: probe-driver\n    config: {{mode: sleep}}\n  \
         endpoint: https://models.invalid/v1\n  model: m\n",
        guest(MUR_DRIVER_PROBE).display()
    );
    let script = "turns:\n  - tool_calls: [{id: c0, name: probe, input: {probe: sleep, seconds: 3600}}]\n  - text: done\n";
    for (name, parts) in [("stop-tool", tool), ("stop-driver", driver)] {
        let manifest = format!(
            "name: {name}\nversion: \"0.1.0\"\n{parts}capabilities:\n  network:\n    \
             allow: [https://models.invalid]\n  limits:\n    deadline_seconds: 600\n"
        );
        let capsule = Capsule::new(name, &manifest, script);
        let running = capsule.spawn(QUEUE);
        let (stream, task, context) = submit_taken(&running);
        let session = running.session();
        // Past the turn's status, into the sleeping call.
        std::thread::sleep(Duration::from_millis(500));
        let asked = Instant::now();
        let stop = finish(mur().args(["stop", &running.address]));
        assert_stopped(&stop, &session);
        assert!(asked.elapsed() < Duration::from_secs(10), "{name}");
        let run = assert_canceled(running, stream, &task, &context);
        assert_eq!(run.stderr, canceled_stderr(&session), "{name}");
    }
}
