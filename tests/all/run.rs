//! `mur run` end to end: the real binary, real components built from source, the
//! scripted driver, and what a user sees (stdout, exit status, files, trace lines).

use crate::common::*;
use serde_json::{Value, json};

const ECHO_SCRIPT: &str = r#"
turns:
  - text: "Listing."
    tool_calls:
      - id: toolu_01
        name: bash
        input: {command: "echo hello"}
    usage: {input_tokens: 10, output_tokens: 5}
  - text: "{{last_tool_result}}"
    stop_reason: end_turn
"#;

fn manifest(extra: &str) -> String {
    format!(
        "name: e2e\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n{extra}"
    )
}

fn with_bash(extra: &str) -> String {
    manifest(&format!(
        "capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: none\n{extra}"
    ))
}

#[test]
pub(crate) fn hello_example_prints_its_answer_and_exits_zero() {
    let run = finish(
        mur()
            .current_dir(repo())
            .args([
                "run",
                "--manifest",
                "examples/hello/murmur.yaml",
                "--port",
                "0",
            ])
            .args(["--workdir"])
            .arg(scratch("hello"))
            .args(["--task", "What is in your workdir?"]),
    );
    run.assert_ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    let port: u16 = lines[0]
        .strip_prefix("murmur: url localhost:")
        .unwrap_or_else(|| panic!("{}", run.stdout))
        .parse()
        .unwrap();
    assert!(port > 0);
    let session = lines[1]
        .strip_prefix("session: ses_")
        .expect("session line");
    assert_eq!(session.len(), 32);
    assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));
    // Without -v the two launch lines are all: the answer follows.
    assert!(!run.stdout.contains("\nworkdir: "), "{}", run.stdout);
    assert!(
        run.stdout.contains("My workdir holds the files below"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("$ ls -1 && head -n 1 task.md\nExit code: 0\nStdout:\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("What is in your workdir?"),
        "the task's first line is listed: {}",
        run.stdout
    );
    assert_eq!(lines.last(), Some(&"status:  ok"));
}

#[test]
fn verbose_adds_the_workdir_manifest_driver_and_loop_lines() {
    let workdir = scratch("hello-verbose");
    let run = finish(
        mur()
            .current_dir(repo())
            .args(["run", "-v", "--manifest", "examples/hello/murmur.yaml"])
            .args(["--port", "0", "--workdir"])
            .arg(&workdir)
            .args(["--task", "What is in your workdir?"]),
    );
    run.assert_ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("murmur: url localhost:"),
        "{}",
        run.stdout
    );
    assert!(lines[1].starts_with("session: ses_"), "{}", run.stdout);
    assert_eq!(lines[2], format!("workdir: {}", workdir.display()));
    assert_eq!(lines[3], "manifest: hello v0.1.0");
    assert_eq!(lines[4], "driver: scripted (scripted-hello)");
    assert_eq!(
        lines[5],
        format!(
            "loop:    default (built-in, mur {})",
            env!("CARGO_PKG_VERSION")
        )
    );
    // --json wins over -v: one line.
    let run = finish(
        mur()
            .current_dir(repo())
            .args([
                "run",
                "-v",
                "--json",
                "--manifest",
                "examples/hello/murmur.yaml",
            ])
            .args(["--port", "0", "--workdir"])
            .arg(&workdir)
            .args(["--task", "What is in your workdir?"]),
    );
    run.assert_ok();
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    let launch = run.launch();
    let port = launch["address"]
        .as_str()
        .unwrap()
        .strip_prefix("http://127.0.0.1:")
        .unwrap()
        .to_string();
    assert_eq!(launch["url"], json!(format!("localhost:{port}")));
}

