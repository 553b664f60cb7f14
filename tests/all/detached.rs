//! Detached shell commands end to end: a command that outlives
//! `lifecycle.shell_grace_secs` leaves the turn with a `wrk_` handle, reports back as a
//! `completion` task, is abandoned (and killed) when the session ends first, and is
//! reported lost by `mur run --resume` when its runtime was killed outright.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

const JSON_CT: (&str, &str) = ("content-type", "application/json");
/// The bound on waiting for anything here; the commands themselves take a few seconds.
const WAIT: Duration = Duration::from_secs(60);

fn manifest(lifecycle: &str) -> String {
    format!(
        "name: detached\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n\
         capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  shell_grace_secs: 1\n{lifecycle}"
    )
}

const EXIT: &str = "  task_acceptance: none\n  after_task: exit\n";
const QUEUE: &str = "  task_acceptance: queue\n  after_task: sleep\n";

/// A turn that runs `command` with bash, then one that answers with its result.
fn command_script(command: &str, more: &str) -> String {
    format!(
        "turns:\n  - tool_calls: [{{id: c1, name: bash, input: {{command: {command:?}}}}}]\n  - text: \"{{{{last_tool_result}}}}\"\n{more}"
    )
}

/// Polls until `ready` holds, failing the test after [`WAIT`].
fn wait_for<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The trace lines of one kind, once the process has exited: strict, so a missing or
/// corrupt trace fails the test instead of reading as "no such line".
fn events(session: &Session, kind: &str) -> Vec<Value> {
    session.events(kind)
}

/// The trace lines of one kind so far, while the capsule runs.
fn events_so_far(session: &Session, kind: &str) -> Vec<Value> {
    session
        .trace_so_far()
        .into_iter()
        .filter(|e| e["event_type"] == kind)
        .collect()
}

fn one(session: &Session, kind: &str) -> Value {
    let found = events(session, kind);
    assert_eq!(found.len(), 1, "{kind}: {found:?}");
    found.into_iter().next().unwrap()
}

fn stop(address: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}});
    let reply = read_to_close(post(address, &[JSON_CT], &body.to_string()));
    assert!(reply.contains("\"stopped\""), "{reply}");
}

/// The command's process group leader, as `shell_detached` records it: a host pid (the
/// command itself runs in a PID namespace, where its own `$$` means nothing out here),
/// which ends only after every process of the command has.
fn leader_pid(detached: &Value) -> String {
    detached["pid"]
        .as_u64()
        .expect("shell_detached pid")
        .to_string()
}

/// Gone, or a zombie nobody reaped yet (a container's pid 1 may never reap): it runs nothing.
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Kills a command's group that a test deliberately left running.
fn kill_group(pid: &str) {
    assert!(
        pid.parse::<u32>().is_ok_and(|p| p > 1),
        "not a group to kill: {pid}"
    );
    let _ = std::process::Command::new("kill")
        .args(["-9", "--", &format!("-{pid}")])
        .status();
}

