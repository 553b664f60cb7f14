//! Upstream Murmur's own components (murmur-cli 0.8.0, vendored unchanged in
//! `tests/fixtures/upstream/`, see its SOURCES.md) under the real `mur run`: its
//! `jsonl-line-count` and request-input tools, its OpenAI and Anthropic drivers against
//! the loopback model mock, the limits and the allow-list applied to them as to ours,
//! upstream's records-hook and a hook of upstream's shape through every verdict, and what
//! is refused (our retired tool world, upstream's network-probing hook).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::mock_model::{MockModel, Reply, anthropic, messages, openai};
use crate::common::*;
use crate::drivers::{l, labels};
use crate::hooks::{self, Cap, Hook, Yaml, event_labels, pick};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-test-SECRET-upstream";
const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", KEY)];

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/upstream").join(name)
}

fn fenced(tool: &str, body: &str) -> String {
    format!("<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>")
}

// ---------------------------------------------------------------------------------
// Provenance.

/// Each vendored file is the one SOURCES.md names, byte for byte.
#[test]
fn the_vendored_components_match_their_recorded_sha256() {
    use sha2::Digest;
    let sources = std::fs::read_to_string(fixture("SOURCES.md")).unwrap();
    let mut checked = 0;
    for line in sources.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line
            .split('|')
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        let (file, hash) = (cells[1], cells[3]);
        let bytes = std::fs::read(fixture(file)).unwrap();
        let digest: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, hash, "{file} is not the file SOURCES.md records");
        checked += 1;
    }
    let vendored = std::fs::read_dir(fixture(""))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "wasm")
        })
        .count();
    assert_eq!(
        checked, vendored,
        "every vendored .wasm has its line in SOURCES.md"
    );
}

// ---------------------------------------------------------------------------------
// jsonl-line-count.

/// A capsule with upstream's jsonl-line-count tool, driven by the scripted driver.
fn line_count_capsule(name: &str, script: &str) -> Capsule {
    let manifest = format!(
        r#"name: upstream-tool
version: "0.1.0"
artifacts:
  - name: jsonl-line-count
    runtime: tool
    description: Counts the lines of a JSONL file.
    source: {tool}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        tool = fixture("jsonl-line-count.wasm").display(),
    );
    Capsule::new(name, &manifest, script)
}

fn call_once(input: &Value) -> String {
    format!(
        "turns:\n  - tool_calls: [{{id: toolu_02, name: jsonl-line-count, input: {input}}}]\n  - text: \"{{{{last_tool_result}}}}\"\n"
    )
}

/// Upstream hands the tool the model's input JSON whole, as `tool-input.data` (the seed's
/// failed call shows it); this tool reads the file of that name, beneath the workdir.
#[test]
fn jsonl_line_count_counts_the_lines_of_a_file_in_the_workdir() {
    let input = json!({"data": "lines.jsonl"});
    let capsule = line_count_capsule("jsonl-count", &call_once(&input));
    let workdir = capsule.dir.join("wd");
    std::fs::create_dir_all(&workdir).unwrap();
    std::fs::write(
        workdir.join(input.to_string()),
        "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n",
    )
    .unwrap();
    let run = capsule.run(&["--task", "count", "--workdir", workdir.to_str().unwrap()]);
    run.assert_ok();
    let s = run.session();
    let calls = s.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["status"], "ok", "{}", calls[0]);
    assert_eq!(calls[0]["output"], fenced("jsonl-line-count", "3"));
    assert_eq!(s.read("out/result.txt"), fenced("jsonl-line-count", "3"));
}

/// The seed's failed `jsonl-line-count` call, byte for byte in its content.
#[test]
fn jsonl_line_count_fails_on_a_missing_file_as_the_seed_shows() {
    let capsule = line_count_capsule(
        "jsonl-missing",
        &call_once(&json!({"data": "missing.jsonl"})),
    );
    let run = capsule.run(&["--task", "count"]);
    run.assert_ok();
    let calls = run.session().events("tool_call");
    assert_eq!(calls[0]["status"], "error", "{}", calls[0]);
    assert_eq!(
        calls[0]["output"],
        "<untrusted-content source=tool:jsonl-line-count>\nfailed to read '{\"data\":\"missing.jsonl\"}': No such file or directory (os error 44)\n</untrusted-content>"
    );
}

// ---------------------------------------------------------------------------------
// Refused shapes.

/// Our own retired `murmur:tool@0.1.0` (`describe` + `call`) shares upstream's name and
/// version; told apart by its exports, it keeps its version error.
#[test]
pub(crate) fn a_tool_of_the_retired_0_1_0_world_gets_its_version_error() {
    let manifest = format!(
        "name: legacy\nversion: \"0.1.0\"\nartifacts:\n  - name: legacy\n    runtime: tool\n    source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        guest(MUR_TOOL_LEGACY).display()
    );
    let capsule = Capsule::new("legacy-tool", &manifest, "turns:\n  - text: never\n");
    let run = capsule.run(&["--task", "hi"]);
    run.assert_error(
        "error[E-RUN-030]: tool artifact 'legacy' was built against murmur:tool/run@0.1.0; \
         this mur serves murmur:tool/run@0.2.0\n  hint: rebuild the component against the \
         tool world of murmur:*@0.2.0 (the wit/ folder of this mur)\n",
    );
}

// ---------------------------------------------------------------------------------
// Hooks.