#[test]
fn json_launch_line_is_the_only_stdout() {
    let capsule = Capsule::new("json", &with_bash(""), ECHO_SCRIPT);
    let run = capsule.run(&["--task", "say hello"]);
    run.assert_ok();
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    let launch = run.launch();
    let address = launch["address"].as_str().unwrap();
    let port: u16 = address
        .strip_prefix("http://127.0.0.1:")
        .unwrap()
        .parse()
        .unwrap();
    assert!(port > 0);
    assert_eq!(launch["url"], json!(format!("localhost:{port}")));
    assert!(launch["session_id"].as_str().unwrap().starts_with("ses_"));
    let workdir = launch["workdir"].as_str().unwrap();
    assert_eq!(
        workdir,
        capsule
            .dir
            .join("workdir")
            .join(launch["session_id"].as_str().unwrap())
            .to_str()
            .unwrap()
    );
}

#[test]
fn bash_result_reaches_the_model_fenced_and_the_answer_is_written() {
    let capsule = Capsule::new("fence", &with_bash(""), ECHO_SCRIPT);
    let run = capsule.run(&["--task", "say hello"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "<untrusted-content source=tool:bash>\n$ echo hello\nExit code: 0\nStdout:\nhello\n\nStderr:\n\n</untrusted-content>"
    );
    assert_eq!(s.read("task.md"), "say hello");
}

#[test]
fn trace_records_session_task_turns_and_tool_calls() {
    let capsule = Capsule::new("trace", &with_bash(""), ECHO_SCRIPT);
    let run = capsule.run(&["--task", "say hello"]);
    run.assert_ok();
    let s = run.session();
    let trace = s.trace();
    let kinds: Vec<&str> = trace
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "task_start",
            "inference",
            "tool_call",
            "shell",
            "inference",
            "task_end",
            "session_end"
        ]
    );
    for line in &trace {
        assert_eq!(line["session_id"], json!(s.id));
        assert!(line["event_id"].as_str().unwrap().starts_with("evt_"));
        assert!(line["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
    }
    let start = &trace[0];
    assert_eq!(start["capsule_name"], "e2e");
    assert_eq!(start["model"], "scripted-test");
    assert_eq!(start["max_turns"], 10);
    assert_eq!(start["tools_declared"], json!(["bash"]));
    assert_eq!(start["session_loop"], "built-in session loop");
    assert_eq!(
        (&start["loop"], &start["loop_version"]),
        (&json!("default"), &json!(env!("CARGO_PKG_VERSION")))
    );

    let task = &trace[1];
    let task_id = task["task_id"].as_str().unwrap();
    assert!(task_id.starts_with("tsk_") && task_id.len() == 36);
    assert!(task["context_id"].as_str().unwrap().starts_with("ctx_"));
    assert_eq!(
        (task["origin"].as_str(), task["lane"].as_str()),
        (Some("user"), Some("user"))
    );
    assert_eq!(task["source"], "task_md");
    assert_eq!(task["parent_id"], start["event_id"]);

    let first = &trace[2];
    assert_eq!(first["turn"], 0);
    assert_eq!(first["stop_reason"], "tool_call");
    assert_eq!(first["decision"], "tool_call");
    assert_eq!(first["tool_name"], "bash");
    // The provider's counts sit beside the host's own estimates (upstream's schema).
    assert_eq!(
        (
            first["input_tokens_actual"].as_u64(),
            first["output_tokens_actual"].as_u64()
        ),
        (Some(10), Some(5))
    );
    assert!(first["input_tokens"].as_u64().is_some_and(|n| n > 10));
    assert!(first["duration_ms"].as_u64().is_some());
    assert_eq!(trace[5]["turn"], 1);
    assert_eq!(trace[5]["stop_reason"], "end_turn");

    let call = &trace[3];
    assert_eq!(call["tool_name"], "bash");
    assert_eq!(call["status"], "ok");
    assert_eq!(call["exit_code"], 0);
    assert_eq!(call["tool_call_id"], "toolu_01");
    assert_eq!(call["input"], json!({"command": "echo hello"}));
    assert!(call["duration_ms"].is_u64());
    assert_eq!(call["parent_id"], first["event_id"]);
    let shell = &trace[4];
    assert_eq!(shell["command"], "echo hello");
    assert_eq!(shell["exit_code"], 0);
    assert_eq!(shell["stdout_bytes"], 6);
    assert!(shell["binary"].as_str().unwrap().ends_with("/bash"));

    let end = &trace[6];
    assert_eq!(end["exit_status"], "ok");
    assert_eq!(end["reopen_count"], 0);
    assert_eq!(end["turns"], 2);
    assert_eq!(end["tool_calls"], 1);
    assert_eq!(end["shell_calls"], 1);
    let session_end = &trace[7];
    assert_eq!(session_end["exit_status"], "ok");
    assert_eq!(session_end["total_turns"], 2);
    assert_eq!(session_end["total_tool_calls"], 1);
}

#[test]
fn nonzero_exit_is_data_not_an_error() {
    let script = r#"
turns:
  - tool_calls: [{id: t1, name: bash, input: {command: "echo out; echo err >&2; exit 3"}}]
  - text: "{{last_tool_result}}"
"#;
    let capsule = Capsule::new("exit3", &with_bash(""), script);
    let run = capsule.run(&["--task", "fail softly"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "<untrusted-content source=tool:bash>\n$ echo out; echo err >&2; exit 3\nExit code: 3\nStdout:\nout\n\nStderr:\nerr\n\n</untrusted-content>"
    );
    let call = &s.events("tool_call")[0];
    assert_eq!(
        (call["status"].as_str(), call["exit_code"].as_i64()),
        (Some("ok"), Some(3))
    );
}

#[test]
fn max_turns_exceeded_fails_the_task() {
    let script = r#"
turns:
  - tool_calls: [{name: bash, input: {command: "true"}}]
  - tool_calls: [{name: bash, input: {command: "true"}}]
  - tool_calls: [{name: bash, input: {command: "true"}}]
"#;
    let capsule = Capsule::new(
        "maxturns",
        &with_bash("").replace("model: scripted-test", "model: m\n  max_turns: 2"),
        script,
    );
    let run = capsule.run(&["--task", "loop forever"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error[E-RUN-040]: the task did not complete: max_turns_reached"),
        "{}",
        run.stderr
    );
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "error: max_turns exceeded: the task used all 2 inference turns"
    );
    let end = &s.events("task_end")[0];
    assert_eq!(end["exit_status"], "max_turns_reached");
    assert_eq!(end["turns"], 2);
    assert_eq!(s.events("inference").len(), 2);
    assert_eq!(
        s.events("session_end")[0]["exit_status"],
        "max_turns_reached"
    );
}

#[test]
fn default_max_turns_is_ten() {
    let turn = "  - tool_calls: [{name: bash, input: {command: \"true\"}}]\n";
    let script = format!("turns:\n{}", turn.repeat(12));
    let capsule = Capsule::new("maxturns10", &with_bash(""), &script);
    let run = capsule.run(&["--task", "loop"]);
    assert_eq!(run.status, 1);
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "error: max_turns exceeded: the task used all 10 inference turns"
    );
    assert_eq!(s.events("inference").len(), 10);
}

#[test]
pub(crate) fn loop_swap_runs_the_other_loop() {
    let script = "turns:\n  - text: \"one turn, no tools\"\n";
    let capsule = Capsule::new("oneshot", &with_bash(""), script);
    let path = guest(MUR_LOOP_ONESHOT);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "[oneshot] one turn, no tools");
    let start = &s.events("session_start")[0];
    assert_eq!(
        start["session_loop"],
        json!(format!("session loop {}", path.display()))
    );
    assert_eq!(
        (&start["loop"], &start["loop_version"]),
        (&json!("mur_loop_oneshot.wasm"), &Value::Null)
    );
    assert!(s.events("tool_call").is_empty());
}

