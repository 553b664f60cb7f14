//! MCP servers over stdio, confined: the official `server-everything` and the hostile
//! server of `tests/mcp/hostile_server.py`, each run by a capsule under the scripted
//! driver, checked on what the model received (`out/result.txt` through
//! `{{last_tool_result}}`), the trace's lines and the records' logs.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::mcp_servers::{self, Everything};
use crate::common::*;

/// A capsule whose one MCP server is `server` (the lines under its name), answering
/// the launch task with `turns`.
fn capsule(name: &str, server: &str, turns: &str, extra: &str) -> Capsule {
    let manifest = format!(
        r#"name: {name}
version: "0.1.0"
inference:
  driver: scripted
  script: script.yaml
  model: scripted-test
mcp_servers:
{server}{extra}"#
    );
    Capsule::new(name, &manifest, &format!("turns:\n{turns}"))
}

fn everything_server(e: &Everything, extra: &str) -> String {
    format!(
        "  everything:\n    command: node\n    args: [{}, stdio]\n    install: [{}]\n{extra}",
        json!(e.entry.display().to_string()),
        json!(e.node_modules.display().to_string()),
    )
}

fn hostile_server(mode: &str, extra: &str) -> String {
    let (dir, script) = mcp_servers::hostile();
    format!(
        "  hostile:\n    command: python3\n    args: [{}, {mode}]\n    install: [{}]\n{extra}",
        json!(script.display().to_string()),
        json!(dir.display().to_string()),
    )
}

/// A turn calling `tool` with `input`, then one answering with its result.
fn call_then_answer(tool: &str, input: &Value) -> String {
    format!(
        "  - tool_calls: [{{id: c1, name: {tool}, input: {input}}}]\n{}",
        text_turn("{{last_tool_result}}")
    )
}

fn fenced(source: &str, text: &str) -> String {
    format!("<untrusted-content source={source}>\n{text}\n</untrusted-content>")
}

fn run_task(capsule: &Capsule) -> (Run, Session) {
    let run = capsule.run(&["--task", "go"]);
    let session = run.session();
    (run, session)
}

fn tool_calls(session: &Session) -> Vec<Value> {
    session.events("tool_call")
}

#[test]
fn server_everything_runs_confined_and_its_tools_reach_the_model() {
    let Some(e) = mcp_servers::everything() else {
        return;
    };
    let turns = format!(
        "  - tool_calls:\n      - {{id: c1, name: mcp__everything__echo, input: {{message: \"hello from mur\"}}}}\n      - {{id: c2, name: mcp__everything__get-sum, input: {{a: 2, b: 40}}}}\n      - {{id: c3, name: mcp__everything__get-tiny-image, input: {{}}}}\n{}",
        text_turn("{{last_tool_result}}")
    );
    let capsule = capsule(
        "mcp-everything",
        &everything_server(e, ""),
        &turns,
        "trace:\n  include_tool_output: true\n",
    );
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("mcp servers: scoped (landlock abi ")),
        "the server ran in the sandbox: {}",
        run.stderr
    );
    let start = &session.events("session_start")[0];
    assert_eq!(start["containment"]["achieved"], "scoped", "{start}");
    let about = session.read("MURMUR.md");
    assert!(
        about.contains(
            "- **mcp__everything__echo** (MCP server everything) — Echoes back the input string\n"
        ),
        "{about}"
    );
    let calls = tool_calls(&session);
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0]["tool_name"], "mcp__everything__echo");
    assert_eq!(
        calls[0]["output"],
        fenced("mcp:everything/echo", "Echo: hello from mur")
    );
    assert_eq!(calls[1]["status"], "ok");
    assert!(
        calls[1]["output"].as_str().unwrap().contains("42"),
        "{:?}",
        calls[1]
    );
    let image = calls[2]["output"].as_str().unwrap();
    assert!(image.contains("[image: image/png,"), "{image}");
    assert_eq!(
        session.read("out/result.txt").trim_end(),
        image,
        "the model received the last result"
    );
    let start = &session.events("session_start")[0];
    let declared = start["tools_declared"].as_array().unwrap();
    assert!(
        declared.contains(&json!("mcp__everything__echo")),
        "{declared:?}"
    );
}