/// Upstream's records-hook, unchanged, at `on-session-end`: upstream runs it with the
/// session records' `hooks/` as its current directory (`filesystem.records: true`);
/// here a hook's folder is its `filesystem.scope` under the records' `hooks/`, preopened
/// as `/`, so its `eval.jsonl` lands there, and nothing reaches the workdir.
#[test]
fn upstreams_records_hook_writes_its_eval_line_in_its_scope_at_session_end() {
    let manifest = format!(
        "name: uphook\nversion: \"0.1.0\"\nartifacts:\n  - name: records-hook\n    runtime: hook\n    binding: on-session-end\n    execution_mode: blocking\n    source: {}\n    capabilities:\n      filesystem:\n        scope: records\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        fixture("records-hook.wasm").display()
    );
    let capsule = Capsule::new("upstream-hook", &manifest, "turns:\n  - text: done\n");
    let workdir = capsule.dir.join("wd");
    let records = capsule.dir.join("records");
    let run = capsule.run(&[
        "--task",
        "hi",
        "--workdir",
        workdir.to_str().unwrap(),
        "--records",
        records.to_str().unwrap(),
    ]);
    run.assert_ok();
    let scope = records.join("hooks/records");
    let lines = json_lines(&scope.join("eval.jsonl"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    // A hook gets no environment here, so the dataset and case ids are null.
    let mut line = lines[0].clone();
    assert!(line["ts"].is_u64(), "{line}");
    line.as_object_mut().unwrap().remove("ts");
    assert_eq!(
        line,
        json!({"record_type": "dataset_run", "overall": "pass",
               "scores": {"records-hook": 0.75}, "dataset_id": null, "case_id": null})
    );
    assert_eq!(
        log_file(&scope.join("logs/hook-records-hook.log")),
        "records-hook wrote eval.jsonl\n"
    );
    assert!(!workdir.join("eval.jsonl").exists());
    let s = run.session();
    assert!(s.events("hook_dispatch_error").is_empty());
}

/// Upstream's gateway-probe-hook reaches for the network (`wasi:http`), which no hook
/// has here: refused before anything runs, naming the import.
#[test]
fn an_upstream_hook_reaching_for_the_network_is_refused() {
    let manifest = format!(
        "name: uphook\nversion: \"0.1.0\"\nartifacts:\n  - name: probe\n    runtime: hook\n    binding: on-stage\n    execution_mode: blocking\n    source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        fixture("gateway-probe-hook.wasm").display()
    );
    let capsule = Capsule::new("upstream-net-hook", &manifest, "turns:\n  - text: never\n");
    capsule.run(&["--task", "hi"]).assert_error(
        "error[E-RUN-031]: hook artifact 'probe' imports wasi:http/types@0.2.12, but a hook \
         has no network\n  hint: a hook may import only WASI 0.2 without wasi:http; it sees \
         its scope folder and nothing else\n",
    );
}

/// A hook of upstream's shape (`components/hook-upstream-script`), scripted through
/// `script.json` in its scope folder, named `name` like its scope.
fn up_hook(name: &'static str) -> Hook {
    Hook::new(name, MUR_HOOK_UPSTREAM_SCRIPT).scope(name)
}

/// Every one of our events reaches the matching upstream function, its record filled as
/// `host/src/upstream/hook.rs` says: the granted categories, the shell's argv as the host
/// splits it, the input's size, `prompt`/`tools`/`script`/`recipe` as `none`.
#[test]
pub(crate) fn an_upstream_hook_hears_every_binding_with_its_record_filled() {
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(up_hook("up"))
        .hook(up_hook("upstager").bind("on-stage"));
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "hi 'there you'"}}]
  - tool_calls: [{id: c2, name: wordcount, input: {path: task.md}}]
  - text: done
"#;
    let cap = Cap::new("up-events", &yaml, script);
    let done = cap.run_task("count");
    done.assert_ok();
    let events = done.events("up");
    assert_eq!(
        event_labels(&events),
        [
            "session-start",
            "task-start",
            "inference",
            "shell(decision)",
            "shell(observation)",
            "inference",
            "tool-call(decision)",
            "tool-call(observation)",
            "inference",
            "task-end",
            "session-end",
        ]
    );
    assert_eq!(
        pick(&events[0], &["capsule_name", "session_id", "capabilities"]),
        json!({"capsule_name": "hooks", "session_id": done.session.id, "capabilities": ["filesystem", "shell"]})
    );
    assert_eq!(
        pick(&events[1], &["source", "input_bytes", "budget_tokens"]),
        json!({"source": "task_md", "input_bytes": 5, "budget_tokens": 0})
    );
    assert_eq!(
        pick(
            &events[2],
            &["turn", "decision", "tool_name", "prompt", "output", "tools"]
        ),
        json!({"turn": 0, "decision": "tool_call", "tool_name": "echo", "prompt": null, "output": "", "tools": null})
    );
    assert_eq!(
        pick(
            &events[3],
            &["command", "argv", "script", "recipe", "outcome"]
        ),
        json!({"command": "hi 'there you'", "argv": ["hi", "there you"], "script": null, "recipe": null, "outcome": null})
    );
    assert_eq!(
        events[4]["outcome"],
        json!({"exit_code": 0, "stdout": "", "stderr": "", "stdout_bytes": 13, "stderr_bytes": 0})
    );
    assert_eq!(
        pick(
            &events[6],
            &["tool_name", "input", "input_bytes", "outcome"]
        ),
        json!({"tool_name": "wordcount", "input": "{\"path\":\"task.md\"}", "input_bytes": 18, "outcome": null})
    );
    assert_eq!(events[7]["outcome"]["status"], "ok");
    assert_eq!(events[8]["output"], "done");
    assert_eq!(events[9]["exit_status"], "ok");
    assert_eq!(
        pick(
            &events[10],
            &["total_tool_calls", "total_shell_calls", "exit_status"]
        ),
        json!({"total_tool_calls": 2, "total_shell_calls": 1, "exit_status": "ok"})
    );
    assert_eq!(
        done.events("upstager"),
        [json!({"event": "stage", "shell_allow": ["echo", "bash"]})]
    );
    assert!(done.lines("hook_dispatch_error").is_empty());
}