#[test]
fn oneshot_loop_offers_no_tools_and_refuses_tool_calls() {
    let capsule = Capsule::new("oneshot-tools", &with_bash(""), ECHO_SCRIPT);
    let path = guest(MUR_LOOP_ONESHOT);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    assert_eq!(run.status, 1);
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "error: the oneshot loop answers in one turn and calls no tools"
    );
}

#[test]
fn a_driver_passed_as_loop_is_refused_naming_its_world() {
    let capsule = Capsule::new("wrongworld", &with_bash(""), ECHO_SCRIPT);
    let path = guest(MUR_DRIVER_SCRIPTED);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "", "nothing on stdout when launch fails");
    assert_eq!(
        run.stderr,
        format!(
            "error[E-RUN-031]: session loop {} does not target the session-loop world: it is a driver component (exports murmur:driver/inference@0.2.0)\n  hint: a session-loop component exports murmur:session/loop@0.2.0\n",
            path.display()
        )
    );
    assert!(
        !capsule.dir.join("workdir").exists(),
        "staging failures leave no workdir"
    );
}

#[test]
pub(crate) fn a_loop_built_against_another_version_is_refused() {
    let capsule = Capsule::new("wrongversion", &with_bash(""), ECHO_SCRIPT);
    let path = guest(MUR_LOOP_FUTURE);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    run.assert_error(&format!(
            "error[E-RUN-030]: session loop {} was built against murmur:session/loop@0.9.0; this mur serves murmur:session/loop@0.2.0\n  hint: ",
            path.display()
        ));
}