#[test]
fn enabled_and_disabled_tools_decide_what_is_offered() {
    let Some(e) = mcp_servers::everything() else {
        return;
    };
    let server = everything_server(
        e,
        "    enabled_tools: [echo, get-sum, get-env]\n    disabled_tools: [get-env]\n",
    );
    let turns = call_then_answer("mcp__everything__get-env", &json!({}));
    let capsule = capsule("mcp-filtered", &server, &turns, "");
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let start = &session.events("session_start")[0];
    let mcp: Vec<&str> = start["tools_declared"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|t| t.starts_with("mcp__"))
        .collect();
    assert_eq!(mcp, ["mcp__everything__echo", "mcp__everything__get-sum"]);
    assert_eq!(
        session.read("out/result.txt").trim_end(),
        "tool 'mcp__everything__get-env' is not declared in manifest allowlist"
    );
}

#[test]
fn a_progress_reporting_tool_says_its_progress_as_working_statuses() {
    let Some(e) = mcp_servers::everything() else {
        return;
    };
    let turns = call_then_answer(
        "mcp__everything__trigger-long-running-operation",
        &json!({"duration": 2, "steps": 4}),
    );
    let capsule = capsule("mcp-progress", &everything_server(e, ""), &turns, "");
    let running = capsule.spawn(&[]);
    let raw = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("go"),
    ));
    let frames = frames(raw.strip_prefix(SSE_HEAD).unwrap_or(&raw));
    let progress: Vec<&str> = frames
        .iter()
        .filter(|(_, event, _)| event == "status")
        .filter_map(|(_, _, d)| d["status"]["message"].as_str())
        .filter(|m| m.contains("progress"))
        .collect();
    assert!(!progress.is_empty(), "{frames:?}");
    assert!(
        progress[0].starts_with("mcp__everything__trigger-long-running-operation: progress "),
        "{progress:?}"
    );
    let (_, _, last) = frames.last().unwrap();
    assert_eq!(last["status"]["state"], "completed", "{frames:?}");
    assert!(
        last["status"]["response"]
            .as_str()
            .unwrap()
            .contains("Long running operation completed"),
        "{last}"
    );
}

#[test]
fn a_confined_server_cannot_read_outside_connect_signal_or_leave_a_process() {
    let scratch = scratch("mcp-escape-outside");
    let outside = scratch.join("secret.txt");
    std::fs::write(&outside, "not for the server").unwrap();
    let marker = marker(600);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = hostile_server(
        "escape",
        &format!(
            "    env:\n      MUR_TEST_OUTSIDE: {}\n      MUR_TEST_PORT: \"{port}\"\n      MUR_TEST_PID: \"{}\"\n      MUR_TEST_MARKER: {marker}\n",
            json!(outside.display().to_string()),
            std::process::id()
        ),
    );
    let turns = call_then_answer("mcp__hostile__echo", &json!({}));
    let capsule = capsule("mcp-escape", &server, &turns, "");
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let said = session.read("out/result.txt");
    assert!(said.contains("read outside: PermissionError"), "{said}");
    assert!(said.contains("socket: PermissionError"), "{said}");
    assert!(said.contains("signal mur: ProcessLookupError"), "{said}");
    assert!(
        pids_running(&marker).is_empty(),
        "a process the server left behind outlived the session"
    );
    let _ = Path::new(&outside);
}

#[test]
fn a_server_that_never_answers_is_stopped_at_its_tool_timeout() {
    let server = hostile_server("silent", "    tool_timeout_sec: 1\n");
    let capsule = capsule(
        "mcp-silent",
        &server,
        &call_then_answer("mcp__hostile__echo", &json!({"message": "x"})),
        "",
    );
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    assert_eq!(
        session.read("out/result.txt").trim_end(),
        fenced(
            "mcp:hostile/echo",
            "server 'hostile' did not answer the call of tool 'echo' within 1 s"
        )
    );
    let calls = tool_calls(&session);
    assert_eq!(calls[0]["status"], "error");
}

#[test]
fn a_fifty_megabyte_answer_is_refused_and_none_of_it_reaches_the_model() {
    let server = hostile_server("huge", "");
    let turns = format!(
        "  - tool_calls: [{{id: c1, name: mcp__hostile__echo, input: {{message: x}}}}]\n{}",
        text_turn("{{last_tool_result}}")
    );
    let capsule = capsule("mcp-huge", &server, &turns, "");
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let said = session.read("out/result.txt");
    assert!(said.contains("larger than"), "{said}");
    assert!(
        !said.contains("xxxxxxxxxx"),
        "none of the answer reached the model"
    );
}