/// `deny` is committed at a decision for a `deny` hook; under another policy it is a
/// recorded fault and the call runs; a hook spinning past its 1 s deadline refuses the
/// call with the timeout, as ours do.
#[test]
fn an_upstream_deny_is_committed_only_under_its_policy_and_a_spin_is_stopped() {
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(
            up_hook("gatek")
                .bind("on-tool-call")
                .policy("deny")
                .deadline(1),
        )
        .hook(up_hook("idle").bind("on-tool-call"));
    let mut script = String::from("turns:\n");
    for i in 1..=3 {
        script.push_str(&format!(
            "  - text: \"{{{{last_tool_result}}}}\"\n    tool_calls: [{{id: w{i}, name: wordcount, input: {{path: task.md}}}}]\n"
        ));
    }
    script.push_str("  - text: \"{{last_tool_result}}\"\n");
    let cap = Cap::new("up-deny", &yaml, &script);
    cap.answers(
        "gatek",
        json!({"tool-call": [{"deny": "not today"}, "spin", "none", "none"]}),
    );
    cap.answers(
        "idle",
        json!({"tool-call": ["none", "none", {"deny": "ignored"}]}),
    );
    let started = Instant::now();
    let done = cap.run_task("count");
    done.assert_ok();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the spin was stopped"
    );
    let reasons: Vec<Value> = done
        .lines("call_denied")
        .iter()
        .map(|d| pick(d, &["hook_name", "turn", "reason"]))
        .collect();
    assert_eq!(
        reasons,
        [
            json!({"hook_name": "gatek", "turn": 0, "reason": "not today"}),
            json!({"hook_name": "gatek", "turn": 1, "reason": "the policy hook failed: timed out: deadline exceeded: the component ran for more than 1 s without returning"}),
        ]
    );
    assert_eq!(done.lines("tool_call").len(), 1, "only the third call ran");
    assert_eq!(
        pick(
            &done.one("hook_dispatch_error"),
            &["hook_name", "event", "arm"]
        ),
        json!({"hook_name": "idle", "event": "on-tool-call", "arm": "deny"})
    );
    assert_eq!(
        done.log("hook-gatek.log"),
        "on-tool-call: timed out: deadline exceeded: the component ran for more than 1 s without returning\n"
    );
}

/// `reopen-task` runs a second attempt for a `reopen-task` hook; `write-manifests` at
/// on-stage writes the manifest; `artifact` at on-inference is reported; an arm the
/// hook's policy does not allow (`reopen-task` under `none`) is a recorded fault.
#[test]
fn upstream_reopen_manifests_and_artifact_are_committed_per_policy() {
    let yaml = Yaml::scripted()
        .hook(up_hook("again").bind("on-task-end").policy("reopen-task"))
        .hook(up_hook("loose").bind("on-task-end"))
        .hook(up_hook("stage").bind("on-stage").policy("write-manifests"));
    let cap = Cap::new(
        "up-reopen",
        &yaml,
        "turns:\n  - text: first\n  - text: second\n",
    );
    cap.answers("again", json!({"task-end": [{"reopen": "Say more."}]}));
    cap.answers(
        "loose",
        json!({"task-end": [{"reopen": "not mine to ask"}]}),
    );
    cap.answers(
        "stage",
        json!({"stage": [{"manifests": [{"binary_name": "echo", "content": "name: echo\n"}]}]}),
    );
    let done = cap.run_task("go");
    done.assert_ok();
    assert_eq!(done.result(), "second");
    let reopened = done.one("task_reopened");
    assert_eq!(
        pick(&reopened, &["hook_name", "reopen_number"]),
        json!({"hook_name": "again", "reopen_number": 1})
    );
    assert_eq!(reopened["reason"].as_str().unwrap().trim(), "Say more.");
    assert!(done.task_md().contains("Say more."), "{}", done.task_md());
    let faults: Vec<Value> = done
        .lines("hook_dispatch_error")
        .iter()
        .map(|f| pick(f, &["hook_name", "event", "arm"]))
        .collect();
    assert_eq!(
        faults,
        [json!({"hook_name": "loose", "event": "on-task-end", "arm": "reopen-task"})]
    );
    assert_eq!(
        std::fs::read_to_string(done.session.workdir.join("tools/echo/murmur.yaml")).unwrap(),
        "name: echo\n"
    );
    assert!(
        done.bootstrap()
            .contains("hook 'stage' wrote tools/echo/murmur.yaml\n")
    );
}

/// `artifact` at on-inference needs no policy: one `artifact` frame before `completed`.
#[test]
fn an_upstream_artifact_is_one_frame_before_completed() {
    let yaml = Yaml::scripted().hook(up_hook("rev").bind("on-inference"));
    let cap = Cap::new("up-artifact", &yaml, "turns:\n  - text: Hello\n");
    cap.answers(
        "rev",
        json!({"inference": [{"artifact": "{\"reviewed\":true}"}]}),
    );
    let live = cap.start(&[]);
    let frames = hooks::send(&live.address(), "m1", "greet").rest(WAIT);
    live.finish().assert_ok();
    use crate::common::sse_frames::{l, labels};
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "artifact"),
            l(1, "text:final"),
            l(2, "status:completed"),
        ]
    );
    assert_eq!(
        pick(
            &frames[1].data["artifact"],
            &["tool_name", "content", "is_error"]
        ),
        json!({"tool_name": "rev", "content": "{\"reviewed\":true}", "is_error": false})
    );
}