/// A loop built against the released 0.1.0 session world, whose shape this host no
/// longer serves, is refused before it runs, naming the version it does serve.
#[test]
pub(crate) fn a_loop_built_against_the_released_0_1_0_is_refused() {
    let capsule = Capsule::new("legacy", &with_bash(""), ECHO_SCRIPT);
    let path = guest(MUR_LOOP_LEGACY);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    run.assert_error(&format!(
        "error[E-RUN-030]: session loop {} was built against murmur:session/loop@0.1.0; \
         this mur serves murmur:session/loop@0.2.0\n  hint: rebuild the component against \
         the session-loop world of murmur:*@0.2.0 (the wit/ folder of this mur)\n",
        path.display()
    ));
    assert_eq!(run.stdout, "");
}

#[test]
fn a_file_that_is_not_a_component_is_refused() {
    let capsule = Capsule::new("notwasm", &with_bash(""), ECHO_SCRIPT);
    capsule.file("junk.wasm", "not wasm at all");
    let path = capsule.dir.join("junk.wasm");
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    run.assert_error("error[E-RUN-001]: session loop ");
    assert!(
        run.stderr.contains("is not a valid WebAssembly component"),
        "{}",
        run.stderr
    );
}

#[test]
fn missing_manifest_is_e_io_001() {
    let dir = scratch("nomanifest");
    let run = finish(
        mur()
            .args(["run", "--json", "--manifest"])
            .arg(dir.join("murmur.yaml")),
    );
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-IO-001]: murmur.yaml not found at {}",
            dir.join("murmur.yaml").display()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("\n  hint: "), "{}", run.stderr);
}

#[test]
fn missing_driver_script_is_an_error_naming_it() {
    let capsule = Capsule::new("noscript", &with_bash(""), "");
    std::fs::remove_file(capsule.dir.join("script.yaml")).unwrap();
    let run = capsule.run(&["--task", "hi"]);
    assert_eq!(run.status, 1);
    assert!(run.stderr.contains("error[E-IO-001]"), "{}", run.stderr);
    assert!(run.stderr.contains("script.yaml"), "{}", run.stderr);
}

