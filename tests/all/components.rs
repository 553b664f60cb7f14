//! Tool components, skills and the sandbox, end to end: what a component can and
//! cannot see, the limits that stop it, and the component cache.

use crate::common::*;
use serde_json::{Value, json};

/// A capsule with the probe and wordcount tools, each call's output in the trace.
fn capsule(name: &str, script: &str, extra: &str) -> Capsule {
    let manifest = format!(
        r#"name: components
version: "0.1.0"
artifacts:
  - name: probe
    runtime: tool
    source: {probe}
  - name: wordcount
    runtime: tool
    source: {wordcount}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
capabilities:
  env:
    allow: [MUR_TEST_GRANTED]
  limits:
    memory_bytes: 67108864
    deadline_seconds: 2
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
{extra}"#,
        probe = guest(MUR_TOOL_PROBE).display(),
        wordcount = guest(MUR_TOOL_WORDCOUNT).display(),
    );
    Capsule::new(name, &manifest, script)
}

/// One turn per call, then an answer: the calls' outputs, in order, from the trace.
fn call_all(name: &str, calls: &[(&str, Value)], extra: &str) -> (Run, Vec<Value>) {
    let mut script = String::from("turns:\n");
    for (i, (tool, input)) in calls.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: {tool}, input: {input}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    let capsule = capsule(name, &script, extra);
    let run = finish(
        mur()
            .env("MUR_TEST_GRANTED", "granted-value")
            .env("MUR_TEST_SECRET", "must-not-leak")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "probe the sandbox"]),
    );
    run.assert_ok();
    let calls = run.session().events("tool_call");
    (run, calls)
}

fn output(call: &Value) -> &str {
    call["output"].as_str().unwrap()
}

fn fenced(tool: &str, body: &str) -> String {
    format!("<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>")
}

#[test]
pub(crate) fn a_tool_sees_the_workdir_and_nothing_else() {
    let (run, calls) = call_all(
        "fs",
        &[
            ("probe", json!({"probe": "read", "path": "task.md"})),
            ("probe", json!({"probe": "read", "path": "/etc/passwd"})),
            (
                "probe",
                json!({"probe": "read", "path": "../../../../../../etc/passwd"}),
            ),
            (
                "probe",
                json!({"probe": "write", "path": "out/from-tool.txt"}),
            ),
            ("probe", json!({"probe": "list", "path": "/"})),
        ],
        "",
    );
    assert_eq!(output(&calls[0]), fenced("probe", "ok: probe the sandbox"));
    // `/` is the workdir: no /etc in it, and no way out of it.
    assert_eq!(
        output(&calls[1]),
        fenced("probe", "err: No such file or directory (os error 44)")
    );
    assert_eq!(
        output(&calls[2]),
        fenced("probe", "err: Operation not permitted (os error 63)")
    );
    assert_eq!(output(&calls[3]), fenced("probe", "ok"));
    let s = run.session();
    assert_eq!(s.read("out/from-tool.txt"), "probe");
    assert_eq!(
        output(&calls[4]),
        fenced("probe", "ok: MURMUR.md,out,task.md,tools")
    );
    for call in &calls {
        assert_eq!(call["status"], "ok");
    }
}

#[test]
fn a_tool_sees_only_granted_environment_variables() {
    let (_, calls) = call_all(
        "env",
        &[
            ("probe", json!({"probe": "env"})),
            (
                "probe",
                json!({"probe": "getenv", "name": "MUR_TEST_SECRET"}),
            ),
            ("probe", json!({"probe": "getenv", "name": "HOME"})),
        ],
        "",
    );
    assert_eq!(
        output(&calls[0]),
        fenced("probe", "ok: MUR_TEST_GRANTED=granted-value")
    );
    assert_eq!(output(&calls[1]), fenced("probe", "err: not set"));
    assert_eq!(output(&calls[2]), fenced("probe", "err: not set"));
}

#[test]
fn a_spinning_tool_is_stopped_at_its_deadline_and_the_task_goes_on() {
    let (run, calls) = call_all(
        "spin",
        &[
            ("probe", json!({"probe": "spin"})),
            ("probe", json!({"probe": "read", "path": "task.md"})),
        ],
        "",
    );
    assert_eq!(calls[0]["status"], "error");
    assert!(
        output(&calls[0]).starts_with(
            "tool 'probe' failed: deadline exceeded: the component ran for more than 2 s"
        ),
        "{}",
        output(&calls[0])
    );
    assert!(calls[0]["duration_ms"].as_u64().unwrap() >= 2000);
    assert_eq!(output(&calls[1]), fenced("probe", "ok: probe the sandbox"));
    assert_eq!(run.session().read("out/result.txt"), "done");
}

#[test]
fn a_tool_that_balloons_memory_is_stopped_at_its_cap() {
    let (run, calls) = call_all("balloon", &[("probe", json!({"probe": "balloon"}))], "");
    assert_eq!(calls[0]["status"], "error");
    // The cap, not the 2 s deadline, stopped it: the allocator said so on its stderr
    // (the tool's log) and aborted, which traps, long before the deadline.
    assert_eq!(
        output(&calls[0]),
        "tool 'probe' failed: wasm trap: wasm `unreachable` instruction executed"
    );
    assert_eq!(
        run.session().record("logs/tool-probe.log"),
        "memory allocation of 16777216 bytes failed\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
    );
    let ms = calls[0]["duration_ms"].as_u64().unwrap();
    assert!(ms < 1000, "{ms} ms: near the 2 s deadline");
}