/// `seed-context`: the flat messages reach the model as text; a role outside
/// user/assistant/tool is the hook's error, logged, and nothing is seeded.
#[test]
fn an_upstream_seed_reaches_the_model_and_a_bad_role_is_the_hooks_error() {
    let memory = json!({"role": "assistant", "content": "Earlier: the answer was 42."});
    for (name, seed, seeded) in [
        ("up-seed", memory.clone(), true),
        (
            "up-seed-bad",
            json!({"role": "system", "content": "obey"}),
            false,
        ),
    ] {
        let mock = MockModel::with(vec![hooks::answer("done")]);
        let hook = Hook::new("seeder", MUR_HOOK_UPSTREAM_SCRIPT)
            .scope("seeder")
            .bind("on-task-start")
            .policy("seed-context");
        let yaml = Yaml::openai(&mock)
            .hook(hook)
            .section("context:\n  max_tokens: 10000\n");
        let cap = Cap::new(name, &yaml, "");
        cap.answers("seeder", json!({"task-start": [{"seed": [seed]}]}));
        let done = cap.start(&["--task", "What was the answer?"]).finish();
        done.assert_ok();
        let sent = mock.request(0).json();
        let carried = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| hooks::text_of(&m["content"]) == "Earlier: the answer was 42.");
        assert_eq!(carried, seeded, "{name}: {sent}");
        if seeded {
            assert_eq!(done.one("context_seed")["outcome"], "seeded");
        } else {
            assert!(done.lines("context_seed").is_empty(), "{name}");
            assert_eq!(
                done.log("hook-seeder.log"),
                "on-task-start: a message has role 'system'; a message's role is user, assistant or tool\n"
            );
        }
    }
}

/// `replace-context` at on-compaction: the conversation reaches the hook flat, and a
/// reply keeping the last message exactly as sent keeps the original, its tool call
/// included, so the next request has the summary, the pending call and its result.
#[test]
fn an_upstream_compaction_keeps_a_message_returned_as_sent() {
    let mock = MockModel::with(vec![
        hooks::calls("c1", "echo", r#"{"command":"one"}"#, (100, 10)),
        hooks::calls("c2", "echo", r#"{"command":"two"}"#, (600, 10)),
        hooks::answer("done"),
    ]);
    let hook = Hook::new("squash", MUR_HOOK_UPSTREAM_SCRIPT)
        .scope("squash")
        .bind("on-compaction")
        .policy("replace-context");
    let yaml = Yaml::openai(&mock)
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(hook);
    let cap = Cap::new("up-compact", &yaml, "");
    cap.answers("squash", json!({"compaction": [{"replace_keep_last": 1}]}));
    let done = cap.run_task("echo twice");
    done.assert_ok();
    assert_eq!(done.result(), "done");
    assert!(done.lines("compaction_declined").is_empty());
    assert_eq!(done.one("compaction")["tokens_before"], 610);

    let third = mock.request(2).json();
    let messages: Vec<&Value> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .collect();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{third}");
    assert_eq!(
        hooks::text_of(&messages[0]["content"]),
        "Summary of earlier conversation."
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "c2");
    assert_eq!(messages[2]["tool_call_id"], "c2");

    let seen = done.events("squash");
    assert_eq!(seen.len(), 1);
    let flat: Vec<Value> = seen[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["role"], m["content"]]))
        .collect();
    assert_eq!(flat[0], json!(["user", "echo twice"]));
    assert_eq!(
        flat[1],
        json!(["assistant", "[tool call c1] echo {\"command\":\"one\"}"])
    );
    assert!(
        flat[2][1]
            .as_str()
            .unwrap()
            .starts_with("[tool result c1] "),
        "{}",
        flat[2]
    );
    assert_eq!(
        flat[3],
        json!(["assistant", "[tool call c2] echo {\"command\":\"two\"}"])
    );
    assert_eq!(flat.len(), 4);
}

// ---------------------------------------------------------------------------------
// Drivers.

/// Upstream's driver for `provider`, pointed at `endpoint`, allowed `allow`; `extra_limits`
/// replaces the `capabilities.limits` lines (a 5 s deadline).
fn driver_capsule(
    name: &str,
    provider: &str,
    endpoint: &str,
    allow: &str,
    config: &str,
    extra_limits: &str,
) -> Capsule {
    let manifest = format!(
        r#"name: upstream-driver
version: "0.1.0"
artifacts:
  - name: driver-{provider}
    runtime: driver
    source: {driver}
  - name: jsonl-line-count
    runtime: tool
    description: Counts the lines of a JSONL file.
    source: {tool}
inference:
  driver:
    artifact: driver-{provider}
    config: {config}
  endpoint: {endpoint}
  model: test-model
  api_key: ${{MOCK_API_KEY}}
  max_tokens: 256
  system_prompt: You are terse.
capabilities:
  network:
    allow: [{allow}]
  limits:
{limits}"#,
        limits = if extra_limits.is_empty() {
            "    deadline_seconds: 5\n"
        } else {
            extra_limits
        },
        driver = fixture(&format!("murmur-driver-{provider}.wasm")).display(),
        tool = fixture("jsonl-line-count.wasm").display(),
    );
    Capsule::new(name, &manifest, "")
}

/// Upstream's host tells its drivers who runs them: `MURMUR_CAPSULE_{NAME,VERSION}` and
/// `MURMUR_SESSION_ID` (reference/drivers.md). The hostile upstream component, run as a
/// driver, answers with what it was given.
#[test]
fn an_upstream_driver_is_told_the_capsule_and_the_session() {
    let manifest = format!(
        r#"name: told-driver
version: "2.3.4"
artifacts:
  - name: teller
    runtime: driver
    source: {driver}
inference:
  driver:
    artifact: teller
  endpoint: http://127.0.0.1:9/v1
  model: test-model
lifecycle:
  task_acceptance: none
"#,
        driver = guest(MUR_TOOL_UPSTREAM_HOSTILE).display(),
    );
    let capsule = Capsule::new("upstream-told", &manifest, "");
    let run = capsule.run(&["--task", "who am I?"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        s.read("out/result.txt"),
        format!(
            "MURMUR_CAPSULE_NAME=told-driver\nMURMUR_CAPSULE_VERSION=2.3.4\nMURMUR_SESSION_ID={}",
            s.id
        )
    );
}

/// Frames as `common::frames` reads them: id, event, data.
type Frames = Vec<(Option<u64>, String, Value)>;

/// A task over `message/stream` to a `single` capsule: the frames and the session.
fn stream_task(capsule: &Capsule, text: &str) -> (Frames, Run, Session) {
    let running = capsule.spawn_env(&[], ENV);
    let session = running.session();
    let raw = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body(text),
    ));
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    let run = running.wait(WAIT);
    (frames(&body), run, session)
}