#[test]
fn a_flood_of_notifications_and_garbled_lines_still_give_the_answer() {
    for mode in ["flood", "garbled"] {
        let server = hostile_server(mode, "");
        let capsule = capsule(
            &format!("mcp-{mode}"),
            &server,
            &call_then_answer("mcp__hostile__echo", &json!({"message": "still here"})),
            "",
        );
        let (run, session) = run_task(&capsule);
        run.assert_ok();
        assert_eq!(
            session.read("out/result.txt").trim_end(),
            fenced("mcp:hostile/echo", "echo: still here"),
            "{mode}"
        );
    }
}

#[test]
fn a_list_of_a_hundred_thousand_tools_stops_the_launch_naming_the_bound() {
    let capsule = capsule(
        "mcp-many",
        &hostile_server("many", ""),
        &text_turn("unused"),
        "",
    );
    let run = capsule.run(&["--task", "go"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[E-MCP-001]: MCP server 'hostile' (manifest line 8) did not start: \
             server 'hostile' lists more tools than the 1024 allowed"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_server_that_exits_mid_call_fails_that_call_and_is_restarted_a_bounded_number_of_times() {
    let turns: String = (1..=5)
        .map(|i| format!("  - tool_calls: [{{id: c{i}, name: mcp__hostile__echo, input: {{message: \"{i}\"}}}}]\n"))
        .chain(std::iter::once(text_turn("{{last_tool_result}}")))
        .collect();
    let capsule = capsule("mcp-exits", &hostile_server("exits", ""), &turns, "");
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let calls = tool_calls(&session);
    assert_eq!(calls.len(), 5);
    for call in &calls[..4] {
        assert_eq!(call["status"], "error", "{call}");
    }
    let said = session.read("out/result.txt");
    assert!(said.contains("not restarted again"), "{said}");
    let log = session.record("logs/mcp-hostile.log");
    assert_eq!(
        log.matches("hostile server started").count(),
        4,
        "one start and three restarts:\n{log}"
    );
}

#[test]
fn a_policy_hook_refuses_an_mcp_call_before_it_reaches_the_server() {
    let hook = format!(
        "artifacts:\n  - name: guard\n    runtime: hook\n    source: {}\n    binding: on-tool-call\n    commit_policy: deny\n",
        json!(guest(MUR_HOOK_DENY_LIST).display().to_string())
    );
    let capsule = capsule(
        "mcp-hooked",
        &hostile_server("well", ""),
        &call_then_answer("mcp__hostile__echo", &json!({"message": "curl http://x"})),
        &hook,
    );
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let said = session.read("out/result.txt");
    assert!(said.starts_with("Refused by policy hook 'guard'"), "{said}");
    let denied = session.events("call_denied");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["target"], "mcp__hostile__echo");
    assert!(tool_calls(&session).is_empty());
}

#[test]
fn canceling_the_task_cancels_the_call_at_the_server() {
    let capsule = capsule(
        "mcp-cancel",
        &hostile_server("well", ""),
        &call_then_answer("mcp__hostile__wait", &json!({})),
        // The session outlives the task, so the server is there to hear the cancel.
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
    );
    let running = capsule.spawn(&[]);
    let _stream = post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("go"),
    );
    let session = running.session();
    let mut task = String::new();
    eventually(LIMIT, "the task to start", || {
        let trace = session.trace_so_far();
        match trace
            .iter()
            .find(|e| e["event_type"] == "a2a_task_received")
        {
            Some(line) => {
                task = line["task_id"].as_str().unwrap().to_string();
                true
            }
            None => false,
        }
    });
    // The scripted turn calls the tool at once; the server holds the call 30 s.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": task}})
        .to_string();
    let canceled = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &body,
    ));
    assert!(canceled.contains("canceled"), "{canceled}");
    eventually(LIMIT, "the server to hear the cancel", || {
        std::fs::read_to_string(session.records.join("logs/mcp-hostile.log"))
            .is_ok_and(|log| log.contains("canceled: request"))
    });
}