#[test]
pub(crate) fn a_tool_component_result_is_fenced_with_its_name() {
    let (run, calls) = call_all(
        "wordcount",
        &[("wordcount", json!({"path": "task.md"}))],
        "",
    );
    assert_eq!(output(&calls[0]), fenced("wordcount", "0 3 17 task.md"));
    assert_eq!(calls[0]["tool_name"], "wordcount");
    let md = run.session().read("MURMUR.md");
    assert!(
        md.contains("- **wordcount** (built-in, tool) — Counts the lines, words and bytes of a file in the workdir."),
        "{md}"
    );
    let failed = call_all(
        "wordcount-missing",
        &[("wordcount", json!({"path": "nope.txt"}))],
        "",
    )
    .1;
    assert_eq!(failed[0]["status"], "error");
    assert!(
        output(&failed[0]).contains("failed to read 'nope.txt'"),
        "{}",
        output(&failed[0])
    );
}

#[test]
fn tool_input_that_is_not_an_object_never_reaches_the_tool() {
    // The driver's reply carries a list as the input: the host refuses it before any
    // instance exists, and the model is told so unfenced (no tool said it).
    let reply = r#"{"stop_reason":"tool_call","content":[{"type":"tool_call","id":"c1","name":"wordcount","input":[1,2]}],"usage":{"input_tokens":1,"output_tokens":1}}"#;
    let script = format!(
        "turns:\n  - raw: {}\n  - text: \"{{{{last_tool_result}}}}\"\n",
        serde_json::Value::String(reply.into())
    );
    let capsule = capsule("badinput", &script, "");
    let run = capsule.run(&["--task", "x"]);
    run.assert_ok();
    let session = run.session();
    assert_eq!(
        session.read("out/result.txt"),
        "tool 'wordcount' input must be a JSON object"
    );
    let call = &session.events("tool_call")[0];
    assert_eq!(call["status"], "error", "{call}");
    assert!(
        session.events("tool_call").len() == 1,
        "one refused call, nothing more"
    );
}

#[test]
fn an_empty_input_reaches_the_tool_which_refuses_it_fenced() {
    let script =
        "turns:\n  - tool_calls: [{id: c1, name: wordcount}]\n  - text: \"{{last_tool_result}}\"\n";
    let capsule = capsule("emptyinput", script, "");
    let run = capsule.run(&["--task", "x"]);
    run.assert_ok();
    // `input` defaults to {}, which reaches the tool and is refused by it, fenced.
    let result = run.session().read("out/result.txt");
    assert!(
        result
            .starts_with("<untrusted-content source=tool:wordcount>\ninput must be a JSON object"),
        "{result}"
    );
}

#[test]
fn a_skill_is_installed_listed_and_returned_unfenced() {
    let script = "turns:\n  - tool_calls: [{id: s1, name: house-style}]\n  - text: \"{{last_tool_result}}\"\n";
    let manifest = "name: skills\nversion: \"0.1.0\"\nartifacts:\n  - name: house-style\n    runtime: skill\n    source: ./skills/house-style/\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\nlifecycle:\n  task_acceptance: none\n";
    let capsule = Capsule::new("skill", manifest, script);
    capsule.file(
        "skills/house-style/skill.md",
        "# House style\nWrite short sentences.\n",
    );
    let run = capsule.run(&["--task", "write"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        "# House style\nWrite short sentences.\n"
    );
    assert_eq!(
        s.read("tools/house-style/skill.md"),
        "# House style\nWrite short sentences.\n"
    );
    let call = &s.events("skill_call")[0];
    assert_eq!(call["skill_name"], "house-style");
    assert_eq!(call["status"], "ok");
    assert!(
        s.events("tool_call").is_empty(),
        "skills are not tool calls"
    );
    assert_eq!(s.events("task_end")[0]["tool_calls"], 0);
    let md = s.read("MURMUR.md");
    assert!(md.contains("## Installed Skills"), "{md}");
    assert!(
        md.contains("- **house-style** — Write short sentences. (tools/house-style/skill.md)"),
        "{md}"
    );
}

/// A capsule declaring one artifact, and `inference` as given (YAML, indented two).
fn one_artifact(
    name: &str,
    artifact: &str,
    runtime: &str,
    source: &str,
    inference: &str,
) -> Capsule {
    let manifest = format!(
        "name: {name}\nversion: \"0.1.0\"\nartifacts:\n  - name: {artifact}\n    runtime: {runtime}\n    source: {source}\ninference:\n{inference}lifecycle:\n  task_acceptance: none\n"
    );
    Capsule::new(name, &manifest, "turns: []\n")
}

const SCRIPTED: &str = "  driver: scripted\n  script: ./script.yaml\n  model: m\n";

#[test]
fn a_tool_artifact_of_the_wrong_world_is_refused() {
    let source = guest(MUR_SESSION_LOOP);
    let capsule = one_artifact(
        "toolworld",
        "notatool",
        "tool",
        &source.display().to_string(),
        SCRIPTED,
    );
    let run = capsule.run(&["--task", "x"]);
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        "error[E-RUN-031]: tool artifact 'notatool' does not target the tool world: it is a session-loop component (exports murmur:session/loop@0.2.0)\n  hint: a tool component exports murmur:tool/run@0.2.0\n"
    );
}