/// One of upstream's drivers and its provider's payloads, as the mock serves them.
struct Provider {
    name: &'static str,
    endpoint: fn(&MockModel) -> String,
    path: &'static str,
    /// A JSON answer asking for `jsonl-line-count` on `missing.jsonl`, usage (20, 5).
    json_call: fn() -> Value,
    /// A JSON answer with `text`, usage (30, 6).
    json_text: fn(&str) -> Value,
    /// A stream of "Counting." then the same call.
    sse_call: fn() -> Vec<Vec<u8>>,
    /// A stream of `pieces`.
    sse_text: fn(&[&str]) -> Vec<Vec<u8>>,
    /// The tool result in the second request, as the provider's own message.
    tool_result: fn(&Value) -> Value,
    /// The `authorization` and `x-api-key` headers the provider receives.
    key: (Option<&'static str>, Option<&'static str>),
}

const CALL_INPUT: &str = r#"{"data":"missing.jsonl"}"#;
/// The seed's failed `jsonl-line-count` call, as the model receives it.
const FAILED_CALL: &str = "<untrusted-content source=tool:jsonl-line-count>\nfailed to read '{\"data\":\"missing.jsonl\"}': No such file or directory (os error 44)\n</untrusted-content>";

const OPENAI: Provider = Provider {
    name: "openai",
    endpoint: |mock| format!("{}/v1", mock.origin()),
    path: "/v1/chat/completions",
    json_call: || {
        openai::completion(
            None,
            &[openai::tool_call(
                "toolu_02",
                "jsonl-line-count",
                CALL_INPUT,
            )],
            "tool_calls",
            (20, 5),
        )
    },
    json_text: |text| openai::completion(Some(text), &[], "stop", (30, 6)),
    sse_call: || {
        openai::Stream::new()
            .text("Counting.")
            .tool_call(0, "toolu_02", "jsonl-line-count")
            .tool_args(0, r#"{"data":"#)
            .tool_args(0, r#""missing.jsonl"}"#)
            .finish("tool_calls")
            .usage(20, 5)
            .done()
            .events()
    },
    sse_text: |pieces| {
        let mut s = openai::Stream::new();
        for p in pieces {
            s = s.text(p);
        }
        s.finish("stop").usage(30, 6).done().events()
    },
    tool_result: |body| {
        messages(body)
            .into_iter()
            .find(|m| m["role"] == "tool")
            .map(|m| json!({"id": m["tool_call_id"], "content": m["content"]}))
            .unwrap_or(Value::Null)
    },
    key: (Some("Bearer sk-test-SECRET-upstream"), None),
};

const ANTHROPIC: Provider = Provider {
    name: "anthropic",
    endpoint: |mock| mock.origin(),
    path: "/v1/messages",
    json_call: || {
        anthropic::message(
            vec![
                json!({"type": "tool_use", "id": "toolu_02", "name": "jsonl-line-count", "input": {"data": "missing.jsonl"}}),
            ],
            "tool_use",
            (20, 5),
        )
    },
    json_text: |text| anthropic::message(vec![anthropic::text(text)], "end_turn", (30, 6)),
    sse_call: || {
        anthropic::Stream::new(20)
            .text_block(&["Counting."])
            .tool_use_block(
                "toolu_02",
                "jsonl-line-count",
                &[r#"{"data":"#, r#""missing.jsonl"}"#],
            )
            .message_delta("tool_use", 5)
            .stop()
            .events()
    },
    sse_text: |pieces| {
        anthropic::Stream::new(30)
            .text_block(pieces)
            .message_delta("end_turn", 6)
            .stop()
            .events()
    },
    tool_result: |body| {
        messages(body)
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_result")
            .map(|b| {
                let content = match &b["content"] {
                    Value::Array(parts) => parts[0]["text"].clone(),
                    other => other.clone(),
                };
                json!({"id": b["tool_use_id"], "content": content})
            })
            .unwrap_or(Value::Null)
    },
    key: (None, Some(KEY)),
};

fn provider_capsule(p: &Provider, mock: &MockModel, name: &str, extra_limits: &str) -> Capsule {
    driver_capsule(
        &format!("up-{}-{name}", p.name),
        p.name,
        &(p.endpoint)(mock),
        &mock.origin(),
        "{}",
        extra_limits,
    )
}

/// What the provider was sent on the second turn: the call's result, as the seed's.
fn assert_second_request_carries_the_result(p: &Provider, mock: &MockModel) {
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        assert_eq!(r.path, p.path);
        // Upstream's drivers send no key; the host adds it, as the provider reads it.
        assert_eq!(
            (r.header("authorization"), r.header("x-api-key")),
            p.key,
            "{}",
            p.name
        );
    }
    let first = sent[0].json();
    assert_eq!(first["model"], "test-model");
    assert!(first.to_string().contains("You are terse."), "{first}");
    // Upstream's tool cannot describe itself: its entry's description, the default schema.
    let tools = first["tools"].to_string();
    assert!(
        tools.contains(r#""description":"Counts the lines of a JSONL file.""#),
        "{tools}"
    );
    assert!(
        tools.contains(r#"{"properties":{},"type":"object"}"#),
        "{tools}"
    );
    assert_eq!(
        (p.tool_result)(&sent[1].json()),
        json!({"id": "toolu_02", "content": FAILED_CALL})
    );
}

/// The trace of a two-turn task: the call, failed, then the answer; each turn with the
/// usage the provider reported.
fn assert_trace(s: &Session) {
    let calls = s.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_call_id"], "toolu_02", "{}", calls[0]);
    assert_eq!(calls[0]["status"], "error");
    let turns = s.events("inference");
    let seen: Vec<(Value, Value, Value)> = turns
        .iter()
        .map(|t| {
            (
                t["stop_reason"].clone(),
                t["input_tokens_actual"].clone(),
                t["output_tokens_actual"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (json!("tool_call"), json!(20), json!(5)),
            (json!("end_turn"), json!(30), json!(6)),
        ]
    );
}

/// The artifact frame of the failed call: the seed's line, but for the duration.
fn assert_artifact(frame: &Value) {
    let mut artifact = frame["artifact"].clone();
    assert!(artifact["duration_ms"].is_u64());
    artifact["duration_ms"] = json!(5);
    assert_eq!(
        artifact,
        json!({"tool_name":"jsonl-line-count","content":FAILED_CALL,"fence_source":"tool:jsonl-line-count","tool_call_id":"toolu_02","is_error":true,"duration_ms":5,"exit_code":null,"truncated":false})
    );
}

/// Plain JSON answers: a tool call, then the answer in one final `text` frame.
fn answers_a_tool_call_then_the_text(p: &Provider) {
    let mock = MockModel::with(vec![
        Reply::json(200, (p.json_call)()),
        Reply::json(200, (p.json_text)("There is no such file.")),
    ]);
    let capsule = provider_capsule(p, &mock, "json", "");
    let (frames, run, session) = stream_task(&capsule, "Count the lines of missing.jsonl");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "artifact"),
            l(2, "status:working"),
            l(3, "text:final"),
            l(3, "status:completed"),
        ]
    );
    assert_artifact(&frames[1].2);
    assert_eq!(frames[3].2["text"], "There is no such file.");
    assert_eq!(frames[4].2["status"]["response"], "There is no such file.");
    assert_second_request_carries_the_result(p, &mock);
    assert_trace(&session);
}

/// Streamed answers: each piece a `text` frame, the turn's chunks closed by
/// `text ""` `final:true`, as our own drivers' streams are.
fn streams_text_and_a_tool_call(p: &Provider) {
    let mock = MockModel::with(vec![
        Reply::sse((p.sse_call)()),
        Reply::sse((p.sse_text)(&["There is ", "no such file."])),
    ]);
    let capsule = provider_capsule(p, &mock, "sse", "");
    let (frames, run, session) = stream_task(&capsule, "Count the lines of missing.jsonl");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "text"),
            l(2, "text:final"),
            l(3, "artifact"),
            l(4, "status:working"),
            l(5, "text"),
            l(6, "text"),
            l(7, "text:final"),
            l(8, "status:completed"),
        ]
    );
    let texts: Vec<&Value> = [1, 2, 5, 6, 7]
        .iter()
        .map(|&i| &frames[i].2["text"])
        .collect();
    assert_eq!(texts, ["Counting.", "", "There is ", "no such file.", ""]);
    assert_artifact(&frames[3].2);
    assert_eq!(frames[8].2["status"]["response"], "There is no such file.");
    assert_second_request_carries_the_result(p, &mock);
    assert_trace(&session);
}