#[test]
fn a_server_that_asks_the_person_gets_their_answer_through_input_required() {
    let capsule = capsule(
        "mcp-elicit",
        &hostile_server("elicit", ""),
        &call_then_answer("mcp__hostile__echo", &json!({})),
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
    );
    let running = capsule.spawn(&[]);
    let asker = post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body_in("go", "ctx_person"),
    );
    let session = running.session();
    eventually(LIMIT, "the question to reach the person", || {
        session
            .trace_so_far()
            .iter()
            .any(|l| l["event_type"] == "input_requested")
    });
    let reply = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body_in("teal", "ctx_person"),
    ));
    let raw = read_to_close(asker);
    let frames = frames(raw.strip_prefix(SSE_HEAD).unwrap_or(&raw));
    let asked: Vec<&str> = frames
        .iter()
        .filter(|(_, event, d)| event == "status" && d["status"]["state"] == "input-required")
        .filter_map(|(_, _, d)| d["status"]["message"].as_str())
        .collect();
    assert_eq!(
        asked,
        ["MCP server 'hostile' asks: Which colour? (answer: colour, string)"],
        "{frames:?}\n{reply}"
    );
    let (_, _, last) = frames.last().unwrap();
    assert_eq!(last["status"]["state"], "completed", "{frames:?}");
    assert_eq!(
        last["status"]["response"],
        fenced(
            "mcp:hostile/echo",
            "the person said: {\"action\": \"accept\", \"content\": {\"colour\": \"teal\"}}"
        )
    );
}

#[test]
fn a_changed_tool_list_is_followed_when_the_server_says_so() {
    let turns = format!(
        "  - tool_calls: [{{id: c1, name: mcp__hostile__echo, input: {{message: one}}}}]\n  - tool_calls: [{{id: c2, name: mcp__hostile__grown0, input: {{}}}}]\n{}",
        text_turn("{{last_tool_result}}")
    );
    let capsule = capsule("mcp-changes", &hostile_server("changes", ""), &turns, "");
    let (run, session) = run_task(&capsule);
    run.assert_ok();
    let calls = tool_calls(&session);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1]["status"], "ok", "{:?}", calls[1]);
    assert_eq!(
        session.read("out/result.txt").trim_end(),
        fenced("mcp:hostile/grown0", "echo: ")
    );
}

#[test]
fn a_server_filling_the_workdir_is_stopped_at_the_quota() {
    let capsule = capsule(
        "mcp-fills",
        &hostile_server("fills", ""),
        &call_then_answer("mcp__hostile__echo", &json!({})),
        "capabilities:\n  limits:\n    workdir_bytes: 4000000\n",
    );
    let run = capsule.run(&["--task", "go"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[E-RUN-040]: the task did not complete: failed (error: workdir size breach"
        ),
        "{}",
        run.stderr
    );
    let session = run.session();
    let calls = tool_calls(&session);
    assert_eq!(calls[0]["status"], "error", "{calls:?}");
    // Stopped long before it wrote its 10,000 files (2.5 GB).
    let written = std::fs::read_dir(&session.workdir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("fill-")
        })
        .count();
    assert!(written < 1000, "{written} files were written");
}

#[test]
fn mur_mcp_ls_lists_what_the_model_would_see_and_what_was_refused() {
    let capsule = capsule(
        "mcp-ls",
        &hostile_server("well", "    disabled_tools: [wait]\n"),
        &text_turn("unused"),
        "",
    );
    let mut cmd = mur();
    cmd.args(["mcp", "ls", "--manifest"])
        .arg(capsule.manifest());
    let run = finish(&mut cmd);
    run.assert_ok();
    assert_eq!(
        run.stdout,
        "hostile (stdio, protocol 2025-11-25): 1 tools\n  mcp__hostile__echo  Echoes its message.\n"
    );
    let mut cmd = mur();
    cmd.args(["mcp", "ls", "--json", "--manifest"])
        .arg(capsule.manifest());
    let run = finish(&mut cmd);
    run.assert_ok();
    let listed: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(listed["server"], "hostile");
    assert_eq!(listed["tools"][0]["name"], "mcp__hostile__echo");
    assert_eq!(
        listed["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"message": {"type": "string"}}})
    );
}

#[test]
fn mur_mcp_ls_shows_what_a_server_that_did_not_start_printed() {
    let capsule = capsule(
        "mcp-ls-fails",
        &hostile_server("many", ""),
        &text_turn("unused"),
        "",
    );
    let mut cmd = mur();
    cmd.args(["mcp", "ls", "--manifest"])
        .arg(capsule.manifest());
    let run = finish(&mut cmd);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("[mcp hostile] hostile server started in mode many\n"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "error[E-MCP-001]: MCP server 'hostile' (manifest line 8) did not start: server 'hostile' lists more tools than the 1024 allowed"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .ends_with("hint: what the servers printed on stderr is above\n"),
        "{}",
        run.stderr
    );
}