#[test]
pub(crate) fn a_driver_artifact_replaces_the_builtin_driver() {
    let inference = "  driver:\n    artifact: my-driver\n    config:\n      turns:\n        - text: from the artifact driver\n  endpoint: https://models.invalid/v1\n  model: m\n";
    let source = guest(MUR_DRIVER_SCRIPTED).display().to_string();
    let capsule = one_artifact("driverartifact", "my-driver", "driver", &source, inference);
    let run = capsule.run(&["--task", "x"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "from the artifact driver");
    assert_eq!(
        s.events("session_start")[0]["driver"],
        "driver artifact 'my-driver'"
    );
}

#[test]
fn a_tool_component_declared_as_a_hook_is_refused_before_any_workdir() {
    let source = guest(MUR_TOOL_PROBE).display().to_string();
    let capsule = one_artifact("hook", "gate", "hook", &source, SCRIPTED);
    let run = capsule.run(&["--task", "x"]);
    run.assert_error(
        "error[E-RUN-031]: hook artifact 'gate' does not target the hook world: it is a tool \
         component (exports murmur:tool/run@0.2.0)",
    );
    assert!(!capsule.dir.join("workdir").exists());
}

#[test]
fn compiled_components_are_cached_and_reused() {
    let cache = scratch("cache");
    let capsule = capsule("cached", "turns:\n  - text: ok\n", "");
    let run_once = || {
        finish(
            mur()
                .env("MUR_CACHE_DIR", &cache)
                .args(["run", "--json", "--port", "0", "--manifest"])
                .arg(capsule.manifest())
                .args(["--task", "x"]),
        )
    };
    run_once().assert_ok();
    let listing = || {
        let mut files: Vec<(String, std::time::SystemTime)> =
            std::fs::read_dir(cache.join("components"))
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| {
                    (
                        e.file_name().into_string().unwrap(),
                        e.metadata().unwrap().modified().unwrap(),
                    )
                })
                .collect();
        files.sort();
        files
    };
    let first = listing();
    // The two tools, compiled, and the built-in loop and driver, copied compiled out
    // of mur to be mapped from the cache.
    assert_eq!(first.len(), 4, "{first:?}");
    assert!(first.iter().all(|(name, _)| name.ends_with(".cwasm")));
    run_once().assert_ok();
    assert_eq!(listing(), first, "a second run compiles nothing");
}

#[test]
fn bind_address_is_used() {
    let capsule = capsule("bind", "turns:\n  - text: ok\n", "");
    let run = capsule.run(&["--task", "x", "--bind", "127.0.0.2"]);
    run.assert_ok();
    assert!(
        run.launch()["address"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.2:")
    );
}

fn run_probe_driver(capsule: &Capsule) -> Run {
    finish(
        mur()
            .env("MUR_TEST_GRANTED", "granted-value")
            .env("MUR_TEST_SECRET", "must-not-leak")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "x"]),
    )
}

#[test]
fn a_driver_sees_no_filesystem_and_only_granted_variables() {
    let run = run_probe_driver(&probe_driver("driver-sandbox", "probe"));
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        "fs: none; env: [MUR_TEST_GRANTED=granted-value]"
    );
}

#[test]
fn a_trapping_driver_fails_the_task_as_driver_invocation_failed() {
    let run = run_probe_driver(&probe_driver("driver-trap", "trap"));
    assert_eq!(run.status, 1);
    // The guest's own panic message is in its log; mur's stderr gets one note naming it.
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("[driver] ") && l.ends_with("driver.log)")),
        "{}",
        run.stderr
    );
    let log = run.session().record("logs/driver.log");
    assert!(log.contains("the probe driver traps on purpose"), "{log}");
    assert!(
        run.stderr.contains("error[E-RUN-040]: the task did not complete: failed (error: driver invocation failed: wasm trap: "),
        "{}",
        run.stderr
    );
    let s = run.session();
    let result = s.read("out/result.txt");
    assert!(
        result.starts_with("error: driver invocation failed: "),
        "{result}"
    );
    let turn = &s.events("inference")[0];
    assert_eq!(turn["error_code"], "driver_failed");
    assert_eq!(s.events("task_end")[0]["exit_status"], "failed");
}

#[test]
fn a_spinning_driver_is_stopped_at_its_deadline() {
    let run = run_probe_driver(&probe_driver("driver-spin", "spin"));
    run.assert_error("error[E-RUN-040]: the task did not complete: failed");
    assert_eq!(
        run.session().read("out/result.txt"),
        "error: driver invocation failed: deadline exceeded: the component ran for more than 1 s without returning"
    );
}