mod openai_driver {
    use super::*;

    #[test]
    fn answers_a_tool_call_then_the_text() {
        super::answers_a_tool_call_then_the_text(&OPENAI);
    }

    #[test]
    fn streams_text_and_a_tool_call() {
        super::streams_text_and_a_tool_call(&OPENAI);
    }
}

mod anthropic_driver {
    use super::*;

    #[test]
    fn answers_a_tool_call_then_the_text() {
        super::answers_a_tool_call_then_the_text(&ANTHROPIC);
    }

    #[test]
    fn streams_text_and_a_tool_call() {
        super::streams_text_and_a_tool_call(&ANTHROPIC);
    }
}

// ---------------------------------------------------------------------------------
// request-input.

mod request_input {
    use std::time::Instant;

    use super::*;
    use crate::common::sse_frames::{Sse, labels};

    /// The prompt the tool asks: upstream's tool asks with its whole `tool-input.data`,
    /// which is the model's input JSON.
    const PROMPT: &str = r#"{"prompt":"Which file?"}"#;

    /// The input-wait counter's start, for every `request-input` call.
    const WAIT_START: u64 = 9_223_372_036_854_775_807;

    fn capsule(name: &str, lifecycle: &str) -> Capsule {
        let manifest = format!(
            r#"name: upstream-ask
version: "0.1.0"
artifacts:
  - name: ask
    runtime: tool
    source: {ask}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
{lifecycle}"#,
            ask = fixture("request-input-tool.wasm").display(),
        );
        let script = "turns:\n  - tool_calls: [{id: a1, name: ask, input: {prompt: \"Which file?\"}}]\n  - text: \"{{last_tool_result}}\"\n";
        Capsule::new(name, &manifest, script)
    }

    fn send(address: &str, text: &str, context_id: &str) -> Sse {
        let opened = Instant::now();
        let socket = post(
            address,
            &[("content-type", "application/json")],
            &message_stream_body_in(text, context_id),
        );
        Sse::open(socket, opened, WAIT)
    }

    /// The exact bytes of a wait's status frame: no `context_id` key.
    fn wait_block(id: u64, task: &str, state: &str, message: &str, fin: bool) -> String {
        let data =
            json!({"id": task, "status": {"state": state, "message": message}, "final": fin});
        format!("id: {id}\nevent: status\ndata: {data}")
    }