fn assert_wrk_id(id: &str) {
    let hex = id.strip_prefix("wrk_").unwrap_or_else(|| panic!("{id}"));
    assert_eq!(hex.len(), 32, "{id}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
}

// What the model is told, exactly: the variable parts (work id, log path, duration)
// are taken from the trace first, the rest is the fixed text.

/// The tool result of a command that detached, as the next turn sees it.
fn detached_result(command: &str, work_id: &str, log: &Path) -> String {
    format!(
        "<untrusted-content source=tool:bash>\n$ {command}\nStill running after 1 seconds: moved to the background as {work_id}.\n\
         Its stdout and stderr, including what it printed so far, go to {} instead of this \
         conversation.\nWhen it ends, its exit code and the tail of its output arrive as a new \
         task in this conversation. Nothing accepts the work id, so there is nothing to poll.\n</untrusted-content>",
        log.display()
    )
}

/// The completion task's text for a command that ended with `exit_code` after printing
/// `output` (short enough to be its whole tail).
fn completion_text(completed: &Value, command: &str, exit_code: i64, output: &str) -> String {
    format!(
        "The background command {} has ended.\nCommand: {command}\nExit code: {exit_code}\n\
         Duration: {} ms\nOutput: {} bytes, in {}\nLast {} bytes of its output:\n{output}",
        completed["work_id"].as_str().unwrap(),
        completed["duration_ms"].as_u64().unwrap(),
        output.len(),
        completed["output_path"].as_str().unwrap(),
        output.len(),
    )
}

/// The report task's text for one command a killed runtime left behind.
fn lost_text(old_session: &str, detached: &Value) -> String {
    format!(
        "The runtime of session {old_session} died while these commands were running in the \
         background:\n- {}: binary {}, command `{}`, detached at unix ms {}\n\
         Their results are lost: there is no exit code, no output and no log for them, and \
         whether they finished is unknown. Nothing was recovered. Run a command again if you \
         still need what it would have produced.",
        detached["work_id"].as_str().unwrap(),
        detached["binary"].as_str().unwrap(),
        detached["command"].as_str().unwrap(),
        detached["timestamp"].as_u64().unwrap(),
    )
}

/// Under `queue` + `sleep` the command reports back: the turn gets the handle, the trace
/// `shell_detached`, and once the command ends a `completion` task in the `bg` lane runs
/// under the context that started it, with `shell_completed` and the log on disk.
#[test]
fn a_long_command_detaches_and_reports_back_as_a_completion_task() {
    // stdout and stderr reach the host through two pipes, so lines written at the
    // same instant may arrive in either order; a pause keeps the log's order certain.
    let command = "echo before; sleep 2; echo done; sleep 1; echo oops >&2";
    let script = command_script(command, "  - text: completion seen\n");
    let cap = Capsule::new("detached-queue", &manifest(QUEUE), &script);
    let running = cap.spawn(&["--task", "start it"]);
    let session = running.session();

    let ends = wait_for("the completion task's end", || {
        let ends = events_so_far(&session, "task_end");
        (ends.len() == 2).then_some(ends)
    });
    stop(&running.address);
    let run = running.wait(WAIT);
    run.assert_ok();

    let detached = one(&session, "shell_detached");
    let work_id = detached["work_id"].as_str().unwrap().to_string();
    assert_wrk_id(&work_id);
    assert_eq!(detached["command"], command);
    assert_eq!(detached["grace_ms"], 1000);
    assert!(detached["binary"].as_str().unwrap().ends_with("/bash"));
    assert!(detached["pid"].as_u64().is_some());
    let starts = events(&session, "task_start");
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(detached["task_id"], starts[0]["task_id"]);
    assert_eq!(detached["context_id"], starts[0]["context_id"]);

    let completion = &starts[1];
    assert_eq!(completion["origin"], "completion");
    assert_eq!(completion["lane"], "bg");
    assert_eq!(completion["source"], "detached_shell");
    assert_eq!(completion["context_id"], starts[0]["context_id"]);
    assert_eq!(ends[1]["exit_status"], "ok");

    let completed = one(&session, "shell_completed");
    assert_eq!(completed["work_id"], work_id.as_str());
    assert_eq!(completed["exit_code"], 0);
    assert_eq!(completed["status"], "ok");
    assert_eq!(completed["completion_task_id"], completion["task_id"]);
    assert_eq!(completed["output_bytes"], 17);
    assert!(completed["duration_ms"].as_u64().unwrap() >= 2000);

    let log_path = completed["output_path"].as_str().unwrap();
    assert_eq!(
        Path::new(log_path),
        session.workdir.join("logs").join(format!("{work_id}.log"))
    );
    let log = std::fs::read_to_string(log_path).unwrap();
    assert_eq!(
        log,
        format!("Command: {command}\n\nbefore\ndone\noops\n\n\nExit code: 0\n")
    );
    // The completion task's text is its task.md: the work id, the exit code, the tail.
    assert_eq!(
        session.read("task.md"),
        completion_text(&completed, command, 0, "before\ndone\noops\n")
    );
    assert_eq!(session.read("out/result.txt"), "completion seen");
}

/// A failing command reports back the same way, with its exit code.
#[test]
fn a_failing_detached_command_reports_its_exit_code() {
    let command = "sleep 2; echo broken >&2; exit 3";
    let script = command_script(command, "  - text: failure seen\n");
    let cap = Capsule::new("detached-fail", &manifest(QUEUE), &script);
    let running = cap.spawn(&["--task", "start it"]);
    let session = running.session();
    wait_for("the completion task's end", || {
        (events_so_far(&session, "task_end").len() == 2).then_some(())
    });
    stop(&running.address);
    running.wait(WAIT).assert_ok();
    let completed = one(&session, "shell_completed");
    assert_eq!(completed["exit_code"], 3);
    assert_eq!(completed["status"], "failed");
    assert_eq!(
        session.read("task.md"),
        completion_text(&completed, command, 3, "broken\n")
    );
    assert_eq!(session.read("out/result.txt"), "failure seen");
}

/// A command that finishes inside the grace period returns its output to the turn.
#[test]
fn a_quick_command_stays_in_the_foreground() {
    let script = command_script("echo quick", "");
    let cap = Capsule::new("detached-quick", &manifest(EXIT), &script);
    let run = cap.run(&["--task", "go"]);
    run.assert_ok();
    let session = run.session();
    assert_eq!(
        session.read("out/result.txt"),
        "<untrusted-content source=tool:bash>\n$ echo quick\nExit code: 0\nStdout:\nquick\n\nStderr:\n\n</untrusted-content>"
    );
    assert!(events(&session, "shell_detached").is_empty());
    assert_eq!(events(&session, "shell").len(), 1);
}

/// Under `after_task: exit` the session ends with the task that started the command:
/// the turn got the handle, the command is recorded `shell_abandoned` in the trace and
/// on stderr, and its process group is killed. A resume of that session reports nothing.
#[test]
fn a_command_still_running_at_exit_is_abandoned_and_killed() {
    let command = "sleep 30";
    let script = command_script(command, "");
    let cap = Capsule::new("detached-exit", &manifest(EXIT), &script);
    let run = cap.run(&["--task", "go"]);
    run.assert_ok();
    let session = run.session();

    let detached = one(&session, "shell_detached");
    let work_id = detached["work_id"].as_str().unwrap();
    assert_wrk_id(work_id);
    // `{{last_tool_result}}`: the turn was told the handle instead of the output.
    let log = session.workdir.join("logs").join(format!("{work_id}.log"));
    assert_eq!(
        session.read("out/result.txt"),
        detached_result(command, work_id, &log)
    );

    let abandoned = one(&session, "shell_abandoned");
    assert_eq!(abandoned["work_id"], work_id);
    assert_eq!(abandoned["command"], command);
    assert!(events(&session, "shell_completed").is_empty());
    let line = format!(
        "[murmur] shell_abandoned: {work_id} ({command}): its result is lost; killing its process group"
    );
    assert_eq!(run.stderr.matches(&line).count(), 1, "{}", run.stderr);
    // Abandoned before session_end, so a reader sees every command accounted for.
    let kinds: Vec<String> = session
        .trace()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect();
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(at("shell_abandoned") < at("session_end"), "{kinds:?}");

    let pid = leader_pid(&detached);
    let gone = wait_for("the abandoned command to die", || {
        process_gone(&pid).then_some(true)
    });
    assert!(gone);

    // The session ended cleanly: a resume has nothing to report.
    std::fs::write(cap.dir.join("script.yaml"), "turns:\n  - text: resumed\n").unwrap();
    let resumed = cap.run(&["--task", "again", "--resume", &session.id]);
    resumed.assert_ok();
    let again = resumed.session();
    assert_eq!(events(&again, "task_start").len(), 1);
    assert!(events(&session, "shell_lost").is_empty());
}

/// A runtime killed outright leaves its `shell_detached` unaccounted for: the next
/// `--resume` of that session reports it once, as one `completion` task after the launch
/// task, and marks it `shell_lost` in the old trace; a second resume reports nothing.
#[test]
fn resume_reports_commands_a_killed_runtime_left_behind_once() {
    let command = "sleep 30";
    let script = command_script(command, "");
    let cap = Capsule::new("detached-killed", &manifest(QUEUE), &script);
    let mut running = cap.spawn(&["--task", "go"]);
    let old = running.session();
    let detached = wait_for("shell_detached", || {
        events_so_far(&old, "shell_detached").into_iter().next()
    });
    let work_id = detached["work_id"].as_str().unwrap().to_string();
    let pid = leader_pid(&detached);
    running.child.kill().unwrap();
    running.child.wait().unwrap();

    // One resume under `none`: the report still runs, after the launch task.
    std::fs::write(
        cap.dir.join("script.yaml"),
        format!("{SPAN_SESSION}turns:\n  - text: launch done\n  - text: report seen\n"),
    )
    .unwrap();
    let resumed = cap.run(&[
        "--task",
        "carry on",
        "--resume",
        &old.id,
        "--lifecycle-task-acceptance",
        "none",
        "--lifecycle-after-task",
        "exit",
    ]);
    kill_group(&pid);
    resumed.assert_ok();
    let new = resumed.session();
    assert_eq!(
        events(&new, "session_start")[0]["resumed_from"],
        old.id.as_str()
    );
    let starts = events(&new, "task_start");
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[0]["origin"], "user");
    assert_eq!(starts[1]["origin"], "completion");
    assert_eq!(starts[1]["lane"], "bg");
    assert_eq!(starts[1]["source"], "detached_lost");
    assert_eq!(starts[1]["context_id"], detached["context_id"]);
    assert_eq!(new.read("task.md"), lost_text(&old.id, &detached));
    assert_eq!(new.read("out/result.txt"), "report seen");

    let lost = one(&old, "shell_lost");
    assert_eq!(lost["work_id"], work_id.as_str());
    assert_eq!(lost["session_id"], old.id.as_str());
    assert_eq!(lost["reconciled_by_session"], new.id.as_str());
    assert_eq!(lost["reconciled_task_id"], starts[1]["task_id"]);
    assert_eq!(lost["detached_at_ms"], detached["timestamp"]);

    // A second resume of the same session reports nothing.
    std::fs::write(
        cap.dir.join("script.yaml"),
        "turns:\n  - text: launch done\n",
    )
    .unwrap();
    let second = cap.run(&[
        "--task",
        "once more",
        "--resume",
        &old.id,
        "--lifecycle-task-acceptance",
        "none",
        "--lifecycle-after-task",
        "exit",
    ]);
    second.assert_ok();
    assert_eq!(events(&second.session(), "task_start").len(), 1);
    assert_eq!(events(&old, "shell_lost").len(), 1);
}

