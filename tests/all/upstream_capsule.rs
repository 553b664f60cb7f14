//! Upstream Murmur's capsule components (`murmur:capsule/run@0.1.0`, murmur-cli 0.8.0,
//! vendored unchanged in `tests/fixtures/upstream/`) under the real `mur run`: a
//! manifest without `inference` runs the `capsule.wasm` beside it in place of a
//! model-driven loop. Its tool calls go through the host's tool path (its hooks, its
//! trace lines); its network, files, environment, deadline and memory are the
//! capsule's; a run that fails ends the task `failed` and the session with a clear
//! error. `mur component check` checks the world.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::drivers::{l, labels};
use crate::hooks::refusal;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/upstream").join(name)
}

/// A capsule directory: `component` (a vendored file) as its `capsule.wasm`, and a
/// manifest with no `inference` whose further lines are `extra`.
fn capsule(name: &str, component: &str, extra: &str) -> Capsule {
    let manifest = format!("name: {name}\nversion: \"0.1.0\"\nruntime: capsule\n{extra}");
    let capsule = Capsule::new(name, &manifest, "");
    std::fs::copy(fixture(component), capsule.dir.join("capsule.wasm")).unwrap();
    capsule
}

/// An `artifacts:` block declaring upstream's `tool` (a vendored file) as `name`.
fn tool(name: &str, file: &str) -> String {
    format!(
        "artifacts:\n  - name: {name}\n    runtime: tool\n    source: {}\n",
        fixture(file).display()
    )
}

fn fenced(tool: &str, body: &str) -> String {
    format!("<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>")
}

/// The graduation capsule with the tool it calls, `jsonl-line-count`.
fn graduation(name: &str, extra: &str) -> Capsule {
    let tools = tool("jsonl-line-count", "jsonl-line-count.wasm");
    capsule(
        name,
        "graduation-capsule.wasm",
        &format!("{tools}trace:\n  include_tool_output: true\n{extra}"),
    )
}

// ---------------------------------------------------------------------------------
// Tasks and tools.

/// Upstream's graduation capsule writes `input.jsonl`, calls `jsonl-line-count` on it
/// and writes the count to `out/result.txt`: that is the task's answer, printed as a
/// model's would be, and the call is one of the task's tool calls in the trace.
#[test]
fn the_graduation_capsule_runs_its_tool_and_answers_with_what_it_wrote() {
    let capsule = graduation("cap-graduation", "");
    let run = finish(
        mur()
            .args(["run", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "count the lines", "--verbose"]),
    );
    run.assert_ok();
    assert!(run.stdout.ends_with("\n5\nstatus:  ok\n"), "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "\ndriver: none (an upstream capsule component, no model)\n\
             loop:    capsule.wasm (upstream capsule component, no model)\n"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stderr, "",
        "nothing to warn about: no model server to reach"
    );

    let run = capsule.run(&["--task", "count the lines"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "5");
    assert_eq!(s.read("input.jsonl").lines().count(), 5);
    let start = &s.events("session_start")[0];
    assert_eq!(
        (&start["loop"], &start["model"], &start["driver"]),
        (
            &json!("capsule.wasm"),
            &json!("none"),
            &json!("none (upstream capsule component)")
        )
    );
    // What ran: the capsule component and its tool, no driver.
    let ran: Vec<&str> = start["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["component"].as_str().unwrap())
        .collect();
    assert_eq!(
        ran,
        [
            "capsule component 'capsule.wasm'",
            "tool artifact 'jsonl-line-count'"
        ]
    );
    let kinds: Vec<String> = s
        .trace()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "task_start",
            "tool_call",
            "task_end",
            "session_end"
        ]
    );
    let call = &s.events("tool_call")[0];
    assert_eq!(
        (
            &call["tool_name"],
            &call["tool_call_id"],
            &call["input"],
            &call["status"]
        ),
        (
            &json!("jsonl-line-count"),
            &json!("invoke_1"),
            &json!("input.jsonl"),
            &json!("ok")
        )
    );
    assert_eq!(call["output"], fenced("jsonl-line-count", "5"));
    let end = &s.events("task_end")[0];
    assert_eq!(
        (&end["exit_status"], &end["tool_calls"]),
        (&json!("ok"), &json!(1))
    );
}