    #[test]
    fn an_answered_wait_resumes_the_tool_with_the_reply() {
        let running = capsule("up-ask", "").spawn(QUEUE);
        let address = running.address.clone();
        let mut asker = send(&address, "summarise a file", "ctx_human");
        let before = asker.until(WAIT, |f| f.state() == "input-required");
        let prompt = before.last().unwrap().clone();
        let task = prompt.data["id"].as_str().unwrap().to_string();
        assert_eq!(
            prompt.block,
            wait_block(WAIT_START, &task, "input-required", PROMPT, false)
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
                (Some(3), "text:final".to_string()),
                (Some(3), "status:completed".to_string()),
            ]
        );
        let artifact = &after[1].data["artifact"];
        assert_eq!(artifact["is_error"], false);
        assert_eq!(artifact["content"], fenced("ask", "README.md"));
        let session = running.session();
        assert_eq!(session.events("input_requested").len(), 1);
        assert_eq!(
            session.events("input_received")[0]["reply_bytes"],
            "README.md".len()
        );
    }

    /// Upstream's `request-input` traps on a timeout: the frames are the seed's, and the
    /// tool call fails with the reason while the task goes on.
    #[test]
    fn a_wait_that_times_out_fails_the_call_and_the_task_goes_on() {
        let running =
            capsule("up-ask-timeout", "lifecycle:\n  input_timeout_secs: 1\n").spawn(QUEUE);
        let address = running.address.clone();
        let mut asker = send(&address, "ask and wait", "ctx_alone");
        let frames = asker.rest(WAIT);
        let timed_out = frames.last().unwrap();
        let task = timed_out.data["id"].as_str().unwrap().to_string();
        assert_eq!(
            timed_out.block,
            wait_block(WAIT_START + 1, &task, "failed", "input-timeout", true)
        );
        assert_eq!(
            frames[frames.len() - 2].block,
            wait_block(WAIT_START, &task, "input-required", PROMPT, false)
        );
        let session = running.session();
        eventually(WAIT, "the call is traced", || {
            !session.events("tool_call").is_empty()
        });
        let call = &session.events("tool_call")[0];
        assert_eq!(call["status"], "error");
        assert_eq!(
            call["error"],
            "tool 'ask' failed: error[E-RUN-051]: request-input timed out: no reply within 1 s"
        );
        assert_eq!(session.events("input_timeout").len(), 1);
    }
}

// ---------------------------------------------------------------------------------
// The same limits as ours.

/// A launch task run to its end: the session and the run.
fn launch(capsule: &Capsule) -> (Session, Run) {
    let running = capsule.spawn_env(&["--task", "Count the lines of missing.jsonl"], ENV);
    let session = running.session();
    (session, running.wait(WAIT))
}

/// The allow-list holds for upstream's drivers as for ours: a model server not in it is
/// never contacted, and the task fails naming it.
#[test]
fn upstream_drivers_reach_no_server_outside_the_allow_list() {
    let other = MockModel::start();
    for p in [&OPENAI, &ANTHROPIC] {
        let mock = MockModel::with(vec![Reply::json(200, (p.json_text)("never"))]);
        let capsule = driver_capsule(
            &format!("up-denied-{}", p.name),
            p.name,
            &(p.endpoint)(&mock),
            &other.origin(),
            "{}",
            "",
        );
        let (session, run) = launch(&capsule);
        assert_eq!(run.status, 1, "{}: {}", p.name, run.stderr);
        assert!(
            mock.requests().is_empty(),
            "{}: the mock was contacted",
            p.name
        );
        let denied = session.events("http_denied");
        assert!(!denied.is_empty(), "{}: no http_denied line", p.name);
        assert_eq!(denied[0]["origin"], mock.origin(), "{}", denied[0]);
        let result = session.read("out/result.txt");
        assert!(result.starts_with("error: "), "{}: {result}", p.name);
    }
    assert!(other.requests().is_empty());
}

/// An upstream driver that does not return within the deadline is stopped there.
#[test]
fn an_upstream_driver_past_its_deadline_is_stopped() {
    let mock = MockModel::with(vec![
        Reply::sse((OPENAI.sse_text)(&["late ", "and later"])).with_delay(Duration::from_secs(5)),
    ]);
    let capsule = provider_capsule(&OPENAI, &mock, "deadline", "    deadline_seconds: 1\n");
    let started = std::time::Instant::now();
    let (session, run) = launch(&capsule);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_eq!(
        session.read("out/result.txt"),
        "error: driver invocation failed: deadline exceeded: the component ran for more \
         than 1 s without returning"
    );
    assert_eq!(
        session.events("inference")[0]["error_code"],
        "driver_failed"
    );
}

/// An upstream driver's reply is measured against `max_driver_reply_bytes` before the
/// host parses it.
#[test]
fn an_upstream_drivers_big_reply_fails_naming_the_limit() {
    let big = "x".repeat(8000);
    let mock = MockModel::with(vec![Reply::json(200, (ANTHROPIC.json_text)(&big))]);
    let capsule = provider_capsule(
        &ANTHROPIC,
        &mock,
        "big",
        "    deadline_seconds: 5\n    max_driver_reply_bytes: 4096\n",
    );
    let (session, run) = launch(&capsule);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let result = session.read("out/result.txt");
    assert!(
        result.starts_with("error: driver invocation failed: driver reply of ")
            && result.ends_with(" bytes is over capabilities.limits.max_driver_reply_bytes (4096)"),
        "{result}"
    );
}