#[test]
fn unknown_manifest_key_warns_with_line_and_suggestion() {
    let capsule = Capsule::new("warn", &with_bash("  queu_depth: 2\n"), ECHO_SCRIPT);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    assert!(
        run.stderr.contains("warning[W-MAN-001]: murmur.yaml:12: unknown key 'lifecycle.queu_depth' ignored (did you mean 'lifecycle.queue_depth'?)"),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_manifest_value_is_an_error_naming_key_and_line() {
    let capsule = Capsule::new(
        "badvalue",
        &manifest("lifecycle:\n  task_acceptance: sometimes\n"),
        ECHO_SCRIPT,
    );
    let run = capsule.run(&["--task", "hi"]);
    run.assert_error("error[E-MAN-003]: murmur.yaml:8: ");
    assert!(
        run.stderr.contains("'lifecycle.task_acceptance'"),
        "{}",
        run.stderr
    );
}

/// A misspelt section is only a warning, so the manifest fails on what it left out; the
/// error's hint names the misspelling.
#[test]
fn a_misspelt_section_is_named_by_the_error_it_causes() {
    let yaml =
        "name: e2e\nversion: \"0.1.0\"\ninferenc:\n  driver: scripted\n  script: ./script.yaml\n";
    let capsule = Capsule::new("misspelt", yaml, ECHO_SCRIPT);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_error(
        "error[E-RUN-005]: murmur.yaml: driver not configured: 'inference.driver' is not set\n  \
         hint: the manifest has an unknown key 'inferenc' at line 3: did you mean 'inference'? \
         Otherwise: set 'inference.driver: {artifact: NAME}' naming an artifacts[] entry with \
         'runtime: driver', or 'inference.driver: scripted' with 'inference.script: PATH'\n",
    );
    assert_eq!(run.stdout, "");
}

#[test]
fn none_without_a_task_is_a_clear_error() {
    let capsule = Capsule::new("notask", &with_bash(""), ECHO_SCRIPT);
    let run = capsule.run(&[]);
    run.assert_error(
        "error[E-IO-001]: lifecycle.task_acceptance is none and there is no task to run",
    );
}

#[test]
fn task_from_a_file_and_from_task_md() {
    let capsule = Capsule::new("taskfile", &with_bash(""), "turns:\n  - text: ok\n");
    capsule.file("the-task.md", "# Task\nDo the thing.\n");
    let run = capsule.run(&["--task", capsule.dir.join("the-task.md").to_str().unwrap()]);
    run.assert_ok();
    assert_eq!(run.session().read("task.md"), "# Task\nDo the thing.\n");

    let workdir = scratch("taskmd");
    std::fs::write(workdir.join("task.md"), "from task.md").unwrap();
    let run = capsule.run(&["--workdir", workdir.to_str().unwrap()]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.workdir, workdir);
    // What the model works with is in the workdir; the host's records are not.
    assert_eq!(s.read("out/result.txt"), "ok");
    assert!(workdir.join("MURMUR.md").exists());
    assert!(!workdir.join(".murmur").exists());
    assert!(!s.records.starts_with(&workdir), "{}", s.records.display());
    assert!(s.records.join("trace.jsonl").exists());
}

#[test]
fn driver_failure_ends_the_task_failed() {
    let capsule = Capsule::new(
        "drivererr",
        &with_bash(""),
        "turns:\n  - error: \"the model is overloaded\"\n",
    );
    let run = capsule.run(&["--task", "hi"]);
    assert_eq!(run.status, 1);
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "error: the model is overloaded");
    let turn = &s.events("inference")[0];
    assert_eq!(turn["error_code"], "driver_error");
    assert_eq!(turn["error"], "the model is overloaded");
    assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
}

#[test]
fn a_reply_that_is_not_json_fails_the_task_naming_the_error() {
    let capsule = Capsule::new(
        "rawreply",
        &with_bash(""),
        "turns:\n  - raw: \"not json {\"\n",
    );
    let run = capsule.run(&["--task", "hi"]);
    assert_eq!(run.status, 1);
    let s = run.session();
    assert!(
        s.read("out/result.txt")
            .starts_with("error: failed to parse driver response: "),
        "{}",
        s.read("out/result.txt")
    );
    assert_eq!(s.events("inference")[0]["error_code"], "malformed_response");
}

#[test]
fn unknown_tool_is_reported_to_the_model_unfenced() {
    let script = r#"
turns:
  - tool_calls: [{id: t9, name: no-such-tool, input: {}}]
  - text: "{{last_tool_result}}"
"#;
    let capsule = Capsule::new("unknowntool", &with_bash(""), script);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "tool 'no-such-tool' is not declared in manifest allowlist"
    );
    let call = &s.events("tool_call")[0];
    assert_eq!(call["status"], "error");
    assert_eq!(call["duration_ms"], 0);
}