/// Upstream's echo tool answers with a `summary`, which the allowlisted capsule writes:
/// an upstream tool's own result reaches the component as the tool returned it.
#[test]
fn an_upstream_tool_s_own_result_reaches_the_capsule() {
    let capsule = capsule(
        "cap-allowlisted",
        "capsule-allowlisted.wasm",
        &tool("echo-tool", "echo-tool.wasm"),
    );
    let run = capsule.run(&["--task", "echo"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "ok");
    let call = &s.events("tool_call")[0];
    assert_eq!(
        (&call["input"], &call["status"]),
        (&json!("hello"), &json!("ok"))
    );
}

/// A tool the manifest does not declare is not run: the component gets upstream's own
/// words for it, and carries on.
#[test]
fn an_undeclared_tool_is_refused_and_the_capsule_goes_on() {
    let capsule = capsule(
        "cap-unlisted",
        "capsule-unlisted.wasm",
        &tool("echo-tool", "echo-tool.wasm"),
    );
    let run = capsule.run(&["--task", "call something else"]);
    run.assert_ok();
    let s = run.session();
    let told = "tool 'undeclared-tool' is not declared in manifest allowlist";
    assert_eq!(s.read("out/result.txt"), told);
    let call = &s.events("tool_call")[0];
    assert_eq!(
        (&call["tool_name"], &call["status"], &call["error"]),
        (&json!("undeclared-tool"), &json!("error"), &json!(told))
    );
}

/// An `on-tool-call` policy hook refuses a capsule's call as it refuses a model's: the
/// tool never runs, and the component is told the refusal.
#[test]
fn a_policy_hook_refuses_a_capsule_s_tool_call() {
    let hook = crate::hooks::Hook::new("guard", MUR_HOOK_DENY_LIST)
        .bind("on-tool-call")
        .policy("deny")
        .scope("guard")
        .yaml();
    let tools = tool("jsonl-line-count", "jsonl-line-count.wasm");
    let capsule = capsule(
        "cap-denied",
        "graduation-capsule.wasm",
        &format!("{tools}{hook}"),
    );
    capsule.file(
        "workdir/.murmur/hooks/guard/deny.txt",
        "tool:jsonl-line-count\n",
    );
    let run = capsule.run(&["--task", "count"]);
    run.assert_ok();
    let s = run.session();
    let reason = "tool:jsonl-line-count matched: the tool 'jsonl-line-count' may not be called";
    let denied = &s.events("call_denied")[0];
    assert_eq!(
        (&denied["hook_name"], &denied["event"], &denied["reason"]),
        (&json!("guard"), &json!("on-tool-call"), &json!(reason))
    );
    assert_eq!(s.read("out/result.txt"), refusal("guard", reason));
    assert!(s.events("tool_call").is_empty(), "the tool never ran");
}

// ---------------------------------------------------------------------------------
// What the component may reach.

/// Upstream's network probe asks for `https://blocked.example.com`: refused unless
/// `capabilities.network.allow` names that origin, and the refusal is traced.
#[test]
fn the_network_is_closed_unless_the_capsule_allows_the_origin() {
    let allow = |origin: &str| format!("capabilities:\n  network:\n    allow: [{origin}]\n");
    for (name, extra, said) in [
        ("cap-net-none", String::new(), "denied"),
        (
            "cap-net-other",
            allow("https://allowed.example.com"),
            "denied",
        ),
        (
            "cap-net-allowed",
            allow("https://blocked.example.com"),
            "allowed",
        ),
    ] {
        let capsule = capsule(name, "capsule-network-attempt.wasm", &extra);
        let run = capsule.run(&["--task", "reach out"]);
        run.assert_ok();
        let s = run.session();
        assert_eq!(s.read("out/result.txt"), said, "{name}");
        let denied: Vec<Value> = s
            .events("http_denied")
            .iter()
            .map(|e| e["origin"].clone())
            .collect();
        let want = if said == "denied" {
            vec![json!("https://blocked.example.com:443")]
        } else {
            vec![]
        };
        assert_eq!(denied, want, "{name}");
    }
}

/// Upstream's escape probe writes `../../outside.txt`: refused, and nothing lands
/// outside the workdir.
#[test]
fn the_filesystem_is_the_workdir() {
    let capsule = capsule("cap-escape", "capsule-filesystem-escape.wasm", "");
    let run = capsule.run(&["--task", "escape"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "blocked");
    for dir in s.workdir.ancestors().take(4) {
        assert!(!dir.join("outside.txt").exists(), "{}", dir.display());
    }
}

/// Only the variables `capabilities.env.allow` grants reach the component.
#[test]
fn the_environment_is_what_the_capsule_grants() {
    let capsule = capsule(
        "cap-env",
        "capsule-env-echo.wasm",
        "capabilities:\n  env:\n    allow: [MURMUR_TEST_ALLOWED_VAR]\n",
    );
    let run = finish(
        mur()
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "echo the environment"])
            .env("MURMUR_TEST_ALLOWED_VAR", "visible-value")
            .env("GITHUB_TOKEN", "leaked-token"),
    );
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        "GITHUB_TOKEN=absent\nMURMUR_TEST_ALLOWED_VAR=present:visible-value"
    );
}