/// An upstream tool's result is held to `max_tool_result_bytes`; the model is told the
/// limit instead.
#[test]
fn an_upstream_tools_big_result_is_refused_naming_the_limit() {
    let manifest = std::fs::read_to_string(line_count_capsule("jsonl-big-probe", "").manifest())
        .unwrap()
        .replace(
            "lifecycle:",
            "capabilities:\n  limits:\n    max_tool_result_bytes: 16\nlifecycle:",
        );
    let capsule = Capsule::new(
        "jsonl-big",
        &manifest,
        &call_once(&json!({"data": "missing.jsonl"})),
    );
    let run = capsule.run(&["--task", "count"]);
    run.assert_ok();
    let call = &run.session().events("tool_call")[0];
    assert_eq!(call["status"], "error");
    let error = call["error"].as_str().unwrap();
    assert!(
        error.starts_with("tool 'jsonl-line-count' failed: tool result of ")
            && error.ends_with(" bytes is over capabilities.limits.max_tool_result_bytes (16)"),
        "{error}"
    );
}

/// A hostile tool of upstream's shape (`components/tool-upstream-hostile`) is contained
/// as ours are: no file outside the workdir, by path or by `data-path` or by a link; its
/// `data-path` read no further than `max_tool_result_bytes`; a spin stopped at the
/// deadline and a balloon at the memory cap. Each failure reaches the model, and the task
/// goes on.
#[test]
pub(crate) fn a_hostile_upstream_tool_is_contained_as_ours_are() {
    let calls = [
        json!({"act": "read", "path": "/etc/passwd"}),
        json!({"act": "read", "path": "../../../../etc/passwd"}),
        json!({"act": "result-at", "path": "/etc/passwd"}),
        json!({"act": "result-at", "path": "../../../../etc/passwd"}),
        json!({"act": "plant", "at": "leak", "to": "../../../../../../etc/passwd"}),
        json!({"act": "big", "path": "big.txt", "n": 100000}),
        json!({"act": "big", "path": "small.txt", "n": 10}),
        json!({"act": "spin"}),
        json!({"act": "balloon"}),
    ];
    let mut script = String::from("turns:\n");
    for (i, input) in calls.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls: [{{id: h{i}, name: hostile, input: {input}}}]\n"
        ));
    }
    script.push_str("  - text: survived\n");
    let manifest = format!(
        r#"name: upstream-hostile
version: "0.1.0"
artifacts:
  - name: hostile
    runtime: tool
    source: {hostile}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
capabilities:
  limits:
    memory_bytes: 67108864
    deadline_seconds: 1
    max_tool_result_bytes: 4096
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        hostile = guest(MUR_TOOL_UPSTREAM_HOSTILE).display(),
    );
    let capsule = Capsule::new("upstream-hostile", &manifest, &script);
    let run = capsule.run(&["--task", "attack"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "survived");
    let traced = s.events("tool_call");
    let seen: Vec<(&str, &str)> = traced
        .iter()
        .map(|c| (c["status"].as_str().unwrap(), c["output"].as_str().unwrap()))
        .collect();
    let failed = |why: &str| format!("tool 'hostile' failed: {why}");
    assert_eq!(
        seen,
        [
            (
                "ok",
                fenced("hostile", "err: No such file or directory (os error 44)").as_str()
            ),
            (
                "ok",
                fenced("hostile", "err: Operation not permitted (os error 63)").as_str()
            ),
            (
                "error",
                &failed(
                    "data-path '/etc/passwd' could not be read: No such file or directory (os error 2)"
                ),
            ),
            (
                "error",
                &failed(
                    "data-path '../../../../etc/passwd' could not be read: a path led outside of the filesystem"
                ),
            ),
            (
                "error",
                &failed("data-path 'leak' could not be read: a path led outside of the filesystem"),
            ),
            (
                "error",
                &failed(
                    "data-path 'big.txt': tool result of more than 4096 bytes is over capabilities.limits.max_tool_result_bytes (4096)"
                ),
            ),
            ("ok", fenced("hostile", "xxxxxxxxxx").as_str()),
            (
                "error",
                &failed("deadline exceeded: the component ran for more than 1 s without returning"),
            ),
            // The cap refuses the memory; the guest's allocator aborts.
            (
                "error",
                &failed("wasm trap: wasm `unreachable` instruction executed")
            ),
        ]
    );
    let balloon = &traced[8];
    assert!(balloon["duration_ms"].as_u64().unwrap() < 1000, "{balloon}");
}

/// Upstream's tool-progress fixture driver (no provider): it streams a thought and text,
/// announces a call with `tool-call-started` and `tool-call-input-bytes`, which the host
/// accepts and ignores, then asks upstream's echo tool, and answers.
#[test]
fn upstream_progress_events_are_accepted_and_chunks_become_frames() {
    let manifest = format!(
        r#"name: upstream-progress
version: "0.1.0"
artifacts:
  - name: progress
    runtime: driver
    source: {driver}
  - name: echo-tool
    runtime: tool
    source: {echo}
inference:
  driver:
    artifact: progress
  endpoint: http://127.0.0.1:1
  model: tool-progress-streaming
capabilities:
  network:
    allow: [http://127.0.0.1:1]
"#,
        driver = fixture("tool-progress-driver.wasm").display(),
        echo = fixture("echo-tool.wasm").display(),
    );
    let capsule = Capsule::new("upstream-progress", &manifest, "");
    let (frames, run, session) = stream_task(&capsule, "Show your progress");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "", "nothing to warn about");
    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "thinking"),
            l(2, "text"),
            l(3, "text:final"),
            l(4, "artifact"),
            l(5, "status:working"),
            l(6, "text:final"),
            l(6, "status:completed"),
        ]
    );
    let texts: Vec<&Value> = [1, 2, 3, 6].iter().map(|&i| &frames[i].2["text"]).collect();
    assert_eq!(texts, ["planning", "Writing it. ", "", "PROGRESS-ANSWER"]);
    // Upstream's echo tool answers its `tool-input.data`: the model's input, whole.
    assert_eq!(
        frames[4].2["artifact"]["content"],
        fenced("echo-tool", r#"{"msg":"progress-marker-7f3a"}"#)
    );
    let calls = session.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["status"], "ok");
    assert_eq!(frames[7].2["status"]["response"], "PROGRESS-ANSWER");
}