#[test]
fn murmur_md_has_every_section() {
    let capsule = Capsule::new("murmurmd", &with_bash(""), "turns:\n  - text: ok\n");
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    let s = run.session();
    let md = s.read("MURMUR.md");
    let headings: Vec<&str> = md.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(
        headings,
        [
            "# MURMUR.md — Capsule Environment Reference",
            "## Identity",
            "## Capsule",
            "## Limits",
            "## Runtime Directory",
            "## Installed Tools",
            "## How to Call a Tool",
            "## Running Shell Commands",
            "## Checkpoints",
        ]
    );
    assert!(md.contains(&format!("- Session ID: {}", s.id)));
    assert!(md.contains(&format!(
        "- Capsule URL: {}",
        run.launch()["address"].as_str().unwrap()
    )));
    assert!(md.contains("- Capsule: e2e v0.1.0"));
    assert!(md.contains("- Model: scripted-test"));
    assert!(md.contains(&format!(
        "- Session loop: default (built-in, mur {})\n",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(md.contains("- Turn limit: 10 inference turns per task"));
    assert!(md.contains("- Context budget: not set"));
    assert!(md.contains("- **bash** (built-in, shell) — "));
    assert!(md.contains("runs `bash -c <command>`"));
    assert!(md.contains("checkpoints/"));
}

#[test]
fn fixed_port_is_used_and_a_taken_port_is_e_run_010() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let capsule = Capsule::new("port", &with_bash(""), "turns:\n  - text: ok\n");
    let run = finish(
        mur()
            .args(["run", "--json", "--port", &port.to_string(), "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    run.assert_error(&format!(
        "error[E-RUN-010]: could not listen on 127.0.0.1:{port}"
    ));
    drop(holder);
    let run = finish(
        mur()
            .args(["run", "--json", "--port", &port.to_string(), "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    run.assert_ok();
    assert_eq!(
        run.launch()["address"],
        json!(format!("http://127.0.0.1:{port}"))
    );
}

#[test]
fn single_takes_one_task_over_http_then_exits() {
    let capsule = Capsule::new(
        "single",
        &manifest("capabilities:\n  shell:\n    allow: [bash]\n"),
        "turns:\n  - text: \"answered over http\"\n",
    );
    let running = capsule.spawn(&[]);
    let socket = post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("hello over http"),
    );
    let body = read_to_close(socket);
    let frames = frames(body.split_once("\r\n\r\n").unwrap().1);
    let last = frames.last().unwrap();
    assert_eq!(last.1, "status");
    assert_eq!(last.2["status"]["state"], "completed");
    assert_eq!(last.2["status"]["response"], "answered over http");
    let session = running.session();
    let run = running.wait(std::time::Duration::from_secs(30));
    assert_eq!(run.status, 0, "{}", run.stderr);
    let task = &session.events("task_start")[0];
    assert_eq!(
        (task["origin"].as_str(), task["lane"].as_str()),
        (Some("event"), Some("bg"))
    );
    assert_eq!(session.read("task.md"), "hello over http");
    let received: Vec<Value> = session.events("a2a_task_received");
    assert_eq!(received[0]["message_id"], "msg-1");
}