/// The task reaches the component where upstream puts it, `murmur-runtime/task.md`.
#[test]
fn the_task_is_in_the_runtime_directory() {
    let capsule = capsule("cap-task", "capsule-sleep-input.wasm", "");
    let run = capsule.run(&["--task", "the task text, as written"]);
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        "the task text, as written"
    );
}

// ---------------------------------------------------------------------------------
// Runs that fail.

/// The failed task's trace lines and result file, whatever stopped its run.
fn assert_failed_task(s: &Session, reason: &str) {
    let failed = &s.events("task_failed")[0];
    assert_eq!(failed["reason"], reason);
    assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
    assert_eq!(s.read("out/result.txt"), format!("error: {reason}"));
}

/// A component spinning in pure computation is stopped at its deadline; the run says
/// so and how to give it more time.
#[test]
fn a_spinning_capsule_is_stopped_at_its_deadline() {
    let capsule = capsule(
        "cap-spin",
        "capsule-spin-loop.wasm",
        "capabilities:\n  limits:\n    deadline_seconds: 2\n",
    );
    let started = Instant::now();
    let run = capsule.run(&["--task", "spin"]);
    assert!(started.elapsed() < Duration::from_secs(30));
    let s = run.session();
    let task = s.events("task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    run.assert_error(&format!(
        "error[E-RUN-060]: capsule component 'capsule.wasm' stopped at its deadline on task \
         {task}: it ran for more than 2 s, not counting its tool calls \
         (capabilities.limits.deadline_seconds)\n  hint: raise \
         capabilities.limits.deadline_seconds in murmur.yaml if the capsule legitimately needs \
         longer, or fix a component that spins or waits\n"
    ));
    assert_failed_task(
        &s,
        "deadline exceeded: the capsule component ran for more than 2 s, not counting its \
         tool calls (capabilities.limits.deadline_seconds)",
    );
    assert_eq!(
        s.events("session_end")[0]["exit_status"],
        "deadline_reached"
    );
}

/// A component waiting in a host call (a sleep) is stopped at the deadline too.
#[test]
fn a_sleeping_capsule_is_stopped_at_its_deadline() {
    let capsule = capsule(
        "cap-sleep",
        "capsule-sleep-long.wasm",
        "capabilities:\n  limits:\n    deadline_seconds: 1\n",
    );
    let started = Instant::now();
    let run = capsule.run(&["--task", "sleep"]);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "its sleep is 8 s"
    );
    run.assert_error("error[E-RUN-060]: capsule component 'capsule.wasm' stopped at its deadline");
    let s = run.session();
    assert!(
        !s.workdir.join("out/done.txt").exists(),
        "the run was cut short"
    );
}