/// A session id that names no session is refused before anything starts.
#[test]
fn resume_of_an_unknown_session_is_an_error() {
    let cap = Capsule::new(
        "detached-unknown",
        &manifest(EXIT),
        "turns:\n  - text: hi\n",
    );
    let run = cap.run(&[
        "--task",
        "go",
        "--resume",
        "ses_0000000000000000000000000000dead",
    ]);
    run.assert_error(
        "error[E-RUN-018]: --resume ses_0000000000000000000000000000dead: no such session",
    );
    assert!(run.stderr.contains("\n  hint: "), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

/// Under `--workdir DIR` sessions are looked up where that DIR's records are kept;
/// `@1` is the newest, `@N` the N-th newest.
#[test]
fn resume_looks_for_sessions_where_this_run_keeps_them() {
    let cap = Capsule::new("detached-wd", &manifest(EXIT), "turns:\n  - text: hi\n");
    let dir = cap.dir.join("chosen");
    let dir = dir.to_str().unwrap();
    let first = cap.run(&["--task", "go", "--workdir", dir]);
    first.assert_ok();
    let second = cap.run(&["--task", "go", "--workdir", dir]);
    second.assert_ok();
    let resumed_from = |selector: &str| {
        let run = cap.run(&["--task", "go", "--workdir", dir, "--resume", selector]);
        run.assert_ok();
        events(&run.session(), "session_start")[0]["resumed_from"].clone()
    };
    // Taken before the resuming run's own session exists: @1 is the second run.
    assert_eq!(resumed_from("@1"), second.session().id.as_str());
    assert_eq!(resumed_from("@3"), first.session().id.as_str());
    // Without --workdir the sessions are looked for beside the manifest: there are none.
    cap.run(&["--task", "go", "--resume", "@1"])
        .assert_error("error[E-RUN-018]: --resume @1: there are no sessions");
}