/// A component growing its memory without bound is stopped at the cap, and the error
/// names the cap rather than the trap the guest's allocator ends in.
#[test]
fn a_memory_balloon_is_stopped_at_the_capsule_s_memory_cap() {
    let capsule = capsule(
        "cap-balloon",
        "capsule-memory-balloon.wasm",
        "capabilities:\n  limits:\n    memory_bytes: 16777216\n",
    );
    let run = capsule.run(&["--task", "balloon"]);
    let s = run.session();
    let task = s.events("task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(run.status, 1, "{}", run.stderr);
    let why = "it asked for 17891328 bytes of linear memory, over \
               capabilities.limits.memory_bytes (16777216)";
    assert!(
        run.stderr.contains(&format!(
            "error[E-RUN-001]: capsule component 'capsule.wasm' exceeded its memory cap on task \
             {task}: {why}\n  hint: raise capabilities.limits.memory_bytes in murmur.yaml if \
             the capsule legitimately needs more\n"
        )),
        "{}",
        run.stderr
    );
    assert_failed_task(
        &s,
        &format!("the capsule component ran out of memory: {why}"),
    );
    assert!(
        s.record("logs/capsule.log")
            .starts_with("memory allocation of 8388608 bytes failed"),
        "the guest's own words are in its log"
    );
}

/// A component that panics (the allowlisted probe, when its tool is refused) traps:
/// the task fails, and the error points at the component's own output.
#[test]
fn a_trapping_capsule_fails_its_task_with_a_pointer_to_its_log() {
    let capsule = capsule("cap-trap", "capsule-allowlisted.wasm", "");
    let run = capsule.run(&["--task", "echo"]);
    let s = run.session();
    let task = s.events("task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let trap = "wasm trap: wasm `unreachable` instruction executed";
    let log = s.records.join("logs/capsule.log");
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "error[E-RUN-001]: capsule component 'capsule.wasm' trapped on task {task}: {trap}\n  \
             hint: a capsule component must return from run; what it printed before it trapped \
             is in {}\n",
            log.display()
        )),
        "{}",
        run.stderr
    );
    assert_failed_task(&s, &format!("the capsule component trapped: {trap}"));
    assert!(
        s.record("logs/capsule.log")
            .contains("invoke should succeed"),
        "the panic's message is in the log"
    );
}

// ---------------------------------------------------------------------------------
// Over A2A.

/// A task sent over A2A is `working` while the component runs, its tool call is an
/// `artifact` frame, and the answer comes back with `completed`.
#[test]
fn a_task_over_a2a_is_working_then_completed_with_the_capsule_s_answer() {
    let capsule = graduation("cap-a2a", "");
    let running = capsule.spawn(&[]);
    let session = running.session();
    let raw = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("count the lines"),
    ));
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let frames = frames(body);
    running.wait(WAIT).assert_ok();
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "artifact"),
            l(2, "text:final"),
            l(2, "status:completed"),
        ]
    );
    assert_eq!(frames[0].2["status"]["message"], "capsule run 1");
    assert_eq!(
        frames[1].2["artifact"]["content"],
        fenced("jsonl-line-count", "5")
    );
    assert_eq!(frames[3].2["status"]["response"], "5");
    assert_eq!(session.read("out/result.txt"), "5");
}

/// `tasks/cancel` drops a running component at once (it cannot notice a cancel); the
/// task ends `canceled` and the capsule keeps serving.
#[test]
fn a_canceled_capsule_run_ends_at_once() {
    let capsule = capsule("cap-cancel", "capsule-sleep-long.wasm", "");
    let running = capsule.spawn(QUEUE);
    let session = running.session();
    let address = running.address.clone();
    let stream = std::thread::spawn(move || {
        read_to_close(post(
            &address,
            &[("content-type", "application/json")],
            &message_stream_body("sleep"),
        ))
    });
    let mut task = String::new();
    eventually(WAIT, "the task started", || {
        let started = session
            .trace_so_far()
            .into_iter()
            .find(|e| e["event_type"] == "task_start");
        if let Some(start) = started {
            task = start["task_id"].as_str().unwrap().to_string();
        }
        !task.is_empty()
    });
    let asked = Instant::now();
    let cancel =
        json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": task}});
    read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &cancel.to_string(),
    ));
    let raw = stream.join().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "the 8 s sleep was not waited out"
    );
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let last = frames(body).pop().unwrap();
    assert_eq!(last.2["status"]["state"], "canceled");
    eventually(WAIT, "the task ended", || {
        session
            .trace_so_far()
            .iter()
            .any(|e| e["event_type"] == "task_end" && e["exit_status"] == "canceled")
    });
    assert_eq!(session.read("out/result.txt"), "error: task canceled");
    assert!(!session.workdir.join("out/done.txt").exists());
    let stop = json!({"jsonrpc": "2.0", "id": 10, "method": "murmur/stop", "params": {}});
    read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &stop.to_string(),
    ));
    // As for any capsule whose last task did not complete.
    running.wait(WAIT).assert_error(
        "error[E-RUN-040]: the task did not complete: canceled (error: task canceled)\n",
    );
}

// ---------------------------------------------------------------------------------
// Finding the component.

/// With no `capsule.wasm` and several `*.wasm` beside a manifest without `inference`,
/// which one is the capsule's is not guessed.
#[test]
fn several_candidate_components_are_not_guessed_between() {
    let capsule = Capsule::new("cap-two", "name: cap-two\nversion: \"0.1.0\"\n", "");
    for file in ["a.wasm", "b.wasm"] {
        std::fs::copy(fixture("capsule-sleep-input.wasm"), capsule.dir.join(file)).unwrap();
    }
    capsule.run(&["--task", "which?"]).assert_error(
        "error[E-RUN-004]: murmur.yaml: there is no 'inference', and more than one component \
         beside it could be the capsule's: 'a.wasm', 'b.wasm'\n  hint: name the capsule's \
         component capsule.wasm, or set 'inference' to run a model-driven capsule\n",
    );
}

// ---------------------------------------------------------------------------------
// `mur component check`.

fn check(file: &str) -> Run {
    finish(mur().args(["component", "check"]).arg(fixture(file)))
}

/// The graduation capsule passes: it links, runs a task to its end (calling its tool,
/// which the check does not declare) and completes tasks over A2A.
#[test]
fn component_check_passes_the_graduation_capsule() {
    let run = check("graduation-capsule.wasm");
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "world: capsule (exports murmur:capsule/run@0.1.0; imports murmur:tool/run@0.1.0, \
         murmur:tool-registry/invoke@0.1.0)"
    );
    assert!(
        lines[1].starts_with("PASS links against the capsule world ("),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with(
            "PASS capsule: runs a task to its end: it called jsonl-line-count (none is \
             declared here, so each was refused); its answer (out/result.txt) is"
        ),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].starts_with("PASS capsule: takes tasks over A2A and completes each ("),
        "{}",
        lines[3]
    );
    assert_eq!(lines[4], "3 passed, 0 failed, 0 skipped");
}

/// A capsule that traps without the tool it expects fails the check, which names the
/// tool it called.
#[test]
fn component_check_fails_a_capsule_that_traps_and_names_the_tool_it_wanted() {
    let run = check("capsule-allowlisted.wasm");
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    let failed: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL "))
        .collect();
    assert_eq!(failed.len(), 2, "{}", run.stdout);
    assert!(
        failed[0].starts_with(
            "FAIL capsule: runs a task to its end: the capsule exited 1: error[E-RUN-001]: \
             capsule component 'capsule.wasm' trapped on task"
        ) && failed[0]
            .contains("(it called echo-tool (none is declared here, so each was refused))"),
        "{}",
        failed[0]
    );
}
